//! Readings that origins really resolve, against real origins: Node's
//! WHATWG URL routing reads `\` as `/` (`/public\..\private/x` is
//! `/private/x`), Python's `http.server` decodes reserved characters
//! (`/wiki/Special%3ASearch` is the file `wiki/Special:Search`). Each
//! spelling reaches the disallowed resource when asked directly, and never
//! through the proxy: 403, one audit line, nothing served.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use crate::support::raw::until_close;
use crate::support::{Proxy, need};

/// A child process killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `program args`, reading the port from the first line of its
/// output that holds one (as the last number on that line). `None` if the
/// program is missing outside CI; under `CI=true` that fails the test.
fn spawn(program: &str, args: &[&str]) -> Option<Server> {
    let child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            crate::support::component::missing(program, e);
            return None;
        }
    };
    crate::support::component::used(program);
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let port = loop {
        let line = lines
            .next()
            .expect("the server prints its port")
            .expect("read line");
        let number = line
            .split(|c: char| !c.is_ascii_digit())
            .rfind(|w| !w.is_empty())
            .and_then(|w| w.parse::<u16>().ok());
        if let Some(port) = number.filter(|p| *p > 0) {
            break port;
        }
    };
    Some(Server {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    })
}

/// `path` of `server` through `proxy`, byte for byte: status and body.
async fn through(proxy: &Proxy, server: &Server, path: &str) -> (u16, String) {
    let url = format!("http://{}{path}", server.addr);
    raw_get(proxy.addr, &url, server.addr).await
}

/// Sends `GET <target> HTTP/1.1` to `to` byte for byte (no client
/// normalises the target) and returns the status and body.
async fn raw_get(to: SocketAddr, target: &str, host: SocketAddr) -> (u16, String) {
    let req = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let resp = until_close(to, req).await;
    (resp.status(), resp.body().to_string())
}

/// The WHATWG-URL origin (Node, tests/support/origins/whatwg-origin.js).
fn node_origin() -> Option<Server> {
    spawn(
        "node",
        &[concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/origins/whatwg-origin.js"
        )],
    )
}

/// The spellings a WHATWG router reads as `/private/x`.
const BACKSLASH_BYPASSES: [&str; 5] = [
    "/public\\..\\private/x",
    "/public/..\\private/x",
    "/public/.%2e\\private/x",
    "/public/%2e%2e\\private/x",
    "/public\\%2e%2e\\private/x",
];

#[tokio::test]
async fn backslash_spellings_reach_a_node_origin_directly_but_never_through_the_proxy() {
    let node = need!(node_origin());
    // Asked directly, the origin serves the secret: the bypass is real.
    for path in BACKSLASH_BYPASSES {
        let (status, body) = raw_get(node.addr, path, node.addr).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(body, "SECRET /private/x", "{path}");
    }
    let (_, direct) = raw_get(node.addr, "/__hits", node.addr).await;
    assert_eq!(direct, BACKSLASH_BYPASSES.len().to_string());

    let proxy = Proxy::start().await;
    for (i, path) in BACKSLASH_BYPASSES.iter().enumerate() {
        let url = format!("http://{}{path}", node.addr);
        let (status, body) = raw_get(proxy.addr, &url, node.addr).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert!(body.contains("Judged as:  /private/x"), "{path}: {body}");
        let audit = proxy.audit();
        assert_eq!(audit.len(), i + 1, "one audit line for {path}");
        assert_eq!(audit[i]["decision"], "disallowed");
        assert_eq!(audit[i]["judged_as"], "/private/x");
    }
    // The origin served nothing more under /private/.
    let (_, after) = raw_get(node.addr, "/__hits", node.addr).await;
    assert_eq!(after, direct);
    // Allowed paths pass as sent.
    assert_eq!(
        through(&proxy, &node, "/public/page").await,
        (200, "page".to_string())
    );
}

