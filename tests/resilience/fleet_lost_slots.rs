//! A fleet's shared schedule around a Redis outage, and after its keys
//! are lost (`FLUSHALL`), with requests queued on every node: the slots
//! the nodes held are kept, so no two pages reach the origin closer than
//! the Crawl-delay, neither at the switch into the outage, nor during it,
//! nor at the return, nor after the loss. Two nodes, four clients each
//! sending one request after another; an origin that logs arrivals.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use robots_proxy::config::FleetOnUnavailable;

use crate::support::fleet::{self, gaps_of, min_gap, on, until_all};
use crate::support::redis::Redis;
use crate::support::{Origin, Proxy, metric, need, until_within};

use super::fleet::TOLERANCE;

/// Clients per node.
const CLIENTS: usize = 4;

/// Two nodes of one fleet (`local` when Redis is unavailable, a short
/// timeout), once each knows both live.
async fn two_nodes(redis: &Redis) -> Vec<Proxy> {
    let config = on(redis, Duration::from_millis(200), FleetOnUnavailable::Local);
    let nodes = fleet::nodes(2, Some(config), |c| {
        c.politeness.max_wait = Duration::from_secs(60)
    })
    .await;
    until_all(&nodes, "two live nodes", |t| {
        metric(t, "robots_proxy_fleet_live_nodes") == Some(2.0)
    })
    .await;
    nodes
}

/// [`CLIENTS`] clients per node, each asking for `/p<node>-<client>-<n>`
/// one after another until `stop`; counts the answers.
struct Load {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
    clients: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(origin: &Origin, nodes: &[Proxy]) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicUsize::new(0));
        let mut clients = Vec::new();
        for (k, node) in nodes.iter().enumerate() {
            for c in 0..CLIENTS {
                let (addr, stop, answered) = (node.addr, stop.clone(), answered.clone());
                let base = origin.url(&format!("/p{k}-{c}-"));
                clients.push(tokio::spawn(async move {
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let r = crate::support::Conn::open(addr)
                            .await
                            .get(&format!("{base}{n}"))
                            .await;
                        assert!(r.status == 200 || r.status == 429, "{}", r.body);
                        answered.fetch_add(1, Ordering::Relaxed);
                        n += 1;
                    }
                }));
            }
        }
        Load {
            stop,
            answered,
            clients,
        }
    }

    async fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        for c in self.clients {
            c.await.expect("client");
        }
    }
}

/// Waits until `n` more pages have reached `origin`.
async fn until_pages(origin: &Origin, n: usize, what: &str) {
    let from = origin.arrived(&["/p"]).len();
    until_within(what, Duration::from_secs(40), || async {
        let now = origin.arrived(&["/p"]).len();
        if now >= from + n {
            Ok(())
        } else {
            Err(now.to_string())
        }
    })
    .await;
}

fn assert_spaced(what: &str, origin: &Origin, interval: Duration) {
    let gaps = gaps_of(&origin.arrived(&["/p"]));
    let under: Vec<&Duration> = gaps.iter().filter(|g| **g < interval - TOLERANCE).collect();
    eprintln!(
        "{what}: {} pages, min gap {:?}, {} gaps under the interval; every gap: {gaps:?}",
        gaps.len() + 1,
        min_gap(&gaps),
        under.len()
    );
    assert!(
        under.is_empty(),
        "{what}: pages closer than the Crawl-delay: {under:?}"
    );
}

/// Redis stopped (SIGSTOP) with requests queued on both nodes, then
/// continued: the pages keep the interval into the outage, through it
/// and out of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_with_requests_queued_keeps_the_interval() {
    let redis = need!(Redis::start().await);
    let interval = Duration::from_secs(1);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let nodes = two_nodes(&redis).await;
    let load = Load::start(&origin, &nodes);
    until_pages(&origin, 3, "pages on the shared schedule").await;
    redis.signal("STOP");
    until_all(&nodes, "Redis unreachable", |t| {
        metric(t, "robots_proxy_fleet_reachable") == Some(0.0)
    })
    .await;
    until_pages(&origin, 6, "pages during the outage").await;
    redis.signal("CONT");
    until_all(&nodes, "sharing again", |t| {
        metric(t, "robots_proxy_fleet_reachable") == Some(1.0)
    })
    .await;
    until_pages(&origin, 5, "pages after the outage").await;
    let answered = load.answered.load(Ordering::Relaxed);
    load.finish().await;
    eprintln!("answers: {answered}");
    assert_spaced("SIGSTOP with requests queued", &origin, interval);
}

/// The fleet's keys lost mid-run (`FLUSHALL`, as a failover to an empty
/// replica would) with requests queued on both nodes: the pages keep the
/// interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_lost_with_requests_queued_keep_the_interval() {
    let redis = need!(Redis::start().await);
    let interval = Duration::from_secs(1);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let nodes = two_nodes(&redis).await;
    let load = Load::start(&origin, &nodes);
    until_pages(&origin, 3, "pages on the shared schedule").await;
    assert_eq!(
        redis.command(&["FLUSHALL"]).await.ok(),
        Some(redis::Value::Okay)
    );
    until_pages(&origin, 8, "pages after the loss").await;
    load.finish().await;
    assert_spaced("FLUSHALL with requests queued", &origin, interval);
}

/// The fleet's keys lost while one node only holds requests (it books
/// nothing that would find the loss): it finds it by the fleet's marker,
/// moves its held requests to its own slots and books them on Redis, so a
/// request on another node that never booked the origin goes after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_lost_under_a_node_that_only_holds_requests_are_found() {
    let redis = need!(Redis::start().await);
    let interval = Duration::from_secs(1);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let nodes = two_nodes(&redis).await;
    let first = nodes[1].get(&origin.url("/p-first")).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let held: Vec<_> = (0..3)
        .map(|i| {
            let (addr, url) = (nodes[1].addr, origin.url(&format!("/p-held{i}")));
            tokio::spawn(async move { crate::support::Conn::open(addr).await.get(&url).await })
        })
        .collect();
    let key = super::fleet::schedule_key("test", &origin);
    until_within("three requests held", Duration::from_secs(10), || async {
        let n = metric(&nodes[1].metrics().await, "robots_proxy_politeness_waiting");
        (n == Some(3.0)).then_some(())
    })
    .await;
    assert_eq!(
        redis.command(&["FLUSHALL"]).await.ok(),
        Some(redis::Value::Okay)
    );
    // The holding node finds the loss and books its held requests again.
    until_within(
        "the held requests booked again",
        Duration::from_secs(10),
        || async { redis.exists(&key).await.then_some(()) },
    )
    .await;
    let late = nodes[0].get(&origin.url("/p-late")).await;
    assert_eq!(late.status, 200, "{}", late.body);
    for h in held {
        assert_eq!(h.await.expect("held").status, 200);
    }
    assert_spaced("FLUSHALL under held requests", &origin, interval);
}
