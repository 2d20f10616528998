//! Enforcement that cannot be bypassed: compressed robots.txt files are
//! decoded (a bomb costs at most the 500 KiB cap), and every connection
//! the proxy makes, robots.txt redirects included, passes the destination
//! policy before it is made.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use robots_proxy::config::Config;

use crate::support::{
    Origin, Proxy, Reply, admin, counting_listener, metric, percent, robots_fetches, status_kib,
};

const ROBOTS: &[u8] = b"User-agent: *\nDisallow: /private\n";

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("compress");
    e.finish().expect("compress")
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("compress");
    e.finish().expect("compress")
}

fn raw_deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("compress");
    e.finish().expect("compress")
}

fn brotli(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let params = brotli::enc::BrotliEncoderParams::default();
    brotli::BrotliCompress(&mut &data[..], &mut out, &params).expect("compress");
    out
}

/// An origin whose robots.txt is `body` with `Content-Encoding: coding`.
async fn origin_with_encoded_robots(coding: &str, body: Vec<u8>) -> Origin {
    Origin::with_robots_reply(Reply::ok(body).header("content-encoding", coding)).await
}

/// A proxy that refuses private destinations but `public` (the test's
/// loopback origins), with `adjust` applied.
async fn policed(public: Vec<SocketAddr>, adjust: impl FnOnce(&mut Config)) -> Proxy {
    Proxy::start_with(|c| {
        c.allow_private_destinations = false;
        c.treat_as_public = public;
        adjust(c);
    })
    .await
}

/// The words of a refusal by the destination policy.
const REFUSED: &str = "refused by destination policy";

// ---------------------------------------------------------------------------
// Content-Encoding
// ---------------------------------------------------------------------------

#[tokio::test]
async fn compressed_robots_txt_files_are_decoded_and_enforced() {
    let proxy = Proxy::start().await;
    for (coding, body) in [
        ("gzip", gzip(ROBOTS)),
        ("x-gzip", gzip(ROBOTS)),
        ("deflate", zlib(ROBOTS)),
        ("deflate", raw_deflate(ROBOTS)),
        ("br", brotli(ROBOTS)),
        // gzip applied first, then br.
        ("gzip, br", brotli(&gzip(ROBOTS))),
        ("identity", ROBOTS.to_vec()),
    ] {
        let origin = origin_with_encoded_robots(coding, body).await;
        let blocked = proxy.get(&origin.url("/private/x")).await;
        blocked.assert_says(coding, 403, &["line 2: Disallow: /private"]);
        assert_eq!(origin.hits("/private/x"), 0, "{coding}");
        assert_eq!(
            proxy.get(&origin.url("/public")).await.status,
            200,
            "{coding}"
        );
        let seen = origin.seen_headers.lock().expect("seen")[0].clone();
        assert_eq!(
            seen.get("accept-encoding").and_then(|v| v.to_str().ok()),
            Some("gzip, br, deflate"),
            "{coding}"
        );
    }
}

#[tokio::test]
async fn an_encoding_that_cannot_be_decoded_makes_robots_txt_unreachable() {
    let proxy = Proxy::start().await;
    let mut corrupt = gzip(ROBOTS);
    let middle = corrupt.len() / 2;
    corrupt[middle..].fill(0xff);
    for (coding, body, says) in [
        (
            "compress",
            ROBOTS.to_vec(),
            "unsupported Content-Encoding \"compress\"",
        ),
        ("gzip", b"not gzip at all".to_vec(), "Content-Encoding gzip"),
        ("gzip", corrupt, "Content-Encoding gzip"),
        ("br", vec![0xff; 64], "Content-Encoding br"),
    ] {
        let origin = origin_with_encoded_robots(coding, body).await;
        let resp = proxy.get(&origin.url("/public")).await;
        resp.assert_says(coding, 503, &[says]);
        assert_eq!(origin.hits("/public"), 0, "{coding}");
    }
}

/// 256 MiB of zeros after a rule, gzipped to about 256 KiB: the decision
/// comes from the first 500 KiB, and decoding costs about that much.
#[tokio::test]
async fn a_gzip_bomb_is_judged_by_its_first_500_kib_within_bounded_memory() {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(ROBOTS).expect("compress");
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..256 {
        e.write_all(&zeros).expect("compress");
    }
    let bomb = e.finish().expect("compress");
    assert!(bomb.len() < 2 << 20, "{}", bomb.len());
    let origin = origin_with_encoded_robots("gzip", bomb).await;
    let proxy = Proxy::start().await;
    let before = status_kib(None, "VmHWM");
    let resp = proxy.get(&origin.url("/private/x")).await;
    let grown_mib = (status_kib(None, "VmHWM") - before) / 1024;
    // Decoding the whole file would take 256 MiB at least.
    assert!(grown_mib < 64, "peak memory grew by {grown_mib} MiB");
    resp.assert_says("the bomb", 403, &["Disallow: /private"]);
    assert_eq!(proxy.get(&origin.url("/public")).await.status, 200);
}

