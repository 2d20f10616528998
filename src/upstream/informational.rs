//! A cap on the informational (1xx) responses an origin may send before
//! its final one.
//!
//! An HTTP/1 client reads and skips 1xx responses, as many as come: an
//! origin that sends `100 Continue` without end would hold the request
//! (and the task serving it) until `upstream.response_timeout`, or a
//! robots.txt fetch until `robots.fetch_timeout`. hyper's client reports
//! each one to a callback a request may carry
//! (`hyper::ext::on_informational`), the in-task pool to [`count_one`];
//! counting them there, and racing the request against the count passing
//! the cap, ends the request (and drops its connection) at once. HTTP/2
//! origins are not counted: hyper gives no such callback there (h2 reads
//! informational HEADERS frames itself), and `response_timeout` bounds them.

use std::cell::Cell;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;

use http::Request;
use tokio::sync::Notify;

/// The origin sent more than `limit` informational responses to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Flooded {
    pub(crate) limit: usize,
}

impl std::fmt::Display for Flooded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the origin sent more than {} informational (1xx) responses before its answer",
            self.limit
        )
    }
}

impl std::error::Error for Flooded {}

struct Count {
    seen: AtomicUsize,
    over: Notify,
}

/// Sends `req` with `send`, ended with `Err` once the origin has sent more
/// than `limit` informational responses to it (the request's future is
/// dropped then, and with it the connection hyper was reading them from).
pub(crate) async fn capped<B, F, T>(
    mut req: Request<B>,
    limit: usize,
    send: impl FnOnce(Request<B>) -> F,
) -> Result<T, Flooded>
where
    F: Future<Output = T>,
{
    let count = Arc::new(Count {
        seen: AtomicUsize::new(0),
        over: Notify::new(),
    });
    let counter = count.clone();
    hyper::ext::on_informational(&mut req, move |_| {
        if counter.seen.fetch_add(1, Ordering::Relaxed) == limit {
            // Stored if nobody waits yet: the race below sees it.
            counter.over.notify_one();
        }
    });
    // A waker of its own, not a look at the count after each poll of the
    // request: the pooled client reads responses in its connection's task,
    // so the callback runs there and the request may never be polled again.
    tokio::select! {
        // The request first: polling it is what makes hyper read (and
        // report) the informational responses.
        biased;
        sent = send(req) => Ok(sent),
        () = count.over.notified() => Err(Flooded { limit }),
    }
}

/// What became of a request sent by [`capped_inline`].
pub(crate) enum Inline<T> {
    /// The send ended (with a response or an error).
    Sent(T),
    /// More than the cap of informational responses came first.
    Flooded(Flooded),
    /// Neither within the timeout.
    TimedOut,
}

thread_local! {
    /// Informational responses read on this thread during the current
    /// poll of a [`capped_inline`] request.
    static SEEN: Cell<usize> = const { Cell::new(0) };
}

/// Counts an informational response read for the request being polled on
/// this thread (the in-task pool reads them itself).
pub(crate) fn count_one() {
    SEEN.set(SEEN.get() + 1);
}

/// [`capped`] for a request whose connection is driven by the request's
/// own future (the plain-http [`super::Pool`]), with the response timeout:
/// the pool reads each 1xx while that future is polled, on the polling
/// thread, and counts it with [`count_one`], so a count kept by the thread,
/// read after each poll, ends the request without the `Notify` and the
/// race [`capped`] needs (nothing else runs on the thread during the poll,
/// so each request counts only its own). Ends with [`Inline::TimedOut`]
/// when `deadline` passes first: kept by the polling task's own timer when
/// it offers it (the listener's own server side does:
/// [`crate::http::clock::offering_wake`]), else by a timer of the
/// request's.
pub(crate) async fn capped_inline<B, F, T>(
    req: Request<B>,
    limit: usize,
    deadline: tokio::time::Instant,
    send: impl FnOnce(Request<B>) -> F,
) -> Inline<T>
where
    F: Future<Output = T>,
{
    let mut sent = std::pin::pin!(send(req));
    // Made only if no task's timer keeps the deadline.
    let mut expiry = std::pin::pin!(None::<tokio::time::Sleep>);
    let mut seen = 0usize;
    std::future::poll_fn(|cx| {
        SEEN.set(0);
        let poll = sent.as_mut().poll(cx);
        seen = seen.saturating_add(SEEN.replace(0));
        if seen > limit {
            return Poll::Ready(Inline::Flooded(Flooded { limit }));
        }
        if let Poll::Ready(t) = poll {
            return Poll::Ready(Inline::Sent(t));
        }
        if expiry.is_none() {
            match crate::http::clock::passed_or_wake_by(cx, deadline) {
                Some(true) => return Poll::Ready(Inline::TimedOut),
                Some(false) => return Poll::Pending,
                None => expiry.set(Some(tokio::time::sleep_until(deadline))),
            }
        }
        match expiry.as_mut().as_pin_mut().map(|e| e.poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Inline::TimedOut),
            _ => Poll::Pending,
        }
    })
    .await
}
