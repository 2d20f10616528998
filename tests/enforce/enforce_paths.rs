//! A disallowed resource is never fetched whatever spelling of its path a
//! client sends: dot-segments, repeated slashes, encoded dots and slashes,
//! `;parameters`. Checked against a real nginx (which serves the file for
//! these spellings when asked directly) and a raw origin that records
//! every request line it receives, over plain HTTP and inside intercepted
//! HTTP/1.1 and HTTP/2 tunnels.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support;
use crate::support::nginx::{DIRECT, Nginx};
use crate::support::raw::ok_close;
use crate::support::tls::{proxy_trusting, tls_origin, try_https_get};
use crate::support::{Proxy, Resp, serve_tcp};

const ROBOTS: &str = "User-agent: *\nDisallow: /private\nDisallow: /admin/\n";

/// Spellings of `/private/secret.html` and `/admin/` that some origin
/// resolves to the disallowed resource.
const BYPASSES: [&str; 16] = [
    "/public/../private/secret.html",
    "/./private/secret.html",
    "//private/secret.html",
    "/public/%2e%2e/private/secret.html",
    "/public/%2E%2E/private/secret.html",
    "/public/.%2e/private/secret.html",
    "/public/..%2fprivate/secret.html",
    "/public/..%2Fprivate/secret.html",
    "/%2e/private/secret.html",
    "/%2fprivate/secret.html",
    "/%2e%2e/private/secret.html",
    "/public/..;/private/secret.html",
    "/public/./../private/secret.html?x=1",
    "//admin/",
    "/admin%2f",
    "/public/%2e%2e//admin/",
];

/// Every line of a request head, as the origin received it.
type Heads = Arc<Mutex<Vec<String>>>;

/// A raw HTTP/1.1 origin: records each request line byte for byte, serves
/// [`ROBOTS`] at `/robots.txt` and `page` elsewhere, one request per
/// connection.
async fn raw_origin() -> (SocketAddr, Heads) {
    let lines: Heads = Arc::default();
    let seen = lines.clone();
    let addr = serve_tcp(move |mut s| {
        let seen = seen.clone();
        async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&head).into_owned();
            let line = text.lines().next().unwrap_or_default().to_string();
            seen.lock().expect("lines").push(line.clone());
            let body = if line.starts_with("GET /robots.txt ") {
                ROBOTS
            } else {
                "page"
            };
            let _ = s.write_all(ok_close(body).as_bytes()).await;
            let _ = s.shutdown().await;
        }
    })
    .await;
    (addr, lines)
}

/// Asserts `resp` is the 403 of one of [`ROBOTS`]'s rules.
fn assert_blocked(resp: &Resp, what: &str) {
    assert_eq!(resp.status, 403, "{what}: {}", resp.body);
    assert!(
        resp.body.contains("Disallow: /private") || resp.body.contains("Disallow: /admin/"),
        "{what}: {}",
        resp.body
    );
}

#[tokio::test]
async fn nginx_serves_the_bypass_spellings_directly_but_never_through_the_proxy() {
    let Some(mut nginx) = Nginx::start(&[
        ("/robots.txt", ROBOTS),
        ("/private/secret.html", "SECRET private"),
        ("/admin/index.html", "SECRET admin"),
        ("/public/index.html", "public"),
    ]) else {
        return;
    };
    // Asked directly, nginx resolves these to the disallowed file: the
    // bypass is real.
    for path in [
        "/public/../private/secret.html",
        "//private/secret.html",
        "/./private/secret.html",
        "/public/%2e%2e/private/secret.html",
        "//admin/",
    ] {
        let resp = nginx.direct(path).await;
        assert_eq!(resp.status, 200, "{path}");
        assert!(resp.body.starts_with("SECRET"), "{path}: {}", resp.body);
    }

    let proxy = Proxy::start().await;
    for (i, path) in BYPASSES.iter().enumerate() {
        let resp = proxy.get(&nginx.url(path)).await;
        assert_blocked(&resp, path);
        let audit = proxy.audit();
        assert_eq!(audit.len(), i + 1, "exactly one audit line for {path}");
        assert_eq!(audit[i]["decision"], "disallowed", "{path}");
    }
    // Allowed paths still pass, spelled as sent.
    let resp = proxy.get(&nginx.url("/public/index.html")).await;
    assert_eq!((resp.status, resp.body.as_str()), (200, "public"));
    let resp = proxy.get(&nginx.url("/public/./index.html")).await;
    assert_eq!((resp.status, resp.body.as_str()), (200, "public"));

    let log = nginx.access_log();
    let reached: Vec<&str> = log.lines().filter(|l| !l.contains(DIRECT)).collect();
    assert!(
        reached
            .iter()
            .all(|l| l.contains("/robots.txt") || l.contains("/public/")),
        "only robots.txt and allowed pages reach nginx: {reached:#?}"
    );
    assert!(
        reached.iter().all(|l| !l.contains("secret")),
        "{reached:#?}"
    );
}

