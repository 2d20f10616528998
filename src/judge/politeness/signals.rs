//! An origin that says "slow down" ([`crate::http::signal`]: a 429 or
//! 503) is paused: no request goes to it, for any agent, until the pause
//! ends. With `Retry-After` the pause is what it asks (at most
//! `max_retry_after`); without, the back-off: `backoff`, doubling with
//! each repeat up to `backoff_max`, ±10% jitter (so the nodes of a fleet,
//! or clients released together, do not all come back at one instant).
//!
//! A repeat is a signal given after the previous pause ended: responses
//! that arrive during a pause answer requests sent before it began (a
//! burst of concurrent requests answered 503 together is one signal, not
//! ten doublings). The curve starts again at `backoff` once
//! `backoff_forgive` has passed since the last pause ended with no signal.
//!
//! Requests for a paused origin book their Crawl-delay slot no earlier
//! than the pause's end (`slot = max(now, next, pause end)`), so they go
//! after it spaced by the origin's schedule, or are refused with the
//! signal as the reason when the wait exceeds `max_wait`. Without a fleet
//! the pauses are this process's ([`Pauses`]); in a fleet, Redis's
//! (`crate::fleet::pauses`).

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use lru::LruCache;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::http::signal::{Signal, unix_ms};

/// `politeness.honor_retry_after` and the back-off curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalSettings {
    /// Whether a `Retry-After` is honoured (else the back-off applies to
    /// every signal).
    pub honor_retry_after: bool,
    /// The most one `Retry-After` can ask.
    pub max_retry_after: Duration,
    /// The first back-off pause; zero: no back-off.
    pub backoff: Duration,
    /// The ceiling of the doubling.
    pub backoff_max: Duration,
    /// This long after a pause ends with no signal, the curve starts
    /// again.
    pub backoff_forgive: Duration,
}

impl Default for SignalSettings {
    fn default() -> Self {
        SignalSettings {
            honor_retry_after: true,
            max_retry_after: Duration::from_secs(3600),
            backoff: Duration::from_secs(30),
            backoff_max: Duration::from_secs(3600),
            backoff_forgive: Duration::from_secs(600),
        }
    }
}

impl SignalSettings {
    /// The `Retry-After` honoured: capped, or none when not honoured.
    pub fn honoured(&self, retry_after: Option<Duration>) -> Option<Duration> {
        retry_after
            .filter(|_| self.honor_retry_after)
            .map(|r| r.min(self.max_retry_after))
    }

    /// The back-off pause at `level` (1-based), before jitter: `backoff`
    /// × 2^(level−1), at most `backoff_max`.
    pub fn backoff_at(&self, level: u32) -> Duration {
        let doubled = self
            .backoff
            .saturating_mul(1u32 << level.saturating_sub(1).min(31));
        doubled.min(self.backoff_max.max(self.backoff))
    }
}

/// `d` moved by `jitter` tenths of itself (`jitter` in [−1, 1]).
pub fn jittered(d: Duration, jitter: f64) -> Duration {
    let j = if jitter.is_finite() {
        jitter.clamp(-1.0, 1.0)
    } else {
        0.0
    };
    d.mul_f64(1.0 + 0.1 * j)
}

/// A number in [−1, 1] from the system's randomness.
pub fn random_jitter() -> f64 {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 2];
    if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
        return 0.0;
    }
    f64::from(u16::from_le_bytes(b)) / f64::from(u16::MAX) * 2.0 - 1.0
}

/// An origin's state: its pause and where it is on the curve.
#[derive(Debug, Clone, Copy)]
struct OriginState {
    until: Instant,
    level: u32,
    signal: Signal,
}

/// The pause one signal makes on an origin whose last pause ended at
/// `ended` (if any) at level `level`, `now`: the pause's length and the
/// new level; `None` when the signal makes none (a back-off during a
/// pause, or the back-off off). Pure.
pub fn pause_for(
    settings: &SignalSettings,
    retry_after: Option<Duration>,
    previous: Option<(Instant, u32)>,
    now: Instant,
    jitter: f64,
) -> Option<(Duration, u32)> {
    let level_before = previous.map_or(0, |(_, l)| l);
    if let Some(wait) = settings.honoured(retry_after) {
        return Some((wait, level_before));
    }
    if settings.backoff.is_zero() {
        return None;
    }
    let level = match previous {
        Some((until, _)) if now < until => return None,
        Some((until, level)) if now.duration_since(until) < settings.backoff_forgive => {
            level.saturating_add(1)
        }
        _ => 1,
    };
    Some((jittered(settings.backoff_at(level), jitter), level))
}

