//! Upstream HTTP/1.1 connections, plain or TLS, driven in the task that
//! serves the client.
//!
//! hyper-util's pooled client runs every upstream connection in a task of
//! its own: the response is read there, handed over a channel and read
//! again by the task that serves the client, so each request waits in the
//! run queue twice and often crosses threads. Here the request is written,
//! and the response read and relayed, in the client's own task (HTTP/1.1
//! to an `http` origin without a request body, what a scraper mostly sends
//! through a proxy, and what an intercepted HTTPS request becomes), the way
//! an event-loop proxy does it: the response body reads the connection
//! while it is read. Once read to the end the
//! connection goes back to a shared idle pool, so an origin sees as many
//! connections as requests in flight to it, not one per client connection.
//!
//! The bytes on the wire are [`super::wire`]'s: one write for the request
//! head, `httparse` for the response head, the body's framing decided as
//! hyper's client decides it; for an `https` origin, over TLS with the
//! pooled client's configuration ([`super::stream`]). An `https` origin
//! that chooses HTTP/2 by ALPN gets the request that found it out over
//! that connection, and is remembered for a while ([`super::h2`]): its
//! requests go to the pooled client, which keeps one multiplexed
//! connection per origin. Requests with a body go there too.

use parking_lot::{Mutex, MutexGuard};
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::Instant;

use crate::http::headers::head_worth_parsing;

use bytes::{Buf, Bytes, BytesMut};
use http::{Request, Response};
use hyper::body::{Frame, SizeHint};
use lru::LruCache;
use tokio::io::AsyncWriteExt;

use super::client::ClientSettings;
use super::dial::{connect_upstream, url_host};
use super::error::{ErrorKind, UpstreamError};
use super::h2::{self, H2Origins};
use super::informational;
use super::stream::{self, Protocol, Stream};
use super::wire::{self, BodyReader, Parsed, Read, WireError};
use crate::http::body::{Body, BodyError};
use crate::http::origin::{Origin, Scheme};

/// Bytes asked of the socket per read at first; doubled while reads fill
/// what they are given (a large body), up to [`READ_MAX`].
const READ_MIN: usize = 8 * 1024;
const READ_MAX: usize = 128 * 1024;

/// One upstream HTTP/1.1 connection: the socket, the bytes read from it
/// and not yet taken, and the buffer requests are written from. Kept
/// boxed: it moves from the pool to a response body and back on every
/// request.
struct Conn {
    origin: Origin,
    stream: Stream,
    read: BytesMut,
    /// How much the next read asks for.
    read_size: usize,
    /// The largest room reserved in `read` since it was made: its
    /// allocation may be that large while the view left of it is small.
    reserved: usize,
    write: Vec<u8>,
}

/// Why an exchange failed, and whether the request may go on another
/// connection: only if it could not be written (a reused connection the
/// origin closed while idle, found out as the request went out). Once
/// written, the origin may have acted on it: it is not sent again.
struct Failed {
    error: BodyError,
    unsent: bool,
}

impl Failed {
    fn new(error: impl std::error::Error + Send + Sync + 'static, unsent: bool) -> Failed {
        Failed {
            error: BodyError::new(error),
            unsent,
        }
    }
}

impl Conn {
    fn new(origin: Origin, stream: Stream) -> Conn {
        Conn {
            origin,
            stream,
            read: BytesMut::new(),
            read_size: READ_MIN,
            reserved: 0,
            write: Vec::new(),
        }
    }

    /// Reads what has arrived into `read`; `Ok(0)` at the connection's end.
    /// (Through `AsyncRead`: a read shorter than asked clears the socket's
    /// readiness, so the next one waits for the event loop instead of
    /// asking the socket and being told to wait.)
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.read.capacity() - self.read.len() < self.read_size / 2 {
            self.read.reserve(self.read_size);
            self.reserved = self.reserved.max(self.read.capacity());
        }
        let room = self.read.capacity() - self.read.len();
        let n = ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut self.stream),
            cx,
            &mut self.read
        ))?;
        if n == room && self.read_size < READ_MAX {
            self.read_size *= 2;
        } else if n < room / 4 && self.read_size > READ_MIN {
            self.read_size /= 2;
        }
        Poll::Ready(Ok(n))
    }

    /// Writes the request head and reads the final response head, skipping
    /// (and counting) informational ones.
    async fn exchange(&mut self, req: &mut http::request::Parts) -> Result<wire::Head, Failed> {
        let target = req.uri.path_and_query().map_or("/", |pq| pq.as_str());
        self.write.clear();
        wire::encode_request(&mut self.write, &req.method, target, &req.headers)
            .map_err(|e| Failed::new(e, false))?;
        if let Err(e) = self.stream.write_all(&self.write).await {
            return Err(Failed::new(e, true));
        }
        // Not sent until flushed: TLS may hold records back.
        if let Err(e) = self.stream.flush().await {
            return Err(Failed::new(e, true));
        }
        // Written: the request's map holds the response's fields (a
        // request that was sent is not sent again).
        let mut headers = std::mem::take(&mut req.headers);
        // Once a head was found partial, the bytes of `read` looked through
        // for its end since: a head that trickles in is parsed again only
        // once an empty line may end it, not at every read (which would
        // cost the square of its length). A head that comes whole is
        // parsed at once. Empty lines before a head (httparse skips them
        // too) are taken off here, so that they are not read as its end.
        let mut seen: Option<usize> = None;
        let mut skipped = 0usize;
        loop {
            let lead = leading_empty_lines(&self.read);
            if lead > 0 {
                self.read.advance(lead);
                skipped += lead;
                seen = None;
                if skipped > wire::MAX_HEAD_BYTES {
                    return Err(Failed::new(WireError::HeadTooLarge, false));
                }
            }
            if head_worth_parsing(&self.read, seen, wire::MAX_HEAD_BYTES) {
                match wire::parse_response(&mut self.read, &req.method, &mut headers) {
                    Ok(Parsed::Final(head)) => return Ok(head),
                    Ok(Parsed::Interim) => {
                        informational::count_one();
                        seen = None;
                        continue;
                    }
                    Ok(Parsed::Partial) => {}
                    Err(e) => return Err(Failed::new(e, false)),
                }
            }
            if !self.read.is_empty() {
                seen = Some(self.read.len());
            }
            match poll_fn(|cx| self.poll_fill(cx)).await {
                Ok(0) => return Err(Failed::new(WireError::Incomplete, false)),
                Ok(_) => {}
                Err(e) => return Err(Failed::new(e, false)),
            }
        }
    }

    /// True if an idle connection can take a request: nothing has arrived
    /// on it (an origin's close, or bytes no request asked for).
    fn still_open(&mut self) -> bool {
        self.read.is_empty() && self.stream.still_open()
    }
}

