//! One Crawl-delay schedule per origin and agent for the whole fleet.
//!
//! A booking is one Lua script run atomically on Redis, on Redis's own
//! clock (`TIME`), so the nodes' clocks do not matter. The key holds the
//! next free slot in microseconds; the script books `max(now, next)`,
//! stores `booked + interval` with an expiry of a few intervals, and
//! returns the wait. `max_wait` and `max_queue` are checked on the shared
//! schedule exactly as the local politeness checks them: each held request
//! has booked one interval ahead of the next, so a wait of more than
//! `max_queue` intervals means `max_queue` requests are held fleet-wide.
//! No second key is needed.
//!
//! A request whose client gives up while held leaves the fleet's queue for
//! the key, as on the local schedule, and those held behind it on every
//! node move up ([`super::queue`]): a client cannot hold an origin's queue
//! for the fleet by sending `max_queue` requests and leaving, and no slot
//! is left unused.
//!
//! The return from an outage: slots a node held on the interleaved local
//! schedule (`judge::politeness`) are unknown to Redis. When Redis answers
//! again, each node writes its own into the shared schedule
//! ([`Fleet::raise`]), and for [`Fleet::settle`] after that it books on
//! Redis only its own slots of the interleaved schedule ([`Bounds::grid`]):
//! a node that has not noticed yet that Redis is back still books its own
//! slots locally, and two ranks' slots are an interval apart. Once every
//! node has had the time to notice and write back, bookings are plain
//! again. Redis back without its keys (a flush, a failover to an empty
//! replica) is found by the booking script: a node that booked a key
//! lately says it must exist, and when it does not the script books
//! nothing ([`Booking::Lost`]); the node and, told by it, the others
//! handle it as a return (`fleet::queue`).

use std::time::Duration;

use super::{Failure, Fleet, Unavailable, micros};

/// Books the next slot of KEYS[1]. ARGV: interval, max_wait, max_queue
/// (microseconds, microseconds, count; max_queue 0: no bound), not before
/// (microseconds of Unix time, 0: now), nodes and rank (nodes > 1: only
/// the slots m·interval with m ≡ rank mod nodes, each node's spacing then
/// nodes × interval for max_queue); ticket (a held request's, see
/// `fleet::queue`: added to KEYS[1] .. ':held' when the booking waits; empty
/// or absent: none); expected ('1': this node booked the key recently, so
/// it must exist: when it does not, the fleet's keys were lost and `{2, 0,
/// 0, 0}` is returned, nothing booked). KEYS[2] is the origin's pause
/// ([`super::pauses`]): no slot before its end, and `max_queue` counts from
/// it; ARGV[11] is the end of the pause the node knows (µs of Unix time,
/// 0: none), taken as the pause if it is later by more than ARGV[12] µs
/// (the nodes' and Redis's clocks, and the time a message takes, are a
/// little apart: within that, Redis's pause stands). KEYS[3] holds the
/// schedule's seals ([`super::floor`]), returned when ARGV[9] is '1' and
/// there are at most ARGV[10]. Returns `{1, wait, slot, pause left, next
/// read, seals, stored pause left}` when booked, `{0, wait, 0, …}` when
/// refused (nothing stored); a stored value that is no number or more
/// than a day ahead (a pause: a year) is read as none. Microseconds since the epoch
/// fit a Lua double exactly; they are written with `%.0f` since `tostring`
/// would round them.
const BOOK_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local max_wait = tonumber(ARGV[2])
local max_queue = tonumber(ARGV[3])
local nodes = tonumber(ARGV[5])
if ARGV[8] == '1' and redis.call('EXISTS', KEYS[1]) == 0 then return {2, 0, 0, 0, 0, {}, 0} end
local next = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if next ~= next or next > now + 86400000000 then next = 0 end
local seals = {}
if ARGV[9] == '1' and redis.call('HLEN', KEYS[3]) <= tonumber(ARGV[10]) then
  seals = redis.call('HGETALL', KEYS[3])
end
local pause = tonumber(redis.call('HGET', KEYS[2], 'until') or '0') or 0
if pause ~= pause or pause > now + 31622400000000 then pause = 0 end
local stored_pause = pause
local known = tonumber(ARGV[11]) or 0
if known > pause + tonumber(ARGV[12]) then pause = known end
local base = math.max(now, pause)
local slot = math.max(base, next, tonumber(ARGV[4]))
local spacing = interval
if nodes > 1 and interval > 0 then
  local m = math.ceil(slot / interval)
  m = m + (tonumber(ARGV[6]) - m) % nodes
  slot = m * interval
  spacing = interval * nodes