// ---------------------------------------------------------------------------
// Destination policy on every connection
// ---------------------------------------------------------------------------

/// The acceptance test of the issue: robots.txt on an allowed origin
/// redirects to an address the policy refuses; no connection reaches it,
/// the client is told the policy refused it (not what a connect said), in
/// one audit line, and `/explain` says the same.
#[tokio::test]
async fn a_robots_redirect_to_a_refused_address_is_never_connected_to() {
    let mut targets = Vec::new();
    for ip in ["127.0.0.1", "127.0.0.2", "::1"] {
        if let Some((addr, accepts)) = counting_listener(ip).await {
            targets.push((format!("http://{addr}/robots.txt"), accepts));
        }
    }
    assert!(!targets.is_empty(), "no loopback address to listen on");
    // A name is refused on its resolved addresses.
    if let Some((addr, accepts)) = counting_listener("127.0.0.1").await {
        targets.push((
            format!("http://localhost:{}/robots.txt", addr.port()),
            accepts,
        ));
    }
    for (target, accepts) in targets {
        let origin =
            Origin::with_robots_reply(Reply::status(302).header("location", &target)).await;
        let proxy = policed(vec![origin.addr], admin).await;
        let resp = proxy.get(&origin.url("/page")).await;
        resp.assert_says(&target, 403, &[REFUSED, &target]);
        let lower = resp.body.to_lowercase();
        assert!(!lower.contains("connect"), "{target}: {}", resp.body);
        assert_eq!(origin.hits("/robots.txt"), 1, "{target}");
        assert_eq!(origin.hits("/page"), 0, "{target}");
        assert_eq!(accepts.load(Ordering::SeqCst), 0, "{target}");
        let audit = proxy.audit();
        assert_eq!(audit.len(), 1, "{target}: {audit:?}");
        assert_eq!(audit[0]["decision"], "refused", "{target}");
        let j = proxy.explain(&origin.url("/page")).await;
        assert_eq!(j["decision"], "refused", "{j:#}");
        let reason = j["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(REFUSED), "{j:#}");
        assert!(!reason.to_lowercase().contains("connect"), "{j:#}");
        assert_eq!(accepts.load(Ordering::SeqCst), 0, "{target}");
    }
}

/// A robots.txt fetch the destination policy refuses (here its redirect to
/// a loopback address) is no fetch outcome `unreachable` and no cached
/// robots.txt: `/metrics` counts it as `refused` and leaves the cache
/// entries gauge alone. The refusal is still remembered for
/// `robots.unreachable_retry`, so a second request does not fetch again.
#[tokio::test]
async fn a_refused_robots_fetch_is_counted_as_refused_not_as_unreachable_or_cached() {
    let (addr, accepts) = counting_listener("127.0.0.1")
        .await
        .expect("a loopback address to listen on");
    let redirect = Reply::redirect(&format!("http://{addr}/robots.txt"));
    let origin = Origin::with_robots_reply(redirect).await;
    let proxy = policed(vec![origin.addr], admin).await;
    for i in 0..2 {
        let resp = proxy.get(&origin.url("/page")).await;
        resp.assert_says(&format!("request {i}"), 403, &[REFUSED]);
    }
    assert_eq!(origin.hits("/robots.txt"), 1, "the refusal is remembered");
    assert_eq!(accepts.load(Ordering::SeqCst), 0);
    let text = proxy.metrics().await;
    let fetches = |outcome: &str| robots_fetches(&text, outcome, "none");
    assert_eq!(fetches("refused"), Some(1.0), "{text}");
    assert_eq!(fetches("unreachable"), Some(0.0), "{text}");
    assert_eq!(
        metric(&text, "robots_proxy_robots_cache_entries"),
        Some(0.0),
        "{text}"
    );
}

/// The fetch says when it gave up following redirects: a redirect loop is
/// counted `redirect_limit`, and a 3xx without a usable `Location` (no
/// limit reached) is `unavailable` with its 3xx status, not a guess of
/// `redirect_limit` from the status. Both allow everything.
#[tokio::test]
async fn the_redirect_limit_is_counted_only_when_reached() {
    let looping = Origin::start().await;
    looping.route("/robots.txt", Reply::redirect(&looping.url("/robots.txt")));
    let nowhere = Origin::with_robots_reply(Reply::status(302)).await;
    let proxy = Proxy::with_admin().await;
    for origin in [&looping, &nowhere] {
        let resp = proxy.get(&origin.url("/page")).await;
        assert_eq!(resp.status, 200, "{}", resp.body);
    }
    assert!(looping.hits("/robots.txt") > 1);
    assert_eq!(nowhere.hits("/robots.txt"), 1);
    let text = proxy.metrics().await;
    let fetches = |outcome: &str| robots_fetches(&text, outcome, "3xx");
    assert_eq!(fetches("redirect_limit"), Some(1.0), "{text}");
    assert_eq!(fetches("unavailable"), Some(1.0), "{text}");
}

/// The cloud metadata address: refused before any connect is tried, so
/// the answer does not wait for a connect timeout.
#[tokio::test]
async fn a_robots_redirect_to_the_metadata_address_is_refused_at_once() {
    let target = "http://169.254.169.254/latest/meta-data/";
    let origin = Origin::with_robots_reply(Reply::redirect(target)).await;
    let proxy = policed(vec![origin.addr], |c| {
        c.robots.fetch_timeout = Duration::from_secs(60);
        c.upstream.connect_timeout = Duration::from_secs(60);
    })
    .await;
    let resp = tokio::time::timeout(Duration::from_secs(20), proxy.get(&origin.url("/page")))
        .await
        .expect("answered without waiting for a connect");
    resp.assert_says(target, 403, &[REFUSED, "169.254.169.254"]);
    assert_eq!(origin.hits("/page"), 0);
}

/// With private destinations allowed, the proxy still refuses to be its
/// own client: nothing reaches the admin listener (the cached robots.txt
/// is not purged) or the proxy listener.
#[tokio::test]
async fn the_proxys_own_listeners_are_refused_even_when_private_destinations_are_allowed() {
    let origin = Origin::with_robots("User-agent: *\nDisallow:\n").await;
    let proxy = Proxy::start_with(|c| {
        c.allow_private_destinations = true;
        admin(c);
    })
    .await;
    let admin = proxy.admin_addr.expect("admin listener");
    assert_eq!(proxy.get(&origin.url("/a")).await.status, 200);
    assert_eq!(origin.hits("/robots.txt"), 1);
    let purge = format!("/purge?origin={}", percent(&origin.url("/")));
    for url in [
        format!("http://{admin}{purge}"),
        format!("http://localhost:{}{purge}", admin.port()),
        format!("http://{}/x", proxy.addr),
        format!("http://localhost:{}/x", proxy.addr.port()),
    ] {
        let resp = proxy
            .request(
                Request::post(&url)
                    .body(Bytes::from_static(b"x"))
                    .expect("req"),
            )
            .await;
        resp.assert_says(&url, 403, &[REFUSED, "own listener"]);
    }
    // The cached robots.txt is still there: no purge reached the admin.
    assert_eq!(proxy.get(&origin.url("/b")).await.status, 200);
    assert_eq!(origin.hits("/robots.txt"), 1);
}

/// Each hop is checked, not only the first redirect: A → B (both allowed)
/// → a refused address.
#[tokio::test]
async fn every_redirect_hop_passes_the_policy() {
    let (refused, accepts) = counting_listener("127.0.0.1").await.expect("bind");
    let b = Origin::start().await;
    b.route(
        "/moved.txt",
        Reply::redirect(&format!("http://{refused}/robots.txt")),
    );
    let a = Origin::with_robots_reply(Reply::redirect(&b.url("/moved.txt"))).await;
    let proxy = policed(vec![a.addr, b.addr], |_| {}).await;
    let resp = proxy.get(&a.url("/page")).await;
    resp.assert_says("A → B → refused", 403, &[REFUSED, &refused.to_string()]);
    assert_eq!(b.hits("/moved.txt"), 1);
    assert_eq!(accepts.load(Ordering::SeqCst), 0);
    assert_eq!(a.hits("/page"), 0);
}

/// A purge while the origin's robots.txt is being fetched: the fetch under
/// way may have read the file the purge is for, so its entry is not kept
/// (the requests waiting for it are judged by it) and the next request
/// fetches again.
#[tokio::test]
async fn a_purge_during_a_fetch_keeps_nothing_of_that_fetch() {
    // The first fetch: the old file, held until released.
    let origin = crate::support::HeldRobots::start(
        "User-agent: *\nDisallow: /a\n",
        "User-agent: *\nDisallow:\n",
    )
    .await;
    let (addr, arrived) = (origin.addr, origin.arrived.clone());
    let proxy = Proxy::start_with(admin).await;
    let url = format!("http://{addr}/a");
    let first = tokio::spawn({
        let (proxy_addr, url) = (proxy.addr, url.clone());
        async move { crate::support::Conn::open(proxy_addr).await.get(&url).await }
    });
    tokio::time::timeout(Duration::from_secs(10), arrived.notified())
        .await
        .expect("robots.txt fetch started");
    let purge = format!("/purge?origin={}", percent(&format!("http://{addr}/")));
    assert_eq!(proxy.admin_post(&purge).await.status, 200);
    origin.release();
    // The request that waited for the fetch is judged by what it read.
    assert_eq!(first.await.expect("first").status, 403);
    // Nothing of it was kept: fetched again, the new file applies.
    assert_eq!(proxy.get(&url).await.status, 200);
    assert_eq!(origin.fetches(), 2);
}
