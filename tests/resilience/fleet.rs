//! Fleet mode with a real Redis: proxies sharing one Redis keep one
//! Crawl-delay schedule per origin and agent; independent proxies do not.
//! Redis stopped mid-run: requests fall back to the local schedule, or get
//! 503 with `on_unavailable = "refuse"`. A request with no Crawl-delay
//! makes no Redis call. Skipped, with a message, without `redis-server`.

use std::time::{Duration, Instant};

use robots_proxy::config::{FleetConfig, FleetOnUnavailable, RedisTarget};

use crate::support::fleet::{self, gaps_of, on, until_all};
use crate::support::redis::{Redis, bare_fleet};
use crate::support::{Origin, Proxy, metric, need, until_paced, until_within};

/// `n` proxies of `fleet` (none: independent ones), each holding a
/// request up to 30 s for its Crawl-delay slot.
pub(super) async fn proxies(n: usize, fleet: Option<FleetConfig>) -> Vec<Proxy> {
    fleet::nodes(n, fleet, |c| {
        c.politeness.max_wait = Duration::from_secs(30)
    })
    .await
}

/// `n` proxies of one fleet on `redis` ([`on`]).
async fn fleet_nodes(
    n: usize,
    redis: &Redis,
    timeout: Duration,
    on_unavailable: FleetOnUnavailable,
) -> Vec<Proxy> {
    proxies(n, Some(on(redis, timeout, on_unavailable))).await
}

/// The one node of a fleet on `redis` ([`on`]).
async fn fleet_node(redis: &Redis, timeout: Duration, on_unavailable: FleetOnUnavailable) -> Proxy {
    fleet_nodes(1, redis, timeout, on_unavailable)
        .await
        .remove(0)
}

/// A fleet's timeout short enough for an outage to be noticed quickly.
const SHORT: Duration = Duration::from_millis(300);

/// Three nodes of one fleet (`local` when Redis is unavailable), once
/// each knows all three live.
async fn three_live_nodes(redis: &Redis, timeout: Duration) -> Vec<Proxy> {
    let nodes = fleet_nodes(3, redis, timeout, FleetOnUnavailable::Local).await;
    until_all(&nodes, "three live nodes", live(3.0)).await;
    nodes
}

/// The metrics say `n` live nodes.
fn live(n: f64) -> impl Fn(&str) -> bool {
    move |t| metric(t, "robots_proxy_fleet_live_nodes") == Some(n)
}

/// Sends `n` page requests at once, spread over `proxies`; all must be
/// answered 200. Returns the gaps between the pages' arrivals at the
/// origin, in arrival order.
pub(super) async fn gaps(origin: &Origin, proxies: &[Proxy], n: usize) -> Vec<Duration> {
    fleet::gaps(origin, n, |i, url| async move {
        proxies[i % proxies.len()].get(&url).await
    })
    .await
}

/// The key of `origin`'s Crawl-delay schedule in fleet `name`.
pub(super) fn schedule_key(name: &str, origin: &Origin) -> String {
    format!(
        "robots-proxy:{name}:{{http://{}}}:robots-proxy:next",
        origin.addr
    )
}

