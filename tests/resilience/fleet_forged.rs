//! What a writer to the fleet's Redis without the fleet key still tries:
//! lowering a Crawl-delay schedule, rewriting a shared robots.txt entry's
//! rules under an old tag, and writing back an old entry after the
//! origin's robots.txt changed. Two proxy processes share a key; none of
//! it changes a decision, and each is counted. Skipped, with a message,
//! without `redis-server`.

use std::time::Duration;

use super::fleet_key::{admin_of, fleet_key, keyed, rejected};
use crate::support::binary::{Running, Setup};
use crate::support::redis::Redis;
use crate::support::{Conn, Origin, need, until};

/// Two nodes of fleet `name` sharing a key, both subscribed (what holds
/// their setups and key first).
async fn two_nodes(
    redis: &Redis,
    name: &str,
) -> ((tempfile::TempDir, Setup, Setup), Running, Running) {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = fleet_key(dir.path());
    let (s1, one) = keyed(redis, name, 1, &key).await;
    let (s2, two) = keyed(redis, name, 2, &key).await;
    subscribed(redis, name, 2).await;
    ((dir, s1, s2), one, two)
}

async fn subscribed(redis: &Redis, name: &str, n: i64) {
    let channel = format!("robots-proxy:{name}:events");
    until("the nodes to subscribe", || async {
        match redis.subscribers(&channel).await {
            m if m == n => Ok(()),
            m => Err(format!("{m} subscribed")),
        }
    })
    .await;
}

