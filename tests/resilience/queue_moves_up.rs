//! A request held for its Crawl-delay slot whose client gives up leaves
//! the queue, and the requests held behind it move up, on one proxy and
//! across a fleet's nodes: the origin is not left idle for a slot nobody
//! will use. Real connections, dropped while held; an origin that logs
//! arrivals.

use std::time::{Duration, Instant};

use robots_proxy::config::FleetOnUnavailable;

use crate::support::fleet::{self, on, until_all};
use crate::support::redis::Redis;
use crate::support::{Conn, Origin, Proxy, admin, metric, need, until};

use super::fleet::TOLERANCE;

/// Requests held on all of `nodes` together.
async fn held(nodes: &[Proxy]) -> f64 {
    let mut n = 0.0;
    for node in nodes {
        n += metric(&node.metrics().await, "robots_proxy_politeness_waiting").unwrap_or(0.0);
    }
    n
}

async fn until_held(nodes: &[Proxy], n: f64) {
    until(&format!("{n} requests held"), || async {
        let h = held(nodes).await;
        if h == n { Ok(()) } else { Err(h.to_string()) }
    })
    .await;
}

/// At Crawl-delay 1: `/first` goes at once, `/second` is held one
/// interval, then two clients are held (slots 2 and 3 s) and `/third`
/// behind them (4 s), each request through the next of `nodes` in turn
/// once the one before is held. The two clients drop their connections
/// while held. Returns how long after `/second` `/third` reached the
/// origin, and `/third`'s `X-Robots-Proxy-Delay` with the time it took.
async fn two_leave(origin: &Origin, nodes: &[Proxy]) -> (Duration, f64, Duration) {
    let node = |i: usize| &nodes[i % nodes.len()];
    let first = node(0).get(&origin.url("/first")).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let second = {
        let (addr, url) = (node(1).addr, origin.url("/second"));
        tokio::spawn(async move { Conn::open(addr).await.get(&url).await })
    };
    until_held(nodes, 1.0).await;
    let mut leaving = Vec::new();
    for i in 0..2 {
        let mut conn = Conn::open(node(i).addr).await;
        let connection = conn.task.abort_handle();
        let url = origin.url(&format!("/leave{i}"));
        let request = tokio::spawn(async move { conn.get(&url).await });
        leaving.push((request, connection));
        until_held(nodes, 2.0 + i as f64).await;
    }
    let started = Instant::now();
    let third = {
        let (addr, url) = (node(0).addr, origin.url("/third"));
        tokio::spawn(async move { Conn::open(addr).await.get(&url).await })
    };
    until_held(nodes, 4.0).await;
    for (request, connection) in leaving {
        request.abort();
        connection.abort();
    }
    assert_eq!(second.await.expect("second").status, 200);
    let third = third.await.expect("third");
    let took = started.elapsed();
    assert_eq!(third.status, 200, "{}", third.body);
    assert!(
        origin.arrived(&["/leave"]).is_empty(),
        "the leaving clients were dropped after their slots"
    );
    let at = |p: &str| origin.arrived(&[p])[0];
    let delay = third.parsed::<f64>("x-robots-proxy-delay").unwrap_or(0.0);
    (at("/third") - at("/second"), delay, took)
}

fn assert_moved_up(what: &str, after: Duration, delay: f64, took: Duration) {
    eprintln!(
        "{what}: /third reached the origin {after:?} after /second (X-Robots-Proxy-Delay {delay} s, took {took:?})"
    );
    let interval = Duration::from_secs(1);
    assert!(
        after >= interval - TOLERANCE && after < interval + Duration::from_millis(500),
        "{what}: /third came {after:?} after the last request forwarded, not one interval"
    );
    // What the proxy said it held the request is what it took.
    assert!(
        (took.as_secs_f64() - delay).abs() < 0.3,
        "{what}: X-Robots-Proxy-Delay {delay} s for a request that took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_leave_while_held_move_the_queue_up() {
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let proxy = Proxy::start_with(|c| {
        admin(c);
        c.politeness.max_wait = Duration::from_secs(30);
    })
    .await;
    let (after, delay, took) = two_leave(&origin, std::slice::from_ref(&proxy)).await;
    assert_moved_up("one proxy", after, delay, took);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_leave_while_held_move_the_fleets_queue_up() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let config = on(&redis, Duration::from_secs(1), FleetOnUnavailable::Local);
    let nodes = fleet::nodes(2, Some(config), |c| {
        c.politeness.max_wait = Duration::from_secs(30)
    })
    .await;
    until_all(&nodes, "two live nodes", |t| {
        metric(t, "robots_proxy_fleet_live_nodes") == Some(2.0)
    })
    .await;
    let (after, delay, took) = two_leave(&origin, &nodes).await;
    assert_moved_up("two nodes", after, delay, took);
}
