//! The admin listener's roles and bounds, on the real binary: a viewer
//! reads and cannot purge or reload, an operator reloads with
//! `POST /reload`, the CA is public, requests sent by another site's page
//! are refused, and one address cannot take every admin slot.

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpSocket, TcpStream};

use crate::support::binary::{Running, Setup};
use crate::support::raw::{RawResp, read_response};
use crate::support::{Origin, admin_lines, basic, cheap_hash};

const ROBOTS: &str = "User-agent: alphabot\nDisallow: /a\n\nUser-agent: betabot\nDisallow: /b\n";

/// The admin table: a viewer `eve` and an operator `ops` (password `pw`).
fn admin_table() -> String {
    let hash = cheap_hash("pw");
    format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\npublic_proxy_url = \"http://proxy.example.net:3128\"\n\
         [[admin.users]]\nname = \"eve\"\nrole = \"viewer\"\npassword_hash = \"{hash}\"\n\
         [[admin.users]]\nname = \"ops\"\nrole = \"operator\"\npassword_hash = \"{hash}\"\n"
    )
}

/// The admin address from the start-up line.
fn admin_addr(proxy: &Running) -> SocketAddr {
    let line = &proxy.listening;
    let rest = &line[line.find("admin=").expect("admin=") + "admin=".len()..];
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    rest[..end].parse().expect("admin address")
}