/// One binary-safe command.
async fn raw(redis: &Redis, args: &[&[u8]]) -> redis::Value {
    let client = redis::Client::open(redis.url()).expect("client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).expect("command"));
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(&mut conn).await.expect("command")
}

fn bytes(v: &redis::Value) -> Vec<u8> {
    match v {
        redis::Value::BulkString(b) => b.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

/// The one key matching `pattern`, once there is one.
async fn only_key(redis: &Redis, pattern: &str) -> String {
    until("the key to be written", || async {
        match &redis.keys(pattern).await[..] {
            [key] => Ok(key.clone()),
            keys => Err(format!("{keys:?}")),
        }
    })
    .await
}

/// Fleet `name`'s one shared robots.txt entry, once a node stored it.
async fn shared_entry(redis: &Redis, name: &str) -> String {
    let entry = only_key(redis, &format!("robots-proxy:{name}:*:robots.1")).await;
    until("a node to share the entry", || async {
        match redis.int(&["HEXISTS", &entry, "meta"]).await {
            1 => Ok(()),
            n => Err(format!("{n}")),
        }
    })
    .await;
    entry
}

async fn status(node: &Running, url: &str) -> u16 {
    Conn::open(node.addr).await.get(url).await.status
}

/// A schedule rewritten far into the past between requests, the
/// requests sent through both nodes in turn: the origin still sees them
/// at least a Crawl-delay apart, and the nodes count the lowered
/// schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_lowered_in_redis_does_not_bring_requests_closer() {
    let redis = need!(Redis::start().await);
    let (_nodes, one, two) = two_nodes(&redis, "early").await;
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    assert_eq!(status(&one, &origin.url("/warm")).await, 200);
    let schedule = only_key(&redis, "robots-proxy:early:*:next").await;
    let seals = format!("{schedule}:seal");
    let seal_of = |node: usize| {
        let (redis, seals) = (&redis, &seals);
        async move {
            match redis
                .command(&["HGET", seals, &format!("node-{node}")])
                .await
            {
                Ok(redis::Value::BulkString(b)) => Some(b),
                _ => None,
            }
        }
    };
    let mut last = seal_of(1).await;
    let mut sent_by = 1;
    for i in 0..6 {
        // The seal of the last booking is written (it follows the
        // booking), then the schedule is lowered far into the past.
        until("the last booking's seal", || async {
            match seal_of(sent_by).await {
                Some(now) if Some(&now) != last.as_ref() || i == 0 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        redis
            .command(&["SET", &schedule, "1000000", "KEEPTTL"])
            .await
            .expect("forge the schedule");
        sent_by = 1 + (i + 1) % 2;
        last = seal_of(sent_by).await;
        let node = if sent_by == 1 { &one } else { &two };
        assert_eq!(status(node, &origin.url(&format!("/p{i}"))).await, 200);
    }
    let at = origin.arrived(&["/warm", "/p"]);
    assert_eq!(at.len(), 7);
    let gaps = crate::support::fleet::gaps_of(&at);
    let min = crate::support::fleet::min_gap(&gaps);
    eprintln!("gaps under a lowered schedule: {gaps:?}");
    assert!(
        min >= Duration::from_millis(950),
        "requests went closer than the Crawl-delay: {gaps:?}"
    );
    let counted = rejected(&one, "schedule").await + rejected(&two, "schedule").await;
    assert!(counted >= 6.0, "{counted} lowered schedules counted");
}

/// A shared entry rewritten to rules without the `Disallow`, its text
/// and digest consistent, under the tag of the old `meta`: the nodes keep
/// judging by the origin's robots.txt, and count it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_rewritten_under_an_old_tag_change_no_decision() {
    use std::io::Write;
    let redis = need!(Redis::start().await);
    let (_nodes, one, two) = two_nodes(&redis, "rules").await;
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let secret = origin.url("/private/secret");
    assert_eq!(status(&one, &secret).await, 403);
    let entry = shared_entry(&redis, "rules").await;
    let sealed = bytes(&raw(&redis, &[b"HGET", entry.as_bytes(), b"meta"]).await);
    let (tag, stamped) = sealed.split_at(32);
    let line = stamped.iter().position(|&b| b == b'\n').expect("stamp") + 1;
    let (stamp, meta) = stamped.split_at(line);
    let mut meta: serde_json::Value = serde_json::from_slice(meta).expect("meta is JSON");
    let loose = b"User-agent: *\nAllow: /\n";
    let digest = ring::digest::digest(&ring::digest::SHA256, loose);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let kept = if meta.get("kept").is_some() {
        &mut meta["kept"]
    } else {
        &mut meta
    };
    kept["sha256"] = hex.into();
    let mut deflate = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    deflate.write_all(loose).expect("deflate");
    let text = deflate.finish().expect("deflate");
    let mut forged = tag.to_vec();
    forged.extend(stamp);
    forged.extend(meta.to_string().into_bytes());
    raw(
        &redis,
        &[
            b"HSET",
            entry.as_bytes(),
            b"meta",
            &forged,
            b"text",
            &text,
            b"expires",
            b"99999999999999",
        ],
    )
    .await;
    let fetches = origin.hits("/robots.txt");
    assert_eq!(status(&two, &secret).await, 403, "judged by forged rules");
    assert!(rejected(&two, "robots").await >= 1.0);
    assert_eq!(origin.hits("/robots.txt"), fetches + 1, "fetched again");
}

/// An entry saved from Redis and written back after the origin's
/// robots.txt changed and was fetched again: a node that has seen the
/// newer entry does not go back to the old rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_entry_written_back_is_not_taken_again() {
    let redis = need!(Redis::start().await);
    let (_nodes, one, two) = two_nodes(&redis, "replay").await;
    let origin = Origin::with_robots("User-agent: *\nDisallow: /old\n").await;
    let new = origin.url("/new/page");
    assert_eq!(status(&one, &new).await, 200);
    let entry = shared_entry(&redis, "replay").await;
    assert_eq!(status(&two, &new).await, 200, "node 2 read the entry");
    let saved = bytes(&raw(&redis, &[b"DUMP", entry.as_bytes()]).await);

    // The origin's robots.txt changes; a fleet-wide purge makes node 1
    // fetch it again, and node 2 read the new entry.
    origin.robots("User-agent: *\nDisallow: /new\n");
    let purge = http::Request::post(format!("/purge?origin={}", origin.url("/")))
        .body(bytes::Bytes::new())
        .expect("request");
    let purged = Conn::open(admin_of(&one)).await.send(purge).await;
    assert_eq!(purged.status, 200, "{}", purged.body);
    until("node 1 to judge by the new robots.txt", || async {
        match status(&one, &new).await {
            403 => Ok(()),
            s => Err(format!("{s}")),
        }
    })
    .await;
    until("node 2 to judge by the new robots.txt", || async {
        match status(&two, &new).await {
            403 => Ok(()),
            s => Err(format!("{s}")),
        }
    })
    .await;

    // A fleet-wide purge again, and the saved entry written back over
    // the purged one, fresh for long: node 2, asked until it has read
    // Redis again, refuses the copy and fetches.
    let purge = http::Request::post(format!("/purge?origin={}", origin.url("/")))
        .body(bytes::Bytes::new())
        .expect("request");
    let purged = Conn::open(admin_of(&one)).await.send(purge).await;
    assert_eq!(purged.status, 200, "{}", purged.body);
    raw(
        &redis,
        &[b"RESTORE", entry.as_bytes(), b"0", &saved, b"REPLACE"],
    )
    .await;
    raw(
        &redis,
        &[b"HSET", entry.as_bytes(), b"expires", b"99999999999999"],
    )
    .await;
    until("node 2 to refuse the old copy", || async {
        assert_eq!(
            status(&two, &new).await,
            403,
            "node 2 went back to old rules"
        );
        match rejected(&two, "replay").await {
            n if n >= 1.0 => Ok(()),
            n => Err(format!("{n} refused")),
        }
    })
    .await;
    assert_eq!(status(&two, &new).await, 403);
}

/// An origin paused by its 429 with `Retry-After: 3`, the pause then
/// ended in Redis by a writer: a node that knows of the pause still
/// sends nothing before it ends, and counts the shortened pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_shortened_in_redis_holds_on_the_nodes_that_know_it() {
    use crate::support::fleet;
    use robots_proxy::config::FleetOnUnavailable;
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 0.2\n").await;
    let config = fleet::on(&redis, Duration::from_secs(1), FleetOnUnavailable::Refuse);
    let nodes = fleet::nodes(2, Some(config), |c| {
        c.politeness.max_wait = Duration::from_secs(30);
    })
    .await;
    subscribed(&redis, "test", 2).await;
    origin.route(
        "/first",
        crate::support::Reply::status(429).header("retry-after", "3"),
    );
    assert_eq!(nodes[0].get(&origin.url("/first")).await.status, 429);
    let signalled = origin.arrived(&["/first"])[0];
    until("node 2 to hear of the pause", || async {
        let j = nodes[1].explain(&origin.url("/x")).await;
        (j["politeness"]["pause_known_here"] == true).then_some(())
    })
    .await;
    let pause = only_key(&redis, "robots-proxy:test:*:pause").await;
    redis
        .command(&["HSET", &pause, "until", "1"])
        .await
        .expect("end the pause");
    let r = nodes[1].get(&origin.url("/after")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let went = origin.arrived(&["/after"])[0] - signalled;
    assert!(
        went + Duration::from_millis(30) >= Duration::from_secs(3),
        "a request went {went:?} into a 3 s pause ended in Redis"
    );
    let text = nodes[1].metrics().await;
    assert!(
        crate::support::metric(
            &text,
            "robots_proxy_fleet_rejected_total{kind=\"schedule\"}"
        ) >= Some(1.0),
        "{text}"
    );
}

/// What the schedule's seals cost: Redis calls and request time per
/// request on an origin with a Crawl-delay, through a node with the fleet
/// key against one without. Printed (`cargo test --test resilience
/// fleet_forged::cost -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement"]
async fn cost_of_the_schedule_seals() {
    let redis = need!(Redis::start().await);
    let dir = tempfile::tempdir().expect("tempdir");
    let key = fleet_key(dir.path());
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 0.001\n").await;
    let calls = |stats: &str| -> u64 {
        stats
            .lines()
            .filter_map(|l| {
                l.split_once("calls=")?
                    .1
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    };
    for keyed_node in [false, true] {
        let name = if keyed_node { "sealed" } else { "plain" };
        let extra = if keyed_node {
            format!(
                "[fleet]\nredis = {:?}\nname = \"{name}\"\nnode = \"n\"\ntimeout = \"1s\"\nkey_file = {:?}\n",
                redis.url(),
                key.display().to_string()
            )
        } else {
            format!(
                "[fleet]\nredis = {:?}\nname = \"{name}\"\nnode = \"n\"\ntimeout = \"1s\"\nunauthenticated = true\n",
                redis.url()
            )
        };
        let (_s, node) = crate::support::binary::Setup::running("robots-proxy", &extra).await;
        let mut conn = Conn::open(node.addr).await;
        for i in 0..50 {
            assert_eq!(
                conn.get(&origin.url(&format!("/w{name}{i}"))).await.status,
                200
            );
        }
        redis
            .command(&["CONFIG", "RESETSTAT"])
            .await
            .expect("reset");
        let n = 1000;
        let mut took = Vec::new();
        for i in 0..n {
            let started = std::time::Instant::now();
            assert_eq!(
                conn.get(&origin.url(&format!("/{name}{i}"))).await.status,
                200
            );
            took.push(started.elapsed());
        }
        took.sort();
        let stats = redis.commandstats().await;
        let (p50, p99) = crate::support::fleet::p50_p99(&took);
        eprintln!(
            "{name}: {:.2} Redis calls per request, p50 {p50:?}, p99 {p99:?}\n{stats}",
            calls(&stats) as f64 / n as f64
        );
    }
}
