//! Driving a served connection to its end: graceful shutdown when the
//! listener drains, the header and idle timeouts, and the count of
//! requests in flight inside a tunnel.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::watch;
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
    let mut requests = idle.map(|(_, f)| f.subscribe());
    let idle = idle.map(|(t, _)| t);
    let mut shutting = false;
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
        let none_in_flight = requests
            .as_mut()
            .is_some_and(|rx| *rx.borrow_and_update() == 0);
        let deadline = match idle {
            Some(t) if !shutting && none_in_flight => Some(Instant::now() + t),
            _ => None,
        };
        // The connection is polled on every wake-up, the listener's phase
        // only once registered and again when it has changed (or the waker
        // has): polling a registered `changed()` locks the watch's list of
        // waiters, and a connection wakes several times per request.
        let probe = stop.clone();
        // Unconstrained: out of Tokio's per-task budget, `changed()` would
        // return Pending without registering, and with the waker unchanged
        // it would not be polled again.
        let mut phase_changed = std::pin::pin!(tokio::task::unconstrained(changed(stop.as_mut())));
        let mut requests_changed = std::pin::pin!(changed(requests.as_mut()));
        let mut idle_over = std::pin::pin!(sleep_until(deadline));
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
            if requests_changed.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Event::InFlight);
            }
            if idle_over.as_mut().poll(cx).is_ready() {
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

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Counts a connection's requests in flight, from the service call to the
/// end of the response body.
#[derive(Clone)]
pub(crate) struct InFlight(Arc<watch::Sender<usize>>);

impl Default for InFlight {
    fn default() -> Self {
        InFlight(Arc::new(watch::Sender::new(0)))
    }
}

impl InFlight {
    /// Counts one request until the guard is dropped.
    pub(crate) fn start(&self) -> InFlightGuard {
        self.0.send_modify(|n| *n += 1);
        InFlightGuard(self.0.clone())
    }

    /// A response whose body keeps `guard` until it is dropped.
    pub(crate) fn track(guard: InFlightGuard, resp: Response<Body>) -> Response<Body> {
        crate::http::body::hold_until_dropped(resp, guard)
    }

    fn subscribe(&self) -> watch::Receiver<usize> {
        self.0.subscribe()
    }
}

/// One request in flight; see [`InFlight`].
pub(crate) struct InFlightGuard(Arc<watch::Sender<usize>>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}
