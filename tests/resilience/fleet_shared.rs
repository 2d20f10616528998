//! Fleet mode, the robots.txt side: three proxy processes sharing one
//! Redis fetch an origin's robots.txt once between them and keep its
//! Crawl-delay as one schedule (three independent ones fetch it three
//! times and send pages close together); a purge on one node reaches the
//! others; `/explain` says which node fetched; with Redis gone a miss is
//! fetched locally or refused, as configured. Skipped, with a message,
//! without `redis-server`.

use std::time::{Duration, Instant};

use robots_proxy::config::{Config, FleetConfig, FleetOnUnavailable, RedisTarget};

use crate::support::binary::{Running, Setup, descriptors, limit_descriptors};
use crate::support::fleet::{self, until_all, until_allowed};
use crate::support::redis::{Redis, bare_fleet};
use crate::support::{Conn, HeldRobots, Origin, Proxy, Reply, metric, need, until, until_paced};

/// Pages may arrive this much closer than the Crawl-delay: the proxies'
/// own forwarding jitter on a busy machine (all nodes share one clock,
/// Redis's, so no skew enters).
const TOLERANCE: Duration = Duration::from_millis(150);

/// A proxy process on its own config file; `fleet` is the `[fleet]`
/// table's body, if any.
async fn process(fleet: Option<String>) -> (Setup, Running) {
    let mut extra = String::from("[politeness]\nmax_wait = \"120s\"\nmax_queue = 100\n");
    if let Some(f) = fleet {
        extra.push_str(&format!("[fleet]\nunauthenticated = true\n{f}"));
    }
    Setup::running("robots-proxy", &extra).await
}

/// `[fleet]`'s body for node `node-<i>` of fleet `name` on `redis`.
fn table(redis: &Redis, name: &str, i: usize) -> String {
    format!(
        "redis = {:?}\nname = \"{name}\"\nnode = \"node-{i}\"\ntimeout = \"1s\"\n",
        redis.url()
    )
}

