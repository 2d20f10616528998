//! Operations features of the in-process proxy over real loopback sockets:
//! the admin listener, Crawl-delay politeness, proxy authentication, the
//! client ACL and graceful shutdown.

use std::time::{Duration, Instant};

use robots_proxy::config::{PolitenessMode, UserConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{
    Conn, HeldOrigin, Origin, Proxy, admin, basic, get_with, metric, percent, requests_total,
    until_refused, user,
};

/// The User-Agent of the requests here.
const CURL: (&str, &str) = ("user-agent", "curl/8.0");

/// Generous upper bound for anything that must merely not hang.
const NO_HANG: Duration = Duration::from_secs(10);

fn cache_events(text: &str, event: &str) -> f64 {
    metric(
        text,
        &format!("robots_proxy_robots_cache_events_total{{event=\"{event}\"}}"),
    )
    .unwrap_or_else(|| panic!("no cache event {event} in:\n{text}"))
}

// ---------------------------------------------------------------------------
// Admin listener
// ---------------------------------------------------------------------------

#[tokio::test]
async fn admin_healthz_and_readyz_answer_200() {
    let proxy = Proxy::with_admin().await;
    let health = proxy.admin_get("/healthz").await;
    assert_eq!(health.status, 200, "{health:?}");
    assert_eq!(health.body, "ok\n");
    let ready = proxy.admin_get("/readyz").await;
    assert_eq!(ready.status, 200, "{ready:?}");
    assert_eq!(ready.body, "ready\n");
}

#[tokio::test]
async fn admin_unknown_path_is_404_wrong_method_405_and_bad_parameters_400() {
    let proxy = Proxy::with_admin().await;
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
        assert!(r.json()["error"].is_string(), "{path}: {}", r.body);
    }
    for path in ["/purge", "/purge?origin=%3A%2F%2F"] {
        let r = proxy.admin_post(path).await;
        assert_eq!(r.status, 400, "{path}: {r:?}");
        assert!(r.json()["error"].is_string(), "{path}: {}", r.body);
    }
}

#[tokio::test]
async fn admin_metrics_count_decisions_fetches_cache_events_latency_and_connections() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let proxy = Proxy::with_admin().await;

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
    assert_eq!(requests_total(&before, "allowed"), 0.0);
    assert_eq!(requests_total(&before, "disallowed"), 0.0);
    assert_eq!(
        metric(&before, "robots_proxy_robots_cache_entries"),
        Some(0.0)
    );

    assert_eq!(proxy.get(&origin.url("/public")).await.status, 200);
    assert_eq!(proxy.get(&origin.url("/private/x")).await.status, 403);

    // A client connection held open shows in the gauge.
    let mut held = Conn::open(proxy.addr).await;
    assert_eq!(held.get(&origin.url("/public2")).await.status, 200);

    let after = proxy.metrics().await;
    assert_eq!(requests_total(&after, "allowed"), 2.0, "{after}");
    assert_eq!(requests_total(&after, "disallowed"), 1.0, "{after}");
    assert_eq!(requests_total(&after, "rate_limited"), 0.0, "{after}");
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
    proxy
        .until_metrics("every connection to close", |t| {
            metric(t, "robots_proxy_open_connections") == Some(0.0)
        })
        .await;
}

#[tokio::test]
async fn admin_explain_fetches_robots_once_names_the_rule_and_selects_the_agent_group() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\nCrawl-delay: 3\n\nUser-agent: friendlybot\nAllow: /private\n",).await;
    let proxy = Proxy::with_admin().await;
    let url = origin.url("/private/page?q=1");

    let r = proxy
        .admin_get(&format!("/explain?url={}", percent(&url)))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("application/json"))
    );
    let j = r.json();
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
    let j = r.json();
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
    assert_eq!(again.json()["decision"], "allowed");
    let r = proxy
        .admin_get(&format!("/explain?url={}", percent(&url)))
        .await;
    assert_eq!(r.json()["decision"], "disallowed");
    assert_eq!(
        origin.hits("/robots.txt"),
        2,
        "repeated explains use the cache"
    );
    assert_eq!(origin.hits("/private/page?q=1"), 0);
}

