//! Shared test servers: loopback origins with counters, misbehaving raw
//! TCP servers, a proxy started on port 0, and a proxy-aware client.
//!
//! Every test binary but `robots` includes this module
//! (`#[path = "../support/mod.rs"] mod support;` in its main.rs).
// Each binary uses a part of it; what one does not use is not dead code.
#![allow(dead_code)]

pub mod binary;
pub mod events;
pub mod faulty;
pub mod nginx;
pub mod tls;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use robots_proxy::App;
use robots_proxy::config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// Generous upper bound for anything that must merely not hang.
pub const NO_HANG: Duration = Duration::from_secs(15);

/// What an origin answers for a path.
#[derive(Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub delay: Duration,
    /// Answered instead to a request with If-None-Match.
    pub conditional: Option<Box<Reply>>,
}

impl Reply {
    pub fn ok(body: impl Into<Bytes>) -> Reply {
        Reply {
            status: 200,
            headers: Vec::new(),
            body: body.into(),
            delay: Duration::ZERO,
            conditional: None,
        }
    }
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Bytes::new(),
            delay: Duration::ZERO,
            conditional: None,
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
    hits: Arc<Mutex<HashMap<String, usize>>>,
    pub seen_headers: Arc<Mutex<Vec<http::HeaderMap>>>,
    /// HTTP version of every request seen.
    pub versions: Arc<Mutex<Vec<http::Version>>>,
    /// Connections accepted.
    pub connections: Arc<std::sync::atomic::AtomicUsize>,
}

impl Origin {
    pub async fn start() -> Origin {
        Origin::start_inner(None).await
    }

    /// An HTTPS origin (HTTP/1.1 and HTTP/2 by ALPN) with `config`.
    pub async fn start_tls(config: Arc<rustls::ServerConfig>) -> Origin {
        Origin::start_inner(Some(tokio_rustls::TlsAcceptor::from(config))).await
    }

    async fn start_inner(tls: Option<tokio_rustls::TlsAcceptor>) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
        let addr = listener.local_addr().expect("addr");
        let routes: Arc<Mutex<HashMap<String, Reply>>> = Arc::default();
        let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let seen: Arc<Mutex<Vec<http::HeaderMap>>> = Arc::default();
        let versions: Arc<Mutex<Vec<http::Version>>> = Arc::default();
        let (r, h, s) = (routes.clone(), hits.clone(), seen.clone());
        let v = versions.clone();
        let connections: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let accepted = connections.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (r, h, s) = (r.clone(), h.clone(), s.clone());
                let v = v.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let (r, h, s) = (r.clone(), h.clone(), s.clone());
                        v.lock().expect("versions").push(req.version());
                        async move {
                            let key = req
                                .uri()
                                .path_and_query()
                                .map(|p| p.as_str().to_string())
                                .unwrap_or_default();
                            *h.lock().expect("hits").entry(key.clone()).or_default() += 1;
                            s.lock().expect("seen").push(req.headers().clone());
                            let reply = {
                                let routes = r.lock().expect("routes");
                                routes
                                    .get(&key)
                                    .or_else(|| routes.get(req.uri().path()))
                                    .cloned()
                            };
                            let conditional = req.headers().contains_key("if-none-match");
                            let _ = req.into_body().collect().await;
                            let mut reply =
                                reply.unwrap_or_else(|| Reply::ok(format!("page {key}")));
                            if let Some(c) = reply.conditional.take().filter(|_| conditional) {
                                reply = *c;
                            }
                            if !reply.delay.is_zero() {
                                tokio::time::sleep(reply.delay).await;
                            }
                            let mut resp = Response::new(Full::new(reply.body.clone()));
                            *resp.status_mut() =
                                StatusCode::from_u16(reply.status).expect("status");
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
                });
            }
        });
        Origin {
            addr,
            routes,
            hits,
            seen_headers: seen,
            versions,
            connections,
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
        self.hits
            .lock()
            .expect("hits")
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn https_url(&self, path: &str) -> String {
        format!("https://{}{}", self.addr, path)
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
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                match behaviour {
                    Misbehave::Hang => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
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
            });
        }
    });
    addr
}

/// A running proxy.
pub struct Proxy {
    pub addr: SocketAddr,
    /// The admin listener, when `config.admin.listen` was set.
    pub admin_addr: Option<SocketAddr>,
    pub audit_path: PathBuf,
    /// State directory (the CA is in `ca/`).
    pub state_dir: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    pub done: tokio::task::JoinHandle<usize>,
    _dir: tempfile::TempDir,
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

    pub async fn start_with(adjust: impl FnOnce(&mut Config)) -> Proxy {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = test_config(dir.path());
        adjust(&mut config);
        let audit_path = config.audit_path();
        let state_dir = config.state_dir();
        let app = App::bind(config).await.expect("proxy starts");
        let addr = app.local_addr();
        let admin_addr = app.admin_addr();
        let (tx, rx) = oneshot::channel::<()>();
        let done = tokio::spawn(app.serve(async move {
            let _ = rx.await;
        }));
        Proxy {
            addr,
            admin_addr,
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

    /// Audit lines as JSON values.
    pub fn audit(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.audit_path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
            .collect()
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
}

/// One client connection (HTTP/1.1 keep-alive) for several requests in turn.
pub struct Conn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    /// The connection task; it ends when the connection closes.
    pub task: tokio::task::JoinHandle<Result<(), hyper::Error>>,
}

impl Conn {
    pub async fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).await.expect("connect");
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
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
}

/// The value of one Prometheus sample line (`name{labels} value`), if present.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
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
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
        let addr = listener.local_addr().expect("addr");
        let arrived = Arc::new(tokio::sync::Notify::new());
        let (release, _) = tokio::sync::watch::channel(false);
        let (a, rel) = (arrived.clone(), release.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (a, rel) = (a.clone(), rel.clone());
                tokio::spawn(async move {
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
                });
            }
        });
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

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
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