#[tokio::test]
async fn no_bypass_spelling_reaches_a_raw_origin_and_allowed_paths_pass_unchanged() {
    let (addr, lines) = raw_origin().await;
    let proxy = Proxy::start().await;
    for (i, path) in BYPASSES.iter().enumerate() {
        let resp = proxy.get(&format!("http://{addr}{path}")).await;
        assert_blocked(&resp, path);
        assert_eq!(proxy.audit().len(), i + 1, "one audit line for {path}");
    }
    for path in [
        "/public/a.html",
        "/public//x",
        "/public/./b",
        "/a?next=/../private/",
    ] {
        let resp = proxy.get(&format!("http://{addr}{path}")).await;
        assert_eq!((resp.status, resp.body.as_str()), (200, "page"), "{path}");
    }
    let seen = lines.lock().expect("lines").clone();
    assert_eq!(
        seen,
        vec![
            "GET /robots.txt HTTP/1.1",
            "GET /public/a.html HTTP/1.1",
            "GET /public//x HTTP/1.1",
            "GET /public/./b HTTP/1.1",
            "GET /a?next=/../private/ HTTP/1.1",
        ]
    );
}

#[tokio::test]
async fn the_403_the_audit_line_and_explain_name_the_resolved_path_and_rule() {
    let (addr, _lines) = raw_origin().await;
    let proxy = Proxy::with_admin().await;
    let resp = proxy
        .get(&format!("http://{addr}/public/%2e%2e/private/secret.html"))
        .await;
    assert_eq!(resp.status, 403);
    assert!(
        resp.body
            .contains("Judged as:  /private/secret.html (the path the origin may resolve it to)"),
        "{}",
        resp.body
    );
    assert!(resp.body.contains("Rule:       line 2: Disallow: /private"));
    // Not to be kept by a scraper's HTTP cache.
    assert_eq!(resp.header("cache-control"), Some("no-store"));
    let header = resp
        .header("x-robots-proxy-decision")
        .expect("decision header");
    assert!(
        header.contains("judged_as=\"/private/secret.html\"") && header.contains("line 2"),
        "{header}"
    );
    let line = proxy.only_audit_line();
    assert_eq!(line["judged_as"], "/private/secret.html");
    assert_eq!(line["rule"], "Disallow: /private");
    // The URL as the client sent it.
    assert_eq!(
        line["url"],
        format!("http://{addr}/public/%2e%2e/private/secret.html")
    );

    let url = format!("http://{addr}/public/..%2Fprivate/secret.html");
    let json = proxy.explain(&url).await;
    assert_eq!(json["decision"], "disallowed", "{json}");
    assert_eq!(json["judged_as"], "/private/secret.html", "{json}");
    assert_eq!(json["rule_line"], 2, "{json}");
}

#[tokio::test]
async fn bypass_spellings_inside_intercepted_http1_and_http2_tunnels() {
    let o = tls_origin("127.0.0.1").await;
    o.origin.robots(ROBOTS);
    let proxy = proxy_trusting(&o).await;
    let port = o.origin.addr.port();
    let mut audited = 0;
    for h2 in [false, true] {
        for path in BYPASSES {
            match try_https_get(&proxy, "127.0.0.1", port, path, h2).await {
                Ok(resp) => {
                    assert_blocked(&resp, path);
                    audited += 1;
                    assert_eq!(proxy.audit().len(), audited, "{path} (h2: {h2})");
                }
                // A target the HTTP/2 server refuses to parse never becomes
                // a request: nothing to judge, nothing forwarded.
                Err(e) => assert!(h2, "{path} over HTTP/1.1: {e}"),
            }
        }
    }
    let requests = o.origin.seen_headers.lock().expect("seen").len();
    assert_eq!(requests, o.origin.hits("/robots.txt"), "only robots.txt");
    assert_eq!(o.origin.hits("/robots.txt"), 1);
}

#[tokio::test]
async fn query_delimiters_are_judged_encoded_and_decoded() {
    let origin = support::Origin::start().await;
    origin.robots("User-agent: *\nDisallow: /go?url=http://\nDisallow: /*?next=/\n");
    let proxy = Proxy::start().await;
    for path in [
        "/go?url=http://evil.example",
        "/go?url=http%3A%2F%2Fevil.example",
        "/go?url=http%3a%2f%2fevil.example",
        "/login?next=%2Fadmin",
    ] {
        let resp = proxy.get(&origin.url(path)).await;
        assert_eq!(resp.status, 403, "{path}: {}", resp.body);
        assert_eq!(origin.hits(path), 0, "{path}");
    }
    assert_eq!(
        proxy.get(&origin.url("/go?url=elsewhere")).await.status,
        200
    );
    assert_eq!(proxy.get(&origin.url("/login?next=home")).await.status, 200);
    assert_eq!(proxy.audit().len(), 4);
}
