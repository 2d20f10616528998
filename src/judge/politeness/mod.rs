//! Per (origin, agent) politeness: at most one request per interval, where
//! the interval is the larger of robots.txt `Crawl-delay` and a configured
//! default minimum interval; and none while the origin is paused by its
//! own 429 or 503 ([`signals`]).
//!
//! Each key keeps the instant of its last granted slot. A request is given
//! the slot `max(now, last + interval)`; in [`Mode::Delay`] it sleeps until
//! then, in [`Mode::Reject`] it must be free now. Slots are reserved when
//! granted, so concurrent waiters for one key line up one interval apart in
//! arrival order and each knows its exact wait up front, which is what makes
//! `max_wait` enforceable. A held request whose client gives up leaves its
//! key's queue ([`queue`]): those held behind it move up one slot, so no
//! slot is left unused. (governor's limiters only report "not before T"
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
//! The switch: the slots other nodes booked on Redis are not known
//! locally, so when a node notices the outage ([`crate::fleet::Fleet::breaks`]) each
//! request it holds for a shared slot moves to its next own interleaved
//! slot at or after it, and a node's first interleaved slot starts no
//! earlier than one interval after every node has noticed
//! ([`Fleet::interleave_from`]: when Redis last answered, plus two
//! heartbeat periods and the timeout). The return: see `fleet::schedule`
//! (held slots written back, a settling time on the grid). Keys found lost
//! (a schedule this node booked, gone from Redis) are handled as a return
//! ([`crate::fleet::Fleet::keys_lost`]).

use parking_lot::{Mutex, MutexGuard};
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lru::LruCache;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::fleet::Fleet;
use queue::Queue;

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
    /// What an origin's 429 or 503 does ([`signals`]).
    pub signals: SignalSettings,
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
            signals: SignalSettings::default(),
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
    /// Over `max_wait` (or early in Reject mode) because the origin is
    /// paused by the signal it gave (429, 503).
    Paused(RateLimited, Signal),
}

impl NotNow {
    /// The refusal, without what caused it (`FleetUnavailable`: 1 s).
    pub fn limited(self) -> RateLimited {
        match self {
            NotNow::Limited(l) | NotNow::Paused(l, _) => l,
            NotNow::FleetUnavailable => RateLimited {
                retry_after: Duration::from_secs(1),
            },
        }
    }
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
    /// The requests held for their slots, while there are any.
    queue: Option<Box<Queue>>,
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
    /// Numbers the requests held.
    tickets: AtomicU64,
    /// The interleaved fallback's state, made on the first fleet outage:
    /// per key this node's last slot.
    interleaved: OnceLock<Mutex<LruCache<Box<str>, Interleaved>>>,
    /// In a fleet: per key the next free slot of the shared schedule as
    /// this node last booked it (µs of Unix time), to tell lost keys.
    seen: OnceLock<Mutex<LruCache<Box<str>, u64>>>,
    max_tracked: NonZeroUsize,
    /// The origins paused by their own 429 or 503 (without a fleet).
    pauses: Pauses,
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

/// A request waiting for its slot: if it is dropped before the slot comes
/// (its client gave up), it leaves the key's queue and those behind it
/// move up.
struct Held<'a> {
    politeness: &'a Politeness,
    key: &'a str,
    ticket: u64,
    done: bool,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.politeness.release(self.key, self.ticket);
            tracing::debug!(
                key = self.key,
                "request ended while held: Crawl-delay slot given back, those held behind it move up"
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
            tickets: AtomicU64::new(0),
            interleaved: OnceLock::new(),
            seen: OnceLock::new(),
            max_tracked: NonZeroUsize::new(max_tracked).unwrap_or(NonZeroUsize::MIN),
            pauses: Pauses::new(config.signals, max_tracked),
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

    /// What sets the interval for a `Crawl-delay`: `crawl_delay`, or
    /// `default_interval` when it is the larger (or the only one).
    pub fn interval_cause(&self, crawl_delay: Option<f64>) -> &'static str {
        match (self.effective_interval(crawl_delay), self.default_interval) {
            (Some(i), Some(d)) if i <= d => "default_interval",
            (None, _) => "default_interval",
            _ => "crawl_delay",
        }
    }

    /// Waits for (Delay) or checks (Reject) the next slot of `key`, e.g.
    /// `"https://example.com:443 googlebot"`, no earlier than the end of a
    /// pause of its origin ([`signals`]). With neither a crawl delay, a
    /// default interval nor a pause this returns at once without touching
    /// any state.
    ///
    /// Returns how long the request was held. If the future is dropped
    /// while waiting (the client gave up), the request leaves the key's
    /// queue: each request held behind it moves up one slot (and is woken
    /// to wait for that), and the key's next free slot moves one earlier,
    /// so the next request does not wait for a request that will never
    /// be sent.
    pub async fn acquire(
        &self,
        key: &str,
        crawl_delay: Option<f64>,
    ) -> Result<Duration, RateLimited> {
        self.acquire_signalled(key, crawl_delay)
            .await
            .map_err(NotNow::limited)
    }

