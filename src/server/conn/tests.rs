//! The proxy listener's connections over real sockets: a test handler
//! behind `serve_connection`, as the acceptor serves it, and clients that
//! write and read exact bytes (and a hyper client, and curl).

use std::future::Future as _;
use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use http::header::{CONTENT_LENGTH, ETAG};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, mpsc, watch};
use tokio::time::timeout;

use crate::http::body::{Body, BodyError, full_body};
use crate::server::metrics::ServerMetrics;
use crate::server::per_client::PerClient;
use crate::server::threads::ThreadLoad;
use crate::server::{ConnectionHold, Handler, Lifecycle, serve_connection};

/// The longest a test waits for an event before it fails.
const WAIT: Duration = Duration::from_secs(10);

/// A header timeout long enough for any test that is not about it.
const LONG: Duration = Duration::from_secs(60);

/// The body of `/full`.
const FULL: &[u8] = b"the whole body";

/// The lengths of `/late-small` (written with its head) and `/late-large`
/// (its head goes first).
const LATE_SMALL: usize = 5;
const LATE_LARGE: usize = 20_000;

/// The frames of `/stream`.
const FRAMES: [&str; 3] = ["ab", "cde", "f"];

/// A handler answering by path:
/// - `/full`: [`FULL`], its length known;
/// - `/stream`: [`FRAMES`], its length unknown, a wake-up between frames;
/// - `/short`: `content-length: 10` and a body of 3 bytes that then ends;
/// - `/error`: one frame of 3 bytes, then an error;
/// - `/hold`: waits for [`TestProxy::release`] (see [`HoldGuard`]);
/// - `/stall`: a chunked body of one frame, then waits for the release
///   (the body reports as `/hold` does);
/// - `/204`, `/304`: these statuses, with a body that must not be sent;
/// - `/chunked-empty`: `transfer-encoding: chunked` and no body;
/// - anything else: the request echoed (method, target, fields, body).
struct TestProxy {
    metrics: ServerMetrics,
    header_timeout: Duration,
    malformed: AtomicUsize,
    /// Lets a `/hold` request finish.
    release: Notify,
    /// Told when a `/hold` request has started.
    held: mpsc::UnboundedSender<()>,
    /// Told when a `/hold` request's future ends: true if it finished,
    /// false if it was dropped.
    hold_ended: mpsc::UnboundedSender<bool>,
}

/// Reports how a `/hold` request's future ended.
struct HoldGuard {
    ended: mpsc::UnboundedSender<bool>,
    finished: bool,
}

