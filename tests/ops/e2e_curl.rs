//! End to end: the real binary, started as a user would, driven by curl -x.

use std::process::Command;

use crate::support;
use crate::support::Origin;
use crate::support::binary::{Running, TextFile, command, open_files, run, run_on};

/// The binary started with `run args`.
async fn start(args: &[&str]) -> Running {
    let mut command = command();
    command.env("RUST_LOG", "info").arg("run").args(args);
    Running::start(command).await
}

fn curl(proxy: &str, url: &str) -> (String, String) {
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "10", "-x"])
        .arg(format!("http://{proxy}"))
        .args(["-w", "\n%{http_code}", url])
        .output()
        .expect("curl runs (install curl)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or((&text, ""));
    (code.to_string(), body.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn curl_through_the_binary_allowed_and_blocked_then_clean_sigterm() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    origin.route("/public", support::Reply::ok("public page"));
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = dir.path().join("audit.jsonl");
    let mut running = start(&[
        "--listen",
        "127.0.0.1:0",
        "--allow-private-destinations",
        "--audit-log",
        audit.to_str().expect("utf8 path"),
    ])
    .await;
    let addr = running.addr.to_string();
    let (public, private) = (origin.url("/public"), origin.url("/private/page"));
    let ((code_ok, body_ok), (code_no, body_no)) =
        tokio::task::spawn_blocking(move || (curl(&addr, &public), curl(&addr, &private)))
            .await
            .expect("curl task");
    assert_eq!(code_ok, "200");
    assert_eq!(body_ok, "public page");
    assert_eq!(code_no, "403");
    assert!(body_no.contains("line 2: Disallow: /private"), "{body_no}");
    assert_eq!(origin.hits("/private/page"), 0);
    // The start checkpoint, then the blocked request's line.
    let lines = std::fs::read_to_string(&audit).expect("audit log");
    assert_eq!(lines.lines().count(), 2);
    assert!(
        lines
            .lines()
            .next()
            .is_some_and(|l| l.contains("\"type\":\"checkpoint\""))
    );
    assert!(lines.contains("\"decision\":\"disallowed\""));

    // SIGTERM: a clean exit with status 0.
    running.signal("TERM");
    let exit = running.wait_exit().await;
    assert!(exit.success(), "{exit:?}");
}

#[test]
fn run_with_a_bad_config_names_key_and_line() {
    let out = run_on(
        "bad.toml",
        "listen = \"127.0.0.1:0\"\n[robots]\nfetch_timeout = \"fast\"\n",
        &["run", "--config"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 3") && err.contains("fast"), "{err}");
}

#[test]
fn config_check_accepts_the_shipped_example_and_rejects_unknown_keys() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config/robots-proxy.toml");
    let out = run(&["config", "check", example]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run_on(
        "bad.toml",
        "[admin]\nlisten = \"127.0.0.1:9000\"\nport = 3\n",
        &["config", "check"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 3") && err.contains("port"), "{err}");
}

/// Started with the usual soft open-file limit of a shell (here 256), the
/// proxy raises it to the hard limit and allows a quarter of it as client
/// connections.
#[tokio::test]
async fn the_binary_raises_its_open_file_limit_and_derives_max_connections() {
    let hard = open_files(None).expect("own limits").hard;
    let mut command = Command::new("sh");
    command
        .env("RUST_LOG", "info")
        .args(["-c", "ulimit -S -n 256 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_robots-proxy"))
        .args(["run", "--listen", "127.0.0.1:0"]);
    let mut running = Running::start(command).await;
    let soft = open_files(Some(running.child.id()))
        .expect("the proxy's limits")
        .soft;
    let _ = running.child.kill();
    let _ = running.child.wait();
    match hard {
        Some(hard) => {
            assert_eq!(soft, Some(hard));
            let expected = (hard / 4).clamp(16, 1 << 18);
            assert!(
                running
                    .listening
                    .contains(&format!("max_connections={expected}")),
                "{}",
                running.listening
            );
        }
        // Unlimited hard limit: raised as far as the kernel allows.
        None => assert!(soft.is_none_or(|n| n > 256), "{soft:?}"),
    }
}

/// `config check` refuses what `run` would refuse, and lists every problem
/// at once; `run` says each start error once.
#[test]
fn config_check_is_as_strict_as_run_and_reports_every_error() {
    let bad = TextFile::new(
        "bad.toml",
        "listen = \"127.0.0.1:3999\"\n\
         [admin]\nlisten = \"127.0.0.1:3999\"\n\
         [access]\nallow_clients = []\n\
         [[access.users]]\nname = \"a:b\"\npassword_hash = \"$argon2id$v=19$m=8,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA\"\n\
         [[access.users]]\nname = \"plain\"\npassword_hash = \"secret\"\n\
         [log]\nlevel = \"verbose\"\n",
    );
    let out = bad.run(&["config", "check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for key in [
        "`access.allow_clients`",
        "\"a:b\"",
        "\"plain\"",
        "`log.level`",
        "`admin.listen`",
    ] {
        assert!(err.contains(key), "{key} missing in: {err}");
    }
    // The same file stops `run` before it binds anything, with the same words.
    let out = bad.run(&["run", "--config"]);
    assert_ne!(out.status.code(), Some(0));
    let run_err = String::from_utf8_lossy(&out.stderr);
    assert!(run_err.contains("`log.level`"), "{run_err}");
    let first = run_err
        .lines()
        .find(|l| l.contains("`log.level`"))
        .unwrap_or_default();
    assert_eq!(
        first.matches("`log.level`").count(),
        1,
        "said once: {run_err}"
    );
}

/// `listen = "localhost:PORT"` is accepted by `config check` and by `run`
/// (file and flag), and means the IPv4 loopback.
#[test]
fn localhost_is_a_listen_address() {
    let out = run_on(
        "localhost.toml",
        "listen = \"localhost:3128\"\n[admin]\nlisten = \"localhost:9128\"\n",
        &["config", "check"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The flag: taken, it fails on the bind (not on the syntax) and names
    // the address it resolved to.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let out = run(&["run", "--listen", &format!("localhost:{port}")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{err}"
    );
}

#[test]
fn a_start_error_is_said_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let out = run(&["run", "--listen", &addr.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().last().unwrap_or_default();
    assert!(line.contains(&format!("cannot listen on {addr}")), "{err}");
    assert_eq!(line.matches("os error 98").count(), 1, "{line}");
}
