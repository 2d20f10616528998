//! sd_notify wrappers: messages reach $NOTIFY_SOCKET, and nothing happens
//! without it. The sending half runs in a child copy of this test binary,
//! so the parent never has to modify its own environment.

use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::Duration;

const CHILD_FLAG: &str = "ROBOTS_PROXY_NOTIFY_CHILD";

/// Only does something when started by `notifications_reach_the_socket`.
#[test]
fn child_sends_notifications() {
    if std::env::var_os(CHILD_FLAG).is_none() {
        return;
    }
    super::notify_ready();
    super::notify_reloading();
    super::notify_stopping();
}

#[test]
fn notifications_reach_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // Output captured so the child's own test summary stays out of ours.
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "ops::systemd::tests::child_sends_notifications",
            "--test-threads=1",
        ])
        .env(CHILD_FLAG, "1")
        .env("NOTIFY_SOCKET", &path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    for _ in 0..3 {
        let n = sock.recv(&mut buf).unwrap();
        got.push(String::from_utf8(buf[..n].to_vec()).unwrap());
    }
    assert_eq!(got[0], "READY=1\n");
    assert!(
        got[1].starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{}",
        got[1]
    );
    assert_eq!(got[2], "STOPPING=1\n");
}

/// Set in the child run by `no_socket_is_a_no_op`.
const QUIET_CHILD_FLAG: &str = "ROBOTS_PROXY_NOTIFY_QUIET_CHILD";

/// Only does something when started by `no_socket_is_a_no_op`: sends every
/// notification with warnings logged to stderr, then says it got through.
#[test]
fn child_notifies_with_warnings_shown() {
    if std::env::var_os(QUIET_CHILD_FLAG).is_none() {
        return;
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::WARN)
        .init();
    super::notify_ready();
    super::notify_reloading();
    super::notify_stopping();
    println!("all notifications sent");
}

/// Runs `child_notifies_with_warnings_shown` with `NOTIFY_SOCKET` set to
/// `socket` (or unset): whether it got through, and its stderr.
fn notify_child(socket: Option<&std::path::Path>) -> (bool, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "ops::systemd::tests::child_notifies_with_warnings_shown",
        "--test-threads=1",
        "--nocapture",
    ])
    .env(QUIET_CHILD_FLAG, "1");
    match socket {
        Some(path) => cmd.env("NOTIFY_SOCKET", path),
        None => cmd.env_remove("NOTIFY_SOCKET"),
    };
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "child failed: {stdout}{stderr}");
    (stdout.contains("all notifications sent"), stderr)
}

/// Without `NOTIFY_SOCKET` (not started by systemd) every notification
/// gets through without a message, a warning or a panic. The child's
/// environment is set, so this runs under systemd too. A socket that is
/// set but missing shows the warning this looks for.
#[test]
fn no_socket_is_a_no_op() {
    let (done, stderr) = notify_child(None);
    assert!(done, "the notifications returned: {stderr}");
    assert!(!stderr.contains("sd_notify failed"), "{stderr}");
    assert!(!stderr.contains("WARN"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.sock");
    let (done, stderr) = notify_child(Some(&missing));
    assert!(done, "a failed notification does not stop the caller");
    assert!(stderr.contains("sd_notify failed"), "{stderr}");
}