/// What the origin's Crawl-delay allows, less this much for the
/// proxies' own forwarding jitter on a busy machine.
pub(super) const TOLERANCE: Duration = Duration::from_millis(150);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_keeps_one_crawl_delay_schedule_independent_proxies_do_not() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let shared = fleet_nodes(
        3,
        &redis,
        Duration::from_secs(1),
        FleetOnUnavailable::Refuse,
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
    let mut redis = need!(Redis::start().await);
    let timeout = SHORT;
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let nodes = fleet_nodes(2, &redis, timeout, FleetOnUnavailable::Local).await;
    until_all(&nodes, "two live nodes", live(2.0)).await;
    assert_eq!(nodes[0].get(&origin.url("/a")).await.status, 200);
    // On the shared schedule: the other node waits for the first's slot.
    let second = nodes[1].get(&origin.url("/b")).await;
    assert_eq!(second.status, 200);
    assert!(second.parsed::<f64>("x-robots-proxy-delay").unwrap_or(0.0) > 0.5);

    redis.stop();
    // Node 0, one of two live nodes, books only its own slots of the
    // interleaved schedule: one every other second, the first no earlier
    // than an interval after every node has noticed the outage (two
    // heartbeat periods and the timeout after Redis last answered). Each
    // request waits the timeout at most, and then for its slot.
    let switch = 2.0 + timeout.as_secs_f64() + 1.0;
    for (path, most) in [("/c", switch + 2.0), ("/d", 2.0)] {
        let started = Instant::now();
        let r = nodes[0].get(&origin.url(path)).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let held = r.parsed::<f64>("x-robots-proxy-delay").unwrap_or(0.0);
        assert!(held <= most + 0.01, "{path}: held {held} s");
        let took = started.elapsed().as_secs_f64();
        assert!(
            took <= timeout.as_secs_f64() + held + 0.5,
            "{path}: took {took} s, held {held} s"
        );
    }
    nodes[0]
        .assert_metric("robots_proxy_fleet_unavailable_total", 2.0, "/c and /d")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_shares_again_once_redis_is_back() {
    let mut redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let node = fleet_node(&redis, SHORT, FleetOnUnavailable::Refuse).await;
    assert_eq!(node.get(&origin.url("/a")).await.status, 200);
    let port = redis.port;
    redis.stop();
    assert_eq!(node.get(&origin.url("/b")).await.status, 503);
    // Redis back (empty): within a retry period or two, bookings go to
    // it again and the key is there.
    let redis = Redis::start_on(port).await.expect("restarted");
    let what = "Redis to be used again";
    until_shared_again(&node, &origin, "/c", Duration::from_secs(10), what).await;
    let key = schedule_key("test", &origin);
    assert!(redis.exists(&key).await, "{key}");
}

/// Asks `node` for pages `<prefix><i>` of `origin`, one every 250 ms (a
/// client retrying), until one is served (200), each before it refused
/// (503): the node books on Redis again; fails with `what` after `limit`.
/// Returns how many were refused.
pub(super) async fn until_shared_again(
    node: &Proxy,
    origin: &Origin,
    prefix: &str,
    limit: Duration,
    what: &str,
) -> usize {
    let refused = std::cell::Cell::new(0);
    let every = Duration::from_millis(250);
    until_paced(what, limit, every, || {
        let url = origin.url(&format!("{prefix}{}", refused.get()));
        let refused = &refused;
        async move {
            let r = node.get(&url).await;
            if r.status == 200 {
                return Ok(());
            }
            assert_eq!(r.status, 503, "{}", r.body);
            refused.set(refused.get() + 1);
            let metrics = node.metrics().await;
            let fleet: Vec<&str> = metrics
                .lines()
                .filter(|l| l.starts_with("robots_proxy_fleet_"))
                .collect();
            Err(format!(
                "still refused after {} requests: {}\n{}",
                refused.get(),
                r.body,
                fleet.join("\n")
            ))
        }
    })
    .await;
    refused.get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_mid_run_refuses_with_503() {
    let mut redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let free = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let node = fleet_node(&redis, SHORT, FleetOnUnavailable::Refuse).await;
    assert_eq!(node.get(&origin.url("/a")).await.status, 200);
    assert_eq!(node.get(&free.url("/a")).await.status, 200);
    redis.stop();
    let r = node.get(&origin.url("/b")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.parsed::<u64>("retry-after").is_some(), "{:?}", r.headers);
    assert_eq!(origin.hits("/b"), 0);
    // An origin known here without Crawl-delay needs no booking: still
    // forwarded.
    assert_eq!(node.get(&free.url("/c")).await.status, 200);
}

/// The connection to Redis goes half-open (the host gone behind a firewall
/// that drops its packets: no answer, no close, for the many minutes TCP
/// takes to give up) while a new connection would be answered: the node
/// makes one and shares again within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_connection_to_redis_is_replaced() {
    use crate::support::redis::SlowRelay;
    let redis = need!(Redis::start().await);
    let relay = SlowRelay::start(&redis).await;
    let config = FleetConfig {
        redis: RedisTarget::Server(relay.url()),
        ..on(&redis, SHORT, FleetOnUnavailable::Refuse)
    };
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let node = proxies(1, Some(config)).await.remove(0);
    assert_eq!(node.get(&origin.url("/a")).await.status, 200);

    relay.strand();
    let stranded = Instant::now();
    let what = "a new connection to replace the silent one";
    let refused = until_shared_again(&node, &origin, "/b", Duration::from_secs(30), what).await;
    eprintln!(
        "half-open connection replaced: shared again {:?} after it went silent ({refused} refused)",
        stranded.elapsed()
    );
    assert!(refused > 0, "the silent connection was noticed");
    node.assert_metric(
        "robots_proxy_fleet_reconnects_total",
        1.0,
        "one new connection",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_no_crawl_delay_makes_no_redis_call() {
    let redis = need!(Redis::start().await);
    let free = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let node = fleet_node(&redis, Duration::from_secs(1), FleetOnUnavailable::Refuse).await;
    // The first request looks robots.txt up in Redis; the next ones find
    // it in the local store. The store into Redis runs after the answer:
    // waited for (the entry there, the lease given back).
    assert_eq!(node.get(&free.url("/a")).await.status, 200);
    let entry = format!("robots-proxy:test:{{http://{}}}:robots.1", free.addr);
    let lease = format!("robots-proxy:test:{{http://{}}}:lease", free.addr);
    until_within(
        "robots.txt to be stored",
        Duration::from_secs(10),
        || async { (redis.exists(&entry).await && !redis.exists(&lease).await).then_some(()) },
    )
    .await;
    redis
        .command(&["CONFIG", "RESETSTAT"])
        .await
        .expect("reset");
    for path in ["/b", "/c", "/d"] {
        assert_eq!(node.get(&free.url(path)).await.status, 200);
    }
    // The heartbeat calls Redis every second on its own (a sorted set);
    // a robots.txt look reads a hash (HMGET), a booking GETs and SETs, an
    // in-flight lease counts a sorted set (ZCARD) and takes its own out
    // (ZREM), a response time is pushed on a list (LPUSH).
    let stats = redis.commandstats().await;
    for command in [
        "cmdstat_set:",
        "cmdstat_get:",
        "cmdstat_hmget:",
        "cmdstat_zcard:",
        "cmdstat_zrem:",
        "cmdstat_lpush:",
    ] {
        assert!(!stats.contains(command), "{stats}");
    }
    // The same with a Crawl-delay does call it (so the check can fail).
    let slow = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    assert_eq!(node.get(&slow.url("/a")).await.status, 200);
    let stats = redis.commandstats().await;
    assert!(stats.contains("cmdstat_set:"), "{stats}");
}

/// The latency a booking adds: ~1000 bookings on loopback Redis, p50 and
/// p99 printed (`--nocapture`; the figures are the `fleet_memory` example's,
/// in a release build): each answered by Redis within the fleet's timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn booking_latency_on_loopback_redis() {
    use robots_proxy::measure::Booking;
    let redis = need!(Redis::start().await);
    let fleet = bare_fleet(RedisTarget::Server(redis.url()), "latency", "latency-test");
    let interval = Duration::from_secs(1);
    let start = std::time::Instant::now();
    let took = fleet::book_many(&fleet, 1000).await;
    // The same key again: one interval on, on Redis's clock, less the
    // time the bookings took (however slow the machine is).
    let key = "http://origin0.example:80 bot";
    let least = interval.saturating_sub(start.elapsed() + Duration::from_millis(5));
    match fleet.book(key, interval, Duration::from_secs(10), 0).await {
        Ok(Booking::Wait(w)) => assert!(w >= least && w <= interval, "{w:?}, at least {least:?}"),
        other => panic!("{other:?}"),
    }
    // max_queue 1: a second held request is refused.
    assert!(matches!(
        fleet.book(key, interval, Duration::from_secs(10), 1).await,
        Ok(Booking::Refused(_))
    ));
    let (p50, p99) = fleet::p50_p99(&took);
    eprintln!("fleet booking on loopback Redis: p50 {p50:?}, p99 {p99:?}");
}

/// One request of [`spread`]: how long it took and how long the proxy
/// says it was held for its Crawl-delay slot.
struct Sent {
    took: Duration,
    held: Duration,
}

/// Sends `n` page requests `<prefix><i>` at once, request i to node
/// i mod N; all must be answered 200.
async fn spread(origin: &Origin, nodes: &[Proxy], prefix: &str, n: usize) -> Vec<Sent> {
    let sent = (0..n).map(|i| {
        let url = origin.url(&format!("{prefix}{i}"));
        let node = &nodes[i % nodes.len()];
        async move {
            let started = Instant::now();
            let r = node.get(&url).await;
            assert_eq!(r.status, 200, "{url}: {}", r.body);
            let held = r.parsed::<f64>("x-robots-proxy-delay").unwrap_or(0.0);
            Sent {
                took: started.elapsed(),
                held: Duration::from_secs_f64(held),
            }
        }
    });
    futures_util::future::join_all(sent).await
}

/// A request's own work on top of Redis's timeout and its slot: proxying
/// on a busy two-core machine running a debug build.
const OWN_WORK: Duration = Duration::from_millis(500);

/// Every request of an outage waited at most `fleet.timeout` on Redis
/// plus its own slot; returns the longest wait beyond the slot.
fn no_wait_past_timeout(phase: &str, sent: &[Sent], timeout: Duration) -> Duration {
    let mut worst = Duration::ZERO;
    for s in sent {
        let beyond = s.took.saturating_sub(s.held);
        assert!(
            beyond <= timeout + OWN_WORK,
            "{phase}: took {:?}, held {:?}",
            s.took,
            s.held
        );
        worst = worst.max(beyond);
    }
    worst
}

fn assert_spaced(phase: &str, gaps: &[Duration], interval: Duration) {
    for g in gaps {
        assert!(
            *g >= interval - TOLERANCE,
            "{phase}: pages closer than the Crawl-delay: {gaps:?}"
        );
    }
}

/// Three nodes sharing one Redis; Redis stopped (SIGSTOP: connections
/// open, nothing answered), then killed, then started again on its port.
/// During the outage each node books only its own slots of the
/// interleaved wall-clock schedule, so pages stay one Crawl-delay apart
/// across the nodes (all on one machine: no clock skew, the tolerance is
/// the forwarding jitter); no request waits on Redis past
/// `fleet.timeout`; then the nodes share again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_keep_the_interval_through_a_redis_outage() {
    let mut redis = need!(Redis::start().await);
    let interval = Duration::from_secs(1);
    let timeout = Duration::from_millis(100);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let nodes = three_live_nodes(&redis, timeout).await;

    spread(&origin, &nodes, "/s", 6).await;
    let shared = gaps_of(&origin.arrived(&["/s"]));
    assert_spaced("shared", &shared, interval);

    // SIGSTOP mid-run: the first bookings wait for the timeout, the
    // others fall back at once.
    redis.signal("STOP");
    let stopped = spread(&origin, &nodes, "/x", 6).await;
    let stopped_worst = no_wait_past_timeout("SIGSTOP", &stopped, timeout);
    let stopped_gaps = gaps_of(&origin.arrived(&["/x"]));
    assert_spaced("SIGSTOP", &stopped_gaps, interval);
    until_all(&nodes, "Redis unreachable", |t| {
        metric(t, "robots_proxy_fleet_reachable") == Some(0.0)
            && metric(t, "robots_proxy_fleet_live_nodes") == Some(3.0)
    })
    .await;

    let port = redis.port;
    redis.stop();
    let killed = spread(&origin, &nodes, "/k", 6).await;
    let killed_worst = no_wait_past_timeout("SIGKILL", &killed, timeout);
    // The shared pages and the two outage phases: one schedule, the
    // switch included.
    let outage = gaps_of(&origin.arrived(&["/s", "/x", "/k"]));
    assert_spaced("shared, SIGSTOP, SIGKILL", &outage, interval);

    // Redis back, empty: the heartbeats find it and the nodes share again.
    let redis = Redis::start_on(port).await.expect("restarted");
    until_all(&nodes, "sharing again", |t| {
        metric(t, "robots_proxy_fleet_reachable") == Some(1.0)
            && metric(t, "robots_proxy_fleet_live_nodes") == Some(3.0)
    })
    .await;
    spread(&origin, &nodes, "/b", 6).await;
    let again = gaps_of(&origin.arrived(&["/b"]));
    assert_spaced("shared again", &again, interval);
    let key = schedule_key("test", &origin);
    assert!(redis.exists(&key).await, "{key}");
    let min = |g: &[Duration]| fleet::min_gap(g);
    let all = origin.arrived(&["/s", "/x", "/k", "/b"]);
    eprintln!(
        "page gaps (min): shared {:?}, SIGSTOP {:?}, SIGKILL {:?} (shared to outage {:?}), shared again {:?} \
         (the switches included {:?}), longest wait beyond the slot: SIGSTOP {stopped_worst:?}, SIGKILL {killed_worst:?}; \
         every gap of the run: {:?}",
        min(&shared),
        min(&stopped_gaps),
        min(&gaps_of(&origin.arrived(&["/k"]))),
        min(&outage),
        min(&again),
        min(&gaps_of(&all)),
        gaps_of(&all)
    );
}

/// Redis comes back while requests are held for slots of the interleaved
/// schedule: each node writes what it held into the shared schedule, and
/// books only its own interleaved slots until every node has had the time
/// to do so, so pages booked after the return keep the interval with the
/// ones held from the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_booked_after_redis_returns_keep_the_interval_with_those_held_from_the_outage() {
    let mut redis = need!(Redis::start().await);
    let interval = Duration::from_secs(1);
    let timeout = Duration::from_millis(100);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let nodes = three_live_nodes(&redis, timeout).await;
    spread(&origin, &nodes, "/s", 3).await;

    // Killed: it comes back empty, knowing nothing of the slots held.
    let port = redis.port;
    redis.stop();
    let held = spread(&origin, &nodes, "/x", 9);
    let after = async {
        // The first page of the outage has gone: the others are held for
        // their nodes' interleaved slots (three a node, 3 s apart).
        until_within(
            "a page during the outage",
            Duration::from_secs(20),
            || async { (!origin.arrived(&["/x"]).is_empty()).then_some(()) },
        )
        .await;
        let redis = Redis::start_on(port).await.expect("restarted");
        until_all(&nodes, "sharing again", |t| {
            metric(t, "robots_proxy_fleet_reachable") == Some(1.0)
        })
        .await;
        let returned = Instant::now();
        let held_then = 9 - origin.arrived(&["/x"]).len();
        let sent = spread(&origin, &nodes, "/b", 6).await;
        (returned, held_then, sent, redis)
    };
    let (_, (returned, held_then, _, _redis)) = tokio::join!(held, after);
    let all = origin.arrived(&["/s", "/x", "/b"]);
    let gaps = gaps_of(&all);
    eprintln!(
        "pages held from the outage when Redis was back: {held_then}; every gap of the run: {gaps:?}"
    );
    assert!(
        held_then >= 3,
        "the return came after most held pages had gone: {held_then}"
    );
    assert!(
        origin.arrived(&["/b"]).iter().all(|b| *b > returned),
        "pages booked after the return"
    );
    assert_spaced("the return from an outage", &gaps, interval);
}