/// How many bytes of empty lines (CRLF or LF) `buf` starts with.
fn leading_empty_lines(buf: &[u8]) -> usize {
    let mut n = 0;
    loop {
        match &buf[n..] {
            [b'\r', b'\n', ..] => n += 2,
            [b'\n', ..] => n += 1,
            _ => return n,
        }
    }
}

/// Read and write buffers larger than this are not kept by an idle
/// connection (a large response grew them).
const KEPT_BUFFER: usize = 2 * READ_MIN;

struct Idle {
    conn: Box<Conn>,
    since: Instant,
}

/// Idle connections per origin, oldest first, origins in the order they
/// were last used; and how many there are in all. Looked up twice per
/// request: hashed with the robots cache's hasher, not the slower SipHash.
struct IdleMap {
    by_origin: LruCache<Origin, Vec<Idle>, lru::DefaultHasher>,
    total: usize,
}

impl IdleMap {
    fn new() -> IdleMap {
        IdleMap {
            by_origin: LruCache::unbounded_with_hasher(lru::DefaultHasher::default()),
            total: 0,
        }
    }

    /// Takes the oldest connection of the origin used longest ago that has
    /// one (lists left empty by `take` wait for the sweeper), leaving that
    /// origin where it is in the order.
    fn evict_one(&mut self) -> Option<Idle> {
        let (_, list) = self
            .by_origin
            .iter_mut()
            .rev()
            .find(|(_, list)| !list.is_empty())?;
        let oldest = list.remove(0);
        self.total -= 1;
        Some(oldest)
    }

    /// The count kept in `total`, recounted (tests check they agree).
    #[cfg(test)]
    fn recount(&self) -> usize {
        self.by_origin.iter().map(|(_, list)| list.len()).sum()
    }
}

/// Idle connections shared by all client connections, per origin, newest
/// last, at most `pool_idle_per_host` per origin and `pool_idle_max` in
/// all (beyond it the oldest of the origin used longest ago is closed, so
/// a crawl over many origins does not pile up sockets). Connections here
/// are polled only by the sweeper: one the origin closed in between is
/// found out when it is next used, and the request goes on another.
pub(crate) struct Pool {
    /// The same settings as the pooled client's: connect timeout,
    /// destination policy, idle limits.
    settings: ClientSettings,
    /// Idle connections per serving thread ([`set_serving_thread`]): a
    /// socket is registered with the event loop of the thread that opened
    /// it, and reused on another its readiness would have to cross threads
    /// (a wake-up of the other loop and of this one for every read).
    shards: Box<[Mutex<IdleMap>]>,
    /// `pool_idle_per_host` per shard, as nginx's `keepalive` is per
    /// worker: a thread serving most of the clients keeps the connections
    /// it needs. The total, `pool_idle_max`, is shared out among the
    /// shards (rounded up), so the descriptor budget holds.
    per_host: usize,
    max: usize,
    /// The pooled client's TLS configuration (trust anchors, ALPN h2 and
    /// http/1.1), for `https` origins.
    tls: Arc<rustls::ClientConfig>,
    /// The `https` origins that chose HTTP/2.
    h2: H2Origins,
}

/// A new connection: one this pool drives, or a TLS one on which the
/// origin chose HTTP/2.
enum Connected {
    Http1(Box<Conn>),
    H2(Stream),
}