/// Sends `n` page requests at once spread over `nodes` (each on its own
/// connection); all must be answered 200. Returns the gaps between the
/// pages' arrivals at the origin.
async fn spread(origin: &Origin, nodes: &[std::net::SocketAddr], n: usize) -> Vec<Duration> {
    fleet::gaps(origin, n, |i, url| async move {
        Conn::open(nodes[i % nodes.len()]).await.get(&url).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_fetch_robots_txt_once_and_keep_one_schedule() {
    let redis = need!(Redis::start().await);
    let mut fleet = Vec::new();
    for i in 1..=3 {
        fleet.push(process(Some(table(&redis, "spacing", i))).await);
    }
    let addrs: Vec<_> = fleet.iter().map(|(_, r)| r.addr).collect();
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let gaps_fleet = spread(&origin, &addrs, 30).await;
    let fetches_fleet = origin.hits("/robots.txt");

    let mut alone = Vec::new();
    for _ in 0..3 {
        alone.push(process(None).await);
    }
    let addrs: Vec<_> = alone.iter().map(|(_, r)| r.addr).collect();
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let gaps_alone = spread(&origin, &addrs, 9).await;
    let fetches_alone = origin.hits("/robots.txt");

    let min = fleet::min_gap;
    eprintln!(
        "robots.txt fetches: fleet {fetches_fleet}, independent {fetches_alone}; \
         smallest page gap: fleet {:?}, independent {:?}",
        min(&gaps_fleet),
        min(&gaps_alone)
    );
    assert_eq!(fetches_fleet, 1, "robots.txt fetched once for the fleet");
    assert!(
        min(&gaps_fleet) >= Duration::from_secs(1) - TOLERANCE,
        "pages closer than the Crawl-delay through a fleet: {gaps_fleet:?}"
    );
    assert_eq!(fetches_alone, 3, "each independent proxy fetches");
    assert!(
        min(&gaps_alone) < Duration::from_millis(500),
        "independent proxies kept one schedule? {gaps_alone:?}"
    );
}

/// Node `node` of fleet "shared" on `redis` (a 300 ms timeout).
fn fleet_config(redis: &Redis, node: &str, on_unavailable: FleetOnUnavailable) -> FleetConfig {
    let shared = fleet::config(
        RedisTarget::Server(redis.url()),
        "shared",
        Duration::from_millis(300),
        on_unavailable,
    );
    fleet::named(&shared, node)
}

/// An in-process node `name` of fleet "shared" ([`fleet_config`]), with
/// `adjust` applied.
async fn node_with(
    redis: &Redis,
    name: &str,
    on_unavailable: FleetOnUnavailable,
    adjust: impl FnOnce(&mut Config),
) -> Proxy {
    fleet::node(Some(fleet_config(redis, name, on_unavailable)), adjust).await
}

async fn node(redis: &Redis, name: &str, on_unavailable: FleetOnUnavailable) -> Proxy {
    node_with(redis, name, on_unavailable, |_| {}).await
}

/// Nodes named `names` (`local` when Redis is unavailable), each having
/// judged `/a` of `origin` (robots.txt `Disallow: /a`) 403, by node 1's
/// fetch.
async fn two_nodes_judged(redis: &Redis, origin: &Origin, names: [&str; 2]) -> (Proxy, Proxy) {
    let one = node(redis, names[0], FleetOnUnavailable::Local).await;
    let two = node(redis, names[1], FleetOnUnavailable::Local).await;
    assert_eq!(one.get(&origin.url("/a")).await.status, 403);
    assert_eq!(two.get(&origin.url("/a")).await.status, 403);
    assert_eq!(
        origin.hits("/robots.txt"),
        1,
        "node 2 judged by node 1's fetch"
    );
    (one, two)
}

/// `POST /purge?<what>=<url>` on `node`'s admin listener.
async fn purge(node: &Proxy, what: &str, url: &str) -> crate::support::Resp {
    node.admin_post(&format!("/purge?{what}={url}")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_on_one_node_is_seen_by_the_others() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nDisallow: /a\n").await;
    let (one, two) = two_nodes_judged(&redis, &origin, ["node-1", "node-2"]).await;
    let explained = two.explain(&origin.url("/a")).await;
    assert_eq!(explained["fetched_by"], "node-1", "{explained}");

    origin.robots("User-agent: *\nDisallow:\n");
    let purged = purge(&one, "origin", &origin.url("/")).await;
    assert_eq!(purged.status, 200, "{}", purged.body);
    assert!(purged.body.contains("every node"), "{}", purged.body);
    // Node 2 drops its copy when the purge reaches it; until then it
    // judges by the old one.
    until_allowed(&two, &origin.url("/a"), "the purge never reached node 2").await;
    assert_eq!(origin.hits("/robots.txt"), 2);
    // Node 1 judges by node 2's new fetch, fetching nothing itself.
    assert_eq!(one.get(&origin.url("/a")).await.status, 200);
    assert_eq!(origin.hits("/robots.txt"), 2);
    assert_eq!(one.explain(&origin.url("/a")).await["fetched_by"], "node-2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_a_miss_is_fetched_locally_or_refused() {
    let mut redis = need!(Redis::start().await);
    let local = node(&redis, "local", FleetOnUnavailable::Local).await;
    let refuse = node(&redis, "refuse", FleetOnUnavailable::Refuse).await;
    redis.stop();
    let origin = Origin::with_robots("User-agent: *\nDisallow: /a\n").await;
    let started = Instant::now();
    let r = refuse.get(&origin.url("/b")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("fleet"), "{}", r.body);
    assert_eq!(origin.hits("/robots.txt"), 0, "refused without a fetch");
    assert_eq!(local.get(&origin.url("/a")).await.status, 403);
    assert_eq!(local.get(&origin.url("/b")).await.status, 200);
    assert_eq!(origin.hits("/robots.txt"), 1, "fetched by the local node");
    // Each waited on Redis once at most (the timeout), not per request.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // A purge reaches this node alone, and says so with a 503.
    let purged = purge(&local, "origin", &origin.url("/")).await;
    assert_eq!(purged.status, 503, "{}", purged.body);
    assert!(purged.body.contains("this node only"), "{}", purged.body);
    assert!(purged.body.contains("\"purged\": true"), "{}", purged.body);
    // An origin this node never held: nothing dropped here, and the answer
    // says what "purged" means beside "this node only".
    let other = Origin::with_robots("User-agent: *\nDisallow:\n").await;
    let purged = local
        .admin_post(&format!("/purge?origin={}", other.url("/")))
        .await;
    assert_eq!(purged.status, 503, "{}", purged.body);
    assert!(purged.body.contains("\"purged\": false"), "{}", purged.body);
    assert!(
        purged.body.contains("whether this node held a copy"),
        "{}",
        purged.body
    );
}

/// The Redis work of a shared robots.txt miss, on loopback: the node that
/// fetches looks and takes the lease, then stores; another node's miss
/// is one look that brings the entry back (a 20 KB file). p50 and p99
/// printed (`--nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_miss_latency_on_loopback_redis() {
    use robots_proxy::measure::{Look, Take, Text};
    let redis = need!(Redis::start().await);
    let fleet = |node: &str| bare_fleet(RedisTarget::Server(redis.url()), "latency", node);
    let (a, b) = (fleet("a"), fleet("b"));
    let text: Vec<u8> = (0..800)
        .flat_map(|i| format!("Disallow: /section-{i}/private\n").into_bytes())
        .collect();
    let timeout = Duration::from_secs(5);
    let (mut lead, mut follow) = (Vec::new(), Vec::new());
    for i in 0..500 {
        let origin = format!("http://origin{i}.example:80");
        let started = Instant::now();
        let look = a
            .look_robots(&origin, Take::IfNotFresh, timeout, 1 << 20)
            .await;
        let Ok(Look::Lead(None, lease)) = look else {
            panic!("{look:?}")
        };
        let stored = a
            .store_robots(
                &origin,
                &lease,
                b"{}",
                Text::Set(text.clone().into()),
                Duration::from_secs(60),
                Duration::ZERO,
            )
            .await;
        assert_eq!(stored, Ok(true));
        lead.push(started.elapsed());
        let started = Instant::now();
        let look = b
            .look_robots(&origin, Take::IfNotFresh, timeout, 1 << 20)
            .await;
        follow.push(started.elapsed());
        match look {
            Ok(Look::Fresh(shared)) => assert_eq!(shared.text.as_deref(), Some(&text[..])),
            other => panic!("{other:?}"),
        }
    }
    let pct = |v: &mut Vec<Duration>, p: usize| {
        v.sort();
        v[(v.len() * p / 100).min(v.len() - 1)]
    };
    eprintln!(
        "shared robots.txt miss on loopback Redis: fetching node (look + store) p50 {:?} p99 {:?}; \
         other node (look) p50 {:?} p99 {:?}",
        pct(&mut lead, 50),
        pct(&mut lead, 99),
        pct(&mut follow, 50),
        pct(&mut follow, 99)
    );
}

/// A node whose destination policy refuses an origin does not share that
/// refusal: another node, allowed to reach it, fetches robots.txt and
/// judges by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_by_one_nodes_policy_is_not_shared() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nDisallow: /a\n").await;
    let strict = node_with(&redis, "strict", FleetOnUnavailable::Local, |c| {
        c.allow_private_destinations = false;
    })
    .await;
    let open = node(&redis, "open", FleetOnUnavailable::Local).await;
    let refused = strict.get(&origin.url("/b")).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused.body.contains("destination policy"),
        "{}",
        refused.body
    );
    assert_eq!(open.get(&origin.url("/b")).await.status, 200);
    assert_eq!(open.get(&origin.url("/a")).await.status, 403);
    assert_eq!(origin.hits("/robots.txt"), 1);
    assert_eq!(open.explain(&origin.url("/a")).await["fetched_by"], "open");
}

/// A node that misses while another node fetches waits for that fetch
/// instead of fetching too, and the metrics say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_waits_for_the_fetch_under_way_on_another() {
    let redis = need!(Redis::start().await);
    // robots.txt is held until released; the first request for it is
    // announced.
    let robots = "User-agent: *\nDisallow: /a\n";
    let held = HeldRobots::start(robots, robots).await;
    let addr = held.addr;
    let one = node(&redis, "node-1", FleetOnUnavailable::Local).await;
    let two = node(&redis, "node-2", FleetOnUnavailable::Local).await;
    let url = |path: &str| format!("http://{addr}{path}");
    let first = tokio::spawn({
        let (proxy, url) = (one.addr, url("/a"));
        async move { Conn::open(proxy).await.get(&url).await }
    });
    tokio::time::timeout(Duration::from_secs(10), held.arrived.notified())
        .await
        .expect("node 1 fetches robots.txt");
    let second = tokio::spawn({
        let (proxy, url) = (two.addr, url("/b"));
        async move { Conn::open(proxy).await.get(&url).await }
    });
    // Node 2 is waiting once its metric says so.
    two.until_metrics("node 2 to wait", |t| {
        metric(t, "robots_proxy_fleet_robots_waited_total") == Some(1.0)
    })
    .await;
    held.release();
    assert_eq!(first.await.expect("first").status, 403);
    assert_eq!(second.await.expect("second").status, 200);
    assert_eq!(held.fetches(), 1, "one fetch for both");
    let fetched = |text: &str| metric(text, "robots_proxy_fleet_robots_fetched_total");
    assert_eq!(fetched(&one.metrics().await), Some(1.0));
    assert_eq!(fetched(&two.metrics().await), Some(0.0));
    assert_eq!(two.explain(&url("/a")).await["fetched_by"], "node-1");
}

/// A SIGHUP on one node reloads every node of the fleet, each from its own
/// file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_on_one_node_reloads_every_node() {
    let redis = need!(Redis::start().await);
    let (_one_setup, mut one) = process(Some(table(&redis, "reload", 1))).await;
    let (two_setup, mut two) = process(Some(table(&redis, "reload", 2))).await;
    // The nodes hear each other once both are subscribed to the fleet's
    // channel.
    until("both nodes to subscribe", || async {
        match redis.subscribers("robots-proxy:reload:events").await {
            2 => Ok(()),
            n => Err(format!("{n} subscribed")),
        }
    })
    .await;
    let path = two_setup.config_path();
    let text = std::fs::read_to_string(&path).expect("config");
    std::fs::write(
        &path,
        text.replace("agent = \"robots-proxy\"", "agent = \"examplebot\""),
    )
    .expect("edit");
    one.reload("configuration reloaded").await;
    let line = two
        .wait_for("reloading as another node of the fleet did")
        .await;
    assert!(line.contains("node-1"), "{line}");
    let line = two.wait_for("configuration reloaded").await;
    assert!(line.contains("agent"), "{line}");
}

