//! The robots.txt archive: every audit line names the text that was in
//! force when it was judged, kept by its SHA-256 and readable with
//! `robots-proxy audit robots`, across a change of the file and a restart.

use crate::support::binary::TextFile;
use crate::support::{Origin, Proxy, binary, percent};

fn sha256_hex(text: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `robots-proxy audit robots SHA --config` for a proxy's state dir.
fn audit_robots(state_dir: &std::path::Path, sha: &str, meta: bool) -> std::process::Output {
    let config = TextFile::new(
        "robots-proxy.toml",
        &format!("state_dir = {:?}\n", state_dir.display().to_string()),
    );
    let mut args = vec!["audit", "robots", sha];
    if meta {
        args.push("--meta");
    }
    args.extend(["--config", config.path.to_str().expect("utf-8 path")]);
    binary::run(&args)
}

#[tokio::test]
async fn audit_lines_name_the_robots_txt_in_force_and_the_archive_keeps_each_version() {
    let first = "User-agent: *\nDisallow: /private\n";
    let second = "User-agent: *\nDisallow: /private\nDisallow: /secret\n";
    let origin = Origin::with_robots(first).await;
    let mut proxy = Proxy::with_admin().await;
    assert_eq!(proxy.get(&origin.url("/private/a")).await.status, 403);

    // The file changes; a purge makes the next request fetch it again.
    origin.robots(second);
    let purged = proxy
        .admin_post(&format!("/purge?origin={}", percent(&origin.url("/"))))
        .await;
    assert_eq!(purged.status, 200, "{purged:?}");
    assert_eq!(proxy.get(&origin.url("/secret/b")).await.status, 403);
    assert_eq!(origin.hits("/robots.txt"), 2);

    let lines = proxy.audit();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert_eq!(
        lines[0]["robots_sha256"],
        sha256_hex(first),
        "{:#}",
        lines[0]
    );
    assert_eq!(
        lines[1]["robots_sha256"],
        sha256_hex(second),
        "{:#}",
        lines[1]
    );
    assert!(
        lines[1]["robots_fetched_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );

    // A restart keeps the archive: the binary reads it from the state dir.
    proxy.stop();
    proxy.finished().await;
    for (text, line) in [(first, &lines[0]), (second, &lines[1])] {
        let sha = line["robots_sha256"].as_str().expect("digest");
        let out = audit_robots(&proxy.state_dir, sha, false);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), text);
        // As docs/compliance.md shows it: its first 16 digits and an ellipsis.
        let out = audit_robots(&proxy.state_dir, &format!("{}…", &sha[..16]), false);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), text);
        let out = audit_robots(&proxy.state_dir, sha, true);
        assert!(out.status.success(), "{out:?}");
        let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(meta["sha256"], sha);
        let served = &meta["served"][0];
        assert_eq!(
            served["origin"],
            format!("http://{}", origin.addr),
            "{meta:#}"
        );
        assert_eq!(served["status"], 200, "{meta:#}");
        assert_eq!(served["final_url"], origin.url("/robots.txt"), "{meta:#}");
    }

    // A corrupted archive file is detected, and an unknown digest is
    // missing: exit 1, with the reason.
    let sha = lines[0]["robots_sha256"].as_str().expect("digest");
    let file = proxy
        .state_dir
        .join("robots-archive/bodies")
        .join(&sha[..2])
        .join(format!("{sha}.txt"));
    std::fs::write(&file, "User-agent: *\nDisallow:\n").expect("tamper");
    let out = audit_robots(&proxy.state_dir, sha, false);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("corrupt"),
        "{out:?}"
    );
    let out = audit_robots(&proxy.state_dir, &"0".repeat(64), false);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let out = audit_robots(&proxy.state_dir, "not-a-digest", false);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[tokio::test]
async fn a_fetch_that_gives_no_file_is_recorded_as_its_outcome() {
    let origin = Origin::with_robots_reply(crate::support::Reply::status(503)).await;
    let proxy = Proxy::start().await;
    assert_eq!(proxy.get(&origin.url("/a")).await.status, 503);
    let lines = proxy.audit();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].get("robots_sha256").is_none(), "{:#}", lines[0]);
    assert_eq!(lines[0]["fetch_status"], 503);
    let outcomes = std::fs::read_to_string(proxy.state_dir.join("robots-archive/outcomes.jsonl"))
        .expect("outcomes");
    let line: serde_json::Value =
        serde_json::from_str(outcomes.lines().next().expect("a line")).expect("json");
    assert_eq!(line["origin"], format!("http://{}", origin.addr));
    assert_eq!(line["status"], 503);
    assert_eq!(line["outcome"], "unreachable");
}

#[tokio::test]
async fn a_restarted_proxy_judges_by_the_kept_robots_txt_and_replays_a_recorded_crawl_offline() {
    use robots_proxy::config::CacheMode;
    let state = tempfile::tempdir().expect("tempdir");
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let dir = state.path().to_path_buf();
    let start = |mode: CacheMode| {
        let dir = dir.clone();
        Proxy::start_with(move |c| {
            c.audit.path = Some(dir.join("audit.jsonl"));
            c.state_dir = Some(dir);
            c.cache.enabled = true;
            c.cache.mode = mode;
        })
    };
    // Record a crawl.
    let mut first = start(CacheMode::StoreAll).await;
    assert_eq!(first.get(&origin.url("/page")).await.status, 200);
    assert_eq!(first.get(&origin.url("/private/a")).await.status, 403);
    first.stop();
    first.finished().await;
    assert_eq!(origin.hits("/robots.txt"), 1);

    // The origin is down now (its robots.txt a 503, its pages too).
    origin.route("/robots.txt", crate::support::Reply::status(503));
    origin.route("/page", crate::support::Reply::status(503));
    let second = start(CacheMode::Offline).await;
    let page = second.get(&origin.url("/page")).await;
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(page.body, "page /page");
    let blocked = second.get(&origin.url("/private/b")).await;
    assert_eq!(blocked.status, 403, "{blocked:?}");
    assert!(
        blocked.body.contains("Disallow: /private"),
        "{}",
        blocked.body
    );
    // Judged by the kept file: robots.txt was not fetched again.
    assert_eq!(origin.hits("/robots.txt"), 1);
}