end
local wait = slot - now
if wait > max_wait or (max_queue > 0 and slot - base > spacing * max_queue) then
  return {0, wait, 0, math.max(pause - now, 0), next, seals, math.max(stored_pause - now, 0)}
end
local ttl = math.ceil((wait + 3 * interval) / 1000) + 1
redis.call('SET', KEYS[1], string.format('%.0f', slot + interval),
  'PX', string.format('%.0f', ttl))
if wait > 0 and ARGV[7] and ARGV[7] ~= '' then
  local held = KEYS[1] .. ':held'
  redis.call('ZREMRANGEBYSCORE', held, '-inf', string.format('%.0f', now))
  redis.call('ZADD', held, string.format('%.0f', slot), ARGV[7])
  redis.call('PEXPIRE', held, string.format('%.0f', ttl))
end
return {1, wait, slot, math.max(pause - now, 0), next, seals, math.max(stored_pause - now, 0)}
";

static BOOK: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(BOOK_SCRIPT));

/// Moves KEYS[1]'s next free slot to ARGV[1] (microseconds of Unix time)
/// if it is earlier, but no further than ARGV[3] microseconds from now
/// (a node whose clock runs ahead cannot hold the fleet up longer), kept
/// ARGV[2] ms. Returns 1 when moved.
const RAISE_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local next = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if next ~= next or next > now + 86400000000 then next = 0 end
local want = math.min(tonumber(ARGV[1]), now + tonumber(ARGV[3]))
if want <= next then return 0 end
redis.call('SET', KEYS[1], string.format('%.0f', want), 'PX', ARGV[2])
return 1
";

static RAISE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(RAISE_SCRIPT));

/// How far behind this node's clock Redis's may say a pause ends before
/// the pause counts as shortened (clocks a little apart are no forgery).
const PAUSE_SKEW_US: u64 = 1_000_000;

/// What a booking asks the script, besides its bounds.
#[derive(Clone, Copy)]
struct Call<'a> {
    /// The Redis key of `key`'s schedule.
    schedule: &'a str,
    key: &'a str,
    interval: Duration,
    max_wait: Duration,
    max_queue: usize,
    ticket: &'a str,
    /// The end of the pause this node knows (µs of Unix time; 0: none).
    known_pause: u64,
}

/// What one run of the booking script said.
struct Booked {
    code: i64,
    wait: i64,
    slot: u64,
    paused: Duration,
    /// The next free slot the script read (0: none).
    next_read: u64,
    /// How long the pause stored in Redis has to run.
    stored_pause: Duration,
    /// The latest next free slot a good seal vouches for (0: none).
    vouched: u64,
}

/// Where a booking may land, besides after the shared schedule's next free
/// slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bounds {
    /// Not before this (microseconds of Unix time; 0: no bound): after
    /// this node's own slots held from an outage.
    pub not_before: u64,
    /// Only this node's slots of the interleaved schedule: `(nodes,
    /// rank)`, during [`Fleet::settle`] after an outage.
    pub grid: Option<(usize, usize)>,
    /// The most the booking may wait on Redis: what is left of the
    /// request's `fleet.timeout` ([`Fleet::call_within`]); `None`: all of
    /// it.
    pub allowance: Option<Duration>,
    /// This node booked the key recently: it must be there, and if it is
    /// not the fleet's keys were lost ([`Booking::Lost`]).
    pub expected: bool,
}

/// The outcome of a fleet booking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Booking {
    /// Booked: go after this wait.
    Wait(Duration),
    /// Refused (`max_wait` or `max_queue`): the wait it would have had.
    Refused(Duration),
    /// Not booked: the key was `expected` (see [`Bounds`]) and is gone, the
    /// fleet's keys were lost ([`Fleet::keys_lost`]).
    Lost,
}

impl Fleet {
    /// The Redis key of a politeness key (`"<origin> <agent>"`).
    pub fn schedule_key(&self, key: &str) -> String {
        let (origin, agent) = key.rsplit_once(' ').unwrap_or((key, ""));
        self.key(origin, &format!("{agent}:next"))
    }

