//! `/.well-known/tdmrep.json`, fetched once per origin and kept like
//! robots.txt (W3C TDMRep §"Processing priority": "a TDM Agent must keep
//! in cache the content of the TDM file").
//!
//! Only a request that declares a purpose a TDM reservation speaks for
//! (`train-ai`, `ai-input`) asks for it; an origin that publishes none
//! costs one fetch, then one cached negative lookup per request.
//!
//! | result | outcome | kept for |
//! |---|---|---|
//! | 2xx, a JSON array | its rules | `Cache-Control: max-age`, else [`DEFAULT_TTL`] |
//! | 2xx, not a JSON array | no reservation (the spec: the origin "does not implement this protocol") | as above |
//! | 3xx | followed, up to `robots.max_redirects` hops | |
//! | 4xx (429 too) | no reservation | [`DEFAULT_TTL`] |
//! | 5xx, network error, timeout | no reservation known, said on the audit line and annotation (`tdmrep.json unreachable`); the response's `tdm-reservation` header and meta still apply | [`RETRY_TTL`] |
//!
//! Single flight: requests for an origin whose file is being fetched wait
//! for that fetch. Fleet: one fetch per origin for the whole fleet, shared
//! through Redis as robots.txt is ([`super::tdm_shared`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use http::header::{ACCEPT, ACCEPT_ENCODING, LOCATION, USER_AGENT};
use http::{Request, Uri};
use http_body_util::BodyExt;

use super::RobotsCache;
use crate::http::body::empty_body;
use crate::http::origin::Origin;
use crate::judge::archive::{Digest, Evidence};
use crate::judge::signals::tdmrep::{MAX_BYTES, TdmFile};

/// How long a file, or its absence, is kept without `max-age`.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);

/// How long an unreachable file is kept before it is asked for again.
pub const RETRY_TTL: Duration = Duration::from_secs(300);

/// Origins kept at most; past it the table starts again empty.
const MAX_ORIGINS: usize = 100_000;

/// What is known of an origin's tdmrep.json.
#[derive(Debug)]
pub struct TdmState {
    pub outcome: TdmOutcome,
    /// `https://host/.well-known/tdmrep.json`.
    pub url: String,
    /// The SHA-256 of the file, as archived, when one was read.
    pub digest: Option<Digest>,
    pub status: Option<u16>,
    pub(super) until: Instant,
}

/// What a fetch of tdmrep.json concluded.
#[derive(Debug)]
pub enum TdmOutcome {
    /// The file's rules.
    File(TdmFile),
    /// No reservation: not published (4xx), or not the protocol's file.
    Absent(String),
    /// 5xx or a network failure: nothing known.
    Unreachable(String),
}

impl TdmOutcome {
    /// `file`, `absent` or `unreachable`.
    pub fn name(&self) -> &'static str {
        match self {
            TdmOutcome::File(_) => "file",
            TdmOutcome::Absent(_) => "absent",
            TdmOutcome::Unreachable(_) => "unreachable",
        }
    }

    /// Why there is no file, if there is none.
    pub fn reason(&self) -> Option<&str> {
        match self {
            TdmOutcome::File(_) => None,
            TdmOutcome::Absent(r) | TdmOutcome::Unreachable(r) => Some(r),
        }
    }
}

/// A document kept until it expires.
pub(crate) trait Expiring {
    fn until(&self) -> Instant;
}

impl Expiring for TdmState {
    fn until(&self) -> Instant {
        self.until
    }
}

type Cell<T> = Arc<tokio::sync::OnceCell<Arc<T>>>;

/// Documents by key (an origin, a URL), each fetched once until it
/// expires; at most [`MAX_ORIGINS`] keys. A lookup of a known key
/// allocates nothing.
pub(crate) struct Docs<K, T> {
    cells: parking_lot::Mutex<HashMap<K, Cell<T>>>,
}

impl<K, T> Default for Docs<K, T> {
    fn default() -> Self {
        Docs {
            cells: parking_lot::Mutex::new(HashMap::new()),
        }
    }
}

