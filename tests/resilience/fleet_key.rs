//! The fleet key: what a node reads from Redis, it verifies. Two proxy
//! processes share a key; values written to their Redis by something
//! without it (an `allow_all` entry for an origin whose robots.txt
//! disallows `/private`, a purge, a reload) change no decision and are
//! counted. A fleet with no key and no `unauthenticated = true` does not
//! start. Skipped, with a message, without `redis-server`.

use std::net::SocketAddr;

use crate::support::binary::{self, Running, Setup};
use crate::support::redis::Redis;
use crate::support::{Conn, Origin, metric, need, until};

/// A node of fleet `name` with an admin listener and the key in `key`.
async fn keyed(redis: &Redis, name: &str, i: usize, key: &std::path::Path) -> (Setup, Running) {
    let extra = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n[fleet]\nredis = {:?}\nname = \"{name}\"\n\
         node = \"node-{i}\"\ntimeout = \"1s\"\nkey_file = {:?}\n",
        redis.url(),
        key.display().to_string()
    );
    Setup::running("robots-proxy", &extra).await
}

fn admin_of(r: &Running) -> SocketAddr {
    let line = &r.listening;
    let rest = &line[line.find("admin=").expect("admin=") + "admin=".len()..];
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    rest[..end].parse().expect("admin address")
}

async fn rejected(node: &Running, kind: &str) -> f64 {
    let text = Conn::open(admin_of(node)).await.get("/metrics").await.body;
    metric(
        &text,
        &format!("robots_proxy_fleet_rejected_total{{kind=\"{kind}\"}}"),
    )
    .unwrap_or_else(|| panic!("no rejected counter in {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_written_without_the_fleet_key_change_no_decision() {
    let redis = need!(Redis::start().await);
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("fleet.key");
    let made = binary::run(&["fleet", "init-key", "--out", &key.display().to_string()]);
    assert!(made.status.success(), "{made:?}");
    let (_s1, one) = keyed(&redis, "keyed", 1, &key).await;
    let (_s2, two) = keyed(&redis, "keyed", 2, &key).await;
    until("both nodes to subscribe", || async {
        match redis.subscribers("robots-proxy:keyed:events").await {
            2 => Ok(()),
            n => Err(format!("{n} subscribed")),
        }
    })
    .await;
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let secret = origin.url("/private/secret");
    let refused = Conn::open(one.addr).await.get(&secret).await.status;
    assert_eq!(refused, 403, "node 1 judges by the origin's robots.txt");

    // Node 1 shared the entry, tagged: strip the tag, say allow_all.
    let entry = until("node 1 to share the entry", || async {
        match &redis.keys("robots-proxy:keyed:*:robots.1").await[..] {
            [entry] if redis.int(&["HEXISTS", entry, "meta"]).await == 1 => Ok(entry.clone()),
            keys => Err(format!("{keys:?}")),
        }
    })
    .await;
    let entry = &entry;
    let shared_origin = &entry[entry.find('{').expect("{") + 1..entry.rfind('}').expect("}")];
    let sealed = match redis.command(&["HGET", entry, "meta"]).await {
        Ok(redis::Value::BulkString(b)) => b,
        other => panic!("meta: {other:?}"),
    };
    let mut meta: serde_json::Value = serde_json::from_slice(&sealed[32..]).expect("meta is JSON");
    meta["state"] = "allow_all".into();
    meta["sha256"] = serde_json::Value::Null;
    let forged = meta.to_string();
    redis
        .command(&["HSET", entry, "meta", &forged, "expires", "99999999999999"])
        .await
        .expect("forge the entry");
    let fetches = origin.hits("/robots.txt");
    let status = Conn::open(two.addr).await.get(&secret).await.status;
    assert_eq!(status, 403, "node 2 judged by a forged entry");
    assert!(rejected(&two, "robots").await >= 1.0);
    assert_eq!(
        origin.hits("/robots.txt"),
        fetches + 1,
        "node 2 fetched again over the forged entry"
    );

    // A forged purge of the origin and a forged reload: ignored.
    let fetches = origin.hits("/robots.txt");
    let purge = format!("purge-robots\nnode-9\n{shared_origin}");
    for message in [purge.as_str(), "reload\nnode-9\nconfiguration"] {
        redis
            .command(&["PUBLISH", "robots-proxy:keyed:events", message])
            .await
            .expect("publish");
    }
    for node in [&one, &two] {
        until("the forged messages to be counted", || async {
            match rejected(node, "message").await {
                n if n >= 2.0 => Ok(()),
                n => Err(format!("{n} rejected")),
            }
        })
        .await;
    }
    for node in [&one, &two] {
        assert_eq!(Conn::open(node.addr).await.get(&secret).await.status, 403);
    }
    assert_eq!(
        origin.hits("/robots.txt"),
        fetches,
        "a forged purge made a node fetch again"
    );
    eprintln!(
        "rejected: node 1 {} robots, {} messages; node 2 {} robots, {} messages",
        rejected(&one, "robots").await,
        rejected(&one, "message").await,
        rejected(&two, "robots").await,
        rejected(&two, "message").await
    );
    // Each message was dropped where it was counted, before any node
    // acted on it: no reload, no purge.
}

#[test]
fn a_fleet_without_a_key_does_not_start_unless_said_so() {
    let setup = Setup::with_config(
        "robots-proxy",
        "[fleet]\nredis = \"redis://127.0.0.1:1/0\"\nname = \"nokey\"\n",
    );
    let out = binary::command()
        .args(["run", "--config"])
        .arg(setup.config_path())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started: {stderr}");
    assert!(
        stderr.contains("fleet.key_file") && stderr.contains("fleet init-key"),
        "{stderr}"
    );
    assert!(stderr.contains("unauthenticated = true"), "{stderr}");
}
