//! The proxy over real sockets: loopback origins, a real client, every
//! branch of the robots.txt status policy.

use std::time::Duration;

use bytes::Bytes;
use http::Request;

use crate::support::raw::until_close;
use crate::support::{Conn, Misbehave, Origin, Proxy, Reply, get_with, misbehaving, skip};

#[tokio::test]
async fn allowed_request_is_forwarded_with_hop_by_hop_headers_removed_and_via_added() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    origin.route(
        "/hello",
        Reply::ok("hi there")
            .header("x-origin", "1")
            .header("keep-alive", "timeout=5"),
    );
    let proxy = Proxy::start().await;
    let req = Request::get(origin.url("/hello"))
        .header("x-client", "c")
        .header("host", "somewhere-else.example")
        .header("proxy-authorization", "Basic Zm9vOmJhcg==")
        .header("connection", "x-drop-me")
        .header("x-drop-me", "1")
        .body(Bytes::new())
        .expect("req");
    let resp = proxy.request(req).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, "hi there");
    assert_eq!(resp.header("x-origin"), Some("1"));
    assert!(resp.header("keep-alive").is_none());
    assert!(
        resp.header("via")
            .is_some_and(|v| v.contains("robots-proxy"))
    );
    let seen = origin
        .seen_headers
        .lock()
        .expect("seen")
        .last()
        .cloned()
        .expect("request seen");
    assert_eq!(seen.get("x-client").map(|v| v.as_bytes()), Some(&b"c"[..]));
    assert!(seen.get("proxy-authorization").is_none());
    assert!(seen.get("x-drop-me").is_none());
    assert!(seen.get("via").is_some());
    // The absolute URI is authoritative for Host.
    assert_eq!(
        seen.get("host").and_then(|v| v.to_str().ok()),
        Some(origin.addr.to_string().as_str())
    );
}