impl<K: std::hash::Hash + Eq, T: Expiring> Docs<K, T> {
    /// The cell for `key`: the one in use, or a new one when there is none
    /// or it expired.
    pub(crate) fn cell<Q>(&self, key: &Q) -> Cell<T>
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut cells = self.cells.lock();
        match cells.get(key) {
            Some(c) if c.get().is_none_or(|s| s.until() > Instant::now()) => {
                return c.clone();
            }
            Some(_) => {
                cells.remove(key);
            }
            None => {}
        }
        if cells.len() >= MAX_ORIGINS {
            cells.clear();
        }
        let cell = Cell::<T>::default();
        cells.insert(key.to_owned(), cell.clone());
        cell
    }
}

impl<K: std::hash::Hash + Eq, T> Docs<K, T> {
    /// Drops the keys `pick` picks (a purge); fetches under way keep
    /// nothing. Returns how many were dropped.
    pub(crate) fn forget(&self, mut pick: impl FnMut(&K) -> bool) -> usize {
        let mut cells = self.cells.lock();
        let before = cells.len();
        cells.retain(|k, _| !pick(k));
        before - cells.len()
    }
}

/// The per-origin table.
pub(crate) type TdmFiles = Docs<Origin, TdmState>;

impl RobotsCache {
    /// The origin's tdmrep.json, fetched if not known (or expired).
    pub(crate) async fn tdmrep(&self, origin: &Origin) -> Arc<TdmState> {
        let cell = self.tdm.cell(origin);
        cell.get_or_init(|| async {
            match &self.fleet {
                Some(fleet) => self.tdmrep_shared(fleet, origin).await,
                None => self.fetch_tdmrep(origin).await,
            }
        })
        .await
        .clone()
    }

    /// Fetches the origin's tdmrep.json: its URL, and what came back.
    pub(super) async fn get_tdmrep(&self, origin: &Origin) -> (String, Result<Got, String>) {
        let settings = self.fetcher.settings();
        let url = origin.url("/.well-known/tdmrep.json");
        let fetched = tokio::time::timeout(
            settings.timeout,
            get_capped(
                self.fetcher.client(),
                &url,
                &settings.user_agent,
                settings.max_redirects,
                MAX_BYTES,
            ),
        )
        .await
        .unwrap_or_else(|_| Err(format!("timed out fetching {url}")));
        (url, fetched)
    }

    async fn fetch_tdmrep(&self, origin: &Origin) -> Arc<TdmState> {
        let (url, fetched) = self.get_tdmrep(origin).await;
        Arc::new(self.conclude_tdmrep(url, fetched, None))
    }

    /// What `fetched` (of `url`) says, kept for `left` when given (an
    /// entry another node of the fleet fetched), else as the table above
    /// says; a file read is archived.
    pub(super) fn conclude_tdmrep(
        &self,
        url: String,
        fetched: Result<Got, String>,
        left: Option<Duration>,
    ) -> TdmState {
        let now = Instant::now();
        let until = |ttl: Duration| now + left.unwrap_or(ttl);
        let state = match fetched {
            Err(reason) => TdmState {
                outcome: TdmOutcome::Unreachable(reason),
                url,
                digest: None,
                status: None,
                until: until(RETRY_TTL),
            },
            Ok(got) if got.status >= 500 => TdmState {
                outcome: TdmOutcome::Unreachable(format!("{} from {}", got.status, got.final_url)),
                url,
                digest: None,
                status: Some(got.status),
                until: until(RETRY_TTL),
            },
            Ok(got) if !(200..300).contains(&got.status) => TdmState {
                outcome: TdmOutcome::Absent(format!("{} from {}", got.status, got.final_url)),
                url,
                digest: None,
                status: Some(got.status),
                until: until(DEFAULT_TTL),
            },
            Ok(got) => {
                let digest = Digest::of(&got.body);
                if let Some(archive) = self.kept.archive() {
                    let evidence = Evidence {
                        url: url.clone(),
                        final_url: got.final_url.clone(),
                        content_type: got.content_type.clone(),
                        etag: None,
                        last_modified: None,
                    };
                    // Named by its URL: the origin's robots.txt keeps its own
                    // place in the archive's record of what each origin served.
                    archive.keep_text(
                        &url,
                        Some(got.status),
                        &evidence,
                        &got.body,
                        digest,
                        SystemTime::now(),
                    );
                }
                let outcome = match TdmFile::parse(&got.body) {
                    Ok(file) => TdmOutcome::File(file),
                    Err(why) => TdmOutcome::Absent(format!("{url}: {why}")),
                };
                TdmState {
                    outcome,
                    url,
                    digest: Some(digest),
                    status: Some(got.status),
                    until: until(got.max_age.unwrap_or(DEFAULT_TTL)),
                }
            }
        };
        match &state.outcome {
            TdmOutcome::File(file) => tracing::debug!(url = %state.url, rules = file.rules().len(),
                problems = ?file.problems(), "tdmrep.json read"),
            TdmOutcome::Absent(why) => tracing::debug!(url = %state.url, status = ?state.status,
                why, "no tdmrep.json: no reservation"),
            TdmOutcome::Unreachable(why) => {
                tracing::info!(url = %state.url, status = ?state.status,
                why, "tdmrep.json unreachable: no reservation known from it until it is asked again in 5 minutes; the responses' tdm-reservation headers and meta still apply")
            }
        }
        state
    }
}

