//! The robots.txt cache: origin → compiled rules, bounded (LRU by entries),
//! with expiry, stale-on-error and one fetch per origin at a time.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use lru::LruCache;

use crate::fetch::{self, FetchSettings, Fetched, Outcome};
use crate::origin::Origin;
use crate::proxy::client::HttpClient;
use crate::robots::{AgentRules, Robots};

/// How a cached entry came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchKind {
    /// 2xx: the file's rules apply.
    Ok,
    /// 4xx or too many redirects: everything allowed.
    Unavailable,
    /// 5xx, 429 or network failure, no usable copy: everything disallowed.
    Unreachable,
    /// Unreachable now, but a copy fetched earlier is still used.
    Stale,
    /// Not fetched: the destination policy forbids the origin.
    Refused,
    /// TLS with the origin failed and no copy is usable.
    BadTls,
}

impl FetchKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FetchKind::Ok => "ok",
            FetchKind::Unavailable => "unavailable",
            FetchKind::Unreachable => "unreachable",
            FetchKind::Stale => "stale",
            FetchKind::Refused => "refused",
            FetchKind::BadTls => "bad_tls",
        }
    }
}

/// What applies to an origin.
#[derive(Clone, Debug)]
pub enum Rules {
    Parsed(Arc<Robots>),
    AllowAll,
    DisallowAll,
    /// The destination policy forbids the origin; the reason says why.
    Refused,
    /// TLS with the origin failed; requests get 502 with the reason.
    BadTls,
}

/// One origin's robots.txt state.
#[derive(Debug)]
pub struct Entry {
    pub rules: Rules,
    pub kind: FetchKind,
    /// Final HTTP status of the last fetch, if one arrived.
    pub status: Option<u16>,
    /// Why, in words, for the non-`Ok` kinds.
    pub reason: Option<String>,
    /// When the rules in use were fetched (for `Stale`: the old copy's time).
    pub fetched_at: SystemTime,
    fetched_instant: Instant,
    pub expires: Instant,
    /// The last 2xx copy and when it was fetched, for stale-on-error.
    last_good: Option<(Arc<Robots>, Instant, SystemTime)>,
    /// Compiled rules per agent token, built on first use.
    compiled: RwLock<Vec<(Box<str>, Arc<AgentRules>)>>,
}

impl Entry {
    /// Seconds since the rules in use were fetched.
    pub fn age(&self) -> Duration {
        self.fetched_instant.elapsed()
    }

    /// Compiled rules for `token` (a lower-cased product token), if a
    /// robots.txt file applies.
    pub fn agent_rules(&self, token: &str) -> Option<Arc<AgentRules>> {
        let Rules::Parsed(robots) = &self.rules else {
            return None;
        };
        if let Ok(compiled) = self.compiled.read()
            && let Some((_, rules)) = compiled.iter().find(|(t, _)| **t == *token)
        {
            return Some(rules.clone());
        }
        let rules = Arc::new(robots.agent_rules(token));
        if let Ok(mut compiled) = self.compiled.write()
            && compiled.len() < 16
            && !compiled.iter().any(|(t, _)| **t == *token)
        {
            compiled.push((token.into(), rules.clone()));
        }
        Some(rules)
    }
}

/// How a lookup was served (for metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    Hit,
    Miss,
    Expired,
}

/// Cache limits and lifetimes.
#[derive(Clone, Debug)]
pub struct CacheSettings {
    pub capacity: usize,
    pub default_ttl: Duration,
    pub min_ttl: Duration,
    pub max_ttl: Duration,
    pub unreachable_retry: Duration,
    pub stale_max: Duration,
}

/// Callback run after every fetch.
pub type FetchHook = Box<dyn Fn(&Fetched) + Send + Sync>;

type Flight = Shared<BoxFuture<'static, Arc<Entry>>>;

struct Slot {
    entry: Option<Arc<Entry>>,
    flight: Option<Flight>,
}

/// The cache. Cheap to share: use it behind an `Arc`.
pub struct RobotsCache {
    slots: Mutex<LruCache<Origin, Slot>>,
    client: HttpClient,
    fetch: FetchSettings,
    settings: CacheSettings,
    /// Called after every fetch (metrics).
    on_fetch: Option<FetchHook>,
}

impl RobotsCache {
    pub fn new(client: HttpClient, fetch: FetchSettings, settings: CacheSettings) -> RobotsCache {
        let cap = NonZeroUsize::new(settings.capacity.max(1)).unwrap_or(NonZeroUsize::MIN);
        RobotsCache {
            slots: Mutex::new(LruCache::new(cap)),
            client,
            fetch,
            settings,
            on_fetch: None,
        }
    }

    /// Registers a callback run after every fetch.
    pub fn on_fetch(mut self, f: impl Fn(&Fetched) + Send + Sync + 'static) -> Self {
        self.on_fetch = Some(Box::new(f));
        self
    }

