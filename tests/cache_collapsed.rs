//! Collapsed forwarding with real sockets: the cache module in front of a
//! slow, counting loopback origin, 20 concurrent requests of one URL.

mod support;

use std::sync::Arc;
use std::time::Duration;

use http::Request;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use robots_proxy::config::{CacheConfig, CacheMode};
use robots_proxy::response_cache::{Lookup, ResponseCache};
use support::{Origin, Reply};

/// The proxy's body type.
type Body = http_body_util::combinators::BoxBody<bytes::Bytes, hyper::Error>;

type Http = Client<hyper_util::client::legacy::connect::HttpConnector, Body>;

fn empty_body() -> Body {
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed()
}

fn cache(dir: &std::path::Path, lock_timeout: Duration) -> ResponseCache {
    let cfg = CacheConfig {
        enabled: true,
        mode: CacheMode::Rfc9111,
        lock_timeout,
        ..CacheConfig::default()
    };
    ResponseCache::open(&cfg.settings(), &dir.join("cache")).expect("open cache")
}

/// One request through the cache to the origin; returns the body and the
/// Cache-Status.
async fn through(cache: &ResponseCache, client: &Http, url: &str) -> (String, String) {
    let parts = Request::get(url).body(()).expect("request").into_parts().0;
    let resp = match cache.lookup(&parts, None).await {
        Lookup::Hit(r) => r,
        Lookup::Miss(p) | Lookup::Revalidate(p) => {
            let mut req = Request::get(url).body(empty_body()).expect("request");
            p.add_conditional_headers(req.headers_mut());
            let upstream = client.request(req).await.expect("origin answers");
            let upstream = upstream.map(|b| b.boxed());
            cache
                .complete(p, upstream)
                .await
                .into_response()
                .expect("no revalidation here")
        }
        other => panic!("{other:?}"),
    };
    let status = resp
        .headers()
        .get("cache-status")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (String::from_utf8_lossy(&body).into_owned(), status)
}

async fn twenty(cache: &ResponseCache, url: &str) -> Vec<(String, String)> {
    let client: Http = Client::builder(TokioExecutor::new()).build_http();
    let client = Arc::new(client);
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (cache, client, url) = (cache.clone(), client.clone(), url.to_string());
        tasks.push(tokio::spawn(
            async move { through(&cache, &client, &url).await },
        ));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_misses_make_one_origin_request() {
    let origin = Origin::start().await;
    origin.route(
        "/slow",
        Reply::ok("the one answer")
            .header("cache-control", "max-age=60")
            .delay(Duration::from_millis(500)),
    );
    let dir = tempfile::tempdir().expect("tmp");
    let cache = cache(dir.path(), Duration::from_secs(5));
    let got = twenty(&cache, &origin.url("/slow")).await;
    assert_eq!(origin.hits("/slow"), 1);
    assert!(got.iter().all(|(b, _)| b == "the one answer"), "{got:?}");
    let leaders = got.iter().filter(|(_, s)| s.contains("stored")).count();
    let collapsed = got
        .iter()
        .filter(|(_, s)| s == "robots-proxy; hit; collapsed")
        .count();
    assert_eq!((leaders, collapsed), (1, 19), "{got:?}");
    assert_eq!(cache.counters().collapsed_waits, 19);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unstorable_answer_sends_the_waiting_requests_to_the_origin() {
    let origin = Origin::start().await;
    origin.route(
        "/private",
        Reply::ok("mine")
            .header("cache-control", "private")
            .delay(Duration::from_millis(300)),
    );
    let dir = tempfile::tempdir().expect("tmp");
    let cache = cache(dir.path(), Duration::from_secs(5));
    let got = twenty(&cache, &origin.url("/private")).await;
    assert_eq!(origin.hits("/private"), 20);
    assert!(got.iter().all(|(b, _)| b == "mine"), "{got:?}");
    assert_eq!(cache.counters().stored, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_go_to_the_origin_after_the_lock_timeout() {
    let origin = Origin::start().await;
    origin.route(
        "/slower",
        Reply::ok("late")
            .header("cache-control", "max-age=60")
            .delay(Duration::from_millis(1500)),
    );
    let dir = tempfile::tempdir().expect("tmp");
    let cache = cache(dir.path(), Duration::from_millis(200));
    let started = std::time::Instant::now();
    let got = twenty(&cache, &origin.url("/slower")).await;
    assert_eq!(origin.hits("/slower"), 20);
    assert!(got.iter().all(|(b, _)| b == "late"), "{got:?}");
    let went = got
        .iter()
        .filter(|(_, s)| s.starts_with("robots-proxy; fwd=miss") && s.contains("collapsed"))
        .count();
    assert_eq!(went, 19, "{got:?}");
    assert!(started.elapsed() < Duration::from_secs(4));
}
