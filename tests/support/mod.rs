//! Shared test servers and clients: loopback origins with counters
//! (`Origin`, `HeldOrigin`), misbehaving ones and raw TCP servers
//! (`serve_tcp`), a proxy started on port 0 (`Proxy`), a proxy-aware client
//! (`Conn`; `raw` for bytes no client would send), and the small helpers
//! the tests share: requests, credentials, metrics, the audit log.
//!
//! Every test binary but `robots` includes this module
//! (`#[path = "../support/mod.rs"] mod support;` in its main.rs).
// Each binary uses a part of it; what one does not use is not dead code.
#![allow(dead_code)]

pub mod binary;
pub mod component;
pub mod events;
pub mod faulty;
pub mod fleet;
pub mod nginx;
pub mod raw;
pub mod redis;
pub mod tls;
pub mod webdriver;

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use robots_proxy::App;
use robots_proxy::config::{Config, PasswordParams, UserConfig, hash_password_with};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// The component an `Option` holds (a Redis, a Node runtime...), or the
/// end of the test where there is none: a component missing outside CI
/// ([`component::missing`] said so; under CI it failed the test).
#[allow(unused_macros)]
macro_rules! need {
    ($component:expr) => {
        match $component {
            Some(c) => c,
            None => return,
        }
    };
}
#[allow(unused_imports)]
pub(crate) use need;

/// Generous upper bound for anything that must merely not hang.
pub const NO_HANG: Duration = Duration::from_secs(15);

/// A loopback TCP server (127.0.0.1, port 0) that serves each connection
/// it accepts with `handle`, in a task of its own.
pub async fn serve_tcp<F, Fut>(handle: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(handle(stream));
        }
    });
    addr
}

/// Requests counted per path (and query) as an origin received them.
#[derive(Clone, Default)]
pub struct Hits(Arc<Mutex<HashMap<String, usize>>>);

impl Hits {
    pub fn add(&self, path: &str) {
        *self
            .0
            .lock()
            .expect("hits")
            .entry(path.to_string())
            .or_default() += 1;
    }

    pub fn get(&self, path: &str) -> usize {
        self.0.lock().expect("hits").get(path).copied().unwrap_or(0)
    }

    /// Every path seen, with its count.
    pub fn all(&self) -> HashMap<String, usize> {
        self.0.lock().expect("hits").clone()
    }
}

/// What an origin answers for a path.
#[derive(Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub delay: Duration,
    /// Answered instead to a request with If-None-Match.
    pub conditional: Option<Box<Reply>>,
    /// Answered instead to a request carrying this header with this value.
    pub when_header: Option<(String, String, Box<Reply>)>,
}

impl Reply {
    pub fn ok(body: impl Into<Bytes>) -> Reply {
        Reply {
            status: 200,
            headers: Vec::new(),
            body: body.into(),
            delay: Duration::ZERO,
            conditional: None,
            when_header: None,
        }
    }
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Bytes::new(),
            delay: Duration::ZERO,
            conditional: None,
            when_header: None,
        }
    }
    pub fn redirect(to: &str) -> Reply {
        Reply::status(301).header("location", to)
    }
    pub fn header(mut self, k: &str, v: &str) -> Reply {
        self.headers.push((k.into(), v.into()));
        self
    }
    /// What a request with If-None-Match gets instead of this reply.
    pub fn if_none_match(mut self, reply: Reply) -> Reply {
        self.conditional = Some(Box::new(reply));
        self
    }
    /// What a request whose `name` header is `value` gets instead.
    pub fn when_header(mut self, name: &str, value: &str, reply: Reply) -> Reply {
        self.when_header = Some((name.into(), value.into(), Box::new(reply)));
        self
    }
    pub fn delay(mut self, d: Duration) -> Reply {
        self.delay = d;
        self
    }
}

/// A loopback HTTP origin with per-path replies and hit counters; the
/// request headers it saw are recorded too.
pub struct Origin {
    pub addr: SocketAddr,
    routes: Arc<Mutex<HashMap<String, Reply>>>,
    hits: Hits,
    pub seen_headers: Arc<Mutex<Vec<http::HeaderMap>>>,
    /// HTTP version of every request seen.
    pub versions: Arc<Mutex<Vec<http::Version>>>,
    /// Connections accepted.
    pub connections: Arc<std::sync::atomic::AtomicUsize>,
    /// Path and query of every request, with when its headers arrived.
    pub arrivals: Arc<Mutex<Vec<(String, std::time::Instant)>>>,
}