/// Nodes on one host with `allow_private_destinations`: a client of one
/// node cannot reach another node's listeners through it (its admin
/// listener's purge, say), as it cannot reach the node's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_refuses_the_other_nodes_listeners_as_destinations() {
    let redis = need!(Redis::start().await);
    let with_admin = |i| {
        format!(
            "[admin]\nlisten = \"127.0.0.1:0\"\n[fleet]\nunauthenticated = true\n{}",
            table(&redis, "peers", i)
        )
    };
    let (_one_setup, one) = Setup::running("robots-proxy", &with_admin(1)).await;
    let (_two_setup, two) = Setup::running("robots-proxy", &with_admin(2)).await;
    let admin_of = |r: &Running| {
        let line = &r.listening;
        let rest = &line[line.find("admin=").expect("admin=") + "admin=".len()..];
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        rest[..end].to_string()
    };
    let (admin_two, proxy_two) = (admin_of(&two), two.addr);
    for target in [
        format!("http://{admin_two}/healthz"),
        format!("http://{proxy_two}/"),
    ] {
        until("node 1 to know node 2's listeners", || {
            let target = target.clone();
            async move {
                let r = Conn::open(one.addr).await.get(&target).await;
                match r.status {
                    403 if r.body.contains("destination") => Ok(()),
                    s => Err(format!("{target}: {s} {}", r.body)),
                }
            }
        })
        .await;
    }
}

