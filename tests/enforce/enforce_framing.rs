//! Enforcement that framing cannot bypass: ports, request targets and
//! methods the proxy must refuse, and bodies it must relay as the sender
//! framed them. Raw-socket origins record the exact bytes they receive and
//! answer canned bytes; raw-socket clients send what hyper would normalise.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support;
use crate::support::raw::{RawResp, exchange, find, until_close};
use crate::support::tls::connect;
use crate::support::{Origin, Proxy, serve_tcp};

/// The robots.txt every raw origin serves.
const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";

/// Reads one request (head, then the body as its own head frames it) and
/// returns its exact bytes; `None` once the peer has closed.
async fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let chunked = head
        .lines()
        .any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    loop {
        let body = &buf[head_end..];
        let done = if chunked {
            body == b"0\r\n\r\n" || body.ends_with(b"\r\n0\r\n\r\n")
        } else {
            body.len() >= length
        };
        if done {
            return Some(buf);
        }
        match stream.read(&mut chunk).await {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return Some(buf),
        }
    }
}

/// A raw-socket origin: `/robots.txt` gets [`ROBOTS`]; every other request
/// is recorded byte for byte and answered with `reply`, then the connection
/// is closed.
struct RawOrigin {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl RawOrigin {
    async fn start(reply: &'static [u8]) -> RawOrigin {
        let requests: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let seen = requests.clone();
        let addr = serve_tcp(move |mut stream| {
            let seen = seen.clone();
            async move {
                while let Some(request) = read_request(&mut stream).await {
                    if request.starts_with(b"GET /robots.txt ") {
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{ROBOTS}",
                            ROBOTS.len()
                        );
                        if stream.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    seen.lock().expect("requests").push(request);
                    let _ = stream.write_all(reply).await;
                    let _ = stream.shutdown().await;
                    return;
                }
            }
        })
        .await;
        RawOrigin { addr, requests }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The requests other than robots.txt received so far, as text.
    fn requests(&self) -> Vec<String> {
        self.requests
            .lock()
            .expect("requests")
            .iter()
            .map(|r| String::from_utf8_lossy(r).into_owned())
            .collect()
    }
}

/// An intercepted TLS tunnel to `target` (an IP literal and port), trusting
/// only the proxy's CA, speaking HTTP/1.1 inside.
async fn tls_tunnel(
    proxy: &Proxy,
    target: SocketAddr,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tunnel = connect(proxy, &target.to_string()).await.expect("tunnel");
    let name = rustls_pki_types::ServerName::IpAddress(target.ip().into());
    support::tls::proxy_tls(proxy, tunnel, name, b"http/1.1").await
}

// --- Ports ---------------------------------------------------------------

/// `http::Uri` takes `host:65616`, but then has no port: the request was
/// judged against, and sent to, port 80.
#[tokio::test]
async fn an_absolute_form_target_with_a_bad_port_is_400_and_goes_nowhere() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let proxy = Proxy::start_with(|c| c.audit.log_all = true).await;
    let port = origin.addr.port();
    for bad in [
        format!("{}", u32::from(port) + 65536),
        "65536".to_string(),
        "99999999999".to_string(),
        format!("+{port}"),
        "0".to_string(),
    ] {
        let resp = until_close(proxy.addr,
            &format!("GET http://127.0.0.1:{bad}/x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert_eq!(resp.status(), 400, "port {bad}: {resp:?}");
        assert!(resp.text.contains("port"), "port {bad}: {resp:?}");
    }
    assert_eq!(origin.hits("/x"), 0);
    assert_eq!(origin.hits("/robots.txt"), 0);
    assert!(proxy.audit().is_empty(), "nothing was judged");
}

/// RFC 3986 §3.2.3: an empty port is the scheme's default one.
#[tokio::test]
async fn an_empty_port_is_the_default_port() {
    let proxy = Proxy::start().await;
    let resp = until_close(
        proxy.addr,
        "GET http://127.0.0.1:/x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    .await;
    // Judged as http://127.0.0.1 (port 80, where nothing listens here).
    assert_ne!(resp.status(), 400, "{resp:?}");
    let decision = resp.header("x-robots-proxy-decision").unwrap_or_default();
    assert!(
        decision.contains("robots=http://127.0.0.1/robots.txt"),
        "{resp:?}"
    );
    assert_eq!(proxy.audit()[0]["url"], "http://127.0.0.1/x");
}

#[tokio::test]
async fn a_connect_target_with_a_bad_or_missing_port_is_400() {
    let origin = Origin::start().await;
    let proxy = Proxy::start().await;
    let port = origin.addr.port();
    for target in [
        format!("127.0.0.1:{}", u32::from(port) + 65536),
        format!("127.0.0.1:+{port}"),
        "127.0.0.1:0".to_string(),
        "127.0.0.1:".to_string(),
        "127.0.0.1".to_string(),
    ] {
        let err = connect(&proxy, &target).await.expect_err("refused");
        assert!(err.starts_with("HTTP/1.1 400"), "{target}: {err}");
    }
    assert_eq!(
        origin.connections.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

/// Inside a tunnel the target comes from the Host header (or an absolute
/// form): a bad port there is a bad request too.
#[tokio::test]
async fn a_bad_port_inside_a_tunnel_is_400() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let proxy = Proxy::start().await;
    let port = origin.addr.port();
    for request in [
        format!(
            "GET /x HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            u32::from(port) + 65536
        ),
        format!("GET /x HTTP/1.1\r\nHost: 127.0.0.1:+{port}\r\nConnection: close\r\n\r\n"),
        format!(
            "GET http://127.0.0.1:{}/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n",
            u32::from(port) + 65536
        ),
    ] {
        let mut tunnel = connect(&proxy, &origin.addr.to_string())
            .await
            .expect("tunnel");
        let resp = exchange(&mut tunnel, &request).await;
        assert_eq!(resp.status(), 400, "{request}: {resp:?}");
    }
    assert_eq!(origin.hits("/x"), 0);
    // An empty Host (or none) leaves the tunnel's host and port.
    let mut tunnel = connect(&proxy, &origin.addr.to_string())
        .await
        .expect("tunnel");
    let resp = exchange(
        &mut tunnel,
        b"GET /x HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(resp.status(), 200, "{resp:?}");
    assert_eq!(origin.hits("/x"), 1);
}

/// An absolute-form target inside a tunnel naming another host is judged
/// against, and sent to, the host the tunnel connects to.
#[tokio::test]
async fn an_absolute_form_for_another_host_inside_a_tunnel_is_judged_as_the_tunnels() {
    let origin = Origin::with_robots(ROBOTS).await;
    let other = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let proxy = Proxy::start().await;
    let send = |path: &'static str| {
        let (proxy, origin, other) = (&proxy, &origin, &other);
        async move {
            let mut tunnel = connect(proxy, &origin.addr.to_string())
                .await
                .expect("tunnel");
            let request = format!(
                "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                other.url(path),
                other.addr
            );
            exchange(&mut tunnel, request).await
        }
    };
    let blocked = send("/private/x").await;
    assert_eq!(blocked.status(), 403, "{blocked:?}");
    assert_eq!(proxy.audit()[0]["url"], origin.url("/private/x"));
    let allowed = send("/open").await;
    assert_eq!(allowed.status(), 200, "{allowed:?}");
    assert_eq!(origin.hits("/open"), 1);
    assert_eq!(
        other.connections.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    // The Host it reached the origin with is the tunnel's.
    let seen = origin.seen_headers.lock().expect("seen").clone();
    let host = seen
        .iter()
        .rev()
        .find_map(|h| h.get("host"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    assert_eq!(host.as_deref(), Some(origin.addr.to_string().as_str()));
}

// --- Targets and methods inside a tunnel --------------------------------

/// Asserts a CONNECT, an `OPTIONS *`, an authority-form GET and a TRACE sent
/// inside tunnels opened by `open` are each answered and never forwarded.
async fn inner_refusals<S, F, Fut>(origin: &Origin, open: F)
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = S>,
{
    let host = origin.addr.to_string();
    // Each request on a tunnel of its own.
    let inside = |request: String| {
        let tunnel = open();
        async move { exchange(&mut tunnel.await, request.as_bytes()).await }
    };
    let resp = inside(format!("CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n")).await;
    assert_eq!(resp.status(), 405, "{resp:?}");
    assert!(
        resp.header("allow")
            .is_some_and(|a| a.contains("GET") && !a.contains("CONNECT")),
        "{resp:?}"
    );
    let resp = inside(format!("OPTIONS * HTTP/1.1\r\nHost: {host}\r\n{CLOSE}")).await;
    assert_eq!(resp.status(), 400, "{resp:?}");
    assert!(resp.text.contains("OPTIONS *"), "{resp:?}");
    let resp = inside(format!("GET {host} HTTP/1.1\r\nHost: {host}\r\n{CLOSE}")).await;
    assert_eq!(resp.status(), 400, "{resp:?}");
    let resp = inside(format!("TRACE /x HTTP/1.1\r\nHost: {host}\r\n{CLOSE}")).await;
    assert_eq!(resp.status(), 405, "{resp:?}");
    assert!(resp.header("allow").is_some(), "{resp:?}");
    assert_eq!(
        origin.connections.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing reached the origin"
    );
}

#[tokio::test]
async fn connect_options_star_and_trace_inside_a_plain_tunnel_are_answered_not_forwarded() {
    let origin = Origin::start().await;
    let proxy = Proxy::start().await;
    inner_refusals(&origin, || async {
        connect(&proxy, &origin.addr.to_string())
            .await
            .expect("tunnel")
    })
    .await;
}

#[tokio::test]
async fn connect_options_star_and_trace_inside_an_intercepted_tunnel_are_answered_not_forwarded() {
    let origin = Origin::start().await;
    let proxy = Proxy::start().await;
    inner_refusals(&origin, || tls_tunnel(&proxy, origin.addr)).await;
}

// --- Methods -------------------------------------------------------------

/// TRACE would have the origin echo the request, headers included.
#[tokio::test]
async fn trace_is_405_and_never_reaches_the_origin() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let proxy = Proxy::start().await;
    let rest = format!("Cookie: secret\r\n{CLOSE}");
    let resp = send(&proxy, "TRACE", &origin.url("/x"), &rest).await;
    assert_eq!(resp.status(), 405, "{resp:?}");
    assert!(resp.header("allow").is_some(), "{resp:?}");
    assert!(!resp.text.contains("secret"), "{resp:?}");
    assert_eq!(
        origin.connections.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

/// HEAD, OPTIONS and a method the proxy does not know are judged by path
/// and reach the origin as sent.
#[tokio::test]
async fn head_options_and_unknown_methods_are_judged_and_forwarded_as_sent() {
    let origin = RawOrigin::start(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let proxy = Proxy::start_with(|c| c.audit.log_all = true).await;
    for method in ["HEAD", "OPTIONS", "PURGE"] {
        let resp = send(&proxy, method, &origin.url("/private/x"), CLOSE).await;
        assert_eq!(resp.status(), 403, "{method}: {resp:?}");
        let resp = send(&proxy, method, &origin.url("/open"), CLOSE).await;
        assert_eq!(resp.status(), 200, "{method}: {resp:?}");
        let last = origin.requests().pop().unwrap_or_default();
        assert!(
            last.starts_with(&format!("{method} /open HTTP/1.1\r\n")),
            "{method}: {last}"
        );
        if method == "HEAD" {
            // The length of what a GET would get, and no body.
            assert_eq!(resp.header("content-length").as_deref(), Some("2"));
            assert!(resp.text.ends_with("\r\n\r\n"), "{resp:?}");
        } else {
            assert!(resp.text.ends_with("\r\n\r\nok"), "{method}: {resp:?}");
        }
    }
    assert!(origin.requests().iter().all(|r| !r.contains("/private")));
    let methods: Vec<String> = proxy
        .audit()
        .iter()
        .map(|l| format!("{} {}", l["method"], l["decision"]))
        .collect();
    assert_eq!(
        methods,
        [
            "\"HEAD\" \"disallowed\"",
            "\"HEAD\" \"allowed\"",
            "\"OPTIONS\" \"disallowed\"",
            "\"OPTIONS\" \"allowed\"",
            "\"PURGE\" \"disallowed\"",
            "\"PURGE\" \"allowed\"",
        ]
    );
}

// --- Response framing ----------------------------------------------------

/// Both framings: Transfer-Encoding wins (RFC 9112 §6.3), the body is 26
/// bytes, not 5.
const CL_AND_CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n";
const ALPHABET: &str = "abcdefghijklmnopqrstuvwxyz";

/// The plain-http path without a request body: the proxy's own pool.
#[tokio::test]
async fn a_response_with_content_length_and_chunked_reaches_the_client_whole() {
    let origin = RawOrigin::start(CL_AND_CHUNKED).await;
    let proxy = Proxy::start().await;
    let resp = proxy.get(&origin.url("/x")).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, ALPHABET);
    assert!(resp.header("content-length").is_none(), "{resp:?}");
}

/// With a request body the pooled client carries the request.
#[tokio::test]
async fn a_response_with_content_length_and_chunked_to_a_request_with_a_body_reaches_the_client_whole()
 {
    let origin = RawOrigin::start(CL_AND_CHUNKED).await;
    let proxy = Proxy::start().await;
    let req = http::Request::post(origin.url("/x"))
        .body(bytes::Bytes::from_static(b"form=1"))
        .expect("req");
    let resp = proxy.request(req).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, ALPHABET);
    assert!(resp.header("content-length").is_none(), "{resp:?}");
    assert!(origin.requests()[0].ends_with("form=1"));
}

/// Two different lengths: no way to know where the body ends.
#[tokio::test]
async fn a_response_with_two_different_content_lengths_is_a_502() {
    let origin = RawOrigin::start(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 26\r\n\r\nabcdefghijklmnopqrstuvwxyz",
    )
    .await;
    let proxy = Proxy::start().await;
    assert_eq!(proxy.get(&origin.url("/x")).await.status, 502);
}

// --- Request framing -----------------------------------------------------

/// Sends `<method> <url> HTTP/1.1`, the URL's authority as `Host`, then
/// `rest` (more header lines, the blank line, a body) through `proxy` byte
/// for byte, and reads until the proxy closes.
async fn send(proxy: &Proxy, method: &str, url: &str, rest: &str) -> RawResp {
    let host = url.split('/').nth(2).expect("an absolute URL");
    let head = format!("{method} {url} HTTP/1.1\r\nHost: {host}\r\n");
    until_close(proxy.addr, format!("{head}{rest}")).await
}

/// POSTs to `/x` of `origin` through `proxy` with each of `posts` after
/// the Host line (more headers, the blank line, a body): each is answered
/// `status`, and none reaches the origin.
async fn posts_refused(proxy: &Proxy, origin: &RawOrigin, posts: &[String], status: u16) {
    for rest in posts {
        let resp = send(proxy, "POST", &origin.url("/x"), rest).await;
        assert_eq!(resp.status(), status, "{rest:?}: {resp:?}");
    }
    assert!(origin.requests().is_empty(), "{:?}", origin.requests());
}

/// `Connection: close` and no body, for [`send`].
const CLOSE: &str = "Connection: close\r\n\r\n";

/// A proxy that forwards bodies on GET, HEAD, DELETE and OPTIONS to the
/// loopback origins of these tests.
async fn bodies_allowed() -> Proxy {
    Proxy::start_with(|c| c.upstream.allow_bodies_for = vec!["127.0.0.1".into()]).await
}

/// The body of a recorded request: what follows its head.
fn body_of(request: &str) -> &str {
    request.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

fn has_header(request: &str, line: &str) -> bool {
    let head = request.split("\r\n\r\n").next().unwrap_or_default();
    head.lines().any(|l| l.eq_ignore_ascii_case(line))
}

/// hyper's client sends a GET (or HEAD) body of unknown length as no body
/// at all unless told its framing. (A body on these methods is forwarded to
/// origins in `upstream.allow_bodies_for` only, on a connection of its own:
/// tests/enforce/request_bodies.rs.)
#[tokio::test]
async fn a_request_body_is_forwarded_whatever_the_method_and_framing() {
    let origin = RawOrigin::start(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let proxy = bodies_allowed().await;
    for method in ["GET", "HEAD", "OPTIONS", "DELETE"] {
        let head = format!(
            "{method} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            origin.url("/x"),
            origin.addr
        );
        let chunked = until_close(
            proxy.addr,
            &format!("{head}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
        )
        .await;
        assert_eq!(chunked.status(), 200, "{method}: {chunked:?}");
        let seen = origin.requests().pop().unwrap_or_default();
        assert!(
            seen.starts_with(&format!("{method} /x HTTP/1.1\r\n")),
            "{seen}"
        );
        assert!(has_header(&seen, "transfer-encoding: chunked"), "{seen}");
        assert!(has_header(&seen, "connection: close"), "{seen}");
        assert!(
            !seen.to_ascii_lowercase().contains("content-length"),
            "{seen}"
        );
        assert_eq!(body_of(&seen), "5\r\nhello\r\n0\r\n\r\n", "{method}");

        let length =
            until_close(proxy.addr, &format!("{head}Content-Length: 5\r\n\r\nhello")).await;
        assert_eq!(length.status(), 200, "{method}: {length:?}");
        let seen = origin.requests().pop().unwrap_or_default();
        assert!(has_header(&seen, "content-length: 5"), "{seen}");
        assert!(
            !seen.to_ascii_lowercase().contains("transfer-encoding"),
            "{seen}"
        );
        assert_eq!(body_of(&seen), "hello", "{method}");
    }
}

/// Content-Length and Transfer-Encoding from the client, in either order:
/// hyper's server reads the body as chunked and drops the length; the
/// origin sees that one framing, and the client connection ends after the
/// response (nothing after the body is read as another request).
#[tokio::test]
async fn a_request_with_content_length_and_chunked_reaches_the_origin_with_one_framing() {
    let origin = RawOrigin::start(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let proxy = bodies_allowed().await;
    for (method, framing) in [
        ("POST", "Content-Length: 5\r\nTransfer-Encoding: chunked"),
        ("POST", "Transfer-Encoding: chunked\r\nContent-Length: 5"),
        ("GET", "Content-Length: 5\r\nTransfer-Encoding: chunked"),
    ] {
        let smuggled = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\n\r\n",
            origin.url("/private/y"),
            origin.addr
        );
        let rest = format!("{framing}\r\n\r\n3\r\nabc\r\n0\r\n\r\n{smuggled}");
        let resp = send(&proxy, method, &origin.url("/x"), &rest).await;
        assert_eq!(resp.status(), 200, "{framing}: {resp:?}");
        assert_eq!(resp.text.matches("HTTP/1.1 ").count(), 1, "{resp:?}");
        let seen = origin.requests().pop().unwrap_or_default();
        assert!(has_header(&seen, "transfer-encoding: chunked"), "{seen}");
        assert!(
            !seen.to_ascii_lowercase().contains("content-length"),
            "{seen}"
        );
        assert_eq!(body_of(&seen), "3\r\nabc\r\n0\r\n\r\n", "{framing}");
    }
    assert!(origin.requests().iter().all(|r| !r.contains("/private")));
}

/// Framings that cannot be read one way only are refused before anything
/// is judged or forwarded.
#[tokio::test]
async fn ambiguous_request_framing_is_400() {
    let origin = RawOrigin::start(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let proxy = Proxy::start_with(|c| c.audit.log_all = true).await;
    let framings = [
        "Content-Length: 5\r\nContent-Length: 6",
        "Content-Length: 5, 6",
        "Content-Length: +5",
        "Transfer-Encoding: gzip",
        "Transfer-Encoding: chunked, gzip",
    ];
    let posts = framings.map(|framing| format!("{framing}\r\n{CLOSE}hello6"));
    posts_refused(&proxy, &origin, &posts, 400).await;
    assert!(proxy.audit().is_empty());
}

/// curl through the proxy: the chunked response reaches it whole, and a
/// GET it sends with a chunked body reaches the origin (one in
/// `upstream.allow_bodies_for`) with that body.
#[tokio::test]
async fn curl_gets_the_whole_chunked_response_and_its_get_body_arrives() {
    let origin = RawOrigin::start(CL_AND_CHUNKED).await;
    let proxy = bodies_allowed().await;
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "-x"])
        .arg(format!("http://{}", proxy.addr))
        .args(["-X", "GET", "-H", "Transfer-Encoding: chunked"])
        .args(["--data-binary", "hello"])
        .arg(origin.url("/x"))
        .output()
        .await
        .expect("curl runs (install curl)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), ALPHABET);
    let seen = origin.requests().pop().unwrap_or_default();
    assert!(seen.starts_with("GET /x HTTP/1.1\r\n"), "{seen}");
    assert_eq!(body_of(&seen), "5\r\nhello\r\n0\r\n\r\n");
}

/// A transfer coding other than chunked: hyper undoes only chunked, and
/// Transfer-Encoding is not passed on, so the body would arrive still coded
/// with nothing saying so. Refused both ways.
#[tokio::test]
async fn a_request_with_a_transfer_coding_other_than_chunked_is_501() {
    let origin = RawOrigin::start(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let proxy = Proxy::start().await;
    let codings = [
        "gzip, chunked",
        "chunked, chunked",
        "chunked\r\nTransfer-Encoding: chunked",
    ];
    let posts = codings
        .map(|coding| format!("Transfer-Encoding: {coding}\r\n{CLOSE}5\r\nhello\r\n0\r\n\r\n"));
    posts_refused(&proxy, &origin, &posts, 501).await;
}

#[tokio::test]
async fn a_response_with_a_transfer_coding_other_than_chunked_is_502() {
    for reply in [
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"[..],
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nhello"[..],
    ] {
        let origin = RawOrigin::start(reply).await;
        let proxy = Proxy::start().await;
        let resp = proxy.get(&origin.url("/x")).await;
        assert_eq!(resp.status, 502, "{resp:?}");
        assert!(resp.body.contains("gzip"), "{resp:?}");
    }
}

/// `OPTIONS *` and an authority-form GET sent to the proxy itself name no
/// resource to judge: 400, as for any origin-form request.
#[tokio::test]
async fn options_star_and_authority_form_to_the_proxy_are_400() {
    let origin = Origin::start().await;
    let proxy = Proxy::start().await;
    for target in ["*".to_string(), origin.addr.to_string()] {
        for method in ["OPTIONS", "GET"] {
            let resp = until_close(
                proxy.addr,
                &format!(
                    "{method} {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                    origin.addr
                ),
            )
            .await;
            assert_eq!(resp.status(), 400, "{method} {target}: {resp:?}");
        }
    }
    assert_eq!(
        origin.connections.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

/// HTTP/2 inside a tunnel (prior knowledge, plain): a GET whose body comes
/// in DATA frames with no length reaches the HTTP/1.1 origin (one in
/// `upstream.allow_bodies_for`) with it.
#[tokio::test]
async fn an_http2_get_body_inside_a_tunnel_reaches_the_origin() {
    use http_body_util::BodyExt;
    let origin = RawOrigin::start(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let proxy = bodies_allowed().await;
    let tunnel = connect(&proxy, &origin.addr.to_string())
        .await
        .expect("tunnel");
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tunnel),
    )
    .await
    .expect("h2 handshake");
    tokio::spawn(conn);
    let frames = futures_util::stream::iter([
        Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(bytes::Bytes::from_static(
            b"hel",
        ))),
        Ok(hyper::body::Frame::data(bytes::Bytes::from_static(b"lo"))),
    ]);
    let req = http::Request::get(origin.url("/x"))
        .body(http_body_util::StreamBody::new(frames))
        .expect("req");
    let resp = sender.send_request(req).await.expect("response");
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"ok");
    let seen = origin.requests().pop().unwrap_or_default();
    assert!(seen.starts_with("GET /x HTTP/1.1\r\n"), "{seen}");
    assert!(
        has_header(&seen, &format!("host: {}", origin.addr)),
        "{seen}"
    );
    assert!(has_header(&seen, "transfer-encoding: chunked"), "{seen}");
    let decoded: String = body_of(&seen).split("\r\n").skip(1).step_by(2).collect();
    assert_eq!(decoded, "hello", "{seen}");
}
