//! An origin's pause (its own 429 or 503, `crate::judge::politeness`'s
//! `signals`) for the whole fleet, on Redis's clock.
//!
//! The pause is a hash per origin (`robots-proxy:<name>:{<origin>}:pause`:
//! `until`, `level`, `ended` in µs of Redis's clock, and the signal that
//! made it), in the origin's cluster slot with its Crawl-delay schedules,
//! so the booking script reads it in the same atomic step
//! (`slot = max(now, next, pause end)`, [`super::schedule`]). The node that
//! sees the signal runs [`RECORD_SCRIPT`] (the back-off level and its
//! forgiveness are Redis's, so two nodes seeing one burst of 503s make one
//! pause) and tells every node on the fleet's channel ([`Paused`]).
//!
//! A request to an origin with no Crawl-delay makes no Redis call: each
//! node keeps the pauses it heard of ([`Known`], bounded) and books on
//! Redis only for an origin it knows to be paused. The limit: a node that
//! did not hear (its subscription was down when the pause was told)
//! sends to that origin without waiting, until it hears of the next
//! signal; an origin with a Crawl-delay books on Redis anyway and learns
//! of the pause from the booking.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lru::LruCache;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::events::Event;
use super::{Fleet, Unavailable, micros};
use crate::http::signal::Signal;

/// Origins whose pause a node remembers.
pub const KNOWN_PAUSES: usize = 10_000;

/// Records a signal on KEYS[1]. ARGV: status, Retry-After honoured (µs;
/// -1: none), Retry-After as asked (s; -1: none), backoff, backoff_max,
/// forgive (µs), jitter (per mille, −100..100). On Redis's clock: a
/// `Retry-After` pauses until now + it (or a later end already set); a
/// back-off during a pause makes none; else the level goes up by one,
/// from 0 when the last pause ended more than `forgive` ago. Returns
/// `{made, now, until, level}` (µs; `made` 0 when no pause was made).
const RECORD_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ra = tonumber(ARGV[2])
local cur = redis.call('HMGET', KEYS[1], 'until', 'level')
local ends_at = tonumber(cur[1] or '0') or 0
local level = tonumber(cur[2] or '0') or 0
if ends_at ~= ends_at or level ~= level then ends_at = 0; level = 0 end
local pause
if ra >= 0 then
  pause = ra
else
  local backoff = tonumber(ARGV[4])
  if backoff <= 0 or now < ends_at then return {0, now, ends_at, level} end
  if ends_at == 0 or now - ends_at >= tonumber(ARGV[6]) then level = 0 end
  level = level + 1
  pause = math.min(backoff * 2 ^ (level - 1), math.max(tonumber(ARGV[5]), backoff))
  pause = pause * (1000 + tonumber(ARGV[7])) / 1000
end
local ends = math.max(ends_at, now + pause)
redis.call('HSET', KEYS[1], 'until', string.format('%.0f', ends), 'level', level,
  'status', ARGV[1], 'given', string.format('%.0f', now), 'asked', ARGV[3])
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', math.ceil((ends - now + tonumber(ARGV[6])) / 1000) + 1000))
return {1, now, ends, level}
";

static RECORD: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(RECORD_SCRIPT));

/// Reads KEYS[1]'s pause and KEYS[2]'s next free slot: `{now, until,
/// level, status, given, asked, next, ttl of next (ms)}`.
const READ_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local p = redis.call('HMGET', KEYS[1], 'until', 'level', 'status', 'given', 'asked')
return {string.format('%.0f', now), p[1] or '0', p[2] or '0', p[3] or '0', p[4] or '0',
  p[5] or '-1', redis.call('GET', KEYS[2]) or '0'}
";

static READ: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(READ_SCRIPT));

/// The back-off curve, as the fleet's script applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Curve {
    pub backoff: Duration,
    pub backoff_max: Duration,
    pub forgive: Duration,
}

/// A pause told on the fleet's channel: `<origin>\n<ms left>\n<status>\n
/// <asked s or -1>\n<given ms>\n<until ms>\n<level>` (times on the telling
/// node's clock, for display; the receiver counts `ms left` from when it
/// hears it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paused {
    pub origin: Arc<str>,
    pub left: Duration,
    pub signal: Signal,
}

impl Paused {
    pub(crate) fn encode(&self) -> String {
        let s = &self.signal;
        format!(
            "{}\n{}\n{}\n{}\n{}\n{}\n{}",
            self.origin,
            self.left.as_millis(),
            s.status,
            s.retry_after.map_or(-1, |a| i64::try_from(a).unwrap_or(-1)),
            s.given,
            s.until,
            s.level
        )
    }