    /// [`Politeness::acquire`], saying when a refusal is the origin's
    /// pause (its 429 or 503): the slot is booked no earlier than the
    /// pause's end. An origin with neither an interval nor a pause reads
    /// one atomic and no lock.
    pub async fn acquire_signalled(
        &self,
        key: &str,
        crawl_delay: Option<f64>,
    ) -> Result<Duration, NotNow> {
        let interval = self.effective_interval(crawl_delay);
        let now = Instant::now();
        let pause = self.pauses.current(origin_of(key), now);
        let interval = match (interval, &pause) {
            (None, None) => return Ok(Duration::ZERO),
            (None, Some((until, signal))) => {
                let wait = *until - now;
                if !self.may_wait(wait) {
                    return Err(NotNow::Paused(RateLimited { retry_after: wait }, *signal));
                }
                // No schedule to book: every request held goes at the end.
                tokio::time::sleep_until(*until).await;
                return Ok(wait);
            }
            (Some(interval), _) => interval,
        };
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
        let not_before = pause.as_ref().map(|(until, _)| *until);
        let (mut slot, moved) = match self.book(key, interval, now, not_before, ticket) {
            Ok(booked) => booked,
            Err(limited) => {
                return Err(match pause {
                    Some((until, signal)) if now + limited.retry_after <= until => {
                        NotNow::Paused(limited, signal)
                    }
                    _ => NotNow::Limited(limited),
                });
            }
        };
        let Some(moved) = moved else {
            return Ok(Duration::ZERO);
        };
        let mut held = Held {
            politeness: self,
            key,
            ticket,
            done: false,
        };
        tracing::debug!(
            key,
            wait = %format_args!("{:.2} s", (slot - now).as_secs_f64()),
            "held for a Crawl-delay slot"
        );
        loop {
            let notified = moved.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // Slots only move earlier; a key evicted meanwhile keeps the
            // slot last read.
            slot = self.held_slot(key, ticket).unwrap_or(slot).min(slot);
            if slot <= Instant::now() {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep_until(slot) => {}
                () = &mut notified => {}
            }
        }
        held.done = true;
        self.went(key, ticket);
        Ok(slot.saturating_duration_since(now))
    }

    /// Whether a request may be held `wait` (Delay mode, within
    /// `max_wait`).
    fn may_wait(&self, wait: Duration) -> bool {
        match self.mode {
            Mode::Delay { max_wait, .. } => wait <= max_wait,
            Mode::Reject => wait.is_zero(),
        }
    }

    /// Whether a slot `wait` away may be booked with `queued` of held
    /// requests' time before it, each held request taking one `spacing`:
    /// within `max_wait` and `max_queue` (Delay), or free now (Reject).
    fn admits(&self, wait: Duration, queued: Duration, spacing: Duration) -> bool {
        match self.mode {
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
        }
    }

    /// Records a signal `origin` gave (a 429 or 503, its `Retry-After`
    /// read as a wait): the pause it makes, if any (without a fleet).
    pub fn record_signal(
        &self,
        origin: &str,
        status: u16,
        retry_after: Option<Duration>,
    ) -> Option<Signal> {
        self.pauses
            .record(origin, status, retry_after, signals::random_jitter())
    }

    /// The pause in force on `origin` (without a fleet), if any.
    pub fn pause_of(&self, origin: &str) -> Option<Signal> {
        self.pauses
            .current(origin, Instant::now())
            .map(|(_, signal)| signal)
    }

    /// Whether any origin may be paused now, on this process's pauses or
    /// those `fleet` knows of: one atomic read, for the request path.
    pub fn any_paused(&self, fleet: Option<&Fleet>) -> bool {
        match fleet {
            Some(fleet) => fleet.known_pauses().any(),
            None => self.pauses.any(),
        }
    }

    /// The pause in force on `origin` as this node knows it (`fleet`'s
    /// when there is one).
    pub fn known_pause(&self, origin: &str, fleet: Option<&Fleet>) -> Option<Signal> {
        match fleet {
            Some(fleet) => fleet.known_pauses().current(origin),
            None => self.pause_of(origin),
        }
    }

    /// The last signal `origin` gave (without a fleet), paused or not.
    pub fn last_signal(&self, origin: &str) -> Option<Signal> {
        self.pauses.last(origin)
    }

    /// Origins paused now (without a fleet).
    pub fn paused(&self) -> Vec<(String, Signal)> {
        self.pauses.paused()
    }

    /// The signal settings in force.
    pub fn signal_settings(&self) -> &SignalSettings {
        self.pauses.settings()
    }

    /// The interval in force for `key` and how long until its next free
    /// slot (zero if free now); `None` for a key with no state.
    pub fn next_slot(&self, key: &str) -> Option<(Duration, Duration)> {
        let shard = self.shard(key);
        let e = shard.peek(key)?;
        let next = e.last + e.interval;
        Some((e.interval, next.saturating_duration_since(Instant::now())))
    }

