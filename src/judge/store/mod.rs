//! The robots.txt cache: origin → compiled rules, bounded (LRU by entries
//! and by bytes), with expiry, stale-on-error and one fetch per origin at a
//! time.
//!
//! An entry keeps only what requests need: the rules of the agents the
//! proxy judges as (the configured agent, mapped agents, users' agents),
//! compiled when the file arrives. The parsed file is dropped, which keeps
//! an origin to a couple of kilobytes. Any other agent (an `/explain`
//! question) gets an entry of its own in a small side cache; an entry that
//! lacks a configured agent (the configuration changed) is fetched again.
//!
//! The parts, each with one owner:
//! - [`entry`]: an entry's states and how a fetch becomes one (pure);
//! - [`cells`]: the LRU, its byte budget, the purge count;
//! - `fetcher`: the client, the fetch settings, the fetch budget;
//! - `others`: other agents' entries;
//! - [`kept`]: entries kept on disk for a restart, ordered with purges;
//! - `shared`: one fetch per origin for a whole fleet;
//! - this module: lookups, single-flight fetches and purges, tying them
//!   together.
//!
//! Locks are `parking_lot`'s: a panic while one is held poisons nothing,
//! so one failed task never makes later lookups fail closed.

mod cells;
pub(crate) mod entry;
mod fetcher;
pub(crate) mod kept;
mod others;
pub(crate) mod rsl;
mod shared;
pub(crate) mod tdm;
mod tdm_shared;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use lru::LruCache;
use parking_lot::{Mutex, RwLock};

use crate::http::origin::Origin;
use crate::judge::archive::{Archive, Evidence};
use crate::judge::fetch::{Concluded, FetchSettings, Fetched};
use crate::judge::fetch_budget::FetchBudget;
use crate::judge::metrics::{CacheEvent, StoreMetrics};
use crate::metrics::Registry;
use crate::robots::Robots;
use crate::upstream::HttpClient;
use cells::{Cells, Flight};
use entry::StoreLookup;
pub use entry::{Compiled, Entry, State};
use fetcher::Fetcher;
use kept::Kept;
use others::OtherAgents;

/// Cache limits and lifetimes.
#[derive(Clone, Debug)]
pub struct RobotsCacheSettings {
    pub capacity: usize,
    pub default_ttl: Duration,
    pub min_ttl: Duration,
    pub max_ttl: Duration,
    pub unreachable_retry: Duration,
    pub stale_max: Duration,
    /// Memory budget for cached rules, in bytes: least recently used
    /// entries are dropped beyond it, whatever their number.
    pub max_bytes: usize,
    /// Product tokens whose rules are compiled when an entry is made (the
    /// agents requests are judged as); other agents' questions are answered
    /// by a fetch of their own.
    pub agents: Vec<String>,
}

/// An origin of [`RobotsCache::list`] and its entry (none while its first
/// fetch runs).
pub(crate) type Listed = (Origin, Option<Arc<Entry>>);

/// A fetch's entry ([`RobotsCache::fetch_entry`]).
struct FetchedEntry {
    entry: Entry,
    /// The text fetched and where it came from, if one was.
    text: Option<(Bytes, Evidence)>,
    /// Whether the entry is the origin's ([`Fetched::is_the_origins`]),
    /// for a fleet to share; not when the proxy's own state decided it
    /// (a stale copy used for the proxy's own shortage is the origin's
    /// old file, but says nothing new about the origin).
    shareable: bool,
}

/// The next step of a lookup.
enum Next {
    /// A usable entry.
    Ready(Arc<Entry>),
    /// Wait for this fetch.
    Wait(Flight, StoreLookup),
    /// The agent's rules are not compiled in entries: the side cache.
    OtherAgent,
}

