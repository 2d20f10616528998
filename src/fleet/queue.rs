//! The requests held on a Crawl-delay schedule of the fleet, in slot
//! order: a sorted set next to the schedule's key (`…:next:held`), one
//! member per held request (a ticket: this node, its instance and a
//! number), scored by its slot (µs on Redis's clock). A booking that holds
//! its request adds its ticket (`schedule::BOOK_SCRIPT`); a request whose
//! client gives up leaves ([`Fleet::leave_queue`]): in one script its ticket is
//! removed, each ticket behind it takes the slot of the one before it, the
//! schedule's next free slot moves one earlier, and a `moved` event tells
//! every node, which reads the slots of the requests it holds for that
//! schedule again ([`Fleet::held_slot`]), waking only those.
//!
//! Lost keys: a node finds a schedule it booked lately gone (the booking
//! script), or the fleet's marker gone or changed ([`Fleet::check_marker`],
//! once per heartbeat period), or is told by another node (a `lost`
//! event); it then moves the requests it holds on shared slots to its own
//! interleaved slots and settles, as at the return from an outage
//! ([`Fleet::keys_lost`]).
//!
//! Costs: one script per request that leaves, moving at most
//! [`MOVED_AT_MOST`] tickets; one `ZSCORE` per request held on that
//! schedule per event. A lost event (a node that was not subscribed, a
//! slow receiver) leaves a request on the slot it last read, which is
//! later than it could have been, never earlier. Tickets whose slot has
//! come are dropped by the next booking that holds a request; the set
//! expires with the schedule.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use tokio::sync::{Notify, watch};

use super::events::Event;
use super::{Fleet, micros, now_micros};

/// Most tickets one leave moves up; those further back keep their slots.
pub const MOVED_AT_MOST: usize = 256;

/// Removes ticket ARGV[1] from KEYS[1] .. ':held'; if its slot has not come,
/// each ticket behind it (at most ARGV[3]) takes the slot of the one before
/// it, and the next free slot (KEYS[1]) moves from the last one's slot plus
/// ARGV[2] (the interval) to that slot, and its seals, which vouch for a
/// later one, go ([`super::floor`]). Then publishes ARGV[5] on ARGV[4]
/// when tickets moved. Returns how many moved, or -1 when the ticket was not
/// held.
const LEAVE_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local held = KEYS[1] .. ':held'
local mine = tonumber(redis.call('ZSCORE', held, ARGV[1]))
if not mine then return -1 end
redis.call('ZREM', held, ARGV[1])
if mine <= now then return 0 end
local most = tonumber(ARGV[3])
local behind = redis.call('ZRANGEBYSCORE', held, '(' .. string.format('%.0f', mine), '+inf',
  'WITHSCORES', 'LIMIT', 0, most + 1)
local n = #behind / 2
local last = mine
if n <= most then
  if n > 0 then last = tonumber(behind[2 * n]) end
  local next = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
  if next == last + tonumber(ARGV[2]) then
    redis.call('SET', KEYS[1], string.format('%.0f', last), 'KEEPTTL')
    redis.call('DEL', KEYS[1] .. ':seal')
  end
else
  n = most
end
local before = mine
for i = 1, n do
  local score = behind[2 * i]
  redis.call('ZADD', held, 'XX', string.format('%.0f', before), behind[2 * i - 1])
  before = tonumber(score)
end
if n > 0 then redis.call('PUBLISH', ARGV[4], ARGV[5]) end
return n
";

/// The fleet's marker KEYS[1]: returns the value it held, or, when it was
/// gone, sets it to ARGV[1] and returns nothing; kept ARGV[2] ms.
const MARK_SCRIPT: &str = r"
local v = redis.call('GET', KEYS[1])
if v then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return v
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
";

static MARK: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(MARK_SCRIPT));

/// How long the marker outlives the last node that checked it.
const MARK_KEPT: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

static LEAVE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(LEAVE_SCRIPT));

/// What wakes the requests held on one schedule, and how many there are.
type Held = (Arc<Notify>, usize);

/// The requests this node holds on the fleet's schedules, by Redis key:
/// what wakes them when their slots move, or when the shared schedule
/// cannot be trusted any more.
#[derive(Debug)]
pub(crate) struct Waiters {
    /// Per key: what wakes its waiters, and how many there are.
    keys: Mutex<HashMap<Arc<str>, Held>>,
    tickets: AtomicU64,
    listening: OnceLock<()>,
    /// Counts the breaks of the shared schedule (an outage noticed, keys
    /// lost): each moves the requests held on shared slots to this node's
    /// own slots.
    broke: watch::Sender<u64>,
    /// When this node last learned that the fleet's keys were lost (µs of
    /// Unix time; 0: never).
    lost_at: AtomicU64,
    /// The fleet's marker as this node last read it ([`Fleet::check_marker`]).
    marker: Mutex<Option<String>>,
}

