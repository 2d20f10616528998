//! The writer and the verifier together: lines chained across a
//! rotation and a restart, signed checkpoints, a torn line cut at start.

use std::path::{Path, PathBuf};

use super::verify::{self, Outcome};
use super::{AuditLog, Record, SigningKey};

fn record(url: &str) -> Record<'_> {
    Record {
        time: "2026-11-22T01:13:45.336Z".into(),
        node: None,
        client: "127.0.0.1:4711".into(),
        user: None,
        method: "GET",
        url: url.into(),
        agent: "robots-proxy",
        decision: "disallowed",
        reason: "disallowed by line 2: Disallow: /private".into(),
        rule_line: Some(2),
        rule: Some("Disallow: /private".into()),
        judged_as: None,
        robots_url: "http://a.example/robots.txt".into(),
        fetch_status: Some(200),
        fetch_outcome: Some("ok"),
        cache_age_secs: Some(1),
        robots_fetched_at: None,
        robots_sha256: None,
        user_agent: None,
        cache: None,
        usage: None,
        usage_evidence: Vec::new(),
        politeness: None,
    }
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("read")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

fn check(files: &[PathBuf], key: Option<[u8; 32]>) -> String {
    let opts = verify::Options {
        key,
        ..verify::Options::default()
    };
    match verify::verify(files, &opts).expect("readable") {
        Outcome::Intact(summary) => summary.to_string(),
        Outcome::Broken(finding) => panic!("{finding}"),
    }
}

#[test]
fn lines_chain_across_a_rotation_and_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let rotated = dir.path().join("audit.jsonl.1");
    let log = AuditLog::open(&path, false, None).expect("open");
    for i in 0..3 {
        log.write(&record(&format!("http://a.example/private/{i}")))
            .expect("write");
    }
    std::fs::rename(&path, &rotated).expect("rotate");
    log.reopen().expect("reopen");
    log.write(&record("http://a.example/private/3"))
        .expect("write");
    drop(log);
    let log = AuditLog::open(&path, false, None).expect("restart");
    log.write(&record("http://a.example/private/4"))
        .expect("write");

    let old = lines(&rotated);
    let new = lines(&path);
    let seqs: Vec<u64> = old
        .iter()
        .chain(&new)
        .filter_map(|l| l["seq"].as_u64())
        .collect();
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    assert_eq!(old[0]["type"], "checkpoint");
    assert_eq!(old[0]["chain_start"], "empty");
    assert_eq!(old[0]["head"], "0".repeat(64));
    assert_eq!(old[1]["url"], "http://a.example/private/0");
    assert_eq!(new[0]["reason"], "reopen");
    assert_eq!(new[0]["file_start"], true);
    assert_eq!(new[0]["head"], old[3]["chain"]);
    assert_eq!(new[2]["reason"], "start");
    assert_eq!(new[2]["file_start"], false);
    assert_eq!(new[2]["head"], new[1]["chain"]);
    assert_eq!(
        check(&[rotated, path], None),
        "intact: 2 files, 8 lines (seq 1 to 8), 3 checkpoints, 0 signatures checked; \
         3 checkpoints unsigned"
    );
}

#[test]
fn signed_checkpoints_verify_with_the_public_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let key_path = dir.path().join("key").join("signing.pem");
    let (key, _) = SigningKey::load_or_create(&key_path).expect("key");
    let public = key.public();
    let log = AuditLog::open(&path, false, Some(key)).expect("open");
    log.write(&record("http://a.example/private/1"))
        .expect("write");
    log.reopen().expect("reopen");
    let summary = check(&[path], Some(public));
    assert!(
        summary.contains("2 checkpoints, 2 signatures checked"),
        "{summary}"
    );
}

#[test]
fn a_torn_last_line_is_cut_at_start_and_the_chain_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&path, false, None).expect("open");
    log.write(&record("http://a.example/private/1"))
        .expect("write");
    drop(log);
    let whole = std::fs::read(&path).expect("read");
    let mut torn = whole.clone();
    torn.extend_from_slice(b"{\"seq\":3,\"time\":\"2026-11");
    std::fs::write(&path, &torn).expect("tear");
    let log = AuditLog::open(&path, false, None).expect("restart");
    log.write(&record("http://a.example/private/2"))
        .expect("write");
    let text = std::fs::read(&path).expect("read");
    assert!(text.starts_with(&whole));
    let summary = check(&[path], None);
    assert!(
        summary.starts_with("intact: 1 file, 4 lines (seq 1 to 4)"),
        "{summary}"
    );
}