impl HoldGuard {
    /// Reports the future finished.
    fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for HoldGuard {
    fn drop(&mut self) {
        let _ = self.ended.send(self.finished);
    }
}

/// A body of `frames`, its length unknown, each frame after a wake-up
/// (so the connection finds it not ready at first).
fn frames(frames: Vec<Result<&'static str, &'static str>>) -> Body {
    let stream = futures_util::stream::iter(frames).then(|frame| async move {
        tokio::task::yield_now().await;
        match frame {
            Ok(data) => Ok(Frame::data(Bytes::from_static(data.as_bytes()))),
            Err(e) => Err(BodyError::new(std::io::Error::other(e))),
        }
    });
    BodyExt::boxed(StreamBody::new(stream))
}

fn with_status(status: StatusCode, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp
}

impl TestProxy {
    async fn respond(self: Arc<Self>, req: Request<Body>) -> Response<Body> {
        match req.uri().path() {
            "/full" => Response::new(full_body(FULL)),
            "/stream" => Response::new(frames(FRAMES.iter().map(|f| Ok(*f)).collect())),
            "/short" => {
                let mut resp = Response::new(frames(vec![Ok("abc")]));
                resp.headers_mut()
                    .insert(CONTENT_LENGTH, http::HeaderValue::from_static("10"));
                resp
            }
            "/error" => Response::new(frames(vec![Ok("abc"), Err("upstream failed")])),
            "/stall" => Response::new(self.stalling_body()),
            "/late-small" => self.late_body(LATE_SMALL),
            "/late-large" => self.late_body(LATE_LARGE),
            "/hold" => {
                let guard = HoldGuard {
                    ended: self.hold_ended.clone(),
                    finished: false,
                };
                let _ = self.held.send(());
                self.release.notified().await;
                // The driver polls the connection before the listener's
                // phase: a few more wake-ups let it see a shutdown
                // signalled just before the release, as it would while a
                // real request is in flight.
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                guard.finish();
                Response::new(full_body("held"))
            }
            "/deadline-soon" => {
                // Ends at a deadline 200 ms away, kept by whoever polls it.
                let deadline = tokio::time::Instant::now() + Duration::from_millis(200);
                let offered =
                    std::future::poll_fn(|cx| {
                        match crate::http::clock::passed_or_wake_by(cx, deadline) {
                            Some(true) => Poll::Ready(true),
                            Some(false) => Poll::Pending,
                            None => Poll::Ready(false),
                        }
                    })
                    .await;
                Response::new(full_body(if offered { "passed" } else { "no offer" }))
            }
            "/deadline-later" => {
                // Asks to be polled by a deadline a minute away, and ends on
                // a timer of its own after 600 ms.
                let start = tokio::time::Instant::now();
                let far = start + Duration::from_secs(60);
                let mut own = pin!(tokio::time::sleep_until(start + Duration::from_millis(600)));
                std::future::poll_fn(|cx| {
                    if own.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(());
                    }
                    let _ = crate::http::clock::passed_or_wake_by(cx, far);
                    Poll::Pending
                })
                .await;
                Response::new(full_body("later"))
            }
            "/204" => with_status(StatusCode::NO_CONTENT, full_body("not sent")),
            "/chunked-empty" => {
                let mut resp = Response::new(crate::http::body::empty_body());
                resp.headers_mut().insert(
                    http::header::TRANSFER_ENCODING,
                    http::HeaderValue::from_static("chunked"),
                );
                resp
            }
            "/304" => {
                let mut resp = with_status(StatusCode::NOT_MODIFIED, full_body("not sent"));
                resp.headers_mut()
                    .insert(ETAG, http::HeaderValue::from_static("\"v1\""));
                resp
            }
            _ => {
                let (parts, body) = req.into_parts();
                let mut echo = format!("{} {}\n", parts.method, parts.uri);
                for (name, value) in &parts.headers {
                    echo.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("?")));
                }
                echo.push('\n');
                let body = body.collect().await.expect("request body").to_bytes();
                let mut echo = echo.into_bytes();
                echo.extend_from_slice(&body);
                Response::new(full_body(echo))
            }
        }
    }
}

impl TestProxy {
    /// A body of unknown length: one frame, then (telling `held`) none
    /// until [`TestProxy::release`], then its end. Reports its end or its
    /// drop as a `/hold` request does.
    /// A body of `len` bytes, its length known, whose one frame comes only
    /// once released (it reports as `/hold` does when first polled).
    fn late_body(self: Arc<Self>, len: usize) -> Response<Body> {
        let stream = futures_util::stream::once(async move {
            let _ = self.held.send(());
            self.release.notified().await;
            Ok::<_, BodyError>(Frame::data(Bytes::from(vec![b'x'; len])))
        });
        let mut resp = Response::new(BodyExt::boxed(StreamBody::new(stream)));
        resp.headers_mut()
            .insert(CONTENT_LENGTH, http::HeaderValue::from(len));
        resp
    }

    fn stalling_body(self: Arc<Self>) -> Body {
        let guard = HoldGuard {
            ended: self.hold_ended.clone(),
            finished: false,
        };
        let stream =
            futures_util::stream::unfold((true, guard, self), |(first, guard, proxy)| async move {
                if first {
                    let frame = Frame::data(Bytes::from_static(b"abc"));
                    return Some((Ok::<_, BodyError>(frame), (false, guard, proxy)));
                }
                let _ = proxy.held.send(());
                proxy.release.notified().await;
                guard.finish();
                None
            });
        BodyExt::boxed(StreamBody::new(stream))
    }
}

