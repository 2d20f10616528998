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

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use lru::LruCache;
use tokio::time::Instant;

use crate::http::origin::Origin;
use bytes::Bytes;

use crate::judge::archive::{Archive, Digest, Evidence, KeptEntry};
use crate::judge::fetch::{self, Concluded, FetchSettings, Fetched};
use crate::robots::{AgentRules, Robots};
use crate::upstream::HttpClient;

/// What a cached origin entry says applies to the origin's requests, with
/// the reason for every state that is not a freshly fetched file.
#[derive(Clone, Debug)]
pub enum State {
    /// 2xx: the file's rules apply.
    Fresh(Compiled),
    /// robots.txt could not be fetched again now (the origin unreachable,
    /// or the proxy short of a local resource), but a copy fetched earlier
    /// is still used; `reason` says why it was not refreshed.
    Stale { rules: Compiled, reason: String },
    /// 4xx or too many redirects: everything allowed.
    AllowAll { reason: String },
    /// 5xx, 429 or network failure, no usable copy: everything disallowed.
    DisallowAll { reason: String },
    /// Not fetched: the destination policy forbids the origin (or a
    /// robots.txt redirect); requests are refused.
    Refused { reason: String },
    /// TLS with the origin failed: requests get 502 (a copy fetched
    /// earlier is not used, as requests could not reach the origin either).
    BadTls { reason: String },
    /// The proxy ran short of file descriptors, memory or local ports and
    /// no copy is usable: everything disallowed for this request only,
    /// never cached (the next request fetches again).
    LocalError { reason: String },
}

impl State {
    /// Short name used in audit lines, headers and `/explain`.
    pub fn name(&self) -> &'static str {
        match self {
            State::Fresh(_) => "ok",
            State::Stale { .. } => "stale",
            State::AllowAll { .. } => "unavailable",
            State::DisallowAll { .. } => "unreachable",
            State::Refused { .. } => "refused",
            State::BadTls { .. } => "bad_tls",
            State::LocalError { .. } => "local_error",
        }
    }

    /// Why the state is not a freshly fetched file (`None` if it is).
    pub(crate) fn reason(&self) -> Option<&str> {
        match self {
            State::Fresh(_) => None,
            State::Stale { reason, .. }
            | State::AllowAll { reason }
            | State::DisallowAll { reason }
            | State::Refused { reason }
            | State::BadTls { reason }
            | State::LocalError { reason } => Some(reason),
        }
    }

    /// The robots.txt rules in use, fresh or stale.
    pub(crate) fn rules(&self) -> Option<&Compiled> {
        match self {
            State::Fresh(rules) | State::Stale { rules, .. } => Some(rules),
            _ => None,
        }
    }
}

/// The compiled rules of one robots.txt file for each agent token the
/// proxy uses. Agents that select the same groups share one
/// [`AgentRules`].
#[derive(Clone, Debug)]
pub struct Compiled(Arc<[(Arc<str>, Arc<AgentRules>)]>, Option<Digest>);

impl Compiled {
    /// Compiles `robots` for `agents` (product tokens); `digest` is the
    /// SHA-256 of the text it was parsed from, when it was fetched.
    pub(crate) fn new(robots: &Robots, agents: &[Arc<str>], digest: Option<Digest>) -> Compiled {
        let tokens: Vec<&str> = agents.iter().map(|a| &**a).collect();
        let rules = robots.agent_rules_shared(&tokens);
        Compiled(agents.iter().cloned().zip(rules).collect(), digest)
    }

    /// The SHA-256 of the text these rules were parsed from (its name in
    /// the archive).
    pub(crate) fn digest(&self) -> Option<Digest> {
        self.1
    }

    /// The rules for `token`, if it was compiled.
    pub(crate) fn get(&self, token: &str) -> Option<&Arc<AgentRules>> {
        self.0.iter().find(|(t, _)| **t == *token).map(|(_, r)| r)
    }

    /// Bytes held, counting shared rules once.
    fn memory_usage(&self) -> usize {
        let mut total = std::mem::size_of_val(&*self.0) + 16;
        for (i, (_, rules)) in self.0.iter().enumerate() {
            if !self.0[..i].iter().any(|(_, r)| Arc::ptr_eq(r, rules)) {
                total += rules.memory_usage();
            }
        }
        total
    }
}