#[test]
fn a_log_from_before_chaining_begins_a_chain_in_a_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    std::fs::write(&path, "{\"url\":\"http://a.example/old\"}\n").expect("old log");
    let log = AuditLog::open(&path, false, None).expect("open");
    log.write(&record("http://a.example/private/1"))
        .expect("write");
    let all = lines(&path);
    assert_eq!(all[1]["chain_start"], "unchained");
    assert_eq!(all[1]["seq"], 1);
    let summary = check(&[path], None);
    assert!(
        summary.ends_with("1 line before the chain began, not verified"),
        "{summary}"
    );
}

#[test]
fn a_record_that_cannot_be_written_is_counted() {
    // A full disk: every write to /dev/full fails with ENOSPC.
    let registry = crate::metrics::Registry::new();
    let log = AuditLog::open(Path::new("/dev/full"), false, None)
        .expect("open")
        .with_metrics(&registry);
    assert!(log.write(&record("http://a.example/x")).is_err());
    assert!(log.write(&record("http://a.example/y")).is_err());
    assert_eq!(
        crate::metrics::sample(
            &registry.encode(),
            "robots_proxy_audit_write_failures_total"
        ),
        Some(2.0)
    );
}

/// `fdatasync` calls per policy: `every` one per line, `interval` one a
/// second while lines come (from its thread), `none` never.
#[test]
fn lines_are_synced_as_audit_sync_says() {
    use super::SyncPolicy;
    let syncs = |registry: &crate::metrics::Registry| {
        crate::metrics::sample(&registry.encode(), "robots_proxy_audit_syncs_total")
    };
    let dir = tempfile::tempdir().expect("tempdir");
    for (policy, name) in [
        (SyncPolicy::None, "none"),
        (SyncPolicy::Every, "every"),
        (SyncPolicy::Interval, "interval"),
    ] {
        let registry = crate::metrics::Registry::new();
        let path = dir.path().join(format!("{name}.jsonl"));
        let log = AuditLog::open(&path, false, None)
            .expect("open")
            .with_metrics(&registry)
            .with_sync(policy)
            .expect("sync");
        let at_start = syncs(&registry);
        for i in 0..3 {
            log.write(&record(&format!("http://a.example/private/{i}")))
                .expect("write");
        }
        match policy {
            SyncPolicy::None => {
                assert_eq!((at_start, syncs(&registry)), (Some(0.0), Some(0.0)));
            }
            // The start checkpoint, then each line before write returns.
            SyncPolicy::Every => assert_eq!((at_start, syncs(&registry)), (Some(1.0), Some(4.0))),
            SyncPolicy::Interval => {
                // The thread syncs the three lines within its second.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while syncs(&registry) < Some(2.0) {
                    assert!(std::time::Instant::now() < deadline, "no sync within 10 s");
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
        }
    }
}

/// A checkpoint comes only when lines were written since the last one,
/// every checkpoint reaches the witness file, and a cut of the log's end
/// older than the last witnessed checkpoint is found through it.
#[test]
fn periodic_checkpoints_reach_the_witness_and_show_a_cut_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let witness = dir.path().join("witness").join("checkpoints.jsonl");
    std::fs::create_dir(witness.parent().expect("dir")).expect("mkdir");
    let log = AuditLog::open(&path, false, None)
        .expect("open")
        .with_witness(Some(witness.clone()));
    assert!(!log.periodic_checkpoint().expect("nothing to do"));
    for i in 0..3 {
        log.write(&record(&format!("http://a.example/private/{i}")))
            .expect("write");
    }
    assert!(log.periodic_checkpoint().expect("checkpoint"));
    assert!(!log.periodic_checkpoint().expect("no line since"));
    log.write(&record("http://a.example/private/3"))
        .expect("write");
    drop(log);
    let kept = lines(&witness);
    let reasons: Vec<_> = kept
        .iter()
        .map(|l| (l["seq"].as_u64(), l["reason"].as_str()))
        .collect();
    assert_eq!(
        reasons,
        [(Some(1), Some("start")), (Some(5), Some("interval"))]
    );
    let all = lines(&path);
    assert_eq!(all[4]["type"], "checkpoint");

    let opts = verify::Options {
        witness: Some(witness.clone()),
        ..verify::Options::default()
    };
    let verdict = |opts: &verify::Options| match verify::verify(std::slice::from_ref(&path), opts)
        .expect("readable")
    {
        Outcome::Intact(s) => Ok(s.to_string()),
        Outcome::Broken(f) => Err(f.to_string()),
    };
    assert!(verdict(&opts).is_ok_and(|s| s.contains("2 kept checkpoints matched")));
    // The last line (after the last checkpoint) cut: within the bound,
    // not seen.
    let text = std::fs::read_to_string(&path).expect("read");
    let cut: Vec<&str> = text.lines().collect();
    std::fs::write(&path, format!("{}\n", cut[..5].join("\n"))).expect("write");
    assert!(verdict(&opts).is_ok());
    // Cut before the witnessed checkpoint: found.
    std::fs::write(&path, format!("{}\n", cut[..3].join("\n"))).expect("write");
    let why = verdict(&opts).expect_err("a cut tail");
    assert!(
        why.contains("the log ends at seq 3")
            && why.contains("has seq 5: lines were cut from the end"),
        "{why}"
    );
    // Without the witness nothing shows it.
    assert!(verdict(&verify::Options::default()).is_ok());
}

