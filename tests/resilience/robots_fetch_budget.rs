//! Many concurrent first requests to origins with large robots.txt files:
//! the bytes of fetches in flight stay within `robots.fetch_budget_mib`
//! (as reserved, the proxy's own account, exposed in `/metrics`); the
//! fetches over it wait their turn instead of failing.

use crate::support;
use crate::support::{NO_HANG, Origin, Proxy, admin, metric};

/// A robots.txt of about `kib` KiB: allow all, then comment lines.
fn large_robots(kib: usize) -> String {
    let mut text = String::from("User-agent: *\nAllow: /\n");
    while text.len() < kib * 1024 {
        text.push_str("# ");
        text.push_str(&"x".repeat(98));
        text.push('\n');
    }
    text
}

#[tokio::test]
async fn fetches_in_flight_stay_within_the_budget_and_all_complete() {
    const ORIGINS: usize = 16;
    let robots = large_robots(400);
    let mut origins = Vec::new();
    for _ in 0..ORIGINS {
        let origin = Origin::with_robots(&robots).await;
        origins.push(origin);
    }
    let proxy = Proxy::start_with(|c| {
        admin(c);
        c.robots.fetch_budget_mib = 2;
        // Waiting for the budget is not the origin's time.
        c.robots.fetch_timeout = std::time::Duration::from_secs(30);
    })
    .await;
    let mut all = tokio::task::JoinSet::new();
    for origin in &origins {
        let url = origin.url("/page");
        let addr = proxy.addr;
        all.spawn(async move { support::Conn::open(addr).await.get(&url).await.status });
    }
    let statuses = tokio::time::timeout(NO_HANG, all.join_all())
        .await
        .expect("every request answered");
    assert_eq!(statuses, vec![200; ORIGINS]);
    for origin in &origins {
        assert_eq!(origin.hits("/robots.txt"), 1);
    }
    let text = proxy.metrics().await;
    let peak = metric(
        &text,
        r#"robots_proxy_robots_fetch_budget_kib{state="peak"}"#,
    )
    .expect("peak gauge");
    let in_use = metric(
        &text,
        r#"robots_proxy_robots_fetch_budget_kib{state="in_use"}"#,
    )
    .expect("in-use gauge");
    // One 400 KiB file reserves about 1,200 KiB (the body, its parsed and
    // compiled rules): one at a time in 2 MiB.
    assert!(peak >= 1000.0, "peak {peak} KiB");
    assert!(peak <= 2048.0, "peak {peak} KiB over the 2 MiB budget");
    assert_eq!(in_use, 0.0);
}
