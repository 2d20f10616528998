//! Hostile clients: tunnels that idle or trickle, clients outside the
//! allow-list, one address opening many connections, the admin listener
//! flooded. Each must not lock other clients out; shutdown drains
//! intercepted tunnels like plain connections.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::client::TlsStream;

use crate::support::binary::{NO_HANG, Setup};
use crate::support::raw::until_closed;
use crate::support::tls::{
    TlsOrigin, ca_cert, connect, connect_to, origin_config, proxy_ca, proxy_trusting_with,
    tls_origin, tls_trusting,
};
use crate::support::{Conn, Origin, Proxy, admin, get_with, metric, serve_tcp, until};

/// The small timeouts these tests configure.
const TIMEOUT: Duration = Duration::from_millis(300);

/// How long a check that fails without its fix waits before failing.
const SHORT: Duration = Duration::from_secs(5);

/// A connection to `addr` from the loopback address `ip` (any of 127/8).
async fn connect_from(ip: &str, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(format!("{ip}:0").parse().expect("source address"))
        .expect("bind source address");
    socket.connect(addr).await.expect("connect")
}

/// Asserts the server closes `stream` without sending a single byte, even
/// with a whole request written to it.
async fn assert_closed_unanswered(mut stream: TcpStream) {
    let _ = stream
        .write_all(b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
        .await;
    let mut answer = Vec::new();
    match tokio::time::timeout(SHORT, stream.read_to_end(&mut answer)).await {
        Ok(Ok(_)) => assert!(
            answer.is_empty(),
            "answered: {}",
            String::from_utf8_lossy(&answer)
        ),
        Ok(Err(e)) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
        Err(_) => panic!("connection still open after {SHORT:?}"),
    }
}

/// Waits until the peer closes `io` (EOF or error), bounded.
async fn wait_closed(io: &mut (impl AsyncRead + Unpin)) {
    let closed = tokio::time::timeout(SHORT, until_closed(io)).await;
    assert!(closed.is_ok(), "still open after {SHORT:?}");
}

/// Writes one header line every `every` until the peer closes the
/// connection (as seen by a failed write or a read of EOF): a client
/// trickling headers it never finishes.
async fn trickle<IO: AsyncRead + AsyncWrite>(io: IO, every: Duration) {
    let (mut reader, mut writer) = tokio::io::split(io);
    let _ = writer.write_all(b"GET / HTTP/1.1\r\n").await;
    let mut tick = tokio::time::interval(every);
    let mut buf = [0u8; 256];
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if writer.write_all(b"X-Trickle: 1\r\n").await.is_err() {
                    return;
                }
            }
            read = reader.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }
}

/// TLS over `stream` (a tunnel just opened) to `host`, trusting `ca`,
/// offering `alpn`.
async fn tls_over(
    stream: TcpStream,
    ca: CertificateDer<'static>,
    host: &str,
    alpn: &[u8],
) -> TlsStream<TcpStream> {
    let name = ServerName::try_from(host.to_string()).expect("server name");
    tls_trusting(stream, ca, name, alpn).await
}

/// A fresh client's GET through the proxy: the time it took to be served.
async fn time_to_serve(proxy: &Proxy, url: &str) -> Duration {
    let start = Instant::now();
    let resp = tokio::time::timeout(SHORT, proxy.get(url))
        .await
        .expect("a fresh client is not served: locked out");
    assert_eq!(resp.status, 200, "{resp:?}");
    start.elapsed()
}

/// A TLS origin named `host`, a plain origin for a fresh client, a proxy
/// trusting the first with `slots` connections at most (`adjust` applied),
/// and the tunnel target `host:port`.
async fn slots_to_hold(
    host: &str,
    slots: usize,
    adjust: impl FnOnce(&mut robots_proxy::config::Config),
) -> (TlsOrigin, Origin, Proxy, String) {
    let o = tls_origin(host).await;
    let plain = Origin::start().await;
    let proxy = proxy_trusting_with(&o, |c| {
        c.max_connections = slots;
        adjust(c);
    })
    .await;
    let target = format!("{host}:{}", o.origin.addr.port());
    (o, plain, proxy, target)
}

