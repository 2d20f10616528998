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
use tokio::sync::Notify;

use super::Fleet;
use super::events::Event;

/// Most tickets one leave moves up; those further back keep their slots.
pub const MOVED_AT_MOST: usize = 256;

/// Removes ticket ARGV[1] from KEYS[1] .. ':held'; if its slot has not come,
/// each ticket behind it (at most ARGV[3]) takes the slot of the one before
/// it, and the next free slot (KEYS[1]) moves from the last one's slot plus
/// ARGV[2] (the interval) to that slot. Then publishes ARGV[5] on ARGV[4]
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

static LEAVE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(LEAVE_SCRIPT));

/// What wakes the requests held on one schedule, and how many there are.
type Held = (Arc<Notify>, usize);

/// The requests this node holds on the fleet's schedules, by Redis key:
/// what wakes them when their slots move.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    /// Per key: what wakes its waiters, and how many there are.
    keys: Mutex<HashMap<Arc<str>, Held>>,
    tickets: AtomicU64,
    listening: OnceLock<()>,
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
    pub fn ticket(&self) -> String {
        let n = self.waiters.tickets.fetch_add(1, Ordering::Relaxed);
        format!("{}:{n}", self.author().encode())
    }

    /// Wakes the returned watch whenever requests held on the schedule
    /// of `key` (a politeness key) move up. The first call starts the
    /// task that reads the fleet's events for it.
    pub fn watch_moves(self: &Arc<Self>, key: &str) -> Watch {
        self.waiters.listening.get_or_init(|| {
            let events = self.events();
            tokio::spawn(dispatch(Arc::downgrade(self), events));
        });
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
        let message = Event::Moved(schedule.as_str().into()).encode_from(&self.author());
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
        Ok(u64::try_from(moved).ok())
    }
}

/// Wakes the requests held on a schedule whose `moved` event is heard,
/// until the fleet is gone.
async fn dispatch(fleet: Weak<Fleet>, mut events: tokio::sync::broadcast::Receiver<Event>) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let key = match events.recv().await {
            Ok(Event::Moved(key)) => key,
            Ok(_) | Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return,
        };
        let Some(fleet) = fleet.upgrade() else { return };
        let moved = fleet.waiters.keys.lock().get(&key).map(|e| e.0.clone());
        if let Some(moved) = moved {
            moved.notify_waiters();
        }
    }
}