/// A client that gives up while held gives its slot on the fleet's
/// schedule back (as on the local one), so leaving clients cannot hold
/// an origin's queue for the whole fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_gives_up_while_held_gives_its_fleet_slot_back() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 20\n").await;
    let node = fleet_node(&redis, Duration::from_secs(1), FleetOnUnavailable::Local).await;
    assert_eq!(node.get(&origin.url("/first")).await.status, 200);
    let key = schedule_key("test", &origin);
    let next = || async {
        match redis.command(&["GET", &key]).await {
            Ok(redis::Value::BulkString(b)) => String::from_utf8(b)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .expect("a number"),
            other => panic!("{key}: {other:?}"),
        }
    };
    let after_first = next().await;
    let (addr, url) = (node.addr, origin.url("/second"));
    let client =
        tokio::spawn(async move { crate::support::Conn::open(addr).await.get(&url).await });
    let limit = Duration::from_secs(10);
    until_within("the second request to book", limit, || async {
        (next().await != after_first).then_some(())
    })
    .await;
    assert_eq!(next().await, after_first + 20_000_000, "one slot more");
    client.abort();
    until_within("the slot to be given back", limit, || async {
        (next().await == after_first).then_some(())
    })
    .await;
    assert_eq!(origin.hits("/second"), 0);
}

