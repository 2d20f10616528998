//! Request desync through bodies on methods that define none: a `GET`
//! whose body is itself a request must not reach an origin that ignores
//! GET bodies (it would read the body as a second request: a path never
//! judged, fetched without an audit line, its answer handed to whoever
//! comes next on that connection). The origin here is such a server: it
//! never reads a GET body and logs every request line it parses.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support;
use crate::support::raw::{BOUND, RawResp, find, read_answer, read_response, request};
use crate::support::{Proxy, serve_tcp};

/// An origin that parses requests the way Python's `BaseHTTPRequestHandler`
/// apps do when they never read a body: a `GET`'s `Content-Length` is
/// ignored, so the body stays in the buffer and is read as the next request.
/// It honours `Connection: close`. `/private/secret` answers `SECRET`.
struct BodyIgnoringOrigin {
    addr: SocketAddr,
    /// Every request line parsed, in order.
    lines: Arc<Mutex<Vec<String>>>,
}

impl BodyIgnoringOrigin {
    async fn start() -> BodyIgnoringOrigin {
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let log = lines.clone();
        let addr = serve_tcp(move |stream| serve(stream, log.clone())).await;
        BodyIgnoringOrigin { addr, lines }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("lines").clone()
    }

    /// Fails unless no request for a `/private` path reached it (none was
    /// smuggled in a body); `what` says what that would mean.
    fn assert_nothing_private(&self, what: &str) {
        let lines = self.lines();
        assert!(
            lines.iter().all(|l| !l.contains("/private")),
            "{what}: {lines:?}"
        );
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

async fn serve(mut stream: TcpStream, log: Arc<Mutex<Vec<String>>>) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head: Vec<u8> = buf.drain(..end).collect();
        let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let line = head.lines().next().unwrap_or_default().to_string();
        log.lock().expect("lines").push(line.clone());
        let mut words = line.split(' ');
        let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or("/"));
        // Bodies are skipped for methods the app reads them for only.
        if !matches!(method, "get" | "head" | "delete" | "options") {
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            while buf.len() < length {
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            buf.drain(..length);
        }
        let body = match path {
            "/robots.txt" => "User-agent: *\nDisallow: /private\n".to_string(),
            "/private/secret" => "SECRET".to_string(),
            other => format!("page {other}"),
        };
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        if head.contains("\r\nconnection: close") {
            return;
        }
    }
}

/// A GET of `target` whose body is a request for `/private/secret`.
fn smuggling_get(target: &str, host: &str) -> String {
    let inner = format!("GET /private/secret HTTP/1.1\r\nHost: {host}\r\n\r\n");
    format!(
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n{inner}",
        inner.len()
    )
}

/// The answer to a refused body: 400 saying why, not stored by caches, an
/// audit line naming the decision; nothing of it reached the origin.
fn assert_refused(resp: &RawResp, proxy: &Proxy, url: &str) {
    assert_eq!(resp.status(), 400, "{}", resp.text);
    assert!(resp.body().contains("body"), "{}", resp.body());
    assert!(
        resp.body().contains("upstream.allow_bodies_for"),
        "{}",
        resp.body()
    );
    assert_eq!(resp.header("cache-control").as_deref(), Some("no-store"));
    let decision = resp.header("x-robots-proxy-decision").unwrap_or_default();
    assert!(decision.starts_with("bad_request;"), "{decision}");
    let audit = proxy.audit();
    let line = audit
        .iter()
        .find(|l| l["url"] == url)
        .unwrap_or_else(|| panic!("no audit line for {url}: {audit:?}"));
    assert_eq!(line["decision"], "bad_request", "{line}");
    assert_eq!(line["method"], "GET", "{line}");
    assert!(
        line["reason"]
            .as_str()
            .is_some_and(|r| r.contains("with a body")),
        "{line}"
    );
}