/// The cache. Cheap to share: use it behind an `Arc`.
pub struct RobotsCache {
    cells: Mutex<Cells>,
    fetcher: Fetcher,
    settings: RobotsCacheSettings,
    /// Its series (fetches, lookups, entries), registered by
    /// [`Self::with_metrics`].
    metrics: StoreMetrics,
    /// The agents entries are compiled for (changed by a reload).
    agents: RwLock<Arc<[Arc<str>]>>,
    others: OtherAgents,
    /// Entries kept on disk, and every fetched file, when
    /// `audit.archive_max` is set.
    kept: Kept,
    /// `[fleet]`: one fetch per origin for the whole fleet (`shared`).
    fleet: Option<Arc<crate::fleet::Fleet>>,
    /// robots.txt fetches answered 429 or 503 with `Retry-After`: their
    /// origins are paused as for any response ([`RobotsCache::signals`]).
    signals: tokio::sync::broadcast::Sender<RobotsSignal>,
    /// The origins' `/.well-known/tdmrep.json` ([`tdm`]).
    tdm: tdm::TdmFiles,
    /// RSL licence documents by URL ([`rsl`]).
    rsl: tdm::Docs<String, rsl::RslState>,
}

/// A robots.txt fetch answered 429 or 503 with `Retry-After`.
#[derive(Debug, Clone)]
pub struct RobotsSignal {
    /// `scheme://host:port`.
    pub origin: Arc<str>,
    pub status: u16,
    pub retry_after: std::time::Duration,
}

impl RobotsCache {
    pub fn new(
        client: HttpClient,
        fetch: FetchSettings,
        mut settings: RobotsCacheSettings,
    ) -> RobotsCache {
        // Kept in `agents` only, where a reload changes them.
        let agents = std::mem::take(&mut settings.agents);
        let cap = NonZeroUsize::new(settings.capacity.max(1)).unwrap_or(NonZeroUsize::MIN);
        RobotsCache {
            cells: Mutex::new(Cells::new(LruCache::new(cap))),
            fetcher: Fetcher::new(client, fetch),
            agents: RwLock::new(tokens(&agents)),
            others: OtherAgents::new(),
            settings,
            metrics: StoreMetrics::default(),
            kept: Kept::new(None),
            fleet: None,
            signals: tokio::sync::broadcast::channel(64).0,
            tdm: tdm::TdmFiles::default(),
            rsl: tdm::Docs::default(),
        }
    }

    /// The robots.txt fetches answered 429 or 503 with `Retry-After`,
    /// from now on (a receiver that falls behind loses the oldest).
    pub fn signals(&self) -> tokio::sync::broadcast::Receiver<RobotsSignal> {
        self.signals.subscribe()
    }

    /// Whether a purge came after the count was `purges`.
    fn purged_since(&self, purges: u64) -> bool {
        self.cells.lock().purges != purges
    }

    /// Keeps `kept` on disk for a restart, unless a purge came after the
    /// fetch it is from started (`purges`: the count then).
    fn keep_entry(&self, kept: &crate::judge::archive::KeptEntry, purges: u64) {
        self.kept.save_unless(kept, || self.purged_since(purges));
    }

    /// Shares fetches with the fleet, if there is one.
    pub(crate) fn with_fleet(mut self, fleet: Option<Arc<crate::fleet::Fleet>>) -> Self {
        self.fleet = fleet;
        self
    }

    /// Every fetch is kept in `archive`, and entries for a restart.
    pub(crate) fn with_archive(mut self, archive: Option<Arc<Archive>>) -> Self {
        self.kept = Kept::new(archive);
        self
    }

    /// Fetches wait for `budget` before they read a body.
    pub fn with_fetch_budget(mut self, budget: Arc<FetchBudget>) -> Self {
        self.fetcher.budget = Some(budget);
        self
    }

    /// The settings of the fetches started from now on.
    pub(crate) fn set_fetch_settings(&self, fetch: FetchSettings) {
        self.fetcher.set_settings(fetch);
    }

    fn fetch_settings(&self) -> Arc<FetchSettings> {
        self.fetcher.settings()
    }

    /// Sets the agents entries are compiled for. Cached entries that lack
    /// one of them are fetched again when a request needs it.
    pub(crate) fn set_agents(&self, agents: &[String]) {
        *self.agents.write() = tokens(agents);
    }

    fn agents(&self) -> Arc<[Arc<str>]> {
        self.agents.read().clone()
    }

