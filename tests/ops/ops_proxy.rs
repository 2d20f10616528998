//! Operations features of the in-process proxy over real loopback sockets:
//! the admin listener, Crawl-delay politeness, proxy authentication, the
//! client ACL and graceful shutdown.

use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use http::Request;
use robots_proxy::config::{PasswordParams, PolitenessMode, UserConfig, hash_password_with};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Conn, HeldOrigin, Origin, Proxy, metric};

/// Generous upper bound for anything that must merely not hang.
const NO_HANG: Duration = Duration::from_secs(10);

async fn with_admin() -> Proxy {
    Proxy::start_with(|c| c.admin.listen = Some("127.0.0.1:0".parse().expect("addr"))).await
}

fn requests(text: &str, decision: &str) -> f64 {
    metric(
        text,
        &format!("robots_proxy_requests_total{{decision=\"{decision}\"}}"),
    )
    .unwrap_or_else(|| panic!("no requests_total for {decision} in:\n{text}"))
}

fn cache_events(text: &str, event: &str) -> f64 {
    metric(
        text,
        &format!("robots_proxy_robots_cache_events_total{{event=\"{event}\"}}"),
    )
    .unwrap_or_else(|| panic!("no cache event {event} in:\n{text}"))
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn percent(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

// ---------------------------------------------------------------------------
// Admin listener
// ---------------------------------------------------------------------------

#[tokio::test]
async fn admin_healthz_and_readyz_answer_200() {
    let proxy = with_admin().await;
    let health = proxy.admin_get("/healthz").await;
    assert_eq!(health.status, 200, "{health:?}");
    assert_eq!(health.body, "ok\n");
    let ready = proxy.admin_get("/readyz").await;
    assert_eq!(ready.status, 200, "{ready:?}");
    assert_eq!(ready.body, "ready\n");
}

#[tokio::test]
async fn admin_unknown_path_is_404_wrong_method_405_and_bad_parameters_400() {
    let proxy = with_admin().await;
    let unknown = proxy.admin_get("/nope").await;
    assert_eq!(unknown.status, 404, "{unknown:?}");
    assert!(unknown.body.contains("/explain"), "{}", unknown.body);
    assert_eq!(
        proxy.admin_get("/purge?origin=http://a.test").await.status,
        405
    );
    assert_eq!(proxy.admin_post("/metrics").await.status, 405);
    for path in [
        "/explain",
        "/explain?url=",
        "/explain?url=not%20a%20url",
        "/explain?url=ftp%3A%2F%2Fexample.com%2F",
        "/explain?url=http%3A%2F%2Fexample.com%2F&agent=%2F%2F",
    ] {
        let r = proxy.admin_get(path).await;
        assert_eq!(r.status, 400, "{path}: {r:?}");
        assert!(json(&r.body)["error"].is_string(), "{path}: {}", r.body);
    }
    for path in ["/purge", "/purge?origin=%3A%2F%2F"] {
        let r = proxy.admin_post(path).await;
        assert_eq!(r.status, 400, "{path}: {r:?}");
        assert!(json(&r.body)["error"].is_string(), "{path}: {}", r.body);
    }
}

#[tokio::test]
async fn admin_metrics_count_decisions_fetches_cache_events_latency_and_connections() {
    let origin = Origin::start().await;
    origin.robots("User-agent: *\nDisallow: /private\n");
    let proxy = with_admin().await;

    let before = proxy.admin_get("/metrics").await;
    assert_eq!(before.status, 200);
    assert!(
        before
            .header("content-type")
            .is_some_and(|c| c.contains("text/plain") || c.contains("openmetrics")),
        "{:?}",
        before.headers
    );
    let before = before.body;
    assert_eq!(requests(&before, "allowed"), 0.0);
    assert_eq!(requests(&before, "disallowed"), 0.0);
    assert_eq!(
        metric(&before, "robots_proxy_robots_cache_entries"),
        Some(0.0)
    );

    assert_eq!(proxy.get(&origin.url("/public")).await.status, 200);
    assert_eq!(proxy.get(&origin.url("/private/x")).await.status, 403);

    // A client connection held open shows in the gauge.
    let mut held = Conn::open(proxy.addr).await;
    assert_eq!(held.get(&origin.url("/public2")).await.status, 200);

    let after = proxy.admin_get("/metrics").await.body;
    assert_eq!(requests(&after, "allowed"), 2.0, "{after}");
    assert_eq!(requests(&after, "disallowed"), 1.0, "{after}");
    assert_eq!(requests(&after, "rate_limited"), 0.0, "{after}");
    assert_eq!(
        metric(
            &after,
            "robots_proxy_robots_fetches_total{outcome=\"ok\",status_class=\"2xx\"}"
        ),
        Some(1.0),
        "{after}"
    );
    assert_eq!(origin.hits("/robots.txt"), 1);
    assert_eq!(cache_events(&after, "miss"), 1.0, "{after}");
    assert_eq!(cache_events(&after, "hit"), 2.0, "{after}");
    assert_eq!(
        metric(&after, "robots_proxy_robots_cache_entries"),
        Some(1.0),
        "{after}"
    );
    // Only forwarded requests are timed upstream.
    assert_eq!(
        metric(&after, "robots_proxy_upstream_latency_seconds_count"),
        Some(2.0),
        "{after}"
    );
    assert!(
        after.contains("robots_proxy_upstream_latency_seconds_bucket{le=\""),
        "{after}"
    );
    let open = metric(&after, "robots_proxy_open_connections").expect("open connections gauge");
    assert!(open >= 1.0, "held connection not counted: {after}");

    // Once every client connection is closed the gauge returns to 0
    // (earlier connections close asynchronously: poll, bounded).
    drop(held);
    let deadline = Instant::now() + NO_HANG;
    loop {
        let text = proxy.admin_get("/metrics").await.body;
        if metric(&text, "robots_proxy_open_connections") == Some(0.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "connections never closed: {text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn admin_explain_fetches_robots_once_names_the_rule_and_selects_the_agent_group() {
    let origin = Origin::start().await;
    origin.robots(
        "User-agent: *\nDisallow: /private\nCrawl-delay: 3\n\nUser-agent: friendlybot\nAllow: /private\n",
    );
    let proxy = with_admin().await;
    let url = origin.url("/private/page?q=1");

    let r = proxy
        .admin_get(&format!("/explain?url={}", percent(&url)))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("application/json"))
    );
    let j = json(&r.body);
    assert_eq!(j["decision"], "disallowed", "{j:#}");
    assert_eq!(j["agent"], "robots-proxy", "default agent: {j:#}");
    assert_eq!(j["robots_url"], origin.url("/robots.txt"), "{j:#}");
    assert_eq!(j["fetch_status"], 200, "{j:#}");
    assert_eq!(j["rule_line"], 2, "{j:#}");
    assert_eq!(j["rule"], "Disallow: /private", "{j:#}");
    assert_eq!(j["crawl_delay"], 3.0, "{j:#}");
    assert_eq!(origin.hits("/robots.txt"), 1, "explain fetches robots.txt");
    assert_eq!(
        origin.hits("/private/page?q=1"),
        0,
        "explain never forwards"
    );

    let r = proxy
        .admin_get(&format!(
            "/explain?url={}&agent={}",
            percent(&url),
            percent("FriendlyBot/2.0 (+https://friendly.test)")
        ))
        .await;
    let j = json(&r.body);
    assert_eq!(j["agent"], "friendlybot", "{j:#}");
    assert_eq!(j["decision"], "allowed", "{j:#}");
    assert_eq!(j["rule_line"], 6, "{j:#}");
    assert_eq!(j["rule"], "Allow: /private", "{j:#}");
    assert!(j["crawl_delay"].is_null(), "{j:#}");
    // The cache keeps only the rules of the agents the proxy judges as;
    // another agent's question fetches once, then has its own entry.
    assert_eq!(
        origin.hits("/robots.txt"),
        2,
        "another agent fetches its own copy"
    );
    let again = proxy
        .admin_get(&format!("/explain?url={}&agent=friendlybot", percent(&url)))
        .await;
    assert_eq!(json(&again.body)["decision"], "allowed");
    let r = proxy
        .admin_get(&format!("/explain?url={}", percent(&url)))
        .await;
    assert_eq!(json(&r.body)["decision"], "disallowed");
    assert_eq!(
        origin.hits("/robots.txt"),
        2,
        "repeated explains use the cache"
    );
    assert_eq!(origin.hits("/private/page?q=1"), 0);
}

#[tokio::test]
async fn admin_purge_drops_the_cached_robots_so_the_next_request_refetches() {
    let origin = Origin::start().await;
    origin.robots("User-agent: *\nDisallow: /private\n");
    let proxy = with_admin().await;
    assert_eq!(proxy.get(&origin.url("/a")).await.status, 200);
    assert_eq!(proxy.get(&origin.url("/b")).await.status, 200);
    assert_eq!(origin.hits("/robots.txt"), 1);

    // The new robots.txt only shows after the purge.
    origin.robots("User-agent: *\nDisallow: /a\n");
    let r = proxy
        .admin_post(&format!("/purge?origin={}", percent(&origin.url("/"))))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let j = json(&r.body);
    assert_eq!(j["purged"], true, "{j:#}");
    assert_eq!(j["origin"], format!("http://{}", origin.addr), "{j:#}");

    assert_eq!(proxy.get(&origin.url("/a")).await.status, 403);
    assert_eq!(origin.hits("/robots.txt"), 2);
    assert_eq!(origin.hits("/a"), 1);

    // Nothing cached for that origin any more, and none for an unknown one.
    let again = proxy
        .admin_post("/purge?origin=http%3A%2F%2Fnever-seen.test")
        .await;
    assert_eq!(json(&again.body)["purged"], false, "{}", again.body);
}

// ---------------------------------------------------------------------------
// Crawl-delay politeness
// ---------------------------------------------------------------------------

#[tokio::test]
async fn crawl_delay_spaces_sequential_requests_in_delay_mode() {
    let origin = Origin::start().await;
    origin.robots("User-agent: *\nCrawl-delay: 0.5\n");
    let proxy = Proxy::start().await;
    // Slots are granted 0.5 s apart, all after t0, so three requests span
    // at least 1 s however long each takes (sleeps never end early).
    let t0 = Instant::now();
    for i in 0..3 {
        let r = proxy.get(&origin.url(&format!("/p{i}"))).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    let elapsed = t0.elapsed();
    assert!(elapsed >= Duration::from_millis(950), "{elapsed:?}");
    assert!(elapsed < NO_HANG, "{elapsed:?}");
    assert!(proxy.audit().is_empty(), "allowed requests are not audited");
}

#[tokio::test]
async fn crawl_delay_in_reject_mode_answers_429_with_retry_after_and_audits_rate_limited() {
    let origin = Origin::start().await;
    // A delay much longer than one loopback round trip keeps "immediate"
    // true on a loaded machine.
    origin.robots("User-agent: *\nCrawl-delay: 3\n");
    let proxy = Proxy::start_with(|c| c.politeness.mode = PolitenessMode::Reject).await;
    assert_eq!(proxy.get(&origin.url("/one")).await.status, 200);
    let t0 = Instant::now();
    let r = proxy.get(&origin.url("/two")).await;
    assert!(t0.elapsed() < Duration::from_secs(2), "reject mode waited");
    assert_eq!(r.status, 429, "{r:?}");
    let retry: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!((1..=3).contains(&retry), "Retry-After {retry}");
    assert!(
        r.header("x-robots-proxy-decision")
            .is_some_and(|d| d.starts_with("rate_limited")),
        "{r:?}"
    );
    assert_eq!(
        origin.hits("/two"),
        0,
        "a rate-limited request is not forwarded"
    );
    let audit = proxy.audit();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["decision"], "rate_limited");
    assert_eq!(audit[0]["url"], origin.url("/two"));
}

#[tokio::test]
async fn crawl_delay_beyond_max_wait_is_429_at_once_in_delay_mode() {
    let origin = Origin::start().await;
    origin.robots("User-agent: *\nCrawl-delay: 5\n");
    let proxy = Proxy::start_with(|c| {
        c.politeness.mode = PolitenessMode::Delay;
        c.politeness.max_wait = Duration::from_millis(200);
    })
    .await;
    assert_eq!(proxy.get(&origin.url("/one")).await.status, 200);
    let t0 = Instant::now();
    let r = proxy.get(&origin.url("/two")).await;
    // Refused at once rather than held for the 5 s slot.
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    assert_eq!(r.status, 429, "{r:?}");
    let retry: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((4..=5).contains(&retry), "Retry-After {retry}");
    assert_eq!(origin.hits("/two"), 0);
    assert_eq!(proxy.audit()[0]["decision"], "rate_limited");
}

#[tokio::test]
async fn default_interval_applies_without_crawl_delay() {
    let origin = Origin::start().await;
    origin.robots("User-agent: *\nDisallow: /private\n");
    let proxy = Proxy::start_with(|c| {
        c.politeness.mode = PolitenessMode::Reject;
        c.politeness.default_interval = Duration::from_secs(3);
    })
    .await;
    assert_eq!(proxy.get(&origin.url("/one")).await.status, 200);
    let r = proxy.get(&origin.url("/two")).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert!(r.header("retry-after").is_some());
    // Another origin has its own slot.
    let other = Origin::start().await;
    assert_eq!(proxy.get(&other.url("/one")).await.status, 200);
}

// ---------------------------------------------------------------------------
// Proxy authentication and the client ACL
// ---------------------------------------------------------------------------

fn basic(credentials: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    )
}

fn get_with_auth(url: &str, auth: Option<&str>) -> Request<Bytes> {
    let mut req = Request::get(url).header("user-agent", "curl/8.0");
    if let Some(a) = auth {
        req = req.header("proxy-authorization", a);
    }
    req.body(Bytes::new()).expect("request")
}

#[tokio::test]
async fn proxy_auth_challenges_strips_credentials_and_applies_the_users_agent() {
    let origin = Origin::start().await;
    // `*` allows /shared; the user's mapped agent, strictbot, does not.
    origin
        .robots("User-agent: *\nDisallow: /private\n\nUser-agent: strictbot\nDisallow: /shared\n");
    // Argon2 at minimum cost: the proxy verifies whatever parameters the
    // PHC string names, and default-cost hashing is slow in debug builds.
    let hash =
        hash_password_with("pw", PasswordParams::new(8, 1, 1, None).expect("params")).unwrap();
    let proxy = Proxy::start_with(move |c| {
        c.access.users = vec![UserConfig {
            name: "alice".into(),
            password_hash: hash,
            agent: Some("strictbot".into()),
            max_rps: None,
            purposes: Vec::new(),
        }];
    })
    .await;

    let none = proxy
        .request(get_with_auth(&origin.url("/page"), None))
        .await;
    assert_eq!(none.status, 407, "{none:?}");
    assert_eq!(
        none.header("proxy-authenticate"),
        Some("Basic realm=\"robots-proxy\"")
    );
    let wrong = proxy
        .request(get_with_auth(
            &origin.url("/page"),
            Some(&basic("alice:nope")),
        ))
        .await;
    assert_eq!(wrong.status, 407, "{wrong:?}");
    assert!(wrong.header("proxy-authenticate").is_some());
    let unknown = proxy
        .request(get_with_auth(
            &origin.url("/page"),
            Some(&basic("mallory:pw")),
        ))
        .await;
    assert_eq!(unknown.status, 407, "{unknown:?}");
    assert_eq!(origin.hits("/robots.txt"), 0, "no robots.txt before auth");
    assert_eq!(origin.hits("/page"), 0);

    let good = basic("alice:pw");
    let ok = proxy
        .request(get_with_auth(&origin.url("/page"), Some(&good)))
        .await;
    assert_eq!(ok.status, 200, "{ok:?}");
    assert_eq!(ok.body, "page /page");
    assert_eq!(origin.hits("/page"), 1);
    {
        let seen = origin.seen_headers.lock().unwrap();
        assert!(!seen.is_empty());
        for h in seen.iter() {
            assert!(
                !h.contains_key("proxy-authorization"),
                "credentials leaked upstream: {h:?}"
            );
        }
    }

    let blocked = proxy
        .request(get_with_auth(&origin.url("/shared/doc"), Some(&good)))
        .await;
    assert_eq!(blocked.status, 403, "{blocked:?}");
    assert!(blocked.body.contains("strictbot"), "{}", blocked.body);
    assert_eq!(origin.hits("/shared/doc"), 0);
    let audit = proxy.audit();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["user"], "alice");
    assert_eq!(audit[0]["agent"], "strictbot");
    assert_eq!(audit[0]["decision"], "disallowed");
    assert_eq!(audit[0]["rule_line"], 5);
}