/// A flood of reload messages (from anyone who can PUBLISH on the fleet's
/// channel) costs a node one reload per interval: the first at once, the
/// rest folded into one more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_reload_messages_costs_one_reload_per_interval() {
    let redis = need!(Redis::start().await);
    let (_setup, mut node) = process(Some(table(&redis, "flood", 1))).await;
    until("the node to subscribe", || async {
        match redis.subscribers("robots-proxy:flood:events").await {
            1 => Ok(()),
            n => Err(format!("{n} subscribed")),
        }
    })
    .await;
    for _ in 0..200 {
        redis
            .command(&[
                "PUBLISH",
                "robots-proxy:flood:events",
                "reload\nnode-9\nconfiguration",
            ])
            .await
            .expect("publish");
    }
    for _ in 0..2 {
        let line = node
            .wait_for("reloading as another node of the fleet did")
            .await;
        assert!(line.contains("node-9"), "{line}");
        node.wait_for("configuration reloaded").await;
    }
    // Nothing more is folded: the next reload is the signal's.
    node.signal("HUP");
    let line = node.wait_for("reloading").await;
    assert!(line.contains("on SIGHUP"), "{line}");
}

/// A purge takes the lease away too: a fetch that started before it
/// cannot store what it read afterwards, and the next look fetches again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_overtaken_by_a_purge_is_not_shared() {
    use robots_proxy::measure::{Look, Take, Text};
    let redis = need!(Redis::start().await);
    let fleet = bare_fleet(RedisTarget::Server(redis.url()), "purged", "a");
    let origin = "http://purged.example:80";
    let timeout = Duration::from_secs(5);
    let Ok(Look::Lead(None, lease)) = fleet
        .look_robots(origin, Take::IfNotFresh, timeout, 1 << 20)
        .await
    else {
        panic!("no lease");
    };
    assert!(fleet.purge_robots(origin).await.is_ok());
    let stored = fleet
        .store_robots(
            origin,
            &lease,
            b"{}",
            Text::Drop,
            Duration::from_secs(60),
            Duration::ZERO,
        )
        .await;
    assert_eq!(stored, Ok(false), "stored after the purge");
    let again = fleet
        .look_robots(origin, Take::IfNotFresh, timeout, 1 << 20)
        .await;
    assert!(matches!(again, Ok(Look::Lead(None, _))), "{again:?}");
}

/// A fresh shared entry this node cannot read (corrupted, or written by
/// another version) is fetched again under the lease and replaced, not
/// judged by and not fetched by every node without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_shared_entry_is_fetched_again_under_the_lease() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nDisallow: /a\n").await;
    let key = format!("robots-proxy:shared:{{http://{}}}:robots.1", origin.addr);
    let far = format!("{}", u64::MAX / 2);
    redis
        .command(&["HSET", &key, "meta", "not json", "expires", &far])
        .await
        .expect("HSET");
    let one = node(&redis, "node-1", FleetOnUnavailable::Refuse).await;
    assert_eq!(one.get(&origin.url("/a")).await.status, 403);
    assert_eq!(origin.hits("/robots.txt"), 1);
    let two = node(&redis, "node-2", FleetOnUnavailable::Refuse).await;
    assert_eq!(two.get(&origin.url("/a")).await.status, 403);
    assert_eq!(origin.hits("/robots.txt"), 1, "node 2 read node 1's entry");

    // Larger than any entry a node writes: not even read.
    let other = Origin::with_robots("User-agent: *\nDisallow: /b\n").await;
    let key = format!("robots-proxy:shared:{{http://{}}}:robots.1", other.addr);
    let huge = "x".repeat(2 * 1024 * 1024);
    redis
        .command(&["HSET", &key, "meta", "{}", "text", &huge, "expires", &far])
        .await
        .expect("HSET");
    assert_eq!(one.get(&other.url("/b")).await.status, 403);
    assert_eq!(
        other.hits("/robots.txt"),
        1,
        "fetched again under the lease"
    );
    assert_eq!(two.get(&other.url("/b")).await.status, 403);
    assert_eq!(other.hits("/robots.txt"), 1, "node 2 read node 1's entry");
    match redis.command(&["HSTRLEN", &key, "text"]).await {
        Ok(redis::Value::Int(n)) => assert!(n < 1024, "replaced: {n} bytes"),
        other => panic!("{other:?}"),
    }
}

