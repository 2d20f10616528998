//! WebSocket through the proxy: `ws://` in absolute form and inside a
//! CONNECT tunnel, `wss://` through TLS interception, each judged by path
//! first (a disallowed one is a 403 with an audit line) and then relayed as
//! it is, against a loopback echo server.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::{WebSocketStream, client_async};

use crate::support::raw::ok_close;
use crate::support::tls::{connect, origin_config, proxy_tls};
use crate::support::{Proxy, serve_tcp};

const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";

/// Reads a request or response head (up to the blank line).
async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Serves robots.txt, and echoes WebSocket messages on any other path; the
/// request lines it received are recorded.
async fn serve<S>(mut s: S, seen: Arc<Mutex<Vec<String>>>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let head = read_head(&mut s).await;
    let line = head.lines().next().unwrap_or_default().to_string();
    seen.lock().expect("seen").push(line.clone());
    if line.starts_with("GET /robots.txt ") {
        let _ = s.write_all(ok_close(ROBOTS).as_bytes()).await;
        return;
    }
    let Some(key) = header(&head, "sec-websocket-key") else {
        let _ = s
            .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            .await;
        return;
    };
    let accept = derive_accept_key(key.as_bytes());
    let resp = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
    );
    if s.write_all(resp.as_bytes()).await.is_err() {
        return;
    }
    let mut ws = WebSocketStream::from_raw_socket(s, Role::Server, None).await;
    while let Some(Ok(msg)) = ws.next().await {
        if msg.is_text() || msg.is_binary() {
            let _ = ws.send(msg).await;
        }
    }
}

/// An echo origin, plain or TLS (with a certificate for 127.0.0.1 from a
/// CA written to the returned file).
async fn echo_origin(
    tls: bool,
) -> (
    SocketAddr,
    Arc<Mutex<Vec<String>>>,
    Option<(std::path::PathBuf, tempfile::TempDir)>,
) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let (acceptor, ca) = if tls {
        let dir = tempfile::tempdir().expect("tempdir");
        let (config, file) = origin_config("127.0.0.1", dir.path());
        let mut config = (*config).clone();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        (
            Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
            Some((file, dir)),
        )
    } else {
        (None, None)
    };
    let s = seen.clone();
    let addr = serve_tcp(move |tcp| {
        let (seen, acceptor) = (s.clone(), acceptor.clone());
        async move {
            match acceptor {
                Some(a) => {
                    if let Ok(tls) = a.accept(tcp).await {
                        serve(tls, seen).await;
                    }
                }
                None => serve(tcp, seen).await,
            }
        }
    })
    .await;
    (addr, seen, ca)
}

/// Sends a text message and returns the echo.
async fn echo<S>(ws: &mut WebSocketStream<S>, text: &str) -> String
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    ws.send(Message::text(text)).await.expect("send");
    match ws.next().await {
        Some(Ok(Message::Text(t))) => t.to_string(),
        other => panic!("no echo: {other:?}"),
    }
}

#[tokio::test]
async fn ws_in_absolute_form_is_judged_then_relayed() {
    let (addr, seen, _) = echo_origin(false).await;
    let proxy = Proxy::start().await;
    let upgrade = |path: &str| {
        format!(
            "GET http://{addr}{path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\n\r\n"
        )
    };
    // An upgrade of `path` on a connection of its own: the stream and the
    // answer's head.
    let ask = async |path: &str| {
        let mut s = tokio::net::TcpStream::connect(proxy.addr)
            .await
            .expect("connect");
        s.write_all(upgrade(path).as_bytes()).await.expect("write");
        let head = read_head(&mut s).await;
        (s, head)
    };
    let (s, head) = ask("/chat").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let mut ws = WebSocketStream::from_raw_socket(s, Role::Client, None).await;
    assert_eq!(echo(&mut ws, "hello").await, "hello");
    assert_eq!(echo(&mut ws, "again").await, "again");

    let (_, head) = ask("/private/chat").await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let line = proxy.only_audit_line();
    assert_eq!(line["url"], format!("http://{addr}/private/chat"));
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen, vec!["GET /robots.txt HTTP/1.1", "GET /chat HTTP/1.1"]);
}

#[tokio::test]
async fn ws_inside_a_connect_tunnel_is_judged_then_relayed() {
    let (addr, seen, _) = echo_origin(false).await;
    let proxy = Proxy::start().await;
    let target = format!("127.0.0.1:{}", addr.port());
    let tunnel = connect(&proxy, &target).await.expect("tunnel");
    let (mut ws, resp) = client_async(format!("ws://{target}/chat"), tunnel)
        .await
        .expect("websocket through the tunnel");
    assert_eq!(resp.status(), 101);
    assert_eq!(echo(&mut ws, "through a tunnel").await, "through a tunnel");

    let tunnel = connect(&proxy, &target).await.expect("tunnel");
    match client_async(format!("ws://{target}/private/x"), tunnel).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 403),
        other => panic!("expected a 403: {other:?}"),
    }
    assert_eq!(proxy.audit().len(), 1);
    assert!(
        !seen
            .lock()
            .expect("seen")
            .iter()
            .any(|l| l.contains("/private")),
        "never reached the origin"
    );
}

#[tokio::test]
async fn wss_through_interception_is_judged_then_relayed() {
    let (addr, seen, ca) = echo_origin(true).await;
    let (ca_file, _dir) = ca.expect("origin CA");
    let proxy = Proxy::start_with(move |c| c.upstream.ca_files = vec![ca_file]).await;
    let target = format!("127.0.0.1:{}", addr.port());
    let open = async |path: &str| {
        let tunnel = connect(&proxy, &target).await.expect("tunnel");
        let name = ServerName::try_from("127.0.0.1").expect("name");
        let tls = proxy_tls(&proxy, tunnel, name, b"http/1.1").await;
        client_async(format!("wss://{target}{path}"), tls).await
    };
    let (mut ws, _) = open("/chat").await.expect("wss through interception");
    assert_eq!(echo(&mut ws, "secure").await, "secure");
    match open("/private/x").await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 403),
        other => panic!("expected a 403: {other:?}"),
    }
    let line = proxy.only_audit_line();
    assert_eq!(line["url"], format!("https://{target}/private/x"));
    assert!(
        !seen
            .lock()
            .expect("seen")
            .iter()
            .any(|l| l.contains("/private"))
    );
}
