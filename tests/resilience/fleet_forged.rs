//! What a writer to the fleet's Redis without the fleet key still tries:
//! lowering a Crawl-delay schedule, rewriting a shared robots.txt entry's
//! rules under an old tag, and writing back an old entry after the
//! origin's robots.txt changed. Two proxy processes share a key; none of
//! it changes a decision, and each is counted. Skipped, with a message,
//! without `redis-server`.

use std::time::Duration;

use super::fleet_key::{admin_of, keyed, rejected};
use crate::support::binary::{self, Running};
use crate::support::redis::Redis;
use crate::support::{Conn, Origin, need, until};

/// A fleet key in `dir`.
fn fleet_key(dir: &std::path::Path) -> std::path::PathBuf {
    let key = dir.join("fleet.key");
    let made = binary::run(&["fleet", "init-key", "--out", &key.display().to_string()]);
    assert!(made.status.success(), "{made:?}");
    key
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
    let dir = tempfile::tempdir().expect("tempdir");
    let key = fleet_key(dir.path());
    let (_s1, one) = keyed(&redis, "early", 1, &key).await;
    let (_s2, two) = keyed(&redis, "early", 2, &key).await;
    subscribed(&redis, "early", 2).await;
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
    let dir = tempfile::tempdir().expect("tempdir");
    let key = fleet_key(dir.path());
    let (_s1, one) = keyed(&redis, "rules", 1, &key).await;
    let (_s2, two) = keyed(&redis, "rules", 2, &key).await;
    subscribed(&redis, "rules", 2).await;
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let secret = origin.url("/private/secret");
    assert_eq!(status(&one, &secret).await, 403);
    let entry = only_key(&redis, "robots-proxy:rules:*:robots.1").await;
    until("node 1 to share the entry", || async {
        match redis.int(&["HEXISTS", &entry, "meta"]).await {
            1 => Ok(()),
            n => Err(format!("{n}")),
        }
    })
    .await;
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
    let dir = tempfile::tempdir().expect("tempdir");
    let key = fleet_key(dir.path());
    let (_s1, one) = keyed(&redis, "replay", 1, &key).await;
    let (_s2, two) = keyed(&redis, "replay", 2, &key).await;
    subscribed(&redis, "replay", 2).await;
    let origin = Origin::with_robots("User-agent: *\nDisallow: /old\n").await;
    let new = origin.url("/new/page");
    assert_eq!(status(&one, &new).await, 200);
    let entry = only_key(&redis, "robots-proxy:replay:*:robots.1").await;
    until("node 1 to share the entry", || async {
        match redis.int(&["HEXISTS", &entry, "meta"]).await {
            1 => Ok(()),
            n => Err(format!("{n}")),
        }
    })
    .await;
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
