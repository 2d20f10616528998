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
    robots_proxy::systemd::notify_ready();
    robots_proxy::systemd::notify_status("listening on 127.0.0.1:3128\nsecond line");
    robots_proxy::systemd::notify_reloading();
    robots_proxy::systemd::notify_stopping();
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
        .args(["--exact", "child_sends_notifications", "--test-threads=1"])
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
    for _ in 0..4 {
        let n = sock.recv(&mut buf).unwrap();
        got.push(String::from_utf8(buf[..n].to_vec()).unwrap());
    }
    assert_eq!(got[0], "READY=1\n");
    assert_eq!(got[1], "STATUS=listening on 127.0.0.1:3128 second line\n");
    assert!(
        got[2].starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{}",
        got[2]
    );
    assert_eq!(got[3], "STOPPING=1\n");
}

#[test]
fn no_socket_is_a_no_op() {
    // Under systemd (NOTIFY_SOCKET set) this would message the real manager.
    if std::env::var_os("NOTIFY_SOCKET").is_some() {
        return;
    }
    robots_proxy::systemd::notify_ready();
    robots_proxy::systemd::notify_stopping();
}
