//! The fleet's Redis under memory pressure, and nodes whose clocks
//! disagree: what clients make the fleet store (robots.txt entries of
//! origins they choose) cannot evict a Crawl-delay schedule nor fill
//! Redis; a Redis full all the same is an outage for the schedule (the
//! fallback `fleet.on_unavailable` names), counted; an entry larger than
//! a shared entry may be is fetched by each node; the times in a shared
//! entry are Redis's, so a node whose clock runs days behind does not
//! make the others' copies expire at once nor put its times in their
//! audit lines. Skipped, with a message, without `redis-server` (and
//! `faketime` for the clock).

use std::process::Command;
use std::time::{Duration, SystemTime};

use robots_proxy::config::FleetOnUnavailable;

use crate::support::binary::{Running, Setup};
use crate::support::fleet::{self, on};
use crate::support::redis::Redis;
use crate::support::{Origin, Proxy, metric, need, until};

/// `n` bytes of robots.txt comment lines of pseudo-random printable
/// characters (deflate saves little on them), after `User-agent: *`.
fn incompressible(n: usize, seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut text = String::from("User-agent: *\nAllow: /\n");
    while text.len() < n {
        text.push_str("# ");
        for _ in 0..96 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push(char::from(b'!' + (x % 94) as u8));
        }
        text.push('\n');
    }
    text
}

/// A node of fleet "test" on `redis`, holding requests up to 60 s.
async fn node(redis: &Redis, on_unavailable: FleetOnUnavailable) -> Proxy {
    fleet::node(
        Some(on(redis, Duration::from_secs(1), on_unavailable)),
        |c| {
            c.politeness.max_wait = Duration::from_secs(60);
            c.robots.fetch_timeout = Duration::from_secs(10);
        },
    )
    .await
}