    pub(crate) fn decode(value: &str) -> Option<Paused> {
        let mut f = value.split('\n');
        let origin = f.next().filter(|o| !o.is_empty())?;
        let mut n = || f.next().and_then(|v| v.parse::<i64>().ok());
        let left = u64::try_from(n()?).ok()?;
        let status = u16::try_from(n()?).ok()?;
        let asked = n()?;
        let (given, until, level) = (n()?, n()?, n()?);
        Some(Paused {
            origin: origin.into(),
            left: Duration::from_millis(left),
            signal: Signal {
                status,
                retry_after: u64::try_from(asked).ok(),
                given: u64::try_from(given).ok()?,
                until: u64::try_from(until).ok()?,
                level: u32::try_from(level).ok()?,
            },
        })
    }
}

/// The pauses this node knows of: origin → (end on this node's clock,
/// signal); bounded, least recently told dropped first.
#[derive(Debug)]
pub struct Known {
    map: Mutex<LruCache<Box<str>, (Instant, Signal)>>,
    /// The latest end of any, µs since `base`: a request to an origin
    /// when it is past reads one atomic.
    latest: AtomicU64,
    base: Instant,
}

impl Default for Known {
    fn default() -> Self {
        Known {
            map: Mutex::new(LruCache::new(
                NonZeroUsize::new(KNOWN_PAUSES).unwrap_or(NonZeroUsize::MIN),
            )),
            latest: AtomicU64::new(0),
            base: Instant::now(),
        }
    }
}

impl Known {
    fn micros_of(&self, t: Instant) -> u64 {
        micros(t.saturating_duration_since(self.base))
    }

    /// Notes that `origin` is paused for `left` from now.
    pub fn learn(&self, origin: &str, left: Duration, signal: Signal) {
        let until = Instant::now() + left;
        let mut map = self.map.lock();
        match map.get_mut(origin) {
            Some(known) if known.0 >= until => {}
            Some(known) => *known = (until, signal),
            None => {
                map.put(origin.into(), (until, signal));
            }
        }
        self.latest
            .fetch_max(self.micros_of(until), Ordering::Relaxed);
    }

    /// Whether this node knows of any pause now (one atomic read).
    pub fn any(&self) -> bool {
        self.latest.load(Ordering::Relaxed) > self.micros_of(Instant::now())
    }

    /// How long the pause this node knows on `origin` has to run (`None`:
    /// none known). A booking waits at least this, whatever Redis says
    /// ([`super::floor`]).
    pub fn left(&self, origin: &str) -> Option<Duration> {
        self.known(origin).map(|(left, _)| left)
    }

    /// The pause this node knows on `origin` now.
    pub fn current(&self, origin: &str) -> Option<Signal> {
        self.known(origin).map(|(_, signal)| signal)
    }

    /// The pause this node knows on `origin` now: how long it has to run,
    /// and its signal.
    fn known(&self, origin: &str) -> Option<(Duration, Signal)> {
        let now = Instant::now();
        if self.latest.load(Ordering::Relaxed) <= self.micros_of(now) {
            return None;
        }
        let map = self.map.lock();
        map.peek(origin)
            .filter(|(until, _)| *until > now)
            .map(|(until, s)| (until.saturating_duration_since(now), *s))
    }

    /// The origins this node knows paused now.
    pub fn all(&self) -> Vec<(String, Signal)> {
        let now = Instant::now();
        self.map
            .lock()
            .iter()
            .filter(|(_, (until, _))| *until > now)
            .map(|(o, (_, s))| (o.to_string(), *s))
            .collect()
    }
}

/// An origin's schedule as Redis holds it, for `/explain` and the web
/// view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedSchedule {
    /// Time to the next free slot of the agent's schedule (zero: free).
    pub next_in: Duration,
    /// The pause in force, and the signal that made it (times on Redis's
    /// clock, in ms of Unix time).
    pub pause: Option<Signal>,
    /// The last signal, its pause over (its back-off level is still
    /// remembered until forgiven).
    pub last: Option<Signal>,
}

impl Fleet {
    /// The Redis key of `origin`'s pause.
    pub fn pause_key(&self, origin: &str) -> String {
        self.key(origin, "pause")
    }

    /// The pauses this node knows of.
    pub fn known_pauses(&self) -> &Known {
        &self.pauses
    }

