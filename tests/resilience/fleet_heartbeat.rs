//! Heartbeats under the fleet key: a heartbeat forged in Redis counts no
//! live node and names no listener to refuse, and a peer's listeners
//! learned from good heartbeats stay refused after its heartbeat is gone
//! (deleted, or the node stopped). Two proxy processes share a key.
//! Skipped, with a message, without `redis-server`.

use std::time::Duration;

use super::fleet_key::{admin_of, fleet_key, keyed, rejected};
use crate::support::binary::Running;
use crate::support::redis::Redis;
use crate::support::{Conn, Origin, metric, need, until};

async fn live_nodes(node: &Running) -> f64 {
    let text = Conn::open(admin_of(node)).await.get("/metrics").await.body;
    metric(&text, "robots_proxy_fleet_live_nodes").expect("live nodes")
}

/// What `node` answers for `url`, or a failure if it does not within 5 s.
async fn through(node: &Running, url: &str) -> (u16, String) {
    let r = tokio::time::timeout(Duration::from_secs(5), async {
        Conn::open(node.addr).await.get(url).await
    })
    .await
    .unwrap_or_else(|_| panic!("{url}: no answer through the node (forwarded to a stopped peer)"));
    (r.status, r.body)
}

async fn until_refused(node: &Running, url: &str) {
    until("the node to refuse the peer's listener", || async {
        match through(node, url).await {
            (403, body) if body.contains("destination") => Ok(()),
            (s, body) => Err(format!("{url}: {s} {body}")),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_heartbeats_count_no_node_and_deleted_ones_open_no_listener() {
    let redis = need!(Redis::start().await);
    let dir = tempfile::tempdir().expect("tempdir");
    let key = fleet_key(dir.path());
    let (_s1, one) = keyed(&redis, "beats", 1, &key).await;
    let (_s2, two) = keyed(&redis, "beats", 2, &key).await;
    let admin_two = format!("http://{}/healthz", admin_of(&two));
    until_refused(&one, &admin_two).await;
    until("node 1 to count two nodes", || async {
        match live_nodes(&one).await {
            2.0 => Ok(()),
            n => Err(format!("{n} live")),
        }
    })
    .await;

    // A node forged into the heartbeat set, live for a long while, whose
    // listener is a real server: untagged, then under a made-up tag.
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let page = origin.url("/page");
    let listener = page
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("host")
        .to_string();
    let nodes = "robots-proxy:beats:{nodes}:live";
    let listeners = "robots-proxy:beats:{nodes}:listeners";
    assert!(redis.exists(nodes).await, "the heartbeat set is {nodes}");
    let now_ms = redis.time_us().await / 1000;
    let forged = [
        ("node-8#0123456789abcdef", format!("{now_ms} {listener}")),
        (
            "node-9#0123456789abcdef",
            format!("m1 {}\n{now_ms} {listener}", "ab".repeat(32)),
        ),
    ];
    let before = rejected(&one, "heartbeat").await;
    for (member, value) in &forged {
        redis
            .command(&["ZADD", nodes, "99999999999999", member])
            .await
            .expect("zadd");
        redis
            .command(&["HSET", listeners, member, value])
            .await
            .expect("hset");
    }
    until("node 1 to reject both forged heartbeats", || async {
        match rejected(&one, "heartbeat").await {
            n if n >= before + 2.0 => Ok(()),
            n => Err(format!("{n} rejected")),
        }
    })
    .await;
    assert_eq!(
        live_nodes(&one).await,
        2.0,
        "a forged heartbeat was counted"
    );
    assert_eq!(
        through(&one, &page).await.0,
        200,
        "a forged heartbeat's listener was refused"
    );

    // Node 2 stops answering and its heartbeat is deleted: node 1 no
    // longer counts it, but still refuses its admin listener.
    two.signal("STOP");
    for k in [nodes, listeners] {
        redis.command(&["DEL", k]).await.expect("del");
    }
    until("node 1 to count itself alone", || async {
        match live_nodes(&one).await {
            1.0 => Ok(()),
            n => Err(format!("{n} live")),
        }
    })
    .await;
    let (status, body) = through(&one, &admin_two).await;
    two.signal("CONT");
    assert_eq!(status, 403, "node 2's admin listener reopened: {body}");
    assert!(body.contains("destination"), "{body}");
}
