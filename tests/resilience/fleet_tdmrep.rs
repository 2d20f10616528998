//! Fleet mode, the tdmrep.json side: three proxy processes sharing one
//! Redis (and a fleet key) fetch an origin's `/.well-known/tdmrep.json`
//! once between them, and each refuses the path it reserves for a
//! request declaring `train-ai`; an entry written to Redis without the
//! fleet key (redis-cli) is ignored, counted, and the file fetched again.
//! Skipped, with a message, without `redis-server` or `redis-cli`.

use crate::fleet_key::{fleet_key, keyed, rejected};
use crate::support::redis::Redis;
use crate::support::{Conn, Origin, Reply, component, get_with, need, until};

const WELL_KNOWN: &str = "/.well-known/tdmrep.json";

/// An origin reserving `/books/` for text and data mining (W3C TDMRep).
async fn reserving() -> Origin {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    origin.route(
        WELL_KNOWN,
        Reply::ok(r#"[{ "location": "/books/", "tdm-reservation": 1 }]"#)
            .header("Content-Type", "application/json"),
    );
    origin
}

/// A GET of `url` through `node` declaring `train-ai`.
async fn train(node: std::net::SocketAddr, url: &str) -> u16 {
    Conn::open(node)
        .await
        .send(get_with(url, &[("Robots-Proxy-Purpose", "train-ai")]))
        .await
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_fetch_tdmrep_json_once_and_ignore_a_forged_entry() {
    let redis = need!(Redis::start().await);
    let dir = tempfile::tempdir().expect("tempdir");
    let key = fleet_key(dir.path());
    let mut nodes = Vec::new();
    for i in 1..=3 {
        nodes.push(keyed(&redis, "tdm", i, &key).await);
    }
    until("three nodes to subscribe", || async {
        match redis.subscribers("robots-proxy:tdm:events").await {
            3 => Ok(()),
            n => Err(format!("{n} subscribed")),
        }
    })
    .await;
    let addrs: Vec<_> = nodes.iter().map(|(_, r)| r.addr).collect();

    // Nine requests at once, three through each node.
    let origin = reserving().await;
    let urls: Vec<_> = (0..9).map(|i| origin.url(&format!("/books/{i}"))).collect();
    let sent = urls
        .iter()
        .enumerate()
        .map(|(i, url)| train(addrs[i % 3], url));
    let statuses = futures_util::future::join_all(sent).await;
    eprintln!(
        "tdmrep.json fetches for three nodes: {}",
        origin.hits(WELL_KNOWN)
    );
    assert_eq!(
        statuses,
        vec![403; 9],
        "every node refuses the reserved path"
    );
    assert_eq!(origin.hits(WELL_KNOWN), 1, "tdmrep.json fetched once");
    assert_eq!(origin.hits("/books/0"), 0, "refused before the fetch");

    // Node 1 shares a second origin's file; an entry without the fleet's
    // tag saying "not published" is written over it.
    let second = reserving().await;
    assert_eq!(train(addrs[0], &second.url("/books/a")).await, 403);
    let entry = until("node 1 to share the second origin's entry", || async {
        let port = second
            .url("/")
            .split(':')
            .nth(2)
            .unwrap_or_default()
            .to_owned();
        let port = port.trim_end_matches('/');
        match redis
            .keys("robots-proxy:tdm:*:tdmrep.1")
            .await
            .into_iter()
            .find(|k| k.contains(&format!(":{port}}}")))
        {
            Some(k) => Ok(k),
            None => Err("not shared yet".to_string()),
        }
    })
    .await;
    let forged = serde_json::json!({
        "url": second.url(WELL_KNOWN),
        "status": 404,
        "final_url": second.url(WELL_KNOWN),
        "node": "node-9",
    })
    .to_string();
    let cli = tokio::process::Command::new("redis-cli")
        .args(["-u", &redis.url(), "HSET", &entry, "meta", &forged])
        .args(["expires", "99999999999999"])
        .output()
        .await;
    let out = match cli {
        Ok(out) => out,
        Err(e) => return component::missing("redis-cli", e),
    };
    component::used("redis-cli");
    assert!(out.status.success(), "redis-cli: {out:?}");
    let _ = tokio::process::Command::new("redis-cli")
        .args(["-u", &redis.url(), "HDEL", &entry, "text"])
        .output()
        .await;

    let before = rejected(&nodes[1].1, "tdmrep").await;
    assert_eq!(
        train(addrs[1], &second.url("/books/b")).await,
        403,
        "node 2 judged by a forged entry"
    );
    assert!(rejected(&nodes[1].1, "tdmrep").await > before);
    assert_eq!(
        second.hits(WELL_KNOWN),
        2,
        "node 2 fetched again over the forged entry"
    );
}

/// `POST /purge?origin=URL` on `node`'s admin listener.
async fn purge(node: &crate::support::binary::Running, url: &str) -> u16 {
    let addr = crate::fleet_key::admin_of(node);
    let req = http::Request::post(format!("/purge?origin={url}"))
        .header(http::header::HOST, addr.to_string())
        .body(bytes::Bytes::new())
        .expect("purge request");
    Conn::open(addr).await.send(req).await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_of_an_origin_drops_its_tdmrep_json_on_every_node_and_in_redis() {
    let redis = need!(Redis::start().await);
    let dir = tempfile::tempdir().expect("tempdir");
    let key = fleet_key(dir.path());
    let mut nodes = Vec::new();
    for i in 1..=2 {
        nodes.push(keyed(&redis, "tdmpurge", i, &key).await);
    }
    until("two nodes to subscribe", || async {
        match redis.subscribers("robots-proxy:tdmpurge:events").await {
            2 => Ok(()),
            n => Err(format!("{n} subscribed")),
        }
    })
    .await;
    let addrs: Vec<_> = nodes.iter().map(|(_, r)| r.addr).collect();
    let origin = reserving().await;
    for addr in &addrs {
        assert_eq!(train(*addr, &origin.url("/books/1")).await, 403);
    }
    assert_eq!(origin.hits(WELL_KNOWN), 1, "shared between the nodes");

    // The site lifts its reservation; the operator purges the origin on
    // node 1.
    origin.route(
        WELL_KNOWN,
        Reply::ok(r#"[{ "location": "/books/", "tdm-reservation": 0 }]"#)
            .header("Content-Type", "application/json"),
    );
    assert_eq!(purge(&nodes[0].1, &origin.url("/")).await, 200);
    assert_eq!(train(addrs[0], &origin.url("/books/2")).await, 200);
    assert_eq!(origin.hits(WELL_KNOWN), 2, "node 1 read the file again");
    // Node 2 drops its copy when the purge reaches it, and finds no
    // shared entry of the old file in Redis.
    until("node 2 to judge by the new file", || async {
        match train(addrs[1], &origin.url("/books/3")).await {
            200 => Ok(()),
            s => Err(format!("{s}")),
        }
    })
    .await;
}