    /// True if entries are compiled for `token` (a product token): the
    /// agents requests are judged as. Others go to [`Self::get_other_agent`].
    fn is_configured(&self, token: &str) -> bool {
        self.agents.read().iter().any(|t| **t == *token)
    }

    /// The entry of `origin` compiled for `token`, an agent the cache's
    /// entries are not compiled for (an `/explain` question): kept in a
    /// small cache of its own, fetched when missing or expired.
    async fn get_other_agent(
        self: &Arc<Self>,
        origin: &Origin,
        token: &str,
    ) -> (Arc<Entry>, StoreLookup) {
        let previous = self.others.get(origin, token);
        if let Some(entry) = &previous
            && entry.expires > crate::http::clock::now()
        {
            return (entry.clone(), StoreLookup::Hit);
        }
        let agents: Arc<[Arc<str>]> = Arc::from([Arc::from(token)]);
        let entry = Arc::new(
            self.fetch_entry(origin, previous.clone(), agents, None)
                .await
                .entry,
        );
        if matches!(entry.state, State::LocalError { .. }) {
            return (entry, StoreLookup::Miss);
        }
        self.others.put(origin, token, entry.clone());
        let lookup = if previous.is_some() {
            StoreLookup::Expired
        } else {
            StoreLookup::Miss
        };
        (entry, lookup)
    }

    /// Registers the store's series in `registry`.
    pub fn with_metrics(mut self, registry: &Registry) -> Self {
        self.metrics = StoreMetrics::new(registry);
        self.cells.get_mut().entries = self.metrics.entries.clone();
        self
    }

    /// Number of origins whose robots.txt state is cached (or being
    /// fetched). Destination-policy refusals are kept, so a refused origin
    /// is not fetched again on every request, but not counted: they say
    /// nothing about robots.txt.
    pub fn len(&self) -> usize {
        self.cells.lock().len()
    }

    /// The first `limit` cached origins, most recently used first, with
    /// their entries (an origin being fetched for the first time has none
    /// yet), and how many origins the cache holds in all. Holds the lock
    /// for `limit` steps, whatever the cache's size.
    pub(crate) fn list(&self, limit: usize) -> (Vec<Listed>, usize) {
        let cells = self.cells.lock();
        let listed = cells
            .lru
            .iter()
            .take(limit)
            .map(|(origin, cell)| (origin.clone(), cell.entry.clone()))
            .collect();
        (listed, cells.lru.len())
    }

    /// The archive fetched files are kept in, if any.
    pub(crate) fn archive(&self) -> Option<&Arc<Archive>> {
        self.kept.archive()
    }

    /// Approximate bytes held by cached rules.
    pub fn memory_usage(&self) -> usize {
        self.cells.lock().bytes
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops an origin's entry, and the copy kept on disk; true if there
    /// was one in memory. The origin's other site documents go with it:
    /// its tdmrep.json and the RSL licence documents it serves itself
    /// (read again on the next request).
    pub(crate) fn purge(&self, origin: &Origin) -> bool {
        self.tdm.forget(|o| o == origin);
        let base = origin.to_string();
        self.rsl.forget(|url| {
            url.strip_prefix(base.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['/', '?', '#']))
        });
        self.kept.forget(origin, || {
            self.others.forget(origin);
            let mut cells = self.cells.lock();
            cells.purges += 1;
            cells.remove(origin)
        })
    }

    /// Drops every entry from memory (not the copies kept on disk for a
    /// restart), as a purge of each would; fetches under way keep
    /// nothing. Returns how many were dropped.
    pub(crate) fn forget_all(&self) -> usize {
        self.others.clear();
        self.tdm.forget(|_| true);
        self.rsl.forget(|_| true);
        let mut cells = self.cells.lock();
        cells.purges += 1;
        cells.clear()
    }

    /// Drops from memory the entries this node decided alone while the
    /// fleet's Redis was unavailable, so they are read from Redis again
    /// (a copy restored from disk may be older than a purge; a fetch of its
    /// own is one the fleet does not know). Returns how many were dropped.
    pub(crate) fn forget_alone(&self) -> usize {
        self.cells.lock().forget_alone()
    }

