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

/// A fleet key in `dir`.
pub(crate) fn fleet_key(dir: &std::path::Path) -> std::path::PathBuf {
    let key = dir.join("fleet.key");
    let made = binary::run(&["fleet", "init-key", "--out", &key.display().to_string()]);
    assert!(made.status.success(), "{made:?}");
    key
}

/// A node of fleet `name` with an admin listener and the key in `key`.
pub(crate) async fn keyed(
    redis: &Redis,
    name: &str,
    i: usize,
    key: &std::path::Path,
) -> (Setup, Running) {
    let extra = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n[fleet]\nredis = {:?}\nname = \"{name}\"\n\
         node = \"node-{i}\"\ntimeout = \"1s\"\nkey_file = {:?}\n",
        redis.url(),
        key.display().to_string()
    );
    Setup::running("robots-proxy", &extra).await
}

pub(crate) fn admin_of(r: &Running) -> SocketAddr {
    let line = &r.listening;
    let rest = &line[line.find("admin=").expect("admin=") + "admin=".len()..];
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    rest[..end].parse().expect("admin address")
}

pub(crate) async fn rejected(node: &Running, kind: &str) -> f64 {
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
    let key = fleet_key(dir.path());
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
    // After the tag, the stamp's line (`fleet::stamp`), then the JSON.
    let stamped = &sealed[32..];
    let json = &stamped[stamped.iter().position(|&b| b == b'\n').expect("stamp") + 1..];
    let mut meta: serde_json::Value = serde_json::from_slice(json).expect("meta is JSON");
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

/// What the ACL tests do through two nodes: a Crawl-delay schedule (each
/// node books, node 1 twice), a shared entry, a purge and a reload.
async fn use_the_fleet(one: &mut Running, two: &mut Running) {
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\nDisallow: /private\n").await;
    for (node, path) in [(&*one, "/a"), (&*two, "/b"), (&*one, "/c")] {
        let r = Conn::open(node.addr).await.get(&origin.url(path)).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(
        Conn::open(two.addr)
            .await
            .get(&origin.url("/private/x"))
            .await
            .status,
        403
    );
    let purge = http::Request::post(format!("/purge?origin={}", origin.url("/")))
        .body(bytes::Bytes::new())
        .expect("request");
    let purged = Conn::open(admin_of(one)).await.send(purge).await;
    assert_eq!(purged.status, 200, "{}", purged.body);
    one.reload("configuration reloaded").await;
    two.wait_for("reloading as another node of the fleet did")
        .await;
    let r = Conn::open(two.addr).await.get(&origin.url("/d")).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// The Redis user docs/operating.md gives the fleet ("Securing the
/// fleet"), after `ACL SETUSER robots-proxy on >PASSWORD`.
const ACL_RULES: &str = "resetchannels ~robots-proxy:* &robots-proxy:* -@all \
    +evalsha +script|load +publish +subscribe +ping +select \
    +zscore +zrem +hdel +config|get +info +cluster|slots +readonly +asking \
    +del +exists +get +set +pexpire +time +hexists +hget +hmget +hset +hstrlen +hlen +hgetall \
    +llen +lpush +lrange +ltrim +zadd +zcard +zcount +zrange +zrangebyscore \
    +zremrangebyscore";

/// A fleet through Redis's TLS port as the documented ACL user: a
/// Crawl-delay schedule, a purge and a reload go through with no command
/// or key the user may not use (`ACL LOG` stays empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_runs_as_the_documented_acl_user_over_tls() {
    use crate::support::redis::TlsRedis;
    let tls = need!(TlsRedis::start().await);
    let password = "a-long-random-password";
    let mut setuser = vec!["ACL", "SETUSER", "robots-proxy", "on"];
    let secret = format!(">{password}");
    setuser.push(&secret);
    setuser.extend(ACL_RULES.split_whitespace());
    tls.redis.command(&setuser).await.expect("ACL SETUSER");
    let dir = tempfile::tempdir().expect("tempdir");
    let key = fleet_key(dir.path());
    let start = |i: usize| {
        let setup = Setup::new();
        setup.write_config(
            "robots-proxy",
            &format!(
                "[admin]\nlisten = \"127.0.0.1:0\"\n[fleet]\n\
                 redis = \"rediss://robots-proxy:{password}@localhost:{}/0\"\nname = \"acl\"\n\
                 node = \"node-{i}\"\ntimeout = \"2s\"\non_unavailable = \"refuse\"\nkey_file = {:?}\n",
                tls.tls_port,
                key.display().to_string()
            ),
        );
        let mut command = binary::command();
        command
            .env("RUST_LOG", "info")
            .env_remove("NOTIFY_SOCKET")
            .env("SSL_CERT_FILE", &tls.ca_file)
            .args(["run", "--config"])
            .arg(setup.config_path());
        async move { (setup, Running::start(command).await) }
    };
    let (_s1, mut one) = start(1).await;
    let (_s2, mut two) = start(2).await;
    until("both nodes to subscribe", || async {
        match tls.redis.subscribers("robots-proxy:acl:events").await {
            2 => Ok(()),
            n => Err(format!("{n} subscribed")),
        }
    })
    .await;
    use_the_fleet(&mut one, &mut two).await;
    let log = tls.redis.command(&["ACL", "LOG"]).await.expect("ACL LOG");
    assert_eq!(log, redis::Value::Array(vec![]), "denied: {log:?}");
}

/// The documented ACL user on a Redis Cluster (each master given it): a
/// Crawl-delay schedule with its seals, a shared entry, a purge, a reload
/// and the audit checkpoints witnessed in Redis (read back by `audit
/// verify`) go through with no command or key the user may not use
/// (`ACL LOG` stays empty on every master).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_runs_as_the_documented_acl_user_on_a_cluster() {
    use crate::support::redis::RedisCluster;
    let cluster = need!(RedisCluster::start().await);
    let password = "another-long-random-password";
    let secret = format!(">{password}");
    for node in &cluster.nodes {
        let mut setuser = vec!["ACL", "SETUSER", "robots-proxy", "on", &secret];
        setuser.extend(ACL_RULES.split_whitespace());
        node.command(&setuser).await.expect("ACL SETUSER");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let key = fleet_key(dir.path());
    let urls: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("redis://robots-proxy:{password}@127.0.0.1:{}/0", n.port))
        .collect();
    let start = |i: usize| {
        let extra = format!(
            "checkpoint_every = \"1s\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[fleet]\n\
             redis = {urls:?}\nname = \"aclc\"\nnode = \"node-{i}\"\ntimeout = \"2s\"\n\
             on_unavailable = \"refuse\"\nkey_file = {:?}\n",
            key.display().to_string()
        );
        async move { Setup::running("robots-proxy", &extra).await }
    };
    let (s1, mut one) = start(1).await;
    let (_s2, mut two) = start(2).await;
    use_the_fleet(&mut one, &mut two).await;
    let config = s1.config_path().display().to_string();
    let verified = binary::run(&["audit", "verify", "--config", &config]);
    let said = String::from_utf8_lossy(&verified.stdout);
    assert!(verified.status.success(), "{said}{verified:?}");
    assert!(
        said.contains("checkpoints of node node-1 from Redis"),
        "{said}"
    );
    for node in &cluster.nodes {
        let log = node.command(&["ACL", "LOG"]).await.expect("ACL LOG");
        assert_eq!(
            log,
            redis::Value::Array(vec![]),
            "denied on {}: {log:?}",
            node.port
        );
    }
}