/// One origin's robots.txt state.
#[derive(Debug)]
pub struct Entry {
    pub state: State,
    /// Final HTTP status of the last fetch, if one arrived.
    pub(crate) status: Option<u16>,
    /// When the rules in use were fetched (for `Stale`: the old copy's time).
    pub(crate) fetched_at: SystemTime,
    fetched_instant: Instant,
    pub(crate) expires: Instant,
    /// Fetches in a row that found the origin unreachable (for backoff).
    failures: u32,
    /// In a fleet, the node whose fetch this is.
    pub(crate) fetched_by: Option<Arc<str>>,
}

impl Entry {
    /// Approximate bytes held: the entry and its compiled rules.
    pub(crate) fn memory_usage(&self) -> usize {
        let rules = self.state.rules().map_or(0, Compiled::memory_usage);
        std::mem::size_of::<Self>() + self.state.reason().map_or(0, str::len) + rules
    }

    /// The last 2xx copy and when it was fetched, for stale-on-error: the
    /// rules in use whenever a file applies (fresh or stale), as a 4xx
    /// answer ends a file's life and a failure keeps it.
    fn last_good(&self) -> Option<(Compiled, Instant, SystemTime)> {
        self.state
            .rules()
            .map(|c| (c.clone(), self.fetched_instant, self.fetched_at))
    }

    /// Seconds since the rules in use were fetched.
    pub(crate) fn age(&self) -> Duration {
        self.fetched_instant.elapsed()
    }

    /// False if a robots.txt file applies but was not compiled for `token`.
    pub(crate) fn covers(&self, token: &str) -> bool {
        self.state
            .rules()
            .is_none_or(|compiled| compiled.get(token).is_some())
    }
}

#[cfg(test)]
impl Entry {
    /// An entry in `state`, fetched now and due again in `ttl`, for tests
    /// of what reads entries.
    pub(crate) fn with_state(state: State, ttl: Duration) -> Entry {
        let now = Instant::now();
        Entry {
            state,
            status: None,
            fetched_at: SystemTime::now(),
            fetched_instant: now,
            expires: now + ttl,
            failures: 0,
            fetched_by: None,
        }
    }
}

/// How a lookup was served (for metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreLookup {
    Hit,
    Miss,
    Expired,
}

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

/// Callback run after every fetch.
pub(crate) type FetchHook = Box<dyn Fn(&Fetched) + Send + Sync>;

type Flight = Shared<BoxFuture<'static, Arc<Entry>>>;

/// A fetch's entry ([`RobotsCache::fetch_entry`]).
pub(super) struct FetchedEntry {
    pub(super) entry: Entry,
    /// The text fetched and where it came from, if one was.
    pub(super) text: Option<(Bytes, Evidence)>,
    /// Whether the entry is the origin's ([`Fetched::is_the_origins`]),
    /// for a fleet to share; not when the proxy's own state decided it
    /// (a stale copy used for the proxy's own shortage is the origin's
    /// old file, but says nothing new about the origin).
    pub(super) shareable: bool,
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

/// An origin's place in the robots cache: its entry, the fetch under way.
struct Cell {
    entry: Option<Arc<Entry>>,
    flight: Option<Flight>,
    /// Bytes accounted for `entry`.
    weight: usize,
}

/// The LRU, the bytes its entries hold and how many of them are policy
/// refusals.
struct Cells {
    lru: LruCache<Origin, Cell>,
    bytes: usize,
    /// Entries that are [`State::Refused`]: kept so a refused origin is not
    /// fetched again on every request, but not counted as cached robots.txt
    /// state ([`RobotsCache::len`]).
    refused: usize,
    /// Purges so far: a fetch that was under way during a purge may have
    /// read the file the purge is for, so its entry is not kept.
    purges: u64,
    /// In a fleet, origins whose entry this node decided alone while Redis
    /// was unavailable (a fetch of its own, a copy restored from disk):
    /// dropped when Redis answers again ([`RobotsCache::forget_alone`]).
    /// At most the LRU's capacity; `None` once that overflowed (every
    /// entry is dropped then).
    alone: Option<std::collections::HashSet<Origin>>,
}

/// True if `cell` holds a destination-policy refusal.
fn is_refused(cell: &Cell) -> bool {
    cell.entry
        .as_ref()
        .is_some_and(|e| matches!(e.state, State::Refused { .. }))
}

impl Cells {
    /// Accounts for a cell that left the LRU.
    fn forget(&mut self, old: &Cell) {
        self.bytes -= old.weight;
        self.refused -= usize::from(is_refused(old));
    }

