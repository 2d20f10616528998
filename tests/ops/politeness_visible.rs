//! Politeness you can see: a held request says how long it was held (a
//! response header, a histogram and a gauge in /metrics, the origin's slot
//! in /explain), and a client that gives up while held gives its slot back.

use std::time::Duration;

use bytes::Bytes;
use http::Request;

use crate::support::events::Events;
use crate::support::{Conn, Origin, Proxy, admin, metric};

async fn proxy_with_admin(max_wait: Duration) -> Proxy {
    Proxy::start_with(move |c| {
        admin(c);
        c.politeness.max_wait = max_wait;
    })
    .await
}

#[tokio::test]
async fn a_held_request_carries_its_delay_and_is_measured() {
    let origin = Origin::start().await;
    // Long enough that the second request comes within it even on a slow,
    // busy machine.
    origin.robots("User-agent: *\nCrawl-delay: 1\nDisallow: /private\n");
    let proxy = proxy_with_admin(Duration::from_secs(30)).await;
    let first = proxy.get(&origin.url("/a")).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.header("x-robots-proxy-delay"), None, "not held");
    let second = proxy.get(&origin.url("/b")).await;
    assert_eq!(second.status, 200);
    let held: f64 = second
        .header("x-robots-proxy-delay")
        .and_then(|v| v.parse().ok())
        .expect("delay header");
    assert!(held > 0.0 && held <= 1.0, "{held}");
    let text = proxy.metrics().await;
    assert_eq!(
        metric(&text, "robots_proxy_politeness_hold_seconds_count"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(metric(&text, "robots_proxy_politeness_waiting"), Some(0.0));
    let j = proxy.explain(&origin.url("/c")).await;
    assert_eq!(j["politeness"]["interval_secs"], 1.0, "{j:#}");
}

#[tokio::test]
async fn a_client_that_gives_up_while_held_gives_its_slot_back() {
    let mut events = Events::capture();
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 20\n").await;
    let proxy = proxy_with_admin(Duration::from_secs(60)).await;
    assert_eq!(proxy.get(&origin.url("/first")).await.status, 200);

    // The second request is held for about 20 s; its client leaves.
    let addr = proxy.addr;
    let url = origin.url("/second");
    let client = tokio::spawn(async move {
        let mut conn = Conn::open(addr).await;
        conn.send(Request::get(url).body(Bytes::new()).expect("req"))
            .await
    });
    // Requests held now (the metric), and when the next slot is free.
    let held = async |n: f64, why: &str| {
        proxy
            .assert_metric("robots_proxy_politeness_waiting", n, why)
            .await;
        let explained = proxy.explain(&origin.url("/x")).await;
        explained["politeness"]["next_slot_in_secs"]
            .as_f64()
            .expect("next slot")
    };
    events.next("held for a Crawl-delay slot").await;
    let booked = held(1.0, "the second request is held").await;
    assert!(booked > 20.0, "two slots booked: {booked}");
    client.abort();
    events.next("Crawl-delay slot given back").await;
    let next = held(0.0, "the held request ended with its client").await;
    assert!(next <= 20.0, "the slot was given back: next in {next} s");
    assert_eq!(origin.hits("/second"), 0);
}
