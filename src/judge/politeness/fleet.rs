//! Politeness on the fleet's shared schedule (`crate::fleet::schedule`),
//! and the interleaved local fallback when Redis is unavailable (see the
//! parent module).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lru::LruCache;
use parking_lot::Mutex;

use super::{Interleaved, Mode, NotNow, Politeness, RateLimited, Signal};
use crate::fleet::{Booking, Bounds, Failure, Fleet, OnUnavailable};

/// A request waiting for its slot on the fleet's schedule: when it is
/// dropped before the slot comes (its client gave up) while still on its
/// shared slot, it leaves the fleet's queue for the key, and those held
/// behind it move up. Moved to a slot of this node's own (the shared
/// schedule broke), it keeps that one.
struct HeldInFleet<'a> {
    fleet: &'a Arc<Fleet>,
    key: &'a str,
    ticket: String,
    interval: Duration,
    /// Still on its shared slot.
    shared: bool,
    done: bool,
}

impl Drop for HeldInFleet<'_> {
    fn drop(&mut self) {
        if self.done || !self.shared {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (fleet, key, ticket, interval) = (
            self.fleet.clone(),
            self.key.to_owned(),
            std::mem::take(&mut self.ticket),
            self.interval,
        );
        rt.spawn(async move {
            if let Ok(Some(moved)) = fleet.leave_queue(&key, &ticket, interval).await {
                tracing::debug!(
                    key,
                    moved,
                    "request ended while held: it left the fleet's queue"
                );
            }
        });
    }
}

/// What a request held on the fleet's schedule listens to.
struct Listening {
    watch: crate::fleet::queue::Watch,
    breaks: tokio::sync::watch::Receiver<u64>,
}