/// `INFO stats`' `evicted_keys`.
async fn evicted(redis: &Redis) -> u64 {
    let stats = redis.text(&["INFO", "stats"]).await;
    stats
        .lines()
        .find_map(|l| l.strip_prefix("evicted_keys:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("evicted_keys")
}

/// Waits until no robots.txt lease of fleet "test" is held: every fetch
/// made for the fleet has been stored or given back.
async fn until_no_lease(redis: &Redis) {
    until("every robots.txt lease given back", || async {
        let leases = redis.keys("robots-proxy:test:*:lease").await;
        if leases.is_empty() {
            Ok(())
        } else {
            Err(leases.join(" "))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_entries_a_client_makes_the_fleet_store_do_not_evict_a_schedule() {
    // The setting operators had been told to use: a maxmemory and
    // volatile-lru. Every key the fleet writes has an expiry.
    let redis = need!(Redis::start().await);
    for (k, v) in [("maxmemory", "4mb"), ("maxmemory-policy", "volatile-lru")] {
        redis.command(&["CONFIG", "SET", k, v]).await.expect(k);
    }
    let node = node(&redis, FleetOnUnavailable::Local).await;
    let victim = Origin::with_robots("User-agent: *\nCrawl-delay: 10\n").await;
    assert_eq!(node.get(&victim.url("/p0")).await.status, 200);
    // One client, origins of its own with files of 100 KB that deflate
    // cannot shrink much: 60 of them are more than maxmemory.
    let mut origins = Vec::new();
    for i in 0..60 {
        origins.push(Origin::with_robots(&incompressible(100_000, i + 1)).await);
    }
    let urls: Vec<String> = origins.iter().map(|o| o.url("/x")).collect();
    let sent = urls.iter().map(|u| node.get(u));
    for r in futures_util::future::join_all(sent).await {
        assert_eq!(r.status, 200, "{}", r.body);
    }
    until_no_lease(&redis).await;
    // The victim's schedule is still there: its next request waits.
    assert_eq!(node.get(&victim.url("/p1")).await.status, 200);
    let at = victim.arrived(&["/p"]);
    let gap = at[1] - at[0];
    assert!(
        gap >= Duration::from_millis(9_850),
        "the victim's next request came {gap:?} after the last, Crawl-delay 10 s \
         ({} keys evicted)",
        evicted(&redis).await
    );
    assert_eq!(evicted(&redis).await, 0, "nothing evicted");
    let text = node.metrics().await;
    let stored = metric(&text, "robots_proxy_fleet_robots_stored_total").expect("stored");
    let over = metric(&text, "robots_proxy_fleet_robots_over_share_total").expect("over");
    assert!(over > 0.0, "past the share, entries are kept by their node");
    assert_eq!(stored + over, 61.0, "every fetch stored or counted");
    assert_eq!(
        metric(&text, "robots_proxy_fleet_redis_may_evict"),
        Some(1.0),
        "volatile-lru may evict schedules"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_is_an_outage_for_the_schedule_and_is_counted() {
    let redis = need!(Redis::start().await);
    redis
        .command(&["CONFIG", "SET", "maxmemory", "2mb"])
        .await
        .expect("maxmemory");
    let node = node(&redis, FleetOnUnavailable::Local).await;
    node.until_metrics("a heartbeat", |t| {
        metric(t, "robots_proxy_fleet_live_nodes") == Some(1.0)
    })
    .await;
    // Something else fills Redis to its maxmemory: writes are refused.
    let filler = "x".repeat(64 * 1024);
    for i in 0.. {
        let key = format!("filler:{i}");
        match redis.command(&["SET", &key, &filler]).await {
            Ok(_) => {}
            Err(e) if e.code() == Some("OOM") => break,
            Err(e) => panic!("{e}"),
        }
        assert!(i < 1000, "Redis never full");
    }
    // Well past it: the memory of clients that come and go (this test's
    // own connections) does not bring Redis back under.
    redis
        .command(&["CONFIG", "SET", "maxmemory", "1mb"])
        .await
        .expect("maxmemory");
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let n = &node;
    let gaps = fleet::gaps(&origin, 3, |_, url| async move { n.get(&url).await }).await;
    // The local schedule's spacing, not 503s.
    assert!(
        fleet::min_gap(&gaps) >= Duration::from_millis(850),
        "{gaps:?}"
    );
    let text = node.metrics().await;
    assert_eq!(
        metric(&text, "robots_proxy_fleet_redis_may_evict"),
        Some(0.0),
        "noeviction read at start"
    );
    assert!(metric(&text, "robots_proxy_fleet_unavailable_total").expect("fell back") >= 1.0);
    // Counted (by the first call refused: a booking, or the heartbeat if
    // a slow machine timed the first booking out).
    node.until_metrics("a refusal for memory counted", |t| {
        metric(t, "robots_proxy_fleet_redis_full_total").unwrap_or(0.0) >= 1.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_robots_txt_larger_than_a_shared_entry_is_fetched_by_each_node() {
    let redis = need!(Redis::start().await);
    let nodes = [
        node(&redis, FleetOnUnavailable::Local).await,
        node(&redis, FleetOnUnavailable::Local).await,
    ];
    // 400 KB that deflate cannot bring under the bound.
    let big = Origin::with_robots(&incompressible(400_000, 7)).await;
    let small = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    assert_eq!(nodes[0].get(&big.url("/a")).await.status, 200);
    assert_eq!(nodes[0].get(&small.url("/a")).await.status, 200);
    until_no_lease(&redis).await;
    let entry = |o: &Origin| {
        format!(
            "robots-proxy:test:{{{}}}:robots.1",
            o.url("").trim_end_matches('/')
        )
    };
    assert!(!redis.exists(&entry(&big)).await, "not stored");
    assert!(redis.exists(&entry(&small)).await, "stored");
    assert_eq!(nodes[1].get(&big.url("/b")).await.status, 200);
    assert_eq!(nodes[1].get(&small.url("/b")).await.status, 200);
    assert_eq!(big.hits("/robots.txt"), 2, "each node fetched its own");
    assert_eq!(small.hits("/robots.txt"), 1, "shared");
    let text = nodes[0].metrics().await;
    assert_eq!(
        metric(&text, "robots_proxy_fleet_robots_too_large_total"),
        Some(1.0)
    );
    assert_eq!(
        metric(&text, "robots_proxy_fleet_robots_stored_total"),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_clock_runs_days_behind_shares_entries_on_redis_time() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    // A node eight days behind: its own process, under faketime (its
    // steady clock left alone, as a host's wall clock set wrong is).
    let setup = Setup::with_config(
        "robots-proxy",
        &format!(
            "[fleet]\nunauthenticated = true\nredis = {:?}\nname = \"test\"\nnode = \"behind\"\ntimeout = \"1s\"\n",
            redis.url()
        ),
    );
    let mut command = Command::new("faketime");
    command
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("RUST_LOG", "info")
        .args(["-f", "-8d"])
        .arg(env!("CARGO_BIN_EXE_robots-proxy"))
        .args(["run", "--config"])
        .arg(setup.config_path());
    if let Err(e) = Command::new("faketime").arg("--version").output() {
        crate::support::component::missing("faketime", e);
        return;
    }
    crate::support::component::used("faketime");
    let behind: Running = Running::start(command).await;
    let mut conn = crate::support::Conn::open(behind.addr).await;
    assert_eq!(conn.get(&origin.url("/page")).await.status, 200);
    until_no_lease(&redis).await;
    // A node on time judges by the entry the other fetched.
    let node = node(&redis, FleetOnUnavailable::Local).await;
    for _ in 0..5 {
        assert_eq!(node.get(&origin.url("/private")).await.status, 403);
    }
    assert_eq!(origin.hits("/robots.txt"), 1, "fetched once for the fleet");
    let text = node.metrics().await;
    let hits = metric(
        &text,
        r#"robots_proxy_robots_cache_events_total{event="hit"}"#,
    )
    .unwrap_or(0.0);
    assert_eq!(hits, 4.0, "one look in Redis, then its own copy:\n{text}");
    // Its audit lines carry this node's times.
    let lines = node.audit();
    assert_eq!(lines.len(), 5);
    let fetched = lines[0]["robots_fetched_at"]
        .as_str()
        .expect("robots_fetched_at");
    let fetched = humantime::parse_rfc3339(fetched).expect("a time");
    let off = SystemTime::now()
        .duration_since(fetched)
        .unwrap_or_else(|e| e.duration());
    assert!(
        off < Duration::from_secs(60),
        "fetched at {fetched:?}: {off:?} off"
    );
}
