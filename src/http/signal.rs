//! An origin's own "slow down": a `429 Too Many Requests` or a
//! `503 Service Unavailable`, with or without `Retry-After` (RFC 9110
//! §10.2.3: delta-seconds or an HTTP-date). Pure: the caller gives the
//! clock.
//!
//! Only 429 and 503 are signals. RFC 9110 gives these two (and only
//! these) a `Retry-After` that means "come back later"; other 5xx are a
//! fault of the one request as often as of the site (a 500 for a bad URL,
//! a 502 or 504 from a gateway that lost one upstream), and pausing a whole
//! origin for one of them would let a single broken page stop a crawl.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;

/// Whether a response status asks the client to slow down.
pub fn is_signal(status: u16) -> bool {
    status == 429 || status == 503
}

/// The `Retry-After` of a response, as a wait from `now`: delta-seconds,
/// or an HTTP-date after `now`. A date not after `now`, a zero delay,
/// several values or anything unreadable count as no `Retry-After`
/// (the back-off applies then).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let mut values = headers.get_all(http::header::RETRY_AFTER).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let value = value.to_str().ok()?.trim_matches([' ', '\t']);
    let wait = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Delta-seconds too large for a u64 are very large: any cap
        // applies to them.
        Duration::from_secs(value.parse::<u64>().unwrap_or(u64::MAX))
    } else {
        let when = u64::try_from(super::date::parse(value)?).ok()?;
        (UNIX_EPOCH + Duration::from_secs(when))
            .duration_since(now)
            .ok()?
    };
    (!wait.is_zero()).then_some(wait)
}

/// A signal an origin gave, and the pause it made: for the answer to a
/// request refused meanwhile, `/explain` and the audit line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal {
    /// 429 or 503.
    pub status: u16,
    /// Its `Retry-After`, as asked (whole seconds, rounded up; before
    /// `max_retry_after`); `None` without one.
    pub retry_after: Option<u64>,
    /// When it was given (ms of Unix time).
    pub given: u64,
    /// When the pause it made ends (ms of Unix time).
    pub until: u64,
    /// The back-off level: 0 for a pause of `Retry-After`, n for the
    /// n-th back-off in a row (`backoff` × 2ⁿ⁻¹).
    pub level: u32,
}

impl Signal {
    /// What caused the pause: `retry_after` or `backoff`.
    pub fn cause(&self) -> &'static str {
        if self.level == 0 {
            "retry_after"
        } else {
            "backoff"
        }
    }

    /// One line for people: `429 with Retry-After: 3 at <date>, paused
    /// until <date>`.
    pub fn describe(&self) -> String {
        let at = |ms: u64| {
            i64::try_from(ms / 1000)
                .ok()
                .and_then(super::date::format)
                .unwrap_or_else(|| format!("{ms} ms"))
        };
        let asked = match (self.retry_after, self.level) {
            (Some(s), _) => format!("with Retry-After: {s}"),
            (None, n) => format!("without Retry-After (back-off level {n})"),
        };
        format!(
            "the origin answered {} {asked} at {}; paused until {}",
            self.status,
            at(self.given),
            at(self.until)
        )
    }
}

/// Milliseconds of Unix time of `t` (0 before the epoch).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    #[test]
    fn retry_after_reads_seconds_and_future_dates_only() {
        // Sun, 06 Nov 1994 08:49:37 GMT
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777);
        let ra = |v: &[&str]| retry_after(&headers(v), now);
        assert_eq!(ra(&[]), None);
        assert_eq!(ra(&["120"]), Some(Duration::from_secs(120)));
        assert_eq!(ra(&[" 3 "]), Some(Duration::from_secs(3)));
        assert_eq!(
            ra(&["Sun, 06 Nov 1994 08:50:07 GMT"]),
            Some(Duration::from_secs(30))
        );
        assert_eq!(ra(&["Sun, 06 Nov 1994 08:49:37 GMT"]), None, "now");
        assert_eq!(ra(&["Sun, 06 Nov 1994 08:00:00 GMT"]), None, "past");
        for junk in ["0", "-5", "1.5", "soon", "", "3, 4"] {
            assert_eq!(ra(&[junk]), None, "{junk:?}");
        }
        assert_eq!(ra(&["3", "4"]), None, "two values");
        assert_eq!(
            ra(&["99999999999999999999999"]),
            Some(Duration::from_secs(u64::MAX))
        );
    }

    #[test]
    fn only_429_and_503_are_signals() {
        for s in [429, 503] {
            assert!(is_signal(s));
        }
        for s in [200, 404, 500, 502, 504] {
            assert!(!is_signal(s));
        }
    }

    #[test]
    fn a_signal_describes_itself() {
        let s = Signal {
            status: 429,
            retry_after: Some(3),
            given: 784_111_777_000,
            until: 784_111_780_000,
            level: 0,
        };
        assert_eq!(s.cause(), "retry_after");
        assert_eq!(
            s.describe(),
            "the origin answered 429 with Retry-After: 3 at Sun, 06 Nov 1994 08:49:37 GMT; \
             paused until Sun, 06 Nov 1994 08:49:40 GMT"
        );
        let b = Signal {
            retry_after: None,
            level: 2,
            ..s
        };
        assert_eq!(b.cause(), "backoff");
        assert!(
            b.describe()
                .contains("without Retry-After (back-off level 2)")
        );
    }
}
