//! The audit log never lies: on a full disk no answer that needs a line
//! goes out without it and no torn line is left behind; a deleted file or
//! directory is noticed and recreated; the file is not world-readable.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::{NO_HANG, Origin, Proxy, json_lines, need, until_paced};

/// How often a request asks whether the proxy has recovered: a client
/// retrying.
const EVERY: Duration = Duration::from_millis(50);

/// A tmpfs of `size` mounted on `dir` for the test's lifetime.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// `None` (with the reason on stderr) where mounting is not allowed.
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).expect("mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs(dir.to_path_buf())),
            Ok(o) => {
                eprintln!(
                    "skipping: cannot mount a tmpfs (needs root): {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("skipping: cannot run mount: {e}");
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the filesystem holding `dir` with one file; returns its path.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).expect("filler");
    let block = [b'x'; 512];
    while f.write_all(&block).is_ok() {}
    // Byte by byte into the last partial block.
    while f.write_all(b"x").is_ok() {}
    path
}

fn count(lines: &[serde_json::Value], decision: &str) -> usize {
    lines.iter().filter(|l| l["decision"] == decision).count()
}

#[tokio::test]
async fn a_full_disk_never_lets_an_answer_out_without_its_line_nor_leaves_a_torn_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = dir.path().join("small");
    let _tmpfs = need!(Tmpfs::mount(&mnt, "64k"));
    let audit = mnt.join("audit.jsonl");
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let path = audit.clone();
    let proxy = Proxy::start_with(move |c| {
        c.audit.path = Some(path);
        c.audit.log_all = true;
    })
    .await;
    assert_eq!(proxy.get(&origin.url("/warm")).await.status, 200);

    let filler = fill(&mnt);
    let (mut blocked, mut allowed, mut refused) = (0, 0, 0);
    for i in 0..200 {
        let url = if i % 2 == 0 {
            origin.url(&format!("/private/{i}"))
        } else {
            origin.url(&format!("/page/{i}"))
        };
        match proxy.get(&url).await.status {
            403 => blocked += 1,
            200 => allowed += 1,
            503 => refused += 1,
            s => panic!("unexpected {s}"),
        }
    }
    assert!(
        refused > 0,
        "the disk filled up: some requests were refused"
    );
    let written = json_lines(&audit);
    assert_eq!(
        count(&written, "disallowed"),
        blocked,
        "each 403 has its line"
    );
    assert_eq!(
        count(&written, "allowed"),
        allowed + 1,
        "each forwarded request has its line"
    );
    let forwarded: usize = (0..200).map(|i| origin.hits(&format!("/page/{i}"))).sum();
    assert_eq!(forwarded, allowed, "nothing forwarded without its line");

    // Space comes back: the proxy recovers on its own (it retries opening
    // at most once a second) and every line in the file still parses.
    std::fs::remove_file(&filler).expect("free space");
    until_paced(
        "writes to resume once there is space",
        NO_HANG,
        EVERY,
        || async {
            match proxy.get(&origin.url("/private/after")).await.status {
                403 => Ok(()),
                status => Err(format!("answered {status}")),
            }
        },
    )
    .await;
    let written = json_lines(&audit);
    assert_eq!(
        written.last().map(|l| l["url"].clone()),
        Some(origin.url("/private/after").into())
    );
    // The failed writes left no gap in the chain: each line links to the
    // last one written whole.
    let out = crate::support::binary::run(&["audit", "verify", &audit.display().to_string()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.starts_with("intact: 1 file"), "{text}");
}

#[tokio::test]
async fn a_deleted_audit_file_or_directory_is_noticed_and_recreated() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = dir.path().join("logs").join("audit.jsonl");
    let path = audit.clone();
    let proxy = Proxy::start_with(move |c| c.audit.path = Some(path)).await;
    assert_eq!(proxy.get(&origin.url("/private/1")).await.status, 403);
    assert_eq!(json_lines(&audit).len(), 1);
    for remove_dir in [false, true] {
        if remove_dir {
            std::fs::remove_dir_all(audit.parent().expect("dir")).expect("rm -r");
        } else {
            std::fs::remove_file(&audit).expect("rm");
        }
        // The check runs at most once a second: keep sending until the
        // file is back at its path.
        let sent = std::cell::Cell::new(0);
        let what = format!("the file recreated (directory removed: {remove_dir})");
        until_paced(&what, NO_HANG, EVERY, || {
            let url = origin.url(&format!("/private/x{}", sent.replace(sent.get() + 1)));
            let (proxy, audit) = (&proxy, &audit);
            async move {
                let resp = proxy.get(&url).await;
                assert_eq!(resp.status, 403);
                audit.exists().then_some(())
            }
        })
        .await;
        let written = json_lines(&audit);
        assert_eq!(written.len(), 1, "{written:?}");
        assert_eq!(written[0]["decision"], "disallowed");
    }
    let mode = std::fs::metadata(&audit)
        .expect("audit file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640, "not world-readable: {mode:o}");
}

/// `audit.sync = "every"` on one serving thread, 32 requests at once:
/// each is answered once its line is on the disk, and a request waiting
/// for its sync leaves the thread to the others, whose lines share that
/// sync or the next (group commit), instead of one sync each in turn.
#[tokio::test]
async fn concurrent_requests_share_syncs_under_audit_sync_every() {
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = dir.path().join("every.toml");
    std::fs::write(&toml, "[audit]\nsync = \"every\"\n").expect("write");
    let every = robots_proxy::config::Config::load(&toml)
        .expect("config")
        .audit
        .sync;
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let proxy = Proxy::start_with(move |c| {
        crate::support::admin(c);
        c.audit.sync = every;
    })
    .await;
    // The robots.txt fetched and cached first.
    assert_eq!(proxy.get(&origin.url("/private/warm")).await.status, 403);
    let syncs = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("robots_proxy_audit_syncs_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .expect("robots_proxy_audit_syncs_total")
    };
    // Each burst opens its connections anew, and the proxy accepts them
    // one by one: a burst whose requests happen to arrive one after another
    // syncs once each. Without group commit every burst would; with it, one
    // of a few bursts shares syncs.
    const REQUESTS: usize = 32;
    const BURSTS: usize = 5;
    let mut written = 1;
    let mut shared = Vec::new();
    for burst in 0..BURSTS {
        let before = syncs(&proxy.metrics().await);
        let urls: Vec<String> = (0..REQUESTS)
            .map(|i| origin.url(&format!("/private/{burst}/{i}")))
            .collect();
        let answers = futures_util::future::join_all(urls.iter().map(|u| proxy.get(u))).await;
        assert!(answers.iter().all(|a| a.status == 403), "{answers:?}");
        written += REQUESTS;
        assert_eq!(proxy.audit().len(), written);
        let used = syncs(&proxy.metrics().await) - before;
        assert!(used >= 1.0, "no sync for {REQUESTS} lines");
        shared.push(used);
        if used < REQUESTS as f64 {
            return;
        }
    }
    panic!("{shared:?} syncs for {REQUESTS} lines written at once, burst by burst");
}
