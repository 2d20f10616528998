//! A short robots.txt outage is not minutes of "all disallowed": the first
//! retry comes after 30 s (doubling after that, up to
//! `robots.unreachable_retry`) or when the origin's `Retry-After` says, and
//! the 503 tells when.

mod support;

use std::time::Duration;

use support::{Origin, Proxy, Reply};

#[tokio::test]
async fn the_origins_retry_after_decides_the_next_fetch_and_the_503_says_when() {
    let origin = Origin::start().await;
    origin.route("/robots.txt", Reply::status(503).header("retry-after", "1"));
    let proxy = Proxy::start().await;
    let down = proxy.get(&origin.url("/page")).await;
    assert_eq!(down.status, 503, "{}", down.body);
    assert_eq!(down.header("retry-after"), Some("1"));
    assert!(
        down.body
            .contains("Next try:   robots.txt is fetched again in 1 s"),
        "{}",
        down.body
    );

    // The site is back: within the origin's Retry-After, not after
    // robots.unreachable_retry (5 min).
    origin.robots("User-agent: *\nDisallow: /private\n");
    let mut recovered = None;
    for _ in 0..100 {
        let resp = proxy.get(&origin.url("/page")).await;
        if resp.status != 503 {
            recovered = Some(resp.status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(recovered, Some(200), "recovered once the origin is back");
    assert_eq!(proxy.get(&origin.url("/private/x")).await.status, 403);
    assert_eq!(origin.hits("/robots.txt"), 2);
}

#[tokio::test]
async fn without_retry_after_the_first_retry_is_30_seconds_away() {
    let origin = Origin::start().await;
    origin.route("/robots.txt", Reply::status(500));
    let proxy = Proxy::start().await;
    let down = proxy.get(&origin.url("/page")).await;
    assert_eq!(down.status, 503);
    let retry: u64 = down
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((29..=30).contains(&retry), "{retry}");
    assert!(down.body.contains("fetched again in 30 s") || down.body.contains("in 29 s"));
}
