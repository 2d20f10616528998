//! An origin that answers with `100 Continue` without end: the proxy gives
//! up after `upstream.max_informational` of them (502 for a forwarded
//! request, robots.txt unreachable for a fetch), long before any timeout.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::raw::ok_close;
use crate::support::{NO_HANG, Proxy, serve_tcp};

/// Longer than the test's bound: without the cap, requests would wait this long.
const LONG: Duration = Duration::from_secs(120);

/// An origin serving an allow-all robots.txt (unless `flood_robots`) and
/// answering every other request with up to 10,000 `100 Continue`s and
/// nothing more (it stops when the proxy hangs up).
async fn flooding_origin(flood_robots: bool) -> SocketAddr {
    serve_tcp(move |stream| serve(stream, flood_robots)).await
}

async fn serve(mut stream: TcpStream, flood_robots: bool) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    if buf.starts_with(b"GET /robots.txt ") && !flood_robots {
        let robots = ok_close("User-agent: *\nAllow: /\n");
        let _ = stream.write_all(robots.as_bytes()).await;
        return;
    }
    for _ in 0..10_000 {
        if stream
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
    }
    // Then silence until the proxy leaves.
    while let Ok(n) = stream.read(&mut chunk).await {
        if n == 0 {
            return;
        }
    }
}

async fn proxy() -> Proxy {
    Proxy::start_with(|c| {
        c.upstream.response_timeout = LONG;
        c.robots.fetch_timeout = LONG;
    })
    .await
}

#[tokio::test]
async fn a_flood_of_100_continue_is_a_502() {
    let origin = flooding_origin(false).await;
    let proxy = proxy().await;
    // Without a body: the plain-http pool.
    let url = format!("http://{origin}/page");
    // Each answered 502 without waiting for response_timeout.
    let refused = async |case: &str, req: Request<Bytes>, says: &str| {
        let resp = tokio::time::timeout(NO_HANG, proxy.request(req))
            .await
            .unwrap_or_else(|_| panic!("{case}: waited for response_timeout"));
        resp.assert_says(case, 502, &[says]);
    };
    let get = Request::get(&url).body(Bytes::new()).expect("request");
    refused("a GET", get, "more than 10 informational").await;
    // With a body: the pooled client.
    let post = Request::post(&url)
        .body(Bytes::from_static(b"form=1"))
        .expect("request");
    refused("a POST", post, "informational").await;
    // A WebSocket upgrade: a connection of its own.
    let upgrade = Request::get(&url)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .body(Bytes::new())
        .expect("request");
    refused("an upgrade", upgrade, "informational").await;
}

#[tokio::test]
async fn a_robots_txt_answered_with_a_flood_of_100_continue_is_unreachable() {
    let origin = flooding_origin(true).await;
    let proxy = proxy().await;
    let resp = tokio::time::timeout(NO_HANG, proxy.get(&format!("http://{origin}/page")))
        .await
        .expect("answered without waiting for robots.fetch_timeout");
    assert_eq!(resp.status, 503, "{}", resp.body);
    assert!(resp.body.contains("informational"), "{}", resp.body);
}
