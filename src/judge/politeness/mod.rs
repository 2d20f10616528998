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
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lru::LruCache;

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

mod fleet;
pub mod flow;
pub mod inflight;
pub mod latency;
#[cfg(test)]
use fleet::interleaved_slot;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod paused_tests;