/// Without a list of live nodes (Redis never reached) a node cannot
/// interleave: each books its own local schedule, and three nodes send
/// pages close together, which is what the interleaving prevents (so the
/// test above can fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_node_list_the_local_fallback_does_not_interleave() {
    let mut redis = need!(Redis::start().await);
    let timeout = Duration::from_millis(100);
    let config = on(&redis, timeout, FleetOnUnavailable::Local);
    redis.stop();
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let nodes = proxies(3, Some(config)).await;
    let sent = spread(&origin, &nodes, "/p", 6).await;
    no_wait_past_timeout("never reached", &sent, timeout);
    let gaps = gaps_of(&origin.arrived(&["/p"]));
    eprintln!("page gaps without interleaving: {gaps:?}");
    assert!(
        gaps.iter().any(|g| *g < Duration::from_millis(500)),
        "independent local schedules kept the interval? {gaps:?}"
    );
}

/// `/metrics` of a node of three: Redis reachable, three live nodes, the
/// round trips of its calls; the heartbeat set names each node by its
/// host and bound port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_three_live_nodes_and_the_round_trips() {
    let redis = need!(Redis::start().await);
    let nodes = three_live_nodes(&redis, Duration::from_secs(1)).await;
    let text = nodes[0].metrics().await;
    assert_eq!(metric(&text, "robots_proxy_fleet_reachable"), Some(1.0));
    let calls = metric(&text, "robots_proxy_fleet_round_trip_seconds_count").unwrap_or(0.0);
    assert!(calls >= 1.0, "{text}");
    assert_eq!(
        metric(
            &text,
            "robots_proxy_fleet_round_trip_seconds_bucket{le=\"+Inf\"}"
        ),
        Some(calls)
    );
    assert_eq!(
        metric(&text, "robots_proxy_fleet_robots_waited_total"),
        Some(0.0)
    );
    let names = redis.zrange("robots-proxy:test:{nodes}:live").await;
    // Each member is a node's name (`<host>:<port>` by default) and its
    // instance.
    for n in &nodes {
        let port = format!(":{}#", n.addr.port());
        assert!(names.iter().any(|m| m.contains(&port)), "{names:?}");
    }
    // A node stopped cleanly takes its heartbeat out at once.
    let mut nodes = nodes;
    let mut gone = nodes.pop().expect("a node");
    gone.stop();
    gone.finished().await;
    let left = redis
        .int(&["ZCARD", "robots-proxy:test:{nodes}:live"])
        .await;
    assert_eq!(left, 2);
    until_all(&nodes, "two live nodes", live(2.0)).await;
}