    /// Stores `entry` for `origin` (finishing its flight), then drops least
    /// recently used entries while over `max_bytes` (never the last one).
    fn store(&mut self, origin: Origin, entry: Arc<Entry>, max_bytes: usize) {
        let weight = entry.memory_usage();
        match self.lru.get_mut(&origin) {
            Some(cell) => {
                self.bytes = self.bytes - cell.weight + weight;
                self.refused -= usize::from(is_refused(cell));
                cell.entry = Some(entry);
                self.refused += usize::from(is_refused(cell));
                cell.flight = None;
                cell.weight = weight;
            }
            None => {
                self.bytes += weight;
                let cell = Cell {
                    entry: Some(entry),
                    flight: None,
                    weight,
                };
                self.refused += usize::from(is_refused(&cell));
                if let Some((_, old)) = self.lru.push(origin, cell) {
                    self.forget(&old);
                }
            }
        }
        while self.bytes > max_bytes && self.lru.len() > 1 {
            match self.lru.pop_lru() {
                Some((_, old)) => self.forget(&old),
                None => break,
            }
        }
    }

    /// Notes that `origin`'s entry was decided without the fleet.
    fn note_alone(&mut self, origin: &Origin) {
        let cap = self.lru.cap().get();
        if let Some(alone) = &mut self.alone {
            if alone.len() < cap {
                alone.insert(origin.clone());
            } else {
                self.alone = None;
            }
        }
    }

    /// Drops every entry (fetches under way keep their flights' waiters,
    /// not their cells); returns how many there were.
    fn clear(&mut self) -> usize {
        let n = self.lru.len();
        self.lru.clear();
        self.bytes = 0;
        self.refused = 0;
        self.alone = Some(Default::default());
        n
    }