    /// Inserts already-parsed rules for `origin` (used by benchmarks and
    /// tests that fill the cache without fetching).
    pub fn insert_parsed(&self, origin: Origin, robots: Robots) {
        let entry = Arc::new(self.entry_from(
            None,
            Fetched {
                outcome: Concluded::Parsed(robots, None),
                status: Some(200),
                max_age: None,
                retry_after: None,
            },
            &self.agents(),
        ));
        self.cells
            .lock()
            .store(origin, entry, self.settings.max_bytes);
    }

    /// The entry for `origin` compiled for `token`, fetching robots.txt if
    /// it is missing or expired, or lacks the rules of `token` (a configured
    /// agent; any other goes to [`Self::get_other_agent`]). Concurrent
    /// callers for one origin share one fetch, which runs in its own task so
    /// a caller that gives up does not cancel it.
    /// Each lookup is counted by how it was served.
    pub(crate) async fn get(self: &Arc<Self>, origin: &Origin, token: &str) -> Arc<Entry> {
        let next = self.next_step(&mut self.cells.lock(), origin, token);
        let (entry, lookup) = match next {
            Next::Ready(entry) => (entry, StoreLookup::Hit),
            Next::Wait(flight, lookup) => (flight.await, lookup),
            // Boxed: rare (an `/explain` question), and its fetch kept
            // inline would make every request's future larger.
            Next::OtherAgent => Box::pin(self.get_other_agent(origin, token)).await,
        };
        self.metrics.looked_up(match lookup {
            StoreLookup::Hit if matches!(entry.state, State::Stale { .. }) => CacheEvent::Stale,
            StoreLookup::Hit => CacheEvent::Hit,
            StoreLookup::Miss => CacheEvent::Miss,
            StoreLookup::Expired => CacheEvent::Expired,
        });
        entry
    }

    /// What [`Self::get`] does next, decided under the lock; starts a fetch
    /// if one is needed and none is under way.
    fn next_step(self: &Arc<Self>, cells: &mut Cells, origin: &Origin, token: &str) -> Next {
        let fresh = |e: &Arc<Entry>| e.expires > crate::http::clock::now();
        // The common case, a fresh entry compiled for the agent, needs no
        // look at the agent list.
        if let Some(entry) = cells.lru.get(origin).and_then(|s| s.entry.as_ref())
            && fresh(entry)
            && entry.covers(token)
        {
            return Next::Ready(entry.clone());
        }
        if !self.is_configured(token) {
            return Next::OtherAgent;
        }
        let cells_purges = cells.purges;
        match cells.lru.get_mut(origin) {
            Some(cell) => {
                // A stale copy lacking the agent cannot be refreshed by
                // fetching again now: the origin is unreachable.
                if let Some(entry) = &cell.entry
                    && fresh(entry)
                    && matches!(entry.state, State::Stale { .. })
                {
                    return Next::Ready(entry.clone());
                }
                let lookup = if cell.entry.is_some() {
                    StoreLookup::Expired
                } else {
                    StoreLookup::Miss
                };
                match &cell.flight {
                    Some(f) => Next::Wait(f.clone(), lookup),
                    None => {
                        let f = self.start_flight(origin.clone(), cell.entry.clone(), cells_purges);
                        cell.flight = Some(f.clone());
                        Next::Wait(f, lookup)
                    }
                }
            }
            None => {
                let f = self.start_flight(origin.clone(), None, cells.purges);
                cells.push_flight(origin.clone(), f.clone());
                Next::Wait(f, StoreLookup::Miss)
            }
        }
    }

    /// Starts the fetch of `origin`'s entry; `purges`: the purge count
    /// now.
    fn start_flight(
        self: &Arc<Self>,
        origin: Origin,
        previous: Option<Arc<Entry>>,
        purges: u64,
    ) -> Flight {
        let flight_origin = origin.clone();
        let this = self.clone();
        // The fetch counts to the client of the request that started it.
        let client = crate::judge::fetch_budget::current_client();
        let handle = tokio::spawn(crate::judge::fetch_budget::continue_for(
            client,
            async move {
                let (entry, alone) = match this.fleet.clone() {
                    Some(fleet) => this.obtain_shared(&fleet, &origin, previous, purges).await,
                    None => (this.obtain(&origin, previous, purges).await, false),
                };
                this.cells
                    .lock()
                    .finish(origin, &entry, purges, alone, this.settings.max_bytes);
                entry
            },
        ));
        let this = self.clone();
        async move {
            match handle.await {
                Ok(entry) => entry,
                // The fetch task panicked: fail closed for the waiting
                // requests, and let the next request start a new fetch.
                Err(_) => {
                    if let Some(cell) = this.cells.lock().lru.get_mut(&flight_origin) {
                        cell.flight = None;
                    }
                    Arc::new(Entry::internal_error())
                }
            }
        }
        .boxed()
        .shared()
    }

