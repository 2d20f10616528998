//! The descriptor budget covers every socket: robots.txt fetches leave no
//! idle connection behind, and a fetch that fails because the proxy ran
//! out of file descriptors is not taken for the origin's failure.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::support::binary::{NO_HANG, Setup, descriptors, limit_descriptors};
use crate::support::{Conn, Origin, Proxy, serve_tcp, until};

/// Starts a loopback origin answering `robots` at `/robots.txt` (and a
/// page anywhere else) that counts in `open` the connections open to it
/// right now: incremented on accept, decremented once the peer closed.
async fn tracked_origin(robots: Bytes, open: watch::Sender<usize>) -> SocketAddr {
    serve_tcp(move |stream| {
        open.send_modify(|n| *n += 1);
        let (open, robots) = (open.clone(), robots.clone());
        async move {
            let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                let body = if req.uri().path() == "/robots.txt" {
                    robots.clone()
                } else {
                    Bytes::from_static(b"page")
                };
                async move { Ok::<_, Infallible>(Response::new(Full::new(body))) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
            open.send_modify(|n| *n -= 1);
        }
    })
    .await
}

/// A crawl over 50 new origins: each robots.txt fetch's connection is
/// closed once the fetch is over (every fifth file is 1 MiB, cut at the
/// 500 KiB cap with its rest unread), instead of idling in the fetch
/// client's pool for `upstream.pool_idle_timeout` (90 s), one socket per
/// origin outside every budget.
#[tokio::test]
async fn robots_txt_fetches_leave_no_connection_open_at_the_origins() {
    const ORIGINS: usize = 50;
    let (open_tx, mut open) = watch::channel(0usize);
    let small = Bytes::from_static(b"User-agent: *\nDisallow: /\n");
    let mut big = b"User-agent: *\nDisallow: /\n".to_vec();
    while big.len() < 1 << 20 {
        big.extend_from_slice(b"# a long robots.txt, cut at the size cap\n");
    }
    let big = Bytes::from(big);
    let mut origins = Vec::new();
    for i in 0..ORIGINS {
        let robots = if i % 5 == 0 {
            big.clone()
        } else {
            small.clone()
        };
        origins.push(tracked_origin(robots, open_tx.clone()).await);
    }
    let proxy = Proxy::start().await;
    let mut client = Conn::open(proxy.addr).await;
    for addr in &origins {
        let resp = client.get(&format!("http://{addr}/page")).await;
        // Disallowed: the page request itself never reaches the origin;
        // only the robots.txt fetch connected.
        assert_eq!(resp.status, 403, "{}", resp.body);
    }
    let closed = tokio::time::timeout(NO_HANG, open.wait_for(|n| *n == 0))
        .await
        .map(|r| r.is_ok());
    assert!(
        closed == Ok(true),
        "{} of {ORIGINS} robots.txt fetch connections still open at the origins",
        *open.borrow()
    );
}

/// Out of file descriptors, a robots.txt fetch fails with EMFILE: the
/// request gets 503 saying so, and nothing is cached: once descriptors are
/// free again the very next request fetches robots.txt and is judged by
/// it, instead of `robots.unreachable_retry` (5 minutes) of "unreachable".
#[tokio::test]
async fn a_fetch_failing_for_lack_of_descriptors_is_not_cached() {
    const SPARE: u64 = 24;
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let warm = Origin::start().await;
    let setup = Setup::with_config("TestBot/1.0", "");
    let mut running = setup.start().await;
    let pid = running.child.id();
    // The client connection the test asks on, accepted while there is room.
    let mut client = Conn::open(running.addr).await;
    assert_eq!(client.get(&warm.url("/page")).await.status, 200);
    // Lower the running proxy's limit (soft and hard: it raised the soft
    // one to the hard one at start) to a few descriptors above those open.
    let (open, highest) = descriptors(pid);
    let limit = highest + 1 + SPARE;
    let free = limit - open as u64;
    limit_descriptors(pid, limit);
    // More clients than free descriptors: the proxy accepts until none is
    // left, the rest wait in the listen queue.
    let mut hogs = Vec::new();
    for _ in 0..free + 16 {
        hogs.push(TcpStream::connect(running.addr).await.expect("connect"));
    }
    running.wait_for("accept failed").await;
    let exhausted = client.get(&origin.url("/private")).await;
    assert_eq!(exhausted.status, 503, "{}", exhausted.body);
    assert_eq!(exhausted.header("retry-after"), Some("1"));
    assert_eq!(origin.hits("/robots.txt"), 0);
    // Free the descriptors, and wait until the proxy has closed them.
    drop(hogs);
    until("the proxy to close the freed descriptors", || async {
        let (open, _) = descriptors(pid);
        if (open as u64) + 16 <= limit {
            Ok(())
        } else {
            Err(format!("it holds {open} descriptors (limit {limit})"))
        }
    })
    .await;
    // The very next request fetches robots.txt and is judged by it.
    let judged = client.get(&origin.url("/private")).await;
    assert_eq!(
        judged.status, 403,
        "the failure was cached as the origin's: {}",
        judged.body
    );
    assert_eq!(origin.hits("/robots.txt"), 1);
    assert_eq!(client.get(&origin.url("/public")).await.status, 200);
    assert_eq!(origin.hits("/robots.txt"), 1);
    // Accepting survived EMFILE: a new client is served.
    let mut fresh = Conn::open(running.addr).await;
    assert_eq!(fresh.get(&origin.url("/public")).await.status, 200);
    // The 503 said why, and the proxy logged it.
    assert!(
        exhausted.body.contains("out of file descriptors")
            && exhausted.body.contains("not the origin's fault"),
        "{}",
        exhausted.body
    );
    running.wait_for("lack of a local resource").await;
}