/// The pauses of this process's origins (no fleet): a bounded LRU, origin
/// → pause. A request to an origin not paused reads one atomic: the
/// latest end of any pause.
#[derive(Debug)]
pub struct Pauses {
    settings: SignalSettings,
    map: Mutex<LruCache<Box<str>, OriginState>>,
    /// The latest end of any pause, µs since `base`: 0, or past, when no
    /// origin is paused.
    latest: AtomicU64,
    base: Instant,
}

impl Pauses {
    pub fn new(settings: SignalSettings, capacity: usize) -> Pauses {
        Pauses {
            settings,
            map: Mutex::new(LruCache::new(
                NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
            )),
            latest: AtomicU64::new(0),
            base: Instant::now(),
        }
    }

    pub fn settings(&self) -> &SignalSettings {
        &self.settings
    }

    fn micros_of(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.base).as_micros()).unwrap_or(u64::MAX)
    }

    /// Records a signal `origin` gave (`status`, its `Retry-After` read
    /// as a wait), `now`; the pause it made, if it made one.
    pub fn record(
        &self,
        origin: &str,
        status: u16,
        retry_after: Option<Duration>,
        jitter: f64,
    ) -> Option<Signal> {
        let now = Instant::now();
        let mut map = self.map.lock();
        let previous = map.get(origin).map(|s| (s.until, s.level));
        let (pause, level) = pause_for(&self.settings, retry_after, previous, now, jitter)?;
        let until = previous.map_or(now, |(u, _)| u).max(now + pause);
        let wall = SystemTime::now();
        let given = unix_ms(wall);
        let signal = Signal {
            status,
            retry_after: retry_after.map(|r| r.as_secs() + u64::from(r.subsec_nanos() > 0)),
            given,
            until: given.saturating_add(
                u64::try_from(until.saturating_duration_since(now).as_millis()).unwrap_or(0),
            ),
            level: if retry_after.is_some() && self.settings.honor_retry_after {
                0
            } else {
                level
            },
        };
        map.put(
            origin.into(),
            OriginState {
                until,
                level,
                signal,
            },
        );
        self.latest
            .fetch_max(self.micros_of(until), Ordering::Relaxed);
        Some(signal)
    }

    /// Whether any origin may be paused now (one atomic read).
    pub fn any(&self) -> bool {
        self.latest.load(Ordering::Relaxed) > self.micros_of(crate::http::clock::now())
    }

    /// The pause in force on `origin` at `now`: when it ends, and the
    /// signal that made it.
    pub fn current(&self, origin: &str, now: Instant) -> Option<(Instant, Signal)> {
        if self.latest.load(Ordering::Relaxed) <= self.micros_of(now) {
            return None;
        }
        let map = self.map.lock();
        let s = map.peek(origin)?;
        (s.until > now).then_some((s.until, s.signal))
    }

    /// The last signal of `origin` and its back-off level, paused or not
    /// (for `/explain`).
    pub fn last(&self, origin: &str) -> Option<Signal> {
        self.map.lock().peek(origin).map(|s| s.signal)
    }

    /// Origins paused now, with their signals.
    pub fn paused(&self) -> Vec<(String, Signal)> {
        let now = Instant::now();
        self.map
            .lock()
            .iter()
            .filter(|(_, s)| s.until > now)
            .map(|(k, s)| (k.to_string(), s.signal))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn retry_after_is_capped_and_can_be_ignored() {
        let mut set = SignalSettings {
            max_retry_after: s(60),
            ..SignalSettings::default()
        };
        let now = Instant::now();
        assert_eq!(pause_for(&set, Some(s(3)), None, now, 0.0), Some((s(3), 0)));
        assert_eq!(
            pause_for(&set, Some(s(3600)), None, now, 0.0),
            Some((s(60), 0))
        );
        set.honor_retry_after = false;
        assert_eq!(
            pause_for(&set, Some(s(3)), None, now, 0.0),
            Some((s(30), 1))
        );
    }

    #[test]
    fn backoff_doubles_to_its_ceiling_and_is_forgiven() {
        let set = SignalSettings {
            backoff: s(30),
            backoff_max: s(100),
            backoff_forgive: s(600),
            ..SignalSettings::default()
        };
        let t0 = Instant::now();
        let first = pause_for(&set, None, None, t0, 0.0);
        assert_eq!(first, Some((s(30), 1)));
        // During the pause: no repeat.
        assert_eq!(
            pause_for(&set, None, Some((t0 + s(30), 1)), t0 + s(5), 0.0),
            None
        );
        // After it: doubled, then the ceiling.
        let ended = t0 + s(30);
        assert_eq!(
            pause_for(&set, None, Some((ended, 1)), ended + s(1), 0.0),
            Some((s(60), 2))
        );
        assert_eq!(
            pause_for(&set, None, Some((ended, 2)), ended + s(1), 0.0),
            Some((s(100), 3))
        );
        // Forgiven: from the start.
        assert_eq!(
            pause_for(&set, None, Some((ended, 5)), ended + s(600), 0.0),
            Some((s(30), 1))
        );
        // Off.
        let off = SignalSettings {
            backoff: Duration::ZERO,
            ..set
        };
        assert_eq!(pause_for(&off, None, None, t0, 0.0), None);
        // A huge level does not overflow.
        assert_eq!(set.backoff_at(u32::MAX), s(100));
    }

    #[test]
    fn jitter_is_ten_percent_at_most() {
        assert_eq!(jittered(s(100), 1.0), s(110));
        assert_eq!(jittered(s(100), -1.0), s(90));
        assert_eq!(jittered(s(100), 7.0), s(110));
        assert_eq!(jittered(s(100), f64::NAN), s(100));
        for _ in 0..100 {
            let j = random_jitter();
            assert!((-1.0..=1.0).contains(&j));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn three_503s_pause_backoff_twice_and_four_times_on_the_paused_clock() {
        let p = Pauses::new(SignalSettings::default(), 100);
        let o = "http://a.example:80";
        let mut pauses = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            let signal = p.record(o, 503, None, 0.0).expect("a pause");
            let (until, current) = p.current(o, t).expect("paused");
            assert_eq!(current, signal);
            pauses.push(until - t);
            // Nothing goes before the end; then the next 503.
            tokio::time::advance(until - t - Duration::from_millis(1)).await;
            assert!(p.current(o, Instant::now()).is_some());
            tokio::time::advance(Duration::from_millis(1)).await;
            assert!(p.current(o, Instant::now()).is_none());
        }
        assert_eq!(pauses, [s(30), s(60), s(120)]);
        assert_eq!(p.last(o).map(|s| s.level), Some(3));
        // A 429 with Retry-After: level 0 in the signal, the curve kept.
        let ra = p.record(o, 429, Some(s(5)), 0.0).expect("a pause");
        assert_eq!((ra.level, ra.retry_after), (0, Some(5)));
        assert_eq!(ra.until - ra.given, 5000);
        tokio::time::advance(s(5)).await;
        assert_eq!(p.record(o, 503, None, 0.0).map(|s| s.level), Some(4));
    }

    #[tokio::test(start_paused = true)]
    async fn a_paused_origin_holds_every_agent_then_spaces_or_refuses() {
        use crate::judge::politeness::{Mode, NotNow, Politeness, PolitenessSettings};
        let p = std::sync::Arc::new(Politeness::new(PolitenessSettings {
            mode: Mode::Delay {
                max_wait: s(10),
                max_queue: 0,
            },
            ..PolitenessSettings::default()
        }));
        let origin = "https://a.example:443";
        let t0 = Instant::now();
        p.record_signal(origin, 429, Some(s(3))).expect("a pause");
        // No Crawl-delay: held to the pause's end, whatever the agent.
        let q = p.clone();
        let free = tokio::spawn(async move {
            q.acquire_signalled(&format!("{origin} otherbot"), None)
                .await
        });
        // A Crawl-delay of 1 s: the first at the end, the next 1 s later.
        let mut spaced = Vec::new();
        for _ in 0..2 {
            let q = p.clone();
            spaced.push(tokio::spawn(async move {
                q.acquire_signalled(&format!("{origin} bot"), Some(1.0))
                    .await
                    .map(|_| t0.elapsed())
            }));
        }
        assert_eq!(free.await.expect("task"), Ok(s(3)));
        let mut at = Vec::new();
        for t in spaced {
            at.push(t.await.expect("task").expect("held"));
        }
        at.sort();
        assert_eq!(at, [s(3), s(4)]);
        // Past max_wait: refused with the signal.
        p.record_signal(origin, 503, Some(s(60))).expect("a pause");
        match p.acquire_signalled(&format!("{origin} bot"), None).await {
            Err(NotNow::Paused(limited, signal)) => {
                assert_eq!(limited.retry_after, s(60));
                assert_eq!((signal.status, signal.retry_after), (503, Some(60)));
            }
            other => panic!("{other:?}"),
        }
        // Another origin is not paused.
        assert_eq!(
            p.acquire_signalled("https://b.example:443 bot", None).await,
            Ok(Duration::ZERO)
        );
    }
}