#[tokio::test]
async fn admin_purge_drops_the_cached_robots_so_the_next_request_refetches() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let proxy = Proxy::with_admin().await;
    assert_eq!(proxy.get(&origin.url("/a")).await.status, 200);
    assert_eq!(proxy.get(&origin.url("/b")).await.status, 200);
    assert_eq!(origin.hits("/robots.txt"), 1);

    // The new robots.txt only shows after the purge.
    origin.robots("User-agent: *\nDisallow: /a\n");
    let r = proxy
        .admin_post(&format!("/purge?origin={}", percent(&origin.url("/"))))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let j = r.json();
    assert_eq!(j["purged"], true, "{j:#}");
    assert_eq!(j["origin"], format!("http://{}", origin.addr), "{j:#}");

    assert_eq!(proxy.get(&origin.url("/a")).await.status, 403);
    assert_eq!(origin.hits("/robots.txt"), 2);
    assert_eq!(origin.hits("/a"), 1);

    // Nothing cached for that origin any more, and none for an unknown one.
    let again = proxy
        .admin_post("/purge?origin=http%3A%2F%2Fnever-seen.test")
        .await;
    assert_eq!(again.json()["purged"], false, "{}", again.body);
}

// ---------------------------------------------------------------------------
// Crawl-delay politeness
// ---------------------------------------------------------------------------

#[tokio::test]
async fn crawl_delay_spaces_sequential_requests_in_delay_mode() {
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 0.5\n").await;
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
    let retry: u64 = r.parsed("retry-after").expect("Retry-After");
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
    let line = proxy.only_audit_line();
    assert_eq!(line["decision"], "rate_limited");
    assert_eq!(line["url"], origin.url("/two"));
}

#[tokio::test]
async fn crawl_delay_beyond_max_wait_is_429_at_once_in_delay_mode() {
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 5\n").await;
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
    let retry: u64 = r.parsed("retry-after").expect("Retry-After");
    assert!((4..=5).contains(&retry), "Retry-After {retry}");
    assert_eq!(origin.hits("/two"), 0);
    assert_eq!(proxy.audit()[0]["decision"], "rate_limited");
}

#[tokio::test]
async fn default_interval_applies_without_crawl_delay() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
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

