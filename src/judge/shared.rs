//! The robots store's side of fleet mode: one robots.txt fetch per origin
//! for the whole fleet ([`crate::fleet::robots`]).
//!
//! A node that misses locally looks in Redis. A fresh shared entry is
//! compiled for this node's agents and judged by; nothing is fetched.
//! Without one, the node that takes the lease fetches, with the expired
//! shared entry as its stale-on-error copy, and stores the result for the
//! others, who wait for it. The shared form is the entry as the archive
//! keeps it on disk ([`KeptEntry`]) with the node that fetched, the
//! fetch's evidence and the text; a node that judges by a text another
//! fetched keeps that text in its own archive, so its audit lines never
//! name a text it cannot produce.
//!
//! What only this node's configuration decided is not shared: a
//! destination the policy refuses, a TLS failure (trust anchors), the
//! proxy's own shortage.
//!
//! Redis unavailable (or a wait past the lease): with
//! `on_unavailable = "local"` the node goes on as without a fleet; with
//! `"refuse"` it judges by its own stale copy if it has one within
//! `robots.stale_max`, and otherwise answers 503 (the proxy's own
//! shortage), as it cannot share the origin's state.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::fleet::robots::{Look, POLL_EVERY, SharedRobots, Text};
use crate::fleet::{Fleet, OnUnavailable};
use crate::http::origin::Origin;
use crate::judge::archive::{Digest, Evidence, KeptEntry};
use crate::judge::fetch::{Concluded, Fetched};
use crate::judge::store::{Entry, RobotsCache, State, from_kept, kept_from};
use crate::robots::parse::MAX_BYTES;

/// An entry as the fleet shares it (the `meta` of the shared hash).
#[derive(Debug, Serialize, Deserialize)]
struct SharedMeta {
    #[serde(flatten)]
    kept: KeptEntry,
    /// The node that fetched.
    node: String,
    /// Where the text came from (with a text).
    #[serde(default)]
    evidence: Option<Evidence>,
}

/// How much longer than the fetch's own timeout a waiting node waits for
/// another's fetch: the lease's margin and one poll.
const WAIT_MARGIN: Duration = Duration::from_secs(3);

impl RobotsCache {
    /// `origin`'s entry in a fleet: shared by another node, or fetched
    /// by this one for all.
    pub(super) async fn obtain_shared(
        self: &Arc<Self>,
        fleet: &Arc<Fleet>,
        origin: &Origin,
        previous: Option<Arc<Entry>>,
        purges: u64,
    ) -> Arc<Entry> {
        let key = origin.to_string();
        let timeout = self.fetch_settings().timeout;
        let look = match fleet.look_robots(&key, true, timeout, MAX_BYTES + 1).await {
            Ok(Look::Busy) => {
                tracing::debug!(origin = %key, "waiting for another node's robots.txt fetch");
                fleet.stats().robots_waited.fetch_add(1, Ordering::Relaxed);
                let deadline = Instant::now() + timeout + WAIT_MARGIN + POLL_EVERY;
                fleet
                    .wait_robots(&key, timeout, MAX_BYTES + 1, deadline)
                    .await
            }
            other => other,
        };
        match look {
            Ok(Look::Fresh(shared)) => match self.adopt(&key, shared, purges).await {
                Some(entry) => entry,
                // Unreadable (another version, a corrupted text): fetched
                // here, and stored over it.
                None => self.lead(fleet, origin, previous, purges).await,
            },
            Ok(Look::Lead(shared)) => {
                let previous = match shared {
                    Some(s) => self.adopt(&key, s, purges).await.or(previous),
                    None => previous,
                };
                self.lead(fleet, origin, previous, purges).await
            }
            Ok(Look::Busy) | Err(_) => match fleet.on_unavailable() {
                OnUnavailable::Local => self.obtain(origin, previous, purges).await,
                OnUnavailable::Refuse => Arc::new(self.entry_from(
                    previous.as_deref(),
                    Fetched {
                        outcome: Concluded::LocalError(
                            "the fleet's Redis is unavailable and fleet.on_unavailable = \"refuse\": robots.txt not fetched".into(),
                        ),
                        status: None,
                        max_age: None,
                        retry_after: None,
                    },
                    &[],
                )),
            },
        }
    }

