//! Per (origin, agent) politeness: at most one request per interval, where
//! the interval is the larger of robots.txt `Crawl-delay` and a configured
//! default minimum interval.
//!
//! Each key keeps the instant of its last granted slot. A request is given
//! the slot `max(now, last + interval)`; in [`Mode::Delay`] it sleeps until
//! then, in [`Mode::Reject`] it must be free now. Slots are reserved when
//! granted, so concurrent waiters for one key line up one interval apart in
//! arrival order and each knows its exact wait up front, which is what makes
//! `max_wait` enforceable. (governor's limiters only report "not before T"
//! without reserving T, so N concurrent waiters would all see a wait under
//! `max_wait`, wake together and retry; hence this small scheduler.)
//!
//! Memory is bounded: keys live in an LRU (sharded to keep lock contention
//! low) of at most `max_tracked` entries. Entries idle for longer than both
//! their interval and `idle_evict_after` carry no information (the next
//! request would go at once anyway) and are dropped first; only when the LRU
//! is full of still-active keys is an active one evicted, which is counted
//! in [`Politeness::evicted_active`] since it may let that key's next request
//! through early.
//!
//! In a fleet the schedule is Redis's ([`crate::fleet::schedule`]). When
//! Redis cannot be reached and `fleet.on_unavailable = "local"`, a node of
//! N live nodes keeps the interval across the fleet by booking only its own
//! slots of a wall-clock schedule interleaved by rank ([`interleaved_slot`]):
//! with interval I and rank k (0-based, by sorted node name, from the last
//! list the heartbeat read), slot starts m·I of Unix time with
//! m ≡ k (mod N), each at most once. One node's requests are then N·I
//! apart and two nodes' at least I apart, **up to clock skew**: the nodes'
//! wall clocks are assumed NTP-synchronised, and the gap between two nodes'
//! requests shrinks by at most the skew between their clocks (typically
//! well under 10 ms on NTP; a node whose clock is off by more than the
//! interval breaks the guarantee for its neighbours). Lists that differ
//! between nodes (a node joined or died within a heartbeat or three of the
//! outage) may give two nodes one rank; a node alone (N = 1, or no list
//! ever read) uses the plain local schedule.
//!
//! The switch: slots booked on Redis before the outage are not known
//! locally, so a node's first interleaved slot starts no earlier than one
//! interval after the latest an unqueued shared slot can lie
//! ([`Fleet::interleave_from`]: when Redis last answered, plus a heartbeat
//! period and the timeout). Requests already held on Redis for slots
//! further ahead (a queue at the moment Redis went) keep them and may come
//! closer than the interval to interleaved ones. The return: see
//! `fleet::schedule` (held slots written back, a settling time on the
//! grid).

use parking_lot::{Mutex, MutexGuard};
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lru::LruCache;

use crate::fleet::{Booking, Bounds, Failure, Fleet, OnUnavailable};
use tokio::time::Instant;

/// Default cap on an honoured `Crawl-delay`.
pub(crate) const DEFAULT_MAX_CRAWL_DELAY: Duration = Duration::from_secs(60);

/// What to do when a request comes before its key's next slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Hold the request until its slot; if that is more than `max_wait`
    /// away, or `max_queue` requests are already held for the key, refuse
    /// at once with the wait as `retry_after`.
    Delay {
        /// Longest a request may be held.
        max_wait: Duration,
        /// Most requests held at once per key (0: no bound but `max_wait`).
        max_queue: usize,
    },
    /// Refuse at once with the time until the next free slot.
    Reject,
}

/// Politeness settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolitenessSettings {
    /// Delay or reject early requests.
    pub mode: Mode,
    /// Minimum interval between requests per key even without a
    /// `Crawl-delay`; `None` (the default) means none.
    pub default_interval: Option<Duration>,
    /// Most keys tracked at once.
    pub max_tracked: usize,
    /// Keys unused this long (and past their interval) are dropped first.
    pub idle_evict_after: Duration,
    /// `Crawl-delay` values above this are clamped to it, so one robots.txt
    /// cannot park clients for hours.
    pub max_crawl_delay: Duration,
}

impl Default for PolitenessSettings {
    fn default() -> Self {
        PolitenessSettings {
            mode: Mode::Delay {
                max_wait: Duration::from_secs(600),
                max_queue: 64,
            },
            default_interval: None,
            max_tracked: 100_000,
            idle_evict_after: Duration::from_secs(600),
            max_crawl_delay: DEFAULT_MAX_CRAWL_DELAY,
        }
    }
}

