//! RSL 1.0 over real sockets, one origin serving robots.txt with a
//! `License:` line and the licence documents: a prohibition refuses the
//! purposes it covers before the fetch and lets the others through, a
//! `server=` needs a configured licence token (sent as `Authorization:
//! License …`), an unreadable document fails closed for AI purposes, and a
//! `Link: rel="license"` on a response withholds it.

use robots_proxy::config::LicenseConfig;

use crate::support::{Origin, Proxy, Reply, get_with};

const LICENSE: &str = r#"<rsl xmlns="https://rslstandard.org/rsl">
  <content url="/books/">
    <license>
      <permits type="usage">search</permits>
      <prohibits type="usage">ai-train</prohibits>
    </license>
  </content>
  <content url="/licensed/" server="https://licence.example/api">
    <license>
      <permits type="usage">ai-all</permits>
    </license>
  </content>
</rsl>"#;

async fn origin(document: &str) -> Origin {
    let origin = Origin::start().await;
    origin.robots(&format!(
        "License: {}\n\nUser-agent: *\nAllow: /\n",
        origin.url("/license.xml")
    ));
    origin.route(
        "/license.xml",
        Reply::ok(document.to_string()).header("Content-Type", "application/rsl+xml"),
    );
    origin.route("/.well-known/tdmrep.json", Reply::status(404));
    origin
}

fn sha256(text: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, text)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test]
async fn a_prohibition_refuses_its_purposes_before_the_fetch() {
    let origin = origin(LICENSE).await;
    let proxy = Proxy::start_with(|c| c.usage.purposes = vec!["train-ai".into()]).await;
    let resp = proxy.get(&origin.url("/books/novel")).await;
    resp.assert_says(
        "prohibited",
        403,
        &["rsl: ", "content 1 (url \"/books/\") prohibits ai-train"],
    );
    assert_eq!(origin.hits("/books/novel"), 0);
    let line = proxy.only_audit_line();
    let evidence = line["usage_evidence"][0].as_str().expect("evidence");
    assert!(
        evidence.starts_with("train-ai=rsl: ")
            && evidence.contains(&format!("sha256={}", sha256(LICENSE.as_bytes())))
            && evidence.contains("robots.txt line 1 License"),
        "{evidence}"
    );
    // `search` is permitted; a path no content covers is not concerned.
    let search = Proxy::start_with(|c| c.usage.purposes = vec!["search".into()]).await;
    assert_eq!(search.get(&origin.url("/books/novel")).await.status, 200);
    assert_eq!(proxy.get(&origin.url("/news")).await.status, 200);
    assert_eq!(origin.hits("/license.xml"), 2, "once per proxy");

    // /explain names the document, its digest and the content.
    let admin = Proxy::with_admin().await;
    let url = crate::support::percent(&origin.url("/books/novel"));
    let v: serde_json::Value = admin
        .admin_get(&format!("/explain?url={url}&purpose=train-ai"))
        .await
        .json();
    let signal = &v["signals"][0];
    assert_eq!(signal["protocol"], "rsl", "{v:#}");
    assert!(
        signal["evidence"]
            .as_str()
            .is_some_and(|e| e.contains(&sha256(LICENSE.as_bytes())) && e.contains("content 1")),
        "{v:#}"
    );
}

#[tokio::test]
async fn a_licence_server_needs_a_configured_token() {
    let origin = origin(LICENSE).await;
    let without = Proxy::start_with(|c| c.usage.purposes = vec!["ai-input".into()]).await;
    let resp = without.get(&origin.url("/licensed/a")).await;
    resp.assert_says(
        "no token",
        403,
        &["under a licence from https://licence.example/api: no token configured"],
    );
    assert_eq!(origin.hits("/licensed/a"), 0);

    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "tok-123\n").expect("token");
    let with = Proxy::start_with(|c| {
        c.usage.purposes = vec!["ai-input".into()];
        c.usage.licenses = vec![LicenseConfig {
            server: "https://licence.example/api/".into(),
            token_file: token_file.clone(),
        }];
    })
    .await;
    let resp = with.get(&origin.url("/licensed/b")).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    let seen = origin.seen_headers.lock().expect("seen").clone();
    assert!(
        seen.iter().any(|h| h
            .get("authorization")
            .is_some_and(|v| v == "License tok-123")),
        "the origin saw the token"
    );
    // Not for a path without a licence server.
    let resp = with
        .request(get_with(
            &origin.url("/news"),
            &[("Robots-Proxy-Purpose", "search")],
        ))
        .await;
    assert_eq!(resp.status, 200);
    let seen = origin.seen_headers.lock().expect("seen").clone();
    assert_eq!(
        seen.iter()
            .filter(|h| h.contains_key("authorization"))
            .count(),
        1
    );
}

#[tokio::test]
async fn an_unreadable_document_fails_closed_for_ai_purposes_only() {
    let origin = origin("<html>not a licence</html>").await;
    let proxy = Proxy::start_with(|c| c.usage.purposes = vec!["train-ai".into()]).await;
    let resp = proxy.get(&origin.url("/any")).await;
    resp.assert_says(
        "unreadable",
        403,
        &["unusable, refused for AI purposes", "no <rsl> element"],
    );
    let search = Proxy::start_with(|c| c.usage.purposes = vec!["search".into()]).await;
    assert_eq!(search.get(&origin.url("/any")).await.status, 200);
}

#[tokio::test]
async fn a_link_header_licence_withholds_the_response() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    origin.route("/.well-known/tdmrep.json", Reply::status(404));
    origin.route(
        "/l.rsl",
        Reply::ok(
            r#"<rsl xmlns="https://rslstandard.org/rsl"><content url="/"><license>
<prohibits type="usage">ai-all</prohibits></license></content></rsl>"#,
        ),
    );
    origin.route(
        "/page",
        Reply::ok("SECRET").header(
            "Link",
            r#"</l.rsl>; rel="license"; type="application/rsl+xml""#,
        ),
    );
    let proxy = Proxy::start_with(|c| c.usage.purposes = vec!["ai-input".into()]).await;
    let resp = proxy.get(&origin.url("/page")).await;
    resp.assert_says("link", 403, &["(Link header)", "prohibits ai-all"]);
    assert!(!resp.body.contains("SECRET"));
}

#[test]
fn check_with_an_rsl_document_names_the_content() {
    use crate::support::binary::{TextFile, run};
    let robots = TextFile::new("robots.txt", "User-agent: *\nAllow: /\n");
    let rsl = TextFile::new("license.xml", LICENSE);
    let (robots, rsl) = (
        robots.path.to_str().expect("utf-8"),
        rsl.path.to_str().expect("utf-8"),
    );
    let args = ["check", "--robots", robots, "--rsl", rsl, "--agent", "x"];
    let out = run(&[&args[..], &["--purpose", "train-ai", "/books/a", "/news"]].concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "DISALLOWED /books/a\trsl content 1 (url \"/books/\") prohibits ai-train\tusage train-ai=n"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("ALLOWED /news"), "{stdout}");
    let out = run(&[&args[..], &["--purpose", "search", "/books/a"]].concat());
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}
