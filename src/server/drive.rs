//! Driving a served connection to its end: graceful shutdown when the
//! listener drains, the header and idle timeouts, and the count of
//! requests in flight inside a tunnel.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use http::Response;

use super::{Lifecycle, Stop};
use crate::http::body::Body;

/// True if hyper ended a connection on a request it could not parse, after
/// answering it itself (400, 431 for headers too large, 505): an answer of
/// the proxy's that its service never saw, counted here.
pub(crate) fn answered_malformed(e: &hyper::Error) -> bool {
    e.is_parse() || e.is_parse_too_large()
}

/// Drives a served connection to its end. When its listener starts
/// draining, the connection shuts down gracefully (requests in flight
/// finish, then it closes); when the grace is over it is dropped. With
/// `idle`, it also shuts down gracefully once no request has been in
/// flight for that long (HTTP/2 has no header timeout of its own).
/// Returns the error the connection ended with, if any.
pub(crate) async fn drive<C, E>(
    conn: C,
    shutdown: fn(Pin<&mut C>),
    stop: Option<Stop>,
    idle: Option<(Duration, &InFlight)>,
    peer: SocketAddr,
    what: &'static str,
) -> Option<E>
where
    C: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    tokio::pin!(conn);
    let mut stop = stop;
    let requests = idle.map(|(_, f)| f);
    let idle = idle.map(|(t, _)| t);
    let mut shutting = false;
    // The idle timer is armed when the connection falls idle and left
    // running while requests come and go: when it fires early (a request
    // since), it is set again for the idle time after the last one ended.
    // A timer set and cancelled per request would cost more than the
    // request's own bookkeeping.
    let mut idle_over = std::pin::pin!(tokio::time::sleep_until(Instant::now()));
    let mut armed = false;
    loop {
        let phase = stop
            .as_mut()
            .map_or(Lifecycle::Serving, |s| *s.borrow_and_update());
        if phase == Lifecycle::Cut {
            tracing::debug!(%peer, "{what} closed: shutdown grace period over");
            return None;
        }
        if phase == Lifecycle::Draining && !shutting {
            shutting = true;
            shutdown(conn.as_mut());
        }
        let idle_since = requests.and_then(InFlight::idle_since);
        if let (Some(t), Some(since), false, false) = (idle, idle_since, shutting, armed) {
            idle_over.as_mut().reset(since + t);
            armed = true;
        }
        // The connection is polled on every wake-up, the listener's phase
        // only once registered and again when it has changed (or the waker
        // has): polling a registered `changed()` locks the watch's list of
        // waiters, and a connection wakes several times per request.
        let probe = stop.clone();
        // Unconstrained: out of Tokio's per-task budget, `changed()` would
        // return Pending without registering, and with the waker unchanged
        // it would not be polled again.
        let mut phase_changed = std::pin::pin!(tokio::task::unconstrained(changed(stop.as_mut())));
        let mut fell_idle = std::pin::pin!(fell_idle(requests));
        let mut registered: Option<std::task::Waker> = None;
        let event = std::future::poll_fn(|cx| {
            if let Poll::Ready(result) = conn.as_mut().poll(cx) {
                return Poll::Ready(Event::Ended(result));
            }
            let waker_moved = registered.as_ref().is_none_or(|w| !w.will_wake(cx.waker()));
            if waker_moved
                || probe
                    .as_ref()
                    .is_some_and(|p| p.has_changed().unwrap_or(true))
            {
                registered = Some(cx.waker().clone());
                if let Poll::Ready(changed) = phase_changed.as_mut().poll(cx) {
                    return Poll::Ready(Event::Lifecycle(changed));
                }
            }
            if fell_idle.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Event::InFlight);
            }
            if armed && idle_over.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Event::Idle);
            }
            Poll::Pending
        })
        .await;
        match event {
            Event::Ended(result) => {
                if let Err(e) = &result {
                    tracing::debug!(%peer, error = %e, "{what} ended with an error");
                }
                return result.err();
            }
            // The listener is gone altogether.
            Event::Lifecycle(Err(_)) => return None,
            Event::Lifecycle(Ok(())) | Event::InFlight => {}
            Event::Idle => {
                armed = false;
                let since = requests.and_then(InFlight::idle_since);
                // Fired early: a request came (and perhaps went) since it
                // was set; the top of the loop sets it again if idle.
                if shutting || idle.zip(since).is_none_or(|(t, s)| Instant::now() < s + t) {
                    continue;
                }
                tracing::debug!(%peer, "{what} idle: closing");
                shutting = true;
                shutdown(conn.as_mut());
            }
        }
    }
}