thread_local! {
    static SHARD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Marks the calling thread as serving thread `i` (0, the default, for
/// the first): its requests take and give back idle connections in shard
/// `i`.
pub(crate) fn set_serving_thread(i: usize) {
    SHARD.set(i);
}

impl Pool {
    /// A pool, and (inside a Tokio runtime) the task that closes its
    /// expired connections.
    #[cfg(test)]
    pub(crate) fn new(settings: ClientSettings, tls: Arc<rustls::ClientConfig>) -> Arc<Pool> {
        Pool::for_threads(settings, tls, 1)
    }

    /// A pool for `threads` serving threads: one shard of idle connections
    /// each; `tls` is the configuration for `https` origins.
    pub(crate) fn for_threads(
        settings: ClientSettings,
        tls: Arc<rustls::ClientConfig>,
        threads: usize,
    ) -> Arc<Pool> {
        let threads = threads.max(1);
        let pool = Arc::new(Pool {
            per_host: settings.pool_idle_per_host,
            max: settings.pool_idle_max.div_ceil(threads),
            h2: H2Origins::new(settings.pool_idle_timeout),
            settings,
            shards: (0..threads).map(|_| Mutex::new(IdleMap::new())).collect(),
            tls,
        });
        Pool::spawn_sweeper(&pool);
        pool
    }

    pub(crate) fn settings(&self) -> &ClientSettings {
        &self.settings
    }

    /// True if `origin` (`https`) recently chose HTTP/2: its requests are
    /// for the pooled client.
    pub(crate) fn speaks_h2(&self, origin: &Origin) -> bool {
        self.h2.knows(origin)
    }

    /// The calling thread's shard.
    fn lock(&self) -> MutexGuard<'_, IdleMap> {
        self.shards[SHARD.get() % self.shards.len()].lock()
    }

    /// The newest idle connection to `origin` that has not expired.
    fn take(&self, origin: &Origin) -> Option<Box<Conn>> {
        let now = crate::http::clock::now();
        let mut expired = Vec::new();
        let found = {
            let mut idle = self.lock();
            let list = idle.by_origin.get_mut(origin)?;
            // Newest last; an expired one means the rest are older still.
            let found = match list.pop() {
                Some(i) if now.duration_since(i.since) < self.settings.pool_idle_timeout => {
                    Some(i.conn)
                }
                Some(i) => {
                    expired = std::mem::take(list);
                    expired.push(i);
                    None
                }
                None => None,
            };
            idle.total -= usize::from(found.is_some()) + expired.len();
            found
        };
        // An empty list stays for the next hand-back (no key to clone
        // then); the sweeper removes it if none comes. Sockets are closed
        // after the lock is released: closing is a syscall.
        drop(expired);
        found
    }

    /// Keeps `conn` for reuse, within the per-origin limit (the origin's
    /// oldest goes first) and the total one (the oldest of the origin used
    /// longest ago goes first).
    ///
    /// Bytes no request asked for (an origin that read a request's body as
    /// another request, and answered it) never make it here: a connection
    /// with bytes left after its response is not handed back, and one
    /// that receives any while idle is closed when next taken
    /// ([`Conn::still_open`]). Bytes that arrive after the next request was
    /// written cannot be told from that request's answer: the proxy refuses
    /// to forward the bodies that cause them
    /// (`proxy::forward::undefined_body`).
    fn put(&self, mut conn: Box<Conn>) {
        if self.per_host == 0 || self.max == 0 {
            return;
        }
        if conn.reserved > KEPT_BUFFER {
            conn.read = BytesMut::new();
            conn.read_size = READ_MIN;
            conn.reserved = 0;
        }
        if conn.write.capacity() > KEPT_BUFFER {
            conn.write = Vec::new();
        }
        let (oldest, evicted) = {
            let mut idle = self.lock();
            let since = crate::http::clock::now();
            let oldest = match idle.by_origin.get_mut(&conn.origin) {
                Some(list) => {
                    let oldest = (list.len() >= self.per_host).then(|| list.remove(0));
                    list.push(Idle { conn, since });
                    oldest
                }
                None => {
                    idle.by_origin
                        .push(conn.origin.clone(), vec![Idle { conn, since }]);
                    None
                }
            };
            idle.total += usize::from(oldest.is_none());
            let evicted = if idle.total > self.max {
                idle.evict_one()
            } else {
                None
            };
            (oldest, evicted)
        };
        // Closed after the lock is released: closing a socket is a syscall.
        drop((oldest, evicted));
    }

    /// Closes the connections idle for longer than the timeout and those
    /// the origin has closed (idle connections are not polled otherwise, and
    /// a closed one would hold its socket until it expired).
    fn sweep(&self) {
        let now = Instant::now();
        let timeout = self.settings.pool_idle_timeout;
        for shard in &self.shards {
            let mut closed: Vec<Idle> = Vec::new();
            {
                let mut idle = shard.lock();
                idle.by_origin.retain(|_, list| {
                    // Oldest first: the expired ones are a prefix.
                    let n = list.partition_point(|i| now.duration_since(i.since) >= timeout);
                    closed.extend(list.drain(..n));
                    closed.extend(list.extract_if(.., |i| !i.conn.still_open()));
                    !list.is_empty()
                });
                idle.total -= closed.len();
            }
            drop(closed);
        }
    }

    /// Sweeps `pool` every half idle timeout, at most every 5 s, for as
    /// long as the pool exists. Needs a Tokio runtime.
    fn spawn_sweeper(pool: &Arc<Pool>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let period = (pool.settings.pool_idle_timeout / 2)
            .clamp(Duration::from_millis(10), Duration::from_secs(5));
        let pool = Arc::downgrade(pool);
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match pool.upgrade() {
                    Some(pool) => pool.sweep(),
                    None => return,
                }
            }
        });
    }

    /// Sends `req` (Host set, no body: requests with a body go over the
    /// pooled client) to `origin`, over the newest idle connection or a new
    /// one. A request that a reused connection could not take (closed by
    /// the origin as the request went out) is sent again on another. The
    /// response's body reads the connection until it ends, then hands the
    /// connection back. A new TLS connection on which the origin chose
    /// HTTP/2 takes the request over HTTP/2 (see [`super::h2`]).
    pub(crate) async fn send(
        self: &Arc<Self>,
        origin: &Origin,
        req: Request<Body>,
    ) -> Result<Response<Body>, UpstreamError> {
        let (mut parts, _) = req.into_parts();
        // A target that cannot be written fails before a connection is taken.
        let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
        wire::check_target(target).map_err(|e| UpstreamError::new(e, &url_host(origin)))?;
        loop {
            let (mut conn, reused) = match self.take(origin) {
                Some(c) => (c, true),
                // Boxed: a new connection is the rare case, and its future
                // inline would enlarge every request's future, which is
                // moved at each level above.
                None => match Box::pin(self.connect(origin)).await? {
                    Connected::Http1(conn) => (conn, false),
                    Connected::H2(stream) => {
                        self.h2.learn(origin);
                        return Box::pin(h2::send(origin, parts, stream)).await;
                    }
                },
            };
            if reused && !conn.still_open() {
                continue;
            }
            let head = match conn.exchange(&mut parts).await {
                Ok(head) => head,
                Err(f) if f.unsent && reused => continue,
                Err(f) => return Err(UpstreamError::new(f.error, &url_host(origin))),
            };
            let mut resp = Response::new(());
            *resp.status_mut() = head.status;
            *resp.version_mut() = head.version;
            *resp.headers_mut() = head.headers;
            if let Some(reason) = head.reason
                && let Ok(reason) = hyper::ext::ReasonPhrase::try_from(reason)
            {
                resp.extensions_mut().insert(reason);
            }
            let mut body = DrivenBody {
                reader: BodyReader::new(head.framing),
                reusable: head.reusable,
                conn: Some(conn),
                pool: self.clone(),
                draining: false,
            };
            body.release();
            return Ok(resp.map(|()| http_body_util::BodyExt::boxed(body)));
        }
    }

    /// A new connection to `origin`: TCP, and for `https` the TLS
    /// handshake, within the connect timeout.
    async fn connect(&self, origin: &Origin) -> Result<Connected, UpstreamError> {
        let settings = &self.settings;
        // connect_upstream shares the timeout among the addresses; this
        // bounds the name lookup (and the TLS handshake) as well.
        let connect = async {
            let tcp = connect_upstream(origin, &settings.policy, settings.connect_timeout).await?;
            match origin.scheme() {
                Scheme::Http => Ok(Stream::Plain(tcp)),
                Scheme::Https => stream::handshake(tcp, origin, &self.tls).await,
            }
        };
        let stream = match tokio::time::timeout(settings.connect_timeout, connect).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out");
                return Err(UpstreamError::classified(
                    e,
                    &url_host(origin),
                    ErrorKind::Timeout,
                ));
            }
        };
        Ok(match stream.protocol() {
            Protocol::Http1 => Connected::Http1(Box::new(Conn::new(origin.clone(), stream))),
            Protocol::H2 => Connected::H2(stream),
        })
    }

    /// Idle connections held, over all origins.
    #[cfg(test)]
    pub(crate) fn idle_count(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let idle = shard.lock();
                assert_eq!(idle.total, idle.recount(), "idle count drifted");
                idle.total
            })
            .sum()
    }
}