/// A command that fails on one key (here a schedule key of the wrong
/// type) fails that request only: the node goes on sharing everything
/// else, and Redis still counts as reachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_command_on_one_key_is_no_outage() {
    let redis = need!(Redis::start().await);
    let broken = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let fine = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let key = |o: &Origin| {
        format!(
            "robots-proxy:shared:{{http://{}}}:robots-proxy:next",
            o.addr
        )
    };
    redis
        .command(&["HSET", &key(&broken), "not", "a slot"])
        .await
        .expect("HSET");
    let one = node(&redis, "node-1", FleetOnUnavailable::Refuse).await;
    let r = one.get(&broken.url("/a")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(one.get(&fine.url("/a")).await.status, 200);
    assert_eq!(
        redis.command(&["EXISTS", &key(&fine)]).await.ok(),
        Some(redis::Value::Int(1)),
        "the other origin was booked on Redis"
    );
    one.assert_metric("robots_proxy_fleet_reachable", 1.0, "one key failed")
        .await;
}

/// A node that lost Redis (here: restarted empty) may have missed purges:
/// once Redis answers again it drops its robots.txt copies and reads them
/// from Redis again (fetching what Redis lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_are_dropped_when_redis_comes_back() {
    let mut redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nDisallow: /a\n").await;
    let one = node(&redis, "node-1", FleetOnUnavailable::Local).await;
    assert_eq!(one.get(&origin.url("/a")).await.status, 403);
    origin.robots("User-agent: *\nDisallow:\n");
    let port = redis.port;
    redis.stop();
    let _redis = Redis::start_on(port).await.expect("restarted");
    until_allowed(&one, &origin.url("/a"), "the old copy was kept").await;
    assert_eq!(origin.hits("/robots.txt"), 2);
}

/// Only the subscription is cut (`CLIENT KILL TYPE pubsub`), the node's
/// commands go on: a purge said before it subscribes again is not heard,
/// so once subscribed again the node drops its copies and reads the
/// purged origin from Redis again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_missed_while_unsubscribed_is_made_good_on_subscribing_again() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nDisallow: /a\n").await;
    let (one, two) = two_nodes_judged(&redis, &origin, ["node-1", "node-2"]).await;
    origin.robots("User-agent: *\nDisallow:\n");
    let subscribers = || redis.subscribers("robots-proxy:shared:events");
    assert_eq!(subscribers().await, 2, "both nodes subscribed");
    let heard = purge_unheard(&redis, &two, "origin", &origin.url("/")).await;
    assert_eq!(heard["fleet"]["told"], "every node", "{heard}");
    // Node 2 purged its own copy; node 1 heard nothing, and judges by its
    // old copy until it has subscribed again.
    assert_eq!(two.get(&origin.url("/a")).await.status, 200);
    until_allowed(&one, &origin.url("/a"), "node 1 kept the purged copy").await;
    assert_eq!(subscribers().await, 2, "both nodes subscribed again");
    assert_eq!(
        origin.hits("/robots.txt"),
        2,
        "node 1 read node 2's new fetch from Redis"
    );
    let metrics = one.metrics().await;
    assert!(
        metrics.contains("robots_proxy_fleet_reachable 1"),
        "{metrics}"
    );
}

/// One slow answer is no reason to read everything again: Redis stopped
/// for longer than the timeout and continued (the subscription stays
/// open, nothing said is lost): the node's shared copies are kept, and a
/// request for a cached origin is a hit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_redis_costs_no_copies() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nDisallow: /a\n").await;
    let one = node(&redis, "node-1", FleetOnUnavailable::Local).await;
    assert_eq!(one.get(&origin.url("/a")).await.status, 403);
    let reachable = |v: f64| move |t: &str| metric(t, "robots_proxy_fleet_reachable") == Some(v);
    redis.signal("STOP");
    until_all(
        std::slice::from_ref(&one),
        "Redis unreachable",
        reachable(0.0),
    )
    .await;
    redis.signal("CONT");
    until_all(
        std::slice::from_ref(&one),
        "Redis reachable",
        reachable(1.0),
    )
    .await;
    let hits =
        |t: &str| metric(t, "robots_proxy_robots_cache_events_total{event=\"hit\"}").unwrap_or(0.0);
    let before = hits(&one.metrics().await);
    assert_eq!(one.get(&origin.url("/a")).await.status, 403);
    let after = hits(&one.metrics().await);
    assert_eq!(after, before + 1.0, "the copy was kept: a hit");
    assert_eq!(origin.hits("/robots.txt"), 1);
}