/// A small document fetched whole (at most its limit + 1 octets).
pub(crate) struct Got {
    pub(crate) status: u16,
    pub(crate) final_url: String,
    pub(crate) content_type: Option<String>,
    pub(crate) max_age: Option<Duration>,
    pub(crate) body: Bytes,
}

/// GETs `url`, following redirects, reading at most `limit` + 1 octets
/// of the final body, uncompressed (`Accept-Encoding: identity`).
pub(crate) async fn get_capped(
    client: &crate::upstream::HttpClient,
    url: &str,
    user_agent: &str,
    max_redirects: u8,
    limit: usize,
) -> Result<Got, String> {
    let mut uri: Uri = url.parse().map_err(|e| format!("bad URL {url}: {e}"))?;
    let mut hops = 0u8;
    loop {
        let request = Request::get(uri.clone())
            .header(USER_AGENT, user_agent)
            .header(ACCEPT, "application/json, */*;q=0.5")
            .header(ACCEPT_ENCODING, "identity")
            .body(empty_body())
            .map_err(|e| format!("bad request: {e}"))?;
        let response = client.request(request).await.map_err(|e| {
            let e = crate::upstream::UpstreamError::new(e, uri.host().unwrap_or_default());
            format!("fetching {uri}: {}", e.reason())
        })?;
        let status = response.status();
        if status.is_redirection() && hops < max_redirects {
            let next = response
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|l| crate::http::origin::resolve_reference(&uri.to_string(), l.trim()));
            if let Some(next) = next {
                hops += 1;
                uri = next;
                continue;
            }
        }
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v: &http::HeaderValue| v.to_str().ok())
                .map(str::to_string)
        };
        let content_type = header(http::header::CONTENT_TYPE);
        let max_age = header(http::header::CACHE_CONTROL).and_then(|cc| {
            cc.split(',').find_map(|d| {
                let (k, v) = d.trim().split_once('=')?;
                k.eq_ignore_ascii_case("max-age")
                    .then(|| v.trim().parse().ok().map(Duration::from_secs))?
            })
        });
        let mut body = response.into_body();
        let mut buf = BytesMut::new();
        if status.is_success() {
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| format!("reading {uri}: {e}"))?;
                if let Ok(data) = frame.into_data() {
                    let room = limit + 1 - buf.len();
                    buf.extend_from_slice(&data[..data.len().min(room)]);
                    if buf.len() > limit {
                        break;
                    }
                }
            }
        }
        return Ok(Got {
            status: status.as_u16(),
            final_url: uri.to_string(),
            content_type,
            max_age,
            body: buf.freeze(),
        });
    }
}