impl Origin {
    pub async fn start() -> Origin {
        Origin::start_inner(None).await
    }

    /// An origin whose `/robots.txt` is `text`.
    pub async fn with_robots(text: &str) -> Origin {
        let origin = Origin::start().await;
        origin.robots(text);
        origin
    }

    /// An origin whose `/robots.txt` is answered with `reply` (a status,
    /// headers, a delay, a redirect).
    pub async fn with_robots_reply(reply: Reply) -> Origin {
        let origin = Origin::start().await;
        origin.route("/robots.txt", reply);
        origin
    }

    /// An HTTPS origin (HTTP/1.1 and HTTP/2 by ALPN) with `config`.
    pub async fn start_tls(config: Arc<rustls::ServerConfig>) -> Origin {
        Origin::start_inner(Some(tokio_rustls::TlsAcceptor::from(config))).await
    }

    async fn start_inner(tls: Option<tokio_rustls::TlsAcceptor>) -> Origin {
        let routes: Arc<Mutex<HashMap<String, Reply>>> = Arc::default();
        let hits = Hits::default();
        let seen: Arc<Mutex<Vec<http::HeaderMap>>> = Arc::default();
        let versions: Arc<Mutex<Vec<http::Version>>> = Arc::default();
        let (r, h, s) = (routes.clone(), hits.clone(), seen.clone());
        let v = versions.clone();
        let connections: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let accepted = connections.clone();
        let arrivals: Arc<Mutex<Vec<(String, std::time::Instant)>>> = Arc::default();
        let arrived = arrivals.clone();
        let addr = serve_tcp(move |stream| {
            accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (r, h, s) = (r.clone(), h.clone(), s.clone());
            let v = v.clone();
            let a = arrived.clone();
            let tls = tls.clone();
            async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (r, h, s) = (r.clone(), h.clone(), s.clone());
                    v.lock().expect("versions").push(req.version());
                    let at = std::time::Instant::now();
                    let a = a.clone();
                    async move {
                        let key = req
                            .uri()
                            .path_and_query()
                            .map(|p| p.as_str().to_string())
                            .unwrap_or_default();
                        a.lock().expect("arrivals").push((key.clone(), at));
                        h.add(&key);
                        s.lock().expect("seen").push(req.headers().clone());
                        let reply = {
                            let routes = r.lock().expect("routes");
                            routes
                                .get(&key)
                                .or_else(|| routes.get(req.uri().path()))
                                .cloned()
                        };
                        let conditional = req.headers().contains_key("if-none-match");
                        let headers = req.headers().clone();
                        let _ = req.into_body().collect().await;
                        let mut reply = reply.unwrap_or_else(|| Reply::ok(format!("page {key}")));
                        if let Some(c) = reply.conditional.take().filter(|_| conditional) {
                            reply = *c;
                        }
                        if let Some((_, _, r)) = reply.when_header.take().filter(|(n, v, _)| {
                            headers
                                .get(n.as_str())
                                .is_some_and(|h| h.as_bytes() == v.as_bytes())
                        }) {
                            reply = *r;
                        }
                        if !reply.delay.is_zero() {
                            tokio::time::sleep(reply.delay).await;
                        }
                        let mut resp = Response::new(Full::new(reply.body.clone()));
                        *resp.status_mut() = StatusCode::from_u16(reply.status).expect("status");
                        for (k, v) in &reply.headers {
                            resp.headers_mut().append(
                                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                                v.parse().expect("value"),
                            );
                        }
                        Ok::<_, Infallible>(resp)
                    }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                match tls {
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                        }
                    }
                    None => {
                        let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                    }
                }
            }
        })
        .await;
        Origin {
            addr,
            routes,
            hits,
            seen_headers: seen,
            versions,
            connections,
            arrivals,
        }
    }

    pub fn route(&self, path: &str, reply: Reply) {
        self.routes
            .lock()
            .expect("routes")
            .insert(path.into(), reply);
    }

    pub fn robots(&self, text: &str) {
        self.route("/robots.txt", Reply::ok(text.to_string()));
    }

    pub fn hits(&self, path: &str) -> usize {
        self.hits.get(path)
    }

    /// When the requests whose path starts with one of `prefixes` arrived
    /// here, in order.
    pub fn arrived(&self, prefixes: &[&str]) -> Vec<std::time::Instant> {
        let mut at: Vec<std::time::Instant> = self
            .arrivals
            .lock()
            .expect("arrivals")
            .iter()
            .filter(|(path, _)| prefixes.iter().any(|p| path.starts_with(p)))
            .map(|(_, t)| *t)
            .collect();
        at.sort();
        at
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn https_url(&self, path: &str) -> String {
        format!("https://{}{}", self.addr, path)
    }

    /// A small site for crawlers: an HTML index at `/` linking
    /// `/page/0` to `/page/{pages - 1}` (HTML pages) and every path of
    /// `also` (left to the default route). Returns the pages' paths, `/`
    /// first.
    pub fn link_site(&self, pages: usize, also: &[&str]) -> Vec<String> {
        let html = |body: String| {
            Reply::ok(format!("<html><body>{body}</body></html>"))
                .header("content-type", "text/html")
        };
        let mut paths = vec!["/".to_string()];
        let mut index = String::new();
        for i in 0..pages {
            let path = format!("/page/{i}");
            self.route(&path, html(format!("page {i}")));
            index.push_str(&format!("<a href=\"{path}\">page {i}</a> "));
            paths.push(path);
        }
        for path in also {
            index.push_str(&format!("<a href=\"{path}\">{path}</a> "));
        }
        self.route("/", html(index));
        paths
    }
}

