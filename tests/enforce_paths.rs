//! A disallowed resource is never fetched whatever spelling of its path a
//! client sends: dot-segments, repeated slashes, encoded dots and slashes,
//! `;parameters`. Checked against a real nginx (which serves the file for
//! these spellings when asked directly) and a raw origin that records
//! every request line it receives, over plain HTTP and inside intercepted
//! HTTP/1.1 and HTTP/2 tunnels.

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::Request;
use support::tls::{proxy_trusting, tls_origin, try_https_get};
use support::{Conn, Proxy, Resp};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

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
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let lines: Heads = Arc::default();
    let seen = lines.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
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
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    (addr, lines)
}

/// A real nginx serving a directory, on a listening socket the test binds
/// (port 0) and hands over through nginx's `NGINX` inherited-socket
/// variable (as in its binary upgrade), so there is no port to guess and
/// no start-up to wait for. With a master process: a single process
/// crashes on inherited sockets (nginx 1.22).
struct Nginx {
    addr: SocketAddr,
    child: Child,
    dir: tempfile::TempDir,
    _listener: std::net::TcpListener,
}

impl Nginx {
    /// `None` (and a note on stderr) if nginx is not installed; `.ci/run`
    /// installs it.
    fn start(files: &[(&str, &str)]) -> Option<Nginx> {
        let binary = ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists());
        let Some(binary) = binary else {
            eprintln!("nginx not installed: skipping the nginx origin (apt-get install -y nginx)");
            return None;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let www = dir.path().join("www");
        for (path, body) in files {
            let file = www.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
            std::fs::write(&file, body).expect("write");
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        // Inherited by nginx: the descriptor must survive exec.
        rustix::io::fcntl_setfd(&listener, rustix::io::FdFlags::empty()).expect("clear CLOEXEC");
        let fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
        let d = dir.path().display();
        let conf = format!(
            "daemon off;\nmaster_process on;\nworker_processes 1;\nuser root;\nerror_log {d}/error.log;\npid {d}/nginx.pid;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/t1;\n  proxy_temp_path {d}/t2;\n\
               fastcgi_temp_path {d}/t3;\n  uwsgi_temp_path {d}/t4;\n  scgi_temp_path {d}/t5;\n\
               server {{ listen {addr}; root {d}/www; }}\n}}\n"
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("write conf");
        let child = Command::new(binary)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf_path)
            .env("NGINX", format!("{fd};"))
            .stdin(Stdio::null())
            .spawn()
            .expect("start nginx");
        Some(Nginx {
            addr,
            child,
            dir,
            _listener: listener,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }

    /// An origin-form GET straight to nginx.
    async fn direct(&mut self, path: &str) -> Resp {
        let get = direct_get(self.addr, path);
        match tokio::time::timeout(std::time::Duration::from_secs(20), get).await {
            Ok(resp) => resp,
            Err(_) => {
                let status = self.child.try_wait();
                let log = std::fs::read_to_string(self.dir.path().join("error.log"));
                panic!("nginx did not answer ({status:?}): {log:?}");
            }
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // TERM, not KILL: the master then stops its worker too.
        let pid = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let _ = self.child.wait();
    }
}

async fn direct_get(addr: SocketAddr, path: &str) -> Resp {
    let req = Request::get(path)
        .header("host", addr.to_string())
        .header("user-agent", DIRECT)
        .body(Bytes::new())
        .expect("request");
    Conn::open(addr).await.send(req).await
}

/// The User-Agent of requests sent to nginx directly, which tells them
/// apart in its access log (nginx writes a line after the response).
const DIRECT: &str = "direct-check";

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
    let proxy = Proxy::start_with(|c| {
        c.admin.listen = Some("127.0.0.1:0".parse().expect("addr"));
    })
    .await;
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
    let audit = proxy.audit();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["judged_as"], "/private/secret.html");
    assert_eq!(audit[0]["rule"], "Disallow: /private");
    // The URL as the client sent it.
    assert_eq!(
        audit[0]["url"],
        format!("http://{addr}/public/%2e%2e/private/secret.html")
    );

    let url = format!("http://{addr}/public/..%2Fprivate/secret.html");
    let explain = proxy
        .admin_get(&format!(
            "/explain?url={}",
            form_urlencoded::byte_serialize(url.as_bytes()).collect::<String>()
        ))
        .await;
    let json: serde_json::Value = serde_json::from_str(&explain.body).expect("json");
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
