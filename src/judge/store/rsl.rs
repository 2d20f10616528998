//! RSL 1.0 licence documents named by robots.txt `License:` lines or a
//! response's `Link: <…>; rel="license"`: fetched once per URL and kept
//! for their `Cache-Control: max-age`, else [`DEFAULT_TTL`] (30 days),
//! archived like robots.txt.
//!
//! | result | outcome |
//! |---|---|
//! | 2xx, an RSL document | its `<content>` elements |
//! | 2xx, not one (not XML, no `<rsl>`, no `<content>`) | unreadable: the AI purposes fail closed |
//! | 4xx | absent: no licence terms |
//! | 5xx, network error, timeout | unreachable: the AI purposes fail closed, asked again after [`super::tdm::RETRY_TTL`] |

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::RobotsCache;
use super::tdm::{Expiring, RETRY_TTL, get_capped};
use crate::judge::archive::{Digest, Evidence};
use crate::judge::signals::rsl::{MAX_BYTES, RslDoc};

/// How long a document is kept without `max-age`.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// What is known of one licence document.
#[derive(Debug)]
pub struct RslState {
    pub url: String,
    pub outcome: RslOutcome,
    pub digest: Option<Digest>,
    until: Instant,
}

impl Expiring for RslState {
    fn until(&self) -> Instant {
        self.until
    }
}

/// What a fetch of a licence document concluded.
#[derive(Debug)]
pub enum RslOutcome {
    Doc(RslDoc),
    /// 4xx: no terms.
    Absent(String),
    /// Not an RSL document, or not reachable: the AI purposes fail closed.
    Failed(String),
}

impl RobotsCache {
    /// The licence document at `url`, fetched if not known (or expired).
    pub(crate) async fn rsl(&self, url: &str) -> Arc<RslState> {
        let cell = self.rsl.cell(url);
        cell.get_or_init(|| self.fetch_rsl(url)).await.clone()
    }

    async fn fetch_rsl(&self, url: &str) -> Arc<RslState> {
        let settings = self.fetcher.settings();
        let fetched = tokio::time::timeout(
            settings.timeout,
            get_capped(
                self.fetcher.client(),
                url,
                &settings.user_agent,
                settings.max_redirects,
                MAX_BYTES,
            ),
        )
        .await
        .unwrap_or_else(|_| Err(format!("timed out fetching {url}")));
        let now = Instant::now();
        let (outcome, digest, until) = match fetched {
            Err(why) => (RslOutcome::Failed(why), None, now + RETRY_TTL),
            Ok(got) if got.status >= 500 || got.status == 429 => (
                RslOutcome::Failed(format!("{} from {}", got.status, got.final_url)),
                None,
                now + RETRY_TTL,
            ),
            Ok(got) if !(200..300).contains(&got.status) => (
                RslOutcome::Absent(format!("{} from {}", got.status, got.final_url)),
                None,
                now + got.max_age.unwrap_or(DEFAULT_TTL),
            ),
            Ok(got) => {
                let digest = Digest::of(&got.body);
                if let Some(archive) = self.kept.archive() {
                    let evidence = Evidence {
                        url: url.to_owned(),
                        final_url: got.final_url.clone(),
                        content_type: got.content_type.clone(),
                        etag: None,
                        last_modified: None,
                    };
                    archive.keep_text(
                        url,
                        Some(got.status),
                        &evidence,
                        &got.body,
                        digest,
                        SystemTime::now(),
                    );
                }
                let outcome = match RslDoc::parse(&got.body) {
                    Ok(doc) => RslOutcome::Doc(doc),
                    Err(why) => RslOutcome::Failed(format!("{url}: not an RSL document: {why}")),
                };
                (
                    outcome,
                    Some(digest),
                    now + got.max_age.unwrap_or(DEFAULT_TTL),
                )
            }
        };
        match &outcome {
            RslOutcome::Failed(why) => tracing::info!(%url, why,
                "RSL licence document unusable: AI purposes refused for the content it covers"),
            RslOutcome::Absent(why) => tracing::debug!(%url, why, "no RSL licence document"),
            RslOutcome::Doc(doc) => tracing::debug!(%url, contents = doc.contents.len(),
                "RSL licence document read"),
        }
        Arc::new(RslState {
            url: url.to_owned(),
            outcome,
            digest,
            until,
        })
    }
}