/// The request must not go now; retry after `retry_after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("rate limited: retry after {retry_after:?}")]
pub struct RateLimited {
    /// Time until a slot is (or would be) free.
    pub retry_after: Duration,
}

/// Why a request may not go now on a fleet's schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotNow {
    /// Over `max_wait` or `max_queue` (or early in Reject mode).
    Limited(RateLimited),
    /// Redis unavailable and `fleet.on_unavailable = "refuse"`.
    FleetUnavailable,
}

impl RateLimited {
    /// Whole seconds for a `Retry-After` header, rounded up (at least 1).
    pub fn retry_after_secs(&self) -> u64 {
        let s = self.retry_after.as_secs();
        if self.retry_after.subsec_nanos() > 0 || s == 0 {
            s.saturating_add(1)
        } else {
            s
        }
    }
}

#[derive(Debug)]
struct Entry {
    /// The most recently granted slot (may lie in the future in Delay mode).
    last: Instant,
    /// Interval in force when `last` was granted, for the idle test.
    interval: Duration,
}

type Shard = Mutex<LruCache<Box<str>, Entry>>;

/// Per-key politeness limiter; share one per process (it is `Sync`).
#[derive(Debug)]
pub struct Politeness {
    mode: Mode,
    default_interval: Option<Duration>,
    idle_evict_after: Duration,
    max_crawl_delay: Duration,
    shards: Box<[Shard]>,
    hasher: RandomState,
    evicted_active: AtomicU64,
    /// The interleaved fallback's state, made on the first fleet outage:
    /// per key this node's last slot.
    interleaved: OnceLock<Mutex<LruCache<Box<str>, Interleaved>>>,
    max_tracked: NonZeroUsize,
}

/// This node's last slot of a key on the interleaved schedule.
#[derive(Debug, Clone, Copy)]
struct Interleaved {
    /// Its start, µs of Unix time.
    slot: u64,
    /// The interval it was booked with, µs.
    interval: u64,
}

impl Interleaved {
    /// When the next request may go after it (µs of Unix time).
    fn next(self) -> u64 {
        self.slot.saturating_add(self.interval)
    }
}

/// A request waiting for its slot: the slot is given back if it is dropped
/// before the slot comes.
struct Held<'a> {
    politeness: &'a Politeness,
    key: &'a str,
    slot: Instant,
    interval: Duration,
    done: bool,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.politeness.release(self.key, self.slot, self.interval);
            tracing::debug!(
                key = self.key,
                "request ended while held: Crawl-delay slot given back"
            );
        }
    }
}

/// A request waiting for its slot on the fleet's schedule: the slot is
/// given back, if it is still the latest, when the request is dropped
/// before the slot comes (its client gave up).
struct HeldInFleet<'a> {
    fleet: &'a Arc<Fleet>,
    key: &'a str,
    /// µs on Redis's clock.
    slot: u64,
    interval: Duration,
    done: bool,
}

impl Drop for HeldInFleet<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (fleet, key, slot, interval) = (
            self.fleet.clone(),
            self.key.to_owned(),
            self.slot,
            self.interval,
        );
        rt.spawn(async move {
            if let Ok(true) = fleet.give_back(&key, slot, interval).await {
                tracing::debug!(
                    key,
                    "request ended while held: fleet Crawl-delay slot given back"
                );
            }
        });
    }
}

const MAX_SHARDS: usize = 16;

impl Politeness {
    /// Builds the limiter; `max_tracked` of 0 is taken as 1.
    pub fn new(config: PolitenessSettings) -> Self {
        let max_tracked = config.max_tracked.max(1);
        // One shard per at least 64 keys, so tiny limits stay exact-ish LRU.
        let n = (max_tracked / 64).clamp(1, MAX_SHARDS);
        let per_shard = NonZeroUsize::new(max_tracked / n).unwrap_or(NonZeroUsize::MIN);
        let shards = (0..n)
            .map(|_| Mutex::new(LruCache::new(per_shard)))
            .collect();
        Politeness {
            mode: config.mode,
            default_interval: config.default_interval.filter(|d| !d.is_zero()),
            idle_evict_after: config.idle_evict_after,
            max_crawl_delay: config.max_crawl_delay,
            shards,
            hasher: RandomState::new(),
            evicted_active: AtomicU64::new(0),
            interleaved: OnceLock::new(),
            max_tracked: NonZeroUsize::new(max_tracked).unwrap_or(NonZeroUsize::MIN),
        }
    }