    /// Books the next slot of `key` on the shared schedule, within the
    /// timeout. Does not wait for the slot.
    pub async fn book(
        &self,
        key: &str,
        interval: Duration,
        max_wait: Duration,
        max_queue: usize,
    ) -> Result<Booking, Unavailable> {
        Ok(self
            .book_within(key, interval, max_wait, max_queue, Bounds::default(), "")
            .await
            .map(|(booking, _)| booking)?)
    }

    /// [`Fleet::book`], within `bounds`; with the slot booked (µs on
    /// Redis's clock; 0 when refused). A booking that waits holds
    /// `ticket` (from [`Fleet::ticket`]; empty: none) in the key's queue,
    /// until it leaves ([`Fleet::leave_queue`]) or its slot comes.
    pub async fn book_within(
        &self,
        key: &str,
        interval: Duration,
        max_wait: Duration,
        max_queue: usize,
        bounds: Bounds,
        ticket: &str,
    ) -> Result<(Booking, u64), Failure> {
        self.book_paused(key, interval, max_wait, max_queue, bounds, ticket)
            .await
            .map(|(booking, slot, _)| (booking, slot))
    }

    /// [`Fleet::book_within`], with how long the origin's pause has to
    /// run ([`super::pauses`]; zero: none). Never earlier than this node
    /// knows the schedule and the pause to be ([`super::floor`]): a slot
    /// earlier than a seal vouches for is booked again from there.
    pub async fn book_paused(
        &self,
        key: &str,
        interval: Duration,
        max_wait: Duration,
        max_queue: usize,
        bounds: Bounds,
        ticket: &str,
    ) -> Result<(Booking, u64, Duration), Failure> {
        let schedule = self.schedule_key(key);
        let origin = key.rsplit_once(' ').map_or(key, |(o, _)| o);
        let now = super::now_micros();
        let known_pause = self
            .known_pauses()
            .left(origin)
            .map_or(0, |left| now.saturating_add(micros(left)));
        let floor = self.floors.get(&schedule);
        let bounds = Bounds {
            not_before: bounds.not_before.max(floor),
            ..bounds
        };
        let call = Call {
            schedule: &schedule,
            key,
            interval,
            max_wait,
            max_queue,
            ticket,
            known_pause,
        };
        let mut booked = self.book_once(&call, bounds).await?;
        let lowered = (booked.next_read > 0 && booked.next_read < floor)
            || (known_pause > 0
                && now.saturating_add(micros(booked.stored_pause)) + PAUSE_SKEW_US < known_pause);
        if lowered {
            self.keys.rejected(super::key::Kind::Schedule, &schedule);
        }
        if booked.code == 1 && booked.slot < booked.vouched {
            // Lowered below what a seal vouches for: booked again from
            // there, which writes the schedule back.
            if !lowered {
                self.keys.rejected(super::key::Kind::Schedule, &schedule);
            }
            let vouched = booked.vouched;
            let bounds = Bounds {
                not_before: bounds.not_before.max(vouched),
                ..bounds
            };
            booked = self.book_once(&call, bounds).await?;
            if booked.code != 1 {
                // Refused from there (`max_wait`, `max_queue`): the
                // schedule is written back all the same.
                let _ = self
                    .raise(key, vouched, interval, max_wait + interval)
                    .await;
            }
        }
        let wait = Duration::from_micros(u64::try_from(booked.wait).unwrap_or(0));
        Ok(match booked.code {
            1 => {
                self.floors.raise(&schedule, booked.slot + micros(interval));
                (Booking::Wait(wait), booked.slot, booked.paused)
            }
            2 => (Booking::Lost, 0, booked.paused),
            _ => (Booking::Refused(wait), 0, booked.paused),
        })
    }

