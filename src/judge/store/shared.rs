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
//! What only this node's configuration, resources or network decided is
//! not shared ([`Fetched::is_the_origins`]): a destination the policy
//! refuses, a TLS failure (trust anchors), the proxy's own shortage, a
//! failure with no answer from the origin. The node keeps its own entry
//! and gives the lease back: the next node fetches for itself.
//!
//! Redis unavailable (or a wait past the lease): with
//! `on_unavailable = "local"` the node goes on as without a fleet; with
//! `"refuse"` it judges by its own stale copy if it has one within
//! `robots.stale_max`, and otherwise answers 503 (the proxy's own
//! shortage), as it cannot share the origin's state.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::kept::{from_kept, kept_from};
use super::{Compiled, Entry, FetchedEntry, RobotsCache, State};
use crate::fleet::robots::{Lease, Look, POLL_EVERY, SharedRobots, Take, Text};
use crate::fleet::{Fleet, OnUnavailable};
use crate::http::origin::Origin;
use crate::judge::archive::{Digest, Evidence, KeptEntry};
use crate::judge::fetch::{Concluded, Fetched};
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

/// A fetch made under the lease, to share ([`RobotsCache::share`]).
struct Fetch {
    origin: String,
    entry: Arc<Entry>,
    /// The text fetched and where it came from (none when the entry is
    /// not to be shared).
    text: Option<(Bytes, Evidence)>,
    /// Whether the fetch's outcome is the origin's.
    shareable: bool,
    /// The purge count when the fetch started.
    purges: u64,
}

/// How much longer than the fetch's own timeout a waiting node waits for
/// another's fetch: the lease's margin and one poll.
pub(super) const WAIT_MARGIN: Duration = Duration::from_secs(3);

impl RobotsCache {
    /// `origin`'s entry in a fleet: shared by another node, or fetched
    /// by this one for all; and whether this node decided it alone, Redis
    /// being unavailable (see `RobotsCache::forget_alone`).
    pub(super) async fn obtain_shared(
        self: &Arc<Self>,
        fleet: &Arc<Fleet>,
        origin: &Origin,
        previous: Option<Arc<Entry>>,
        purges: u64,
    ) -> (Arc<Entry>, bool) {
        let key = origin.to_string();
        let timeout = self.fetch_settings().timeout;
        let max_text = MAX_BYTES + 1;
        let mut take = Take::IfNotFresh;
        // At most: a look, a wait, a look that takes the lease over an
        // entry this node could not read, a wait.
        for _ in 0..2 {
            let look = match fleet.look_robots(&key, take, timeout, max_text).await {
                Ok(Look::Busy) => {
                    tracing::debug!(origin = %key, "waiting for another node's robots.txt fetch");
                    fleet.stats().robots_waited.fetch_add(1, Ordering::Relaxed);
                    let deadline = Instant::now() + timeout + WAIT_MARGIN + POLL_EVERY;
                    fleet.wait_robots(&key, timeout, max_text, deadline).await
                }
                other => other,
            };
            match look {
                Ok(Look::Fresh(shared)) => match self.adopt(&key, shared, purges).await {
                    Some(entry) => return (entry, false),
                    // Unreadable (a corrupted text, a description this
                    // version cannot read): fetched again, under the
                    // lease.
                    None => take = Take::Always,
                },
                Ok(Look::Lead(shared, lease)) => {
                    let adopted = match shared {
                        Some(s) => self.adopt(&key, s, purges).await,
                        None => None,
                    };
                    // The text Redis holds, as adopting it checked.
                    let shared_digest = adopted
                        .as_ref()
                        .and_then(|e| e.state.rules())
                        .and_then(Compiled::digest);
                    let previous = adopted.or(previous);
                    let entry = self
                        .lead(fleet, origin, previous, purges, lease, shared_digest)
                        .await;
                    return (entry, false);
                }
                Ok(Look::Busy) | Err(_) => break,
            }
        }
        match fleet.on_unavailable() {
            OnUnavailable::Local => (self.obtain(origin, previous, purges).await, true),
            OnUnavailable::Refuse => (Arc::new(self.entry_from(
                previous.as_deref(),
                Fetched {
                    outcome: Concluded::LocalError(
                        "robots.txt could not be shared through the fleet's Redis (unavailable, or another node's fetch did not finish) and fleet.on_unavailable = \"refuse\": not fetched".into(),
                    ),
                    status: None,
                    max_age: None,
                    retry_after: None,
                },
                &[],
            )), false),
        }
    }

    /// Fetches `origin`'s robots.txt for the fleet (this node holds
    /// `lease`). The entry is this node's at once (the requests waiting
    /// for it wait for the fetch alone); it is stored in Redis for the
    /// others meanwhile ([`Self::share`]). `shared_digest`: the text the
    /// shared entry holds, if any.
    async fn lead(
        self: &Arc<Self>,
        fleet: &Arc<Fleet>,
        origin: &Origin,
        previous: Option<Arc<Entry>>,
        purges: u64,
        lease: Lease,
        shared_digest: Option<Digest>,
    ) -> Arc<Entry> {
        fleet.stats().robots_fetched.fetch_add(1, Ordering::Relaxed);
        let FetchedEntry {
            mut entry,
            text,
            shareable,
        } = self
            .fetch_entry(origin, previous, self.agents(), Some(purges))
            .await;
        entry.fetched_by = Some(fleet.node().into());
        let entry = Arc::new(entry);
        let fetched = Fetch {
            origin: origin.to_string(),
            entry: entry.clone(),
            text: text.filter(|_| shareable),
            shareable,
            purges,
        };
        tokio::spawn(
            self.clone()
                .share(fleet.clone(), fetched, lease, shared_digest),
        );
        entry
    }