#[tokio::test]
async fn client_outside_allow_clients_is_closed_at_accept_and_the_origin_is_never_contacted() {
    let origin = Origin::start().await;
    origin.robots("User-agent: *\nDisallow: /private\n");
    let proxy = Proxy::start_with(|c| {
        c.access.allow_clients = vec!["10.0.0.0/8".parse().expect("net")];
        c.admin.listen = Some("127.0.0.1:0".parse().expect("addr"));
    })
    .await;
    // Closed before a byte is read: no answer at all, not even a 403.
    let mut s = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    let _ = s
        .write_all(format!("GET {} HTTP/1.1\r\nHost: x\r\n\r\n", origin.url("/page")).as_bytes())
        .await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(NO_HANG, s.read_to_end(&mut answer))
        .await
        .expect("connection left open");
    assert!(
        read.is_err() || answer.is_empty(),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert_eq!(origin.hits("/robots.txt"), 0);
    assert_eq!(origin.hits("/page"), 0);
    let metrics = proxy.admin_get("/metrics").await.body;
    assert_eq!(
        metric(
            &metrics,
            "robots_proxy_connections_refused_total{listener=\"proxy\",reason=\"not_allowed\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
}

// ---------------------------------------------------------------------------
// Graceful shutdown
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_the_request_in_flight_and_refuses_new_connections() {
    let origin = Origin::start().await;
    let held = HeldOrigin::start().await;
    let mut proxy = Proxy::start_with(|c| {
        c.admin.listen = Some("127.0.0.1:0".parse().expect("addr"));
        c.shutdown_grace = Duration::from_secs(30);
    })
    .await;
    let addr = proxy.addr;

    // An idle keep-alive connection must not hold the shutdown up.
    let mut idle = Conn::open(addr).await;
    assert_eq!(idle.get(&origin.url("/warm")).await.status, 200);

    // A request in flight: the origin holds it until released.
    let slow_url = held.url("/slow");
    let in_flight = tokio::spawn(async move {
        let mut conn = Conn::open(addr).await;
        conn.get(&slow_url).await
    });
    held.arrival().await;

    let shutdown_started = Instant::now();
    proxy.stop();

    // New connections are refused once the listener is closed (shortly
    // after the stop signal).
    let deadline = Instant::now() + NO_HANG;
    loop {
        match tokio::net::TcpStream::connect(addr).await {
            // Reset: the handshake raced the listener's close.
            Err(e) => {
                assert!(
                    matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset
                    ),
                    "{e}"
                );
                break;
            }
            Ok(_) => {
                assert!(Instant::now() < deadline, "still accepting after shutdown");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    // The idle connection is closed by the server while the request in
    // flight is still held.
    tokio::time::timeout(NO_HANG, &mut idle.task)
        .await
        .expect("idle connection left open during shutdown")
        .expect("connection task")
        .expect("clean close");
    // Draining: not ready, and serve has not returned.
    let ready = proxy.admin_get("/readyz").await;
    assert_eq!(ready.status, 503, "{ready:?}");
    assert!(
        !proxy.done.is_finished(),
        "serve returned with a request in flight"
    );
    assert!(!in_flight.is_finished());

    held.release();
    let resp = tokio::time::timeout(NO_HANG, in_flight)
        .await
        .expect("in-flight request hangs")
        .expect("request task");
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(resp.body, "released /slow");

    let cut = tokio::time::timeout(NO_HANG, &mut proxy.done)
        .await
        .expect("serve does not return")
        .expect("serve task");
    assert_eq!(cut, 0, "connections cut off");
    // Returned on its own, long before the 30 s grace period ran out.
    assert!(shutdown_started.elapsed() < Duration::from_secs(20));
}

/// With `max_connections` client connections open, a new client is not
/// served (it waits in the listen queue) until one of them closes.
#[tokio::test]
async fn at_max_connections_a_new_client_waits_until_one_closes() {
    let origin = Origin::start().await;
    let proxy = Proxy::start_with(|c| {
        c.max_connections = 1;
        c.admin.listen = Some("127.0.0.1:0".parse().expect("addr"));
    })
    .await;
    let mut first = Conn::open(proxy.addr).await;
    assert_eq!(first.get(&origin.url("/first")).await.status, 200);

    let (addr, url) = (proxy.addr, origin.url("/second"));
    let second = tokio::spawn(async move { Conn::open(addr).await.get(&url).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "served beyond max_connections");
    assert_eq!(origin.hits("/second"), 0);
    let metrics = proxy.admin_get("/metrics").await.body;
    assert_eq!(
        metric(&metrics, "robots_proxy_connection_limit_reached_total"),
        Some(1.0),
        "{metrics}"
    );

    // The first client leaves: the second is served.
    drop(first);
    let resp = tokio::time::timeout(NO_HANG, second)
        .await
        .expect("the waiting client is never served")
        .expect("client task");
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(origin.hits("/second"), 1);
}