/// One admin request as `user` (password `pw`), with extra header lines.
async fn ask(
    addr: SocketAddr,
    method: &str,
    path: &str,
    user: Option<&str>,
    extra: &str,
) -> RawResp {
    let auth = user.map_or_else(String::new, |u| {
        format!("authorization: {}\r\n", basic(&format!("{u}:pw")))
    });
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\n{auth}{extra}content-length: 0\r\nconnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.expect("write");
    read_response(&mut s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_reads_an_operator_reloads_and_the_ca_is_public() {
    let origin = Origin::with_robots(ROBOTS).await;
    let table = admin_table();
    let setup = Setup::with_config("alphabot", &table);
    let mut proxy = setup.start().await;
    let admin = admin_addr(&proxy);
    let explain = format!("/explain?url={}", origin.url("/a/1"));

    // No credentials: the CA and the probes only.
    for public in ["/healthz", "/ca", "/ca.pem"] {
        let r = ask(admin, "GET", public, None, "").await;
        assert_eq!(r.status(), 200, "{public}: {}", r.text);
    }
    let ca = ask(admin, "GET", "/ca", None, "").await;
    assert!(
        ca.text.contains("http://proxy.example.net:3128"),
        "the /ca page names admin.public_proxy_url: {}",
        ca.text
    );
    assert_eq!(ask(admin, "GET", "/", None, "").await.status(), 401);

    // A viewer reads, and is refused what changes anything.
    for path in ["/", "/metrics", explain.as_str()] {
        let r = ask(admin, "GET", path, Some("eve"), "").await;
        assert_eq!(r.status(), 200, "{path}: {}", r.text);
    }
    for path in ["/purge?origin=http://a.test/", "/reload"] {
        let r = ask(admin, "POST", path, Some("eve"), "").await;
        assert_eq!(r.status(), 403, "{path}: {}", r.text);
        assert!(r.text.contains("operator role"), "{}", r.text);
    }
    assert_eq!(
        ask(
            admin,
            "POST",
            "/purge?origin=http://a.test/",
            Some("ops"),
            ""
        )
        .await
        .status(),
        200
    );

    // An operator reloads: the answer names the keys that changed.
    setup.write_config("betabot", &table);
    let r = ask(admin, "POST", "/reload", Some("ops"), "").await;
    assert_eq!(r.status(), 200, "{}", r.text);
    assert!(r.text.contains("\"agent\""), "{}", r.text);
    proxy.wait_for("configuration reloaded").await;
    let judged = ask(admin, "GET", &explain, Some("eve"), "").await;
    assert!(judged.text.contains("betabot"), "{}", judged.text);

    // A configuration refused: 422 naming the key and line, the running
    // one stays.
    setup.write_config("betabot", &format!("{table}max_connections = 0\n"));
    let r = ask(admin, "POST", "/reload", Some("ops"), "").await;
    assert_eq!(r.status(), 422, "{}", r.text);
    assert!(
        r.text.contains("line 19") && r.text.contains("`max_connections`"),
        "{}",
        r.text
    );
    let judged = ask(admin, "GET", &explain, Some("eve"), "").await;
    assert!(judged.text.contains("betabot"), "{}", judged.text);

    // Another site's page cannot make the browser reload or explain (an
    // explanation fetches robots.txt).
    let cross = "sec-fetch-site: cross-site\r\n";
    assert_eq!(
        ask(admin, "POST", "/reload", Some("ops"), cross)
            .await
            .status(),
        403
    );
    assert_eq!(
        ask(admin, "GET", &explain, Some("ops"), cross)
            .await
            .status(),
        403
    );
    let same = "sec-fetch-site: same-origin\r\n";
    assert_eq!(
        ask(admin, "GET", &explain, Some("ops"), same)
            .await
            .status(),
        200
    );

    // A failed login, then a reload by signal.
    let r = ask(admin, "GET", "/", Some("mallory"), "").await;
    assert_eq!(r.status(), 401);
    proxy.signal("HUP");
    proxy.wait_for("by=SIGHUP").await;

    // Every admin action is a line of the chained log, in order.
    let lines = admin_lines(&setup.audit_path());
    let summary: Vec<String> = lines
        .iter()
        .map(|l| {
            let outcome = l["outcome"].as_str().unwrap_or("-");
            format!(
                "{} by {} {} {} {}",
                l["action"].as_str().unwrap_or("-"),
                l["by"].as_str().unwrap_or("-"),
                l["target"].as_str().unwrap_or("-"),
                l["count"],
                outcome.split(':').next().unwrap_or(outcome),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            "purge by admin user ops origin=http://a.test 0 -",
            "reload by admin user ops - null applied",
            "reload by admin user ops - null rejected",
            "login_failed by admin user mallory - null -",
            "reload by SIGHUP - null rejected",
        ],
        "{lines:#?}"
    );
    assert_eq!(lines[1]["changed"], serde_json::json!(["agent"]));
    assert!(
        lines[0]["client"]
            .as_str()
            .is_some_and(|c| c.starts_with("127.0.0.1:"))
    );
    let path = setup.audit_path().display().to_string();
    let out = crate::support::binary::run(&["audit", "verify", &path]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.starts_with("intact"), "{text}");
    let out = crate::support::binary::run(&["audit", "report", &path]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("admin actions: 5"), "{text}");
    assert!(
        text.contains("purge by admin user ops: origin=http://a.test; scope node; 0 dropped"),
        "{text}"
    );
    // And in the web view.
    let page = ask(admin, "GET", "/", Some("eve"), "").await;
    assert!(page.text.contains("admin-actions-list"), "{}", page.text);
    assert!(page.text.contains("login_failed"), "{}", page.text);
}

/// Connects to `to` from `from` (another loopback address).
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(format!("{from}:0").parse().expect("address"))
        .expect("bind");
    socket.connect(to).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_take_every_admin_slot() {
    let (_setup, proxy) = Setup::running(
        "alphabot",
        "[admin]\nlisten = \"127.0.0.1:0\"\nmax_connections = 16\nmax_connections_per_client = 4\n",
    )
    .await;
    let admin = admin_addr(&proxy);
    // 16 idle connections from one address: 4 are kept, the rest closed at
    // accept.
    let mut idle = Vec::new();
    for _ in 0..16 {
        idle.push(connect_from("127.0.0.1", admin).await);
    }
    let mut from_another = connect_from("127.0.0.2", admin).await;
    from_another
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n")
        .await
        .expect("write");
    let r = read_response(&mut from_another).await;
    assert_eq!(r.status(), 200, "{}", r.text);
    drop(idle);
}
