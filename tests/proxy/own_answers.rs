//! Every answer the proxy makes itself carries `Cache-Control: no-store`,
//! so a scraper's HTTP cache never keeps one as the page.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::{Origin, Proxy, Reply, Resp};

/// An origin that allows everything (404 for robots.txt) and answers every
/// other request with bytes that are not HTTP.
async fn garbage_origin() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]);
                let answer: &[u8] = if head.starts_with("GET /robots.txt") {
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                } else {
                    b"this is not HTTP\r\n\r\n"
                };
                let _ = s.write_all(answer).await;
            });
        }
    });
    addr
}

fn assert_no_store(resp: &Resp, status: u16, what: &str) {
    assert_eq!(resp.status, status, "{what}: {}", resp.body);
    assert_eq!(
        resp.header("cache-control"),
        Some("no-store"),
        "{what} ({status})"
    );
}

#[tokio::test]
async fn every_answer_the_proxy_makes_is_no_store() {
    let origin = Origin::start().await;
    origin.robots("User-agent: *\nDisallow: /private\n");
    origin.route("/slow", Reply::ok("late").delay(Duration::from_secs(5)));
    let down = Origin::start().await;
    down.route("/robots.txt", Reply::status(500));
    let garbage = garbage_origin().await;
    let proxy = Proxy::start_with(|c| {
        c.upstream.response_timeout = Duration::from_millis(300);
    })
    .await;

    assert_no_store(
        &proxy.get(&origin.url("/private/x")).await,
        403,
        "disallowed",
    );
    assert_no_store(
        &proxy.get(&down.url("/x")).await,
        503,
        "robots.txt unreachable",
    );
    assert_no_store(
        &proxy.get(&format!("http://{garbage}/x")).await,
        502,
        "upstream error",
    );
    assert_no_store(
        &proxy.get(&origin.url("/slow")).await,
        504,
        "upstream timeout",
    );
    let origin_form = Request::get("/x").body(Bytes::new()).expect("request");
    assert_no_store(&proxy.request(origin_form).await, 400, "origin-form");
    let trace = Request::builder()
        .method("TRACE")
        .uri(origin.url("/x"))
        .body(Bytes::new())
        .expect("request");
    assert_no_store(&proxy.request(trace).await, 405, "TRACE");

    // A request that already went through this proxy: 508.
    let ok = proxy.get(&origin.url("/page")).await;
    assert_eq!(ok.status, 200);
    let via = ok.header("via").expect("via").to_string();
    let looped = Request::get(origin.url("/page"))
        .header("via", via)
        .body(Bytes::new())
        .expect("request");
    assert_no_store(&proxy.request(looped).await, 508, "loop");
    // The origin's own answers are passed on as they are.
    assert_eq!(ok.header("cache-control"), None);
}
