//! Fleet mode: several proxies sharing one Redis keep one Crawl-delay
//! schedule per (origin, agent) key, so N proxies do not send N times the
//! origin's Crawl-delay.
//!
//! A booking is one Lua script run atomically on Redis, on Redis's own
//! clock (`TIME`), so the nodes' clocks do not matter. The key holds the
//! next free slot in microseconds; the script books `max(now, next)`,
//! stores `booked + interval` with an expiry of a few intervals, and
//! returns the wait. `max_wait` and `max_queue` are checked on the shared
//! schedule exactly as [`super::politeness`] checks them locally: each
//! held request has booked one interval ahead of the next, so a wait of
//! more than `max_queue` intervals means `max_queue` requests are held
//! fleet-wide. No second key is needed.
//!
//! Every Redis call is bounded by `timeout`; when Redis is down or slow
//! the caller falls back to the local schedule or refuses, as configured.
//! During an outage one booking per [`RETRY_EVERY`] tries Redis again; the
//! others fall back at once, so a Redis that does not answer at all costs
//! most requests nothing, not the timeout each.
//! A slot booked on Redis is not given back if the client gives up while
//! held (the polite direction).
//!
//! Not done yet: interleaving (node k of N taking slots k, k+N, ... from a
//! schedule agreed in advance, so bookings need no round trip), and Redis
//! Cluster (the keys carry a hash tag, `{name}`, so a cluster would keep
//! one fleet's keys on one shard; only a single URL is accepted today).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::time::Instant;

/// During an outage, how often a booking tries Redis again.
pub const RETRY_EVERY: Duration = Duration::from_secs(1);

/// Books the next slot of KEYS[1]. ARGV: interval, max_wait, max_queue
/// (microseconds, microseconds, count; max_queue 0: no bound). Returns
/// `{1, wait}` when booked, `{0, wait}` when refused (nothing stored).
/// Microseconds since the epoch fit a Lua double exactly; they are
/// written with `%.0f` since `tostring` would round them.
pub const BOOK_SCRIPT: &str = r"
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

/// What to do when Redis cannot be reached within the timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUnavailable {
    /// Book on this node's own schedule (as without a fleet).
    Local,
    /// Refuse requests that need a Crawl-delay booking (503).
    Refuse,
}

/// Fleet settings, from `[fleet]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetSettings {
    /// `redis://host:port/db`.
    pub redis: String,
    /// Key namespace: fleets sharing one Redis keep apart by name.
    pub name: String,
    /// Longest any request waits on Redis.
    pub timeout: Duration,
    pub on_unavailable: OnUnavailable,
}

/// The outcome of a fleet booking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Booking {
    /// Booked: go after this wait.
    Wait(Duration),
    /// Refused (`max_wait` or `max_queue`): the wait it would have had.
    Refused(Duration),
}

/// Redis did not answer within the timeout, or answered an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable;

/// The fleet's shared schedule; one per process.
pub struct Fleet {
    client: redis::Client,
    conn: OnceLock<ConnectionManager>,
    script: redis::Script,
    name: String,
    timeout: Duration,
    on_unavailable: OnUnavailable,
    /// Whether the last call failed: one warning per outage.
    down: AtomicBool,
    /// During an outage, when Redis is next tried.
    retry_at: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("name", &self.name)
            .field("timeout", &self.timeout)
            .field("on_unavailable", &self.on_unavailable)
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// Parses the URL; nothing is contacted until the first booking.
    pub fn new(settings: &FleetSettings) -> Result<Fleet, redis::RedisError> {
        Ok(Fleet {
            client: redis::Client::open(settings.redis.as_str())?,
            conn: OnceLock::new(),
            script: redis::Script::new(BOOK_SCRIPT),
            name: settings.name.clone(),
            timeout: settings.timeout,
            on_unavailable: settings.on_unavailable,
            down: AtomicBool::new(false),
            retry_at: Mutex::new(None),
        })
    }

    pub fn on_unavailable(&self) -> OnUnavailable {
        self.on_unavailable
    }

    /// The Redis key of a politeness key (`"<origin> <agent>"`).
    pub fn redis_key(&self, key: &str) -> String {
        format!("robots-proxy:{{{}}}:{key}:next", self.name)
    }

    fn connection(&self) -> redis::RedisResult<ConnectionManager> {
        if let Some(c) = self.conn.get() {
            return Ok(c.clone());
        }
        // Reconnects are the manager's; each attempt is bounded anyway by
        // the timeout around every call.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(1));
        let c = ConnectionManager::new_lazy_with_config(self.client.clone(), config)?;
        Ok(self.conn.get_or_init(|| c).clone())
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
        if self.down.load(Ordering::Relaxed) {
            let mut retry_at = self.retry_at.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            match *retry_at {
                Some(at) if now < at => return Err(Unavailable),
                // This booking tries; the others keep falling back.
                _ => *retry_at = Some(now + RETRY_EVERY),
            }
        }
        let call = async {
            let mut conn = self.connection()?;
            self.script
                .key(self.redis_key(key))
                .arg(micros(interval))
                .arg(micros(max_wait))
                .arg(max_queue as u64)
                .invoke_async::<(i64, i64)>(&mut conn)
                .await
        };
        let result = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "no answer within {}",
                humantime::format_duration(self.timeout)
            )),
        };
        match result {
            Ok((booked, wait)) => {
                if self.down.swap(false, Ordering::Relaxed) {
                    tracing::info!("fleet: Redis answers again: Crawl-delay shared again");
                }
                let wait = Duration::from_micros(u64::try_from(wait).unwrap_or(0));
                Ok(if booked == 1 {
                    Booking::Wait(wait)
                } else {
                    Booking::Refused(wait)
                })
            }
            Err(error) => {
                *self.retry_at.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(Instant::now() + RETRY_EVERY);
                if !self.down.swap(true, Ordering::Relaxed) {
                    let on_unavailable = match self.on_unavailable {
                        OnUnavailable::Local => "local",
                        OnUnavailable::Refuse => "refuse",
                    };
                    tracing::warn!(%error, on_unavailable,
                        "fleet: Redis unavailable: Crawl-delay no longer shared");
                }
                Err(Unavailable)
            }
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