#[tokio::test]
async fn disallowed_request_gets_403_with_rule_and_never_reaches_origin() {
    let origin = Origin::with_robots("# comment\nUser-agent: *\nDisallow: /private\n").await;
    let proxy = Proxy::start().await;
    let resp = proxy.get(&origin.url("/private/data?x=1")).await;
    assert_eq!(resp.status, 403);
    assert!(
        resp.body.contains("line 3: Disallow: /private"),
        "{}",
        resp.body
    );
    assert!(resp.body.contains(&origin.url("/private/data?x=1")));
    assert!(resp.body.contains(&origin.url("/robots.txt")));
    assert!(resp.body.contains("robots-proxy"));
    let header = resp
        .header("x-robots-proxy-decision")
        .expect("decision header");
    assert!(header.starts_with("disallowed"), "{header}");
    assert!(header.contains("line 3: Disallow: /private"), "{header}");
    assert_eq!(origin.hits("/private/data?x=1"), 0);
    // The audit line says the same thing.
    let line = proxy.only_audit_line();
    assert_eq!(line["decision"], "disallowed");
    assert_eq!(line["method"], "GET");
    assert_eq!(line["url"], origin.url("/private/data?x=1"));
    assert_eq!(line["agent"], "robots-proxy");
    assert_eq!(line["rule_line"], 3);
    assert_eq!(line["rule"], "Disallow: /private");
    assert_eq!(line["robots_url"], origin.url("/robots.txt"));
    assert_eq!(line["fetch_status"], 200);
    assert_eq!(line["fetch_outcome"], "ok");
    assert!(
        line["client"]
            .as_str()
            .is_some_and(|c| c.starts_with("127.0.0.1:"))
    );
    assert!(line["time"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert!(line["cache_age_secs"].is_u64());
}

#[tokio::test]
async fn robots_txt_itself_is_always_allowed() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /\n").await;
    let proxy = Proxy::start().await;
    assert_eq!(proxy.get(&origin.url("/robots.txt")).await.status, 200);
    assert_eq!(proxy.get(&origin.url("/x")).await.status, 403);
}

#[tokio::test]
async fn configured_agent_selects_its_group() {
    let origin =
        Origin::with_robots("User-agent: *\nDisallow: /\n\nUser-agent: goodbot\nAllow: /\n").await;
    let proxy = Proxy::start_with(|c| c.agent = "GoodBot/1.0".into()).await;
    assert_eq!(proxy.get(&origin.url("/page")).await.status, 200);
    let other = Proxy::start().await;
    assert_eq!(other.get(&origin.url("/page")).await.status, 403);
}

#[tokio::test]
async fn client_user_agent_mapping_selects_the_mapped_group() {
    let origin =
        Origin::with_robots("User-agent: *\nAllow: /\n\nUser-agent: strictbot\nDisallow: /\n")
            .await;
    let proxy = Proxy::start_with(|c| {
        c.agents
            .insert("python-requests".into(), "strictbot".into());
    })
    .await;
    let req = |ua: &str| get_with(&origin.url("/page"), &[("user-agent", ua)]);
    assert_eq!(proxy.request(req("python-requests/2.31")).await.status, 403);
    assert_eq!(proxy.request(req("curl/8.0")).await.status, 200);
}

#[tokio::test]
async fn robots_4xx_means_allow_all() {
    for status in [401, 403, 404, 410] {
        let origin = Origin::with_robots_reply(Reply::status(status)).await;
        let proxy = Proxy::start().await;
        let resp = proxy.get(&origin.url("/anything")).await;
        assert_eq!(resp.status, 200, "robots.txt {status}");
    }
}

#[tokio::test]
async fn robots_429_and_5xx_mean_disallow_all_with_503_and_retry_after() {
    for status in [429, 500, 502, 503] {
        let origin = Origin::with_robots_reply(Reply::status(status)).await;
        let proxy = Proxy::start().await;
        let resp = proxy.get(&origin.url("/anything")).await;
        assert_eq!(resp.status, 503, "robots.txt {status}");
        assert!(resp.header("retry-after").is_some());
        assert!(resp.body.contains(&status.to_string()), "{}", resp.body);
        assert_eq!(origin.hits("/anything"), 0);
        let audit = proxy.audit();
        assert_eq!(audit[0]["decision"], "unreachable");
        assert_eq!(audit[0]["fetch_status"], status);
    }
}

/// `/robots.txt` → `/r1` → … → `/real-robots.txt`: `hops` redirects.
fn redirect_chain(origin: &Origin, hops: usize) {
    for i in 0..hops {
        let from = match i {
            0 => "/robots.txt".to_string(),
            _ => format!("/r{i}"),
        };
        let next = if i + 1 == hops {
            "/real-robots.txt".to_string()
        } else {
            format!("/r{}", i + 1)
        };
        origin.route(&from, Reply::redirect(&next));
    }
}

/// An origin whose robots.txt is `robots` at the end of `hops` redirects.
async fn redirected(hops: usize, robots: &str) -> Origin {
    let origin = Origin::start().await;
    redirect_chain(&origin, hops);
    origin.route("/real-robots.txt", Reply::ok(robots.to_owned()));
    origin
}

#[tokio::test]
async fn five_redirects_are_followed_and_rules_apply_to_the_first_origin() {
    let origin = redirected(5, "User-agent: *\nDisallow: /blocked\n").await;
    let proxy = Proxy::start().await;
    assert_eq!(proxy.get(&origin.url("/blocked")).await.status, 403);
    assert_eq!(proxy.get(&origin.url("/open")).await.status, 200);
}

#[tokio::test]
async fn six_redirects_are_too_many_and_mean_allow_all() {
    let origin = redirected(6, "User-agent: *\nDisallow: /\n").await;
    let proxy = Proxy::start().await;
    assert_eq!(proxy.get(&origin.url("/blocked")).await.status, 200);
    assert_eq!(origin.hits("/real-robots.txt"), 0);
}

#[tokio::test]
async fn cross_host_redirect_rules_apply_to_the_original_origin() {
    let rules_host = Origin::start().await;
    rules_host.route(
        "/shared-robots.txt",
        Reply::ok("User-agent: *\nDisallow: /secret\n"),
    );
    let origin =
        Origin::with_robots_reply(Reply::redirect(&rules_host.url("/shared-robots.txt"))).await;
    let proxy = Proxy::start().await;
    assert_eq!(proxy.get(&origin.url("/secret")).await.status, 403);
    assert_eq!(origin.hits("/secret"), 0);
    // The rules host's own robots.txt is a different origin: not affected.
    assert_eq!(proxy.get(&rules_host.url("/secret")).await.status, 200);
}

#[tokio::test]
async fn concurrent_first_requests_share_one_robots_fetch() {
    let origin = Origin::with_robots_reply(
        Reply::ok("User-agent: *\nDisallow: /no\n").delay(Duration::from_millis(300)),
    )
    .await;
    let proxy = std::sync::Arc::new(Proxy::start().await);
    let mut tasks = Vec::new();
    for i in 0..50 {
        let proxy = proxy.clone();
        let url = origin.url(&format!("/page{i}"));
        tasks.push(tokio::spawn(async move { proxy.get(&url).await.status }));
    }
    for t in tasks {
        assert_eq!(t.await.expect("task"), 200);
    }
    assert_eq!(origin.hits("/robots.txt"), 1);
}

/// An origin whose robots.txt (`Disallow: /a`) says `Cache-Control:
/// max-age=<max_age>`, and a proxy that keeps a robots.txt at least
/// `min_ttl`, which has judged `/a` by it (403).
async fn judged_with_max_age(max_age: u32, min_ttl: Duration) -> (Origin, Proxy) {
    let max_age = format!("max-age={max_age}");
    let robots = Reply::ok("User-agent: *\nDisallow: /a\n").header("cache-control", &max_age);
    let origin = Origin::with_robots_reply(robots).await;
    let proxy = Proxy::start_with(|c| c.robots.min_ttl = min_ttl).await;
    assert_eq!(proxy.get(&origin.url("/a")).await.status, 403);
    (origin, proxy)
}

#[tokio::test]
async fn cached_robots_is_reused_then_refetched_after_max_age() {
    let (origin, proxy) = judged_with_max_age(1, Duration::from_millis(100)).await;
    assert_eq!(proxy.get(&origin.url("/b")).await.status, 200);
    assert_eq!(origin.hits("/robots.txt"), 1);
    origin.route("/robots.txt", Reply::ok("User-agent: *\nDisallow: /b\n"));
    skip(Duration::from_secs(1)).await;
    assert_eq!(proxy.get(&origin.url("/a")).await.status, 200);
    assert_eq!(proxy.get(&origin.url("/b")).await.status, 403);
    assert_eq!(origin.hits("/robots.txt"), 2);
}

#[tokio::test]
async fn max_age_is_clamped_to_the_configured_floor() {
    let (origin, proxy) = judged_with_max_age(0, Duration::from_secs(60)).await;
    for _ in 0..2 {
        assert_eq!(proxy.get(&origin.url("/a")).await.status, 403);
    }
    assert_eq!(origin.hits("/robots.txt"), 1);
}

#[tokio::test]
async fn default_ttl_applies_without_max_age() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /a\n").await;
    let proxy = Proxy::start_with(|c| {
        c.robots.default_ttl = Duration::from_millis(300);
        c.robots.min_ttl = Duration::from_millis(1);
    })
    .await;
    assert_eq!(proxy.get(&origin.url("/a")).await.status, 403);
    skip(Duration::from_millis(300)).await;
    assert_eq!(proxy.get(&origin.url("/a")).await.status, 403);
    assert_eq!(origin.hits("/robots.txt"), 2);
}

