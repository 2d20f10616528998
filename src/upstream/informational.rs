//! A cap on the informational (1xx) responses an origin may send before
//! its final one.
//!
//! hyper's HTTP/1 client reads and skips 1xx responses by itself, as many
//! as come: an origin that sends `100 Continue` without end holds the
//! request (and the task serving it) until `upstream.response_timeout`,
//! or a robots.txt fetch until `robots.fetch_timeout`. hyper reports each
//! one to a callback a request may carry (`hyper::ext::on_informational`);
//! counting them there, and racing the request against the count passing
//! the cap, ends the request (and drops its connection) at once. HTTP/2
//! origins are not counted: hyper gives no such callback there (h2 reads
//! informational HEADERS frames itself), and `response_timeout` bounds them.

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

/// [`capped`] for a request whose connection is driven by the request's
/// own future (the plain-http [`super::Pool`]): hyper reports each 1xx
/// while that future is polled, so a look at the count after each poll
/// ends it, without the `Notify` and the race [`capped`] needs.
pub(crate) async fn capped_inline<B, F, T>(
    mut req: Request<B>,
    limit: usize,
    send: impl FnOnce(Request<B>) -> F,
) -> Result<T, Flooded>
where
    F: Future<Output = T>,
{
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    hyper::ext::on_informational(&mut req, move |_| {
        counter.fetch_add(1, Ordering::Relaxed);
    });
    let mut sent = std::pin::pin!(send(req));
    std::future::poll_fn(|cx| {
        let poll = sent.as_mut().poll(cx);
        if seen.load(Ordering::Relaxed) > limit {
            return Poll::Ready(Err(Flooded { limit }));
        }
        poll.map(Ok)
    })
    .await
}