/// The round trips of many calls, from the histogram (`--nocapture`):
/// ~500 heartbeats of one node on loopback Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_histogram_on_loopback_redis() {
    let redis = need!(Redis::start().await);
    let fleet = bare_fleet(RedisTarget::Server(redis.url()), "rtt", "rtt-test");
    for _ in 0..500 {
        fleet.heartbeat().await.expect("heartbeat");
    }
    assert_eq!(fleet.live_nodes().names.len(), 1);
    let (buckets, sum_us) = fleet.stats().round_trips.snapshot();
    let count: u64 = buckets.iter().sum();
    // And one `TIME` before the first, which stamps it (`fleet::beat`).
    assert_eq!(count, 501);
    // The bucket bound under which half and 99% of the calls fall.
    let bound = |q: f64| {
        let mut seen = 0;
        for (i, n) in buckets.iter().enumerate() {
            seen += n;
            if seen as f64 >= q * count as f64 {
                return robots_proxy::measure::ROUND_TRIP_BUCKETS_US
                    .get(i)
                    .copied()
                    .unwrap_or(u64::MAX);
            }
        }
        u64::MAX
    };
    eprintln!(
        "fleet round trips (heartbeat script, loopback): mean {} µs, p50 ≤ {} µs, p99 ≤ {} µs",
        sum_us / count,
        bound(0.5),
        bound(0.99)
    );
    // Every call was answered, so within the timeout (1 s): no call in
    // the bucket above every bound.
    assert!(bound(1.0) <= 1_000_000, "{buckets:?}");
}

