//! HTTP/2 inside intercepted tunnels cannot make the proxy open more
//! upstream connections than a client's share: streams per tunnel are
//! capped (`max_streams_per_tunnel`) and requests in flight per client
//! address too (`max_requests_per_client`). The origin speaks HTTP/1.1
//! only over TLS and answers slowly, so every request in flight towards it
//! needs a connection of its own.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use robots_proxy::config::Config;
use rustls_pki_types::ServerName;

use crate::support;
use crate::support::tls::origin_config;
use crate::support::{NO_HANG, Origin, Proxy, Reply};

/// An HTTPS origin for `localhost` that offers HTTP/1.1 only, answering
/// `/slow` after a while; and the PEM file of its CA.
async fn slow_h1_origin(dir: &std::path::Path) -> (Origin, std::path::PathBuf) {
    let (config, ca_file) = origin_config("localhost", dir);
    let mut config = (*config).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let origin = Origin::start_tls(Arc::new(config)).await;
    origin.robots("User-agent: *\nAllow: /\n");
    origin.route("/slow", Reply::ok("slow").delay(Duration::from_millis(300)));
    (origin, ca_file)
}

/// An HTTP/2 connection inside an intercepted tunnel to `localhost:port`.
async fn h2_tunnel(
    proxy: &Proxy,
    port: u16,
) -> hyper::client::conn::http2::SendRequest<Full<Bytes>> {
    let tunnel = support::tls::connect(proxy, &format!("localhost:{port}"))
        .await
        .expect("tunnel");
    let name = ServerName::try_from("localhost").expect("name");
    let tls = support::tls::proxy_tls(proxy, tunnel, name, b"h2").await;
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(tls),
    )
    .await
    .expect("h2 handshake");
    tokio::spawn(conn);
    sender
}

async fn get(mut sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>, url: String) -> u16 {
    let req = Request::get(url)
        .body(Full::new(Bytes::new()))
        .expect("req");
    let resp = sender.send_request(req).await.expect("response");
    let status = resp.status().as_u16();
    resp.into_body().collect().await.expect("body");
    status
}

/// Sends `streams` concurrent GETs of `/slow` on each of `tunnels` HTTP/2
/// tunnels (after one GET per tunnel, which also brings the proxy's
/// SETTINGS); returns the connections the origin accepted.
async fn flood(proxy: &Proxy, origin: &Origin, tunnels: usize, streams: usize) -> usize {
    let port = origin.addr.port();
    let url = format!("https://localhost:{port}/slow");
    let mut senders = Vec::new();
    for _ in 0..tunnels {
        let sender = h2_tunnel(proxy, port).await;
        assert_eq!(get(sender.clone(), url.clone()).await, 200);
        senders.push(sender);
    }
    let mut all = tokio::task::JoinSet::new();
    for sender in &senders {
        for _ in 0..streams {
            all.spawn(get(sender.clone(), url.clone()));
        }
    }
    let statuses = tokio::time::timeout(NO_HANG, all.join_all())
        .await
        .expect("all answered");
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    origin.connections.load(Ordering::SeqCst)
}

/// The slow origin, and a proxy trusting it whose requests wait for a
/// slot up to 60 s (then get 429), with `adjust` applied.
async fn slow_origin_and_proxy(
    dir: &std::path::Path,
    adjust: impl FnOnce(&mut Config),
) -> (Origin, Proxy) {
    let (origin, ca_file) = slow_h1_origin(dir).await;
    let proxy = Proxy::start_with(move |c| {
        c.upstream.ca_files = vec![ca_file];
        c.upstream.response_timeout = Duration::from_secs(60);
        adjust(c);
    })
    .await;
    (origin, proxy)
}

#[tokio::test]
async fn a_client_cannot_hold_more_upstream_connections_than_its_share() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (origin, proxy) =
        slow_origin_and_proxy(dir.path(), |c| c.max_requests_per_client = 4).await;
    let connections = flood(&proxy, &origin, 2, 20).await;
    // robots.txt's own connection, then at most 4 at once, reused.
    assert!(connections <= 1 + 4, "{connections} upstream connections");
}

#[tokio::test]
async fn streams_per_tunnel_are_capped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (origin, proxy) = slow_origin_and_proxy(dir.path(), |c| {
        c.max_requests_per_client = 1000;
        c.max_streams_per_tunnel = 3;
    })
    .await;
    let connections = flood(&proxy, &origin, 1, 12).await;
    assert!(connections <= 1 + 3, "{connections} upstream connections");
}
