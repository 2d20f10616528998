//! HTTP/1.1 over raw sockets, byte for byte: requests no client library
//! would send as written, and responses as they arrived.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a raw exchange may take before the test fails (a bound, not a wait).
pub const BOUND: Duration = Duration::from_secs(10);

/// A whole 200 response carrying `body`, the connection closing after it:
/// what a raw test origin writes.
pub fn ok_close(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Where `needle` first starts in `haystack`.
pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads (and drops) what the peer sends until it closes `io`: EOF or an
/// error. Unbounded: callers bound it.
pub async fn until_closed(io: &mut (impl AsyncRead + Unpin)) {
    let mut buf = [0u8; 1024];
    loop {
        match io.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// A response read off a raw socket, as text.
#[derive(Debug)]
pub struct RawResp {
    pub text: String,
}

impl RawResp {
    pub fn status(&self) -> u16 {
        self.text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    /// The value of the first header `name` (any case), if any.
    pub fn header(&self, name: &str) -> Option<String> {
        self.head().lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    /// The status line and headers.
    pub fn head(&self) -> &str {
        self.text.split("\r\n\r\n").next().unwrap_or_default()
    }

    /// What follows the head.
    pub fn body(&self) -> &str {
        self.text.split_once("\r\n\r\n").map_or("", |(_, b)| b)
    }
}

/// Writes `request` and reads until the peer closes (what was read before an
/// error counts).
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    request: impl AsRef<[u8]>,
) -> RawResp {
    stream
        .write_all(request.as_ref())
        .await
        .expect("write request");
    let mut out = Vec::new();
    let read = async {
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk).await {
                Ok(n) if n > 0 => out.extend_from_slice(&chunk[..n]),
                _ => return,
            }
        }
    };
    tokio::time::timeout(BOUND, read)
        .await
        .expect("the peer answers and closes");
    RawResp {
        text: String::from_utf8_lossy(&out).into_owned(),
    }
}

/// Sends `request` on a new connection to `addr` and reads until it closes.
pub async fn until_close(addr: SocketAddr, request: impl AsRef<[u8]>) -> RawResp {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    exchange(&mut s, request).await
}

/// Sends `request` on a new connection to `addr` and reads one response.
pub async fn request(addr: SocketAddr, request: impl AsRef<[u8]>) -> RawResp {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(request.as_ref()).await.expect("write");
    read_response(&mut s).await
}

/// Reads one response, its body framed by Content-Length.
pub async fn read_response<S: AsyncRead + Unpin>(stream: &mut S) -> RawResp {
    read_answer(stream, false).await
}

/// Reads one response, without a body when it answers a HEAD.
pub async fn read_answer<S: AsyncRead + Unpin>(stream: &mut S, to_head: bool) -> RawResp {
    let read = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            let n = stream.read(&mut chunk).await.expect("read");
            assert!(n > 0, "connection closed before a response");
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let length = head
            .lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        let length = if to_head { 0 } else { length };
        while buf.len() < end + length {
            let n = stream.read(&mut chunk).await.expect("read");
            assert!(n > 0, "connection closed inside a response");
            buf.extend_from_slice(&chunk[..n]);
        }
        RawResp {
            text: String::from_utf8_lossy(&buf[..end + length]).into_owned(),
        }
    };
    tokio::time::timeout(BOUND, read)
        .await
        .expect("a response within the bound")
}
