//! The crawler's identity: the User-Agent policy seen at real origins, and
//! Web Bot Auth signatures verified by an implementation that is not the
//! proxy's (Python's `http-message-signatures`), on plain and intercepted
//! HTTPS requests, against the key directory the proxy serves.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::Request;
use serde_json::{Value, json};

use robots_proxy::config::{UaMode, UserConfig};

use crate::support::component::{missing, used};
use crate::support::tls::{proxy_trusting_with, tls_origin_with_robots};
use crate::support::{Conn, Origin, Proxy};

const OURS: &str = "ExampleBot/1.0 (+https://example.com/bot)";
const ROBOTS: &str = "User-agent: examplebot\nDisallow: /private\n\nUser-agent: *\nAllow: /\n";

/// The User-Agent of each request `origin` saw for `path`, in order.
fn uas_for(origin: &Origin, path: &str) -> Vec<String> {
    let arrivals = origin.arrivals.lock().expect("arrivals").clone();
    let seen = origin.seen_headers.lock().expect("seen").clone();
    arrivals
        .iter()
        .zip(seen.iter())
        .filter(|((p, _), _)| p == path)
        .map(|(_, h)| {
            h.get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

fn get_as(url: &str, ua: &str) -> Request<Bytes> {
    Request::get(url)
        .header(http::header::USER_AGENT, ua)
        .body(Bytes::new())
        .expect("request")
}

#[tokio::test]
async fn user_agent_modes_are_what_the_origin_sees_and_what_is_judged() {
    for (mode, sent, private) in [
        ("keep", "curl/8.0".to_string(), 200),
        ("append", format!("curl/8.0 {OURS}"), 403),
        ("replace", OURS.to_string(), 403),
    ] {
        let origin = Origin::with_robots(ROBOTS).await;
        let proxy = Proxy::start_with(|c| {
            c.identity.user_agent = OURS.into();
            c.identity.user_agent_mode = match mode {
                "keep" => UaMode::Keep,
                "append" => UaMode::Append,
                _ => UaMode::Replace,
            };
            c.audit.log_all = true;
        })
        .await;
        let page = proxy
            .request(get_as(&origin.url("/page"), "curl/8.0"))
            .await;
        assert_eq!(page.status, 200, "{mode}: {page:?}");
        assert_eq!(
            uas_for(&origin, "/page"),
            std::slice::from_ref(&sent),
            "{mode}"
        );
        // robots.txt is fetched as the identity, whatever the mode.
        assert_eq!(uas_for(&origin, "/robots.txt"), [OURS], "{mode}");
        // Judged as the identity's token when it is sent (append,
        // replace), as the configured agent otherwise.
        let p = proxy
            .request(get_as(&origin.url("/private"), "curl/8.0"))
            .await;
        assert_eq!(p.status, private, "{mode}: {p:?}");
        let audit = proxy.audit();
        let line = audit
            .iter()
            .find(|l| l["url"].as_str().is_some_and(|u| u.ends_with("/page")))
            .expect("the page's line");
        assert_eq!(
            line["user_agent"],
            sent.as_str(),
            "{mode}: the UA sent is recorded"
        );
        let want_agent = if mode == "keep" {
            "robots-proxy"
        } else {
            "examplebot"
        };
        assert_eq!(line["agent"], want_agent, "{mode}: {line}");
        // A client without a User-Agent goes out as the identity.
        let bare = proxy.get(&origin.url("/bare")).await;
        assert_eq!(bare.status, 200);
        assert_eq!(uas_for(&origin, "/bare"), [OURS], "{mode}");
    }
}

#[tokio::test]
async fn a_users_own_user_agent_overrides_the_identitys() {
    let origin = Origin::with_robots(ROBOTS).await;
    let proxy = Proxy::start_with(|c| {
        c.identity.user_agent = OURS.into();
        c.access.users = vec![UserConfig {
            user_agent: Some("AnnBot/2.0 (+https://example.com/ann)".into()),
            user_agent_mode: Some(UaMode::Replace),
            ..crate::support::user("ann", "pw")
        }];
    })
    .await;
    let req = Request::get(origin.url("/private"))
        .header(http::header::USER_AGENT, "curl/8.0")
        .header(
            http::header::PROXY_AUTHORIZATION,
            crate::support::basic("ann:pw"),
        )
        .body(Bytes::new())
        .expect("request");
    // annbot is not disallowed /private; examplebot would be.
    let resp = proxy.request(req).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(
        uas_for(&origin, "/private"),
        ["AnnBot/2.0 (+https://example.com/ann)"]
    );
}

/// A key file made by `robots-proxy identity init-key` in `dir`, with
/// `extra` arguments; returns its path and the key's id.
pub(crate) fn init_key(dir: &Path, name: &str, extra: &[&str]) -> (PathBuf, String) {
    let path = dir.join(name);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_robots-proxy"))
        .args(["identity", "init-key", "--key-file"])
        .arg(&path)
        .args(extra)
        .output()
        .expect("run init-key");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (path, kid)
}

pub(crate) fn signing(c: &mut robots_proxy::config::Config, key_file: &Path) {
    c.identity.user_agent = OURS.into();
    c.identity.user_agent_mode = robots_proxy::config::UaMode::Replace;
    c.identity.listen = "127.0.0.1:0".into();
    c.identity.signing.key_file = key_file.to_string_lossy().into_owned();
    c.identity.signing.signature_agent = "https://example.com".into();
}

/// The key directory from the identity listener at `addr`: its body and
/// headers, and the URL it was asked at.
pub(crate) async fn directory(addr: SocketAddr) -> Value {
    let mut conn = Conn::open(addr).await;
    let req = Request::get("/.well-known/http-message-signatures-directory")
        .header(http::header::HOST, addr.to_string())
        .body(Bytes::new())
        .expect("request");
    let resp = conn.send(req).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(
        resp.headers["content-type"],
        "application/http-message-signatures-directory+json"
    );
    json!({
        "body": resp.body,
        "url": format!("http://{addr}/.well-known/http-message-signatures-directory"),
        "headers": headers_json(&resp.headers),
    })
}

pub(crate) fn headers_json(h: &http::HeaderMap) -> Value {
    h.iter()
        .map(|(k, v)| json!([k.as_str(), v.to_str().unwrap_or("")]))
        .collect()
}

/// The verdicts of the Python verifier on `requests` against `directory`,
/// its clock `offset` seconds ahead; `None` when it cannot run here.
pub(crate) fn verify(directory: &Value, requests: &[Value], offset: i64) -> Option<Value> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/verifiers/webbotauth_verify.py"
    );
    let probe = std::process::Command::new("python3")
        .args(["-c", "import http_message_signatures"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        missing("python3 http-message-signatures", "not importable");
        return None;
    }
    used("python3 http-message-signatures");
    let task = json!({"directory": directory, "requests": requests, "now_offset": offset});
    let mut child = std::process::Command::new("python3")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the verifier");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(task.to_string().as_bytes())
        .expect("write task");
    let out = child.wait_with_output().expect("verifier output");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("verifier JSON"))
}

/// What `origin` saw, as requests for the verifier: `base` + path, with
/// the headers as received.
fn seen_requests(origin: &Origin, base: &str, skip_robots: bool) -> Vec<Value> {
    let arrivals = origin.arrivals.lock().expect("arrivals").clone();
    let seen = origin.seen_headers.lock().expect("seen").clone();
    arrivals
        .iter()
        .zip(seen.iter())
        .filter(|((p, _), _)| !(skip_robots && p == "/robots.txt"))
        .map(|((p, _), h)| json!({"method": "GET", "url": format!("{base}{p}"), "headers": headers_json(h)}))
        .collect()
}

pub(crate) fn all_ok(verdicts: &Value, what: &str) -> Vec<String> {
    let list = verdicts["requests"].as_array().expect("requests");
    assert!(!list.is_empty(), "{what}: nothing verified");
    for v in list {
        assert_eq!(v["ok"], true, "{what}: {verdicts}");
    }
    list.iter()
        .map(|v| v["keyid"].as_str().unwrap_or("").to_string())
        .collect()
}

fn all_fail(verdicts: &Value, what: &str, says: &str) {
    for v in verdicts["requests"].as_array().expect("requests") {
        assert_eq!(v["ok"], false, "{what}: {verdicts}");
        assert!(
            v["error"].as_str().unwrap_or("").contains(says),
            "{what}: {v}"
        );
    }
}

#[tokio::test]
async fn signatures_verify_at_the_origin_plain_and_intercepted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key_file, kid) = init_key(dir.path(), "keys.json", &[]);
    let plain = Origin::with_robots(ROBOTS).await;
    let tls = tls_origin_with_robots("localhost", ROBOTS).await;
    let proxy = proxy_trusting_with(&tls, |c| signing(c, &key_file)).await;
    for path in ["/a", "/b?x=1"] {
        let r = proxy.request(get_as(&plain.url(path), "curl/8.0")).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    for h2 in [false, true] {
        let r = tls.get_via(&proxy, "localhost", "/s", h2).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    // Replaced inside the intercepted tunnel too (HTTP/1.1 and HTTP/2).
    assert_eq!(uas_for(&tls.origin, "/s"), [OURS, OURS]);
    assert_eq!(uas_for(&plain, "/a"), [OURS]);
    let dir_doc = directory(proxy.identity_addr.expect("identity listener")).await;
    let mut requests = seen_requests(&plain, &format!("http://{}", plain.addr), true);
    let https_base = format!("https://localhost:{}", tls.origin.addr.port());
    requests.extend(seen_requests(&tls.origin, &https_base, true));
    assert_eq!(requests.len(), 4);
    let Some(verdicts) = verify(&dir_doc, &requests, 0) else {
        return;
    };
    assert_eq!(verdicts["directory"]["ok"], true, "{verdicts}");
    assert_eq!(verdicts["directory"]["kids"], json!([kid]));
    for keyid in all_ok(&verdicts, "as received") {
        assert_eq!(keyid, kid);
    }
    // robots.txt fetches are the proxy's own, and go unsigned.
    // A path changed after signing fails.
    let moved: Vec<Value> = requests
        .iter()
        .map(|r| {
            let mut r = r.clone();
            let url = r["url"]
                .as_str()
                .expect("url")
                .replace("/a", "/z")
                .replace("/b", "/z")
                .replace("/s", "/z");
            r["url"] = url.into();
            r
        })
        .collect();
    let verdicts = verify(&dir_doc, &moved, 0).expect("ran before");
    all_fail(&verdicts, "path changed", "");
    // Ten minutes later, the five-minute signatures have expired.
    let verdicts = verify(&dir_doc, &requests, 600).expect("ran before");
    all_fail(&verdicts, "expired", "expires");
}

#[tokio::test]
async fn after_a_rotation_old_and_new_keys_verify_until_the_old_one_leaves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (old_file, old_kid) = init_key(dir.path(), "keys.json", &[]);
    let old_text = std::fs::read_to_string(&old_file).expect("old keys");
    let old_copy = dir.path().join("old.json");
    std::fs::write(&old_copy, &old_text).expect("copy");
    // The new key, added to the file; it signs from now on.
    let (new_file, new_kid) = init_key(dir.path(), "keys.json", &[]);
    assert_eq!(old_file, new_file);
    assert_ne!(old_kid, new_kid);
    let origin = Origin::with_robots(ROBOTS).await;
    // A node still on the old file, and one with the rotated file.
    let before = Proxy::start_with(|c| signing(c, &old_copy)).await;
    let after = Proxy::start_with(|c| signing(c, &new_file)).await;
    assert_eq!(before.get(&origin.url("/one")).await.status, 200);
    assert_eq!(after.get(&origin.url("/two")).await.status, 200);
    let requests = seen_requests(&origin, &format!("http://{}", origin.addr), true);
    let dir_doc = directory(after.identity_addr.expect("identity listener")).await;
    let Some(verdicts) = verify(&dir_doc, &requests, 0) else {
        return;
    };
    assert_eq!(verdicts["directory"]["ok"], true, "{verdicts}");
    assert_eq!(
        verdicts["directory"]["kids"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(
        all_ok(&verdicts, "overlap"),
        [old_kid.clone(), new_kid.clone()]
    );
    // The old key's end passed: it leaves the directory, its signatures
    // no longer verify, the new key's still do.
    let mut keys: Value =
        serde_json::from_str(&std::fs::read_to_string(&new_file).expect("keys")).expect("JSON");
    for k in keys["keys"].as_array_mut().expect("keys") {
        if k["x"] == key_x_of(&old_text) {
            k["nbf"] = json!(1);
            k["exp"] = json!(2);
        }
    }
    let ended = dir.path().join("ended.json");
    std::fs::write(&ended, keys.to_string()).expect("write");
    let later = Proxy::start_with(|c| signing(c, &ended)).await;
    let dir_doc = directory(later.identity_addr.expect("identity listener")).await;
    let verdicts = verify(&dir_doc, &requests, 0).expect("ran before");
    assert_eq!(
        verdicts["directory"]["kids"],
        json!([new_kid]),
        "{verdicts}"
    );
    let list = verdicts["requests"].as_array().expect("requests");
    assert_eq!(list[0]["ok"], false, "{verdicts}");
    assert_eq!(list[1]["ok"], true, "{verdicts}");
    // The directory printed for a static host is the same key set.
    let toml = dir.path().join("c.toml");
    std::fs::write(
        &toml,
        format!(
            "[identity.signing]\nkey_file = {:?}\nsignature_agent = \"https://example.com\"\n",
            ended.to_string_lossy()
        ),
    )
    .expect("config");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_robots-proxy"))
        .args(["identity", "directory", "--config"])
        .arg(&toml)
        .output()
        .expect("run directory");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(printed["keys"][0]["kid"], new_kid.as_str());
}

fn key_x_of(text: &str) -> Value {
    let v: Value = serde_json::from_str(text).expect("JSON");
    v["keys"][0]["x"].clone()
}

/// `GET path` on `addr` with a Host header.
async fn get_on(addr: SocketAddr, path: &str) -> crate::support::Resp {
    let mut conn = Conn::open(addr).await;
    let req = Request::get(path)
        .header(http::header::HOST, addr.to_string())
        .body(Bytes::new())
        .expect("request");
    conn.send(req).await
}

#[tokio::test]
async fn the_crawler_page_and_client_ranges_say_who_it_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key_file, kid) = init_key(dir.path(), "keys.json", &[]);
    let proxy = Proxy::start_with(|c| {
        signing(c, &key_file);
        c.identity.contact = "crawler@example.com <script>alert(1)</script>".into();
        c.identity.egress_ranges = vec![
            "192.0.2.0/24".parse().expect("net"),
            "2001:db8::/48".parse().expect("net"),
        ];
        c.usage.purposes = vec!["search".into()];
        crate::support::admin(c);
    })
    .await;
    let identity = proxy.identity_addr.expect("identity listener");
    let page = get_on(identity, "/crawler").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(
        page.headers["content-type"]
            .to_str()
            .expect("type")
            .starts_with("text/html")
    );
    assert_eq!(
        page.headers["link"],
        "</client-ranges.json>; rel=\"client-ranges\""
    );
    let html = &page.body;
    for needed in [
        "<link rel=\"client-ranges\" href=\"/client-ranges.json\">",
        "<h1>ExampleBot</h1>",
        "<code>examplebot</code>",
        "<code>search</code>",
        "User-agent: ExampleBot\nDisallow: /",
        "Content-Usage: train-ai=n",
        "https://example.com/.well-known/http-message-signatures-directory",
        kid.as_str(),
        // The configured contact, escaped.
        "crawler@example.com &lt;script&gt;alert(1)&lt;/script&gt;",
    ] {
        assert!(html.contains(needed), "{needed:?} missing from {html}");
    }
    assert!(!html.contains("<script>"), "{html}");
    // The client ranges, in the JAFAR format.
    let ranges = get_on(identity, "/client-ranges.json").await;
    assert_eq!(ranges.status, 200);
    assert_eq!(
        ranges.headers["content-type"],
        "application/jafar+json; version=1.0"
    );
    let doc: Value = serde_json::from_str(&ranges.body).expect("JSON");
    let created = doc["creationTime"].as_str().expect("creationTime");
    assert!(
        created.len() == 20 && created.ends_with('Z') && created.as_bytes()[10] == b'T',
        "{created}"
    );
    assert_eq!(
        doc["prefixes"],
        json!([
            {"ipv4Prefix": "192.0.2.0/24", "services": ["ExampleBot"]},
            {"ipv6Prefix": "2001:db8::/48", "services": ["ExampleBot"]},
        ])
    );
    // The same documents on the admin listener, without credentials; the
    // identity listener serves nothing else.
    let admin = proxy.admin_addr.expect("admin listener");
    let on_admin = get_on(admin, "/.well-known/http-message-signatures-directory").await;
    assert_eq!(on_admin.status, 200);
    assert!(on_admin.body.contains(&kid));
    assert_eq!(get_on(admin, "/crawler").await.status, 200);
    assert_eq!(get_on(identity, "/metrics").await.status, 404);
    let mut conn = Conn::open(identity).await;
    let post = Request::post("/crawler")
        .header(http::header::HOST, identity.to_string())
        .body(Bytes::new())
        .expect("request");
    assert_eq!(conn.send(post).await.status, 405);
}

