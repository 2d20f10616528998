//! The in-task pool towards `https` origins, over real loopback TLS:
//! HTTP/1.1 connections reused, HTTP/2 origins answered and remembered,
//! certificate failures told as the pooled client tells them, and a TLS
//! connection the origin closed while idle replaced.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_rustls::TlsAcceptor;

use super::Pool;
use crate::http::body::{Body, empty_body, full_body};
use crate::http::origin::{Origin, Scheme};
use crate::tls::{Ca, Minter};
use crate::upstream::{ClientSettings, ErrorKind, UpstreamError, build_client};

/// A test CA's server config for 127.0.0.1 offering `alpn`, and the
/// upstream TLS configuration trusting that CA (built-in roots and the CA
/// as an extra file, as `--upstream-ca` gives it).
fn tls_pair(alpn: &[&[u8]]) -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let ca = Ca::generate().expect("CA");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).expect("write CA");
    let (client, _) =
        crate::upstream::tls::client_config_with(&[ca_file], false).expect("client config");
    let minter = Minter::new(ca, 4).expect("minter");
    let mut server = (*minter.server_config("127.0.0.1").expect("server config")).clone();
    server.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    (Arc::new(server), Arc::new(client))
}

/// An HTTPS origin on loopback (HTTP/1.1 or HTTP/2, as ALPN chose) that
/// answers with the request's target, counting the connections it
/// accepts and noting each request's version.
struct TlsOrigin {
    origin: Origin,
    connections: Arc<AtomicUsize>,
    versions: Arc<Mutex<Vec<Version>>>,
}