    /// `origin`'s entry without a fleet: kept on disk and still fresh, or
    /// fetched (with `previous`, or the expired kept copy, to fall back
    /// on).
    async fn obtain(
        self: &Arc<Self>,
        origin: &Origin,
        previous: Option<Arc<Entry>>,
        purges: u64,
    ) -> Arc<Entry> {
        let previous = match previous {
            Some(p) => Some(p),
            None => match self.restore(origin).await {
                // Kept on disk and still fresh: judged by, nothing fetched.
                Some(kept) if kept.expires > crate::http::clock::now() => return kept,
                // Expired: the copy stale-on-error falls back to.
                other => other,
            },
        };
        Arc::new(
            self.fetch_entry(origin, previous, self.agents(), Some(purges))
                .await
                .entry,
        )
    }

    /// Fetches `origin`'s robots.txt, reports it to the fetch hook, and
    /// builds its entry compiled for `agents`. Compiling a large file's
    /// rules takes milliseconds: it runs on the blocking pool, not on an
    /// async worker where it would stall every connection that worker
    /// serves.
    async fn fetch_entry(
        self: &Arc<Self>,
        origin: &Origin,
        previous: Option<Arc<Entry>>,
        agents: Arc<[Arc<str>]>,
        purges: Option<u64>,
    ) -> FetchedEntry {
        let (fetched, reservation) = self.fetcher.fetch(origin).await;
        self.metrics.fetched(&fetched);
        if let (Some(status), Some(retry_after)) = (fetched.status, fetched.retry_after)
            && crate::http::signal::is_signal(status)
            && !retry_after.is_zero()
        {
            let _ = self.signals.send(RobotsSignal {
                origin: origin.to_string().into(),
                status,
                retry_after,
            });
        }
        let text = match &fetched.outcome {
            Concluded::Parsed(_, Some(t)) => Some((t.text.clone(), t.evidence.clone())),
            _ => None,
        };
        let shareable = fetched.is_the_origins();
        let this = self.clone();
        let origin = origin.to_string();
        let entry = tokio::task::spawn_blocking(move || {
            this.kept.archive_fetch(&origin, &fetched);
            let entry = this.entry_from(previous.as_deref(), fetched, &agents);
            // The parsed file is gone, its rules compiled into `entry`.
            drop(reservation);
            if let Some(purges) = purges
                && let Some(kept) = kept::kept_from(&origin, &entry)
            {
                this.keep_entry(&kept, purges);
            }
            entry
        })
        .await;
        match entry {
            Ok(entry) => FetchedEntry {
                entry,
                text,
                shareable,
            },
            Err(_) => FetchedEntry {
                entry: Entry::internal_error(),
                text: None,
                shareable: false,
            },
        }
    }

    /// After a restart, `origin`'s entry as kept on disk, compiled for the
    /// agents judged as: judged by while fresh, else the copy stale-on-error
    /// falls back to.
    async fn restore(self: &Arc<Self>, origin: &Origin) -> Option<Arc<Entry>> {
        let archive = self.kept.archive()?.clone();
        let (key, agents, settings) = (origin.to_string(), self.agents(), self.settings.clone());
        tokio::task::spawn_blocking(move || kept::restore(&archive, &key, &agents, &settings))
            .await
            .ok()
            .flatten()
            .map(Arc::new)
    }

    /// [`Entry::from_fetch`] with this cache's lifetimes.
    fn entry_from(&self, previous: Option<&Entry>, fetched: Fetched, agents: &[Arc<str>]) -> Entry {
        Entry::from_fetch(&self.settings, previous, fetched, agents)
    }
}