impl Handler for TestProxy {
    type Connection = ();
    fn server_metrics(&self) -> &ServerMetrics {
        &self.metrics
    }
    fn admits(&self, _: IpAddr) -> bool {
        true
    }
    fn shutdown_grace(&self) -> Duration {
        WAIT
    }
    fn header_timeout(&self) -> Duration {
        self.header_timeout
    }
    fn connection(&self, _: SocketAddr) {}
    async fn handle(self: Arc<Self>, _: SocketAddr, (): (), req: Request<Body>) -> Response<Body> {
        self.respond(req).await
    }
    fn count_malformed(&self) {
        self.malformed.fetch_add(1, Ordering::SeqCst);
    }
}

/// A listener serving [`TestProxy`] as the proxy's acceptor does (each
/// connection in a task of its own, through `serve_connection`).
struct Server {
    addr: SocketAddr,
    proxy: Arc<TestProxy>,
    /// The listener's phase, as every connection's hold sees it.
    phase: watch::Sender<Lifecycle>,
    accepted: Arc<AtomicUsize>,
    /// Told each time a connection's task ends.
    closed: mpsc::UnboundedReceiver<()>,
    held: mpsc::UnboundedReceiver<()>,
    hold_ended: mpsc::UnboundedReceiver<bool>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl Server {
    async fn start(header_timeout: Duration) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local address");
        let (held_tx, held) = mpsc::unbounded_channel();
        let (hold_ended_tx, hold_ended) = mpsc::unbounded_channel();
        let proxy = Arc::new(TestProxy {
            metrics: ServerMetrics::default(),
            header_timeout,
            malformed: AtomicUsize::new(0),
            release: Notify::new(),
            held: held_tx,
            hold_ended: hold_ended_tx,
        });
        let (phase, phase_rx) = watch::channel(Lifecycle::Serving);
        let (closed_tx, closed) = mpsc::unbounded_channel();
        let accepted = Arc::new(AtomicUsize::new(0));
        let accepting = tokio::spawn({
            let (proxy, accepted) = (proxy.clone(), accepted.clone());
            async move {
                let (_alive_tx, alive) = watch::channel(());
                let slots = Arc::new(Semaphore::new(Semaphore::MAX_PERMITS));
                let per_client = PerClient::new(usize::MAX);
                let open = Arc::new(AtomicUsize::new(0));
                while let Ok((stream, peer)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let _ = stream.set_nodelay(true);
                    let hold = Arc::new(ConnectionHold {
                        _slot: slots.clone().try_acquire_owned().expect("slot"),
                        _client: per_client.take(peer.ip()).expect("client slot"),
                        _open: proxy.metrics.connection_opened(),
                        _alive: alive.clone(),
                        _thread: ThreadLoad::count(&open),
                        phase: phase_rx.clone(),
                    });
                    let (proxy, closed_tx) = (proxy.clone(), closed_tx.clone());
                    tokio::spawn(async move {
                        serve_connection(stream, peer, proxy, hold).await;
                        let _ = closed_tx.send(());
                    });
                }
            }
        });
        Server {
            addr,
            proxy,
            phase,
            accepted,
            closed,
            held,
            hold_ended,
            accepting,
        }
    }