/// Cuts every subscription and sends the purge of `what` `url` through
/// `node` before they are made again (a node waits a second before it
/// subscribes again), as often as it takes for nobody to hear it; returns
/// the purge's answer.
async fn purge_unheard(redis: &Redis, node: &Proxy, what: &str, url: &str) -> serde_json::Value {
    for _ in 0..10 {
        redis
            .command(&["CLIENT", "KILL", "TYPE", "pubsub"])
            .await
            .expect("CLIENT KILL");
        let purged = purge(node, what, url).await;
        assert_eq!(purged.status, 200, "{}", purged.body);
        let answer: serde_json::Value = serde_json::from_str(&purged.body).expect("JSON");
        if answer["fleet"]["heard_by"] == 0 {
            return answer;
        }
    }
    panic!("a node subscribed again at once every time");
}

/// Response-cache purges said while a node's subscription was cut are
/// kept in Redis: once subscribed again the node applies them, and
/// serves the purged URLs from the origin again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_cache_purges_missed_while_unsubscribed_are_applied_on_subscribing_again() {
    let redis = need!(Redis::start().await);
    let paths = ["/u", "/dir/1", "/kept"];
    let origin = cacheable(&paths).await;
    let cached_node = |name| node_with(&redis, name, FleetOnUnavailable::Local, cache);
    let (one, two) = (cached_node("node-1").await, cached_node("node-2").await);
    cached_by(&one, &origin, &paths).await;
    let url = purge_unheard(&redis, &two, "url", &origin.url("/u")).await;
    assert_eq!(url["fleet"]["told"], "every node", "{url}");
    let prefix = purge_unheard(&redis, &two, "prefix", &origin.url("/dir/")).await;
    assert_eq!(prefix["fleet"]["told"], "every node", "{prefix}");
    // Node 1 heard neither; once subscribed again it reads them from Redis.
    until_fetched_again(
        &one,
        &origin,
        &["/u", "/dir/1"],
        "node 1 to drop the purged URLs",
    )
    .await;
    one.get(&origin.url("/kept")).await;
    assert_eq!(origin.hits("/kept"), 1, "what was not purged stays cached");
}

/// A node stopped while a URL is purged finds the purge kept in Redis
/// when it starts again: what its disk cache held for that URL goes,
/// what was not purged stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_applies_the_purges_said_while_it_was_stopped() {
    let redis = need!(Redis::start().await);
    let paths = ["/u", "/kept"];
    let origin = cacheable(&paths).await;
    let state = tempfile::tempdir().expect("tempdir");
    let start = |name, dir: Option<std::path::PathBuf>| {
        node_with(&redis, name, FleetOnUnavailable::Local, move |c| {
            cache(c);
            if let Some(dir) = dir {
                c.state_dir = Some(dir);
            }
        })
    };
    let mut one = start("node-1", Some(state.path().to_path_buf())).await;
    cached_by(&one, &origin, &paths).await;
    one.stop();
    one.finished().await;
    let two = start("node-2", None).await;
    let purged = purge(&two, "url", &origin.url("/u")).await;
    assert_eq!(purged.status, 200, "{}", purged.body);
    let one = start("node-1", Some(state.path().to_path_buf())).await;
    let what = "the restarted node to drop the purged URL from its disk cache";
    until_fetched_again(&one, &origin, &["/u"], what).await;
    one.get(&origin.url("/kept")).await;
    assert_eq!(origin.hits("/kept"), 1, "what was not purged stays cached");
}

/// The response cache on.
fn cache(c: &mut Config) {
    c.cache.enabled = true;
}

/// An origin that allows everything, its `paths` cacheable for ten
/// minutes.
async fn cacheable(paths: &[&str]) -> Origin {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    for p in paths {
        origin.route(p, Reply::ok("x").header("cache-control", "max-age=600"));
    }
    origin
}

/// `node` asked twice for each of `paths`: the origin sees each once, the
/// second is served from the node's cache.
async fn cached_by(node: &Proxy, origin: &Origin, paths: &[&str]) {
    for p in paths {
        node.get(&origin.url(p)).await;
        node.get(&origin.url(p)).await;
        assert_eq!(origin.hits(p), 1, "{p}: the node serves it from its cache");
    }
}

/// Asks `node` for each of `paths`, every 50 ms, until the origin has seen
/// each a second time (the node's cached copy dropped); fails with `what`
/// and the counts after 15 s.
async fn until_fetched_again(node: &Proxy, origin: &Origin, paths: &[&str], what: &str) {
    until_paced(
        what,
        Duration::from_secs(15),
        Duration::from_millis(50),
        || async {
            for p in paths {
                node.get(&origin.url(p)).await;
            }
            let hits: Vec<(&str, usize)> = paths.iter().map(|p| (*p, origin.hits(p))).collect();
            if hits.iter().all(|(_, n)| *n >= 2) {
                Ok(())
            } else {
                Err(format!("still served from the cache: origin hits {hits:?}"))
            }
        },
    )
    .await;
}

/// The shared entry's key for `origin` (fleet "shared").
fn entry_key(origin: &Origin) -> String {
    format!("robots-proxy:shared:{{http://{}}}:robots.1", origin.addr)
}

/// Waits until the shared entry of `origin` holds `field`.
async fn wait_stored(redis: &Redis, origin: &Origin, field: &str) {
    let key = entry_key(origin);
    until(&format!("{field} to be stored"), || async {
        (redis.int(&["HEXISTS", &key, field]).await == 1).then_some(())
    })
    .await;
}