#[test]
fn removed_evidence_is_chained_and_listed_by_verify_and_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(&path, false, None).expect("open");
    log.write(&record("http://a.example/private/0"))
        .expect("write");
    let sha = "ab".repeat(32);
    log.write_evidence_removed(sha.clone(), 400_000, "audit.archive_max reached")
        .expect("write");
    drop(log);
    let summary = check(std::slice::from_ref(&path), None);
    assert!(
        summary.contains(&format!(
            "evidence removed at seq 3: robots_sha256 {sha}: audit.archive_max reached"
        )),
        "{summary}"
    );
    let report = super::report::report(
        std::slice::from_ref(&path),
        &super::report::Options {
            since: None,
            until: None,
            top: 10,
            usage: false,
        },
    )
    .expect("report");
    assert_eq!(report.removed_total, 1);
    assert_eq!(report.removed[0].sha256, sha);
    assert_eq!(report.total.requests, 1, "not counted as a request");
}

/// `every` is a group commit: lines written while a sync cannot run all
/// wait (none returns before a sync that began after its write ends),
/// and one or two syncs then cover them all.
#[test]
fn concurrent_lines_share_a_sync_and_none_returns_before_it() {
    use super::SyncPolicy;
    use std::sync::atomic::{AtomicU64, Ordering};
    let syncs = |registry: &crate::metrics::Registry| {
        crate::metrics::sample(&registry.encode(), "robots_proxy_audit_syncs_total").unwrap_or(0.0)
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let registry = crate::metrics::Registry::new();
    let log = AuditLog::open(&path, false, None)
        .expect("open")
        .with_metrics(&registry)
        .with_sync(SyncPolicy::Every)
        .expect("sync");
    let before = syncs(&registry);
    let returned = AtomicU64::new(0);
    const WRITERS: u64 = 16;
    std::thread::scope(|scope| {
        let held = log.synced.hold_file();
        for i in 0..WRITERS {
            let (log, returned) = (&log, &returned);
            scope.spawn(move || {
                log.write(&record(&format!("http://a.example/private/{i}")))
                    .expect("write");
                returned.fetch_add(1, Ordering::SeqCst);
            });
        }
        // Every line is in the file, and no writer has returned.
        while log.synced.written_count() < WRITERS {
            std::thread::yield_now();
        }
        assert_eq!(returned.load(Ordering::SeqCst), 0);
        assert_eq!(syncs(&registry), before);
        drop(held);
    });
    assert_eq!(returned.load(Ordering::SeqCst), WRITERS);
    let used = syncs(&registry) - before;
    assert!(
        (1.0..=2.0).contains(&used),
        "{used} syncs for {WRITERS} lines"
    );
    assert!(check(&[path], None).starts_with("intact: 1 file, 17 lines"));
}