    async fn connect(&self) -> Raw {
        let stream = TcpStream::connect(self.addr).await.expect("connect");
        Raw {
            stream,
            buf: Vec::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Waits for a connection's task to end.
    async fn connection_ended(&mut self) {
        let ended = timeout(WAIT, self.closed.recv()).await;
        ended
            .expect("connection still served")
            .expect("accepting ended");
    }

    /// Waits for a `/hold` request to start.
    async fn held(&mut self) {
        let held = timeout(WAIT, self.held.recv()).await;
        held.expect("no /hold request").expect("handler gone");
    }

    /// Waits for a `/hold` request's future to end: true if it finished.
    async fn hold_ended(&mut self) -> bool {
        let ended = timeout(WAIT, self.hold_ended.recv()).await;
        ended
            .expect("/hold request still in flight")
            .expect("handler gone")
    }
}

/// A response as read off the wire.
#[derive(Debug)]
struct Answer {
    version: String,
    status: u16,
    /// Names lowercased, in order.
    headers: Vec<(String, String)>,
    /// The body bytes as sent (chunked: with their framing).
    raw: Vec<u8>,
    /// The body (chunked: decoded).
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A raw client connection.
struct Raw {
    stream: TcpStream,
    /// Read and not yet taken.
    buf: Vec<u8>,
}

impl Raw {
    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Asks for `/full` and checks the answer: the connection serves on.
    async fn serves_on(&mut self) {
        self.send(get("/full").as_bytes()).await;
        assert_full(&self.answer(false).await);
    }

    /// Reads more; false at the end of the stream.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        let read = timeout(WAIT, self.stream.read(&mut chunk)).await;
        let n = read.expect("neither bytes nor close").expect("read");
        self.buf.extend_from_slice(&chunk[..n]);
        n > 0
    }

    async fn take(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            assert!(self.fill().await, "closed after {:?}", self.lossy());
        }
        self.buf.drain(..n).collect()
    }

    /// Up to and including the next CRLF.
    async fn line(&mut self) -> Vec<u8> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                return self.buf.drain(..i + 2).collect();
            }
            assert!(
                self.fill().await,
                "closed within a line: {:?}",
                self.lossy()
            );
        }
    }

    fn lossy(&self) -> String {
        String::from_utf8_lossy(&self.buf).into_owned()
    }

    /// A response head (the body left unread).
    async fn head(&mut self) -> Answer {
        let status_line = String::from_utf8(self.line().await).expect("status line");
        let mut words = status_line.split(' ');
        let version = words.next().unwrap_or_default().to_owned();
        assert!(version.starts_with("HTTP/1."), "{status_line:?}");
        let status = words
            .next()
            .and_then(|s| s.parse().ok())
            .expect("status code");
        let mut headers = Vec::new();
        loop {
            let line = String::from_utf8(self.line().await).expect("field line");
            let line = line.trim_end_matches("\r\n");
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').expect("field");
            headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
        }
        Answer {
            version,
            status,
            headers,
            raw: Vec::new(),
            body: Vec::new(),
        }
    }

    /// A whole response, framed as its head says (`head_request`: the
    /// answer to a HEAD request, without a body).
    async fn answer(&mut self, head_request: bool) -> Answer {
        let mut answer = self.head().await;
        if head_request || answer.status == 204 || answer.status == 304 {
            return answer;
        }
        if let Some(n) = answer.header("content-length") {
            let n = n.parse().expect("content-length");
            answer.body = self.take(n).await;
            answer.raw = answer.body.clone();
        } else if answer.header("transfer-encoding") == Some("chunked") {
            loop {
                let size_line = self.line().await;
                answer.raw.extend_from_slice(&size_line);
                let size = std::str::from_utf8(&size_line).expect("chunk size");
                let size = usize::from_str_radix(size.trim_end(), 16).expect("chunk size");
                let data = self.take(size + 2).await;
                answer.raw.extend_from_slice(&data);
                if size == 0 {
                    assert_eq!(data, b"\r\n", "trailers or no end of body");
                    break;
                }
                answer.body.extend_from_slice(&data[..size]);
            }
        } else {
            answer.body = self.rest().await;
            answer.raw = answer.body.clone();
        }
        answer
    }

    /// Everything up to the end of the stream.
    async fn rest(&mut self) -> Vec<u8> {
        while self.fill().await {}
        std::mem::take(&mut self.buf)
    }

    /// Asserts the server closes the connection without sending more.
    async fn closed(&mut self) {
        let rest = self.rest().await;
        assert!(
            rest.is_empty(),
            "bytes before the close: {:?}",
            String::from_utf8_lossy(&rest)
        );
    }
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: example.test\r\n\r\n")
}

fn assert_full(answer: &Answer) {
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-length"), Some("14"));
    assert!(answer.header("date").is_some(), "{answer:?}");
    assert_eq!(answer.body, FULL);
}

#[tokio::test]
async fn keep_alive_answers_requests_one_after_another() {
    let server = Server::start(LONG).await;
    let stream = TcpStream::connect(server.addr).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    let conn = tokio::spawn(conn);
    for _ in 0..2 {
        let req = Request::get("/full")
            .header("host", "example.test")
            .body(Empty::<Bytes>::new())
            .expect("request");
        let resp = timeout(WAIT, sender.send_request(req)).await;
        let resp = resp.expect("no answer").expect("answer");
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()[CONTENT_LENGTH], "14");
        assert!(resp.headers().contains_key(http::header::DATE));
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(body, FULL);
    }
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
    drop(sender);
    let ended = timeout(WAIT, conn).await.expect("client connection open");
    ended.expect("task").expect("client connection");
}