    fn remove(&mut self, origin: &Origin) -> bool {
        match self.lru.pop(origin) {
            Some(old) => {
                self.forget(&old);
                true
            }
            None => false,
        }
    }
}

/// The cache. Cheap to share: use it behind an `Arc`.
pub struct RobotsCache {
    cells: Mutex<Cells>,
    client: HttpClient,
    /// User-Agent, timeout, redirects: changed by a reload.
    fetch: RwLock<Arc<FetchSettings>>,
    pub(super) settings: RobotsCacheSettings,
    /// Called after every fetch (metrics).
    on_fetch: Option<FetchHook>,
    /// Bytes of files being fetched and compiled at once
    /// (`robots.fetch_budget_mib`), if bounded.
    budget: Option<Arc<crate::judge::fetch_budget::FetchBudget>>,
    /// The agents entries are compiled for (changed by a reload).
    agents: RwLock<Arc<[Arc<str>]>>,
    /// Entries for other agents (`/explain` questions), few and small.
    others: Mutex<LruCache<OtherKey, Arc<Entry>>>,
    /// Where every fetched file is kept, when `audit.archive_max` is set.
    pub(super) archive: Option<Arc<Archive>>,
    /// `[fleet]`: one fetch per origin for the whole fleet
    /// ([`super::shared`]).
    pub(super) fleet: Option<Arc<crate::fleet::Fleet>>,
    /// Orders the saves of kept entries with purges: a purge's forget
    /// never comes before the save of a fetch it overtook.
    kept: Mutex<()>,
}

/// An origin and an agent token the cache's entries are not compiled for.
type OtherKey = (Origin, Box<str>);

/// Memory budget of the entries for other agents.
const OTHER_AGENT_BYTES: usize = 16 << 20;

/// How many (origin, agent) entries for agents the proxy does not judge as
/// are kept.
const OTHER_AGENT_ENTRIES: usize = 64;

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
            cells: Mutex::new(Cells {
                lru: LruCache::new(cap),
                bytes: 0,
                refused: 0,
                purges: 0,
                alone: Some(Default::default()),
            }),
            client,
            fetch: RwLock::new(Arc::new(fetch)),
            agents: RwLock::new(tokens(&agents)),
            others: Mutex::new(LruCache::new(
                NonZeroUsize::new(OTHER_AGENT_ENTRIES).unwrap_or(NonZeroUsize::MIN),
            )),
            settings,
            on_fetch: None,
            budget: None,
            archive: None,
            fleet: None,
            kept: Mutex::new(()),
        }
    }

    /// Every fetch is kept in `archive`.
    /// Whether a purge came after the count was `purges`.
    pub(super) fn purged_since(&self, purges: u64) -> bool {
        self.cells.lock().map_or(true, |s| s.purges != purges)
    }

    /// Keeps `kept` on disk for a restart, unless a purge came after the
    /// fetch it is from started (`purges`: the count then).
    pub(super) fn keep_entry(&self, kept: &KeptEntry, purges: u64) {
        let Some(archive) = &self.archive else { return };
        let _order = self.kept.lock();
        if !self.purged_since(purges) {
            archive.save_entry(kept);
        }
    }

    /// Shares fetches with the fleet, if there is one.
    pub(crate) fn with_fleet(mut self, fleet: Option<Arc<crate::fleet::Fleet>>) -> Self {
        self.fleet = fleet;
        self
    }

    pub(crate) fn with_archive(mut self, archive: Option<Arc<Archive>>) -> Self {
        self.archive = archive;
        self
    }

    /// Fetches wait for `budget` before they read a body.
    pub fn with_fetch_budget(
        mut self,
        budget: Arc<crate::judge::fetch_budget::FetchBudget>,
    ) -> Self {
        self.budget = Some(budget);
        self
    }

    /// The settings of the fetches started from now on.
    pub(crate) fn set_fetch_settings(&self, fetch: FetchSettings) {
        match self.fetch.write() {
            Ok(mut f) => *f = Arc::new(fetch),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(fetch),
        }
    }

    pub(super) fn fetch_settings(&self) -> Arc<FetchSettings> {
        match self.fetch.read() {
            Ok(f) => f.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Sets the agents entries are compiled for. Cached entries that lack
    /// one of them are fetched again when a request needs it.
    pub(crate) fn set_agents(&self, agents: &[String]) {
        if let Ok(mut a) = self.agents.write() {
            *a = tokens(agents);
        }
    }

    pub(super) fn agents(&self) -> Arc<[Arc<str>]> {
        self.agents
            .read()
            .map(|a| a.clone())
            .unwrap_or_else(|_| Arc::from(Vec::new()))
    }

    /// True if entries are compiled for `token` (a product token): the
    /// agents requests are judged as. Others go to [`Self::get_other_agent`].
    fn is_configured(&self, token: &str) -> bool {
        self.agents
            .read()
            .is_ok_and(|a| a.iter().any(|t| **t == *token))
    }

    /// The entry of `origin` compiled for `token`, an agent the cache's
    /// entries are not compiled for (an `/explain` question): kept in a
    /// small cache of its own, fetched when missing or expired.
    async fn get_other_agent(
        self: &Arc<Self>,
        origin: &Origin,
        token: &str,
    ) -> (Arc<Entry>, StoreLookup) {
        let key = (origin.clone(), Box::from(token));
        let previous = match self.others.lock() {
            Ok(mut others) => others.get(&key).cloned(),
            Err(_) => None,
        };
        if let Some(entry) = &previous
            && entry.expires > Instant::now()
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
        if let Ok(mut others) = self.others.lock() {
            others.put(key, entry.clone());
            // Bounded by bytes too: a few huge files must not hold memory
            // outside the cache's budget.
            let mut bytes: usize = others.iter().map(|(_, e)| e.memory_usage()).sum();
            while bytes > OTHER_AGENT_BYTES && others.len() > 1 {
                match others.pop_lru() {
                    Some((_, old)) => bytes = bytes.saturating_sub(old.memory_usage()),
                    None => break,
                }
            }
        }
        let lookup = if previous.is_some() {
            StoreLookup::Expired
        } else {
            StoreLookup::Miss
        };
        (entry, lookup)
    }

    /// Registers a callback run after every fetch.
    pub(crate) fn on_fetch(mut self, f: impl Fn(&Fetched) + Send + Sync + 'static) -> Self {
        self.on_fetch = Some(Box::new(f));
        self
    }

    /// Number of origins whose robots.txt state is cached (or being
    /// fetched). Destination-policy refusals are kept, so a refused origin
    /// is not fetched again on every request, but not counted: they say
    /// nothing about robots.txt.
    pub fn len(&self) -> usize {
        self.cells
            .lock()
            .map(|s| s.lru.len() - s.refused)
            .unwrap_or(0)
    }

    /// The first `limit` cached origins, most recently used first, with
    /// their entries (an origin being fetched for the first time has none
    /// yet), and how many origins the cache holds in all. Holds the lock
    /// for `limit` steps, whatever the cache's size.
    pub(crate) fn list(&self, limit: usize) -> (Vec<Listed>, usize) {
        let Ok(cells) = self.cells.lock() else {
            return (Vec::new(), 0);
        };
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
        self.archive.as_ref()
    }

    /// Approximate bytes held by cached rules.
    pub fn memory_usage(&self) -> usize {
        self.cells.lock().map(|s| s.bytes).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops an origin's entry, and the copy kept on disk; true if there
    /// was one in memory.
    pub(crate) fn purge(&self, origin: &Origin) -> bool {
        let _order = self.kept.lock();
        if let Some(archive) = &self.archive {
            archive.forget_entry(&origin.to_string());
        }
        if let Ok(mut others) = self.others.lock() {
            let keys: Vec<_> = others
                .iter()
                .filter(|((o, _), _)| o == origin)
                .map(|(k, _)| k.clone())
                .collect();
            for k in keys {
                others.pop(&k);
            }
        }
        self.cells
            .lock()
            .map(|mut s| {
                s.purges += 1;
                s.remove(origin)
            })
            .unwrap_or(false)
    }

    /// Drops every entry from memory (not the copies kept on disk for a
    /// restart), as a purge of each would; fetches under way keep
    /// nothing. Returns how many were dropped.
    pub(crate) fn forget_all(&self) -> usize {
        if let Ok(mut others) = self.others.lock() {
            others.clear();
        }
        self.cells
            .lock()
            .map(|mut s| {
                s.purges += 1;
                s.clear()
            })
            .unwrap_or(0)
    }

    /// Drops from memory the entries this node decided alone while the
    /// fleet's Redis was unavailable, so they are read from Redis again
    /// (a copy restored from disk may be older than a purge; a fetch of its
    /// own is one the fleet does not know). Returns how many were dropped.
    pub(crate) fn forget_alone(&self) -> usize {
        let Ok(mut s) = self.cells.lock() else {
            return 0;
        };
        match s.alone.replace(Default::default()) {
            Some(alone) => alone.iter().filter(|o| s.remove(o)).count(),
            None => s.clear(),
        }
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
        if let Ok(mut cells) = self.cells.lock() {
            cells.store(origin, entry, self.settings.max_bytes);
        }
    }

    /// The entry for `origin` compiled for `token`, fetching robots.txt if
    /// it is missing or expired, or lacks the rules of `token` (a configured
    /// agent; any other goes to [`Self::get_other_agent`]). Concurrent
    /// callers for one origin share one fetch, which runs in its own task so
    /// a caller that gives up does not cancel it.
    pub(crate) async fn get(
        self: &Arc<Self>,
        origin: &Origin,
        token: &str,
    ) -> (Arc<Entry>, StoreLookup) {
        let next = match self.cells.lock() {
            Ok(mut cells) => self.next_step(&mut cells, origin, token),
            Err(_) => return (Arc::new(self.poisoned()), StoreLookup::Miss),
        };
        match next {
            Next::Ready(entry) => (entry, StoreLookup::Hit),
            Next::Wait(flight, lookup) => (flight.await, lookup),
            // Boxed: rare (an `/explain` question), and its fetch kept
            // inline would make every request's future larger.
            Next::OtherAgent => Box::pin(self.get_other_agent(origin, token)).await,
        }
    }

    /// What [`Self::get`] does next, decided under the lock; starts a fetch
    /// if one is needed and none is under way.
    fn next_step(self: &Arc<Self>, cells: &mut Cells, origin: &Origin, token: &str) -> Next {
        let fresh = |e: &Arc<Entry>| e.expires > Instant::now();
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
                let evicted = cells.lru.push(
                    origin.clone(),
                    Cell {
                        entry: None,
                        flight: Some(f.clone()),
                        weight: 0,
                    },
                );
                if let Some((_, old)) = evicted {
                    cells.forget(&old);
                }
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
        let handle = tokio::spawn(async move {
            let (entry, alone) = match this.fleet.clone() {
                Some(fleet) => this.obtain_shared(&fleet, &origin, previous, purges).await,
                None => (this.obtain(&origin, previous, purges).await, false),
            };
            if let Ok(mut cells) = this.cells.lock() {
                if cells.purges != purges {
                    // Purged meanwhile: the waiting requests get it,
                    // nothing is kept, the next request fetches again.
                } else if matches!(entry.state, State::LocalError { .. }) {
                    // Says nothing about the origin: the waiting requests
                    // get it, the cell keeps what it had, and the next
                    // request fetches again.
                    if let Some(cell) = cells.lru.get_mut(&origin) {
                        cell.flight = None;
                    }
                } else {
                    if alone {
                        cells.note_alone(&origin);
                    }
                    cells.store(origin, entry.clone(), this.settings.max_bytes);
                }
            }
            entry
        });
        let this = self.clone();
        async move {
            match handle.await {
                Ok(entry) => entry,
                // The fetch task panicked: fail closed for the waiting
                // requests, and let the next request start a new fetch.
                Err(_) => {
                    if let Ok(mut cells) = this.cells.lock()
                        && let Some(cell) = cells.lru.get_mut(&flight_origin)
                    {
                        cell.flight = None;
                    }
                    Arc::new(this.poisoned())
                }
            }
        }
        .boxed()
        .shared()
    }

    /// `origin`'s entry without a fleet: kept on disk and still fresh, or
    /// fetched (with `previous`, or the expired kept copy, to fall back
    /// on).
    pub(super) async fn obtain(
        self: &Arc<Self>,
        origin: &Origin,
        previous: Option<Arc<Entry>>,
        purges: u64,
    ) -> Arc<Entry> {
        let previous = match previous {
            Some(p) => Some(p),
            None => match self.restore(origin).await {
                // Kept on disk and still fresh: judged by, nothing fetched.
                Some(kept) if kept.expires > Instant::now() => return kept,
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
    pub(super) async fn fetch_entry(
        self: &Arc<Self>,
        origin: &Origin,
        previous: Option<Arc<Entry>>,
        agents: Arc<[Arc<str>]>,
        purges: Option<u64>,
    ) -> FetchedEntry {
        let settings = self.fetch_settings();
        let (fetched, reservation) =
            fetch::fetch(&self.client, origin, &settings, self.budget.as_ref()).await;
        if let Some(cb) = &self.on_fetch {
            cb(&fetched);
        }
        let text = match &fetched.outcome {
            Concluded::Parsed(_, Some(t)) => Some((t.text.clone(), t.evidence.clone())),
            _ => None,
        };
        let shareable = fetched.is_the_origins();
        let this = self.clone();
        let origin = origin.to_string();
        let entry = tokio::task::spawn_blocking(move || {
            if let Some(archive) = &this.archive {
                archive_fetch(archive, &origin, &fetched);
            }
            let entry = this.entry_from(previous.as_deref(), fetched, &agents);
            // The parsed file is gone, its rules compiled into `entry`.
            drop(reservation);
            if let Some(purges) = purges
                && let Some(kept) = kept_from(&origin, &entry)
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
                entry: self.poisoned(),
                text: None,
                shareable: false,
            },
        }
    }

    /// After a restart, `origin`'s entry as kept on disk, compiled for the
    /// agents judged as: judged by while fresh, else the copy stale-on-error
    /// falls back to.
    async fn restore(self: &Arc<Self>, origin: &Origin) -> Option<Arc<Entry>> {
        let archive = self.archive.clone()?;
        let (key, agents, settings) = (origin.to_string(), self.agents(), self.settings.clone());
        tokio::task::spawn_blocking(move || restore(&archive, &key, &agents, &settings))
            .await
            .ok()
            .flatten()
            .map(Arc::new)
    }

    fn poisoned(&self) -> Entry {
        self.entry_from(
            None,
            Fetched {
                outcome: Concluded::Unreachable("internal error fetching robots.txt".into()),
                status: None,
                max_age: None,
                retry_after: None,
            },
            &[],
        )
    }

    /// Applies the status policy and lifetimes to a finished fetch, and
    /// compiles a parsed file for `agents`.
    pub(super) fn entry_from(
        &self,
        previous: Option<&Entry>,
        fetched: Fetched,
        agents: &[Arc<str>],
    ) -> Entry {
        let now = Instant::now();
        let wall = SystemTime::now();
        let s = &self.settings;
        let ttl = |max_age: Option<Duration>| match max_age {
            Some(age) => age.clamp(s.min_ttl, s.max_ttl),
            None => s.default_ttl,
        };
        let previous_good = previous.and_then(Entry::last_good);
        // Failed fetches in a row, this one included if it failed; the
        // proxy's own shortage neither counts nor resets.
        let failures = match &fetched.outcome {
            Concluded::Unreachable(_) => previous.map_or(0, |p| p.failures).saturating_add(1),
            Concluded::LocalError(_) => previous.map_or(0, |p| p.failures),
            _ => 0,
        };
        let fresh = |state, expires| (state, expires, wall, now);
        let (state, expires, fetched_at, fetched_instant) = match fetched.outcome {
            Concluded::Parsed(robots, text) => fresh(
                State::Fresh(Compiled::new(&robots, agents, text.map(|t| t.digest))),
                now + ttl(fetched.max_age),
            ),
            Concluded::Unavailable(reason) | Concluded::RedirectLimit(reason) => {
                fresh(State::AllowAll { reason }, now + ttl(fetched.max_age))
            }
            Concluded::Refused(reason) => {
                fresh(State::Refused { reason }, now + s.unreachable_retry)
            }
            Concluded::BadTls(reason) => fresh(State::BadTls { reason }, now + s.unreachable_retry),
            // The proxy's own shortage: a usable copy is used, else all is
            // disallowed, for the requests waiting now only (due at once).
            Concluded::LocalError(reason) => match previous_good {
                Some((rules, at, at_wall)) if now.duration_since(at) <= s.stale_max => {
                    (State::Stale { rules, reason }, now, at_wall, at)
                }
                _ => fresh(State::LocalError { reason }, now),
            },
            Concluded::Unreachable(reason) => {
                let retry = now + retry_delay(s.unreachable_retry, failures, fetched.retry_after);
                match previous_good {
                    Some((rules, at, at_wall)) if now.duration_since(at) <= s.stale_max => {
                        (State::Stale { rules, reason }, retry, at_wall, at)
                    }
                    _ => fresh(State::DisallowAll { reason }, retry),
                }
            }
        };
        Entry {
            state,
            status: fetched.status,
            fetched_at,
            fetched_instant,
            expires,
            failures,
            fetched_by: None,
        }
    }
}

/// `entry` as the archive keeps it; `None` for the proxy's own shortage
/// (never kept).
pub(super) fn kept_from(origin: &str, entry: &Entry) -> Option<KeptEntry> {
    let (state, sha256) = match &entry.state {
        State::Fresh(rules) => ("fresh", rules.digest()),
        State::Stale { rules, .. } => ("stale", rules.digest()),
        State::AllowAll { .. } => ("allow_all", None),
        State::DisallowAll { .. } => ("disallow_all", None),
        State::Refused { .. } => ("refused", None),
        State::BadTls { .. } => ("bad_tls", None),
        State::LocalError { .. } => return None,
    };
    if matches!(state, "fresh" | "stale") && sha256.is_none() {
        // Rules not from a fetch (inserted): nothing to restore them from.
        return None;
    }
    let now_i = Instant::now();
    let now_w = SystemTime::now();
    let wall_ms = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    };
    let expires = now_w + entry.expires.saturating_duration_since(now_i);
    Some(KeptEntry {
        origin: origin.to_string(),
        state: state.to_string(),
        reason: entry.state.reason().map(str::to_string),
        status: entry.status,
        fetched_at_ms: wall_ms(entry.fetched_at),
        expires_at_ms: wall_ms(expires),
        sha256: sha256.map(|d| d.to_string()),
        failures: entry.failures,
    })
}

/// `origin`'s entry as the archive kept it, compiled for `agents`, with
/// its times carried over to this process's clock. `None` when none is
/// kept or it cannot be read back whole.
/// The time left is never more than the settings in force now allow (a
/// lowered `robots.max_ttl` applies to kept entries too, and a clock that
/// was ahead when an entry was kept gives it no more time), and a stale
/// copy older than `robots.stale_max` is not restored.
fn restore(
    archive: &Archive,
    origin: &str,
    agents: &[Arc<str>],
    settings: &RobotsCacheSettings,
) -> Option<Entry> {
    let (kept, text) = archive.load_entry(origin)?;
    from_kept(&kept, text.as_deref(), agents, settings, None)
}

/// An entry kept on disk or shared by the fleet, compiled for `agents`.
/// `left`: the time left as the fleet's Redis counts it; `None`: from
/// the kept expiry and this host's clock.
pub(super) fn from_kept(
    kept: &KeptEntry,
    text: Option<&[u8]>,
    agents: &[Arc<str>],
    settings: &RobotsCacheSettings,
    shared_left: Option<Duration>,
) -> Option<Entry> {
    let reason = || kept.reason.clone().unwrap_or_default();
    let compiled = || {
        let text = text?;
        let digest = kept.sha256.as_deref().and_then(Digest::parse)?;
        Some(Compiled::new(&Robots::parse(text), agents, Some(digest)))
    };
    let state = match kept.state.as_str() {
        "fresh" => State::Fresh(compiled()?),
        "stale" => State::Stale {
            rules: compiled()?,
            reason: reason(),
        },
        "allow_all" => State::AllowAll { reason: reason() },
        "disallow_all" => State::DisallowAll { reason: reason() },
        // Not kept across a restart: `refused` and `bad_tls` (a destination
        // refused by policy, a certificate not trusted) depend on the
        // configuration (`allow_private_destinations`, `upstream.ca_files`),
        // which only a restart changes, so a restarted proxy fetches again
        // rather than keep a failure its new configuration may cure; and
        // any state it does not know.
        _ => return None,
    };
    let now_i = Instant::now();
    let now_w = SystemTime::now();
    let at = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
    let fetched_at = at(kept.fetched_at_ms);
    let age = now_w.duration_since(fetched_at).unwrap_or_default();
    if matches!(state, State::Stale { .. }) && age > settings.stale_max {
        return None;
    }
    let stored = shared_left.unwrap_or_else(|| {
        at(kept.expires_at_ms)
            .duration_since(now_w)
            .unwrap_or_default()
    });
    let left = match state {
        // A file's life since it was fetched stays within max_ttl.
        State::Fresh(_) | State::AllowAll { .. } => {
            stored.min(settings.max_ttl.saturating_sub(age))
        }
        _ => stored.min(settings.unreachable_retry),
    };
    Some(Entry {
        state,
        status: kept.status,
        fetched_at,
        fetched_instant: now_i.checked_sub(age).unwrap_or(now_i),
        expires: now_i + left,
        failures: kept.failures,
        fetched_by: None,
    })
}

/// Keeps what a fetch brought back in the archive: the text, or the
/// outcome of a fetch that gave none.
pub(super) fn archive_fetch(archive: &Archive, origin: &str, fetched: &Fetched) {
    let now = SystemTime::now();
    let (outcome, reason) = match &fetched.outcome {
        Concluded::Parsed(_, Some(t)) => {
            archive.keep_text(origin, fetched.status, &t.evidence, &t.text, t.digest, now);
            return;
        }
        Concluded::Parsed(_, None) => return,
        Concluded::Unavailable(r) => ("allow_all", r),
        Concluded::RedirectLimit(r) => ("redirect_limit", r),
        Concluded::Unreachable(r) => ("unreachable", r),
        Concluded::Refused(r) => ("refused", r),
        Concluded::BadTls(r) => ("bad_tls", r),
        // The proxy's own shortage says nothing about the origin.
        Concluded::LocalError(_) => return,
    };
    let url = format!("{origin}/robots.txt");
    archive.keep_outcome(origin, &url, fetched.status, outcome, reason, now);
}

/// The first wait after robots.txt was found unreachable: short, so a
/// brief outage does not disallow a whole site for long.
pub(crate) const FIRST_RETRY: Duration = Duration::from_secs(30);

/// When to fetch an unreachable robots.txt again: the origin's own
/// `Retry-After` (429, 503) if it gave one, else 30 s doubling with each
/// failure in a row; never more than `cap` (`robots.unreachable_retry`) and
/// never less than a second.
pub(crate) fn retry_delay(cap: Duration, failures: u32, retry_after: Option<Duration>) -> Duration {
    let wait = retry_after.unwrap_or_else(|| {
        let doublings = failures.saturating_sub(1).min(16);
        FIRST_RETRY.saturating_mul(1 << doublings)
    });
    wait.min(cap).max(Duration::from_secs(1).min(cap))
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
    use super::*;

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
        let cells = c.cells.lock().expect("lock");
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
        let cells = c.cells.lock().expect("lock");
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
            let cells = c.cells.lock().expect("lock");
            cells.lru.iter().map(|(_, s)| s.weight).sum()
        };
        assert_eq!(c.memory_usage(), expected);
        assert!(c.purge(&origin(49)));
        assert!(!c.purge(&origin(49)));
        assert_eq!(c.len(), 9);
    }
}