/// A raw TCP server whose every connection gets `behaviour`.
#[derive(Clone, Copy)]
pub enum Misbehave {
    /// Accept, read, never answer.
    Hang,
    /// Accept, read the request, then reset (RST via SO_LINGER 0).
    Reset,
    /// Answer bytes that are not HTTP.
    Garbage,
}

pub async fn misbehaving(behaviour: Misbehave) -> SocketAddr {
    serve_tcp(move |mut stream| async move {
        let mut buf = [0u8; 4096];
        let _ = stream.read(&mut buf).await;
        match behaviour {
            Misbehave::Hang => {
                // The connection held open, never answered.
                std::future::pending::<()>().await;
            }
            Misbehave::Reset => {
                #[allow(deprecated)]
                let _ = stream.set_linger(Some(Duration::ZERO));
                drop(stream);
            }
            Misbehave::Garbage => {
                let _ = stream.write_all(b"\x00\x01garbage garbage\r\n\r\n").await;
            }
        }
    })
    .await
}

/// An origin that answers `/robots.txt` (allowing everything) and every
/// other request with bytes that are not HTTP.
pub async fn garbage_origin() -> SocketAddr {
    serve_tcp(|mut s| async move {
        let mut buf = vec![0u8; 4096];
        let Ok(n) = s.read(&mut buf).await else {
            return;
        };
        let answer: Vec<u8> = if buf[..n].starts_with(b"GET /robots.txt ") {
            raw::ok_close("User-agent: *\nAllow: /\n").into_bytes()
        } else {
            b"\x00\x01 not http at all\r\n\r\n".to_vec()
        };
        let _ = s.write_all(&answer).await;
    })
    .await
}

/// A running proxy.
pub struct Proxy {
    pub addr: SocketAddr,
    /// The admin listener, when `config.admin.listen` was set.
    pub admin_addr: Option<SocketAddr>,
    /// The identity listener, when `config.identity.listen` was set.
    pub identity_addr: Option<SocketAddr>,
    pub audit_path: PathBuf,
    /// State directory (the CA is in `ca/`).
    pub state_dir: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    pub done: tokio::task::JoinHandle<usize>,
    _dir: tempfile::TempDir,
}

/// Enables the admin listener (port 0) in `c`.
pub fn admin(c: &mut Config) {
    c.admin.listen = Some("127.0.0.1:0".parse().expect("addr"));
}

/// A config for tests: port 0, private destinations allowed (origins are
/// on loopback), audit log in a temp dir, short timeouts.
pub fn test_config(dir: &std::path::Path) -> Config {
    let mut c = Config {
        listen: "127.0.0.1:0".parse().expect("addr"),
        allow_private_destinations: true,
        ..Config::default()
    };
    c.audit.path = Some(dir.join("audit.jsonl"));
    c.state_dir = Some(dir.to_path_buf());
    c.robots.fetch_timeout = Duration::from_secs(2);
    c.upstream.response_timeout = Duration::from_secs(2);
    c.shutdown_grace = Duration::from_secs(5);
    // One serving thread, this test's runtime: tests that move tokio's
    // clock, or capture the events of their own thread, need the proxy's
    // connections there. tests/ops/serving_threads.rs covers more.
    c.workers = 1;
    c
}

