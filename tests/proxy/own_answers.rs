//! Every answer the proxy makes itself carries `Cache-Control: no-store`,
//! so a scraper's HTTP cache never keeps one as the page.

use std::time::Duration;

use bytes::Bytes;
use http::Request;

use crate::support::{Origin, Proxy, Reply, Resp, garbage_origin};

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
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    origin.route("/slow", Reply::ok("late").delay(Duration::from_secs(5)));
    let down = Origin::with_robots_reply(Reply::status(500)).await;
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