#[tokio::test]
async fn stale_copy_is_used_while_the_origin_errors() {
    let (origin, proxy) = judged_with_max_age(1, Duration::from_millis(100)).await;
    origin.route("/robots.txt", Reply::status(503));
    skip(Duration::from_secs(1)).await;
    // Still the old rules, not disallow-all.
    assert_eq!(proxy.get(&origin.url("/b")).await.status, 200);
    let resp = proxy.get(&origin.url("/a")).await;
    assert_eq!(resp.status, 403);
    assert_eq!(origin.hits("/robots.txt"), 2);
    let audit = proxy.audit();
    assert_eq!(audit.last().expect("line")["fetch_outcome"], "stale");
    assert_eq!(audit.last().expect("line")["fetch_status"], 503);
}

#[tokio::test]
async fn unreachable_origin_is_retried_after_the_configured_interval() {
    let origin = Origin::with_robots_reply(Reply::status(500)).await;
    let proxy =
        Proxy::start_with(|c| c.robots.unreachable_retry = Duration::from_millis(300)).await;
    assert_eq!(proxy.get(&origin.url("/x")).await.status, 503);
    assert_eq!(proxy.get(&origin.url("/x")).await.status, 503);
    assert_eq!(origin.hits("/robots.txt"), 1);
    origin.robots("User-agent: *\nDisallow:\n");
    skip(Duration::from_millis(300)).await;
    assert_eq!(proxy.get(&origin.url("/x")).await.status, 200);
    assert_eq!(origin.hits("/robots.txt"), 2);
}