impl Politeness {
    /// Sleeps until `slot` (µs on Redis's clock), due after `wait`:
    /// earlier when the request's slot moves up (woken by a `moved` event,
    /// the slot read again); on a slot of this node's own when the shared
    /// schedule breaks (an outage noticed, the fleet's keys lost), since
    /// the other nodes can no longer see the shared one. Returns how long
    /// it waited.
    async fn wait_in_fleet(
        &self,
        held: &mut HeldInFleet<'_>,
        listening: &mut Listening,
        mut slot: u64,
        wait: Duration,
    ) -> Duration {
        let (fleet, key) = (held.fleet, held.key);
        let started = tokio::time::Instant::now();
        let mut deadline = started + wait;
        let mut moved = Box::pin(listening.watch.moved.notified());
        moved.as_mut().enable();
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => break,
                () = &mut moved, if held.shared => {
                    // Listening again before reading: a move meanwhile is
                    // not missed.
                    moved = Box::pin(listening.watch.moved.notified());
                    moved.as_mut().enable();
                    if let Some(now) = fleet.held_slot(key, &held.ticket).await
                        && now < slot
                    {
                        deadline = deadline
                            .checked_sub(Duration::from_micros(slot - now))
                            .unwrap_or(started);
                        slot = now;
                    }
                }
                broke = listening.breaks.changed(), if held.shared => {
                    held.shared = false;
                    if broke.is_ok() {
                        deadline = self.move_to_own_slot(fleet, key, held.interval, deadline).await;
                    }
                }
            }
        }
        deadline.saturating_duration_since(started)
    }

    /// A request held until `deadline` on a shared slot moves to this
    /// node's next own slot of the interleaved schedule at or after it,
    /// starting no earlier than every node has stopped using shared slots
    /// ([`Fleet::lost_from`] after lost keys, [`Fleet::interleave_from`]
    /// in an outage); without a limit, as it is held already. When Redis
    /// answers (lost keys) the slot is booked there, after those this node
    /// booked meanwhile; else on this node's interleaved schedule, which
    /// the return from the outage writes back. Returns the new deadline.
    async fn move_to_own_slot(
        &self,
        fleet: &Arc<Fleet>,
        key: &str,
        interval: Duration,
        deadline: tokio::time::Instant,
    ) -> tokio::time::Instant {
        let now = crate::fleet::now_micros();
        let at = tokio::time::Instant::now();
        let was = now.saturating_add(crate::fleet::micros(deadline.saturating_duration_since(at)));
        let live = fleet.live_nodes();
        if fleet.is_reachable() {
            let bounds = Bounds {
                not_before: was.max(fleet.lost_from(interval)),
                grid: (live.count() > 1).then(|| (live.count(), live.rank)),
                allowance: None,
                expected: false,
            };
            let no_limit = Duration::from_secs(24 * 3600);
            if let Ok((Booking::Wait(wait), _)) = fleet
                .book_within(key, interval, no_limit, 0, bounds, "")
                .await
            {
                tracing::debug!(key, wait = %format_args!("{:.2} s", wait.as_secs_f64()),
                    "held request moved from its shared slot to this node's own (the fleet's keys were lost)");
                return tokio::time::Instant::now() + wait;
            }
        }
        let from = fleet.interleave_from(interval).max(was);
        let slot = self.hold_interleaved(key, interval, (live.count(), live.rank), from);
        tracing::debug!(key, moved_by = %format_args!("{:.2} s", slot.saturating_sub(was) as f64 / 1e6),
            "held request moved from its shared slot to this node's own (Redis unavailable)");
        at + Duration::from_micros(slot.saturating_sub(now))
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
        // An origin with no interval books only when this node knows it
        // paused (`fleet::pauses`): no Redis call otherwise.
        let known = fleet.known_pauses().current(super::origin_of(key));
        let interval = match (self.effective_interval(crawl_delay), known) {
            (Some(interval), _) => interval,
            (None, Some(_)) => Duration::ZERO,
            (None, None) => return Ok(Duration::ZERO),
        };
        let (max_wait, max_queue) = match self.mode {
            Mode::Delay {
                max_wait,
                max_queue,
            } => (max_wait, max_queue),
            Mode::Reject => (Duration::ZERO, 0),
        };
        let started = tokio::time::Instant::now();
        let ticket = fleet.ticket();
        // Listening before booking: a move or a break right after is not
        // missed.
        let mut listening = Listening {
            watch: fleet.watch_moves(key),
            breaks: fleet.breaks(),
        };
        listening.breaks.borrow_and_update();
        let mut lost = false;
        let booked = loop {
            // After this node's own slots held from an outage; for a while
            // after one, on its own interleaved slots (`fleet::schedule`),
            // and so is the booking that finds Redis back (the other
            // nodes hold slots of theirs). In reject mode nobody holds a
            // slot, and a slot of the grid would seldom start now.
            let grid = if (fleet.settling() || !fleet.is_reachable())
                && matches!(self.mode, Mode::Delay { .. })
            {
                let live = fleet.live_nodes();
                (live.count() > 1).then(|| (live.count(), live.rank))
            } else {
                None
            };
            let now = crate::fleet::now_micros();
            let bounds = Bounds {
                not_before: self
                    .interleaved_next(key)
                    .unwrap_or(0)
                    .max(fleet.lost_from(interval)),
                grid,
                allowance: Some(
                    fleet
                        .timeout()
                        .saturating_sub(spent)
                        .saturating_sub(started.elapsed()),
                ),
                expected: !lost && self.expected(key, interval, now),
            };
            let booked = fleet
                .book_paused(key, interval, max_wait, max_queue, bounds, &ticket)
                .await;
            if let Ok((Booking::Wait(wait), _, _)) = booked {
                self.saw(key, now + crate::fleet::micros(wait + interval));
            }
            if !matches!(booked, Ok((Booking::Lost, _, _))) {
                break booked;
            }
            // The key this node booked is gone: the fleet's keys were
            // lost. Handled as the return from an outage, then booked again
            // (on this node's own slots, after every node has heard).
            fleet.keys_lost();
            listening.breaks.borrow_and_update();
            lost = true;
        };
        // A pause this node did not hear of (its subscription was down, or
        // it started after): its signal is read from Redis once.
        if let Ok((_, _, left)) = &booked
            && !left.is_zero()
            && known.is_none()
            && fleet
                .known_pauses()
                .current(super::origin_of(key))
                .is_none()
        {
            let _ = fleet.shared_schedule(key).await;
        }
        // The pause the booking found, as this node knows it (learnt from
        // the booking if its message was missed).
        let paused = match &booked {
            Ok((_, _, left)) if !left.is_zero() => Some(
                known
                    .or_else(|| fleet.known_pauses().current(super::origin_of(key)))
                    .unwrap_or_else(|| {
                        let until = crate::http::signal::unix_ms(std::time::SystemTime::now())
                            .saturating_add(crate::fleet::millis(*left));
                        let unknown = Signal {
                            status: 0,
                            retry_after: None,
                            given: 0,
                            until,
                            level: 0,
                        };
                        fleet
                            .known_pauses()
                            .learn(super::origin_of(key), *left, unknown);
                        unknown
                    }),
            ),
            _ => None,
        };
        match booked {
            Ok((Booking::Wait(wait), slot, _)) => {
                fleet.seal_booking(key, slot, interval);
                // What this node saw of the shared schedule, for the admin
                // page (its own schedules are unused in a fleet).
                self.seen_in_fleet(key, interval, wait);
                if wait.is_zero() {
                    return Ok(wait);
                }
                tracing::debug!(key, wait = %format_args!("{:.2} s", wait.as_secs_f64()),
                    "held for a fleet Crawl-delay slot");
                let mut held = HeldInFleet {
                    fleet,
                    key,
                    ticket,
                    interval,
                    shared: true,
                    done: false,
                };
                let waited = self
                    .wait_in_fleet(&mut held, &mut listening, slot, wait)
                    .await;
                held.done = true;
                Ok(waited)
            }
            Ok((Booking::Refused(wait), _, left)) => {
                let limited = RateLimited { retry_after: wait };
                Err(match paused {
                    Some(signal) if wait <= left => NotNow::Paused(limited, signal),
                    _ => NotNow::Limited(limited),
                })
            }
            // Twice lost in a row: Redis answers, but not as a schedule.
            Ok((Booking::Lost, _, _)) | Err(Failure::Call) => {
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

    /// Whether `key`'s schedule must be in Redis now (µs of Unix time
    /// `now`): this node booked it, and the key is kept two intervals past
    /// the next free slot it saw (one of margin here).
    fn expected(&self, key: &str, interval: Duration, now: u64) -> bool {
        let Some(seen) = self.seen.get() else {
            return false;
        };
        seen.lock()
            .peek(key)
            .is_some_and(|next| now < next.saturating_add(crate::fleet::micros(interval)))
    }

    /// This node saw `key`'s next free slot at `next` (µs of Unix time).
    fn saw(&self, key: &str, next: u64) {
        let mut seen = self
            .seen
            .get_or_init(|| Mutex::new(LruCache::new(self.max_tracked)))
            .lock();
        match seen.get_mut(key) {
            Some(was) => *was = next,
            None => {
                seen.push(key.into(), next);
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
    pub(super) fn reserve_interleaved(
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
        if !self.admits(wait, queued, spacing) {
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

    /// Books this node's next interleaved slot for `key` at or after
    /// `from` (µs of Unix time) for a request held already (no limit
    /// applies), and returns its start.
    fn hold_interleaved(
        &self,
        key: &str,
        interval: Duration,
        (nodes, rank): (usize, usize),
        from: u64,
    ) -> u64 {
        let mut map = self
            .interleaved
            .get_or_init(|| Mutex::new(LruCache::new(self.max_tracked)))
            .lock();
        let last = map.get(key).map(|held| held.slot);
        let slot = interleaved_slot(
            from,
            crate::fleet::micros(interval),
            nodes as u64,
            rank as u64,
            last,
        );
        let held = Interleaved {
            slot,
            interval: crate::fleet::micros(interval),
        };
        match map.get_mut(key) {
            Some(used) => *used = held,
            None => {
                map.push(key.into(), held);
            }
        }
        slot
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