/// Waits until `lease` is given back (gone from Redis).
async fn until_given_back(redis: &Redis, lease: &str) {
    until("the lease to be given back", || async {
        (!redis.exists(lease).await).then_some(())
    })
    .await;
}

/// A shared entry whose `expires` is not a finite number (a corrupted or
/// hostile hash) counts as expired: the next node to miss fetches again
/// once, stores a good entry, and every node judges by that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_expiring_at_no_finite_time_is_fetched_again_once() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nDisallow: /a\n").await;
    let one = node(&redis, "node-1", FleetOnUnavailable::Refuse).await;
    assert_eq!(one.get(&origin.url("/a")).await.status, 403);
    wait_stored(&redis, &origin, "text").await;
    // Node 1's lease is given back once its entry is stored.
    let lease = format!("robots-proxy:shared:{{http://{}}}:lease", origin.addr);
    until_given_back(&redis, &lease).await;
    origin.robots("User-agent: *\nDisallow:\n");
    redis
        .command(&["HSET", &entry_key(&origin), "expires", "inf"])
        .await
        .expect("HSET");
    let two = node(&redis, "node-2", FleetOnUnavailable::Refuse).await;
    let r = two.get(&origin.url("/a")).await;
    assert_eq!(
        r.status, 200,
        "judged by the entry that never expires: {}",
        r.body
    );
    assert_eq!(origin.hits("/robots.txt"), 2, "fetched again");
    for _ in 0..3 {
        assert_eq!(two.get(&origin.url("/a")).await.status, 200);
    }
    let three = node(&redis, "node-3", FleetOnUnavailable::Refuse).await;
    assert_eq!(three.get(&origin.url("/a")).await.status, 200);
    assert_eq!(origin.hits("/robots.txt"), 2, "once");
    assert_eq!(
        three.explain(&origin.url("/a")).await["fetched_by"],
        "node-2"
    );
    let expires = redis.text(&["HGET", &entry_key(&origin), "expires"]).await;
    assert!(expires.parse::<u64>().is_ok(), "{expires}");
}

/// A stale entry keeps the text Redis holds; when the hash is gone (evicted,
/// deleted) but the lease still holds, nothing is stored (an entry
/// without its text could be read by no node) and the lease is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_entry_whose_text_is_gone_is_not_stored() {
    use robots_proxy::measure::{Look, Take, Text};
    let redis = need!(Redis::start().await);
    let fleet = bare_fleet(RedisTarget::Server(redis.url()), "evicted", "a");
    let origin = "http://evicted.example:80";
    let timeout = Duration::from_secs(5);
    let look = || fleet.look_robots(origin, Take::IfNotFresh, timeout, 1 << 20);
    let Ok(Look::Lead(None, lease)) = look().await else {
        panic!("no lease");
    };
    let text = b"User-agent: *\nDisallow: /a\n";
    let stored = fleet
        .store_robots(
            origin,
            &lease,
            b"{}",
            Text::Set(text[..].to_vec().into()),
            Duration::from_millis(1),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(stored, Ok(true));
    let key = "robots-proxy:evicted:{http://evicted.example:80}:robots.1";
    redis.until_entry_expired(key).await;
    let Ok(Look::Lead(Some(expired), lease)) = look().await else {
        panic!("no lease over the expired entry");
    };
    assert_eq!(expired.text.as_deref(), Some(&text[..]));
    redis.command(&["DEL", key]).await.expect("DEL");
    let stored = fleet
        .store_robots(
            origin,
            &lease,
            b"{}",
            Text::Keep,
            Duration::from_secs(60),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(stored, Ok(false), "stored without its text");
    let again = look().await;
    assert!(matches!(again, Ok(Look::Lead(None, _))), "{again:?}");
}

/// The proxy's own shortage says nothing about the origin, even when a
/// good copy makes the node judge by it (stale): out of file
/// descriptors, the node that took the lease stores nothing and gives
/// the lease back; the shared entry stays the origin's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_copy_used_for_the_proxys_own_shortage_is_not_shared() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let extra = format!(
        "[robots]\ndefault_ttl = \"1s\"\nmin_ttl = \"1s\"\n\
         [fleet]\nunauthenticated = true\nredis = {:?}\nname = \"shortage\"\nnode = \"node-1\"\ntimeout = \"1s\"\n",
        redis.url()
    );
    let (_setup, mut running) = Setup::running("TestBot/1.0", &extra).await;
    let pid = running.child.id();
    let mut client = Conn::open(running.addr).await;
    assert_eq!(client.get(&origin.url("/private")).await.status, 403);
    let key = format!("robots-proxy:shortage:{{http://{}}}:robots.1", origin.addr);
    let lease = format!("robots-proxy:shortage:{{http://{}}}:lease", origin.addr);
    until("the entry to be stored", || async {
        (redis.int(&["HEXISTS", &key, "text"]).await == 1).then_some(())
    })
    .await;
    until_given_back(&redis, &lease).await;
    let meta = redis.text(&["HGET", &key, "meta"]).await;
    assert!(meta.contains("\"fresh\""), "{meta}");
    // Both copies expire (1 s): the shared one on Redis's clock, the node's
    // own no later. Then the node runs out of descriptors.
    redis.until_entry_expired(&key).await;
    let (used, highest) = descriptors(pid);
    let used = used as u64;
    let limit = highest + 1 + 24;
    limit_descriptors(pid, limit);
    let mut hogs = Vec::new();
    for _ in 0..limit - used + 16 {
        hogs.push(
            tokio::net::TcpStream::connect(running.addr)
                .await
                .expect("connect"),
        );
    }
    running.wait_for("accept failed").await;
    let r = client.get(&origin.url("/private")).await;
    assert_eq!(r.status, 403, "judged by the good copy: {}", r.body);
    running.wait_for("lack of a local resource").await;
    assert_eq!(origin.hits("/robots.txt"), 1);
    until_given_back(&redis, &lease).await;
    drop(hogs);
    assert_eq!(
        redis.text(&["HGET", &key, "meta"]).await,
        meta,
        "the node's own shortage was shared"
    );
}