    /// Number of origins cached.
    pub fn len(&self) -> usize {
        self.slots.lock().map(|s| s.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops an origin's entry; true if there was one.
    pub fn purge(&self, origin: &Origin) -> bool {
        self.slots
            .lock()
            .map(|mut s| s.pop(origin).is_some())
            .unwrap_or(false)
    }

    /// Inserts already-parsed rules for `origin` (used by benchmarks and
    /// tests that fill the cache without fetching).
    pub fn insert_parsed(&self, origin: Origin, robots: Robots) {
        let entry = Arc::new(self.entry_from(
            None,
            Fetched {
                outcome: Outcome::Parsed(robots),
                status: Some(200),
                max_age: None,
                elapsed: Duration::ZERO,
            },
        ));
        if let Ok(mut slots) = self.slots.lock() {
            slots.put(
                origin,
                Slot {
                    entry: Some(entry),
                    flight: None,
                },
            );
        }
    }

    /// The entry for `origin`, fetching robots.txt if it is missing or
    /// expired. Concurrent callers for one origin share one fetch, which runs
    /// in its own task so a caller that gives up does not cancel it.
    pub async fn get(self: &Arc<Self>, origin: &Origin) -> (Arc<Entry>, Lookup) {
        let (flight, lookup) = {
            let Ok(mut slots) = self.slots.lock() else {
                return (Arc::new(self.poisoned()), Lookup::Miss);
            };
            match slots.get_mut(origin) {
                Some(slot) => {
                    if let Some(entry) = &slot.entry
                        && entry.expires > Instant::now()
                    {
                        return (entry.clone(), Lookup::Hit);
                    }
                    let lookup = if slot.entry.is_some() {
                        Lookup::Expired
                    } else {
                        Lookup::Miss
                    };
                    match &slot.flight {
                        Some(f) => (f.clone(), lookup),
                        None => {
                            let f = self.start_flight(origin.clone(), slot.entry.clone());
                            slot.flight = Some(f.clone());
                            (f, lookup)
                        }
                    }
                }
                None => {
                    let f = self.start_flight(origin.clone(), None);
                    slots.put(
                        origin.clone(),
                        Slot {
                            entry: None,
                            flight: Some(f.clone()),
                        },
                    );
                    (f, Lookup::Miss)
                }
            }
        };
        (flight.await, lookup)
    }

    fn start_flight(self: &Arc<Self>, origin: Origin, previous: Option<Arc<Entry>>) -> Flight {
        let flight_origin = origin.clone();
        let this = self.clone();
        let handle = tokio::spawn(async move {
            let fetched = fetch::fetch(&this.client, &origin, &this.fetch).await;
            if let Some(cb) = &this.on_fetch {
                cb(&fetched);
            }
            let entry = Arc::new(this.entry_from(previous.as_deref(), fetched));
            if let Ok(mut slots) = this.slots.lock() {
                match slots.get_mut(&origin) {
                    Some(slot) => {
                        slot.entry = Some(entry.clone());
                        slot.flight = None;
                    }
                    None => {
                        slots.put(
                            origin,
                            Slot {
                                entry: Some(entry.clone()),
                                flight: None,
                            },
                        );
                    }
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
                    if let Ok(mut slots) = this.slots.lock()
                        && let Some(slot) = slots.get_mut(&flight_origin)
                    {
                        slot.flight = None;
                    }
                    Arc::new(this.poisoned())
                }
            }
        }
        .boxed()
        .shared()
    }

    fn poisoned(&self) -> Entry {
        self.entry_from(
            None,
            Fetched {
                outcome: Outcome::Unreachable("internal error fetching robots.txt".into()),
                status: None,
                max_age: None,
                elapsed: Duration::ZERO,
            },
        )
    }

    /// Applies the status policy and lifetimes to a finished fetch.
    fn entry_from(&self, previous: Option<&Entry>, fetched: Fetched) -> Entry {
        let now = Instant::now();
        let wall = SystemTime::now();
        let s = &self.settings;
        let ttl = |max_age: Option<Duration>| match max_age {
            Some(age) => age.clamp(s.min_ttl, s.max_ttl),
            None => s.default_ttl,
        };
        let previous_good = previous.and_then(|p| p.last_good.clone());
        let (rules, kind, reason, expires, last_good, fetched_at, fetched_instant) =
            match fetched.outcome {
                Outcome::Parsed(robots) => {
                    let robots = Arc::new(robots);
                    (
                        Rules::Parsed(robots.clone()),
                        FetchKind::Ok,
                        None,
                        now + ttl(fetched.max_age),
                        Some((robots, now, wall)),
                        wall,
                        now,
                    )
                }
                Outcome::Unavailable(reason) => (
                    Rules::AllowAll,
                    FetchKind::Unavailable,
                    Some(reason),
                    now + ttl(fetched.max_age),
                    None,
                    wall,
                    now,
                ),
                Outcome::Refused(reason) => (
                    Rules::Refused,
                    FetchKind::Refused,
                    Some(reason),
                    now + s.unreachable_retry,
                    None,
                    wall,
                    now,
                ),
                Outcome::BadTls(reason) => (
                    Rules::BadTls,
                    FetchKind::BadTls,
                    Some(reason),
                    now + s.unreachable_retry,
                    None,
                    wall,
                    now,
                ),
                Outcome::Unreachable(reason) => match previous_good {
                    Some((robots, at, at_wall)) if at.elapsed() <= s.stale_max => (
                        Rules::Parsed(robots.clone()),
                        FetchKind::Stale,
                        Some(reason),
                        now + s.unreachable_retry,
                        Some((robots, at, at_wall)),
                        at_wall,
                        at,
                    ),
                    _ => (
                        Rules::DisallowAll,
                        FetchKind::Unreachable,
                        Some(reason),
                        now + s.unreachable_retry,
                        None,
                        wall,
                        now,
                    ),
                },
            };
        Entry {
            rules,
            kind,
            status: fetched.status,
            reason,
            fetched_at,
            fetched_instant,
            expires,
            last_good,
            compiled: RwLock::new(Vec::new()),
        }
    }
}
