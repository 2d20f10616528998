//! Response-time politeness (`politeness.latency_factor`): the interval
//! between requests to an origin is at least the factor times the median
//! of its recent times to first byte (Scrapy AutoThrottle's rule), so a
//! site that slows down is asked less often before it has to say 503.
//!
//! Per origin (scheme, host, port) this node keeps its last
//! [`SAMPLES`] times to first byte in a ring, in an LRU of at most
//! `max_tracked` origins, and the median in force. Without a fleet the
//! median is the ring's; in a fleet each response's time is also pushed
//! to Redis ([`crate::fleet::latency`]), and the median Redis returns, of
//! the whole fleet's last samples, replaces the local one (while Redis is
//! unavailable, the local one applies). The floor is applied as an
//! interval on the origin's Crawl-delay schedule for each agent, capped
//! by `max_crawl_delay`, and it moves with each response: a rise applies
//! from the next booking.
//!
//! Samples older than [`KEPT_FOR`] are forgotten: an origin not asked
//! for ten minutes is measured afresh. Medians are upper medians (of an
//! even count, the larger middle sample: the polite one).

use std::num::NonZeroUsize;
use std::time::Duration;

use lru::LruCache;
use parking_lot::Mutex;
use tokio::time::Instant;

pub use crate::fleet::latency::{KEPT_FOR, SAMPLES};

/// One origin's recent times to first byte.
#[derive(Debug)]
struct Samples {
    /// µs, saturated at `u32::MAX` (71 minutes).
    ring: [u32; SAMPLES],
    len: usize,
    next: usize,
    /// The median in force (the ring's, or the fleet's).
    median: Duration,
    /// When the last sample came.
    at: Instant,
}

impl Samples {
    fn new(now: Instant) -> Samples {
        Samples {
            ring: [0; SAMPLES],
            len: 0,
            next: 0,
            median: Duration::ZERO,
            at: now,
        }
    }

    fn push(&mut self, ttfb: Duration) {
        let us = u32::try_from(ttfb.as_micros()).unwrap_or(u32::MAX);
        self.ring[self.next] = us;
        self.next = (self.next + 1) % SAMPLES;
        self.len = (self.len + 1).min(SAMPLES);
        let mut sorted = self.ring;
        let held = &mut sorted[..self.len];
        held.sort_unstable();
        self.median = Duration::from_micros(u64::from(held[self.len / 2]));
    }
}

/// The recent response times of origins; share one per process.
#[derive(Debug)]
pub struct Latency {
    factor: f64,
    cap: Duration,
    origins: Mutex<LruCache<Box<str>, Samples>>,
}

impl Latency {
    /// `None` when `factor` is 0 (or not a finite positive number):
    /// nothing is measured then.
    pub fn new(factor: f64, max_tracked: usize, cap: Duration) -> Option<Latency> {
        (factor.is_finite() && factor > 0.0).then(|| Latency {
            factor,
            cap,
            origins: Mutex::new(LruCache::new(
                NonZeroUsize::new(max_tracked).unwrap_or(NonZeroUsize::MIN),
            )),
        })
    }

    /// Records a response's time to first byte from `origin`.
    pub fn observe(&self, origin: &str, ttfb: Duration) {
        let now = crate::http::clock::now();
        let mut origins = self.origins.lock();
        if let Some(s) = origins.get_mut(origin) {
            if now.saturating_duration_since(s.at) >= KEPT_FOR {
                *s = Samples::new(now);
            }
            s.at = now;
            s.push(ttfb);
            return;
        }
        let mut s = Samples::new(now);
        s.push(ttfb);
        origins.push(origin.into(), s);
    }

    /// Sets `origin`'s median to the fleet's.
    pub fn set_median(&self, origin: &str, median: Duration) {
        let now = crate::http::clock::now();
        let mut origins = self.origins.lock();
        match origins.get_mut(origin) {
            Some(s) => {
                s.median = median;
                s.at = now;
            }
            None => {
                let mut s = Samples::new(now);
                s.median = median;
                origins.push(origin.into(), s);
            }
        }
    }

    /// `origin`'s median time to first byte in force, if it has recent
    /// samples.
    pub fn median(&self, origin: &str) -> Option<Duration> {
        let origins = self.origins.lock();
        let s = origins.peek(origin)?;
        (crate::http::clock::now().saturating_duration_since(s.at) < KEPT_FOR).then_some(s.median)
    }

    /// The least interval between requests to `origin`: the factor times
    /// its median, at most `max_crawl_delay`; `None` without samples or
    /// when it is zero.
    pub fn floor(&self, origin: &str) -> Option<Duration> {
        let median = self.median(origin)?;
        let floor = median.as_secs_f64() * self.factor;
        let floor = if floor >= self.cap.as_secs_f64() {
            self.cap
        } else {
            Duration::from_secs_f64(floor)
        };
        (!floor.is_zero()).then_some(floor)
    }

    #[cfg(test)]
    /// Origins with samples.
    pub fn tracked(&self) -> usize {
        self.origins.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn off_at_zero_and_for_what_is_not_a_positive_number() {
        for f in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(
                Latency::new(f, 10, Duration::from_secs(60)).is_none(),
                "{f}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_floor_is_the_factor_times_the_median_of_the_last_samples() {
        let l = Latency::new(2.0, 10, Duration::from_secs(60)).expect("on");
        let o = "http://a.example:80";
        assert_eq!(l.floor(o), None, "no sample yet");
        for _ in 0..SAMPLES {
            l.observe(o, 10 * MS);
        }
        assert_eq!(l.floor(o), Some(20 * MS));
        // The median moves once more than half the samples are slow.
        for i in 0..SAMPLES / 2 {
            l.observe(o, 300 * MS);
            assert_eq!(l.floor(o), Some(20 * MS), "{} slow samples", i + 1);
        }
        l.observe(o, 300 * MS);
        assert_eq!(l.floor(o), Some(600 * MS));
        // The fleet's median replaces this node's.
        l.set_median(o, 50 * MS);
        assert_eq!(l.floor(o), Some(100 * MS));
        // Capped by max_crawl_delay.
        l.observe(o, Duration::from_secs(3600));
        l.set_median(o, Duration::from_secs(3600));
        assert_eq!(l.floor(o), Some(Duration::from_secs(60)));
        // Forgotten after KEPT_FOR without a response.
        tokio::time::advance(KEPT_FOR).await;
        assert_eq!(l.floor(o), None);
        l.observe(o, 5 * MS);
        assert_eq!(l.floor(o), Some(10 * MS), "measured afresh");
    }

    #[test]
    fn an_even_count_takes_the_larger_middle_and_origins_are_bounded() {
        let l = Latency::new(1.0, 2, Duration::from_secs(60)).expect("on");
        l.observe("a", 10 * MS);
        l.observe("a", 30 * MS);
        assert_eq!(l.median("a"), Some(30 * MS));
        l.observe("b", MS);
        l.observe("c", MS);
        assert_eq!(l.tracked(), 2);
        assert_eq!(l.median("a"), None, "the least recent origin dropped");
    }
}