impl Default for Waiters {
    fn default() -> Self {
        Waiters {
            keys: Mutex::default(),
            tickets: AtomicU64::new(0),
            listening: OnceLock::new(),
            broke: watch::Sender::new(0),
            lost_at: AtomicU64::new(0),
            marker: Mutex::new(None),
        }
    }
}

impl Waiters {
    /// The shared schedule broke: requests held on it move to this node's
    /// own slots.
    pub(crate) fn broke(&self) {
        self.broke.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// One request held on a schedule of the fleet: woken when slots move.
/// Dropping it forgets it.
pub struct Watch {
    fleet: Arc<Fleet>,
    key: Arc<str>,
    pub(crate) moved: Arc<Notify>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut keys = self.fleet.waiters.keys.lock();
        if let Some(entry) = keys.get_mut(&self.key) {
            entry.1 -= 1;
            if entry.1 == 0 {
                keys.remove(&self.key);
            }
        }
    }
}

impl Fleet {
    /// A new ticket for a request to be held: this node's instance and a
    /// number.
    pub fn ticket(self: &Arc<Self>) -> String {
        self.listen();
        let n = self.waiters.tickets.fetch_add(1, Ordering::Relaxed);
        format!("{}:{n}", self.author().encode())
    }

    /// Wakes the returned watch whenever requests held on the schedule
    /// of `key` (a politeness key) move up. The first call starts the
    /// task that reads the fleet's events for it.
    pub fn watch_moves(self: &Arc<Self>, key: &str) -> Watch {
        self.listen();
        let key: Arc<str> = self.schedule_key(key).into();
        let moved = {
            let mut keys = self.waiters.keys.lock();
            let entry = keys
                .entry(key.clone())
                .or_insert_with(|| (Arc::new(Notify::new()), 0));
            entry.1 += 1;
            entry.0.clone()
        };
        Watch {
            fleet: self.clone(),
            key,
            moved,
        }
    }

    /// Starts, once, the task that reads the fleet's events for the
    /// requests held here.
    fn listen(self: &Arc<Self>) {
        self.waiters.listening.get_or_init(|| {
            let events = self.events();
            tokio::spawn(dispatch(Arc::downgrade(self), events));
            tokio::spawn(keep_checking_marker(Arc::downgrade(self)));
        });
    }

    /// Reads the fleet's marker, a key every node checks once per
    /// heartbeat period while it books Crawl-delay slots (set by the first
    /// that finds none, to a value of its own): gone or changed since this
    /// node last read it, the fleet's keys were lost (a flush, a restart
    /// without persistence, a failover to an empty replica), found so by
    /// every node within a period even where no booking of its notices.
    /// Returns whether this check found them lost.
    pub async fn check_marker(self: &Arc<Self>) -> bool {
        let mine = format!("{}:{}", self.author().encode(), now_micros());
        let ours = &mine;
        let Ok(read) = self
            .call(|mut conn| async move {
                MARK.key(self.key("nodes", "marker"))
                    .arg(ours)
                    .arg(micros(MARK_KEPT) / 1000)
                    .invoke_async::<Option<String>>(&mut conn)
                    .await
            })
            .await
        else {
            return false;
        };
        let now = read.unwrap_or(mine);
        let before = self.waiters.marker.lock().replace(now.clone());
        let lost = before.is_some_and(|b| b != now);
        if lost {
            self.keys_lost();
        }
        lost
    }

    /// The slot (µs on Redis's clock) `ticket` holds now on the schedule
    /// of `key`, if it is held.
    pub async fn held_slot(&self, key: &str, ticket: &str) -> Option<u64> {
        let held = format!("{}:held", self.schedule_key(key));
        let score = self
            .call(|mut conn| async move {
                redis::cmd("ZSCORE")
                    .arg(held)
                    .arg(ticket)
                    .query_async::<Option<f64>>(&mut conn)
                    .await
            })
            .await
            .ok()??;
        (score.is_finite() && score >= 0.0).then_some(score as u64)
    }