// ---------------------------------------------------------------------------
// Tunnels time out
// ---------------------------------------------------------------------------

/// Idle blind tunnels holding every slot are closed after
/// `tunnel_idle_timeout` (both sides), and a fresh client is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_blind_tunnels_are_closed_and_a_fresh_client_is_served() {
    let (o, plain, proxy, target) = slots_to_hold("localhost", 2, |c| {
        c.tunnel_idle_timeout = TIMEOUT;
        c.tls.no_intercept = vec!["localhost".into()];
    })
    .await;
    // Silent from the start.
    let mut silent = connect(&proxy, &target).await.expect("tunnel");
    // One request to the origin itself (TLS end to end), then silence.
    let tunnel = connect(&proxy, &target).await.expect("tunnel");
    let ca = ca_cert(&o.ca_file);
    let tls = tls_over(tunnel, ca, "localhost", b"http/1.1").await;
    let mut through = Conn::over(tls).await;
    let resp = through
        .send(get_with("/through", &[("host", &target)]))
        .await;
    assert_eq!(resp.status, 200);
    assert_eq!(o.origin.hits("/through"), 1);

    let took = time_to_serve(&proxy, &plain.url("/fresh")).await;
    eprintln!("fresh client served after {took:?} with every slot held by idle blind tunnels");
    wait_closed(&mut silent).await;
    let closed = tokio::time::timeout(SHORT, through.task)
        .await
        .expect("idle blind tunnel still open")
        .expect("connection task");
    // Closed under the TLS session: no close_notify from the origin.
    drop(closed);
}

/// Intercepted tunnels holding every slot, one silent before its TLS
/// handshake, one trickling HTTP/1.1 headers, one idle HTTP/2 connection,
/// are closed after `client_header_timeout`, and a fresh client is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_trickling_intercepted_tunnels_are_closed_and_a_fresh_client_is_served() {
    let (o, plain, proxy, target) =
        slots_to_hold("127.0.0.1", 3, |c| c.client_header_timeout = TIMEOUT).await;

    // Silent: CONNECT, then not a byte.
    let mut silent = connect(&proxy, &target).await.expect("tunnel");
    // Trickling: TLS, then a header line every 100 ms, never the end.
    let tunnel = connect(&proxy, &target).await.expect("tunnel");
    let tls = tls_over(tunnel, proxy_ca(&proxy), "127.0.0.1", b"http/1.1").await;
    let trickling = tokio::spawn(trickle(tls, Duration::from_millis(100)));
    // HTTP/2, one request, then idle.
    let tunnel = connect(&proxy, &target).await.expect("tunnel");
    let tls = tls_over(tunnel, proxy_ca(&proxy), "127.0.0.1", b"h2").await;
    let (mut sender, h2) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(tls),
    )
    .await
    .expect("h2 handshake");
    let h2 = tokio::spawn(h2);
    let resp = sender
        .send_request(
            Request::get(o.origin.https_url("/h2"))
                .body(Full::new(Bytes::new()))
                .expect("req"),
        )
        .await
        .expect("h2 response");
    assert_eq!(resp.status(), 200);
    resp.into_body().collect().await.expect("h2 body");

    let took = time_to_serve(&proxy, &plain.url("/fresh")).await;
    eprintln!(
        "fresh client served after {took:?} with every slot held by idle/trickling intercepted tunnels"
    );
    wait_closed(&mut silent).await;
    tokio::time::timeout(SHORT, trickling)
        .await
        .expect("trickling tunnel still open")
        .expect("trickle task");
    tokio::time::timeout(SHORT, h2)
        .await
        .expect("idle HTTP/2 tunnel still open")
        .expect("h2 task")
        .expect("HTTP/2 connection closed cleanly (GOAWAY)");
}

