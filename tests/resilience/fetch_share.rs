//! One client cannot take the whole robots.txt fetch budget: origins that
//! trickle their robots.txt a byte a second hold their client's share
//! (`robots.fetch_budget_mib`), and another client's first request to an
//! unrelated origin has its robots.txt fetched at once.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Conn, Origin, Proxy, admin, metric, serve_tcp};

/// An origin that answers `/robots.txt` with a 200 and then one byte of
/// its body a second, never ending it (until the fetch gives up).
async fn trickling() -> SocketAddr {
    serve_tcp(|mut stream| async move {
        let mut buf = [0u8; 4096];
        let _ = stream.read(&mut buf).await;
        let head =
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n";
        if stream.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let mut every = tokio::time::interval(Duration::from_secs(1));
        loop {
            every.tick().await;
            if stream.write_all(b"1\r\n#\r\n").await.is_err() {
                return;
            }
        }
    })
    .await
}

/// A connection to the proxy from the loopback address `from`.
async fn conn_from(from: IpAddr, proxy: SocketAddr) -> Conn {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::new(from, 0)).expect("bind");
    Conn::over(socket.connect(proxy).await.expect("connect")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_that_trickle_robots_txt_do_not_hold_up_another_clients_first_fetch() {
    let proxy = Proxy::start_with(|c| {
        admin(c);
        // 16 MiB: a trickling fetch reserves ~1.5 MiB, ten fill it.
        c.robots.fetch_budget_mib = 16;
        c.robots.fetch_timeout = Duration::from_secs(60);
    })
    .await;
    let hog: IpAddr = "127.0.0.2".parse().expect("ip");
    let mut held = Vec::new();
    for _ in 0..30 {
        let addr = trickling().await;
        let proxy = proxy.addr;
        held.push(tokio::spawn(async move {
            conn_from(hog, proxy)
                .await
                .get(&format!("http://{addr}/page"))
                .await
        }));
    }
    // The hog's fetches have taken what they may of the budget.
    let in_use = r#"robots_proxy_robots_fetch_budget_kib{state="in_use"}"#;
    proxy
        .until_metrics("the trickling fetches to hold the budget", |t| {
            metric(t, in_use).unwrap_or(0.0) >= 3000.0
        })
        .await;
    // Another client's first request: its robots.txt fetched at once.
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let other: IpAddr = "127.0.0.1".parse().expect("ip");
    let answered = tokio::time::timeout(Duration::from_secs(5), async {
        conn_from(other, proxy.addr)
            .await
            .get(&origin.url("/first"))
            .await
    })
    .await;
    let text = proxy.metrics().await;
    let resp = answered.unwrap_or_else(|_| {
        panic!(
            "another client's first request waited more than 5 s ({in_use} {:?})",
            metric(&text, in_use)
        )
    });
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert!(
        metric(&text, in_use).unwrap_or(0.0) <= 16.0 * 1024.0 * 0.25 + 1600.0,
        "the hog holds at most its share and the other's fetch"
    );
    for h in held {
        h.abort();
    }
}
