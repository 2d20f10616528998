//! A short robots.txt outage is not minutes of "all disallowed": the first
//! retry comes after 30 s (doubling after that, up to
//! `robots.unreachable_retry`) or when the origin's `Retry-After` says, and
//! the 503 tells when.

use std::time::Duration;

use crate::support::{Origin, Proxy, Reply, skip};

#[tokio::test]
async fn the_origins_retry_after_decides_the_next_fetch_and_the_503_says_when() {
    let origin = Origin::with_robots_reply(Reply::status(503).header("retry-after", "1")).await;
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
    // robots.unreachable_retry (5 min). Until then the answer is the
    // cached one; once tokio's clock (the cache's) has moved exactly the
    // Retry-After, the next request fetches again.
    origin.robots("User-agent: *\nDisallow: /private\n");
    assert_eq!(proxy.get(&origin.url("/page")).await.status, 503);
    assert_eq!(origin.hits("/robots.txt"), 1);
    skip(Duration::from_secs(1)).await;
    let recovered = Some(proxy.get(&origin.url("/page")).await.status);
    assert_eq!(recovered, Some(200), "recovered once the origin is back");
    assert_eq!(proxy.get(&origin.url("/private/x")).await.status, 403);
    assert_eq!(origin.hits("/robots.txt"), 2);
}

#[tokio::test]
async fn without_retry_after_the_first_retry_is_30_seconds_away() {
    let origin = Origin::with_robots_reply(Reply::status(500)).await;
    let proxy = Proxy::start().await;
    let down = proxy.get(&origin.url("/page")).await;
    assert_eq!(down.status, 503);
    let retry: u64 = down.parsed("retry-after").expect("Retry-After");
    assert!((29..=30).contains(&retry), "{retry}");
    assert!(down.body.contains("fetched again in 30 s") || down.body.contains("in 29 s"));
}
