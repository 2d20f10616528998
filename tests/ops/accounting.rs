//! Every answer the proxy gives is counted once, under the label that says
//! what happened, and every judged request has at most one audit line:
//! the request phases' single exit, over real sockets.

use std::time::Duration;

use bytes::Bytes;
use http::Request;

use crate::support::tls::{proxy_trusting_with, tls_origin_with_robots};
use crate::support::{Origin, Proxy, Reply, admin, garbage_origin, raw, requests_total};

#[tokio::test]
async fn each_answer_is_counted_once_under_its_own_label() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    origin.route("/slow", Reply::ok("late").delay(Duration::from_secs(30)));
    let garbage = garbage_origin().await;
    let proxy = Proxy::start_with(|c| {
        admin(c);
        c.audit.log_all = true;
        c.upstream.response_timeout = Duration::from_millis(300);
    })
    .await;

    // Allowed and forwarded; its Via names this proxy instance.
    let ok = proxy.get(&origin.url("/page")).await;
    assert_eq!(ok.status, 200, "{ok:?}");
    let via = ok.header("via").expect("via on the response").to_string();
    // Disallowed by robots.txt.
    assert_eq!(proxy.get(&origin.url("/private/x")).await.status, 403);
    // The origin sends no HTTP (502) or nothing in time (504).
    let bad = proxy.get(&format!("http://{garbage}/page")).await;
    assert_eq!(bad.status, 502, "{bad:?}");
    let slow = proxy.get(&origin.url("/slow")).await;
    assert_eq!(slow.status, 504, "{slow:?}");
    // Not a request the proxy can judge: no HTTP at all (hyper answers it
    // before the proxy's service sees it), origin form, TRACE, a CONNECT
    // without a port.
    assert_eq!(
        raw::request(proxy.addr, "GARBAGE\r\n\r\n").await.status(),
        400
    );
    assert_eq!(
        raw::request(proxy.addr, "GET /page HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .status(),
        400
    );
    let trace = Request::builder()
        .method("TRACE")
        .uri(origin.url("/page"))
        .body(Bytes::new())
        .expect("request");
    assert_eq!(proxy.request(trace).await.status, 405);
    assert_eq!(
        raw::request(
            proxy.addr,
            "CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n"
        )
        .await
        .status(),
        400
    );
    // Already through this proxy: 508.
    let looped = Request::builder()
        .uri(origin.url("/page"))
        .header("via", via)
        .body(Bytes::new())
        .expect("request");
    assert_eq!(proxy.request(looped).await.status, 508);

    let metrics = proxy.metrics().await;
    for (label, n) in [
        ("allowed", 1.0),
        ("disallowed", 1.0),
        ("upstream_error", 2.0),
        ("bad_request", 4.0),
        ("loop_detected", 1.0),
        ("refused", 0.0),
        ("error", 0.0),
        ("tunnelled", 0.0),
        ("intercepted", 0.0),
    ] {
        assert_eq!(requests_total(&metrics, label), n, "{label}:\n{metrics}");
    }
    // One audit line per judged request (log_all), none for the answers
    // given before anything was judged.
    let audit = proxy.audit();
    let urls: Vec<&str> = audit.iter().filter_map(|l| l["url"].as_str()).collect();
    assert_eq!(audit.len(), 4, "{audit:#?}");
    for path in ["/page", "/private/x", "/slow"] {
        let n = urls.iter().filter(|u| u.ends_with(path)).count();
        assert_eq!(n, if path == "/page" { 2 } else { 1 }, "{path}: {urls:?}");
    }
}

#[tokio::test]
async fn an_intercepted_connect_and_each_request_in_it_count_once() {
    let o = tls_origin_with_robots("localhost", "User-agent: *\nDisallow: /private\n").await;
    let proxy = proxy_trusting_with(&o, |c| {
        admin(c);
        c.audit.log_all = true;
    })
    .await;
    assert_eq!(
        o.get_via(&proxy, "localhost", "/page", false).await.status,
        200
    );
    assert_eq!(
        o.get_via(&proxy, "localhost", "/private/x", true)
            .await
            .status,
        403
    );
    let metrics = proxy.metrics().await;
    assert_eq!(requests_total(&metrics, "intercepted"), 2.0, "{metrics}");
    assert_eq!(requests_total(&metrics, "allowed"), 1.0, "{metrics}");
    assert_eq!(requests_total(&metrics, "disallowed"), 1.0, "{metrics}");
    assert_eq!(requests_total(&metrics, "tunnelled"), 0.0, "{metrics}");
    let audit = proxy.audit();
    assert_eq!(audit.len(), 2, "{audit:#?}");
    assert!(audit.iter().all(|l| l["method"] == "GET"), "{audit:#?}");
}