    /// Records a signal `origin` gave (`status`; `retry_after` honoured
    /// and capped, `asked` as the origin asked it) on Redis's clock, and
    /// tells every node of the pause it made. `None` when it made none.
    pub async fn record_signal(
        &self,
        origin: &str,
        status: u16,
        retry_after: Option<Duration>,
        asked: Option<u64>,
        curve: Curve,
        jitter: f64,
    ) -> Result<Option<Signal>, Unavailable> {
        let key = self.pause_key(origin);
        let per_mille = (jitter.clamp(-1.0, 1.0) * 100.0).round() as i64;
        let (made, now, until, level) = self
            .call(|mut conn| async move {
                RECORD
                    .key(key)
                    .arg(status)
                    .arg(retry_after.map_or(-1, |r| i64::try_from(micros(r)).unwrap_or(i64::MAX)))
                    .arg(asked.map_or(-1, |a| i64::try_from(a).unwrap_or(i64::MAX)))
                    .arg(micros(curve.backoff))
                    .arg(micros(curve.backoff_max))
                    .arg(micros(curve.forgive))
                    .arg(per_mille)
                    .invoke_async::<(i64, i64, i64, i64)>(&mut conn)
                    .await
            })
            .await?;
        if made != 1 {
            return Ok(None);
        }
        let (now, until) = (
            u64::try_from(now).unwrap_or(0),
            u64::try_from(until).unwrap_or(0),
        );
        let left = Duration::from_micros(until.saturating_sub(now));
        let signal = Signal {
            status,
            retry_after: asked,
            given: now / 1000,
            until: until / 1000,
            level: if retry_after.is_some() {
                0
            } else {
                u32::try_from(level).unwrap_or(u32::MAX)
            },
        };
        self.pauses.learn(origin, left, signal);
        let told = Paused {
            origin: origin.into(),
            left,
            signal,
        };
        let message = self.message(&Event::Paused(told));
        if self.publish_message(message).await.is_err() {
            tracing::warn!(
                origin,
                "fleet: a pause could not be told to the other nodes (they see it when they book)"
            );
        }
        Ok(Some(signal))
    }

    /// `origin`'s pause and `key`'s (`"<origin> <agent>"`) next free slot
    /// as Redis holds them.
    pub async fn shared_schedule(&self, key: &str) -> Result<SharedSchedule, Unavailable> {
        let origin = key.rsplit_once(' ').map_or(key, |(o, _)| o);
        let (pause_key, next_key) = (self.pause_key(origin), self.schedule_key(key));
        let v = self
            .call(|mut conn| async move {
                READ.key(pause_key)
                    .key(next_key)
                    .invoke_async::<Vec<String>>(&mut conn)
                    .await
            })
            .await?;
        let n = |i: usize| {
            v.get(i)
                .and_then(|s| s.parse::<f64>().ok())
                .filter(|x| x.is_finite())
                .unwrap_or(0.0) as i64
        };
        let now = u64::try_from(n(0)).unwrap_or(0);
        let until = u64::try_from(n(1)).unwrap_or(0);
        let next = u64::try_from(n(6)).unwrap_or(0);
        let status = u16::try_from(n(3)).unwrap_or(0);
        let signal = (status != 0).then(|| Signal {
            status,
            retry_after: u64::try_from(n(5)).ok(),
            given: u64::try_from(n(4)).unwrap_or(0) / 1000,
            until: until / 1000,
            level: if n(5) >= 0 {
                0
            } else {
                u32::try_from(n(2)).unwrap_or(0)
            },
        });
        let paused = until > now;
        if let Some(s) = signal.filter(|_| paused) {
            self.pauses
                .learn(origin, Duration::from_micros(until - now), s);
        }
        Ok(SharedSchedule {
            next_in: Duration::from_micros(next.saturating_sub(now)),
            pause: signal.filter(|_| paused),
            last: signal.filter(|_| !paused),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_message_round_trips_and_junk_is_ignored() {
        let p = Paused {
            origin: "http://a.example:80".into(),
            left: Duration::from_millis(3000),
            signal: Signal {
                status: 429,
                retry_after: Some(3),
                given: 1_800_000_000_000,
                until: 1_800_000_003_000,
                level: 0,
            },
        };
        assert_eq!(Paused::decode(&p.encode()), Some(p.clone()));
        let backoff = Paused {
            signal: Signal {
                retry_after: None,
                level: 2,
                ..p.signal
            },
            ..p
        };
        assert_eq!(Paused::decode(&backoff.encode()), Some(backoff));
        for junk in [
            "",
            "o",
            "o\n1\n2",
            "o\n-1\n429\n3\n1\n2\n0",
            "o\nx\n429\n3\n1\n2\n0",
        ] {
            assert_eq!(Paused::decode(junk), None, "{junk:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn known_pauses_end_on_this_nodes_clock() {
        let known = Known::default();
        let s = Signal {
            status: 503,
            retry_after: None,
            given: 0,
            until: 0,
            level: 1,
        };
        assert_eq!(known.current("o"), None);
        known.learn("o", Duration::from_secs(3), s);
        // An earlier end told later does not shorten it.
        known.learn("o", Duration::from_secs(1), s);
        assert_eq!(known.current("o"), Some(s));
        assert_eq!(known.current("p"), None);
        tokio::time::advance(Duration::from_millis(2999)).await;
        assert_eq!(known.current("o"), Some(s));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(known.current("o"), None);
        assert!(known.all().is_empty());
    }
}