    /// One run of [`BOOK_SCRIPT`] for `call`, within `bounds`.
    async fn book_once(&self, call: &Call<'_>, bounds: Bounds) -> Result<Booked, Failure> {
        let Call {
            schedule,
            key,
            interval,
            max_wait,
            max_queue,
            ticket,
            known_pause,
        } = *call;
        let (nodes, rank) = bounds.grid.unwrap_or((1, 0));
        let allowance = bounds.allowance.unwrap_or(self.timeout());
        let origin = key.rsplit_once(' ').map_or(key, |(o, _)| o);
        let seals = super::floor::seal_key(schedule);
        let sealed = self.keys.enabled();
        let (code, wait, slot, pause, next_read, fields, stored_pause) = self
            .call_within(allowance, |mut conn| {
                let seals = seals.clone();
                async move {
                    BOOK.key(schedule)
                        .key(self.pause_key(origin))
                        .key(seals)
                        .arg(micros(interval))
                        .arg(micros(max_wait))
                        .arg(max_queue as u64)
                        .arg(bounds.not_before)
                        .arg(nodes as u64)
                        .arg(rank as u64)
                        .arg(ticket)
                        .arg(if bounds.expected { "1" } else { "" })
                        .arg(if sealed { "1" } else { "" })
                        .arg(super::floor::MAX_SEALS as u64)
                        .arg(known_pause)
                        .arg(PAUSE_SKEW_US)
                        .invoke_async::<(i64, i64, i64, i64, i64, Vec<Vec<u8>>, i64)>(&mut conn)
                        .await
                }
            })
            .await?;
        Ok(Booked {
            code,
            wait,
            slot: u64::try_from(slot).unwrap_or(0),
            paused: Duration::from_micros(u64::try_from(pause).unwrap_or(0)),
            next_read: u64::try_from(next_read).unwrap_or(0),
            stored_pause: Duration::from_micros(u64::try_from(stored_pause).unwrap_or(0)),
            vouched: if sealed {
                super::floor::vouched(&self.keys, &seals, &fields)
            } else {
                0
            },
        })
    }

    /// Seals the next free slot this node's booking of `key` left at
    /// `slot` + `interval` ([`super::floor`]), in the background (off the
    /// request's path). Nothing without a fleet key.
    pub fn seal_booking(self: &std::sync::Arc<Self>, key: &str, slot: u64, interval: Duration) {
        if !self.keys.enabled() || slot == 0 {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let fleet = self.clone();
        let seals = super::floor::seal_key(&self.schedule_key(key));
        let next = slot + micros(interval);
        let sealed = super::floor::seal(&self.keys, &seals, &self.node, next);
        // Kept as long as the schedule is: three intervals past its slot.
        let keep_ms = next
            .saturating_sub(super::now_micros())
            .saturating_add(micros(interval).saturating_mul(2))
            / 1000
            + 1;
        rt.spawn(async move {
            let _ = fleet
                .call(|mut conn| {
                    let (seals, sealed) = (seals.clone(), sealed.clone());
                    let node = fleet.node.clone();
                    async move {
                        redis::pipe()
                            .hset(&seals, node, sealed)
                            .ignore()
                            .pexpire(&seals, i64::try_from(keep_ms).unwrap_or(i64::MAX))
                            .ignore()
                            .query_async::<()>(&mut conn)
                            .await
                    }
                })
                .await;
        });
    }

    /// Moves `key`'s next free slot on the shared schedule to `next`
    /// (microseconds of Unix time) unless it is later already: a slot this
    /// node held while Redis was unavailable, written back; at most
    /// `within` from now on Redis's clock. Kept three intervals past
    /// `next`.
    pub async fn raise(
        &self,
        key: &str,
        next: u64,
        interval: Duration,
        within: Duration,
    ) -> Result<bool, Unavailable> {
        let keep_ms = next
            .saturating_sub(super::now_micros())
            .saturating_add(micros(interval).saturating_mul(3))
            / 1000
            + 1;
        let raised = self
            .call(|mut conn| async move {
                RAISE
                    .key(self.schedule_key(key))
                    .arg(next)
                    .arg(keep_ms)
                    .arg(micros(within))
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await?;
        Ok(raised == 1)
    }

    /// How long after Redis answers again bookings stay on this node's own
    /// interleaved slots: until every live node has noticed (its heartbeat
    /// tries Redis once per [`super::nodes::HEARTBEAT_EVERY`] even during
    /// an outage, within the timeout) and written back what it held (a
    /// [`super::RETRY_EVERY`] and a timeout more for that).
    pub fn settle(&self) -> Duration {
        super::RETRY_EVERY + super::nodes::HEARTBEAT_EVERY + self.timeout() * 2
    }

    /// Whether Redis answered again after an outage less than
    /// [`Fleet::settle`] ago.
    pub fn settling(&self) -> bool {
        match self
            .stats
            .recovered_at
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => false,
            at => super::now_micros() < at.saturating_add(micros(self.settle())),
        }
    }
}