// ---------------------------------------------------------------------------
// SIGTERM drains intercepted tunnels
// ---------------------------------------------------------------------------

/// Size of the download the origin streams, in 64 KiB chunks.
const CHUNKS: usize = 64;
const CHUNK: usize = 64 * 1024;

/// An HTTPS origin for `127.0.0.1` whose `/big` sends one chunk, then the
/// rest once released; `/robots.txt` is 404 (everything allowed).
struct StreamingOrigin {
    addr: SocketAddr,
    ca_file: PathBuf,
    release: tokio::sync::watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

async fn streaming_origin() -> StreamingOrigin {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, ca_file) = origin_config("127.0.0.1", dir.path());
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let (release, _) = tokio::sync::watch::channel(false);
    let released = release.clone();
    let addr = serve_tcp(move |stream| {
        let (acceptor, released) = (acceptor.clone(), released.clone());
        async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                let released = released.subscribe();
                async move {
                    if req.uri().path() != "/big" {
                        let mut resp = Response::new(
                            Full::new(Bytes::new())
                                .map_err(|never| match never {})
                                .boxed(),
                        );
                        *resp.status_mut() = http::StatusCode::NOT_FOUND;
                        return Ok::<_, Infallible>(resp);
                    }
                    let chunks = futures_util::stream::unfold(
                        (0usize, released),
                        |(i, mut released)| async move {
                            if i == CHUNKS {
                                return None;
                            }
                            if i == 1 {
                                released.wait_for(|r| *r).await.ok()?;
                            }
                            let frame = Frame::data(Bytes::from(vec![b'x'; CHUNK]));
                            Some((Ok::<_, Infallible>(frame), (i + 1, released)))
                        },
                    );
                    let mut resp = Response::new(StreamBody::new(chunks).boxed());
                    resp.headers_mut().insert(
                        http::header::CONTENT_LENGTH,
                        (CHUNKS * CHUNK).to_string().parse().expect("length"),
                    );
                    Ok(resp)
                }
            });
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
        }
    })
    .await;
    StreamingOrigin {
        addr,
        ca_file,
        release,
        _dir: dir,
    }
}

/// SIGTERM during an intercepted HTTPS download: the download completes
/// within `shutdown_grace`, then the proxy exits 0 without cutting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_an_intercepted_https_download_finish() {
    let origin = streaming_origin().await;
    let setup = Setup::with_config(
        "bot",
        &format!(
            "[upstream]\nca_files = [{:?}]\n",
            origin.ca_file.display().to_string()
        ),
    );
    let mut proxy = setup.start().await;

    let target = format!("127.0.0.1:{}", origin.addr.port());
    let tunnel = connect_to(proxy.addr, &target)
        .await
        .unwrap_or_else(|head| panic!("{head}"));
    let ca = ca_cert(&setup.dir.path().join("ca/ca.pem"));
    let tls = tls_over(tunnel, ca, "127.0.0.1", b"http/1.1").await;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let resp = sender
        .send_request(
            Request::get("/big")
                .header("host", &target)
                .body(Full::new(Bytes::new()))
                .expect("req"),
        )
        .await
        .expect("response head");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut received = 0;
    // The first chunk arrived: the download is under way.
    while received < CHUNK {
        let frame = body.frame().await.expect("frame").expect("first chunk");
        received += frame.data_ref().map_or(0, |d| d.len());
    }

    proxy.signal("TERM");
    proxy.wait_for("shutting down").await;
    // The proxy either waits for the tunnel or has already stopped.
    loop {
        let line = proxy.wait_for("").await;
        if line.contains("waiting for open connections") || line.contains("stopped") {
            break;
        }
    }
    origin.release.send_replace(true);
    let rest = tokio::time::timeout(NO_HANG, body.collect())
        .await
        .expect("download hangs")
        .expect("download cut by the shutdown");
    received += rest.to_bytes().len();
    assert_eq!(received, CHUNKS * CHUNK);

    let status = proxy.wait_exit().await;
    assert!(status.success(), "{status:?}");
    let log = proxy.rest_of_stderr().await.join("\n");
    assert!(log.contains("stopped"), "{log}");
    assert!(!log.contains("grace period over"), "{log}");
}

