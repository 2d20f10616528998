//! An origin that misbehaves on purpose, request by request: a raw
//! HTTP/1.1 server (keep-alive, GET without bodies) that answers most
//! requests and resets, hangs on, or answers garbage to the ones its plan
//! picks. It counts every request it sees per path.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::raw::{find, until_closed};
use super::{Hits, serve_tcp};

/// What the origin does with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// 200 with this body.
    Ok(String),
    /// Reset the connection (RST via SO_LINGER 0) after reading the request.
    Reset,
    /// Never answer; the connection is held until the peer closes it (or
    /// `HANG_LIMIT` passes).
    Hang,
    /// Answer bytes that are not HTTP, then close.
    Garbage,
}

/// A hung connection is released after this long even if the peer stays.
pub const HANG_LIMIT: Duration = Duration::from_secs(60);

/// Chooses the fault for a request path (path and query as received).
pub type Plan = Arc<dyn Fn(&str) -> Fault + Send + Sync>;

pub struct FaultyOrigin {
    pub addr: SocketAddr,
    hits: Hits,
    connections: Arc<AtomicUsize>,
}

impl FaultyOrigin {
    pub async fn start(plan: Plan) -> FaultyOrigin {
        let hits = Hits::default();
        let connections = Arc::new(AtomicUsize::new(0));
        let (h, c) = (hits.clone(), connections.clone());
        let addr = serve_tcp(move |stream| {
            c.fetch_add(1, Ordering::Relaxed);
            serve(stream, plan.clone(), h.clone())
        })
        .await;
        FaultyOrigin {
            addr,
            hits,
            connections,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn hits(&self, path: &str) -> usize {
        self.hits.get(path)
    }

    /// Every path seen, with its count.
    pub fn all_hits(&self) -> HashMap<String, usize> {
        self.hits.all()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }
}

/// Serves one connection: requests one after another until the peer
/// closes, something fails, or a fault ends it.
async fn serve(mut stream: TcpStream, plan: Plan, hits: Hits) {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        // Read one request head.
        let end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i;
            }
            if buf.len() > 64 * 1024 {
                return;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end + 4);
        let path = head
            .lines()
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .unwrap_or("")
            .to_string();
        // The proxy forwards GETs without a body; anything else is a bug here.
        let lower = head.to_ascii_lowercase();
        if lower.contains("\r\ntransfer-encoding:")
            || lower
                .lines()
                .any(|l| l.starts_with("content-length:") && l.trim_end() != "content-length: 0")
        {
            let _ = stream
                .write_all(
                    b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
            return;
        }
        hits.add(&path);
        match plan(&path) {
            Fault::Ok(body) => {
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{}",
                    body.len(),
                    body
                );
                if stream.write_all(resp.as_bytes()).await.is_err() {
                    return;
                }
            }
            Fault::Reset => {
                #[allow(deprecated)]
                let _ = stream.set_linger(Some(Duration::ZERO));
                return;
            }
            Fault::Hang => {
                // Wait for the peer to give up (EOF or error), bounded.
                let _ = tokio::time::timeout(HANG_LIMIT, until_closed(&mut stream)).await;
                return;
            }
            Fault::Garbage => {
                let _ = stream
                    .write_all(b"\x00\x01garbage garbage garbage\r\n\r\n")
                    .await;
                return;
            }
        }
    }
}
