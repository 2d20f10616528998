//! Fleet mode with a real Redis: proxies sharing one Redis keep one
//! Crawl-delay schedule per origin and agent; independent proxies do not.
//! Redis stopped mid-run: requests fall back to the local schedule, or get
//! 503 with `on_unavailable = "refuse"`. A request with no Crawl-delay
//! makes no Redis call. Skipped, with a message, without `redis-server`.

use std::time::{Duration, Instant};

use robots_proxy::config::{FleetConfig, FleetOnUnavailable, RedisTarget};

use crate::support::redis::Redis;
use crate::support::{Origin, Proxy, admin, metric};

fn fleet(redis: &Redis, timeout: Duration, on_unavailable: FleetOnUnavailable) -> FleetConfig {
    FleetConfig {
        redis: RedisTarget::Server(redis.url()),
        name: "test".into(),
        timeout,
        on_unavailable,
        ..FleetConfig::default()
    }
}

pub(super) async fn proxies(n: usize, fleet: Option<FleetConfig>) -> Vec<Proxy> {
    let mut all = Vec::new();
    for _ in 0..n {
        let fleet = fleet.clone();
        all.push(
            Proxy::start_with(move |c| {
                admin(c);
                c.politeness.max_wait = Duration::from_secs(30);
                c.fleet = fleet;
            })
            .await,
        );
    }
    all
}

