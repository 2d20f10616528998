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
//! A slot booked on Redis is not given back if the client gives up while
//! held (the polite direction).

use std::time::Duration;

use super::{Fleet, Unavailable, micros};

/// Books the next slot of KEYS[1]. ARGV: interval, max_wait, max_queue
/// (microseconds, microseconds, count; max_queue 0: no bound). Returns
/// `{1, wait}` when booked, `{0, wait}` when refused (nothing stored).
/// Microseconds since the epoch fit a Lua double exactly; they are
/// written with `%.0f` since `tostring` would round them.
pub(crate) const BOOK_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local max_wait = tonumber(ARGV[2])
local max_queue = tonumber(ARGV[3])
local next = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local slot = math.max(now, next)
local wait = slot - now
if wait > max_wait or (max_queue > 0 and wait > interval * max_queue) then
  return {0, wait}
end
local ttl = math.ceil((wait + 3 * interval) / 1000) + 1
redis.call('SET', KEYS[1], string.format('%.0f', slot + interval),
  'PX', string.format('%.0f', ttl))
return {1, wait}
";

/// The outcome of a fleet booking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Booking {
    /// Booked: go after this wait.
    Wait(Duration),
    /// Refused (`max_wait` or `max_queue`): the wait it would have had.
    Refused(Duration),
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
        let (booked, wait) = self
            .call(|mut conn| async move {
                self.book_script
                    .key(self.schedule_key(key))
                    .arg(micros(interval))
                    .arg(micros(max_wait))
                    .arg(max_queue as u64)
                    .invoke_async::<(i64, i64)>(&mut conn)
                    .await
            })
            .await?;
        let wait = Duration::from_micros(u64::try_from(wait).unwrap_or(0));
        Ok(if booked == 1 {
            Booking::Wait(wait)
        } else {
            Booking::Refused(wait)
        })
    }
}
