//! The real binary: SIGHUP reload (new decisions on open connections,
//! invalid configurations rejected, audit log reopened), SIGTERM graceful
//! shutdown, and the `hash-password` and `ca init` commands.

use std::io::Write as _;
use std::process::Stdio;

use crate::support::binary::{NO_HANG, Running, Setup, command};
use crate::support::{Conn, HeldOrigin, InFlight, Origin, get_with, until_refused};

/// robots.txt with a different rule per agent.
const ROBOTS: &str = "User-agent: alphabot\nDisallow: /a\n\nUser-agent: betabot\nDisallow: /b\n";

/// An origin serving [`ROBOTS`], the binary judging as alphabot, and a
/// keep-alive client connection to it.
async fn alphabot() -> (Origin, Setup, Running, Conn) {
    let origin = Origin::with_robots(ROBOTS).await;
    let (setup, proxy) = Setup::running("alphabot", "").await;
    let conn = Conn::open(proxy.addr).await;
    (origin, setup, proxy, conn)
}

/// The status of a GET of `url` on `conn` whose User-Agent is `ua`.
async fn status_as(conn: &mut Conn, url: &str, ua: &str) -> u16 {
    conn.send(get_with(url, &[("user-agent", ua)])).await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_new_agent_and_mapping_on_an_open_keep_alive_connection() {
    let (origin, setup, mut proxy, mut conn) = alphabot().await;

    assert_eq!(conn.get(&origin.url("/a/1")).await.status, 403);
    assert_eq!(conn.get(&origin.url("/b/1")).await.status, 200);

    // Start-up says what is on, as values.
    assert!(proxy.listening.contains("admin=off"), "{}", proxy.listening);
    proxy.wait_for("response cache off").await;

    setup.write_config("betabot", "");
    let line = proxy.reload("configuration reloaded").await;
    // The line names the keys that changed, not their values.
    assert!(line.contains("changed=agent"), "{line}");
    assert!(!line.contains("betabot"), "{line}");
    // Same connection, new agent.
    let r = conn.get(&origin.url("/b/2")).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.body.contains("betabot"), "{}", r.body);
    assert_eq!(conn.get(&origin.url("/a/2")).await.status, 200);

    // An [agents] mapping: clients sending python-requests obey alphabot.
    setup.write_config("betabot", "[agents]\n\"python-requests\" = \"alphabot\"\n");
    let line = proxy.reload("configuration reloaded").await;
    assert!(line.contains("changed=agents.python-requests"), "{line}");
    let ua = "python-requests/2.32";
    assert_eq!(status_as(&mut conn, &origin.url("/a/3"), ua).await, 403);
    assert_eq!(status_as(&mut conn, &origin.url("/b/3"), ua).await, 200);
    assert_eq!(
        status_as(&mut conn, &origin.url("/b/4"), "curl/8").await,
        403
    );

    assert!(
        !conn.task.is_finished(),
        "the keep-alive connection was dropped"
    );
    // Cached entries hold the rules of the agents the proxy judges as: a
    // reload that brings a new one (betabot, then alphabot again through the
    // mapping) refetches an origin once, when a request needs it.
    assert_eq!(
        origin.hits("/robots.txt"),
        3,
        "one fetch per new set of agents"
    );
    assert_eq!(conn.get(&origin.url("/b/5")).await.status, 403);
    assert_eq!(status_as(&mut conn, &origin.url("/b/6"), ua).await, 200);
    assert_eq!(
        origin.hits("/robots.txt"),
        3,
        "the robots cache survives reloads"
    );
    assert_eq!(
        origin.hits("/a/1") + origin.hits("/b/2") + origin.hits("/a/3"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_with_an_invalid_config_keeps_the_running_one_and_names_key_and_line() {
    let (origin, setup, mut proxy, mut conn) = alphabot().await;
    assert_eq!(conn.get(&origin.url("/a/1")).await.status, 403);

    // A syntax-level error (bad enum value) on line 9; the agent change
    // above it must not be applied either.
    setup.write_config("betabot", "[politeness]\nmode = \"sometimes\"\n");
    let line = proxy.reload("reload rejected").await;
    // One log line carries position, key and reason (journald keeps
    // each stderr line as its own entry).
    assert!(line.contains("line 9"), "{line}");
    assert!(
        line.contains("mode = \"sometimes\"") && line.contains("`delay`"),
        "key or reason missing from the log line: {line}"
    );
    assert_eq!(conn.get(&origin.url("/a/2")).await.status, 403);
    assert_eq!(conn.get(&origin.url("/b/2")).await.status, 200);

    // A semantic error found after parsing.
    setup.write_config("///", "");
    let line = proxy.reload("reload rejected").await;
    assert!(line.contains("key `agent`"), "{line}");
    assert_eq!(conn.get(&origin.url("/a/3")).await.status, 403);

    // Fixed: the next SIGHUP applies it.
    setup.write_config("betabot", "");
    proxy.reload("configuration reloaded").await;
    assert_eq!(conn.get(&origin.url("/a/4")).await.status, 200);
    assert_eq!(conn.get(&origin.url("/b/4")).await.status, 403);
    assert!(proxy.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reopens_the_audit_log_after_rotation() {
    let (origin, setup, mut proxy, mut conn) = alphabot().await;

    assert_eq!(conn.get(&origin.url("/a/before")).await.status, 403);
    let audit = setup.audit_path();
    let rotated = setup.dir.path().join("audit.jsonl.1");
    std::fs::rename(&audit, &rotated).expect("rotate");

    // The reload also turns on logging of allowed requests.
    setup.write_config("alphabot", "log_all = true\n");
    proxy.reload("configuration reloaded").await;
    assert_eq!(conn.get(&origin.url("/a/after")).await.status, 403);
    assert_eq!(conn.get(&origin.url("/b/after")).await.status, 200);

    let old = setup.audit_lines(&rotated);
    assert_eq!(old.len(), 1, "{old:?}");
    assert_eq!(old[0]["url"], origin.url("/a/before"));
    let new = setup.audit_lines(&audit);
    assert_eq!(new.len(), 2, "no new audit.jsonl after SIGHUP: {new:?}");
    assert_eq!(new[0]["url"], origin.url("/a/after"));
    assert_eq!(new[0]["decision"], "disallowed");
    assert_eq!(new[0]["agent"], "alphabot");
    assert_eq!(new[1]["url"], origin.url("/b/after"));
    assert_eq!(new[1]["decision"], "allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_request_in_flight_refuses_new_connections_and_exits_zero() {
    let origin = Origin::start().await;
    let held = HeldOrigin::start().await;
    let setup = Setup::with_config("alphabot", "");
    let mut proxy = setup.start().await;
    let addr = proxy.addr;

    let mut idle = Conn::open(addr).await;
    assert_eq!(idle.get(&origin.url("/warm")).await.status, 200);
    let in_flight = held.hold(addr, "/slow").await;

    proxy.signal("TERM");
    proxy.wait_for("shutting down").await;
    until_refused(addr).await;
    tokio::time::timeout(NO_HANG, &mut idle.task)
        .await
        .expect("idle connection left open during shutdown")
        .expect("connection task")
        .expect("clean close");
    assert!(proxy.is_running(), "exited with a request in flight");

    held.release();
    let resp = in_flight.outcome().await.expect("response");
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(resp.body, "released /slow");

    let status = proxy.wait_exit().await;
    assert!(status.success(), "{status:?}");
    let log = proxy.rest_of_stderr().await.join("\n");
    assert!(log.contains("stopped"), "{log}");
    assert!(!log.contains("grace period over"), "{log}");
}

/// The client of a request cut at the end of the grace period sees its
/// connection closed, not an answer.
async fn assert_cut(in_flight: InFlight) {
    let result = in_flight.outcome().await;
    assert!(result.is_err(), "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cuts_a_request_still_running_when_the_grace_period_ends() {
    let held = HeldOrigin::start().await;
    let setup = Setup::new();
    // A short grace period.
    setup.write_config_with_grace("alphabot", "500ms");
    let mut proxy = setup.start().await;
    let in_flight = held.hold(proxy.addr, "/never").await;

    proxy.signal("TERM");
    let status = proxy.wait_exit().await;
    assert!(status.success(), "{status:?}");
    let log = proxy.rest_of_stderr().await.join("\n");
    assert!(
        log.contains("grace period over") && log.contains("connections=1"),
        "{log}"
    );
    assert_cut(in_flight).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_a_shorter_shutdown_grace() {
    let held = HeldOrigin::start().await;
    let setup = Setup::new();
    // Started with a grace longer than the test waits for anything.
    setup.write_config_with_grace("alphabot", "1h");
    let mut proxy = setup.start().await;
    setup.write_config_with_grace("alphabot", "300ms");
    proxy.reload("configuration reloaded").await;
    let restart: Vec<&String> = proxy
        .seen()
        .iter()
        .filter(|l| l.contains("need a restart"))
        .collect();
    assert!(restart.is_empty(), "{restart:?}");

    let in_flight = held.hold(proxy.addr, "/never").await;
    proxy.signal("TERM");
    // Within NO_HANG: the reloaded 300 ms, not the hour it started with.
    let status = proxy.wait_exit().await;
    assert!(status.success(), "{status:?}");
    let log = proxy.rest_of_stderr().await.join("\n");
    assert!(log.contains("grace=300ms"), "{log}");
    assert_cut(in_flight).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_applies_log_level_and_names_only_keys_not_in_force() {
    let setup = Setup::new();
    let write = |level: &str, admin_connections: u32| {
        setup.write_config(
            "alphabot",
            &format!(
                "[admin]\nmax_connections = {admin_connections}\n[log]\nlevel = \"{level}\"\n"
            ),
        );
    };
    // RUST_LOG unset: log.level decides.
    write("info", 16);
    let mut proxy = setup.start_with_config_log_level().await;

    // To warn, with a start-only change: its warning (a warn line) shows,
    // the info line "configuration reloaded" no longer does.
    write("warn", 1);
    proxy.signal("HUP");
    let first = proxy.wait_for("need a restart").await;
    assert!(first.contains("admin.max_connections"), "{first}");
    // Again with the same file: the limit is still not in force, so named
    // again; still nothing at info.
    proxy.signal("HUP");
    proxy.wait_for("need a restart").await;
    let infos: Vec<&String> = proxy
        .seen()
        .iter()
        .skip_while(|l| !l.contains("need a restart"))
        .filter(|l| l.contains("configuration reloaded"))
        .collect();
    assert!(infos.is_empty(), "info lines after level = warn: {infos:?}");

    // Back to info and to the limit it started with: nothing needs a
    // restart (a reverted change is not reported), and info lines are back.
    write("info", 16);
    proxy.signal("HUP");
    proxy.wait_for("configuration reloaded").await;
    let seen = proxy.seen();
    let last_reload = seen
        .iter()
        .rposition(|l| l.contains("log level changed"))
        .expect("log level changed line");
    assert!(
        !seen[last_reload..]
            .iter()
            .any(|l| l.contains("need a restart")),
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sd_notify_reports_ready_reloading_and_stopping_once_each() {
    use std::os::unix::net::UnixDatagram;
    let setup = Setup::with_config("alphabot", "");
    let socket_path = setup.dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind notify socket");
    socket.set_read_timeout(Some(NO_HANG)).expect("timeout");
    let recv = |socket: &UnixDatagram| {
        let mut buf = [0u8; 4096];
        let n = socket.recv(&mut buf).expect("notification");
        String::from_utf8(buf[..n].to_vec()).expect("utf8")
    };

    let mut proxy = setup.start_notifying(Some(&socket_path)).await;
    assert_eq!(recv(&socket), "READY=1\n");

    proxy.reload("configuration reloaded").await;
    let reloading = recv(&socket);
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading:?}"
    );
    assert_eq!(recv(&socket), "READY=1\n", "ready again after the reload");

    proxy.signal("TERM");
    let status = proxy.wait_exit().await;
    assert!(
        status.success(),
        "{status:?}\n{}",
        proxy.rest_of_stderr().await.join("\n")
    );
    assert_eq!(recv(&socket), "STOPPING=1\n");
    socket.set_nonblocking(true).expect("nonblocking");
    let mut buf = [0u8; 4096];
    let extra = socket
        .recv(&mut buf)
        .map(|n| String::from_utf8_lossy(&buf[..n]).into_owned());
    assert!(extra.is_err(), "unexpected notification {extra:?}");
}

// ---------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------

#[test]
fn hash_password_reads_stdin_and_prints_a_verifiable_argon2id_phc_string() {
    let mut child = command()
        .arg("hash-password")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"correct horse\n")
        .expect("write stdin");
    let out = child.wait_with_output().expect("output");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("utf8");
    let hash = stdout.trim_end();
    assert!(hash.starts_with("$argon2id$v=19$"), "{hash}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");

    use argon2::password_hash::PasswordVerifier as _;
    let parsed = argon2::password_hash::phc::PasswordHash::new(hash).expect("PHC string");
    let argon = argon2::Argon2::default();
    assert!(argon.verify_password(b"correct horse", &parsed).is_ok());
    // The newline is not part of the password.
    assert!(argon.verify_password(b"correct horse\n", &parsed).is_err());

    let empty = command()
        .arg("hash-password")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(empty.status.code(), Some(2));
    assert!(empty.stdout.is_empty());
}

#[test]
fn ca_init_creates_a_0600_key_and_refuses_to_replace_an_existing_ca() {
    use std::os::unix::fs::PermissionsExt as _;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("new").join("ca");
    let run = || {
        command()
            .args(["ca", "init", "--dir"])
            .arg(&dir)
            .output()
            .expect("run")
    };
    let out = run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("ca.pem") && stdout.contains("SHA-256"),
        "{stdout}"
    );
    let (pem, key) = (dir.join("ca.pem"), dir.join("ca.key"));
    let pem_text = std::fs::read_to_string(&pem).expect("ca.pem");
    assert!(
        pem_text.starts_with("-----BEGIN CERTIFICATE-----"),
        "{pem_text}"
    );
    let key_text = std::fs::read_to_string(&key).expect("ca.key");
    assert!(key_text.contains("PRIVATE KEY"));
    let mode = std::fs::metadata(&key).expect("key").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "ca.key mode {mode:o}");
    let mode = std::fs::metadata(&pem).expect("pem").permissions().mode() & 0o777;
    assert_eq!(
        mode & 0o077 & !0o044,
        0,
        "ca.pem writable by others: {mode:o}"
    );

    // A second run refuses and leaves both files alone.
    let again = run();
    assert_eq!(again.status.code(), Some(2));
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read_to_string(&pem).expect("pem"), pem_text);
    assert_eq!(std::fs::read_to_string(&key).expect("key"), key_text);

    // A private key alone is not silently replaced either.
    std::fs::remove_file(&pem).expect("remove pem");
    let key_only = run();
    assert_eq!(key_only.status.code(), Some(2), "ca.key was overwritten");
    assert_eq!(std::fs::read_to_string(&key).expect("key"), key_text);
}