#[tokio::test]
async fn curl_reuses_the_connection() {
    let server = Server::start(LONG).await;
    let url = server.url("/full");
    let run = tokio::process::Command::new("curl")
        .args(["-s", "--http1.1", &url, &url])
        .output();
    let output = match timeout(WAIT, run).await.expect("curl still running") {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("curl not found: test skipped");
            return;
        }
        Err(e) => panic!("curl: {e}"),
    };
    assert!(output.status.success(), "curl: {output:?}");
    assert_eq!(output.stdout, [FULL, FULL].concat());
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let server = Server::start(LONG).await;
    let mut client = server.connect().await;
    let requests = [get("/first"), get("/stream"), get("/second")].concat();
    client.send(requests.as_bytes()).await;
    let first = client.answer(false).await;
    assert!(first.text().starts_with("GET /first\n"), "{first:?}");
    let stream = client.answer(false).await;
    assert_eq!(stream.body, FRAMES.concat().as_bytes());
    let second = client.answer(false).await;
    assert!(second.text().starts_with("GET /second\n"), "{second:?}");
    client.serves_on().await;
}

#[tokio::test]
async fn a_request_with_a_body_goes_to_hyper_with_the_bytes_read() {
    let server = Server::start(LONG).await;
    let mut client = server.connect().await;
    // A request served here, then one with a body read with it, the body
    // not yet whole.
    let post = "POST /echo HTTP/1.1\r\nHost: example.test\r\nContent-Length: 11\r\n\r\nhello";
    client
        .send([get("/full").as_str(), post].concat().as_bytes())
        .await;
    assert_full(&client.answer(false).await);
    client.send(b" world").await;
    let echo = client.answer(false).await;
    assert_eq!(echo.status, 200);
    let text = echo.text();
    assert!(text.starts_with("POST /echo\n"), "{text:?}");
    assert!(text.contains("content-length: 11\n"), "{text:?}");
    assert!(text.ends_with("\n\nhello world"), "{text:?}");
    // hyper serves the connection from here on.
    client.send(get("/after").as_bytes()).await;
    let after = client.answer(false).await;
    assert!(after.text().starts_with("GET /after\n"), "{after:?}");
    assert!(after.header("date").is_some());
    client.serves_on().await;
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn http_1_0_is_served_by_hyper() {
    let server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client.send(b"GET /full HTTP/1.0\r\n\r\n").await;
    let answer = client.answer(false).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, FULL);
    // No keep-alive asked for: closed.
    client.closed().await;
}

