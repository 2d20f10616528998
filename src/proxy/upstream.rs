//! Plain-http upstream connections driven in the client connection's task.
//!
//! hyper-util's pooled client runs every upstream connection in a task of
//! its own: the response is read there, handed over a channel and read
//! again by the task that serves the client, so each request waits in the
//! run queue twice and often crosses threads. Here a client connection
//! holds the upstream connection it uses (HTTP/1.1 to an `http` origin,
//! what a scraper mostly sends through a proxy): the request is written and
//! the response read and relayed in the client's own task, the way an event
//! loop proxy does it. When the client connection ends, the upstream one
//! goes to a shared idle pool for the next client of that origin.
//!
//! `https` origins (TLS, HTTP/2 by ALPN) still go through the pooled client.

use std::collections::HashMap;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::client::Body;
use super::connect::{ConnectFailure, connect_upstream};
use crate::origin::Origin;

/// Limits of the shared idle pool, and how connections are made.
#[derive(Clone, Debug)]
pub struct PoolSettings {
    pub allow_private: bool,
    pub connect_timeout: Duration,
    /// Idle connections kept per origin; 0 keeps none.
    pub idle_per_origin: usize,
    /// An idle connection older than this is closed, not reused.
    pub idle_timeout: Duration,
}

/// Why a request got no response.
#[derive(Debug)]
pub enum SendError {
    /// No connection: refused by the destination policy, or the connect
    /// failed or timed out.
    Connect(ConnectFailure),
    /// The connection failed while the request was sent or the response
    /// head read.
    Http(hyper::Error),
}

/// One upstream HTTP/1.1 connection: the handle requests are sent on, and
/// the state machine that must be polled for anything to move.
struct Conn {
    origin: Origin,
    sender: SendRequest<Body>,
    driver: Connection<TokioIo<TcpStream>, Body>,
    /// The driver finished (the connection closed): it must not be polled
    /// again, and the connection is not reused.
    closed: bool,
}

impl Conn {
    /// Polls the connection's state machine; true once it has finished.
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.closed
            && let Poll::Ready(result) = Pin::new(&mut self.driver).poll(cx)
        {
            if let Err(e) = result {
                tracing::debug!(origin = %self.origin, error = %e, "upstream connection ended");
            }
            self.closed = true;
        }
        self.closed
    }

    /// Waits until the connection can take a request, driving it meanwhile.
    /// False if it closed instead (the origin hung up while it was idle).
    async fn ready(&mut self) -> bool {
        poll_fn(|cx| {
            if self.drive(cx) {
                return Poll::Ready(false);
            }
            self.sender.poll_ready(cx).map(|r| r.is_ok())
        })
        .await
    }

    fn reusable(&self) -> bool {
        !self.closed && !self.sender.is_closed()
    }
}

struct Idle {
    conn: Conn,
    since: Instant,
}

/// Idle connections shared by all client connections, per origin, newest
/// last. Connections here are not polled: one the origin closed meanwhile
/// is found out when it is next used (and the request goes on a new one).
pub struct Pool {
    settings: PoolSettings,
    idle: Mutex<HashMap<Origin, Vec<Idle>>>,
}