    /// The request of `ticket`, held on the schedule of `key` with
    /// `interval`, leaves it (its client gave up): those behind it move up
    /// one slot and every node is told. Returns how many moved (`None`:
    /// the ticket was not held).
    pub async fn leave_queue(
        &self,
        key: &str,
        ticket: &str,
        interval: std::time::Duration,
    ) -> Result<Option<u64>, super::Unavailable> {
        let schedule = self.schedule_key(key);
        let message = self.message(&Event::Moved(schedule.as_str().into()));
        let channel = self.channel();
        let moved = self
            .call(|mut conn| async move {
                LEAVE
                    .key(schedule)
                    .arg(ticket)
                    .arg(super::micros(interval))
                    .arg(MOVED_AT_MOST as u64)
                    .arg(channel)
                    .arg(message)
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await?;
        if moved > 0 {
            self.floors.forget(&self.schedule_key(key));
        }
        Ok(u64::try_from(moved).ok())
    }
}

impl Fleet {
    /// Changes each time the shared schedule breaks (Redis found
    /// unavailable, the fleet's keys found lost): a request held on a
    /// shared slot then moves to a slot of this node's own (see
    /// `judge::politeness`), since other nodes can no longer see it.
    pub fn breaks(&self) -> watch::Receiver<u64> {
        self.waiters.broke.subscribe()
    }

    /// This node found a schedule's key gone that must have been there
    /// (`schedule::BOOK_SCRIPT`): the fleet's keys were lost. Handled as
    /// the return from an outage ([`Fleet::keys_lost_heard`]), and every
    /// node is told.
    pub fn keys_lost(self: &Arc<Self>) {
        if !self.keys_lost_heard() {
            return;
        }
        tracing::warn!(
            "fleet: a Crawl-delay schedule's key is gone from Redis (keys lost: a flush, a failover to an empty replica): \
             requests held move to this node's own slots, which are written back"
        );
        let fleet = self.clone();
        tokio::spawn(async move {
            let message = fleet.message(&Event::Lost {
                from: fleet.author(),
            });
            let _ = fleet.publish(message).await;
        });
    }

    /// The fleet's keys were lost (found here or told by another node):
    /// as at the return from an outage, the requests held on shared slots
    /// move to this node's own interleaved slots, those are written back,
    /// and bookings keep to them for [`Fleet::settle`], starting no
    /// earlier than [`Fleet::lost_from`]. Once per settling time; returns
    /// whether this call did it.
    pub(crate) fn keys_lost_heard(&self) -> bool {
        let now = now_micros();
        let last = self.waiters.lost_at.load(Ordering::Relaxed);
        if last != 0 && now < last.saturating_add(micros(self.settle())) {
            return false;
        }
        self.waiters.lost_at.store(now, Ordering::Relaxed);
        self.stats.recovered_at.store(now, Ordering::Relaxed);
        self.waiters.broke();
        let _ = self.events.send(Event::Recovered);
        true
    }

    /// While settling after the fleet's keys were lost: the earliest a
    /// booking may start (µs of Unix time) for `interval`, one interval
    /// after every node has heard of the loss (a heartbeat period and the
    /// timeout; the `lost` event usually takes a millisecond) and stopped
    /// using shared slots. 0 otherwise.
    pub fn lost_from(&self, interval: std::time::Duration) -> u64 {
        let at = self.waiters.lost_at.load(Ordering::Relaxed);
        if at == 0 || !self.settling() {
            return 0;
        }
        at.saturating_add(micros(super::nodes::HEARTBEAT_EVERY))
            .saturating_add(micros(self.timeout()))
            .saturating_add(micros(interval))
    }
}

/// Checks the fleet's marker once per heartbeat period, until the fleet
/// is gone.
async fn keep_checking_marker(fleet: Weak<Fleet>) {
    let mut every = tokio::time::interval(super::nodes::HEARTBEAT_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(fleet) = fleet.upgrade() else { return };
        fleet.check_marker().await;
    }
}

/// Wakes the requests held on a schedule whose `moved` event is heard,
/// and handles another node's `lost`, until the fleet is gone.
async fn dispatch(fleet: Weak<Fleet>, mut events: tokio::sync::broadcast::Receiver<Event>) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let event = events.recv().await;
        let Some(fleet) = fleet.upgrade() else { return };
        let key = match event {
            Ok(Event::Moved(key)) => {
                fleet.floors.forget(&key);
                key
            }
            Ok(Event::Lost { from }) => {
                if !fleet.is_me(&from) && fleet.keys_lost_heard() {
                    tracing::warn!(node = %from.node,
                        "fleet: another node found the fleet's keys lost: requests held move to this node's own slots");
                }
                continue;
            }
            Ok(_) | Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return,
        };
        let moved = fleet.waiters.keys.lock().get(&key).map(|e| e.0.clone());
        if let Some(moved) = moved {
            moved.notify_waiters();
        }
    }
}