#[tokio::test]
async fn robots_larger_than_500_kib_is_read_up_to_the_cap() {
    let origin = Origin::start().await;
    let mut text = String::from("User-agent: *\nDisallow: /early\n");
    while text.len() < 600 * 1024 {
        text.push_str("# filler filler filler filler filler filler filler filler\n");
    }
    text.push_str("Disallow: /late\n");
    origin.robots(&text);
    let proxy = Proxy::start().await;
    assert_eq!(proxy.get(&origin.url("/early")).await.status, 403);
    assert_eq!(proxy.get(&origin.url("/late")).await.status, 200);
}

#[tokio::test]
async fn html_robots_is_read_leniently() {
    let origin = Origin::with_robots_reply(
        Reply::ok("<!DOCTYPE html>\n<html><body>\n<h1>Not found</h1>\n</body></html>\n")
            .header("content-type", "text/html"),
    )
    .await;
    let proxy = Proxy::start().await;
    assert_eq!(proxy.get(&origin.url("/page")).await.status, 200);
}

#[tokio::test]
async fn hanging_robots_fetch_times_out_to_disallow_all() {
    let addr = misbehaving(Misbehave::Hang).await;
    let proxy = Proxy::start_with(|c| c.robots.fetch_timeout = Duration::from_millis(300)).await;
    let resp = proxy.get(&format!("http://{addr}/x")).await;
    assert_eq!(resp.status, 503);
    assert!(resp.body.contains("timed out"), "{}", resp.body);
}

#[tokio::test]
async fn reset_and_garbage_robots_mean_disallow_all() {
    for behaviour in [Misbehave::Reset, Misbehave::Garbage] {
        let addr = misbehaving(behaviour).await;
        let proxy = Proxy::start().await;
        let resp = proxy.get(&format!("http://{addr}/x")).await;
        assert_eq!(resp.status, 503);
    }
}

#[tokio::test]
async fn upstream_that_hangs_after_robots_gives_504() {
    let origin = Origin::with_robots("User-agent: *\nDisallow:\n").await;
    origin.route("/slow", Reply::ok("late").delay(Duration::from_secs(5)));
    let proxy =
        Proxy::start_with(|c| c.upstream.response_timeout = Duration::from_millis(300)).await;
    let resp = proxy.get(&origin.url("/slow")).await;
    assert_eq!(resp.status, 504);
}

#[tokio::test]
async fn upstream_connection_failure_gives_502_with_reason() {
    // Robots from a 4xx-free origin is impossible on a closed port, so use a
    // path whose robots fetch is allowed: the cache hook inserts rules.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let proxy = Proxy::start().await;
    // robots.txt itself is always allowed, so the request is forwarded and fails.
    let resp = proxy.get(&format!("http://{addr}/robots.txt")).await;
    assert_eq!(resp.status, 502);
    assert!(resp.body.contains("Upstream error"), "{}", resp.body);
}

#[tokio::test]
async fn private_destinations_are_refused_by_default() {
    let origin = Origin::with_robots("User-agent: *\nDisallow:\n").await;
    let proxy = Proxy::start_with(|c| c.allow_private_destinations = false).await;
    let resp = proxy.get(&origin.url("/x")).await;
    assert_eq!(resp.status, 403);
    assert!(resp.body.contains("private"), "{}", resp.body);
    assert_eq!(origin.hits("/robots.txt"), 0);
    assert_eq!(origin.hits("/x"), 0);
    // A name that resolves to loopback is refused too.
    let resp = proxy
        .get(&format!("http://localhost:{}/x", origin.addr.port()))
        .await;
    assert_eq!(resp.status, 403, "{}", resp.body);
    assert_eq!(origin.hits("/x"), 0);
}

#[tokio::test]
async fn origin_form_request_to_the_proxy_is_a_400() {
    let proxy = Proxy::start().await;
    let resp = proxy
        .request(
            Request::get("/just-a-path")
                .header("host", "x")
                .body(Bytes::new())
                .expect("req"),
        )
        .await;
    assert_eq!(resp.status, 400);
}