impl Proxy {
    pub async fn start() -> Proxy {
        Proxy::start_with(|_| {}).await
    }

    /// A proxy with its admin listener.
    pub async fn with_admin() -> Proxy {
        Proxy::start_with(admin).await
    }

    pub async fn start_with(adjust: impl FnOnce(&mut Config)) -> Proxy {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = test_config(dir.path());
        adjust(&mut config);
        let audit_path = config.audit_path();
        let state_dir = config.state_dir();
        let app = App::bind(config).await.expect("proxy starts");
        let addr = app.local_addr();
        let admin_addr = app.admin_addr();
        let identity_addr = app.identity_addr();
        let (tx, rx) = oneshot::channel::<()>();
        let done = tokio::spawn(app.serve(async move {
            let _ = rx.await;
        }));
        Proxy {
            addr,
            admin_addr,
            identity_addr,
            audit_path,
            state_dir,
            stop: Some(tx),
            done,
            _dir: dir,
        }
    }

    pub fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// Waits (bounded) until `serve` has returned, after [`Proxy::stop`]:
    /// the connections it cut at the end of the grace period.
    pub async fn finished(&mut self) -> usize {
        tokio::time::timeout(NO_HANG, &mut self.done)
            .await
            .expect("serve did not return")
            .expect("serve task")
    }

    /// Audit lines as JSON values.
    pub fn audit(&self) -> Vec<serde_json::Value> {
        json_lines(&self.audit_path)
    }

    /// The audit log's lines of one `type` (`admin`, `politeness`).
    pub fn audit_of_type(&self, kind: &str) -> Vec<serde_json::Value> {
        lines_of_type(&self.audit_path, kind)
    }

    /// The one request line of the audit log; fails, showing them all,
    /// unless there is exactly one.
    pub fn only_audit_line(&self) -> serde_json::Value {
        let mut audit = self.audit();
        assert_eq!(audit.len(), 1, "one audit line expected: {audit:?}");
        audit.remove(0)
    }

    /// Sends one absolute-form GET through the proxy on a new connection.
    pub async fn get(&self, url: &str) -> Resp {
        self.request(Request::get(url).body(Bytes::new()).expect("req"))
            .await
    }

    pub async fn request(&self, req: Request<Bytes>) -> Resp {
        let stream = TcpStream::connect(self.addr).await.expect("connect proxy");
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        let (parts, body) = req.into_parts();
        let req = Request::from_parts(parts, Full::new(body));
        let resp = sender.send_request(req).await.expect("response");
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Resp {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    /// Sends `method path` (origin-form, e.g. `/metrics`) to the admin
    /// listener on a new connection.
    pub async fn admin(&self, method: http::Method, path: &str) -> Resp {
        let addr = self.admin_addr.expect("admin listener enabled");
        let mut conn = Conn::open(addr).await;
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, addr.to_string())
            .body(Bytes::new())
            .expect("admin request");
        conn.send(req).await
    }

    /// `GET path` on the admin listener.
    pub async fn admin_get(&self, path: &str) -> Resp {
        self.admin(http::Method::GET, path).await
    }

    /// `POST path` on the admin listener.
    pub async fn admin_post(&self, path: &str) -> Resp {
        self.admin(http::Method::POST, path).await
    }

    /// The text of the admin listener's `/metrics`.
    pub async fn metrics(&self) -> String {
        self.admin_get("/metrics").await.body
    }

    /// Waits until `ok` holds of the admin listener's `/metrics`; returns
    /// that text (the last one seen if it never does).
    pub async fn until_metrics(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        until(what, || async {
            let text = self.metrics().await;
            if ok(&text) { Ok(text) } else { Err(text) }
        })
        .await
    }

    /// Fails, showing `/metrics`, unless `series` there is `value`; `why`
    /// says what the value means.
    pub async fn assert_metric(&self, series: &str, value: f64, why: &str) {
        let text = self.metrics().await;
        assert_eq!(
            metric(&text, series),
            Some(value),
            "{why}: {series} in\n{text}"
        );
    }

    /// The admin listener's `/explain` of `url` (its default agent).
    pub async fn explain(&self, url: &str) -> serde_json::Value {
        self.admin_get(&format!("/explain?url={}", percent(url)))
            .await
            .json()
    }
}

/// One client connection (HTTP/1.1 keep-alive) for several requests in turn.
pub struct Conn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    /// The connection task; it ends when the connection closes.
    pub task: tokio::task::JoinHandle<Result<(), hyper::Error>>,
}