/// An audit line written by a fleet node names it; one written without a
/// fleet has no `node`; `audit verify` and `audit report` read both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_line_names_the_fleet_node() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let config = on(&redis, Duration::from_secs(1), FleetOnUnavailable::Local);
    let node = proxies(1, Some(fleet::named(&config, "node-a")))
        .await
        .remove(0);
    let alone = proxies(1, None).await.remove(0);
    for p in [&node, &alone] {
        assert_eq!(p.get(&origin.url("/private/x")).await.status, 403);
    }
    let blocked = |p: &Proxy| {
        p.audit()
            .into_iter()
            .find(|l| l["decision"] == "disallowed")
            .expect("a disallowed line")
    };
    assert_eq!(blocked(&node)["node"], "node-a");
    assert!(blocked(&alone).get("node").is_none());
    for p in [&node, &alone] {
        let path = p.audit_path.to_str().expect("path");
        let out = crate::support::binary::run(&["audit", "verify", path]);
        assert!(out.status.success(), "{out:?}");
        let out = crate::support::binary::run(&["audit", "report", path]);
        assert!(out.status.success(), "{out:?}");
    }
}

/// A heartbeat set polluted with thousands of fresh members (and names too
/// long to be a node's) is read capped: at most 1,000 names, this node
/// added to them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polluted_heartbeat_set_is_read_capped() {
    let redis = need!(Redis::start().await);
    // Fresh on Redis's clock, a minute ahead so they stay live.
    let now_ms = redis.time_us().await / 1000;
    let score = (now_ms + 60_000).to_string();
    let key = "robots-proxy:test:{nodes}:live";
    let long = "x".repeat(300);
    let names: Vec<String> = (0..5000).map(|i| format!("bogus-{i:05}")).collect();
    let mut args = vec!["ZADD", key];
    for n in names.iter().chain([&long]) {
        args.push(&score);
        args.push(n);
    }
    redis.command(&args).await.expect("ZADD");
    let node = fleet_node(&redis, Duration::from_secs(1), FleetOnUnavailable::Local).await;
    let text = node
        .until_metrics("the capped list", |t| {
            metric(t, "robots_proxy_fleet_live_nodes").is_some_and(|n| n > 1.0)
        })
        .await;
    let live = metric(&text, "robots_proxy_fleet_live_nodes").unwrap_or(0.0);
    // 1,000 read, this node among them or added to them.
    assert!((1000.0..=1001.0).contains(&live), "{text}");
}
