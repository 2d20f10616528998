//! An origin that says "slow down" (429, 503) is paused for every agent
//! and every node: with `Retry-After` (seconds or an HTTP-date) until
//! then, without it for the back-off (`backoff`, doubling). Requests
//! meanwhile are held and go after the pause, spaced by the origin's
//! schedule, or, past `max_wait`, answered 429 at once naming the signal.
//! Real origins logging arrival times, real Redis, proxies of one fleet.
//! Skipped, with a message, without `redis-server`.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use robots_proxy::config::FleetOnUnavailable;

use crate::support::fleet::{self, gaps_of, on};
use crate::support::redis::Redis;
use crate::support::{Origin, Proxy, Reply, metric, need, until};

/// How much earlier than the pause's end a request may reach the origin:
/// the proxies' and Redis's clocks are read a little apart.
const EARLY: Duration = Duration::from_millis(30);

/// Nodes of one fleet on `redis` that hold a request up to `max_wait`;
/// the back-off starts at `backoff`.
async fn nodes(redis: &Redis, n: usize, max_wait: Duration, backoff: Duration) -> Vec<Proxy> {
    let nodes = fleet::nodes(
        n,
        Some(on(
            redis,
            Duration::from_secs(1),
            FleetOnUnavailable::Refuse,
        )),
        |c| {
            c.politeness.max_wait = max_wait;
            c.politeness.backoff = backoff;
        },
    )
    .await;
    // Each subscribed to the fleet's channel, so each hears of pauses.
    until("every node subscribed", || async {
        (redis.subscribers("robots-proxy:test:events").await >= n as i64).then_some(())
    })
    .await;
    nodes
}

/// Waits until `node` knows `origin` is paused (it heard the fleet's
/// message).
async fn until_known(node: &Proxy, origin: &Origin) {
    until("the pause to be known on the node", || async {
        let j = node.explain(&origin.url("/x")).await;
        (j["politeness"]["pause_known_here"] == true).then_some(())
    })
    .await;
}

/// When the request for `path` reached `origin`.
fn arrival(origin: &Origin, path: &str) -> Instant {
    let at = origin.arrived(&[path]);
    assert_eq!(at.len(), 1, "{path} reached the origin {} times", at.len());
    at[0]
}