    /// Fetches `origin`'s robots.txt for the fleet (this node holds the
    /// lease) and stores the result in Redis for the others.
    async fn lead(
        self: &Arc<Self>,
        fleet: &Arc<Fleet>,
        origin: &Origin,
        previous: Option<Arc<Entry>>,
        purges: u64,
    ) -> Arc<Entry> {
        let key = origin.to_string();
        fleet.stats().robots_fetched.fetch_add(1, Ordering::Relaxed);
        let (mut entry, text) = self
            .fetch_entry(origin, previous, self.agents(), Some(purges))
            .await;
        entry.fetched_by = Some(fleet.node().into());
        let kept = kept_from(&key, &entry);
        let stored = match kept {
            // The proxy's own shortage says nothing about the origin, and a
            // fetch a purge overtook may have read the file purged: the
            // next node fetches.
            None => fleet.release_robots(&key).await,
            Some(_) if self.purged_since(purges) => fleet.release_robots(&key).await,
            // This node's own destination policy and trust anchors
            // decided these: another node may be configured otherwise.
            Some(_) if matches!(entry.state, State::Refused { .. } | State::BadTls { .. }) => {
                fleet.release_robots(&key).await
            }
            Some(kept) => {
                let (text, evidence) = match (&entry.state, &text) {
                    (State::Fresh(_), Some((t, evidence))) => {
                        (Text::Set(t), Some(evidence.clone()))
                    }
                    (State::Stale { .. }, _) => (Text::Keep, None),
                    _ => (Text::Drop, None),
                };
                let meta = SharedMeta {
                    kept,
                    node: fleet.node().to_string(),
                    evidence,
                };
                match serde_json::to_vec(&meta) {
                    Ok(meta) => {
                        let fresh = entry.expires.saturating_duration_since(Instant::now());
                        fleet
                            .store_robots(&key, &meta, text, fresh, self.settings.stale_max)
                            .await
                    }
                    Err(_) => fleet.release_robots(&key).await,
                }
            }
        };
        if stored.is_err() {
            tracing::debug!(origin = %key, "robots.txt fetched but not shared: Redis unavailable");
        }
        Arc::new(entry)
    }

    /// A shared entry compiled for this node's agents, its text kept in
    /// the archive; `None` if it cannot be read back whole.
    async fn adopt(
        self: &Arc<Self>,
        origin: &str,
        shared: SharedRobots,
        purges: u64,
    ) -> Option<Arc<Entry>> {
        let meta: SharedMeta = serde_json::from_slice(&shared.meta).ok()?;
        if meta.kept.origin != origin || matches!(meta.kept.state.as_str(), "refused" | "bad_tls") {
            return None;
        }
        let digest = match (&meta.kept.sha256, &shared.text) {
            (Some(sha), Some(text)) => {
                let digest = Digest::parse(sha)?;
                (Digest::of(text) == digest).then_some(Some(digest))?
            }
            (Some(_), None) => return None,
            (None, _) => None,
        };
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut entry = from_kept(
                &meta.kept,
                shared.text.as_deref(),
                &this.agents(),
                &this.settings,
                Some(shared.left),
            )?;
            if let Some(archive) = &this.archive
                && let (Some(text), Some(digest)) = (&shared.text, digest)
            {
                let evidence = meta.evidence.clone().unwrap_or_default();
                archive.keep_text(
                    &meta.kept.origin,
                    meta.kept.status,
                    &evidence,
                    text,
                    digest,
                    SystemTime::now(),
                );
            }
            this.keep_entry(&meta.kept, purges);
            entry.fetched_by = Some(meta.node.into());
            Some(Arc::new(entry))
        })
        .await
        .ok()
        .flatten()
    }
}