#[tokio::test]
async fn a_clients_own_signature_is_kept_and_the_proxy_signs_beside_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key_file, _) = init_key(dir.path(), "keys.json", &[]);
    let origin = Origin::with_robots(ROBOTS).await;
    let proxy = Proxy::start_with(|c| signing(c, &key_file)).await;
    let client_input = "sig1=(\"@authority\");created=1;keyid=\"client\";tag=\"web-bot-auth\"";
    let req = Request::get(origin.url("/x"))
        .header("signature-input", client_input)
        .header("signature", "sig1=:AAAA:")
        .header("signature-agent", "sig1=\"https://client.example\"")
        .body(Bytes::new())
        .expect("request");
    assert_eq!(proxy.request(req).await.status, 200);
    let seen = origin
        .seen_headers
        .lock()
        .expect("seen")
        .last()
        .cloned()
        .expect("seen");
    let input = seen["signature-input"].to_str().expect("input");
    assert!(
        input.starts_with(&format!("{client_input}, sig2=(")),
        "{input}"
    );
    assert!(
        input.contains("\"signature-agent\";key=\"sig2\""),
        "{input}"
    );
    assert!(
        !input.contains("\"signature\";key"),
        "the client's signature is not covered: {input}"
    );
    assert!(
        seen["signature"]
            .to_str()
            .expect("sig")
            .starts_with("sig1=:AAAA:, sig2=:")
    );
    assert_eq!(
        seen["signature-agent"],
        "sig1=\"https://client.example\", sig2=\"https://example.com\""
    );
    // The proxy's own signature verifies.
    let dir_doc = directory(proxy.identity_addr.expect("identity listener")).await;
    let mut requests = seen_requests(&origin, &format!("http://{}", origin.addr), true);
    requests[0]["label"] = "sig2".into();
    let Some(verdicts) = verify(&dir_doc, &requests, 0) else {
        return;
    };
    all_ok(&verdicts, "outer signature");
}

