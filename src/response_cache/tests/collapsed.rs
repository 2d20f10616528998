//! Collapsed forwarding with real sockets: the cache module in front of a
//! slow, counting loopback origin, 20 concurrent requests of one URL.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use super::config;
use crate::http::body::{Body, empty_body};
use crate::response_cache::{CacheMode, CacheSettings, Lookup, ResponseCache};

type Http = Client<hyper_util::client::legacy::connect::HttpConnector, Body>;

/// A loopback origin answering `path` with `body` and `Cache-Control:
/// cache_control` after `delay`, counting the requests of every path.
struct Origin {
    addr: SocketAddr,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl Origin {
    async fn start(
        path: &'static str,
        body: &'static str,
        cache_control: &'static str,
        delay: Duration,
    ) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
        let addr = listener.local_addr().expect("addr");
        let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counted = counted.clone();
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let seen = req.uri().path().to_string();
                    *counted
                        .lock()
                        .expect("hits")
                        .entry(seen.clone())
                        .or_default() += 1;
                    async move {
                        tokio::time::sleep(delay).await;
                        let mut resp =
                            Response::new(Full::new(Bytes::from_static(if seen == path {
                                body.as_bytes()
                            } else {
                                b""
                            })));
                        if seen == path {
                            resp.headers_mut().insert(
                                http::header::CACHE_CONTROL,
                                http::HeaderValue::from_static(cache_control),
                            );
                        } else {
                            *resp.status_mut() = http::StatusCode::NOT_FOUND;
                        }
                        Ok::<_, Infallible>(resp)
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc),
                );
            }
        });
        Origin { addr, hits }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn hits(&self, path: &str) -> usize {
        self.hits
            .lock()
            .expect("hits")
            .get(path)
            .copied()
            .unwrap_or(0)
    }
}

fn cache(dir: &std::path::Path, lock_timeout: Duration) -> ResponseCache {
    let cfg = CacheSettings {
        lock_timeout,
        ..config(CacheMode::Rfc9111)
    };
    ResponseCache::open(&cfg, &dir.join("cache")).expect("open cache")
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
            let upstream = upstream.map(crate::http::body::incoming);
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
    let origin = Origin::start(
        "/slow",
        "the one answer",
        "max-age=60",
        Duration::from_millis(500),
    )
    .await;
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
    let origin = Origin::start("/private", "mine", "private", Duration::from_millis(300)).await;
    let dir = tempfile::tempdir().expect("tmp");
    let cache = cache(dir.path(), Duration::from_secs(5));
    let got = twenty(&cache, &origin.url("/private")).await;
    assert_eq!(origin.hits("/private"), 20);
    assert!(got.iter().all(|(b, _)| b == "mine"), "{got:?}");
    assert_eq!(cache.counters().stored, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_go_to_the_origin_after_the_lock_timeout() {
    let origin = Origin::start("/slower", "late", "max-age=60", Duration::from_millis(1500)).await;
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
