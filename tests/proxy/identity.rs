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
        assert_eq!(uas_for(&origin, "/page"), std::slice::from_ref(&sent), "{mode}");
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
fn init_key(dir: &Path, name: &str, extra: &[&str]) -> (PathBuf, String) {
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

fn signing(c: &mut robots_proxy::config::Config, key_file: &Path) {
    c.identity.user_agent = OURS.into();
    c.identity.user_agent_mode = robots_proxy::config::UaMode::Replace;
    c.identity.listen = "127.0.0.1:0".into();
    c.identity.signing.key_file = key_file.to_string_lossy().into_owned();
    c.identity.signing.signature_agent = "https://example.com".into();
}

/// The key directory from the identity listener at `addr`: its body and
/// headers, and the URL it was asked at.
async fn directory(addr: SocketAddr) -> Value {
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

fn headers_json(h: &http::HeaderMap) -> Value {
    h.iter()
        .map(|(k, v)| json!([k.as_str(), v.to_str().unwrap_or("")]))
        .collect()
}

/// The verdicts of the Python verifier on `requests` against `directory`,
/// its clock `offset` seconds ahead; `None` when it cannot run here.
fn verify(directory: &Value, requests: &[Value], offset: i64) -> Option<Value> {
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

fn all_ok(verdicts: &Value, what: &str) -> Vec<String> {
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