impl Conn {
    pub async fn open(addr: SocketAddr) -> Conn {
        Conn::over(TcpStream::connect(addr).await.expect("connect")).await
    }

    /// HTTP/1.1 over `io`: a tunnel, TLS inside one, or any stream.
    pub async fn over<IO>(io: IO) -> Conn
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .expect("handshake");
        Conn {
            sender,
            task: tokio::spawn(conn),
        }
    }

    /// Sends one request on this connection and collects the response.
    pub async fn send(&mut self, req: Request<Bytes>) -> Resp {
        self.try_send(req).await.expect("response")
    }

    /// Like [`Conn::send`], but a closed connection is an `Err`.
    pub async fn try_send(&mut self, req: Request<Bytes>) -> Result<Resp, hyper::Error> {
        self.sender.ready().await?;
        let (parts, body) = req.into_parts();
        let resp = self
            .sender
            .send_request(Request::from_parts(parts, Full::new(body)))
            .await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(Resp {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }

    /// An absolute-form GET on this connection.
    pub async fn get(&mut self, url: &str) -> Resp {
        self.send(Request::get(url).body(Bytes::new()).expect("req"))
            .await
    }

    /// [`Conn::get`] with `user:password` credentials for the proxy.
    pub async fn get_as(&mut self, url: &str, credentials: &str) -> Resp {
        self.send(get_as(url, credentials)).await
    }
}

/// The value of one Prometheus sample line (`name{labels} value`), if present.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

/// `robots_proxy_requests_total` of `decision`; panics if it is missing.
pub fn requests_total(metrics: &str, decision: &str) -> f64 {
    metric(
        metrics,
        &format!("robots_proxy_requests_total{{decision=\"{decision}\"}}"),
    )
    .unwrap_or_else(|| panic!("no requests_total for {decision} in:\n{metrics}"))
}

/// `robots_proxy_robots_fetches_total` of `outcome` and `status_class`.
pub fn robots_fetches(metrics: &str, outcome: &str, status_class: &str) -> Option<f64> {
    metric(
        metrics,
        &format!(
            "robots_proxy_robots_fetches_total{{outcome=\"{outcome}\",status_class=\"{status_class}\"}}"
        ),
    )
}

/// `s` percent-encoded for a query string.
pub fn percent(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// The request lines of an audit log (JSON Lines), its checkpoint and
/// admin action lines left out; panics on one that is not a whole JSON
/// value. A missing file has none.
pub fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    typed_lines(path)
        .into_iter()
        .filter(|l| l["type"].is_null())
        .collect()
}

/// The admin action lines of an audit log (`"type":"admin"`).
pub fn admin_lines(path: &Path) -> Vec<serde_json::Value> {
    lines_of_type(path, "admin")
}

/// The lines of an audit log of one `type` (`admin`, `politeness`).
pub fn lines_of_type(path: &Path, kind: &str) -> Vec<serde_json::Value> {
    typed_lines(path)
        .into_iter()
        .filter(|l| l["type"] == kind)
        .collect()
}

/// Every line of an audit log, parsed.
fn typed_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("torn audit line {l:?}: {e}")))
        .collect()
}

/// A GET of `url` with the given request headers.
pub fn get_with(url: &str, headers: &[(&str, &str)]) -> Request<Bytes> {
    let mut b = Request::get(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Bytes::new()).expect("request")
}

/// A GET of `url` with `user:password` credentials for the proxy.
pub fn get_as(url: &str, credentials: &str) -> Request<Bytes> {
    get_with(url, &[("proxy-authorization", &basic(credentials))])
}

/// A `Proxy-Authorization` value for `user:password` credentials.
pub fn basic(credentials: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    )
}

/// A password hash at Argon2's minimum cost: the proxy verifies whatever
/// parameters the PHC string names, and default-cost hashing is slow in
/// debug builds.
pub fn cheap_hash(password: &str) -> String {
    hash_password_with(
        password,
        PasswordParams::new(8, 1, 1, None).expect("params"),
    )
    .expect("hash")
}

/// A proxy user whose password is `password` (hashed cheaply): no agent of
/// its own, no rate limit, no purposes.
pub fn user(name: &str, password: &str) -> UserConfig {
    UserConfig {
        name: name.into(),
        password_hash: cheap_hash(password),
        agent: None,
        max_rps: None,
        purposes: Vec::new(),
        ..Default::default()
    }
}