/// The product tokens of `agents`, without repeats.
fn tokens(agents: &[String]) -> Arc<[Arc<str>]> {
    let mut out: Vec<Arc<str>> = Vec::new();
    for a in agents {
        let t = crate::robots::product_token(a);
        if !t.is_empty() && !out.iter().any(|o| **o == *t) {
            out.push(Arc::from(&*t));
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use tokio::time::Instant;

    use super::entry::retry_delay;
    use super::kept::restore;
    use super::*;
    use crate::judge::archive::{Digest, KeptEntry};

    #[test]
    fn an_unreachable_robots_txt_is_retried_soon_then_less_often() {
        let cap = Duration::from_secs(300);
        let secs = |failures, after| retry_delay(cap, failures, after).as_secs();
        assert_eq!(secs(1, None), 30);
        assert_eq!(secs(2, None), 60);
        assert_eq!(secs(3, None), 120);
        assert_eq!(secs(4, None), 240);
        assert_eq!(secs(5, None), 300, "capped by unreachable_retry");
        assert_eq!(secs(400, None), 300);
        // The origin's Retry-After, within [1 s, cap].
        assert_eq!(secs(1, Some(Duration::from_secs(5))), 5);
        assert_eq!(secs(1, Some(Duration::ZERO)), 1);
        assert_eq!(secs(1, Some(Duration::from_secs(86_400))), 300);
        // A cap below the first step wins.
        assert_eq!(retry_delay(Duration::from_secs(10), 1, None).as_secs(), 10);
    }
    use crate::http::origin::Scheme;
    use crate::upstream::{ClientSettings, build_client};

    fn cache(max_bytes: usize, capacity: usize) -> RobotsCache {
        let tls = crate::upstream::tls::client_config_with(&[], false)
            .map(|(c, _)| c)
            .expect("tls config");
        let client = build_client(
            &ClientSettings {
                policy: crate::http::destination::Policy::new(false),
                connect_timeout: Duration::from_secs(1),
                pool_idle_per_host: 1,
                pool_idle_max: 1,
                pool_idle_timeout: Duration::from_secs(1),
            },
            Arc::new(tls),
        );
        RobotsCache::new(
            client,
            FetchSettings {
                user_agent: "t".into(),
                timeout: Duration::from_secs(1),
                max_redirects: 5,
                max_informational: 10,
            },
            RobotsCacheSettings {
                capacity,
                default_ttl: Duration::from_secs(60),
                min_ttl: Duration::from_secs(1),
                max_ttl: Duration::from_secs(60),
                unreachable_retry: Duration::from_secs(1),
                stale_max: Duration::from_secs(60),
                max_bytes,
                agents: vec!["bot".into()],
            },
        )
    }

    fn origin(i: usize) -> Origin {
        Origin::new(Scheme::Http, &format!("host{i}.example"), None).expect("origin")
    }

    #[tokio::test]
    async fn a_kept_entry_is_restored_within_the_ttl_in_force_now() {
        let dir = tempfile::tempdir().expect("tempdir");
        let archive =
            Archive::open(dir.path(), 1 << 20, &dir.path().join("audit.jsonl")).expect("archive");
        let text = b"User-agent: *\nDisallow: /private\n";
        let digest = Digest::of(text);
        let now = SystemTime::now();
        archive.keep_text(
            "http://a.example",
            Some(200),
            &Default::default(),
            text,
            digest,
            now,
        );
        let ms = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .expect("epoch")
                .as_millis() as u64
        };
        let kept = |state: &str, sha: Option<Digest>, expires_in: Duration| KeptEntry {
            origin: "http://a.example".into(),
            state: state.into(),
            reason: Some("why".into()),
            status: Some(200),
            fetched_at_ms: ms(now),
            expires_at_ms: ms(now + expires_in),
            sha256: sha.map(|d| d.to_string()),
            failures: 0,
        };
        let agents: Vec<Arc<str>> = vec!["bot".into()];
        let mut settings = RobotsCacheSettings {
            capacity: 10,
            default_ttl: Duration::from_secs(3600),
            min_ttl: Duration::from_secs(1),
            max_ttl: Duration::from_secs(24 * 3600),
            unreachable_retry: Duration::from_secs(60),
            stale_max: Duration::from_secs(3600),
            max_bytes: 1 << 20,
            agents: agents.iter().map(|a| a.to_string()).collect(),
        };
        // Kept for a day; the operator lowered max_ttl to 10 minutes.
        archive.save_entry(&kept("fresh", Some(digest), Duration::from_secs(24 * 3600)));
        settings.max_ttl = Duration::from_secs(600);
        let entry = restore(&archive, "http://a.example", &agents, &settings).expect("restored");
        assert!(matches!(entry.state, State::Fresh(_)));
        assert!(entry.expires <= Instant::now() + Duration::from_secs(600));
        assert!(entry.expires > Instant::now() + Duration::from_secs(590));
        // An unreachable origin is asked again within unreachable_retry.
        archive.save_entry(&kept("disallow_all", None, Duration::from_secs(24 * 3600)));
        let entry = restore(&archive, "http://a.example", &agents, &settings).expect("restored");
        assert!(entry.expires <= Instant::now() + Duration::from_secs(60));
        // A stale copy older than stale_max is not restored.
        settings.stale_max = Duration::ZERO;
        let mut old = kept("stale", Some(digest), Duration::from_secs(60));
        old.fetched_at_ms -= 10_000;
        archive.save_entry(&old);
        assert!(restore(&archive, "http://a.example", &agents, &settings).is_none());
        // Its text gone, a fresh entry is not restored either.
        archive.save_entry(&kept(
            "fresh",
            Some(Digest::of(b"other")),
            Duration::from_secs(60),
        ));
        assert!(restore(&archive, "http://a.example", &agents, &settings).is_none());
    }

    fn robots(rules: usize) -> Robots {
        let mut text = String::from("User-agent: *\n");
        for i in 0..rules {
            text.push_str(&format!("Disallow: /some/fairly/long/path/number/{i}\n"));
        }
        Robots::parse(text.as_bytes())
    }

    #[test]
    fn memory_budget_bounds_the_cache_whatever_the_entry_count() {
        let budget = 256 * 1024;
        let c = cache(budget, 100_000);
        for i in 0..200 {
            c.insert_parsed(origin(i), robots(100));
        }
        assert!(
            c.memory_usage() <= budget,
            "{} > {budget}",
            c.memory_usage()
        );
        assert!(c.len() < 200 && c.len() > 1, "{}", c.len());
        // The most recent entry is kept, the oldest are gone.
        let cells = c.cells.lock();
        assert!(cells.lru.contains(&origin(199)));
        assert!(!cells.lru.contains(&origin(0)));
    }

    #[test]
    fn the_listing_is_bounded_and_most_recently_used_first() {
        let c = cache(usize::MAX, 1000);
        for i in 0..50 {
            c.insert_parsed(origin(i), robots(1));
        }
        let (listed, total) = c.list(10);
        assert_eq!(total, 50);
        assert_eq!(listed.len(), 10);
        assert_eq!(listed[0].0, origin(49));
        assert_eq!(listed[9].0, origin(40));
        assert!(listed.iter().all(|(_, e)| e.is_some()));
        let (all, total) = c.list(usize::MAX);
        assert_eq!((all.len(), total), (50, 50));
    }

    #[test]
    fn entries_hold_the_rules_of_the_configured_agents_only() {
        let c = cache(usize::MAX, 10);
        c.set_agents(&["Bot/1.0".into(), "other".into()]);
        c.insert_parsed(origin(1), robots(3));
        let cells = c.cells.lock();
        let entry = cells
            .lru
            .peek(&origin(1))
            .and_then(|s| s.entry.clone())
            .expect("entry");
        assert!(entry.covers("bot") && entry.covers("other"));
        assert!(!entry.covers("third"));
        let State::Fresh(compiled) = &entry.state else {
            panic!("a parsed entry");
        };
        let (Some(a), Some(b)) = (compiled.get("bot"), compiled.get("other")) else {
            panic!("both agents compiled");
        };
        assert!(Arc::ptr_eq(a, b), "both select the * group: shared");
        assert_eq!(a.rules().len(), 3);
    }

    /// The proxy's own shortage is never the origin's: without a copy,
    /// all is disallowed for the waiting requests only (due at once);
    /// with one, the copy is used and its age kept.
    #[test]
    fn a_local_error_is_due_at_once_and_keeps_a_good_copy() {
        let c = cache(usize::MAX, 10);
        let local = || Fetched {
            outcome: Concluded::LocalError("the proxy is out of file descriptors".into()),
            status: None,
            max_age: None,
            retry_after: None,
        };
        let agents = c.agents();
        let alone = c.entry_from(None, local(), &agents);
        assert!(matches!(alone.state, State::LocalError { .. }));
        assert!(alone.expires <= Instant::now());
        let good = c.entry_from(
            None,
            Fetched {
                outcome: Concluded::Parsed(robots(2), None),
                status: Some(200),
                max_age: None,
                retry_after: None,
            },
            &agents,
        );
        let kept = c.entry_from(Some(&good), local(), &agents);
        assert!(matches!(kept.state, State::Stale { .. }));
        assert_eq!(kept.fetched_instant, good.fetched_instant);
        assert!(kept.expires <= Instant::now());
    }

    fn fetched(outcome: Concluded, max_age: Option<Duration>) -> Fetched {
        Fetched {
            outcome,
            status: None,
            max_age,
            retry_after: None,
        }
    }

    /// Lifetimes on tokio's paused clock, exact: max-age within
    /// [min_ttl, max_ttl] (1 s, 60 s), the default TTL without one, a stale
    /// copy used up to exactly stale_max (60 s) and not a millisecond more,
    /// an unreachable origin retried after the backoff capped by
    /// unreachable_retry (1 s).
    #[tokio::test(start_paused = true)]
    async fn lifetimes_follow_the_clock_exactly() {
        let c = cache(usize::MAX, 10);
        let agents = c.agents();
        let secs = Duration::from_secs;
        let parsed = |max_age| {
            let e = c.entry_from(
                None,
                fetched(Concluded::Parsed(robots(1), None), max_age),
                &agents,
            );
            e.expires - Instant::now()
        };
        assert_eq!(parsed(Some(secs(30))), secs(30));
        assert_eq!(parsed(Some(Duration::ZERO)), secs(1), "min_ttl");
        assert_eq!(parsed(Some(secs(3600))), secs(60), "max_ttl");
        assert_eq!(parsed(None), secs(60), "default_ttl");

        let good = c.entry_from(
            None,
            fetched(Concluded::Parsed(robots(1), None), None),
            &agents,
        );
        let down = || fetched(Concluded::Unreachable("503 from origin".into()), None);
        tokio::time::advance(secs(60)).await;
        assert_eq!(good.age(), secs(60));
        let stale = c.entry_from(Some(&good), down(), &agents);
        assert!(
            matches!(stale.state, State::Stale { .. }),
            "{:?}",
            stale.state
        );
        assert_eq!(stale.age(), secs(60), "the copy's age, not the failure's");
        assert_eq!(stale.expires - Instant::now(), secs(1));
        tokio::time::advance(Duration::from_millis(1)).await;
        let gone = c.entry_from(Some(&stale), down(), &agents);
        assert!(
            matches!(gone.state, State::DisallowAll { .. }),
            "{:?}",
            gone.state
        );
        assert_eq!(gone.expires - Instant::now(), secs(1));
        assert_eq!(gone.failures, 2);
    }

    #[test]
    fn entry_count_bound_still_applies_and_bytes_stay_consistent() {
        let c = cache(usize::MAX, 10);
        for i in 0..50 {
            c.insert_parsed(origin(i), robots(3));
        }
        assert_eq!(c.len(), 10);
        let expected: usize = {
            let cells = c.cells.lock();
            cells.lru.iter().map(|(_, s)| s.weight).sum()
        };
        assert_eq!(c.memory_usage(), expected);
        assert!(c.purge(&origin(49)));
        assert!(!c.purge(&origin(49)));
        assert_eq!(c.len(), 9);
    }
}