    /// The interval that applies for a robots.txt `Crawl-delay` (seconds):
    /// the larger of the clamped delay and the default. Non-finite, zero or
    /// negative delays are ignored; +inf is clamped like any large value.
    pub(crate) fn effective_interval(&self, crawl_delay: Option<f64>) -> Option<Duration> {
        let crawl = crawl_delay.and_then(|s| {
            if s.is_nan() || s <= 0.0 {
                None
            } else if s >= self.max_crawl_delay.as_secs_f64() {
                Some(self.max_crawl_delay)
            } else {
                Some(Duration::from_secs_f64(s))
            }
        });
        match (crawl, self.default_interval) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b).filter(|d| !d.is_zero()),
        }
    }

    /// Waits for (Delay) or checks (Reject) the next slot of `key`, e.g.
    /// `"https://example.com:443 googlebot"`. With neither a crawl delay nor
    /// a default interval this returns at once without touching any state.
    ///
    /// Returns how long the request was held. If the future is dropped
    /// while waiting (the client gave up), its slot is given back when it
    /// is still the key's latest, so the next request does not wait for a
    /// request that will never be sent; a slot with later ones booked
    /// behind it stays used (the polite direction).
    pub async fn acquire(
        &self,
        key: &str,
        crawl_delay: Option<f64>,
    ) -> Result<Duration, RateLimited> {
        let Some(interval) = self.effective_interval(crawl_delay) else {
            return Ok(Duration::ZERO);
        };
        let now = Instant::now();
        let slot = self.reserve(key, interval, now)?;
        if slot <= now {
            return Ok(Duration::ZERO);
        }
        let mut held = Held {
            politeness: self,
            key,
            slot,
            interval,
            done: false,
        };
        tracing::debug!(
            key,
            wait = %format_args!("{:.2} s", (slot - now).as_secs_f64()),
            "held for a Crawl-delay slot"
        );
        tokio::time::sleep_until(slot).await;
        held.done = true;
        Ok(slot - now)
    }

    /// Like [`Politeness::acquire`], on the fleet's shared schedule: books
    /// on Redis, then sleeps for the wait. When Redis is unavailable the
    /// local schedule is used, or the request refused, as the fleet is
    /// configured, and the fleet counts it. With no interval, Redis is
    /// not contacted.
    pub async fn acquire_in_fleet(
        &self,
        fleet: &Arc<Fleet>,
        key: &str,
        crawl_delay: Option<f64>,
        spent: Duration,
    ) -> Result<Duration, NotNow> {
        let Some(interval) = self.effective_interval(crawl_delay) else {
            return Ok(Duration::ZERO);
        };
        let (max_wait, max_queue) = match self.mode {
            Mode::Delay {
                max_wait,
                max_queue,
            } => (max_wait, max_queue),
            Mode::Reject => (Duration::ZERO, 0),
        };
        // After this node's own slots held from an outage; for a while
        // after one, on its own interleaved slots (`fleet::schedule`).
        // In reject mode nobody holds a slot, and a slot of the grid would
        // seldom start now.
        let grid = if fleet.settling() && matches!(self.mode, Mode::Delay { .. }) {
            let live = fleet.live_nodes();
            (live.count() > 1).then(|| (live.count(), live.rank))
        } else {
            None
        };
        let bounds = Bounds {
            not_before: self.interleaved_next(key).unwrap_or(0),
            grid,
            allowance: Some(fleet.timeout().saturating_sub(spent)),
        };
        match fleet
            .book_within(key, interval, max_wait, max_queue, bounds)
            .await
        {
            Ok((Booking::Wait(wait), slot)) => {
                if !wait.is_zero() {
                    tracing::debug!(key, wait = %format_args!("{:.2} s", wait.as_secs_f64()),
                        "held for a fleet Crawl-delay slot");
                    let mut held = HeldInFleet {
                        fleet,
                        key,
                        slot,
                        interval,
                        done: false,
                    };
                    tokio::time::sleep(wait).await;
                    held.done = true;
                }
                Ok(wait)
            }
            Ok((Booking::Refused(wait), _)) => {
                Err(NotNow::Limited(RateLimited { retry_after: wait }))
            }
            Err(Failure::Call) => {
                // Not an outage: Redis answers, but not this booking (cut
                // short by the request's allowance, or a command that
                // failed on this key). A slot of this node's own would be
                // one the others do not know: refused, as `refuse` does,
                // whatever `on_unavailable` says.
                fleet.fell_back();
                Err(NotNow::FleetUnavailable)
            }
            Err(Failure::Outage) => {
                fleet.fell_back();
                match fleet.on_unavailable() {
                    OnUnavailable::Local => {
                        // A node alone (N = 1) has no grid to keep to, but
                        // its slots start after those it may have booked on
                        // Redis and are written back when Redis returns.
                        let live = fleet.live_nodes();
                        let from = fleet.interleave_from(interval);
                        self.acquire_interleaved(key, interval, (live.count(), live.rank), from)
                            .await
                            .map_err(NotNow::Limited)
                    }
                    OnUnavailable::Refuse => Err(NotNow::FleetUnavailable),
                }
            }
        }
    }

    /// The fleet's local fallback with `nodes` live nodes: books this
    /// node's next slot of the interleaved wall-clock schedule (see the
    /// module documentation) and sleeps until it starts. `max_wait` and
    /// `max_queue` apply as on the local schedule, with this node's own
    /// spacing (`nodes` × `interval`) as the interval for `max_queue`; in
    /// `Mode::Reject` only a slot starting now would do, so requests are
    /// refused with the time to this node's next slot (holding none is
    /// what reject means, and taking a slot already begun would shorten
    /// the next node's gap). A slot is not given back if the client gives
    /// up while held (outages are short, and the slot is this node's own).
    async fn acquire_interleaved(
        &self,
        key: &str,
        interval: Duration,
        (nodes, rank): (usize, usize),
        from: u64,
    ) -> Result<Duration, RateLimited> {
        let now = crate::fleet::now_micros();
        let slot = self.reserve_interleaved(key, interval, (nodes, rank), now.max(from), now)?;
        let wait = Duration::from_micros(slot.saturating_sub(now));
        if !wait.is_zero() {
            tracing::debug!(key, nodes, rank, wait = %format_args!("{:.2} s", wait.as_secs_f64()),
                "held for this node's interleaved Crawl-delay slot (fleet unavailable)");
            tokio::time::sleep(wait).await;
        }
        Ok(wait)
    }

    /// Reserves this node's next interleaved slot for `key` at `now` (µs
    /// of Unix time), starting no earlier than `from`, and returns its
    /// start, or refuses (nothing stored).
    fn reserve_interleaved(
        &self,
        key: &str,
        interval: Duration,
        (nodes, rank): (usize, usize),
        from: u64,
        now: u64,
    ) -> Result<u64, RateLimited> {
        let spacing = interval.saturating_mul(u32::try_from(nodes).unwrap_or(u32::MAX));
        let mut map = self
            .interleaved
            .get_or_init(|| Mutex::new(LruCache::new(self.max_tracked)))
            .lock();
        let last = map.get(key).map(|held| held.slot);
        let slot = interleaved_slot(
            from.max(now),
            crate::fleet::micros(interval),
            nodes as u64,
            rank as u64,
            last,
        );
        let wait = Duration::from_micros(slot.saturating_sub(now));
        // Each request held on this node waits one `spacing` more, counted
        // from when this node's slots begin.
        let queued = Duration::from_micros(slot.saturating_sub(from.max(now)));
        let allowed = match self.mode {
            Mode::Reject => wait.is_zero(),
            Mode::Delay {
                max_wait,
                max_queue,
            } => {
                wait <= max_wait
                    && (max_queue == 0
                        || queued
                            <= spacing.saturating_mul(u32::try_from(max_queue).unwrap_or(u32::MAX)))
            }
        };
        if !allowed {
            return Err(RateLimited { retry_after: wait });
        }
        let held = Interleaved {
            slot,
            interval: crate::fleet::micros(interval),
        };
        if let Some(used) = map.get_mut(key) {
            *used = held;
        } else if let Some((_, evicted)) = map.push(key.into(), held)
            && evicted.slot > now
        {
            self.evicted_active.fetch_add(1, Ordering::Relaxed);
        }
        Ok(slot)
    }

    /// When the next request of `key` may go after this node's last slot
    /// of the interleaved schedule (µs of Unix time), if it has one.
    fn interleaved_next(&self, key: &str) -> Option<u64> {
        let map = self.interleaved.get()?;
        let map = map.lock();
        map.peek(key).map(|held| held.next())
    }

    /// Writes this node's slots of the interleaved schedule that still
    /// hold requests back (or whose interval has not run out) into the
    /// fleet's shared schedule, so no node books closer to them: called
    /// when Redis answers again after an outage. Returns how many keys
    /// were written (a key that fails is skipped; during a new outage the
    /// calls fail at once).
    pub async fn write_back(&self, fleet: &Fleet) -> usize {
        use futures_util::StreamExt;
        let now = crate::fleet::now_micros();
        let nodes = u32::try_from(fleet.live_nodes().count()).unwrap_or(u32::MAX);
        let max_wait = match self.mode {
            Mode::Delay { max_wait, .. } => max_wait,
            Mode::Reject => Duration::ZERO,
        };
        let held: Vec<(Box<str>, Interleaved)> = match self.interleaved.get() {
            Some(map) => map
                .lock()
                .iter()
                .filter(|(_, held)| held.next() > now)
                .map(|(key, held)| (key.clone(), *held))
                .collect(),
            None => return 0,
        };
        // No slot lies further ahead than a booking may wait plus a round
        // of the grid.
        futures_util::stream::iter(held)
            .map(|(key, held)| async move {
                let interval = Duration::from_micros(held.interval);
                let within = max_wait + interval.saturating_mul(nodes.saturating_add(1));
                fleet
                    .raise(&key, held.next(), interval, within)
                    .await
                    .is_ok()
            })
            .buffer_unordered(16)
            .filter(|written| std::future::ready(*written))
            .count()
            .await
    }

    /// The interval in force for `key` and how long until its next free
    /// slot (zero if free now); `None` for a key with no state.
    pub fn next_slot(&self, key: &str) -> Option<(Duration, Duration)> {
        let shard = self.shard(key);
        let e = shard.peek(key)?;
        let next = e.last + e.interval;
        Some((e.interval, next.saturating_duration_since(Instant::now())))
    }

    /// Gives `slot` back if it is still `key`'s latest.
    fn release(&self, key: &str, slot: Instant, interval: Duration) {
        let mut shard = self.shard(key);
        if let Some(e) = shard.peek_mut(key)
            && e.last == slot
            && let Some(previous) = slot.checked_sub(interval)
        {
            e.last = previous;
        }
    }

    /// Reserves the next slot for `key` at `now` and returns it, or refuses.
    fn reserve(&self, key: &str, interval: Duration, now: Instant) -> Result<Instant, RateLimited> {
        let mut shard = self.shard(key);
        if let Some(e) = shard.get_mut(key) {
            // A changed Crawl-delay takes effect at once, measured from the
            // previous slot: no reset that would let a request through early.
            let next = e.last + interval;
            let wait = next.saturating_duration_since(now);
            let allowed = match self.mode {
                Mode::Reject => wait.is_zero(),
                // Each held request has booked one interval ahead of the
                // next, so the wait tells how many are held.
                Mode::Delay {
                    max_wait,
                    max_queue,
                } => {
                    wait <= max_wait
                        && (max_queue == 0
                            || wait
                                <= interval
                                    .saturating_mul(u32::try_from(max_queue).unwrap_or(u32::MAX)))
                }
            };
            if !allowed {
                return Err(RateLimited { retry_after: wait });
            }
            let slot = next.max(now);
            e.last = slot;
            e.interval = interval;
            return Ok(slot);
        }
        self.evict_idle(&mut shard, now);
        let entry = Entry {
            last: now,
            interval,
        };
        if let Some((_, old)) = shard.push(key.into(), entry)
            && !self.is_idle(&old, now)
        {
            self.evicted_active.fetch_add(1, Ordering::Relaxed);
        }
        Ok(now)
    }

    fn is_idle(&self, e: &Entry, now: Instant) -> bool {
        now.saturating_duration_since(e.last) >= self.idle_evict_after.max(e.interval)
    }

    /// Drops idle entries from the LRU end, so a full shard evicts those
    /// before an active one. Amortised O(1): each entry is dropped once.
    fn evict_idle(&self, shard: &mut LruCache<Box<str>, Entry>, now: Instant) {
        while let Some((_, e)) = shard.peek_lru() {
            if !self.is_idle(e, now) {
                break;
            }
            shard.pop_lru();
        }
    }

    fn shard(&self, key: &str) -> MutexGuard<'_, LruCache<Box<str>, Entry>> {
        let i = (self.hasher.hash_one(key) as usize) % self.shards.len();
        // A panic while holding the lock leaves a consistent map (every
        // update is a single assignment), so poisoning is ignored.
        self.shards[i].lock()
    }

    /// The keys whose next free slot is furthest away (requests are held
    /// or booked for them), at most `limit`, furthest first: each key with
    /// its interval and the time until its next free slot. A scan of every
    /// key, one shard lock at a time: for the admin listener's page, not
    /// the request path.
    pub(crate) fn busiest(&self, limit: usize) -> Vec<(String, Duration, Duration)> {
        let now = Instant::now();
        let mut busy = Vec::new();
        for s in self.shards.iter() {
            let shard = s.lock();
            for (key, e) in shard.iter() {
                let wait = (e.last + e.interval).saturating_duration_since(now);
                if !wait.is_zero() {
                    busy.push((key.to_string(), e.interval, wait));
                }
            }
            // Keep the memory of the scan bounded by a few times `limit`.
            if busy.len() > limit.saturating_mul(4).max(64) {
                busy.sort_by_key(|b| std::cmp::Reverse(b.2));
                busy.truncate(limit);
            }
        }
        busy.sort_by_key(|b| std::cmp::Reverse(b.2));
        busy.truncate(limit);
        busy
    }

    /// Keys currently tracked.
    pub fn tracked(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Most keys that can be tracked (`max_tracked` rounded down to a
    /// multiple of the shard count).
    pub fn capacity(&self) -> usize {
        self.shards.iter().map(|s| s.lock().cap().get()).sum()
    }

    /// Keys evicted while still inside their interval (capacity pressure);
    /// their next request may have gone early. Worth a metric or a warning.
    pub fn evicted_active(&self) -> u64 {
        self.evicted_active.load(Ordering::Relaxed)
    }

    /// Drops every idle entry (a full scan, one shard lock at a time); call
    /// from a periodic task if memory matters between bursts. New keys
    /// already evict idle ones from the LRU end as they arrive, but that
    /// stops at the first active entry.
    pub fn sweep(&self) {
        let now = Instant::now();
        for s in self.shards.iter() {
            let mut shard = s.lock();
            let idle: Vec<Box<str>> = shard
                .iter()
                .filter(|(_, e)| self.is_idle(e, now))
                .map(|(k, _)| k.clone())
                .collect();
            for k in idle {
                shard.pop(&k);
            }
        }
    }
}

/// The start (µs of Unix time) of this node's next slot on the
/// interleaved wall-clock schedule: the first m·`interval` with
/// m ≡ `rank` (mod `nodes`) that is not before `now` and, when this node
/// last used the slot starting at `last`, not before `last + interval`
/// (so each slot is used at most once, and a changed interval applies from
/// the previous slot). A node alone (`nodes` ≤ 1) keeps to no grid: its
/// slot is the later of `now` and `last + interval`. Pure arithmetic on
/// microseconds; `interval` of 0 is taken as 1.
pub(crate) fn interleaved_slot(
    now: u64,
    interval: u64,
    nodes: u64,
    rank: u64,
    last: Option<u64>,
) -> u64 {
    let interval = interval.max(1);
    if nodes <= 1 {
        return last.map_or(now, |l| now.max(l.saturating_add(interval)));
    }
    let mut m = now.div_ceil(interval);
    if let Some(last) = last {
        m = m.max(last.saturating_add(interval).div_ceil(interval));
    }
    m = m.saturating_add((rank % nodes + nodes - m % nodes) % nodes);
    m.saturating_mul(interval)
}

/// The key of one Crawl-delay schedule: an origin and the robots agent
/// its requests are judged as. Used as the `&str` it derefs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key(Box<str>);

impl Key {
    pub fn new(origin: &crate::http::origin::Origin, agent: &str) -> Key {
        Key(format!("{origin} {agent}").into())
    }
}

impl std::ops::Deref for Key {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(mode: Mode, default_interval: Option<Duration>) -> Politeness {
        Politeness::new(PolitenessSettings {
            mode,
            default_interval,
            max_tracked: 1000,
            idle_evict_after: Duration::from_secs(600),
            max_crawl_delay: Duration::from_secs(60),
        })
    }

    #[test]
    fn effective_interval_is_max_and_clamped() {
        let none = p(Mode::Reject, None);
        assert_eq!(none.effective_interval(None), None);
        assert_eq!(none.effective_interval(Some(0.0)), None);
        assert_eq!(none.effective_interval(Some(-3.0)), None);
        assert_eq!(none.effective_interval(Some(f64::NAN)), None);
        assert_eq!(
            none.effective_interval(Some(0.5)),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            none.effective_interval(Some(3600.0)),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            none.effective_interval(Some(f64::INFINITY)),
            Some(Duration::from_secs(60))
        );
        let dflt = p(Mode::Reject, Some(Duration::from_secs(2)));
        assert_eq!(dflt.effective_interval(None), Some(Duration::from_secs(2)));
        assert_eq!(
            dflt.effective_interval(Some(0.5)),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            dflt.effective_interval(Some(5.0)),
            Some(Duration::from_secs(5))
        );
        let zero = p(Mode::Reject, Some(Duration::ZERO));
        assert_eq!(zero.effective_interval(None), None);
    }

    #[test]
    fn reserve_lines_up_slots_in_delay_mode() {
        let pol = p(
            Mode::Delay {
                max_wait: Duration::from_secs(10),
                max_queue: 0,
            },
            None,
        );
        let t0 = Instant::now();
        let i = Duration::from_secs(1);
        assert_eq!(pol.reserve("k", i, t0), Ok(t0));
        assert_eq!(pol.reserve("k", i, t0), Ok(t0 + i));
        assert_eq!(pol.reserve("k", i, t0), Ok(t0 + 2 * i));
        // Long after: the slot is "now", not in the past.
        let later = t0 + Duration::from_secs(100);
        assert_eq!(pol.reserve("k", i, later), Ok(later));
    }

    #[test]
    fn changed_interval_applies_from_last_slot() {
        let pol = p(Mode::Reject, None);
        let t0 = Instant::now();
        assert!(pol.reserve("k", Duration::from_secs(1), t0).is_ok());
        let t1 = t0 + Duration::from_millis(1500);
        // With the old 1 s delay this would pass; the new 2 s one refuses.
        assert_eq!(
            pol.reserve("k", Duration::from_secs(2), t1),
            Err(RateLimited {
                retry_after: Duration::from_millis(500)
            })
        );
        // And a shorter one takes effect at once too.
        assert!(pol.reserve("k", Duration::from_secs(1), t1).is_ok());
    }

    #[test]
    fn retry_after_secs_rounds_up() {
        let r = |ms| RateLimited {
            retry_after: Duration::from_millis(ms),
        };
        assert_eq!(r(0).retry_after_secs(), 1);
        assert_eq!(r(1).retry_after_secs(), 1);
        assert_eq!(r(1000).retry_after_secs(), 1);
        assert_eq!(r(1001).retry_after_secs(), 2);
    }

    #[test]
    fn the_busiest_keys_are_those_booked_furthest_ahead() {
        let pol = p(
            Mode::Delay {
                max_wait: Duration::from_secs(600),
                max_queue: 0,
            },
            None,
        );
        let t0 = Instant::now();
        let i = Duration::from_secs(10);
        for (key, booked) in [("a", 1), ("b", 4), ("c", 2)] {
            for _ in 0..booked {
                pol.reserve(key, i, t0).ok();
            }
        }
        let busy = pol.busiest(2);
        let keys: Vec<&str> = busy.iter().map(|(k, _, _)| k.as_str()).collect();
        assert_eq!(keys, ["b", "c"]);
        assert_eq!(busy[0].1, i);
        // b's next free slot is four intervals on, less the time passed.
        assert!(busy[0].2 > Duration::from_secs(39) && busy[0].2 <= Duration::from_secs(40));
        assert_eq!(pol.busiest(10).len(), 3);
    }

    const S: u64 = 1_000_000;

    #[test]
    fn interleaved_slots_belong_to_their_rank() {
        // Three nodes, 1 s: node k takes the slots starting k, k+3, k+6 … s.
        for k in 0..3 {
            assert_eq!(interleaved_slot(0, S, 3, k, None), k * S);
        }
        // Just after a slot start: the next one of this rank.
        assert_eq!(interleaved_slot(1, S, 3, 0, None), 3 * S);
        assert_eq!(interleaved_slot(1, S, 3, 1, None), S);
        // Exactly on one of its own slots: that one, no wait.
        assert_eq!(interleaved_slot(6 * S, S, 3, 0, None), 6 * S);
        // Each slot once: after using 6 s, node 0's next is 9 s.
        assert_eq!(interleaved_slot(6 * S, S, 3, 0, Some(6 * S)), 9 * S);
        // A booked slot still ahead counts: the next one is N intervals on.
        assert_eq!(interleaved_slot(S, S, 3, 0, Some(9 * S)), 12 * S);
        // One node: every slot is its own.
        // Alone: no grid, only the interval after the last slot.
        assert_eq!(interleaved_slot(S + 1, S, 1, 0, None), S + 1);
        assert_eq!(interleaved_slot(S + 1, S, 1, 0, Some(S)), 2 * S);
        // A longer interval applies from the last slot, not only the lattice.
        let next = interleaved_slot(3 * S, 3 * S / 2, 3, 0, Some(3 * S));
        assert!(next >= 3 * S + 3 * S / 2, "{next}");
        assert_eq!(next % (3 * S / 2), 0);
        assert_eq!((next / (3 * S / 2)) % 3, 0);
        // Zeros are taken as 1, and nothing overflows.
        assert_eq!(interleaved_slot(5, 0, 0, 7, None), 5);
        let far = interleaved_slot(u64::MAX - 10, S, 3, 2, Some(u64::MAX - 10));
        assert!(far >= u64::MAX - S * 4);
    }

    #[test]
    fn interleaved_nodes_keep_the_interval_between_them() {
        // Three nodes booking at pseudo-random moments, each as often as it
        // may: the union of their slots never has two closer than I, and
        // each node's own are N·I apart.
        let (i, n) = (700_000u64, 3u64);
        let mut all = Vec::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for k in 0..n {
            let mut last = None;
            let mut now = 1_764_000_000 * S;
            let mut mine = Vec::new();
            for _ in 0..200 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                now += seed % (3 * i);
                let slot = interleaved_slot(now, i, n, k, last);
                assert!(slot >= now);
                assert_eq!((slot / i) % n, k);
                last = Some(slot);
                mine.push(slot);
            }
            for w in mine.windows(2) {
                assert!(w[1] >= w[0] + n * i, "{w:?}");
            }
            all.extend(mine);
        }
        all.sort_unstable();
        for w in all.windows(2) {
            assert!(w[1] >= w[0] + i, "{w:?}");
        }
    }

    #[test]
    fn interleaved_booking_keeps_max_wait_and_max_queue() {
        let pol = p(
            Mode::Delay {
                max_wait: Duration::from_secs(5),
                max_queue: 0,
            },
            None,
        );
        let i = Duration::from_secs(1);
        let now = 10 * S;
        // Node 1 of 3: 10 s is its own; then 13 s; 16 s is past max_wait.
        assert_eq!(pol.reserve_interleaved("k", i, (3, 1), 0, now), Ok(10 * S));
        assert_eq!(pol.reserve_interleaved("k", i, (3, 1), 0, now), Ok(13 * S));
        assert_eq!(
            pol.reserve_interleaved("k", i, (3, 1), 0, now),
            Err(RateLimited {
                retry_after: Duration::from_secs(6)
            })
        );
        // Nothing was stored by the refusal.
        assert_eq!(
            pol.reserve_interleaved("k", i, (3, 1), 0, 13 * S),
            Ok(16 * S)
        );
        // Not before `from` (just after the last shared slot).
        assert_eq!(
            pol.reserve_interleaved("k2", i, (3, 0), 5 * S + 1, S),
            Ok(6 * S)
        );
        // max_queue counts this node's own spacing (N·I) per held request,
        // from `from` on.
        let queued = p(
            Mode::Delay {
                max_wait: Duration::from_secs(600),
                max_queue: 1,
            },
            None,
        );
        assert_eq!(queued.reserve_interleaved("k", i, (3, 0), 0, 1), Ok(3 * S));
        assert!(queued.reserve_interleaved("k", i, (3, 0), 0, 1).is_err());
        assert_eq!(
            queued.reserve_interleaved("k3", i, (3, 0), 10 * S + 1, 1),
            Ok(12 * S)
        );
        assert!(
            queued
                .reserve_interleaved("k3", i, (3, 0), 10 * S + 1, 1)
                .is_err()
        );
        // Reject: only a slot starting now.
        let reject = p(Mode::Reject, None);
        assert_eq!(
            reject.reserve_interleaved("k", i, (2, 0), 0, 4 * S),
            Ok(4 * S)
        );
        assert_eq!(
            reject.reserve_interleaved("k", i, (2, 0), 0, 4 * S),
            Err(RateLimited {
                retry_after: Duration::from_secs(2)
            })
        );
    }

    #[test]
    fn idle_entries_go_before_active_ones() {
        let pol = Politeness::new(PolitenessSettings {
            mode: Mode::Reject,
            default_interval: None,
            max_tracked: 2,
            idle_evict_after: Duration::from_secs(5),
            max_crawl_delay: Duration::from_secs(60),
        });
        let t0 = Instant::now();
        let i = Duration::from_secs(1);
        pol.reserve("a", i, t0).ok();
        pol.reserve("b", i, t0).ok();
        assert_eq!(pol.tracked(), 2);
        // Both idle by t0+10s: inserting "c" drops them, nothing active lost.
        pol.reserve("c", i, t0 + Duration::from_secs(10)).ok();
        assert_eq!(pol.tracked(), 1);
        assert_eq!(pol.evicted_active(), 0);
        let t1 = t0 + Duration::from_secs(10);
        pol.reserve("d", i, t1).ok();
        pol.reserve("e", i, t1).ok();
        assert_eq!(pol.tracked(), 2);
        assert_eq!(pol.evicted_active(), 1);
    }
}

#[cfg(test)]
#[path = "politeness_tests.rs"]
mod politeness_tests;