#[tokio::test]
async fn reserved_characters_encoded_reach_python_http_server_but_never_through_the_proxy() {
    let root = tempfile::tempdir().expect("tempdir");
    let robots = "User-agent: *\nDisallow: /wiki/Special:\nDisallow: /@admin\nDisallow: /report(\n";
    std::fs::write(root.path().join("robots.txt"), robots).expect("robots");
    std::fs::create_dir(root.path().join("wiki")).expect("dir");
    for file in ["wiki/Special:Search", "@admin", "report(2024)"] {
        std::fs::write(root.path().join(file), format!("SECRET {file}")).expect("file");
    }
    std::fs::write(root.path().join("wiki/Main"), "page").expect("file");
    let dir = root.path().to_str().expect("utf-8 temp dir");
    let Some(python) = spawn(
        "python3",
        &[
            "-u",
            "-m",
            "http.server",
            "0",
            "--bind",
            "127.0.0.1",
            "--directory",
            dir,
        ],
    ) else {
        return;
    };
    let spellings = [
        ("/wiki/Special%3ASearch", "wiki/Special:Search"),
        ("/wiki/Special%3aSearch", "wiki/Special:Search"),
        ("/%40admin", "@admin"),
        ("/report%282024%29", "report(2024)"),
    ];
    for (path, file) in spellings {
        let (status, body) = raw_get(python.addr, path, python.addr).await;
        assert_eq!((status, body), (200, format!("SECRET {file}")), "{path}");
    }

    let proxy = Proxy::start().await;
    for (i, (path, _)) in spellings.iter().enumerate() {
        let url = format!("http://{}{path}", python.addr);
        let (status, body) = raw_get(proxy.addr, &url, python.addr).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert!(!body.contains("SECRET"), "{path}");
        assert_eq!(proxy.audit().len(), i + 1, "one audit line for {path}");
    }
    assert_eq!(
        through(&proxy, &python, "/wiki/Main").await,
        (200, "page".to_string())
    );
}

#[tokio::test]
async fn case_folds_only_on_origins_configured_case_insensitive() {
    let node = need!(node_origin());
    let url = format!("http://{}/PRIVATE/x", node.addr);
    let plain = Proxy::start().await;
    assert_eq!(raw_get(plain.addr, &url, node.addr).await.0, 200);
    let folding = Proxy::start_with(|c| {
        c.robots.case_insensitive_hosts = vec!["127.0.0.1".to_string()];
    })
    .await;
    let (status, body) = raw_get(folding.addr, &url, node.addr).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("Judged as:  /private/x"), "{body}");
}

/// Rules about spellings stay rules about those spellings: the readings
/// carry a rule over to other spellings of what it names and never widen
/// it (`Disallow: /*.$` is not `Disallow: /*$`), while a rule about a
/// resource holds for every spelling of it. Against Node and nginx.
const SPELLING_RULES: &str =
    "User-agent: *\nDisallow: /*.$\nDisallow: /;\nDisallow: //folder/*\nDisallow: /private\n";
const SPELLING_ALLOWED: [&str; 5] = ["/a.pdf", "/Alexa/b", "/", "/folder/page", "/public/x"];
const SPELLING_BLOCKED: [&str; 8] = [
    "/a.",
    "/a.pdf.",
    "/;x",
    "//folder/page",
    "/private.",
    "/public/..\\private",
    "/%70rivate",
    "/%2570rivate/x",
];

#[tokio::test]
async fn rules_about_spellings_block_only_those_spellings_on_a_node_origin() {
    let Some(node) = spawn(
        "node",
        &[
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/support/origins/whatwg-origin.js"
            ),
            SPELLING_RULES,
        ],
    ) else {
        return;
    };
    let proxy = Proxy::start().await;
    for path in SPELLING_ALLOWED {
        let url = format!("http://{}{path}", node.addr);
        let (status, body) = raw_get(proxy.addr, &url, node.addr).await;
        assert_eq!((status, body.as_str()), (200, "page"), "{path}");
    }
    for (i, path) in SPELLING_BLOCKED.iter().enumerate() {
        let url = format!("http://{}{path}", node.addr);
        let (status, body) = raw_get(proxy.addr, &url, node.addr).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert_eq!(proxy.audit().len(), i + 1, "one audit line for {path}");
    }
    let (_, hits) = raw_get(node.addr, "/__hits", node.addr).await;
    assert_eq!(hits, "0", "nothing under /private reached the origin");
}

#[tokio::test]
async fn rules_about_spellings_block_only_those_spellings_on_nginx() {
    let mut files: Vec<(&str, &str)> = vec![("/robots.txt", SPELLING_RULES)];
    for path in ["/a.pdf", "/Alexa/b", "/folder/page", "/public/x"] {
        files.push((path, "page"));
    }
    files.push(("/private/x", "SECRET"));
    let nginx = need!(crate::support::nginx::Nginx::start(&files));
    let proxy = Proxy::start().await;
    for path in SPELLING_ALLOWED.iter().filter(|p| **p != "/") {
        let resp = proxy.get(&nginx.url(path)).await;
        assert_eq!((resp.status, resp.body.as_str()), (200, "page"), "{path}");
    }
    for path in SPELLING_BLOCKED {
        let resp = raw_get(proxy.addr, &nginx.url(path), nginx.addr).await;
        assert_eq!(resp.0, 403, "{path}: {}", resp.1);
    }
    let log = nginx.access_log();
    assert!(!log.contains("private"), "{log}");
}