/// A response body that reads its connection while it is read, and gives
/// the connection back for reuse once it has been read to the end.
pub(crate) struct DrivenBody {
    reader: BodyReader,
    /// The response's framing and fields let the connection serve again.
    reusable: bool,
    /// `None` once handed back, closed, or taken for draining.
    conn: Option<Box<Conn>>,
    pool: Arc<Pool>,
    /// This is the rest of a response read in the background.
    draining: bool,
}

/// A response the client left before its end is read on in the background
/// when at most this much of it remains, so that its connection can serve
/// again (hyper-util's connection task finished such exchanges too).
const DRAIN_MAX_BYTES: u64 = 64 * 1024;
/// How long that reading may take.
const DRAIN_TIME: Duration = Duration::from_secs(1);

impl hyper::body::Body for DrivenBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        match ready!(this.poll_data(cx)) {
            Ok(Some(data)) => Poll::Ready(Some(Ok(Frame::data(data)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.reader.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        match self.reader.remaining() {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

impl DrivenBody {
    /// The next piece of the body; `None` at its end. The connection is
    /// handed back with the last piece, and closed on an error.
    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, BodyError>> {
        loop {
            let Some(conn) = &mut self.conn else {
                // Handed back: the body had ended. Or closed after an error.
                return Poll::Ready(if self.reader.is_done() {
                    Ok(None)
                } else {
                    Err(BodyError::new(WireError::Incomplete))
                });
            };
            let failed = match self.reader.read(&mut conn.read) {
                Ok(Read::Data(data)) => {
                    self.release();
                    return Poll::Ready(Ok(Some(data)));
                }
                Ok(Read::End) => {
                    self.release();
                    return Poll::Ready(Ok(None));
                }
                Err(e) => BodyError::new(e),
                Ok(Read::More) => match ready!(conn.poll_fill(cx)) {
                    Ok(0) => match self.reader.eof() {
                        Ok(()) => {
                            self.conn = None;
                            return Poll::Ready(Ok(None));
                        }
                        Err(e) => BodyError::new(e),
                    },
                    Ok(_) => continue,
                    Err(e) => BodyError::new(e),
                },
            };
            self.conn = None;
            return Poll::Ready(Err(failed));
        }
    }

    /// Hands the connection back if the exchange is over: the response body
    /// read to its end, nothing after it, and the response allowing reuse.
    fn release(&mut self) {
        if !self.reader.is_done() {
            return;
        }
        if let Some(conn) = self.conn.take()
            && self.reusable
            && conn.read.is_empty()
        {
            self.pool.put(conn);
        }
    }

    /// Reads the rest of a response the client left, if it is short (by its
    /// Content-Length), and then hands the connection back; a longer or
    /// unbounded rest closes the connection instead.
    fn drain_in_background(&mut self) {
        let remaining = self.reader.remaining();
        if !self.reusable || remaining.is_none_or(|n| n > DRAIN_MAX_BYTES) {
            return;
        }
        let Some(conn) = self.conn.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut rest = DrivenBody {
            reader: std::mem::replace(&mut self.reader, BodyReader::new(wire::Framing::Empty)),
            reusable: true,
            conn: Some(conn),
            pool: self.pool.clone(),
            draining: true,
        };
        runtime.spawn(async move {
            let read = poll_fn(|cx| {
                loop {
                    match ready!(rest.poll_data(cx)) {
                        Ok(Some(_)) => continue,
                        // The last piece handed the connection back.
                        Ok(None) | Err(_) => return Poll::Ready(()),
                    }
                }
            });
            // Dropped unfinished when the time is up: the connection closes.
            let _ = tokio::time::timeout(DRAIN_TIME, read).await;
        });
    }
}

impl Drop for DrivenBody {
    fn drop(&mut self) {
        if self.conn.is_some() && !self.draining {
            self.drain_in_background();
        }
    }
}

#[cfg(test)]
#[path = "pool_tls_tests.rs"]
mod tls_tests;

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use hyper::body::Incoming;
    use hyper_util::rt::TokioIo;

    use http_body_util::BodyExt;
    use hyper::service::service_fn;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::http::body::{empty_body, full_body};
    use crate::http::origin::Scheme;

    /// A loopback origin that counts the connections it accepts. `/close`
    /// answers with `Connection: close`, `/empty` with 204, `/big` with
    /// 1 MiB, `/medium` with 48 KiB; anything else with its request target
    /// and Host.
    async fn origin() -> (Origin, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let svc = service_fn(|req: Request<Incoming>| async move {
                        let host = req
                            .headers()
                            .get(http::header::HOST)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("-")
                            .to_string();
                        let target = req.uri().to_string();
                        let body = req.into_body().collect().await?.to_bytes();
                        let resp = match target.as_str() {
                            "/close" => Response::builder()
                                .header(http::header::CONNECTION, "close")
                                .body(full_body("bye")),
                            "/empty" => Response::builder().status(204).body(empty_body()),
                            "/big" => Response::builder().body(full_body(vec![b'x'; 1 << 20])),
                            "/medium" => Response::builder().body(full_body(vec![b'x'; 48 << 10])),
                            _ => Response::builder()
                                .body(full_body(format!("{target} {host} {}", body.len()))),
                        };
                        Ok::<_, hyper::Error>(resp.expect("response"))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        let origin = Origin::new(Scheme::Http, "127.0.0.1", Some(port)).expect("origin");
        (origin, accepted)
    }

    fn pool(idle_per_origin: usize, idle_timeout: Duration) -> Arc<Pool> {
        pool_with_max(idle_per_origin, 1024, idle_timeout)
    }

    fn pool_with_max(idle_per_origin: usize, max: usize, idle_timeout: Duration) -> Arc<Pool> {
        Pool::new(
            ClientSettings {
                policy: crate::http::destination::Policy::new(true),
                connect_timeout: Duration::from_secs(5),
                pool_idle_per_host: idle_per_origin,
                pool_idle_max: max,
                pool_idle_timeout: idle_timeout,
            },
            web_trust(),
        )
    }

    /// The upstream TLS configuration with the built-in roots only.
    fn web_trust() -> Arc<rustls::ClientConfig> {
        let (config, _) = crate::upstream::tls::client_config_with(&[], false).expect("config");
        Arc::new(config)
    }

    fn get(path: &str, host: &str) -> Request<Body> {
        Request::get(path)
            .header(http::header::HOST, host)
            .body(empty_body())
            .expect("request")
    }

    /// Sends a GET for `path` and reads the whole answer.
    async fn fetch(pool: &Arc<Pool>, origin: &Origin, path: &str) -> (u16, String) {
        let resp = pool
            .send(origin, get(path, &origin.authority()))
            .await
            .expect("response");
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// Sends a GET for `path`, reads the first frame of the answer and
    /// drops the rest, as a client that goes away.
    async fn read_one_frame_and_leave(pool: &Arc<Pool>, origin: &Origin, path: &str) {
        let resp = pool
            .send(origin, get(path, &origin.authority()))
            .await
            .expect("response");
        let mut body = resp.into_body();
        let first = body.frame().await.expect("frame").expect("data");
        assert!(first.is_data());
    }

    fn accepted(counter: &AtomicUsize) -> usize {
        counter.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn a_connection_is_reused_once_its_response_is_read() {
        let (origin, connections) = origin().await;
        let pool = pool(4, Duration::from_secs(60));
        for i in 0..5 {
            let path = format!("/page/{i}");
            let (status, body) = fetch(&pool, &origin, &path).await;
            assert_eq!(status, 200);
            // Origin-form target, the Host given.
            assert_eq!(body, format!("{path} {} 0", origin.authority()));
        }
        // A body-less answer hands the connection back too.
        assert_eq!(fetch(&pool, &origin, "/empty").await.0, 204);
        assert_eq!(fetch(&pool, &origin, "/after-empty").await.0, 200);
        assert_eq!(accepted(&connections), 1);
        assert_eq!(pool.idle_count(), 1);
    }

    /// A connection is registered with the event loop of the thread that
    /// opened it: it is reused on that serving thread only, and the total
    /// idle limit is shared out among the threads.
    #[tokio::test]
    async fn each_serving_thread_reuses_its_own_connections() {
        let (origin, connections) = origin().await;
        let pool = Pool::for_threads(
            ClientSettings {
                policy: crate::http::destination::Policy::new(true),
                connect_timeout: Duration::from_secs(5),
                pool_idle_per_host: 3,
                pool_idle_max: 1024,
                pool_idle_timeout: Duration::from_secs(60),
            },
            web_trust(),
            2,
        );
        assert_eq!((pool.per_host, pool.max), (3, 512));
        set_serving_thread(1);
        assert_eq!(fetch(&pool, &origin, "/one").await.0, 200);
        assert_eq!(fetch(&pool, &origin, "/one-again").await.0, 200);
        assert_eq!(accepted(&connections), 1);
        // Thread 0 does not take thread 1's idle connection.
        set_serving_thread(0);
        assert_eq!(fetch(&pool, &origin, "/zero").await.0, 200);
        assert_eq!(accepted(&connections), 2);
        assert_eq!(pool.idle_count(), 2);
        set_serving_thread(1);
        assert_eq!(fetch(&pool, &origin, "/one-more").await.0, 200);
        assert_eq!(accepted(&connections), 2);
        // Shards are counted by thread modulo their number.
        set_serving_thread(3);
        assert_eq!(fetch(&pool, &origin, "/three").await.0, 200);
        assert_eq!(accepted(&connections), 2);
        set_serving_thread(0);
    }

    #[tokio::test]
    async fn each_origin_has_its_own_connections() {
        let (a, connections_a) = origin().await;
        let (b, connections_b) = origin().await;
        let pool = pool(4, Duration::from_secs(60));
        for _ in 0..3 {
            assert_eq!(fetch(&pool, &a, "/a").await.0, 200);
            assert_eq!(fetch(&pool, &b, "/b").await.0, 200);
        }
        assert_eq!(accepted(&connections_a), 1);
        assert_eq!(accepted(&connections_b), 1);
        assert_eq!(pool.idle_count(), 2);
    }

    /// Beyond `pool_idle_max` in all, the connection of the origin used
    /// longest ago is closed first; the others stay for reuse.
    #[tokio::test]
    async fn the_total_idle_limit_closes_the_least_recently_used_origins_first() {
        let (a, connections_a) = origin().await;
        let (b, connections_b) = origin().await;
        let (c, connections_c) = origin().await;
        let pool = pool_with_max(4, 2, Duration::from_secs(60));
        for (origin, path) in [(&a, "/a"), (&b, "/b"), (&c, "/c")] {
            assert_eq!(fetch(&pool, origin, path).await.0, 200);
        }
        assert_eq!(pool.idle_count(), 2);
        // b and c were kept; a's was closed and a needs a new connection.
        assert_eq!(fetch(&pool, &b, "/b").await.0, 200);
        assert_eq!(fetch(&pool, &c, "/c").await.0, 200);
        assert_eq!((accepted(&connections_b), accepted(&connections_c)), (1, 1));
        assert_eq!(fetch(&pool, &a, "/a").await.0, 200);
        assert_eq!(accepted(&connections_a), 2);
        // a is now the newest; b (used longest ago) gave way to it.
        assert_eq!(pool.idle_count(), 2);
        assert_eq!(fetch(&pool, &c, "/c").await.0, 200);
        assert_eq!(fetch(&pool, &b, "/b").await.0, 200);
        assert_eq!(accepted(&connections_c), 1);
        assert_eq!(accepted(&connections_b), 2);
        // Zero keeps nothing.
        let none = pool_with_max(4, 0, Duration::from_secs(60));
        assert_eq!(fetch(&none, &a, "/a").await.0, 200);
        assert_eq!(none.idle_count(), 0);
    }

    #[tokio::test]
    async fn connection_close_means_a_new_connection_next_time() {
        let (origin, connections) = origin().await;
        let pool = pool(4, Duration::from_secs(60));
        assert_eq!(fetch(&pool, &origin, "/close").await, (200, "bye".into()));
        assert_eq!(pool.idle_count(), 0);
        assert_eq!(fetch(&pool, &origin, "/next").await.0, 200);
        assert_eq!(accepted(&connections), 2);
    }

    #[tokio::test]
    async fn a_long_rest_dropped_half_way_closes_its_connection() {
        let (origin, connections) = origin().await;
        let pool = pool(4, Duration::from_secs(60));
        read_one_frame_and_leave(&pool, &origin, "/big").await;
        assert_eq!(pool.idle_count(), 0);
        assert_eq!(fetch(&pool, &origin, "/next").await.0, 200);
        assert_eq!(accepted(&connections), 2);
    }

    /// The client leaves with a little of the response unread: it is read
    /// in the background and the connection serves again.
    #[tokio::test]
    async fn a_short_rest_left_by_the_client_is_drained_and_the_connection_reused() {
        let (origin, connections) = origin().await;
        let pool = pool(4, Duration::from_secs(60));
        read_one_frame_and_leave(&pool, &origin, "/medium").await;
        for _ in 0..50 {
            if pool.idle_count() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(pool.idle_count(), 1);
        assert_eq!(fetch(&pool, &origin, "/next").await.0, 200);
        assert_eq!(accepted(&connections), 1);
    }

    /// A raw loopback origin: reads each connection's request head, writes
    /// `answer`, then keeps the connection open (reading nothing more) for
    /// `close_after` before closing it. Counts connections.
    async fn raw_origin(
        answer: &'static [u8],
        close_after: Duration,
    ) -> (Origin, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counter = connections.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let _ = stream.write_all(answer).await;
                    tokio::time::sleep(close_after).await;
                });
            }
        });
        let origin = Origin::new(Scheme::Http, "127.0.0.1", Some(port)).expect("origin");
        (origin, connections)
    }

    /// The origin answers each connection's first request as keep-alive and
    /// closes it soon after: the idle connection is dead when next used.
    #[tokio::test]
    async fn a_connection_the_origin_closed_while_idle_is_replaced() {
        let (origin, connections) = raw_origin(
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
            Duration::from_millis(100),
        )
        .await;
        let pool = pool(4, Duration::from_secs(60));
        for _ in 0..3 {
            assert_eq!(fetch(&pool, &origin, "/x").await, (200, "ok".into()));
            assert_eq!(pool.idle_count(), 1);
            // Let the origin's close arrive.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert_eq!(accepted(&connections), 3);
    }

    /// An origin that answers twice to one request (it read the request's
    /// body as another request): the connection holds bytes no request
    /// asked for, and is closed instead of pooled, so the second answer is
    /// never taken for the next request's.
    #[tokio::test]
    async fn a_connection_with_bytes_after_its_response_is_not_pooled() {
        let (origin, connections) = raw_origin(
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok\
              HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecret",
            Duration::from_secs(60),
        )
        .await;
        let pool = pool(4, Duration::from_secs(60));
        assert_eq!(fetch(&pool, &origin, "/x").await, (200, "ok".into()));
        assert_eq!(pool.idle_count(), 0);
        assert_eq!(fetch(&pool, &origin, "/y").await, (200, "ok".into()));
        assert_eq!(accepted(&connections), 2);
    }

    /// Sends a GET for `path` and reads the answer to its end or its error.
    async fn fetch_result(
        pool: &Arc<Pool>,
        origin: &Origin,
        path: &str,
    ) -> Result<(Response<()>, Bytes), String> {
        let resp = pool
            .send(origin, get(path, &origin.authority()))
            .await
            .map_err(|e| e.to_string())?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((Response::from_parts(parts, ()), body))
    }

    /// A chunked answer with extensions and trailer fields is read whole,
    /// and its connection serves the next request.
    #[tokio::test]
    async fn a_chunked_answer_is_read_whole_and_its_connection_reused() {
        let (origin, connections) = raw_origin(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
              5;name=value\r\nhello\r\n6 \r\n world\r\n0\r\nx-trailer: 1\r\n\r\n",
            Duration::from_secs(60),
        )
        .await;
        let pool = pool(4, Duration::from_secs(60));
        let (resp, body) = fetch_result(&pool, &origin, "/a").await.expect("answer");
        assert_eq!(resp.status(), 200);
        assert_eq!(&body[..], b"hello world");
        assert_eq!(pool.idle_count(), 1);
        assert_eq!(accepted(&connections), 1);
    }

    /// Transfer-Encoding and Content-Length both: the coding frames the
    /// body (RFC 9112 §6.3), and the connection is not used again (such a
    /// message may be an attempt to split responses).
    #[tokio::test]
    async fn an_answer_with_both_framings_is_read_by_its_coding_and_not_reused() {
        let (origin, _) = raw_origin(
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n\
              2\r\nok\r\n0\r\n\r\n",
            Duration::from_secs(60),
        )
        .await;
        let pool = pool(4, Duration::from_secs(60));
        let (_, body) = fetch_result(&pool, &origin, "/a").await.expect("answer");
        assert_eq!(&body[..], b"ok");
        assert_eq!(pool.idle_count(), 0);
    }

    /// A body cut short by the origin's close, or a malformed chunk, ends
    /// the body with an error (never as a complete, shorter body), and the
    /// connection is not pooled.
    #[tokio::test]
    async fn a_cut_or_malformed_body_ends_in_an_error() {
        let answers: [&'static [u8]; 3] = [
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello",
        ];
        for answer in answers {
            let (origin, _) = raw_origin(answer, Duration::ZERO).await;
            let pool = pool(4, Duration::from_secs(60));
            let got = fetch_result(&pool, &origin, "/a").await;
            assert!(
                got.is_err(),
                "{:?}: {got:?}",
                String::from_utf8_lossy(answer)
            );
            assert_eq!(pool.idle_count(), 0);
        }
    }

    /// A head that is not HTTP/1.x, or a Content-Length that is not one
    /// number, is an upstream error naming what was wrong.
    #[tokio::test]
    async fn a_malformed_head_is_an_error() {
        let answers: [(&'static [u8], &str); 3] = [
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 2, 3\r\n\r\nok",
                "Content-Length",
            ),
            (b"ICY 200 OK\r\n\r\n", "invalid HTTP response head"),
            (
                b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
                "unexpected status 101",
            ),
        ];
        for (answer, why) in answers {
            let (origin, _) = raw_origin(answer, Duration::from_secs(60)).await;
            let pool = pool(4, Duration::from_secs(60));
            let got = fetch_result(&pool, &origin, "/a").await;
            let err = got.expect_err("an error");
            assert!(err.contains(why), "{err}");
        }
    }

    /// Informational answers before the final one are skipped; a reason
    /// phrase of the origin's own is kept for the client; an HTTP/1.0
    /// answer is read, and its connection not reused.
    #[tokio::test]
    async fn interim_answers_reasons_and_http_1_0() {
        let (origin, _) = raw_origin(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\n\
              HTTP/1.1 200 Fine Thanks\r\ncontent-length: 2\r\n\r\nok",
            Duration::from_secs(60),
        )
        .await;
        let pool = pool(4, Duration::from_secs(60));
        let (resp, body) = fetch_result(&pool, &origin, "/a").await.expect("answer");
        assert_eq!(&body[..], b"ok");
        let reason = resp
            .extensions()
            .get::<hyper::ext::ReasonPhrase>()
            .expect("reason");
        assert_eq!(reason.as_bytes(), b"Fine Thanks");
        assert_eq!(pool.idle_count(), 1);

        let (origin, _) = raw_origin(
            b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
            Duration::from_secs(60),
        )
        .await;
        let (resp, body) = fetch_result(&pool, &origin, "/a").await.expect("answer");
        assert_eq!(
            (resp.version(), &body[..]),
            (http::Version::HTTP_10, &b"ok"[..])
        );
        assert_eq!(pool.idle_count(), 1, "the HTTP/1.0 connection was pooled");
    }

    /// Bytes an idle connection receives (no request asked for them) are
    /// never taken for the next request's answer: the connection is closed
    /// and the request goes on a new one.
    #[tokio::test]
    async fn bytes_that_arrive_while_idle_close_the_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counter = connections.clone();
        let go = Arc::new(tokio::sync::Notify::new());
        let origin_go = go.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
                let go = origin_go.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(1..) = stream.read(&mut buf).await {
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        let _ = stream.write_all(ok).await;
                        if first {
                            // Once the proxy holds the connection idle.
                            go.notified().await;
                            let secret = b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecret";
                            let _ = stream.write_all(secret).await;
                        }
                    }
                });
            }
        });
        let origin = Origin::new(Scheme::Http, "127.0.0.1", Some(port)).expect("origin");
        let pool = pool(4, Duration::from_secs(60));
        assert_eq!(fetch(&pool, &origin, "/x").await, (200, "ok".into()));
        let conn = pool.take(&origin).expect("the connection is idle");
        go.notify_one();
        conn.stream
            .tcp()
            .readable()
            .await
            .expect("the extra answer arrives");
        pool.put(conn);
        assert_eq!(fetch(&pool, &origin, "/y").await, (200, "ok".into()));
        assert_eq!(accepted(&connections), 2);
    }

    /// A head that arrives a byte at a time, and one after empty lines, is
    /// read as a whole head.
    #[tokio::test]
    async fn a_head_that_trickles_in_is_read() {
        let answers: [&'static [u8]; 2] = [
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-a: b\r\n\r\nok",
            b"\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        ];
        for answer in answers {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let port = listener.local_addr().expect("addr").port();
            tokio::spawn(async move {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let _ = stream.set_nodelay(true);
                let mut buf = [0u8; 1024];
                if let Ok(1..) = stream.read(&mut buf).await {
                    for byte in answer {
                        if stream.write_all(&[*byte]).await.is_err() {
                            return;
                        }
                        tokio::task::yield_now().await;
                    }
                }
                let _ = stream.read(&mut buf).await;
            });
            let origin = Origin::new(Scheme::Http, "127.0.0.1", Some(port)).expect("origin");
            let pool = pool(4, Duration::from_secs(60));
            let (resp, body) = fetch_result(&pool, &origin, "/a").await.expect("answer");
            assert_eq!((resp.status().as_u16(), &body[..]), (200, &b"ok"[..]));
        }
    }

    #[test]
    fn empty_lines_before_a_head_are_counted() {
        assert_eq!(leading_empty_lines(b""), 0);
        assert_eq!(leading_empty_lines(b"HTTP/1.1"), 0);
        assert_eq!(leading_empty_lines(b"\r\n\n\r\nHTTP/1.1"), 5);
        // A lone CR is left for httparse (an error, or a CRLF to come).
        assert_eq!(leading_empty_lines(b"\r\n\r"), 2);
        assert_eq!(leading_empty_lines(b"\rHTTP"), 0);
    }

    /// An origin that resets the connection instead of answering: the
    /// error says so in the words the other upstream errors use.
    #[tokio::test]
    async fn a_reset_reads_as_a_reset() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = stream.read(&mut buf).await;
                let _ = stream.set_zero_linger();
            }
        });
        let origin = Origin::new(Scheme::Http, "127.0.0.1", Some(port)).expect("origin");
        let pool = pool(4, Duration::from_secs(60));
        let Err(err) = pool.send(&origin, get("/a", &origin.authority())).await else {
            panic!("an answer to a reset connection");
        };
        assert!(
            err.reason().starts_with("connection reset by 127.0.0.1"),
            "{}",
            err.reason()
        );
        assert_eq!(err.kind(), ErrorKind::Connect);
    }

    /// A request path with bytes beyond ASCII goes out as the client sent
    /// it.
    #[tokio::test]
    async fn a_path_beyond_ascii_is_sent_as_it_came() {
        let (origin, _) = origin().await;
        let pool = pool(4, Duration::from_secs(60));
        let (status, body) = fetch(&pool, &origin, "/caf\u{e9}").await;
        assert_eq!(status, 200);
        assert!(body.starts_with("/caf\u{e9} "), "{body}");
    }

    /// A large response grows the connection's read buffer; once idle, the
    /// connection keeps a small one.
    #[tokio::test]
    async fn an_idle_connection_keeps_no_large_buffer() {
        let (origin, _) = origin().await;
        let pool = pool(4, Duration::from_secs(60));
        let (status, body) = fetch(&pool, &origin, "/big").await;
        assert_eq!((status, body.len()), (200, 1 << 20));
        let conn = pool.take(&origin).expect("idle");
        assert!(
            conn.read.capacity() <= KEPT_BUFFER,
            "{}",
            conn.read.capacity()
        );
        assert_eq!((conn.reserved, conn.read_size), (0, READ_MIN));
    }

    /// Idle connections are not polled by requests; the sweeper notices
    /// the origin's close long before the idle timeout.
    #[tokio::test]
    async fn the_sweeper_closes_connections_the_origin_closed() {
        let (origin, _) = raw_origin(
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
            Duration::from_millis(50),
        )
        .await;
        // Swept every second; expiry only after two.
        let pool = pool(4, Duration::from_secs(2));
        assert_eq!(fetch(&pool, &origin, "/x").await.0, 200);
        assert_eq!(pool.idle_count(), 1);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(pool.idle_count(), 0);
    }

    #[tokio::test]
    async fn concurrent_requests_get_their_own_connections_and_the_pool_keeps_its_limit() {
        let (origin, connections) = origin().await;
        let pool = pool(2, Duration::from_secs(60));
        // Three responses open at once: three connections.
        let mut open = Vec::new();
        for _ in 0..3 {
            open.push(
                pool.send(&origin, get("/x", &origin.authority()))
                    .await
                    .expect("response"),
            );
        }
        for resp in open {
            resp.into_body().collect().await.expect("body");
        }
        assert_eq!(accepted(&connections), 3);
        assert_eq!(pool.idle_count(), 2);
        // Later requests, one at a time, need no more.
        for _ in 0..3 {
            assert_eq!(fetch(&pool, &origin, "/y").await.0, 200);
        }
        assert_eq!(accepted(&connections), 3);
    }

    #[tokio::test]
    async fn idle_connections_expire() {
        let (origin, connections) = origin().await;
        let pool = pool(4, Duration::from_millis(100));
        assert_eq!(fetch(&pool, &origin, "/x").await.0, 200);
        assert_eq!(pool.idle_count(), 1);
        // The sweeper closes expired connections nobody asks for.
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(pool.idle_count(), 0);
        assert_eq!(fetch(&pool, &origin, "/x").await.0, 200);
        assert_eq!(accepted(&connections), 2);
    }

    #[tokio::test]
    async fn refused_and_failed_connects_are_errors() {
        let refusing = Pool::new(
            ClientSettings {
                policy: crate::http::destination::Policy::new(false),
                connect_timeout: Duration::from_secs(5),
                pool_idle_per_host: 4,
                pool_idle_max: 1024,
                pool_idle_timeout: Duration::from_secs(60),
            },
            web_trust(),
        );
        let origin = Origin::new(Scheme::Http, "localhost", Some(9)).expect("origin");
        match refusing.send(&origin, get("/", "localhost:9")).await {
            Err(e) if e.kind() == ErrorKind::Refused => {
                let reason = e.reason();
                assert!(reason.contains("private"), "{reason}");
            }
            Err(other) => panic!("expected a refusal, got {other:?}"),
            Ok(_) => panic!("expected a refusal, got a response"),
        }
        // A port nobody listens on.
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        let origin = Origin::new(Scheme::Http, "127.0.0.1", Some(port)).expect("origin");
        assert!(matches!(
            pool(4, Duration::from_secs(60))
                .send(&origin, get("/", "x"))
                .await,
            Err(e) if e.kind() == ErrorKind::Connect
        ));
    }
}