#[tokio::test]
async fn proxy_auth_challenges_strips_credentials_and_applies_the_users_agent() {
    let origin = Origin::start().await;
    // `*` allows /shared; the user's mapped agent, strictbot, does not.
    origin
        .robots("User-agent: *\nDisallow: /private\n\nUser-agent: strictbot\nDisallow: /shared\n");
    let proxy = Proxy::start_with(move |c| {
        c.access.users = vec![UserConfig {
            agent: Some("strictbot".into()),
            ..user("alice", "pw")
        }];
    })
    .await;

    let none = proxy.request(get_with(&origin.url("/page"), &[CURL])).await;
    assert_eq!(none.status, 407, "{none:?}");
    assert_eq!(
        none.header("proxy-authenticate"),
        Some("Basic realm=\"robots-proxy\"")
    );
    let wrong = proxy
        .request(get_with(
            &origin.url("/page"),
            &[CURL, ("proxy-authorization", &basic("alice:nope"))],
        ))
        .await;
    assert_eq!(wrong.status, 407, "{wrong:?}");
    assert!(wrong.header("proxy-authenticate").is_some());
    let unknown = proxy
        .request(get_with(
            &origin.url("/page"),
            &[CURL, ("proxy-authorization", &basic("mallory:pw"))],
        ))
        .await;
    assert_eq!(unknown.status, 407, "{unknown:?}");
    assert_eq!(origin.hits("/robots.txt"), 0, "no robots.txt before auth");
    assert_eq!(origin.hits("/page"), 0);

    let good = basic("alice:pw");
    let ok = proxy
        .request(get_with(
            &origin.url("/page"),
            &[CURL, ("proxy-authorization", &good)],
        ))
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
        .request(get_with(
            &origin.url("/shared/doc"),
            &[CURL, ("proxy-authorization", &good)],
        ))
        .await;
    assert_eq!(blocked.status, 403, "{blocked:?}");
    assert!(blocked.body.contains("strictbot"), "{}", blocked.body);
    assert_eq!(origin.hits("/shared/doc"), 0);
    let audit = proxy.audit();
    // The three 407s are audited, then the block.
    assert_eq!(audit.len(), 4, "{audit:?}");
    let challenged: Vec<(&str, Option<&str>)> = audit[..3]
        .iter()
        .map(|l| (l["decision"].as_str().unwrap_or(""), l["user"].as_str()))
        .collect();
    assert_eq!(
        challenged,
        [
            ("auth_required", None),
            ("auth_required", Some("alice")),
            ("auth_required", Some("mallory")),
        ]
    );
    assert_eq!(audit[1]["reason"], "proxy authentication failed");
    assert_eq!(audit[0]["url"], origin.url("/page"));
    assert!(audit[0].get("robots_url").is_none(), "{:#}", audit[0]);
    let audit = &audit[3..];
    assert_eq!(audit[0]["user"], "alice");
    assert_eq!(audit[0]["agent"], "strictbot");
    assert_eq!(audit[0]["decision"], "disallowed");
    assert_eq!(audit[0]["rule_line"], 5);
    // The client's own User-Agent, as sent.
    assert_eq!(audit[0]["user_agent"], CURL.1);
}

#[tokio::test]
async fn client_outside_allow_clients_is_closed_at_accept_and_the_origin_is_never_contacted() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let proxy = Proxy::start_with(|c| {
        c.access.allow_clients = vec!["10.0.0.0/8".parse().expect("net")];
        admin(c);
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
    let metrics = proxy.metrics().await;
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
        admin(c);
        c.shutdown_grace = Duration::from_secs(30);
    })
    .await;
    let addr = proxy.addr;

    // An idle keep-alive connection must not hold the shutdown up.
    let mut idle = Conn::open(addr).await;
    assert_eq!(idle.get(&origin.url("/warm")).await.status, 200);

    // A request in flight: the origin holds it until released.
    let in_flight = held.hold(addr, "/slow").await;

    let shutdown_started = Instant::now();
    proxy.stop();

    // New connections are refused once the listener is closed (shortly
    // after the stop signal).
    let refused = until_refused(addr).await;
    // Reset: the handshake raced the listener's close.
    assert!(
        matches!(
            refused.kind(),
            std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset
        ),
        "{refused}"
    );
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
    let resp = in_flight.outcome().await.expect("response");
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(resp.body, "released /slow");

    let cut = proxy.finished().await;
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
        admin(c);
    })
    .await;
    let mut first = Conn::open(proxy.addr).await;
    assert_eq!(first.get(&origin.url("/first")).await.status, 200);

    // The acceptor waits for a free connection: nothing more is accepted
    // while the first is open.
    crate::support::until("the acceptor to wait at the limit", || async {
        let metrics = proxy.metrics().await;
        (metric(&metrics, "robots_proxy_connection_limit_reached_total") == Some(1.0)).then_some(())
    })
    .await;
    let (addr, url) = (proxy.addr, origin.url("/second"));
    let second = tokio::spawn(async move { Conn::open(addr).await.get(&url).await });
    proxy
        .assert_metric("robots_proxy_open_connections", 1.0, "the first only")
        .await;
    assert!(!second.is_finished(), "served beyond max_connections");
    assert_eq!(origin.hits("/second"), 0);

    // The first client leaves: the second is served.
    drop(first);
    let resp = tokio::time::timeout(NO_HANG, second)
        .await
        .expect("the waiting client is never served")
        .expect("client task");
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(origin.hits("/second"), 1);
}