// ---------------------------------------------------------------------------
// Admission at accept
// ---------------------------------------------------------------------------

/// Clients outside `access.allow_clients` are closed at accept without a
/// byte of answer, so however many there are, an allowed client is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_clients_are_closed_at_accept_and_an_allowed_one_is_served() {
    let origin = Origin::start().await;
    let proxy = Proxy::start_with(|c| {
        c.max_connections = 4;
        c.access.allow_clients = vec!["127.0.0.2/32".parse().expect("net")];
        admin(c);
    })
    .await;
    // Ten refused clients trickling headers they never finish.
    let mut refused = Vec::new();
    for _ in 0..10 {
        let mut s = connect_from("127.0.0.1", proxy.addr).await;
        let _ = s.write_all(b"GET http://example.com/ HTTP/1.1\r\n").await;
        refused.push(s);
    }
    let allowed = connect_from("127.0.0.2", proxy.addr).await;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(allowed))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let resp = tokio::time::timeout(
        SHORT,
        sender.send_request(
            Request::get(origin.url("/allowed"))
                .body(Full::new(Bytes::new()))
                .expect("req"),
        ),
    )
    .await
    .expect("the allowed client is locked out")
    .expect("response");
    assert_eq!(resp.status(), 200);
    for s in refused {
        assert_closed_unanswered(s).await;
    }
    let metrics = proxy.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "robots_proxy_connections_refused_total{listener=\"proxy\",reason=\"not_allowed\"}"
        ),
        Some(10.0),
        "{metrics}"
    );
    assert_eq!(origin.hits("/allowed"), 1);
}

