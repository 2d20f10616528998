//! A client connection of the proxy listener. Requests that
//! [`super::h1`] reads (HTTP/1.1, no body, no upgrade, well formed) are
//! served here, in the connection's task, with no dispatcher between the
//! socket and the proxy; from the first request it does not take, hyper's
//! server serves the connection, starting with the bytes already read, so
//! bodies, CONNECT, upgrades, `100-continue`, HTTP/1.0 and every answer to
//! a malformed request stay hyper's.
//!
//! What hyper's server promises is kept: the header timeout (counted from
//! the end of the previous response, so also the keep-alive idle timeout)
//! closes the connection without an answer; a client that hangs up while
//! its request is in flight drops the request (the proxy's queue forgets
//! it); graceful shutdown closes an idle connection and lets a request in
//! flight finish, answered with `connection: close`; a body that ends
//! short of its length, or fails, closes the connection.

use std::future::Future;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Method, Request};
use http_body_util::BodyExt;
use hyper::body::Body as _;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::h1::{self, BodyLength, Framing, Parsed};
use super::io::Prefixed;
use super::{ConnectionHold, ConnectionPolicy, Handler};
use crate::http::body::Body;

#[cfg(test)]
mod tests;

/// How much is read at a time (hyper's first read size).
const READ_SIZE: usize = 8 * 1024;

/// A response whose whole body is at most this long is written with its
/// body's first part, even if that part comes after the head.
const HOLD_HEAD_FOR: u64 = 16 * 1024;

/// A served client connection: a future that ends when the connection
/// does, and that can be told to shut down gracefully.
pub(crate) struct ClientConn<F> {
    serving: Pin<Box<F>>,
    shutdown: Arc<AtomicBool>,
}

impl<F: Future> Future for ClientConn<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // The request's phases read the time in several places: once.
        crate::http::clock::once_per_poll(|| self.serving.as_mut().poll(cx))
    }
}

impl<F> ClientConn<F> {
    /// Closes the connection once no request is in flight (hyper's
    /// `graceful_shutdown`); the caller polls it again after.
    pub(crate) fn graceful_shutdown(self: Pin<&mut Self>) {
        self.shutdown.store(true, Ordering::Relaxed);
    }
}

/// Serves `stream` for `proxy`; `hold` goes with CONNECT and upgrade
/// requests (see [`ConnectionHold`]).
pub(crate) fn serve<H: Handler>(
    stream: TcpStream,
    peer: SocketAddr,
    proxy: Arc<H>,
    hold: Arc<ConnectionHold>,
    policy: ConnectionPolicy,
) -> ClientConn<impl Future<Output = Result<(), hyper::Error>> + Send> {
    let shutdown = Arc::new(AtomicBool::new(false));
    let serving = Box::pin(run(
        Client {
            stream,
            peer,
            read: BytesMut::with_capacity(READ_SIZE),
            shutdown: shutdown.clone(),
            waited: false,
        },
        proxy,
        hold,
        policy,
    ));
    ClientConn { serving, shutdown }
}

/// The connection's socket and what has been read from it.
struct Client {
    stream: TcpStream,
    peer: SocketAddr,
    read: BytesMut,
    shutdown: Arc<AtomicBool>,
    /// Whether writing the last response waited (for the client to read,
    /// or for its body).
    waited: bool,
}

/// Why reading a request head stopped.
enum Waited {
    Read,
    Closed,
    TimedOut,
    ShutDown,
}

