//! Fleet mode on a real three-master Redis Cluster (`fleet.redis` a list
//! of its nodes' URLs): the proxies keep one Crawl-delay schedule per
//! origin and fetch its robots.txt once, as on one server; origins spread
//! over the masters, and every key of one origin is in one slot. And on a Redis reached over TLS
//! (`rediss://`). Skipped, with a message, without `redis-server` and
//! `redis-cli`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use robots_proxy::config::{FleetConfig, FleetOnUnavailable, RedisTarget};

use super::fleet::{TOLERANCE, gaps, proxies, schedule_key, until_shared_again};
use crate::support::binary::{self, Running};
use crate::support::fleet::{self, until_allowed};
use crate::support::redis::{RedisCluster, TlsRedis, bare_fleet};
use crate::support::{Conn, Origin, Proxy, get_with, need};

/// Fleet "cluster" on `cluster` (a 1 s timeout, `refuse`).
fn fleet(cluster: &RedisCluster) -> FleetConfig {
    fleet::config(
        RedisTarget::Cluster(cluster.urls()),
        "cluster",
        Duration::from_secs(1),
        FleetOnUnavailable::Refuse,
    )
}

/// The fleet's keys of origins on each node, by node (the nodes'
/// heartbeat set, `{nodes}`, left out).
async fn keys_by_node(cluster: &RedisCluster) -> Vec<Vec<String>> {
    let mut all = Vec::new();
    for node in &cluster.nodes {
        let mut keys = node.keys("robots-proxy:cluster:*").await;
        // The origins' keys: not the heartbeats', nor the nodes' audit
        // witness lists (`fleet::witness`).
        keys.retain(|k| !k.contains(":{nodes}:") && !k.contains(":{audit:"));
        all.push(keys);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_on_a_redis_cluster_keeps_one_crawl_delay_schedule() {
    let cluster = need!(RedisCluster::start().await);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let nodes = proxies(3, Some(fleet(&cluster))).await;
    let gaps = gaps(&origin, &nodes, 6).await;
    eprintln!("page gaps through a fleet on a Redis Cluster: {gaps:?}");
    for g in &gaps {
        assert!(
            *g >= Duration::from_secs(1) - TOLERANCE,
            "pages closer than the Crawl-delay through a fleet on a cluster: {gaps:?}"
        );
    }
    // One fetch of robots.txt for the fleet (the shared entry, and the
    // fetching node's message to the others, through the cluster).
    assert_eq!(origin.hits("/robots.txt"), 1, "robots.txt fetched once");
    // The origin's keys (its schedule, its robots.txt entry) on one master.
    let keys = keys_by_node(&cluster).await;
    let held: Vec<usize> = keys.iter().map(Vec::len).collect();
    eprintln!("the origin's keys by master: {keys:?}");
    assert_eq!(held.iter().filter(|n| **n > 0).count(), 1, "{keys:?}");
    assert!(
        keys.concat()
            .iter()
            .any(|k| k.ends_with(":robots-proxy:next")),
        "{keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_spread_over_the_masters_and_each_origin_keeps_one_slot() {
    let cluster = need!(RedisCluster::start().await);
    let mut origins = Vec::new();
    for _ in 0..12 {
        origins.push(Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await);
    }
    // Two agents: two schedules (two keys) per origin, and its robots.txt.
    let fleet = fleet(&cluster);
    let proxy = Proxy::start_with(move |c| {
        c.agents.insert("alphabot".into(), "alphabot".into());
        c.fleet = Some(fleet);
    })
    .await;
    let sent = origins.iter().flat_map(|o| {
        let url = o.url("/page");
        [
            proxy.request(get_with(&url, &[("user-agent", "curl/8.0")])),
            proxy.request(get_with(&url, &[("user-agent", "AlphaBot/1.0")])),
        ]
    });
    for r in futures_util::future::join_all(sent).await {
        assert_eq!(r.status, 200, "{}", r.body);
    }

    // Each origin's keys, found on the node that holds them.
    let by_node = keys_by_node(&cluster).await;
    let mut origin_nodes: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (node, keys) in by_node.iter().enumerate() {
        for key in keys {
            let tag = key
                .split_once('{')
                .and_then(|(_, rest)| rest.split_once('}'))
                .map(|(tag, _)| tag.to_string())
                .unwrap_or_else(|| panic!("untagged key {key}"));
            origin_nodes.entry(tag).or_default().push(node);
        }
    }
    let per_node: Vec<usize> = by_node.iter().map(Vec::len).collect();
    eprintln!("fleet keys per cluster master: {per_node:?} (12 origins, 2 agents)");
    assert_eq!(origin_nodes.len(), 12, "{origin_nodes:?}");
    for (origin, on) in &origin_nodes {
        // Two schedules and the shared robots.txt entry.
        assert!(on.len() >= 3, "{origin}: {on:?}");
        assert!(
            on.iter().all(|n| *n == on[0]),
            "{origin}'s keys on several nodes: {on:?}"
        );
    }
    assert!(
        per_node.iter().filter(|n| **n > 0).count() > 1,
        "every origin on one master: {per_node:?}"
    );

    // And by the cluster's own reckoning: one slot per origin, whatever
    // the key's suffix.
    let node = &cluster.nodes[0];
    for keys in &by_node {
        for key in keys {
            let (prefix, _) = key.rsplit_once('}').expect("tagged");
            let slot = node.keyslot(key).await;
            for suffix in ["robots", "lease", "other:next"] {
                let sibling = format!("{prefix}}}:{suffix}");
                assert_eq!(node.keyslot(&sibling).await, slot, "{key} / {sibling}");
            }
        }
    }
}

/// Stopped: refused at once (`refuse`), by a node that used the cluster and
/// by one started while it is down; back: both book on it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_stopped_is_refused_within_the_timeout_and_used_again_once_back() {
    let mut cluster = need!(RedisCluster::start().await);
    let timeout = Duration::from_millis(300);
    let config = FleetConfig {
        timeout,
        ..fleet(&cluster)
    };
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let mut nodes = proxies(1, Some(config.clone())).await;
    assert_eq!(nodes[0].get(&origin.url("/a")).await.status, 200);

    cluster.stop();
    nodes.extend(proxies(1, Some(config)).await);
    for (i, node) in nodes.iter().enumerate() {
        let started = Instant::now();
        let r = node.get(&origin.url(&format!("/b{i}"))).await;
        let took = started.elapsed();
        assert_eq!(r.status, 503, "node {i}: {}", r.body);
        assert!(
            took < timeout + Duration::from_millis(500),
            "node {i} took {took:?}"
        );
        assert_eq!(origin.hits(&format!("/b{i}")), 0);
    }

    // The cluster back (same nodes and slots, no keys): bookings go to it
    // again within a retry period or a few.
    cluster.restart().await;
    let restarted = Instant::now();
    for (n, node) in nodes.iter().enumerate() {
        let left = Duration::from_secs(20).saturating_sub(restarted.elapsed());
        let what = format!("node {n} to use the cluster again");
        until_shared_again(node, &origin, &format!("/c{n}-"), left, &what).await;
    }
    eprintln!(
        "cluster back: both nodes book on it within {:?}",
        restarted.elapsed()
    );
    let keys = keys_by_node(&cluster).await.concat();
    assert!(
        keys.iter().any(|k| k.ends_with(":robots-proxy:next")),
        "the schedule's key, booked on the cluster again: {keys:?}"
    );
}

/// A purge on one node reaches the other through the cluster: the message
/// is published on the channel's master and heard on the first node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_on_one_node_reaches_the_others_through_the_cluster() {
    let cluster = need!(RedisCluster::start().await);
    let origin = Origin::with_robots("User-agent: *\nDisallow: /a\n").await;
    let node = |name| fleet::node(Some(fleet::named(&fleet(&cluster), name)), |_| {});
    let (one, two) = (node("node-1").await, node("node-2").await);
    assert_eq!(one.get(&origin.url("/a")).await.status, 403);
    assert_eq!(two.get(&origin.url("/a")).await.status, 403);
    assert_eq!(
        origin.hits("/robots.txt"),
        1,
        "node 2 judged by node 1's fetch"
    );

    origin.robots("User-agent: *\nDisallow:\n");
    let purged = one
        .admin_post(&format!("/purge?origin={}", origin.url("/")))
        .await;
    assert_eq!(purged.status, 200, "{}", purged.body);
    assert!(purged.body.contains("every node"), "{}", purged.body);
    until_allowed(&two, &origin.url("/a"), "the purge never reached node 2").await;
    assert_eq!(one.get(&origin.url("/a")).await.status, 200);
    assert_eq!(
        origin.hits("/robots.txt"),
        2,
        "fetched again once, by node 2"
    );
}

/// `rediss://`: the proxy (the real binary, so its trust store can be set
/// with `SSL_CERT_FILE` for it alone) books on a Redis it reaches over TLS
/// when it trusts the server's CA, and refuses when it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_over_tls_books_on_a_redis_whose_certificate_it_trusts() {
    let tls = need!(TlsRedis::start().await);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let setup = binary::Setup::new();
    setup.write_config(
        "robots-proxy",
        &format!(
            "[fleet]\nunauthenticated = true\nredis = \"rediss://localhost:{}/0\"\nname = \"tls\"\n\
             timeout = \"2s\"\non_unavailable = \"refuse\"\n",
            tls.tls_port
        ),
    );
    let start = |trust: Option<&std::path::Path>| {
        let mut command = binary::command();
        command.env("RUST_LOG", "info").env_remove("NOTIFY_SOCKET");
        match trust {
            Some(ca) => command.env("SSL_CERT_FILE", ca),
            None => command.env_remove("SSL_CERT_FILE"),
        };
        command.args(["run", "--config"]).arg(setup.config_path());
        Running::start(command)
    };

    let trusting = start(Some(&tls.ca_file)).await;
    let r = Conn::open(trusting.addr).await.get(&origin.url("/a")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let key = schedule_key("tls", &origin);
    assert!(tls.redis.exists(&key).await, "{key}");
    drop(trusting);

    // The system's roots only: Redis's certificate is not trusted.
    let mut doubting = start(None).await;
    let r = Conn::open(doubting.addr).await.get(&origin.url("/b")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(origin.hits("/b"), 0);
    let warned = doubting.wait_for("Redis unavailable").await;
    assert!(warned.contains("certificate"), "{warned}");
}

/// The latency a booking adds on a loopback cluster: ~1000 bookings over
/// as many origins (so over every master), p50 and p99 printed
/// (`--nocapture`), each answered within the fleet's timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn booking_latency_on_a_loopback_cluster() {
    let cluster = need!(RedisCluster::start().await);
    let fleet = bare_fleet(
        RedisTarget::Cluster(cluster.urls()),
        "latency",
        "latency-test",
    );
    let took = fleet::book_many(&fleet, 1000).await;
    let per_node: Vec<usize> = keys_by_node_named(&cluster, "latency").await;
    assert_eq!(per_node.iter().sum::<usize>(), 1000, "{per_node:?}");
    let (p50, p99) = fleet::p50_p99(&took);
    eprintln!(
        "fleet booking on a loopback Redis Cluster: p50 {p50:?}, p99 {p99:?}, \
         keys per master {per_node:?}"
    );
}

/// How many of fleet `name`'s keys each node holds.
async fn keys_by_node_named(cluster: &RedisCluster, name: &str) -> Vec<usize> {
    let mut all = Vec::new();
    for node in &cluster.nodes {
        all.push(node.keys(&format!("robots-proxy:{name}:*")).await.len());
    }
    all
}