/// Sends a request on a new connection to `addr` until one is answered
/// (earlier ones may still be refused while the server notices closed
/// connections); bounded. The status and body.
async fn served_eventually(addr: SocketAddr, ip: &str, url: &str) -> (u16, String) {
    until(&format!("{ip} to be served"), || async {
        let mut conn = Conn::over(connect_from(ip, addr).await).await;
        let req = get_with(url, &[("host", &addr.to_string())]);
        match conn.try_send(req).await {
            Ok(resp) => Ok((resp.status, resp.body)),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
}

/// One address may hold `max_connections_per_client` connections; more
/// are closed at accept, other addresses are still served, and a closed
/// connection gives its place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_per_client_limit_are_closed_at_accept() {
    let origin = Origin::start().await;
    let proxy = Proxy::start_with(|c| {
        c.max_connections = 16;
        c.max_connections_per_client = 2;
        admin(c);
    })
    .await;
    // Slowloris from 127.0.0.3: two connections trickling headers.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = connect_from("127.0.0.3", proxy.addr).await;
        s.write_all(b"GET http://example.com/ HTTP/1.1\r\n")
            .await
            .expect("write");
        held.push(s);
    }
    let third = connect_from("127.0.0.3", proxy.addr).await;
    assert_closed_unanswered(third).await;
    // Another address is served.
    let mut other = Conn::open(proxy.addr).await;
    assert_eq!(other.get(&origin.url("/other")).await.status, 200);
    let metrics = proxy.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "robots_proxy_connections_refused_total{listener=\"proxy\",reason=\"per_client_limit\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    // One of them leaves: the address may connect again.
    drop(held.pop());
    assert_eq!(
        served_eventually(proxy.addr, "127.0.0.3", &origin.url("/again"))
            .await
            .0,
        200
    );
}

// ---------------------------------------------------------------------------
// The admin listener
// ---------------------------------------------------------------------------

/// `admin.allow_clients` (loopback by default) is checked at accept.
#[tokio::test]
async fn admin_clients_outside_its_allow_list_are_closed_at_accept() {
    let proxy = Proxy::start_with(|c| {
        admin(c);
        c.admin.allow_clients = vec!["127.0.0.5/32".parse().expect("net")];
    })
    .await;
    let admin = proxy.admin_addr.expect("admin");
    assert_closed_unanswered(connect_from("127.0.0.1", admin).await).await;
    let (status, metrics) = served_eventually(admin, "127.0.0.5", "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(
        metric(
            &metrics,
            "robots_proxy_connections_refused_total{listener=\"admin\",reason=\"not_allowed\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
}

/// Beyond `admin.max_connections` open admin connections, new ones are
/// closed at accept; once one closes, the admin listener serves again.
#[tokio::test]
async fn admin_connections_beyond_its_limit_are_closed_at_accept() {
    let proxy = Proxy::start_with(|c| {
        admin(c);
        c.admin.max_connections = 2;
    })
    .await;
    let admin = proxy.admin_addr.expect("admin");
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(admin).await.expect("connect");
        s.write_all(b"GET /metrics HTTP/1.1\r\n")
            .await
            .expect("write");
        held.push(s);
    }
    assert_closed_unanswered(TcpStream::connect(admin).await.expect("connect")).await;
    drop(held.pop());
    let (status, metrics) = served_eventually(admin, "127.0.0.1", "/metrics").await;
    assert_eq!(status, 200);
    // The refused one, and any retries of served_eventually.
    let refused = metric(
        &metrics,
        "robots_proxy_connections_refused_total{listener=\"admin\",reason=\"connection_limit\"}",
    );
    assert!(refused.is_some_and(|n| n >= 1.0), "{metrics}");
}

/// The admin listener has the header timeout: a client trickling an
/// unfinished request is closed after `client_header_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_connections_get_the_header_timeout() {
    let proxy = Proxy::start_with(|c| {
        admin(c);
        c.client_header_timeout = TIMEOUT;
    })
    .await;
    let admin = proxy.admin_addr.expect("admin");
    let stream = TcpStream::connect(admin).await.expect("connect");
    tokio::time::timeout(SHORT, trickle(stream, Duration::from_millis(100)))
        .await
        .expect("a trickling admin client is never closed");
    assert_eq!(proxy.admin_get("/healthz").await.status, 200);
}

/// On shutdown an idle intercepted tunnel is closed at once, and a blind
/// tunnel is kept until the grace period ends, then closed (and counted
/// among the connections cut).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_idle_intercepted_tunnels_at_once_and_blind_ones_when_the_grace_ends() {
    let pinned = tls_origin("localhost").await;
    let o = tls_origin("127.0.0.1").await;
    let ca_files = vec![pinned.ca_file.clone(), o.ca_file.clone()];
    let mut proxy = Proxy::start_with(|c| {
        c.shutdown_grace = TIMEOUT;
        c.tls.no_intercept = vec!["localhost".into()];
        c.upstream.ca_files = ca_files;
    })
    .await;
    let mut blind = connect(&proxy, &format!("localhost:{}", pinned.origin.addr.port()))
        .await
        .expect("tunnel");
    let port = o.origin.addr.port();
    let tunnel = connect(&proxy, &format!("127.0.0.1:{port}"))
        .await
        .expect("tunnel");
    let tls = tls_over(tunnel, proxy_ca(&proxy), "127.0.0.1", b"http/1.1").await;
    let mut intercepted = Conn::over(tls).await;
    let host = format!("127.0.0.1:{port}");
    let resp = intercepted
        .send(get_with("/before", &[("host", &host)]))
        .await;
    assert_eq!(resp.status, 200);

    proxy.stop();
    tokio::time::timeout(SHORT, intercepted.task)
        .await
        .expect("idle intercepted tunnel left open during shutdown")
        .expect("connection task")
        .expect("closed cleanly");
    let cut = tokio::time::timeout(SHORT, &mut proxy.done)
        .await
        .expect("shutdown never ends")
        .expect("serve task");
    assert_eq!(cut, 1, "the blind tunnel is cut when the grace ends");
    wait_closed(&mut blind).await;
}