#[tokio::test]
async fn websocket_upgrades_carry_the_identity_and_its_signature() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let (key_file, _) = init_key(dir.path(), "keys.json", &[]);
    // robots.txt and a WebSocket handshake on one port; the upgrade's head
    // is recorded.
    let heads: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let record = heads.clone();
    let ws_addr = crate::support::serve_tcp(move |mut s| {
        let record = record.clone();
        async move {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match s.read(&mut byte).await {
                    Ok(1) => head.push(byte[0]),
                    _ => return,
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            if head.starts_with("GET /robots.txt ") {
                let _ = s
                    .write_all(crate::support::raw::ok_close(ROBOTS).as_bytes())
                    .await;
                return;
            }
            let key = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(": ")?;
                    k.eq_ignore_ascii_case("sec-websocket-key").then_some(v)
                })
                .unwrap_or_default()
                .to_string();
            record.lock().expect("heads").push(head);
            let accept =
                tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
            let _ = s
                .write_all(
                    format!(
                        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                         Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
                    )
                    .as_bytes(),
                )
                .await;
        }
    })
    .await;
    let proxy = Proxy::start_with(|c| signing(c, &key_file)).await;
    let mut stream = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("proxy");
    let upgrade = format!(
        "GET http://{ws_addr}/chat HTTP/1.1\r\nHost: {ws_addr}\r\nUser-Agent: curl/8.0\r\n\
         Upgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    stream.write_all(upgrade.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => answer.push(byte[0]),
            _ => break,
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    let head = heads
        .lock()
        .expect("heads")
        .first()
        .cloned()
        .expect("the upgrade arrived");
    let headers: Vec<Value> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| json!([k, v]))
        .collect();
    let ua = headers.iter().find(|h| {
        h[0].as_str()
            .is_some_and(|k| k.eq_ignore_ascii_case("user-agent"))
    });
    assert_eq!(ua.map(|h| h[1].clone()), Some(json!(OURS)), "{head}");
    let dir_doc = directory(proxy.identity_addr.expect("identity listener")).await;
    let request =
        json!({"method": "GET", "url": format!("http://{ws_addr}/chat"), "headers": headers});
    let Some(verdicts) = verify(&dir_doc, &[request], 0) else {
        return;
    };
    all_ok(&verdicts, "websocket upgrade");
}