    /// Stores a fetch's entry in Redis for the other nodes while this
    /// node's `lease` holds, or gives the lease back when the entry is not
    /// to be shared. Runs in a task of its own, after the entry was given
    /// to the requests waiting for it; each Redis call is bounded by the
    /// fleet's timeout. A purge that overtook the fetch took the lease
    /// away, so the store finds it gone and stores nothing, whenever it
    /// runs.
    async fn share(
        self: Arc<Self>,
        fleet: Arc<Fleet>,
        fetched: Fetch,
        lease: Lease,
        shared_digest: Option<Digest>,
    ) {
        let Fetch {
            origin: key,
            entry,
            text,
            shareable,
            purges,
        } = fetched;
        let meta = kept_from(&key, &entry)
            // Decided by the fetch's outcome, not by the entry's state (the
            // proxy's own shortage with a good copy makes a stale entry
            // too): what only this node's destination policy, trust
            // anchors, resources or network decided is not shared, another
            // node may be configured or placed otherwise.
            .filter(|_| shareable)
            // A fetch a purge overtook may have read the file purged.
            .filter(|_| !self.purged_since(purges))
            .and_then(|kept| {
                let (text, evidence) = match (&entry.state, text) {
                    (State::Fresh(_), Some((t, evidence))) => (Text::Set(t), Some(evidence)),
                    // Kept only when Redis holds that very text; else the
                    // others could not read the entry: not shared.
                    (State::Stale { rules, .. }, _) => {
                        let digest = rules.digest()?;
                        (shared_digest == Some(digest)).then_some((Text::Keep, None))?
                    }
                    _ => (Text::Drop, None),
                };
                let meta = SharedMeta {
                    kept,
                    node: fleet.node().to_string(),
                    evidence,
                };
                Some((serde_json::to_vec(&meta).ok()?, text))
            });
        let shared = match meta {
            // The next node fetches.
            None => fleet.release_robots(&key, &lease).await.map(|()| false),
            Some((meta, text)) => {
                let fresh = entry.expires.saturating_duration_since(Instant::now());
                // On this node's steady clock: Redis turns it into its own
                // time, whatever this node's wall clock says.
                let age = entry.fetched_instant.elapsed();
                fleet
                    .store_robots_fetched(
                        &key,
                        &lease,
                        &meta,
                        text,
                        fresh,
                        shared_keep(self.settings.stale_max, age, fresh),
                        age,
                    )
                    .await
            }
        };
        match shared {
            Ok(true) => {}
            Ok(false) => tracing::debug!(origin = %key, "robots.txt fetched, not shared"),
            Err(_) => {
                tracing::debug!(origin = %key, "robots.txt fetched but not shared: Redis unavailable")
            }
        }
    }

    /// A shared entry compiled for this node's agents, its text kept in
    /// the archive; `None` if it cannot be read back whole.
    async fn adopt(
        self: &Arc<Self>,
        origin: &str,
        shared: SharedRobots,
        purges: u64,
    ) -> Option<Arc<Entry>> {
        let mut meta: SharedMeta = serde_json::from_slice(&shared.meta).ok()?;
        // The fetching node wrote its own wall-clock times; Redis's age
        // and time left say the same on every node's clock.
        if let Some(age) = shared.age {
            on_this_clock(&mut meta.kept, age, shared.left);
        }
        if meta.kept.origin != origin || matches!(meta.kept.state.as_str(), "refused" | "bad_tls") {
            return None;
        }
        let this = self.clone();
        // Hashing and compiling a text of up to 500 KiB take milliseconds:
        // on the blocking pool, not on an async worker.
        tokio::task::spawn_blocking(move || {
            let digest = match (&meta.kept.sha256, &shared.text) {
                (Some(sha), Some(text)) => {
                    let digest = Digest::parse(sha)?;
                    (Digest::of(text) == digest).then_some(Some(digest))?
                }
                (Some(_), None) => return None,
                (None, _) => None,
            };
            let mut entry = from_kept(
                &meta.kept,
                shared.text.as_deref(),
                &this.agents(),
                &this.settings,
                Some(shared.left),
            )?;
            if let Some(archive) = this.kept.archive()
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

/// How long past its expiry a shared entry is kept as the stale-on-error
/// copy of nodes that have none of their own, at most: each node keeps
/// its own copy for `robots.stale_max` (in memory and in its archive),
/// and what clients make the fleet store does not hold Redis's memory
/// for a month.
pub(crate) const SHARED_STALE_KEEP: Duration = Duration::from_secs(24 * 3600);

/// How long a shared entry fresh for `fresh`, its file fetched `age` ago,
/// is kept past its expiry: until its copy is older than `stale_max`
/// (no node judges by an older one), [`SHARED_STALE_KEEP`] at most.
fn shared_keep(stale_max: Duration, age: Duration, fresh: Duration) -> Duration {
    stale_max
        .saturating_sub(age)
        .saturating_sub(fresh)
        .min(SHARED_STALE_KEEP)
}

/// `kept`'s times on this node's wall clock: fetched `age` ago, expiring
/// in `left`.
fn on_this_clock(kept: &mut KeptEntry, age: Duration, left: Duration) {
    let ms = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    };
    let now = SystemTime::now();
    kept.fetched_at_ms = ms(now.checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH));
    kept.expires_at_ms = ms(now + left);
}