impl Pool {
    /// A pool, and (inside a Tokio runtime) the task that closes its
    /// expired connections.
    pub fn new(settings: PoolSettings) -> Arc<Pool> {
        let pool = Arc::new(Pool {
            settings,
            idle: Mutex::new(HashMap::new()),
        });
        Pool::spawn_sweeper(&pool);
        pool
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Origin, Vec<Idle>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The newest idle connection to `origin` that has not expired.
    fn take(&self, origin: &Origin) -> Option<Conn> {
        let now = Instant::now();
        let mut idle = self.lock();
        let list = idle.get_mut(origin)?;
        // Newest last; an expired one means the rest are older still.
        let found = match list.pop() {
            Some(i) if now.duration_since(i.since) < self.settings.idle_timeout => Some(i.conn),
            Some(_) => {
                list.clear();
                None
            }
            None => None,
        };
        if list.is_empty() {
            idle.remove(origin);
        }
        found
    }

    /// Keeps `conn` for reuse, within the per-origin limit (the oldest goes
    /// first).
    fn put(&self, conn: Conn) {
        if !conn.reusable() || self.settings.idle_per_origin == 0 {
            return;
        }
        let oldest = {
            let mut idle = self.lock();
            let list = idle.entry(conn.origin.clone()).or_default();
            let oldest = (list.len() >= self.settings.idle_per_origin).then(|| list.remove(0));
            list.push(Idle {
                conn,
                since: Instant::now(),
            });
            oldest
        };
        // Closed after the lock is released: closing a socket is a syscall.
        drop(oldest);
    }

    /// Closes the connections idle for longer than the timeout.
    fn sweep(&self) {
        let now = Instant::now();
        let timeout = self.settings.idle_timeout;
        let mut expired: Vec<Idle> = Vec::new();
        self.lock().retain(|_, list| {
            // Oldest first: the expired ones are a prefix.
            let n = list.partition_point(|i| now.duration_since(i.since) >= timeout);
            expired.extend(list.drain(..n));
            !list.is_empty()
        });
        drop(expired);
    }

    /// Sweeps `pool` every half idle timeout (idle connections are not
    /// polled, so an origin's close is not noticed otherwise), for as long
    /// as the pool exists. Needs a Tokio runtime.
    fn spawn_sweeper(pool: &Arc<Pool>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let period = (pool.settings.idle_timeout / 2)
            .clamp(Duration::from_millis(10), Duration::from_secs(30));
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

    /// Idle connections held, over all origins.
    pub fn idle_count(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }
}

/// The upstream side of one client connection: the connection it used
/// last, kept between its requests (a client mostly sends its next request
/// to the same origin). Given to the shared pool when the client leaves.
pub struct Sticky {
    pool: Arc<Pool>,
    kept: Mutex<Option<Conn>>,
}

impl Sticky {
    pub fn new(pool: Arc<Pool>) -> Arc<Sticky> {
        Arc::new(Sticky {
            pool,
            kept: Mutex::new(None),
        })
    }

    fn kept(&self) -> MutexGuard<'_, Option<Conn>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection to `origin`: the kept one, else one from the pool.
    fn take(&self, origin: &Origin) -> Option<Conn> {
        let other = {
            let mut kept = self.kept();
            match kept.take() {
                Some(c) if c.origin == *origin => return Some(c),
                other => other,
            }
        };
        if let Some(c) = other {
            self.pool.put(c);
        }
        self.pool.take(origin)
    }

    /// Keeps `conn` for this client's next request.
    fn keep(&self, conn: Conn) {
        if !conn.reusable() {
            return;
        }
        let previous = self.kept().replace(conn);
        if let Some(c) = previous {
            self.pool.put(c);
        }
    }

    /// Sends `req` (origin-form target, Host set) to `origin`, over the
    /// kept connection, an idle one, or a new one. A request that a reused
    /// connection could not take (it had closed) is sent again on another.
    /// The response's body drives the connection until it ends, then hands
    /// the connection back.
    pub async fn send(
        self: &Arc<Self>,
        origin: &Origin,
        mut req: Request<Body>,
    ) -> Result<Response<DrivenBody>, SendError> {
        loop {
            let (mut conn, reused) = match self.take(origin) {
                Some(c) => (c, true),
                None => (self.connect(origin).await?, false),
            };
            // A reused connection that closed while idle is dropped for the
            // next one. A new one that closed before taking the request
            // goes on: sending reports hyper's error for it.
            if !conn.ready().await && reused {
                continue;
            }
            let mut response = std::pin::pin!(conn.sender.try_send_request(req));
            let result = poll_fn(|cx| {
                conn.drive(cx);
                response.as_mut().poll(cx)
            })
            .await;
            match result {
                Ok(resp) => {
                    return Ok(resp.map(|body| DrivenBody {
                        body,
                        conn: Some(conn),
                        ended: false,
                        sticky: self.clone(),
                    }));
                }
                Err(mut e) => match e.take_message() {
                    Some(r) if reused => req = r,
                    _ => return Err(SendError::Http(e.into_error())),
                },
            }
        }
    }

    async fn connect(&self, origin: &Origin) -> Result<Conn, SendError> {
        let settings = &self.pool.settings;
        let stream = match tokio::time::timeout(
            settings.connect_timeout,
            connect_upstream(origin, settings.allow_private),
        )
        .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(SendError::Connect(e)),
            Err(_) => {
                return Err(SendError::Connect(ConnectFailure::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect timed out",
                ))));
            }
        };
        let (sender, driver) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(SendError::Http)?;
        Ok(Conn {
            origin: origin.clone(),
            sender,
            driver,
            closed: false,
        })
    }
}