async fn tls_origin(server: Arc<rustls::ServerConfig>) -> TlsOrigin {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let connections = Arc::new(AtomicUsize::new(0));
    let versions: Arc<Mutex<Vec<Version>>> = Arc::default();
    let (counter, seen) = (connections.clone(), versions.clone());
    let acceptor = TlsAcceptor::from(server);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    seen.lock().expect("versions").push(req.version());
                    let host = req
                        .headers()
                        .get(http::header::HOST)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("-")
                        .to_owned();
                    let text = format!("{} {host}", req.uri().path());
                    async move { Ok::<_, hyper::Error>(Response::new(full_body(text))) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    TlsOrigin {
        origin: Origin::new(Scheme::Https, "127.0.0.1", Some(port)).expect("origin"),
        connections,
        versions,
    }
}

fn settings() -> ClientSettings {
    ClientSettings {
        policy: crate::http::destination::Policy::new(true),
        connect_timeout: Duration::from_secs(5),
        pool_idle_per_host: 4,
        pool_idle_max: 64,
        pool_idle_timeout: Duration::from_secs(60),
    }
}

fn get(origin: &Origin, path: &str) -> Request<Body> {
    Request::get(path)
        .header(http::header::HOST, origin.authority())
        .body(empty_body())
        .expect("request")
}

/// Sends a GET for `path`; the answer's version and body.
async fn fetch(pool: &Arc<Pool>, origin: &Origin, path: &str) -> (Version, String) {
    let resp = pool
        .send(origin, get(origin, path))
        .await
        .expect("response");
    let version = resp.version();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (version, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn an_http1_tls_origin_is_answered_over_one_reused_connection() {
    let (server, client) = tls_pair(&[b"http/1.1"]);
    let o = tls_origin(server).await;
    let pool = Pool::new(settings(), client);
    for path in ["/a", "/b", "/c"] {
        let (version, body) = fetch(&pool, &o.origin, path).await;
        assert_eq!(version, Version::HTTP_11);
        assert_eq!(body, format!("{path} {}", o.origin.authority()));
        assert_eq!(pool.idle_count(), 1);
    }
    assert_eq!(o.connections.load(Ordering::SeqCst), 1);
    assert!(!pool.speaks_h2(&o.origin));
    // An origin that offers no ALPN at all speaks HTTP/1.1 too.
    let (server, client) = tls_pair(&[]);
    let o = tls_origin(server).await;
    let pool = Pool::new(settings(), client);
    for path in ["/a", "/b"] {
        assert_eq!(fetch(&pool, &o.origin, path).await.0, Version::HTTP_11);
    }
    assert_eq!(o.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_h2_origin_is_answered_over_h2_and_remembered() {
    let (server, client) = tls_pair(&[b"h2", b"http/1.1"]);
    let o = tls_origin(server).await;
    let pool = Pool::new(settings(), client);
    assert!(!pool.speaks_h2(&o.origin));
    let (version, body) = fetch(&pool, &o.origin, "/h2").await;
    assert_eq!(version, Version::HTTP_2);
    // No Host over HTTP/2: the origin reads the authority from the target.
    assert_eq!(body, "/h2 -");
    assert_eq!(*o.versions.lock().expect("versions"), [Version::HTTP_2]);
    assert!(pool.speaks_h2(&o.origin));
    // Nothing of it is kept idle here: the pooled client takes it from now.
    assert_eq!(pool.idle_count(), 0);
}

/// The 502 reason for an untrusted certificate is the pooled client's,
/// word for word.
#[tokio::test]
async fn an_untrusted_certificate_fails_as_with_the_pooled_client() {
    let (server, _) = tls_pair(&[b"http/1.1"]);
    let o = tls_origin(server).await;
    let (untrusting, _) = crate::upstream::tls::client_config_with(&[], false).expect("config");
    let untrusting = Arc::new(untrusting);
    let pool = Pool::new(settings(), untrusting.clone());
    let Err(ours) = pool.send(&o.origin, get(&o.origin, "/x")).await else {
        panic!("an untrusted origin answered");
    };
    let client = build_client(&settings(), untrusting);
    let uri: http::Uri = format!("{}/x", o.origin).parse().expect("uri");
    let Err(theirs) = client.get(uri).await else {
        panic!("an untrusted origin answered the pooled client");
    };
    let theirs = UpstreamError::new(theirs, "127.0.0.1");
    assert_eq!(ours.kind(), ErrorKind::Tls);
    assert_eq!(ours.kind(), theirs.kind());
    assert_eq!(ours.reason(), theirs.reason());
    assert!(
        ours.reason()
            .starts_with("certificate not trusted: UnknownIssuer for host 127.0.0.1"),
        "{}",
        ours.reason()
    );
    assert!(!pool.speaks_h2(&o.origin));
}

/// An origin that answers each connection's first request as keep-alive,
/// then closes it (close_notify, then FIN) once the answer is read: the
/// idle connection is found closed and a new one takes the next request.
#[tokio::test]
async fn a_tls_connection_the_origin_closed_while_idle_is_replaced() {
    let (server, client) = tls_pair(&[b"http/1.1"]);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = connections.clone();
    let closed = Arc::new(Notify::new());
    let closing = closed.clone();
    let acceptor = TlsAcceptor::from(server);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let Ok(mut tls) = acceptor.accept(tcp).await else {
                continue;
            };
            let mut head = Vec::new();
            let mut chunk = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match tls.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&chunk[..n]),
                }
            }
            let _ = tls
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await;
            let _ = tls.shutdown().await;
            drop(tls);
            closing.notify_one();
        }
    });
    let origin = Origin::new(Scheme::Https, "127.0.0.1", Some(port)).expect("origin");
    let pool = Pool::new(settings(), client);
    for round in 1..=3 {
        assert_eq!(
            fetch(&pool, &origin, "/x").await,
            (Version::HTTP_11, "ok".into())
        );
        assert_eq!(pool.idle_count(), 1);
        closed.notified().await;
        // Wait until the close has reached this side's socket.
        let conn = pool.take(&origin).expect("the connection is idle");
        conn.stream
            .tcp()
            .readable()
            .await
            .expect("the close arrives");
        pool.put(conn);
        assert_eq!(connections.load(Ordering::SeqCst), round);
    }
}

/// An origin that accepts the connection and never answers the TLS
/// handshake: the connect timeout bounds the handshake too.
#[tokio::test(start_paused = true)]
async fn the_connect_timeout_bounds_the_tls_handshake() {
    let (_, client) = tls_pair(&[b"http/1.1"]);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    let origin = Origin::new(Scheme::Https, "127.0.0.1", Some(port)).expect("origin");
    let pool = Pool::new(settings(), client);
    let Err(e) = pool.send(&origin, get(&origin, "/")).await else {
        panic!("a silent origin answered");
    };
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert_eq!(e.reason(), "connection to 127.0.0.1 timed out");
}