/// A failure with no answer from the origin (here node 1's fetch timing
/// out) may be the node's own network: it is not shared, and the next
/// node fetches for itself. An answer of the origin's (a 503) is shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_with_no_answer_from_the_origin_is_not_shared() {
    let redis = need!(Redis::start().await);
    let origin = Origin::start().await;
    let text = "User-agent: *\nDisallow: /a\n";
    origin.route(
        "/robots.txt",
        Reply::ok(text.to_string()).delay(Duration::from_secs(3)),
    );
    let one = node_with(&redis, "node-1", FleetOnUnavailable::Refuse, |c| {
        c.robots.fetch_timeout = Duration::from_millis(500);
    })
    .await;
    let r = one.get(&origin.url("/b")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("unreachable"), "{}", r.body);
    origin.robots(text);
    let two = node(&redis, "node-2", FleetOnUnavailable::Refuse).await;
    let r = two.get(&origin.url("/b")).await;
    assert_eq!(r.status, 200, "refused for node 1's failure: {}", r.body);
    assert_eq!(two.get(&origin.url("/a")).await.status, 403);
    assert_eq!(origin.hits("/robots.txt"), 2, "node 2 fetched for itself");
    // Node 1 keeps its own entry, as without a fleet.
    assert_eq!(one.get(&origin.url("/b")).await.status, 503);

    let down = Origin::with_robots_reply(Reply::status(503)).await;
    assert_eq!(one.get(&down.url("/b")).await.status, 503);
    let r = two.get(&down.url("/b")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(down.hits("/robots.txt"), 1, "node 2 judged by node 1's 503");
    assert_eq!(two.explain(&down.url("/b")).await["fetched_by"], "node-1");
}

/// The requests waiting for a fetch get its entry when the fetch is
/// done, not once Redis has stored it: here Redis stops answering
/// (SIGSTOP) while the file is on its way, and the request is answered
/// without waiting for the fleet's timeout (2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_for_a_fetch_do_not_wait_for_its_store() {
    let redis = need!(Redis::start().await);
    let origin = HeldRobots::start(
        "User-agent: *\nDisallow: /a\n",
        "User-agent: *\nDisallow: /a\n",
    )
    .await;
    let (addr, arrived) = (origin.addr, origin.arrived.clone());
    let mut fleet = fleet_config(&redis, "node-1", FleetOnUnavailable::Refuse);
    fleet.timeout = Duration::from_secs(2);
    let one = Proxy::start_with(move |c| c.fleet = Some(fleet)).await;
    let request = tokio::spawn({
        let (proxy, url) = (one.addr, format!("http://{addr}/a"));
        async move { Conn::open(proxy).await.get(&url).await }
    });
    tokio::time::timeout(Duration::from_secs(10), arrived.notified())
        .await
        .expect("node 1 fetches robots.txt");
    redis.signal("STOP");
    let released = Instant::now();
    origin.release();
    let answer = request.await.expect("request");
    let took = released.elapsed();
    redis.signal("CONT");
    assert_eq!(answer.status, 403, "{}", answer.body);
    assert!(
        took < Duration::from_secs(1),
        "the request waited {took:?} for Redis"
    );
}

/// Two nodes given one name (say two containers of one image) are two
/// nodes: each hears the other's purges, and both count as live nodes
/// (each with a rank of its own in the interleaved fallback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_of_one_name_hear_each_others_purges() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nDisallow: /a\n").await;
    let (one, two) = two_nodes_judged(&redis, &origin, ["twin", "twin"]).await;
    origin.robots("User-agent: *\nDisallow:\n");
    let purged = purge(&one, "origin", &origin.url("/")).await;
    assert_eq!(purged.status, 200, "{}", purged.body);
    until_allowed(
        &two,
        &origin.url("/a"),
        "node 2 took node 1's purge for its own",
    )
    .await;
    assert_eq!(one.get(&origin.url("/a")).await.status, 200);
    assert_eq!(origin.hits("/robots.txt"), 2);
    until_all(&[one, two], "two live nodes of one name", |t| {
        metric(t, "robots_proxy_fleet_live_nodes") == Some(2.0)
    })
    .await;
}