    /// Notes a slot booked on the fleet's shared schedule, `wait` from
    /// now: in a fleet this node's own schedules are not used for
    /// booking, and hold what it last saw of the shared one, for
    /// [`Politeness::busiest`] and the admin page.
    pub(crate) fn seen_in_fleet(&self, key: &str, interval: Duration, wait: Duration) {
        let now = Instant::now();
        let last = now + wait;
        let mut shard = self.shard(key);
        match shard.get_mut(key) {
            Some(e) => {
                e.last = e.last.max(last);
                e.interval = interval;
            }
            None => {
                self.evict_idle(&mut shard, now);
                shard.push(
                    key.into(),
                    Entry {
                        last,
                        interval,
                        queue: None,
                    },
                );
            }
        }
    }

    /// `ticket` left the queue of `key` before its slot: those behind it
    /// move up, and the key's latest slot with them.
    fn release(&self, key: &str, ticket: u64) {
        let mut shard = self.shard(key);
        if let Some(e) = shard.peek_mut(key)
            && let Some(queue) = e.queue.as_mut()
            && let Some(latest) = queue.left(ticket)
        {
            e.last = latest;
            if queue.is_empty() {
                e.queue = None;
            }
        }
    }

    /// `ticket`'s slot has come: it leaves the queue of `key`.
    fn went(&self, key: &str, ticket: u64) {
        let mut shard = self.shard(key);
        if let Some(e) = shard.peek_mut(key)
            && let Some(queue) = e.queue.as_mut()
        {
            queue.went(ticket);
            if queue.is_empty() {
                e.queue = None;
            }
        }
    }

    /// The slot `ticket` holds now in the queue of `key`.
    fn held_slot(&self, key: &str, ticket: u64) -> Option<Instant> {
        let shard = self.shard(key);
        shard.peek(key)?.queue.as_ref()?.slot(ticket)
    }

    /// Reserves the next slot for `key` at `now`, not before `not_before`
    /// (the end of the origin's pause), and returns it, or refuses.
    #[cfg(test)]
    fn reserve(
        &self,
        key: &str,
        interval: Duration,
        now: Instant,
        not_before: Option<Instant>,
    ) -> Result<Instant, RateLimited> {
        self.book(key, interval, now, not_before, u64::MAX)
            .map(|(slot, _)| slot)
    }

    /// Reserves the next slot for `key` at `now`, not before `not_before`
    /// (the end of the origin's pause), or refuses. A slot after `now` is
    /// held in the key's queue under `ticket`: returned with what tells
    /// that slots moved.
    fn book(
        &self,
        key: &str,
        interval: Duration,
        now: Instant,
        not_before: Option<Instant>,
        ticket: u64,
    ) -> Result<(Instant, Option<Arc<Notify>>), RateLimited> {
        let from = not_before.map_or(now, |t| t.max(now));
        let mut shard = self.shard(key);
        if let Some(e) = shard.get_mut(key) {
            // A changed Crawl-delay takes effect at once, measured from the
            // previous slot: no reset that would let a request through early.
            let next = (e.last + interval).max(from);
            let wait = next.saturating_duration_since(now);
            // Each held request has booked one interval ahead of the next
            // (from the pause's end), so that tells how many are held.
            let queued = next.saturating_duration_since(from);
            if !self.admits(wait, queued, interval) {
                return Err(RateLimited { retry_after: wait });
            }
            let slot = next.max(now);
            let before = e.last;
            e.last = slot;
            e.interval = interval;
            if slot <= now {
                return Ok((slot, None));
            }
            let queue = e.queue.get_or_insert_with(|| Box::new(Queue::new(before)));
            queue.hold(ticket, slot);
            return Ok((slot, Some(queue.moved())));
        }
        if !self.may_wait(from - now) {
            return Err(RateLimited {
                retry_after: from - now,
            });
        }
        self.evict_idle(&mut shard, now);
        let mut entry = Entry {
            last: from,
            interval,
            queue: None,
        };
        // A first slot at a pause's end is held too, so that it is freed
        // if its client leaves.
        let moved = (from > now).then(|| {
            let before = now.checked_sub(interval).unwrap_or(now);
            let mut queue = Box::new(Queue::new(before));
            queue.hold(ticket, from);
            let moved = queue.moved();
            entry.queue = Some(queue);
            moved
        });
        if let Some((_, old)) = shard.push(key.into(), entry)
            && !self.is_idle(&old, now)
        {
            self.evicted_active.fetch_add(1, Ordering::Relaxed);
        }
        Ok((from, moved))
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

/// The origin of a politeness key (`"<origin> <agent>"`).
pub(crate) fn origin_of(key: &str) -> &str {
    key.rsplit_once(' ').map_or(key, |(origin, _)| origin)
}

mod fleet;
mod queue;
pub mod signals;
pub use crate::http::signal::Signal;
pub mod flow;
pub mod inflight;
pub mod latency;
#[cfg(test)]
use fleet::interleaved_slot;
use signals::Pauses;
pub use signals::SignalSettings;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod paused_tests;