/// What woke [`drive`] up.
enum Event<E> {
    Ended(Result<(), E>),
    Lifecycle(Result<(), watch::error::RecvError>),
    InFlight,
    Idle,
}

/// The next change of `rx` (`Err` once its sender is gone); never, without
/// one. (The count of requests in flight cannot lose its sender while
/// [`drive`] runs: the caller lends the [`InFlight`].)
async fn changed<T>(rx: Option<&mut watch::Receiver<T>>) -> Result<(), watch::error::RecvError> {
    match rx {
        Some(rx) => rx.changed().await,
        None => std::future::pending().await,
    }
}

/// The next time the connection's last request in flight ends; never,
/// without a count.
async fn fell_idle(requests: Option<&InFlight>) {
    match requests {
        Some(r) => r.0.idle.notified().await,
        None => std::future::pending().await,
    }
}

/// Counts a connection's requests in flight, from the service call to the
/// end of the response body, and keeps when the last one ended.
#[derive(Clone)]
pub(crate) struct InFlight(Arc<Counts>);

struct Counts {
    in_flight: AtomicUsize,
    /// When the count last fell to 0, in nanoseconds after `base`.
    idle_at: AtomicU64,
    base: Instant,
    /// Told each time the count falls to 0 (a permit is kept if nobody
    /// waits yet, so the fall is never missed).
    idle: Notify,
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight(Arc::new(Counts {
            in_flight: AtomicUsize::new(0),
            idle_at: AtomicU64::new(0),
            base: Instant::now(),
            idle: Notify::new(),
        }))
    }
}

impl InFlight {
    /// Counts one request until the guard is dropped.
    pub(crate) fn start(&self) -> InFlightGuard {
        self.0.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlightGuard(self.0.clone())
    }

    /// A response whose body keeps `guard` until it is dropped.
    pub(crate) fn track(guard: InFlightGuard, resp: Response<Body>) -> Response<Body> {
        crate::http::body::hold_until_dropped(resp, guard)
    }

    /// Since when no request has been in flight; `None` while one is.
    fn idle_since(&self) -> Option<Instant> {
        if self.0.in_flight.load(Ordering::Acquire) != 0 {
            return None;
        }
        let nanos = self.0.idle_at.load(Ordering::Acquire);
        Some(self.0.base + Duration::from_nanos(nanos))
    }
}

/// One request in flight; see [`InFlight`].
pub(crate) struct InFlightGuard(Arc<Counts>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let counts = &self.0;
        let nanos = u64::try_from(counts.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // Stored before the count falls, so that whoever sees it at 0 sees
        // this time or a later one.
        counts.idle_at.fetch_max(nanos, Ordering::AcqRel);
        if counts.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            counts.idle.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Context;

    /// A connection that runs until it is told to shut down.
    #[derive(Default)]
    struct Conn {
        shut: bool,
    }

    impl Future for Conn {
        type Output = Result<(), std::convert::Infallible>;
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
            if self.shut {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            }
        }
    }

    const IDLE: Duration = Duration::from_secs(10);

    /// Lets the driving task run at the current (paused) time.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_time_runs_from_the_end_of_the_last_request() {
        let in_flight = InFlight::default();
        let counts = in_flight.clone();
        let peer: SocketAddr = ([127, 0, 0, 1], 9).into();
        let driven = tokio::spawn(async move {
            let idle = Some((IDLE, &counts));
            drive(
                Conn::default(),
                |c| c.get_mut().shut = true,
                None,
                idle,
                peer,
                "test",
            )
            .await
        });
        settle().await;
        // Requests one after another for 30 s, each 1 s: never idle for 10 s.
        for _ in 0..30 {
            let guard = in_flight.start();
            tokio::time::advance(Duration::from_secs(1)).await;
            drop(guard);
            settle().await;
            assert!(!driven.is_finished(), "closed while in use");
        }
        // One request in flight for longer than the idle time.
        let guard = in_flight.start();
        tokio::time::advance(IDLE * 2).await;
        settle().await;
        assert!(!driven.is_finished(), "closed with a request in flight");
        drop(guard);
        settle().await;
        tokio::time::advance(IDLE - Duration::from_millis(1)).await;
        settle().await;
        assert!(!driven.is_finished(), "closed before the idle time was up");
        tokio::time::advance(Duration::from_millis(2)).await;
        settle().await;
        assert!(driven.is_finished(), "still open after the idle time");
        assert!(driven.await.expect("drive").is_none());
    }
}