async fn run<H: Handler>(
    mut client: Client,
    proxy: Arc<H>,
    hold: Arc<ConnectionHold>,
    policy: ConnectionPolicy,
) -> Result<(), hyper::Error> {
    let connection = proxy.connection(client.peer);
    let mut headers = HeaderMap::new();
    let mut head = Vec::with_capacity(1024);
    // The header timeout runs from the connection's start, then from the
    // end of each response.
    let mut deadline = Instant::now() + policy.header_timeout;
    // One timer for the connection's life, moved to a later deadline only
    // when it fires early: setting it per request would cost more than the
    // rest of the request's bookkeeping. It also keeps the deadlines of the
    // requests in flight (their response timeouts), moved earlier only when
    // one comes before it.
    let mut timer = pin!(tokio::time::sleep_until(deadline));
    loop {
        // Once a head was found partial, how much of it was looked
        // through: it is parsed again only once it may be whole (or long
        // enough for hyper), so one that trickles in costs its length.
        let mut seen: Option<usize> = None;
        let simple = loop {
            // At MAX_HEAD bytes a partial head is hyper's.
            let longest = h1::MAX_HEAD - 1;
            if crate::http::headers::head_worth_parsing(&client.read, seen, longest) {
                match h1::parse_request(&mut client.read, std::mem::take(&mut headers)) {
                    Parsed::Simple(simple) => break simple,
                    Parsed::Partial => seen = Some(client.read.len()),
                    Parsed::Other => {
                        return hyper_serves(client, proxy, connection, hold, policy).await;
                    }
                }
            }
            match client.wait_for_head(timer.as_mut(), deadline).await {
                Waited::Read => {}
                Waited::TimedOut => {
                    tracing::debug!(peer = %client.peer, "client connection: no request within the header timeout");
                    return Ok(());
                }
                Waited::Closed | Waited::ShutDown => return Ok(()),
            }
        };
        let is_head = simple.request.method() == Method::HEAD;
        let request: Request<Body> = simple.request.map(|()| crate::http::body::empty_body());
        // Pinned here: a request's future is large, and each move of it
        // is a copy.
        let handling = pin!(
            proxy
                .clone()
                .handle(client.peer, connection.clone(), request)
        );
        let Some(response) = client.while_in_flight(handling, Some(timer.as_mut())).await else {
            // The client hung up: the request is dropped with it.
            return Ok(());
        };
        let keep_alive = simple.keep_alive && !client.shutdown.load(Ordering::Relaxed);
        let (mut parts, body) = response.into_parts();
        let length = (!body.is_end_stream()).then(|| match body.size_hint().exact() {
            Some(n) => BodyLength::Known(n),
            None => BodyLength::Unknown,
        });
        head.clear();
        // One clock read for the date and, unless writing waits, the next
        // header timeout.
        let now = crate::http::clock::now();
        let date = h1::date(now);
        let encoded = h1::encode_head(&mut parts, length, is_head, keep_alive, &date, &mut head);
        // The drained map holds the next request's fields (hyper does so).
        headers = parts.headers;
        let Ok(encoded) = encoded else {
            tracing::debug!(peer = %client.peer, "response head cannot be written: connection closed");
            return Ok(());
        };
        let body = length.map(|_| body);
        client.waited = false;
        let written = client.write_response(&head, body, encoded.framing).await;
        if !written || encoded.last {
            let _ = client.stream.shutdown().await;
            return Ok(());
        }
        let ended = if client.waited { Instant::now() } else { now };
        deadline = ended + policy.header_timeout;
        // Moved to a request's later deadline, the timer would fire late.
        if timer.deadline() > deadline {
            timer.as_mut().reset(deadline);
        }
    }
}

impl Client {
    /// Reads more of a request head, until `deadline`.
    async fn wait_for_head(&mut self, mut timer: Pin<&mut Sleep>, deadline: Instant) -> Waited {
        std::future::poll_fn(|cx| {
            // Shut down while idle (nothing of a next request read): close.
            if self.read.is_empty() && self.shutdown.load(Ordering::Relaxed) {
                return Poll::Ready(Waited::ShutDown);
            }
            match self.poll_read(cx) {
                Poll::Ready(true) => return Poll::Ready(Waited::Read),
                Poll::Ready(false) => return Poll::Ready(Waited::Closed),
                Poll::Pending => {}
            }
            while timer.as_mut().poll(cx).is_ready() {
                if Instant::now() >= deadline {
                    return Poll::Ready(Waited::TimedOut);
                }
                timer.as_mut().reset(deadline);
            }
            Poll::Pending
        })
        .await
    }