impl Drop for Sticky {
    fn drop(&mut self) {
        if let Some(c) = self.kept().take() {
            self.pool.put(c);
        }
    }
}

/// A response body that drives its connection while it is read, and gives
/// the connection back for reuse once it has been read to the end.
pub struct DrivenBody {
    body: Incoming,
    conn: Option<Conn>,
    ended: bool,
    sticky: Arc<Sticky>,
}

impl hyper::body::Body for DrivenBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if let Some(conn) = &mut this.conn {
            conn.drive(cx);
        }
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            this.ended = true;
            this.release();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl DrivenBody {
    /// Hands the connection back if the body was read to its end (one
    /// dropped half-way leaves the connection unusable).
    fn release(&mut self) {
        if (self.ended || self.body.is_end_stream())
            && let Some(conn) = self.conn.take()
        {
            self.sticky.keep(conn);
        }
    }
}

impl Drop for DrivenBody {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt;
    use hyper::service::service_fn;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::origin::Scheme;
    use crate::proxy::client::{empty_body, full_body};

    /// A loopback origin that counts the connections it accepts. `/close`
    /// answers with `Connection: close`, `/empty` with 204, `/big` with
    /// 1 MiB; anything else with its request target and Host.
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
        Pool::new(PoolSettings {
            allow_private: true,
            connect_timeout: Duration::from_secs(5),
            idle_per_origin,
            idle_timeout,
        })
    }

    fn get(path: &str, host: &str) -> Request<Body> {
        Request::get(path)
            .header(http::header::HOST, host)
            .body(empty_body())
            .expect("request")
    }

    /// Sends a GET for `path` and reads the whole answer.
    async fn fetch(sticky: &Arc<Sticky>, origin: &Origin, path: &str) -> (u16, String) {
        let resp = sticky
            .send(origin, get(path, &origin.authority()))
            .await
            .expect("response");
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn a_client_connection_reuses_its_upstream_connection() {
        let (origin, accepted) = origin().await;
        let sticky = Sticky::new(pool(4, Duration::from_secs(60)));
        for i in 0..5 {
            let path = format!("/page/{i}");
            let (status, body) = fetch(&sticky, &origin, &path).await;
            assert_eq!(status, 200);
            assert_eq!(body, format!("{path} {} 0", origin.authority()));
        }
        // A body-less answer hands the connection back too.
        assert_eq!(fetch(&sticky, &origin, "/empty").await.0, 204);
        assert_eq!(fetch(&sticky, &origin, "/after-empty").await.0, 200);
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_request_body_is_sent() {
        let (origin, _) = origin().await;
        let sticky = Sticky::new(pool(4, Duration::from_secs(60)));
        let req = Request::post("/upload")
            .header(http::header::HOST, origin.authority())
            .body(full_body(vec![b'y'; 100_000]))
            .expect("request");
        let resp = sticky.send(&origin, req).await.expect("response");
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert!(body.ends_with(b" 100000"), "{body:?}");
    }

    #[tokio::test]
    async fn a_leaving_client_hands_its_connection_to_the_next() {
        let (origin, accepted) = origin().await;
        let pool = pool(4, Duration::from_secs(60));
        for _ in 0..3 {
            let sticky = Sticky::new(pool.clone());
            assert_eq!(fetch(&sticky, &origin, "/x").await.0, 200);
            drop(sticky);
            assert_eq!(pool.idle_count(), 1);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn switching_origins_parks_the_previous_connection_in_the_pool() {
        let (a, accepted_a) = origin().await;
        let (b, accepted_b) = origin().await;
        let sticky = Sticky::new(pool(4, Duration::from_secs(60)));
        for _ in 0..3 {
            assert_eq!(fetch(&sticky, &a, "/a").await.0, 200);
            assert_eq!(fetch(&sticky, &b, "/b").await.0, 200);
        }
        assert_eq!(accepted_a.load(Ordering::SeqCst), 1);
        assert_eq!(accepted_b.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn connection_close_means_a_new_connection_next_time() {
        let (origin, accepted) = origin().await;
        let sticky = Sticky::new(pool(4, Duration::from_secs(60)));
        assert_eq!(fetch(&sticky, &origin, "/close").await, (200, "bye".into()));
        assert_eq!(fetch(&sticky, &origin, "/next").await.0, 200);
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_body_dropped_half_way_leaves_its_connection_unused() {
        let (origin, accepted) = origin().await;
        let sticky = Sticky::new(pool(4, Duration::from_secs(60)));
        let resp = sticky
            .send(&origin, get("/big", &origin.authority()))
            .await
            .expect("response");
        let mut body = resp.into_body();
        let first = body.frame().await.expect("frame").expect("data");
        assert!(first.is_data());
        drop(body);
        assert_eq!(fetch(&sticky, &origin, "/next").await.0, 200);
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    /// An origin that answers each connection's first request as keep-alive
    /// and then closes it: the idle connection is dead when next used.
    #[tokio::test]
    async fn a_connection_the_origin_closed_while_idle_is_replaced() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
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
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await;
                });
            }
        });
        let origin = Origin::new(Scheme::Http, "127.0.0.1", Some(port)).expect("origin");
        let pool = pool(4, Duration::from_secs(60));
        let sticky = Sticky::new(pool.clone());
        for _ in 0..3 {
            assert_eq!(fetch(&sticky, &origin, "/x").await, (200, "ok".into()));
            // Let the origin's close arrive.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The same through the shared pool.
        drop(sticky);
        let sticky = Sticky::new(pool);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(fetch(&sticky, &origin, "/x").await, (200, "ok".into()));
        assert_eq!(accepted.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn the_pool_keeps_at_most_its_limit_per_origin() {
        let (origin, accepted) = origin().await;
        let pool = pool(2, Duration::from_secs(60));
        // Three clients at once: three connections.
        let clients: Vec<Arc<Sticky>> = (0..3).map(|_| Sticky::new(pool.clone())).collect();
        let mut pending = Vec::new();
        for c in &clients {
            pending.push(
                c.send(&origin, get("/x", &origin.authority()))
                    .await
                    .expect("response"),
            );
        }
        for resp in pending {
            resp.into_body().collect().await.expect("body");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
        drop(clients);
        assert_eq!(pool.idle_count(), 2);
    }

    #[tokio::test]
    async fn idle_connections_expire() {
        let (origin, accepted) = origin().await;
        let pool = pool(4, Duration::from_millis(100));
        let sticky = Sticky::new(pool.clone());
        assert_eq!(fetch(&sticky, &origin, "/x").await.0, 200);
        drop(sticky);
        assert_eq!(pool.idle_count(), 1);
        tokio::time::sleep(Duration::from_millis(150)).await;
        let sticky = Sticky::new(pool.clone());
        assert_eq!(fetch(&sticky, &origin, "/x").await.0, 200);
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        drop(sticky);
        // The sweeper closes expired connections nobody asks for.
        assert_eq!(pool.idle_count(), 1);
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(pool.idle_count(), 0);
    }

    #[tokio::test]
    async fn refused_and_failed_connects_are_errors() {
        let pool = Pool::new(PoolSettings {
            allow_private: false,
            connect_timeout: Duration::from_secs(5),
            idle_per_origin: 4,
            idle_timeout: Duration::from_secs(60),
        });
        let sticky = Sticky::new(pool);
        let origin = Origin::new(Scheme::Http, "localhost", Some(9)).expect("origin");
        match sticky.send(&origin, get("/", "localhost:9")).await {
            Err(SendError::Connect(ConnectFailure::Refused(reason))) => {
                assert!(reason.contains("private"), "{reason}");
            }
            Err(other) => panic!("expected a refusal, got {other:?}"),
            Ok(_) => panic!("expected a refusal, got a response"),
        }
        // A port nobody listens on.
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        let sticky = Sticky::new(pool_allowing_private());
        let origin = Origin::new(Scheme::Http, "127.0.0.1", Some(port)).expect("origin");
        assert!(matches!(
            sticky.send(&origin, get("/", "x")).await,
            Err(SendError::Connect(ConnectFailure::Io(_)))
        ));
    }

    fn pool_allowing_private() -> Arc<Pool> {
        pool(4, Duration::from_secs(60))
    }
}