#[tokio::test]
async fn expect_100_continue_is_served_by_hyper() {
    let server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client.serves_on().await;
    client
        .send(b"POST /echo HTTP/1.1\r\nHost: example.test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        .await;
    let go_on = client.head().await;
    assert_eq!(go_on.status, 100);
    client.send(b"hello").await;
    let echo = client.answer(false).await;
    assert_eq!(echo.version, "HTTP/1.1");
    assert!(echo.text().ends_with("\n\nhello"), "{echo:?}");
}

#[tokio::test]
async fn a_malformed_request_gets_hypers_400_and_is_counted() {
    let mut server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client.serves_on().await;
    client.send(b"GET / HTTP/1.1\r\nBad Header\r\n\r\n").await;
    let answer = client.answer(false).await;
    assert_eq!(answer.status, 400, "{answer:?}");
    client.closed().await;
    server.connection_ended().await;
    assert_eq!(server.proxy.malformed.load(Ordering::SeqCst), 1);
    // A well-formed connection is not counted.
    let mut client = server.connect().await;
    client.serves_on().await;
    drop(client);
    server.connection_ended().await;
    assert_eq!(server.proxy.malformed.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn too_many_fields_get_hypers_431_and_are_counted() {
    let mut server = Server::start(LONG).await;
    let mut client = server.connect().await;
    let mut request = String::from("GET /full HTTP/1.1\r\nHost: example.test\r\n");
    for i in 0..120 {
        request.push_str(&format!("x-field-{i}: {i}\r\n"));
    }
    request.push_str("\r\n");
    client.send(request.as_bytes()).await;
    let answer = client.answer(false).await;
    assert_eq!(answer.status, 431, "{answer:?}");
    client.closed().await;
    server.connection_ended().await;
    assert_eq!(server.proxy.malformed.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn connection_close_is_answered_then_closed() {
    let server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client
        .send(b"GET /full HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n\r\n")
        .await;
    let answer = client.answer(false).await;
    assert_full(&answer);
    assert_eq!(answer.header("connection"), Some("close"));
    client.closed().await;
}

#[tokio::test]
async fn a_body_of_unknown_length_is_chunked() {
    let server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client.send(get("/stream").as_bytes()).await;
    let answer = client.answer(false).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("transfer-encoding"), Some("chunked"));
    assert_eq!(answer.header("content-length"), None);
    assert_eq!(answer.raw, b"2\r\nab\r\n3\r\ncde\r\n1\r\nf\r\n0\r\n\r\n");
    client.serves_on().await;
}

#[tokio::test]
async fn head_204_and_304_are_answered_without_a_body() {
    let server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client
        .send(b"HEAD /full HTTP/1.1\r\nHost: example.test\r\n\r\n")
        .await;
    let head = client.answer(true).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("14"));
    // Each next answer starts right after the head: no body was sent.
    client.send(get("/204").as_bytes()).await;
    let no_content = client.answer(false).await;
    assert_eq!(no_content.status, 204);
    assert_eq!(no_content.header("content-length"), None);
    client.send(get("/304").as_bytes()).await;
    let not_modified = client.answer(false).await;
    assert_eq!(not_modified.status, 304);
    assert_eq!(not_modified.header("etag"), Some("\"v1\""));
    client.serves_on().await;
    assert!(client.buf.is_empty(), "{:?}", client.lossy());
}

#[tokio::test]
async fn a_body_short_of_its_length_closes_the_connection() {
    let server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client.send(get("/short").as_bytes()).await;
    let head = client.head().await;
    assert_eq!(head.header("content-length"), Some("10"));
    assert_eq!(client.rest().await, b"abc");
}

#[tokio::test]
async fn a_failed_body_closes_the_connection() {
    let server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client.send(get("/error").as_bytes()).await;
    let head = client.head().await;
    assert_eq!(head.header("transfer-encoding"), Some("chunked"));
    // The chunk sent, and no last chunk: the client sees the body fail.
    assert_eq!(client.rest().await, b"3\r\nabc\r\n");
}

#[tokio::test]
async fn a_client_hanging_up_drops_its_request() {
    let mut server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client.send(get("/hold").as_bytes()).await;
    server.held().await;
    drop(client);
    assert!(!server.hold_ended().await, "the request finished");
    server.connection_ended().await;
}

#[tokio::test]
async fn a_client_hanging_up_while_its_body_is_awaited_drops_the_body() {
    hang_up_while_the_body_is_awaited(&get("/stall")).await;
}

#[tokio::test]
async fn a_client_hanging_up_while_its_body_is_awaited_drops_the_body_hyper() {
    // `Content-Length: 0`: hyper serves it (what the other case follows).
    let request = "GET /stall HTTP/1.1\r\nHost: example.test\r\nContent-Length: 0\r\n\r\n";
    hang_up_while_the_body_is_awaited(request).await;
}

async fn hang_up_while_the_body_is_awaited(request: &str) {
    let mut server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client.send(request.as_bytes()).await;
    let head = client.head().await;
    assert_eq!(head.header("transfer-encoding"), Some("chunked"));
    assert_eq!(client.take(8).await, b"3\r\nabc\r\n");
    server.held().await;
    drop(client);
    assert!(!server.hold_ended().await, "the body finished");
    server.connection_ended().await;
}

/// A small body that comes after its head is written with it, in one
/// write: nothing reaches the client while the body is awaited. (The
/// test and the server share one thread, so the server's write, had it
/// made one, is in the client's socket when the test hears the body was
/// polled.)
#[tokio::test]
async fn a_small_body_that_comes_late_is_written_with_its_head() {
    let mut server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client.send(get("/late-small").as_bytes()).await;
    server.held().await;
    tokio::task::yield_now().await;
    let mut probe = [0u8; 64];
    match client.stream.try_read(&mut probe) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("bytes before the body was ready: {other:?}"),
    }
    server.proxy.release.notify_one();
    let answer = client.answer(false).await;
    assert_eq!(answer.header("content-length"), Some("5"));
    assert_eq!(answer.body, b"xxxxx");
    client.serves_on().await;
}

/// A head that arrives a byte at a time (after empty lines) is read whole,
/// and the connection serves on.
#[tokio::test]
async fn a_head_that_trickles_in_is_answered() {
    let server = Server::start(LONG).await;
    let mut client = server.connect().await;
    let request = format!("\r\n\r\n{}", get("/full"));
    for byte in request.as_bytes() {
        client.send(std::slice::from_ref(byte)).await;
        client.stream.flush().await.expect("flush");
    }
    assert_full(&client.answer(false).await);
    client.serves_on().await;
}

/// A response that declares chunked framing and has no body ends its
/// empty chunked body, and the connection serves on.
#[tokio::test]
async fn a_declared_chunked_response_without_a_body_is_terminated() {
    let server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client.send(get("/chunked-empty").as_bytes()).await;
    let answer = client.answer(false).await;
    assert_eq!(answer.header("transfer-encoding"), Some("chunked"));
    assert_eq!(answer.raw, b"0\r\n\r\n");
    client.serves_on().await;
}

/// A larger body that comes late gets its head first, as hyper sends it.
#[tokio::test]
async fn a_large_body_that_comes_late_gets_its_head_first() {
    let mut server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client.send(get("/late-large").as_bytes()).await;
    server.held().await;
    let head = client.head().await;
    assert_eq!(head.header("content-length"), Some("20000"));
    server.proxy.release.notify_one();
    assert_eq!(client.take(LATE_LARGE).await, vec![b'x'; LATE_LARGE]);
}

#[tokio::test]
async fn a_stalled_body_that_ends_completes_the_response() {
    let mut server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client.send(get("/stall").as_bytes()).await;
    server.held().await;
    server.proxy.release.notify_one();
    let answer = client.answer(false).await;
    assert_eq!(answer.raw, b"3\r\nabc\r\n0\r\n\r\n");
    assert!(server.hold_ended().await, "the body was dropped");
    client.serves_on().await;
}

#[tokio::test]
async fn the_header_timeout_closes_without_an_answer() {
    let mut server = Server::start(Duration::from_millis(300)).await;
    // Idle after a response.
    let mut idle = server.connect().await;
    idle.send(get("/full").as_bytes()).await;
    assert_full(&idle.answer(false).await);
    // Part of a head.
    let mut partial = server.connect().await;
    partial.send(b"GET / HT").await;
    // Nothing at all.
    let mut silent = server.connect().await;
    // Idle after a response of hyper's.
    let mut by_hyper = server.connect().await;
    by_hyper
        .send(b"POST /echo HTTP/1.1\r\nHost: example.test\r\nContent-Length: 2\r\n\r\nhi")
        .await;
    let echo = by_hyper.answer(false).await;
    assert!(echo.text().ends_with("\n\nhi"), "{echo:?}");
    idle.closed().await;
    partial.closed().await;
    silent.closed().await;
    by_hyper.closed().await;
    for _ in 0..4 {
        server.connection_ended().await;
    }
}

#[tokio::test]
async fn the_header_timeout_counts_from_the_end_of_the_last_response() {
    // Each request comes 0.35 s after the connection or the last response:
    // within the timeout of each, past the first one's deadline at the
    // second. (Sleeps set the pace here; what is asserted is only that
    // each request is answered.)
    let timeout = Duration::from_millis(600);
    let pause = Duration::from_millis(350);
    let server = Server::start(timeout).await;
    let mut client = server.connect().await;
    tokio::time::sleep(pause).await;
    client.serves_on().await;
    tokio::time::sleep(pause / 2).await;
    client.send(b"GET /full HT").await;
    tokio::time::sleep(pause / 2).await;
    client.send(b"TP/1.1\r\nHost: example.test\r\n\r\n").await;
    assert_full(&client.answer(false).await);
    // Then idle: closed.
    client.closed().await;
}

#[tokio::test]
async fn a_request_deadline_is_kept_by_the_connections_timer() {
    // The connection's timer is a minute away; the request's deadline, 200
    // ms: the timer is moved for it.
    let server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client.send(get("/deadline-soon").as_bytes()).await;
    assert_eq!(client.answer(false).await.text(), "passed");
    // hyper's side offers nothing: the request keeps its own timer.
    client
        .send(b"POST /deadline-soon HTTP/1.1\r\nHost: example.test\r\nContent-Length: 0\r\n\r\n")
        .await;
    assert_eq!(client.answer(false).await.text(), "no offer");
}

#[tokio::test]
async fn the_header_timeout_holds_after_a_request_with_a_later_deadline() {
    // The request outlives the first header deadline, so the timer fires
    // early during it and is moved to the request's deadline a minute
    // away; after the response it comes back to the header timeout.
    let server = Server::start(Duration::from_millis(300)).await;
    let mut client = server.connect().await;
    client.send(get("/deadline-later").as_bytes()).await;
    assert_eq!(client.answer(false).await.text(), "later");
    client.closed().await;
}

#[tokio::test]
async fn shutdown_closes_idle_connections() {
    let mut server = Server::start(LONG).await;
    // Idle after a response served here.
    let mut here = server.connect().await;
    here.send(get("/full").as_bytes()).await;
    assert_full(&here.answer(false).await);
    // Idle after a response served by hyper.
    let mut by_hyper = server.connect().await;
    by_hyper
        .send(b"POST /echo HTTP/1.1\r\nHost: example.test\r\nContent-Length: 2\r\n\r\nhi")
        .await;
    let echo = by_hyper.answer(false).await;
    assert!(echo.text().ends_with("\n\nhi"), "{echo:?}");
    // Never sent a byte.
    let mut silent = server.connect().await;
    server.phase.send_replace(Lifecycle::Draining);
    here.closed().await;
    by_hyper.closed().await;
    silent.closed().await;
    for _ in 0..3 {
        server.connection_ended().await;
    }
}

#[tokio::test]
async fn shutdown_lets_a_request_in_flight_finish_with_connection_close() {
    let mut server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client.send(get("/hold").as_bytes()).await;
    server.held().await;
    server.phase.send_replace(Lifecycle::Draining);
    server.proxy.release.notify_one();
    let answer = client.answer(false).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, b"held");
    assert_eq!(answer.header("connection"), Some("close"));
    client.closed().await;
    assert!(server.hold_ended().await, "the request was dropped");
}

#[tokio::test]
async fn shutdown_lets_a_body_in_flight_end_then_closes() {
    let mut server = Server::start(LONG).await;
    let mut client = server.connect().await;
    client.send(get("/stall").as_bytes()).await;
    server.held().await;
    server.phase.send_replace(Lifecycle::Draining);
    server.proxy.release.notify_one();
    // The head went before the shutdown: the body ends, then the
    // connection closes.
    let answer = client.answer(false).await;
    assert_eq!(answer.raw, b"3\r\nabc\r\n0\r\n\r\n");
    client.closed().await;
    assert!(server.hold_ended().await, "the body was dropped");
}

#[tokio::test]
async fn a_head_over_16_kib_is_served_by_hyper() {
    let server = Server::start(LONG).await;
    let mut client = server.connect().await;
    let value = "v".repeat(500);
    let mut request = String::from("GET /big HTTP/1.1\r\nHost: example.test\r\n");
    for i in 0..40 {
        request.push_str(&format!("x-long-{i}: {value}\r\n"));
    }
    request.push_str("\r\n");
    assert!(request.len() > 16 * 1024);
    client.send(request.as_bytes()).await;
    let answer = client.answer(false).await;
    assert_eq!(answer.status, 200);
    let text = answer.text();
    assert!(text.starts_with("GET /big\n"), "{text:?}");
    for i in 0..40 {
        assert!(
            text.contains(&format!("x-long-{i}: {value}\n")),
            "x-long-{i}"
        );
    }
    client.serves_on().await;
}