#[tokio::test]
async fn a_get_body_holding_a_request_is_refused_and_never_reaches_the_origin() {
    let origin = BodyIgnoringOrigin::start().await;
    let proxy = Proxy::start().await;
    let host = origin.addr.to_string();
    let url = origin.url("/public");

    let resp = request(proxy.addr, smuggling_get(&url, &host)).await;
    assert_refused(&resp, &proxy, &url);

    // A chunked body is a body too.
    let inner = "GET /private/secret HTTP/1.1\r\n\r\n";
    let chunked = format!(
        "GET {url} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{inner}\r\n0\r\n\r\n",
        inner.len()
    );
    assert_eq!(request(proxy.addr, chunked).await.status(), 400);

    // So is one on HEAD, DELETE and OPTIONS; `Content-Length: 0` is none.
    for method in ["HEAD", "DELETE", "OPTIONS"] {
        let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
        let req = format!("{method} {url} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1\r\n\r\nx");
        client.write_all(req.as_bytes()).await.expect("write");
        let resp = read_answer(&mut client, method == "HEAD").await;
        assert_eq!(resp.status(), 400, "{method}");
    }
    let empty = format!("GET {url} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n");
    let resp = request(proxy.addr, empty).await;
    assert_eq!((resp.status(), resp.body()), (200, "page /public"));

    // Another client's request gets its own answer.
    let other = proxy.get(&origin.url("/other")).await;
    assert_eq!((other.status, other.body.as_str()), (200, "page /other"));
    origin.assert_nothing_private("a smuggled request reached the origin");
    let lines = origin.lines();
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("get /public "))
            .count(),
        1,
        "{lines:?}"
    );
}

/// Plain HTTP inside a CONNECT tunnel is served like an intercepted
/// tunnel's requests: the same refusal.
#[tokio::test]
async fn a_get_body_inside_a_tunnel_is_refused() {
    let origin = BodyIgnoringOrigin::start().await;
    let proxy = Proxy::start().await;
    let host = origin.addr.to_string();
    let mut tunnel = support::tls::connect(&proxy, &host).await.expect("tunnel");
    tunnel
        .write_all(smuggling_get("/public", &host).as_bytes())
        .await
        .expect("write");
    let resp = read_response(&mut tunnel).await;
    assert_refused(&resp, &proxy, &origin.url("/public"));
    origin.assert_nothing_private("a smuggled request reached the origin");
}

/// An origin named in `upstream.allow_bodies_for` gets the body; should it
/// ignore it, the exchange still ends with the connection
/// (`Connection: close`), so the body is never read as a request.
#[tokio::test]
async fn an_allowed_get_body_is_forwarded_on_a_connection_of_its_own() {
    let origin = BodyIgnoringOrigin::start().await;
    let proxy = Proxy::start_with(|c| {
        c.upstream.allow_bodies_for = vec!["127.0.0.1".into()];
    })
    .await;
    let host = origin.addr.to_string();
    let url = origin.url("/search");
    let resp = request(proxy.addr, smuggling_get(&url, &host)).await;
    assert_eq!((resp.status(), resp.body()), (200, "page /search"));
    for path in ["/a", "/b", "/c"] {
        let resp = proxy.get(&origin.url(path)).await;
        assert_eq!(resp.body, format!("page {path}"));
    }
    origin.assert_nothing_private("the body was read as a request");
}

/// After the 400 the client connection is not desynchronised: the refused
/// body is never read as a request of its own, and the next request on the
/// connection gets its own answer (or the connection is closed).
#[tokio::test]
async fn the_refused_body_is_not_read_as_the_next_request() {
    let origin = BodyIgnoringOrigin::start().await;
    let proxy = Proxy::start().await;
    let host = origin.addr.to_string();
    let secret = origin.url("/private/secret");
    let inner = format!("GET {secret} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n{inner}",
        origin.url("/public"),
        inner.len()
    );
    let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
    client.write_all(req.as_bytes()).await.expect("write");
    assert_eq!(read_response(&mut client).await.status(), 400);
    let next = format!(
        "GET {} HTTP/1.1\r\nHost: {host}\r\n\r\n",
        origin.url("/next")
    );
    if client.write_all(next.as_bytes()).await.is_ok() {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(BOUND, async {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = client.read(&mut chunk).await {
                if n == 0 || {
                    rest.extend_from_slice(&chunk[..n]);
                    find(&rest, b"page /next").is_some()
                } {
                    break;
                }
            }
        });
        read.await.expect("an answer or a close within the bound");
        let rest = String::from_utf8_lossy(&rest);
        assert!(
            rest.is_empty() || rest.starts_with("HTTP/1.1 200"),
            "{rest}"
        );
    }
    // The secret's URL was neither judged nor fetched.
    assert!(proxy.audit().iter().all(|l| l["url"] != secret.as_str()));
    origin.assert_nothing_private("the body was read as a request");
}
