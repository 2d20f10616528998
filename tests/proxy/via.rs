//! `Via` is configurable: on by default (RFC 9110 §7.6.3), and off makes a
//! default nginx compress again (its `gzip_proxied off` skips requests that
//! carry `Via`).

use crate::support;
use crate::support::nginx::Nginx;
use crate::support::{Proxy, get_with};

const PAGE: &str = "a page long enough to be worth compressing, repeated. ";

async fn get_gzip(proxy: &Proxy, url: &str) -> support::Resp {
    proxy
        .request(get_with(url, &[("accept-encoding", "gzip")]))
        .await
}

#[tokio::test]
async fn via_on_by_default_and_off_lets_a_default_nginx_compress() {
    let page = PAGE.repeat(40);
    let Some(nginx) = Nginx::start_with(
        &[
            ("/robots.txt", "User-agent: *\nDisallow: /private\n"),
            ("/page.txt", &page),
        ],
        "gzip on; gzip_types text/plain; gzip_min_length 20;",
    ) else {
        return;
    };
    let url = nginx.url("/page.txt");

    let with_via = Proxy::start().await;
    let resp = get_gzip(&with_via, &url).await;
    assert_eq!(resp.status, 200);
    assert!(
        resp.header("via")
            .is_some_and(|v| v.contains("robots-proxy"))
    );
    assert_eq!(
        resp.header("content-encoding"),
        None,
        "nginx skips proxied requests"
    );

    let without = Proxy::start_with(|c| c.via = false).await;
    let resp = get_gzip(&without, &url).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("via"), None);
    assert_eq!(resp.header("content-encoding"), Some("gzip"));
}
