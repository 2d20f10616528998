//! One clock read per poll of a client connection's task. A forwarded
//! request reads the time in several places (the robots.txt entry's
//! freshness, the origin's response-time floor, the exchange's timing,
//! the next header timeout), a few microseconds apart, and each read of
//! the clock costs about 30 ns on a virtual machine; [`now`] inside
//! [`once_per_poll`] reads it once and gives the same instant to every
//! caller in that poll. Outside, it reads the clock.
//!
//! A poll runs no other task and the paused clock of tests does not move
//! during one, so callers see what they would have read, give or take the
//! poll's own few microseconds.

use std::cell::Cell;

use tokio::time::Instant;

/// What [`now`] does on this thread.
#[derive(Clone, Copy)]
enum Reading {
    /// Read the clock every time.
    Always,
    /// Inside a poll: read it once.
    Unread,
    Read(Instant),
}

thread_local! {
    static READING: Cell<Reading> = const { Cell::new(Reading::Always) };
}

/// The current instant: within [`once_per_poll`], the one read of the
/// clock for that poll.
pub(crate) fn now() -> Instant {
    READING.with(|r| match r.get() {
        Reading::Always => Instant::now(),
        Reading::Read(at) => at,
        Reading::Unread => {
            let at = Instant::now();
            r.set(Reading::Read(at));
            at
        }
    })
}

/// Runs `poll` (one poll of a task) with [`now`] reading the clock at most
/// once.
pub(crate) fn once_per_poll<R>(poll: impl FnOnce() -> R) -> R {
    /// Puts back what was there (also if `poll` panics).
    struct Restore(Reading);
    impl Drop for Restore {
        fn drop(&mut self) {
            READING.with(|r| r.set(self.0));
        }
    }
    let _restore = Restore(READING.with(|r| r.replace(Reading::Unread)));
    poll()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn one_read_per_poll_and_fresh_reads_outside() {
        let first = once_per_poll(|| {
            let a = now();
            std::thread::sleep(Duration::from_millis(2));
            assert_eq!(now(), a, "read again within the poll");
            a
        });
        tokio::time::advance(Duration::from_secs(1)).await;
        let outside = now();
        assert!(outside >= first + Duration::from_secs(1));
        let second = once_per_poll(now);
        assert!(second >= outside, "the next poll reads anew");
        // Nested: the inner poll reads anew, the outer keeps its instant.
        once_per_poll(|| {
            let outer = now();
            std::thread::sleep(Duration::from_millis(1));
            let inner = once_per_poll(now);
            assert!(inner >= outer);
            assert_eq!(now(), outer);
        });
    }
}