#[tokio::test]
async fn unsupported_scheme_is_a_400() {
    let proxy = Proxy::start().await;
    let resp = proxy.get("ftp://example.com/file").await;
    assert_eq!(resp.status, 400);
}

#[tokio::test]
async fn malformed_request_line_is_a_400() {
    let proxy = Proxy::start().await;
    let text = until_close(proxy.addr, "GARBAGE\r\n\r\n").await.text;
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
}

#[tokio::test]
async fn request_looping_through_the_proxy_is_refused() {
    let proxy = Proxy::start().await;
    // Forwarding to the proxy itself: the second pass sees its own Via.
    let url = format!("http://{}/robots.txt", proxy.addr);
    let resp = proxy.get(&url).await;
    // Refused by the destination policy before anything is sent: the
    // proxy's own listener is never a destination (were it let through,
    // the inner request would arrive origin-form, 400, or as a loop, 508).
    assert_eq!(resp.status, 403, "{}", resp.body);
    assert!(
        resp.body.contains("refused by destination policy")
            && resp.body.contains("this proxy's own listener"),
        "{}",
        resp.body
    );
}

#[tokio::test]
async fn keep_alive_serves_several_requests_on_one_connection() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /no\n").await;
    let proxy = Proxy::start().await;
    let mut conn = Conn::open(proxy.addr).await;
    for (path, status) in [("/a", 200), ("/no", 403), ("/b", 200)] {
        assert_eq!(conn.get(&origin.url(path)).await.status, status);
    }
    // One connection fetched robots.txt; the two forwarded requests shared
    // one more, back in the pool after each response.
    let connections = || origin.connections.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(connections(), 2);
    // Other clients' requests, one at a time, reuse it too.
    drop(conn);
    for path in ["/c", "/d"] {
        assert_eq!(proxy.get(&origin.url(path)).await.status, 200);
    }
    assert_eq!(connections(), 2);
}

#[tokio::test]
async fn request_body_is_streamed_to_the_origin() {
    let origin = Origin::with_robots("User-agent: *\nDisallow:\n").await;
    let proxy = Proxy::start().await;
    let body = Bytes::from(vec![b'x'; 3 * 1024 * 1024]);
    let resp = proxy
        .request(
            Request::post(origin.url("/upload"))
                .body(body)
                .expect("req"),
        )
        .await;
    assert_eq!(resp.status, 200);
    assert_eq!(origin.hits("/upload"), 1);
}

#[tokio::test]
async fn audit_log_failure_fails_closed() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /no\n").await;
    let proxy = Proxy::start_with(|c| {
        c.audit.path = Some("/dev/full".into());
        c.audit.log_all = true;
    })
    .await;
    let resp = proxy.get(&origin.url("/yes")).await;
    assert_eq!(resp.status, 503, "{}", resp.body);
    assert_eq!(origin.hits("/yes"), 0);
}

#[tokio::test]
async fn log_all_records_allowed_requests_too() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /yes\nDisallow: /\n").await;
    let proxy = Proxy::start_with(|c| c.audit.log_all = true).await;
    assert_eq!(proxy.get(&origin.url("/yes")).await.status, 200);
    let line = proxy.only_audit_line();
    assert_eq!(line["decision"], "allowed");
    assert_eq!(line["rule"], "Allow: /yes");
}

/// A host written with its trailing dot is the same origin as without:
/// robots.txt and the request itself reach the origin with one `Host`.
#[tokio::test]
async fn a_trailing_dot_host_is_sent_as_the_origin_it_names() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let proxy = Proxy::start().await;
    let port = origin.addr.port();
    let url = format!("http://localhost.:{port}/page");
    let req = http::Request::get(&url)
        .header("host", format!("localhost.:{port}"))
        .body(bytes::Bytes::new())
        .expect("request");
    let resp = proxy.request(req).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert_eq!(origin.hits("/robots.txt"), 1);
    assert_eq!(origin.hits("/page"), 1);
    let hosts: Vec<String> = origin
        .seen_headers
        .lock()
        .expect("seen")
        .iter()
        .map(|h| {
            h.get_all("host")
                .iter()
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect();
    assert_eq!(
        hosts,
        [format!("localhost:{port}"), format!("localhost:{port}")]
    );
}
