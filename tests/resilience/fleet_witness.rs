//! Audit checkpoints witnessed in the fleet's Redis: a node pushes each
//! checkpoint, tagged under the fleet key, to a list of its own; `audit
//! verify` reads it back (found from `--config`, or named with `--witness
//! redis://…`), so a cut of the log's tail older than the last witnessed
//! checkpoint is found, and an entry forged in Redis is reported. Skipped,
//! with a message, without `redis-server`.

use std::path::Path;

use crate::support::binary::{self, Setup};
use crate::support::redis::Redis;
use crate::support::{Conn, Origin, need, until};

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .expect("read")
        .lines()
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `audit verify` with `args`: its exit code and output.
fn verify(args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["audit", "verify"];
    all.extend(args);
    let out = binary::run(&all);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// The checkpoint lines in `list`, as JSON, newest first (the tag's 32
/// bytes left out).
async fn witnessed(redis: &Redis, list: &str) -> Vec<serde_json::Value> {
    match redis.command(&["LRANGE", list, "0", "-1"]).await {
        Ok(redis::Value::Array(entries)) => entries
            .iter()
            .filter_map(|e| match e {
                redis::Value::BulkString(b) if b.len() > 32 => {
                    serde_json::from_slice(&b[32..]).ok()
                }
                _ => None,
            })
            .collect(),
        other => panic!("LRANGE: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_tail_is_found_through_the_witness_in_redis_and_a_forged_entry_is_reported() {
    let redis = need!(Redis::start().await);
    let keys = tempfile::tempdir().expect("tempdir");
    let key = keys.path().join("fleet.key");
    let key_arg = key.display().to_string();
    assert!(
        binary::run(&["fleet", "init-key", "--out", &key_arg])
            .status
            .success()
    );
    let setup = Setup::with_config(
        "robots-proxy",
        &format!(
            "signing_key = true\ncheckpoint_every = \"1s\"\n\
             [fleet]\nredis = {:?}\nname = \"witness\"\nnode = \"node-1\"\ntimeout = \"1s\"\n\
             key_file = {key_arg:?}\n",
            redis.url()
        ),
    );
    let mut proxy = setup.start().await;
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let mut conn = Conn::open(proxy.addr).await;
    for i in 0..3 {
        let r = conn.get(&origin.url(&format!("/private/{i}"))).await;
        assert_eq!(r.status, 403, "{}", r.body);
    }
    let list = "robots-proxy:witness:{audit:node-1}:witness";
    until("an interval checkpoint witnessed in Redis", || async {
        let all = witnessed(&redis, list).await;
        match all
            .iter()
            .find(|v| v["reason"] == "interval" && v["seq"].as_u64() >= Some(5))
        {
            Some(_) => Ok(()),
            None => Err(format!("{all:?}")),
        }
    })
    .await;
    let r = conn.get(&origin.url("/private/3")).await;
    assert_eq!(r.status, 403);
    drop(conn);
    proxy.signal("TERM");
    assert!(proxy.wait_exit().await.success());

    let config = setup.config_path().display().to_string();
    let (code, text) = verify(&["--config", &config]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("checkpoints of node node-1 from Redis"),
        "{text}"
    );
    assert!(text.contains("kept checkpoints matched"), "{text}");

    // The log cut back to just before the last witnessed checkpoint.
    let last = witnessed(&redis, list)
        .await
        .iter()
        .filter_map(|v| v["seq"].as_u64())
        .max()
        .expect("witnessed");
    let live = setup.audit_path();
    let lines = read_lines(&live);
    assert!(lines.len() as u64 >= last);
    std::fs::write(&live, lines[..last as usize - 1].concat()).expect("cut");
    let (code, text) = verify(&["--config", &config]);
    eprintln!("cut:\n{text}");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "the log ends at seq {}, but the copy kept in the witness in Redis",
            last - 1
        )) || text.contains("lines were cut from the end"),
        "{text}"
    );
    assert!(
        text.contains("the witness in Redis (robots-proxy:witness:{audit:node-1}:witness)"),
        "{text}"
    );
    // Named explicitly, with the key and the node: the same.
    let live_arg = live.display().to_string();
    let url = redis.url();
    let explicit = [
        "--witness",
        url.as_str(),
        "--fleet-key",
        &key_arg,
        "--fleet-name",
        "witness",
        "--node",
        "node-1",
        live_arg.as_str(),
    ];
    let (code, text) = verify(&explicit);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("lines were cut from the end"), "{text}");
    // Without the witness, nothing shows it.
    let (code, text) = verify(&[live_arg.as_str()]);
    assert_eq!(code, Some(0), "{text}");

    // The log whole again, and an entry pushed without the fleet key (a
    // checkpoint line under a tag of zeros): reported, not taken.
    std::fs::write(&live, lines.concat()).expect("restore");
    let mut forged = vec![0u8; 32];
    forged.extend(lines[0].as_bytes());
    let client = redis::Client::open(redis.url()).expect("client");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    redis::cmd("LPUSH")
        .arg(list)
        .arg(forged)
        .query_async::<()>(&mut c)
        .await
        .expect("LPUSH");
    let (code, text) = verify(&["--config", &config]);
    eprintln!("forged:\n{text}");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("intact"), "{text}");
    assert!(
        text.contains("1 witness entries in Redis")
            && text.contains("failed their fleet-key check"),
        "{text}"
    );
}