/// Sends `/p0`..`/p<n-1>` at once, spread over `nodes`; every answer
/// must be 200.
async fn send_pages(origin: &Origin, nodes: &[Proxy], n: usize) {
    let sent = (0..n).map(|i| {
        let node = &nodes[i % nodes.len()];
        let url = origin.url(&format!("/p{i}"));
        async move { node.get(&url).await }
    });
    for r in futures_util::future::join_all(sent).await {
        assert_eq!(r.status, 200, "{}", r.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_pauses_the_origin_on_every_node() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 0.3\n").await;
    let nodes = nodes(&redis, 2, Duration::from_secs(30), Duration::from_secs(30)).await;
    origin.route("/first", Reply::status(429).header("retry-after", "3"));
    let first = nodes[0].get(&origin.url("/first")).await;
    // The response that carried the signal goes to its client as it came.
    assert_eq!(first.status, 429);
    assert_eq!(first.header("retry-after"), Some("3"));
    let signalled = arrival(&origin, "/first");
    until_known(&nodes[1], &origin).await;

    // A node whose max_wait is shorter than the pause answers at once.
    let impatient = fleet::node(
        Some(on(
            &redis,
            Duration::from_secs(1),
            FleetOnUnavailable::Refuse,
        )),
        |c| c.politeness.max_wait = Duration::from_secs(1),
    )
    .await;
    let asked = Instant::now();
    let refused = impatient.get(&origin.url("/impatient")).await;
    assert!(asked.elapsed() < Duration::from_secs(1), "answered at once");
    refused.assert_says(
        "a request past max_wait during a pause",
        429,
        &["429 with Retry-After: 3", "paused until"],
    );
    let retry: u64 = refused.parsed("retry-after").expect("Retry-After");
    assert!((1..=3).contains(&retry), "Retry-After: {retry}");
    assert_eq!(origin.hits("/impatient"), 0);
    let line = impatient
        .audit()
        .into_iter()
        .find(|l| l["url"].as_str().is_some_and(|u| u.ends_with("/impatient")))
        .expect("the refusal's audit line");
    assert_eq!(line["politeness"], "retry_after", "{line}");

    // Ten requests over two nodes: none before the pause ends, then one
    // per Crawl-delay.
    send_pages(&origin, &nodes, 10).await;
    let at = origin.arrived(&["/p"]);
    assert_eq!(at.len(), 10);
    assert!(
        at[0] + EARLY >= signalled + Duration::from_secs(3),
        "a request reached the origin {:?} after its 429 with Retry-After: 3",
        at[0] - signalled
    );
    for g in gaps_of(&at) {
        assert!(
            g >= Duration::from_millis(300) - fleet_tolerance(),
            "closer than the Crawl-delay after the pause: {:?}",
            gaps_of(&at)
        );
    }

    // Seen: the metric by cause, the signal's audit line, /explain.
    let text = nodes[0].metrics().await;
    assert_eq!(
        metric(
            &text,
            "robots_proxy_origin_pauses_total{cause=\"retry_after\"}"
        ),
        Some(1.0),
        "{text}"
    );
    let signal = nodes[0]
        .audit_of_type("politeness")
        .into_iter()
        .next()
        .expect("a politeness line");
    assert_eq!(signal["status"], 429, "{signal}");
    assert_eq!(signal["retry_after"], 3, "{signal}");
    assert_eq!(signal["cause"], "retry_after", "{signal}");
    assert!(signal["until"].is_string(), "{signal}");
}

/// What the fleet's schedule allows, less this much for forwarding
/// jitter on a busy machine.
fn fleet_tolerance() -> Duration {
    Duration::from_millis(100)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_date_pauses_until_then_on_every_node() {
    let redis = need!(Redis::start().await);
    // No Crawl-delay: the nodes learn of the pause from the fleet's
    // channel alone.
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let nodes = nodes(&redis, 2, Duration::from_secs(30), Duration::from_secs(30)).await;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let until_secs = now + 4;
    let date = httpdate(until_secs);
    origin.route("/first", Reply::status(503).header("retry-after", &date));
    assert_eq!(nodes[0].get(&origin.url("/first")).await.status, 503);
    until_known(&nodes[1], &origin).await;
    let explained = nodes[1].explain(&origin.url("/x")).await;
    let p = &explained["politeness"];
    assert_eq!(p["schedule"], "redis", "{explained:#}");
    assert_eq!(p["cause"], "retry_after", "{explained:#}");
    assert_eq!(p["pause"]["status"], 503, "{explained:#}");
    // The web view's panel shows the pause, on the node that heard of it.
    let page = nodes[1].admin_get("/").await;
    assert!(
        page.body.contains("Paused by the origin") && page.body.contains("503 with Retry-After"),
        "{}",
        page.body
    );
    send_pages(&origin, &nodes, 10).await;
    let ends = Instant::now()
        - SystemTime::now()
            .duration_since(UNIX_EPOCH + Duration::from_secs(until_secs))
            .unwrap_or_default();
    let at = origin.arrived(&["/p"]);
    assert_eq!(at.len(), 10);
    assert!(
        at[0] + EARLY + Duration::from_millis(5) >= ends,
        "a request reached the origin {:?} before the Retry-After date",
        ends - at[0]
    );
}

/// An IMF-fixdate for `secs` of Unix time.
fn httpdate(secs: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(secs as i64).expect("time");
    let day = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
        [t.weekday().number_days_from_monday() as usize];
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][u8::from(t.month()) as usize - 1];
    format!(
        "{day}, {:02} {month} {} {:02}:{:02}:{:02} GMT",
        t.day(),
        t.year(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_503s_without_retry_after_back_off_once_twice_four_times_across_the_fleet() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let backoff = Duration::from_millis(500);
    let nodes = nodes(&redis, 2, Duration::from_secs(30), backoff).await;
    origin.route("/down", Reply::status(503));
    // Each request after the first is held by the pause the previous 503
    // made, on the other node, and makes the next.
    for i in 0..4 {
        let node = &nodes[i % 2];
        if i > 0 {
            until_known(node, &origin).await;
        }
        let r = node.get(&origin.url(&format!("/down?{i}"))).await;
        assert_eq!(r.status, 503, "{}", r.body);
    }
    let at = origin.arrived(&["/down"]);
    let gaps = gaps_of(&at);
    eprintln!("back-off pauses: {gaps:?}");
    for (i, g) in gaps.iter().enumerate() {
        let pause = backoff * (1 << i);
        // ±10% jitter, and the forwarding after the pause.
        assert!(
            *g + EARLY >= pause.mul_f64(0.9) && *g <= pause.mul_f64(1.1) + fleet_tolerance() * 3,
            "pause {} was {g:?}, not {pause:?} ±10%: {gaps:?}",
            i + 1
        );
    }
    let explained = nodes[0].explain(&origin.url("/x")).await;
    assert_eq!(
        explained["politeness"]["pause"]["backoff_level"], 4,
        "{explained:#}"
    );
    let text = nodes[0].metrics().await;
    let pauses = metric(&text, "robots_proxy_origin_pauses_total{cause=\"backoff\"}")
        .unwrap_or_default()
        + metric(
            &nodes[1].metrics().await,
            "robots_proxy_origin_pauses_total{cause=\"backoff\"}",
        )
        .unwrap_or_default();
    assert_eq!(pauses, 4.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_an_origin_is_paused_others_make_no_redis_call() {
    let redis = need!(Redis::start().await);
    let paused = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let free = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let nodes = nodes(&redis, 1, Duration::from_secs(30), Duration::from_secs(30)).await;
    let node = &nodes[0];
    paused.route("/first", Reply::status(429).header("retry-after", "60"));
    assert_eq!(node.get(&paused.url("/first")).await.status, 429);
    // robots.txt of the free origin read and stored in Redis first.
    assert_eq!(node.get(&free.url("/a")).await.status, 200);
    let entry = format!("robots-proxy:test:{{http://{}}}:robots.1", free.addr);
    let lease = format!("robots-proxy:test:{{http://{}}}:lease", free.addr);
    until("robots.txt to be stored", || async {
        (redis.exists(&entry).await && !redis.exists(&lease).await).then_some(())
    })
    .await;
    redis
        .command(&["CONFIG", "RESETSTAT"])
        .await
        .expect("reset");
    for path in ["/b", "/c", "/d"] {
        assert_eq!(node.get(&free.url(path)).await.status, 200);
    }
    let stats = redis.commandstats().await;
    for command in [
        "cmdstat_evalsha:",
        "cmdstat_eval:",
        "cmdstat_get:",
        "cmdstat_hmget:",
    ] {
        assert!(!stats.contains(command), "{stats}");
    }
    // The paused one does call it (so the check can fail): refused at
    // once, max_wait being shorter than 60 s.
    let r = node.get(&paused.url("/b")).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(redis.commandstats().await.contains("cmdstat_evalsha:"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_fleet_a_429_holds_then_spaces_and_refuses_past_max_wait() {
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 0.2\n").await;
    let proxy = Proxy::start_with(|c| {
        crate::support::admin(c);
        c.politeness.max_wait = Duration::from_secs(30);
    })
    .await;
    origin.route("/first", Reply::status(429).header("retry-after", "2"));
    assert_eq!(proxy.get(&origin.url("/first")).await.status, 429);
    let signalled = arrival(&origin, "/first");
    send_pages(&origin, std::slice::from_ref(&proxy), 5).await;
    let at = origin.arrived(&["/p"]);
    assert!(at[0] + EARLY >= signalled + Duration::from_secs(2));
    for g in gaps_of(&at) {
        assert!(
            g >= Duration::from_millis(200) - fleet_tolerance(),
            "{at:?}"
        );
    }
    let text = proxy.metrics().await;
    assert_eq!(
        metric(
            &text,
            "robots_proxy_politeness_total{cause=\"retry_after\",result=\"held\"}"
        ),
        Some(5.0),
        "every page was held by the pause: {text}"
    );
    // The signal's line is in the chain: `audit verify` passes on it, and
    // `audit report` counts it as no request.
    let path = proxy.audit_path.to_str().expect("path").to_owned();
    let verified = crate::support::binary::run(&["audit", "verify", &path]);
    assert!(
        verified.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verified.stdout),
        String::from_utf8_lossy(&verified.stderr)
    );
    assert!(!proxy.audit_of_type("politeness").is_empty());
    let report = crate::support::binary::run(&["audit", "report", &path]);
    assert!(report.status.success());
    let explained = proxy.explain(&origin.url("/x")).await;
    assert_eq!(explained["politeness"]["schedule"], "this process");
    assert_eq!(explained["politeness"]["last_signal"]["status"], 429);

    // A pause past max_wait: 429 at once, naming the signal.
    let impatient = Proxy::start_with(|c| c.politeness.max_wait = Duration::from_secs(5)).await;
    origin.route("/long", Reply::status(429).header("retry-after", "60"));
    assert_eq!(impatient.get(&origin.url("/long")).await.status, 429);
    let r = impatient.get(&origin.url("/next")).await;
    r.assert_says(
        "past max_wait",
        429,
        &["the origin itself asked", "429 with Retry-After: 60"],
    );
    assert_eq!(origin.hits("/next"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_robots_txt_429_with_retry_after_pauses_the_origin_too() {
    let origin = Origin::with_robots_reply(Reply::status(429).header("retry-after", "2")).await;
    let proxy = Proxy::start_with(|c| {
        crate::support::admin(c);
        c.politeness.max_wait = Duration::from_secs(30);
    })
    .await;
    // Today's policy: all disallowed until robots.txt is fetched again.
    assert_eq!(proxy.get(&origin.url("/first")).await.status, 503);
    let refused = arrival(&origin, "/robots.txt");
    // Its Retry-After pauses the origin.
    let explained = until("the pause from robots.txt", || async {
        let j = proxy.explain(&origin.url("/x")).await;
        (j["politeness"]["pause"]["status"] == 429).then_some(j)
    })
    .await;
    assert_eq!(explained["politeness"]["cause"], "retry_after");
    let line = proxy
        .audit_of_type("politeness")
        .into_iter()
        .next()
        .expect("a politeness line");
    assert!(
        line["url"]
            .as_str()
            .is_some_and(|u| u.ends_with("/robots.txt")),
        "{line}"
    );
    origin.robots("User-agent: *\nAllow: /\n");
    let page = until("the page once robots.txt is fetched again", || async {
        let r = proxy.get(&origin.url("/page")).await;
        (r.status == 200).then_some(r)
    })
    .await;
    assert_eq!(page.status, 200);
    assert!(arrival(&origin, "/page") + EARLY >= refused + Duration::from_secs(2));
}