/// Moves tokio's clock, which the in-process proxy's robots.txt cache
/// runs on, forward by exactly `by`. The clock is paused only for the
/// jump: real socket I/O runs on a running clock, where no timeout fires
/// early, and a lifetime is crossed by exactly its length, not by a sleep
/// with slack.
pub async fn skip(by: Duration) {
    tokio::time::pause();
    tokio::time::advance(by).await;
    tokio::time::resume();
}

/// A field of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`), of process
/// `pid` (`None`: this one).
pub fn status_kib(pid: Option<u32>, field: &str) -> u64 {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".to_owned(),
    };
    let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

/// What a check of [`until`] answers: the awaited value once the state is
/// there, else nothing (`None`) or what it saw instead (`Err`, shown if the
/// wait fails).
pub trait Awaited {
    type Value;
    fn ready(self) -> Result<Self::Value, Option<String>>;
}

impl<T> Awaited for Option<T> {
    type Value = T;
    fn ready(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T> Awaited for Result<T, String> {
    type Value = T;
    fn ready(self) -> Result<T, Option<String>> {
        self.map_err(Some)
    }
}

/// How often [`until`] asks again.
pub const POLL: Duration = Duration::from_millis(10);

/// Waits until `check` gives a value, asking it again every [`POLL`], for
/// at most [`NO_HANG`]; then fails naming `what` was awaited (and what the
/// last check saw, when it says). For states a test can observe but not
/// be told of (a metric, a file, another process, Redis's clock): the one
/// "wait until" of the tests.
pub async fn until<F, Fut>(what: &str, check: F) -> <Fut::Output as Awaited>::Value
where
    F: FnMut() -> Fut,
    Fut: Future,
    Fut::Output: Awaited,
{
    until_paced(what, NO_HANG, POLL, check).await
}

/// [`until`] with a limit of its own (a Redis cluster forming, a fleet's
/// settling time).
pub async fn until_within<F, Fut>(
    what: &str,
    limit: Duration,
    check: F,
) -> <Fut::Output as Awaited>::Value
where
    F: FnMut() -> Fut,
    Fut: Future,
    Fut::Output: Awaited,
{
    until_paced(what, limit, POLL, check).await
}

/// [`until_within`], asking every `every`: for a check that is itself a
/// request (a proxy asked again until it serves), at the pace of a
/// client retrying.
pub async fn until_paced<F, Fut>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut check: F,
) -> <Fut::Output as Awaited>::Value
where
    F: FnMut() -> Fut,
    Fut: Future,
    Fut::Output: Awaited,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let seen = match check().await.ready() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        if tokio::time::Instant::now() >= deadline {
            match seen {
                Some(seen) => panic!("waited {limit:?} for {what}; last seen: {seen}"),
                None => panic!("waited {limit:?} for {what}"),
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// Waits (bounded) until connecting to `addr` fails, as it does once a
/// listener has closed; returns the error.
pub async fn until_refused(addr: SocketAddr) -> std::io::Error {
    until(&format!("{addr} to stop accepting"), || async {
        TcpStream::connect(addr).await.err()
    })
    .await
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A response, collected.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The header `name` parsed as a `T` (`Retry-After` as seconds).
    pub fn parsed<T: std::str::FromStr>(&self, name: &str) -> Option<T> {
        self.header(name).and_then(|v| v.parse().ok())
    }

    /// Fails, showing the response, unless its status is `status` and its
    /// body contains each of `says`; `case` names the case (empty: none).
    pub fn assert_says(&self, case: &str, status: u16, says: &[&str]) {
        assert_eq!(self.status, status, "{case}: {}", self.body);
        for text in says {
            assert!(
                self.body.contains(text),
                "{case}: no {text:?} in the body: {}",
                self.body
            );
        }
    }

    /// The body as JSON; panics, showing it, if it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// An origin that answers `/robots.txt` at once (allowing everything but
/// `/private`) and holds every other request until [`HeldOrigin::release`]:
/// a request "in flight" for as long as a test needs, without timing.
pub struct HeldOrigin {
    pub addr: SocketAddr,
    arrived: Arc<tokio::sync::Notify>,
    release: tokio::sync::watch::Sender<bool>,
}

impl HeldOrigin {
    pub async fn start() -> HeldOrigin {
        let arrived = Arc::new(tokio::sync::Notify::new());
        let (release, _) = tokio::sync::watch::channel(false);
        let (a, rel) = (arrived.clone(), release.clone());
        let addr = serve_tcp(move |stream| {
            let (a, rel) = (a.clone(), rel.clone());
            async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (a, mut released) = (a.clone(), rel.subscribe());
                    async move {
                        let path = req.uri().path().to_string();
                        let body = if path == "/robots.txt" {
                            "User-agent: *\nDisallow: /private\n".to_string()
                        } else {
                            a.notify_one();
                            let _ = released.wait_for(|r| *r).await;
                            format!("released {path}")
                        };
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            }
        })
        .await;
        HeldOrigin {
            addr,
            arrived,
            release,
        }
    }

    /// Waits (bounded) until a held request has reached the origin.
    pub async fn arrival(&self) {
        tokio::time::timeout(Duration::from_secs(10), self.arrived.notified())
            .await
            .expect("no request reached the held origin");
    }

    /// Lets every held request (and all later ones) through.
    pub fn release(&self) {
        self.release.send_replace(true);
    }

    /// GETs `path` here through the proxy at `proxy`, on a connection of
    /// its own, and returns once the request has arrived: it is in flight.
    pub async fn hold(&self, proxy: SocketAddr, path: &str) -> InFlight {
        let url = self.url(path);
        let task = tokio::spawn(async move {
            let mut conn = Conn::open(proxy).await;
            conn.try_send(Request::get(url).body(Bytes::new()).expect("req"))
                .await
        });
        self.arrival().await;
        InFlight(task)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
}

/// A request [`HeldOrigin::hold`] sent.
pub struct InFlight(tokio::task::JoinHandle<Result<Resp, hyper::Error>>);

impl InFlight {
    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
    }

    /// Its response, or the error of a connection closed without one
    /// (bounded wait).
    pub async fn outcome(self) -> Result<Resp, hyper::Error> {
        tokio::time::timeout(NO_HANG, self.0)
            .await
            .expect("the request in flight hangs")
            .expect("request task")
    }
}

/// A listener on `ip` (port 0) that counts the connections it accepts and
/// closes them; `None` if `ip` cannot be bound here.
pub async fn counting_listener(
    ip: &str,
) -> Option<(SocketAddr, Arc<std::sync::atomic::AtomicUsize>)> {
    let listener = TcpListener::bind((ip, 0)).await.ok()?;
    let addr = listener.local_addr().ok()?;
    let accepts: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
    let counter = accepts.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(stream);
        }
    });
    Some((addr, accepts))
}

/// An origin whose first robots.txt fetch is held until the test releases
/// it: `first` is served then, `later` to every fetch after; any other path
/// is a 200 "page". One request a connection.
pub struct HeldRobots {
    pub addr: SocketAddr,
    /// Notified when the first fetch has arrived (and is held).
    pub arrived: std::sync::Arc<tokio::sync::Notify>,
    release: tokio::sync::watch::Sender<bool>,
    fetches: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl HeldRobots {
    pub async fn start(first: &'static str, later: &'static str) -> HeldRobots {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let fetches = Arc::new(AtomicUsize::new(0));
        let arrived = Arc::new(tokio::sync::Notify::new());
        let (release, _) = tokio::sync::watch::channel(false);
        let (f, a, r) = (fetches.clone(), arrived.clone(), release.clone());
        let addr = serve_tcp(move |mut stream| {
            let (f, a, mut released) = (f.clone(), a.clone(), r.subscribe());
            async move {
                let mut buf = vec![0u8; 4096];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                let body = if buf[..n].starts_with(b"GET /robots.txt ") {
                    if f.fetch_add(1, Ordering::SeqCst) == 0 {
                        a.notify_one();
                        let _ = released.wait_for(|r| *r).await;
                        first
                    } else {
                        later
                    }
                } else {
                    "page"
                };
                let _ = stream.write_all(raw::ok_close(body).as_bytes()).await;
            }
        })
        .await;
        HeldRobots {
            addr,
            arrived,
            release,
            fetches,
        }
    }

    /// Lets the first fetch have its answer.
    pub fn release(&self) {
        self.release.send_replace(true);
    }

    /// robots.txt fetches so far.
    pub fn fetches(&self) -> usize {
        self.fetches.load(std::sync::atomic::Ordering::SeqCst)
    }
}