    /// Reads what the client sent; false at its end (or a read error).
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        if self.read.capacity() - self.read.len() < READ_SIZE / 8 {
            self.read.reserve(READ_SIZE);
        }
        match tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.read) {
            Poll::Ready(Ok(n)) => Poll::Ready(n > 0),
            Poll::Ready(Err(e)) => {
                tracing::debug!(peer = %self.peer, error = %e, "client connection read failed");
                Poll::Ready(false)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Runs `handling` to its response; `None` if the client hangs up
    /// first. (Bytes of a next request are kept, and the socket is not
    /// read further, until the response is written.) The connection's
    /// `timer`, if given, keeps the deadlines `handling` asks for
    /// ([`crate::http::clock::passed_or_wake_by`]).
    async fn while_in_flight<F: Future>(
        &mut self,
        mut handling: Pin<&mut F>,
        mut timer: Option<Pin<&mut Sleep>>,
    ) -> Option<F::Output> {
        std::future::poll_fn(|cx| {
            let (polled, wake_by) = match timer {
                Some(_) => {
                    crate::http::clock::offering_wake(cx.waker(), || handling.as_mut().poll(cx))
                }
                None => (handling.as_mut().poll(cx), None),
            };
            if let Poll::Ready(out) = polled {
                return Poll::Ready(Some(out));
            }
            if let (Some(at), Some(timer)) = (wake_by, timer.as_mut()) {
                // Moved only when it would fire too late, or has fired: a
                // deadline later than the next header timeout costs nothing
                // here until the timer fires early.
                if timer.is_elapsed() || at < timer.deadline() {
                    timer.as_mut().reset(at);
                }
                if timer.as_mut().poll(cx).is_ready() {
                    // A deadline may have passed: `handling` looks again in
                    // a poll of its own, with the clock read anew.
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            }
            if self.read.is_empty() && self.poll_read(cx) == Poll::Ready(false) {
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await
    }

    /// Writes a response: its `head`, then its body as `framing` says (the
    /// first part of the body with the head, when it is ready). False if
    /// the body failed or ended short, or the client is gone: the
    /// connection is then closed.
    async fn write_response(&mut self, head: &[u8], body: Option<Body>, framing: Framing) -> bool {
        let (mut body, mut left) = match (body, framing) {
            (Some(body), Framing::Length(n)) if n > 0 => (body, n),
            (Some(body), Framing::Chunked | Framing::CloseDelimited) => (body, u64::MAX),
            // A response declaring chunked framing with no body still ends
            // its (empty) chunked body, as hyper's does.
            (None, Framing::Chunked) => {
                return self
                    .write_all(&mut [IoSlice::new(head), IoSlice::new(b"0\r\n\r\n")])
                    .await;
            }
            _ => return self.write_all(&mut [IoSlice::new(head)]).await,
        };
        let chunked = framing == Framing::Chunked;
        let mut head = head;
        let mut chunk_line = Vec::with_capacity(18);
        loop {
            let polled = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut body).poll_frame(cx)));
            let frame = match polled.await {
                Poll::Ready(frame) => frame,
                Poll::Pending => {
                    self.waited = true;
                    // Not ready: the head goes first, as hyper flushes it,
                    // unless the whole body is small: an origin's head and
                    // small body often arrive a moment apart (nginx sends
                    // them as two segments), and one write instead of two
                    // saves more than the moment costs.
                    let small = matches!(framing, Framing::Length(n) if n <= HOLD_HEAD_FOR);
                    if !small && !head.is_empty() {
                        if !self.write_all(&mut [IoSlice::new(head)]).await {
                            return false;
                        }
                        head = &[];
                    }
                    // A client that hangs up while the body is awaited
                    // drops it (hyper's `mid_message_detect_eof`): a
                    // stalled upstream response is not kept for nobody.
                    match self.while_in_flight(pin!(body.frame()), None).await {
                        Some(frame) => frame,
                        None => {
                            tracing::debug!(peer = %self.peer, "client hung up while its response body was awaited");
                            return false;
                        }
                    }
                }
            };
            let data = match frame {
                None => {
                    let end: &[u8] = if chunked { b"0\r\n\r\n" } else { b"" };
                    let ended = self
                        .write_all(&mut [IoSlice::new(head), IoSlice::new(end)])
                        .await;
                    // A body shorter than its length leaves the client
                    // waiting for the rest: the connection closes.
                    return ended && !matches!(framing, Framing::Length(_));
                }
                Some(Err(e)) => {
                    tracing::debug!(peer = %self.peer, error = %e, "response body failed: connection closed");
                    let _ = self.write_all(&mut [IoSlice::new(head)]).await;
                    return false;
                }
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    // Trailers are not sent (hyper sends none unless the
                    // response declares them, and the proxy's do not).
                    Err(_) => continue,
                },
            };
            if data.is_empty() {
                continue;
            }
            let data = self.within_length(data, &mut left, framing);
            let end_stream = body.is_end_stream();
            chunk_line.clear();
            let mut tail: &[u8] = b"";
            if chunked {
                h1::chunk_head(data.len(), &mut chunk_line);
                tail = if end_stream {
                    b"\r\n0\r\n\r\n"
                } else {
                    b"\r\n"
                };
            }
            let mut parts = [
                IoSlice::new(head),
                IoSlice::new(&chunk_line),
                IoSlice::new(&data),
                IoSlice::new(tail),
            ];
            if !self.write_all(&mut parts).await {
                return false;
            }
            head = &[];
            match framing {
                // The rest of a longer body is not sent; one that ends
                // short closes the connection.
                Framing::Length(_) if left == 0 => return true,
                Framing::Length(_) if end_stream => return false,
                Framing::Chunked | Framing::CloseDelimited if end_stream => return true,
                _ => {}
            }
        }
    }

    /// `data` cut to what is left of a `Content-Length` body.
    fn within_length(&self, mut data: Bytes, left: &mut u64, framing: Framing) -> Bytes {
        if let Framing::Length(_) = framing {
            let n = u64::try_from(data.len()).unwrap_or(u64::MAX);
            if n > *left {
                tracing::debug!(peer = %self.peer, "response body longer than its length: cut");
                data.truncate(usize::try_from(*left).unwrap_or(usize::MAX));
            }
            *left -= n.min(*left);
        }
        data
    }

    /// Writes all of `parts`; false if the client is gone.
    async fn write_all(&mut self, mut parts: &mut [IoSlice<'_>]) -> bool {
        IoSlice::advance_slices(&mut parts, 0);
        while !parts.is_empty() {
            let written = std::future::poll_fn(|cx| {
                let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, parts);
                self.waited |= polled.is_pending();
                polled
            });
            match written.await {
                Ok(0) => return false,
                Ok(n) => IoSlice::advance_slices(&mut parts, n),
                Err(e) => {
                    tracing::debug!(peer = %self.peer, error = %e, "client connection write failed");
                    return false;
                }
            }
        }
        true
    }
}

/// Hands the connection to hyper's server, with what was read of its next
/// request, for the rest of its life.
async fn hyper_serves<H: Handler>(
    client: Client,
    proxy: Arc<H>,
    connection: H::Connection,
    hold: Arc<ConnectionHold>,
    policy: ConnectionPolicy,
) -> Result<(), hyper::Error> {
    let Client {
        stream,
        peer,
        read,
        shutdown,
        ..
    } = client;
    let service = service_fn(move |mut req: Request<Incoming>| {
        // A tunnel or an upgraded connection keeps the client connection's
        // slot and its part in shutdown until it closes.
        if req.method() == Method::CONNECT || crate::http::headers::is_upgrade(req.headers()) {
            req.extensions_mut().insert(hold.clone());
        }
        let (proxy, connection) = (proxy.clone(), connection.clone());
        let req = req.map(crate::http::body::incoming);
        async move { Ok::<_, std::convert::Infallible>(proxy.handle(peer, connection, req).await) }
    });
    let io = TokioIo::new(Prefixed::new(read.freeze(), stream));
    let mut conn = pin!(policy.http1().serve_connection(io, service).with_upgrades());
    let mut told = false;
    std::future::poll_fn(|cx| {
        if !told && shutdown.load(Ordering::Relaxed) {
            told = true;
            conn.as_mut().graceful_shutdown();
        }
        conn.as_mut().poll(cx)
    })
    .await
}