/// Sends `n` page requests at once, spread over `proxies`; all must be
/// answered 200. Returns the gaps between the pages' arrivals at the
/// origin, in arrival order.
pub(super) async fn gaps(origin: &Origin, proxies: &[Proxy], n: usize) -> Vec<Duration> {
    let urls: Vec<String> = (0..n).map(|i| origin.url(&format!("/p{i}"))).collect();
    let sent = urls
        .iter()
        .enumerate()
        .map(|(i, url)| proxies[i % proxies.len()].get(url));
    for r in futures_util::future::join_all(sent).await {
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let mut at: Vec<Instant> = origin
        .arrivals
        .lock()
        .expect("arrivals")
        .iter()
        .filter(|(path, _)| path.starts_with("/p"))
        .map(|(_, t)| *t)
        .collect();
    assert_eq!(at.len(), n);
    at.sort();
    at.windows(2).map(|w| w[1] - w[0]).collect()
}

/// What the origin's Crawl-delay allows, less this much for the
/// proxies' own forwarding jitter on a busy machine.
pub(super) const TOLERANCE: Duration = Duration::from_millis(150);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_keeps_one_crawl_delay_schedule_independent_proxies_do_not() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let shared = proxies(
        3,
        Some(fleet(
            &redis,
            Duration::from_secs(1),
            FleetOnUnavailable::Refuse,
        )),
    )
    .await;
    let gaps_shared = gaps(&origin, &shared, 6).await;
    for g in &gaps_shared {
        assert!(
            *g >= Duration::from_secs(1) - TOLERANCE,
            "pages closer than the Crawl-delay through a fleet: {gaps_shared:?}"
        );
    }

    // Three independent proxies: three schedules, pages close together.
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let alone = proxies(3, None).await;
    let gaps_alone = gaps(&origin, &alone, 6).await;
    eprintln!("page gaps: fleet {gaps_shared:?}, independent {gaps_alone:?}");
    assert!(
        gaps_alone.iter().any(|g| *g < Duration::from_millis(500)),
        "independent proxies kept one schedule? {gaps_alone:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_mid_run_books_locally() {
    let Some(mut redis) = Redis::start().await else {
        return;
    };
    let timeout = Duration::from_millis(300);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let nodes = proxies(2, Some(fleet(&redis, timeout, FleetOnUnavailable::Local))).await;
    assert_eq!(nodes[0].get(&origin.url("/a")).await.status, 200);
    // On the shared schedule: the other node waits for the first's slot.
    let second = nodes[1].get(&origin.url("/b")).await;
    assert_eq!(second.status, 200);
    assert!(second.parsed::<f64>("x-robots-proxy-delay").unwrap_or(0.0) > 0.5);

    redis.stop();
    // Node 0's local schedule has no slot booked: it goes within the
    // timeout; then its own local Crawl-delay applies.
    for (path, local) in [("/c", 0.0), ("/d", 1.0)] {
        let started = Instant::now();
        let r = nodes[0].get(&origin.url(path)).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let held = r.parsed::<f64>("x-robots-proxy-delay").unwrap_or(0.0);
        assert!(held <= local, "{path}: held {held} s");
        let took = started.elapsed().as_secs_f64();
        assert!(
            took <= timeout.as_secs_f64() + local + 0.5,
            "{path}: took {took} s"
        );
    }
    let text = nodes[0].metrics().await;
    assert_eq!(
        metric(&text, "robots_proxy_fleet_unavailable_total"),
        Some(2.0),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_shares_again_once_redis_is_back() {
    let Some(mut redis) = Redis::start().await else {
        return;
    };
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let nodes = proxies(
        1,
        Some(fleet(
            &redis,
            Duration::from_millis(300),
            FleetOnUnavailable::Refuse,
        )),
    )
    .await;
    assert_eq!(nodes[0].get(&origin.url("/a")).await.status, 200);
    let port = redis.port;
    redis.stop();
    assert_eq!(nodes[0].get(&origin.url("/b")).await.status, 503);
    // Redis back (empty): within a retry period or two, bookings go to
    // it again and the key is there.
    let redis = Redis::start_on(port).await.expect("restarted");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut i = 0;
    loop {
        i += 1;
        let r = nodes[0].get(&origin.url(&format!("/c{i}"))).await;
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(Instant::now() < deadline, "Redis not used again");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let key = format!(
        "robots-proxy:test:{{http://{}}}:robots-proxy:next",
        origin.addr
    );
    assert_eq!(
        redis.command(&["EXISTS", &key]).await.ok(),
        Some(redis::Value::Int(1)),
        "{key}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_mid_run_refuses_with_503() {
    let Some(mut redis) = Redis::start().await else {
        return;
    };
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let free = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let nodes = proxies(
        1,
        Some(fleet(
            &redis,
            Duration::from_millis(300),
            FleetOnUnavailable::Refuse,
        )),
    )
    .await;
    assert_eq!(nodes[0].get(&origin.url("/a")).await.status, 200);
    assert_eq!(nodes[0].get(&free.url("/a")).await.status, 200);
    redis.stop();
    let r = nodes[0].get(&origin.url("/b")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.parsed::<u64>("retry-after").is_some(), "{:?}", r.headers);
    assert_eq!(origin.hits("/b"), 0);
    // An origin known here without Crawl-delay needs no booking: still
    // forwarded.
    assert_eq!(nodes[0].get(&free.url("/c")).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_no_crawl_delay_makes_no_redis_call() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let free = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let nodes = proxies(
        1,
        Some(fleet(
            &redis,
            Duration::from_secs(1),
            FleetOnUnavailable::Refuse,
        )),
    )
    .await;
    // The first request looks robots.txt up in Redis; the next ones find
    // it in the local store.
    assert_eq!(nodes[0].get(&free.url("/a")).await.status, 200);
    redis
        .command(&["CONFIG", "RESETSTAT"])
        .await
        .expect("reset");
    for path in ["/b", "/c", "/d"] {
        assert_eq!(nodes[0].get(&free.url(path)).await.status, 200);
    }
    let stats = redis.commandstats().await;
    assert!(!stats.contains("cmdstat_eval"), "{stats}");
    // The same with a Crawl-delay does call it (so the check can fail).
    let slow = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    assert_eq!(nodes[0].get(&slow.url("/a")).await.status, 200);
    let stats = redis.commandstats().await;
    assert!(stats.contains("cmdstat_eval"), "{stats}");
}

/// The latency a booking adds: ~1000 bookings on loopback Redis, p50 and
/// p99 printed (`--nocapture`); bounded loosely so a debug build on a busy
/// machine passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn booking_latency_on_loopback_redis() {
    use robots_proxy::measure::{Booking, Fleet, FleetSettings, OnUnavailable};
    let Some(redis) = Redis::start().await else {
        return;
    };
    let fleet = Fleet::new(&FleetSettings {
        redis: RedisTarget::Server(redis.url()),
        name: "latency".into(),
        node: "latency-test".into(),
        timeout: Duration::from_secs(1),
        on_unavailable: OnUnavailable::Refuse,
    })
    .expect("fleet");
    let interval = Duration::from_secs(1);
    let mut took = Vec::new();
    for i in 0..1000 {
        let key = format!("http://origin{i}.example:80 bot");
        let started = Instant::now();
        let booked = fleet
            .book(&key, interval, Duration::from_secs(10), 0)
            .await
            .expect("booked");
        took.push(started.elapsed());
        assert_eq!(booked, Booking::Wait(Duration::ZERO));
    }
    // The same key again: one interval on, on Redis's clock.
    let key = "http://origin0.example:80 bot";
    match fleet.book(key, interval, Duration::from_secs(10), 0).await {
        Ok(Booking::Wait(w)) => assert!(w > Duration::from_millis(500) && w <= interval),
        other => panic!("{other:?}"),
    }
    // max_queue 1: a second held request is refused.
    assert!(matches!(
        fleet.book(key, interval, Duration::from_secs(10), 1).await,
        Ok(Booking::Refused(_))
    ));
    took.sort();
    let p50 = took[took.len() / 2];
    let p99 = took[took.len() * 99 / 100];
    eprintln!("fleet booking on loopback Redis: p50 {p50:?}, p99 {p99:?}");
    assert!(p99 < Duration::from_millis(200), "p50 {p50:?}, p99 {p99:?}");
}
