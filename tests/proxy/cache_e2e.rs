//! The response cache in the proxy, over real sockets: a counting origin
//! behind the proxy with `cache.enabled`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use robots_proxy::config::{CacheMode, Config};

use crate::support;
use crate::support::tls::{proxy_trusting_with, tls_origin_with_robots};
use crate::support::{Origin, Proxy, Reply, admin, get_with, metric};

fn enable(c: &mut Config, mode: CacheMode) {
    c.cache.enabled = true;
    c.cache.mode = mode;
    admin(c);
    c.audit.log_all = true;
}

async fn cached_proxy() -> Proxy {
    Proxy::start_with(|c| enable(c, CacheMode::Rfc9111)).await
}

fn cache_status(r: &support::Resp) -> &str {
    r.headers
        .get("cache-status")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

#[tokio::test]
async fn fresh_responses_are_served_from_the_cache_and_unstorable_ones_are_not() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    origin.route(
        "/fresh",
        Reply::ok("fresh").header("cache-control", "max-age=60"),
    );
    origin.route(
        "/nostore",
        Reply::ok("n").header("cache-control", "no-store"),
    );
    origin.route(
        "/private",
        Reply::ok("p").header("cache-control", "private, max-age=60"),
    );
    origin.route(
        "/cookie",
        Reply::ok("c")
            .header("cache-control", "max-age=60")
            .header("set-cookie", "id=1"),
    );
    let proxy = cached_proxy().await;
    for i in 0..3 {
        let r = proxy.get(&origin.url("/fresh")).await;
        assert_eq!((r.status, r.body.as_str()), (200, "fresh"));
        if i == 0 {
            assert_eq!(
                cache_status(&r),
                "robots-proxy; fwd=uri-miss; fwd-status=200; stored"
            );
        } else {
            assert_eq!(cache_status(&r), "robots-proxy; hit");
            assert!(r.headers.contains_key("age"));
        }
        // One Via, this proxy's, on a hit as on a miss.
        let via: Vec<_> = r.headers.get_all("via").iter().collect();
        assert_eq!(via.len(), 1, "{r:?}");
        assert!(via[0].to_str().is_ok_and(|v| v.contains("robots-proxy")));
    }
    assert_eq!(origin.hits("/fresh"), 1);
    for path in ["/nostore", "/private", "/cookie"] {
        for _ in 0..3 {
            let r = proxy.get(&origin.url(path)).await;
            assert_eq!(r.status, 200);
            assert_eq!(
                cache_status(&r),
                "robots-proxy; fwd=uri-miss; fwd-status=200"
            );
        }
        assert_eq!(origin.hits(path), 3, "{path}");
    }
    // The audit lines say what the cache did.
    let audit = proxy.audit();
    let fresh: Vec<&str> = audit
        .iter()
        .filter(|l| l["url"].as_str().is_some_and(|u| u.ends_with("/fresh")))
        .filter_map(|l| l["cache"].as_str())
        .collect();
    assert_eq!(fresh, ["miss", "hit", "hit"]);
    // And /metrics counts it.
    let m = proxy.metrics().await;
    assert_eq!(
        metric(&m, "robots_proxy_response_cache_hits_total"),
        Some(2.0)
    );
    assert_eq!(
        metric(&m, "robots_proxy_response_cache_stored_total"),
        Some(1.0)
    );
    assert_eq!(
        metric(&m, "robots_proxy_response_cache_objects{tier=\"disk\"}"),
        Some(1.0)
    );
    // A hit is a request allowed like any.
    assert_eq!(
        metric(&m, "robots_proxy_requests_total{decision=\"allowed\"}"),
        Some(12.0)
    );
}

#[tokio::test]
async fn vary_keys_variants_and_a_304_refreshes_the_stored_response() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    origin.route(
        "/vary",
        Reply::ok("varied")
            .header("cache-control", "max-age=60")
            .header("vary", "Accept-Language"),
    );
    origin.route(
        "/etag",
        Reply::ok("validated body")
            .header("cache-control", "no-cache")
            .header("etag", "\"v1\""),
    );
    let proxy = cached_proxy().await;
    let get_lang =
        |lang: &'static str| get_with(&origin.url("/vary"), &[("accept-language", lang)]);
    proxy.request(get_lang("fr")).await;
    let r = proxy.request(get_lang("en")).await;
    assert_eq!(
        cache_status(&r),
        "robots-proxy; fwd=vary-miss; fwd-status=200; stored"
    );
    assert_eq!(
        cache_status(&proxy.request(get_lang("fr")).await),
        "robots-proxy; hit"
    );
    assert_eq!(
        cache_status(&proxy.request(get_lang("en")).await),
        "robots-proxy; hit"
    );
    assert_eq!(origin.hits("/vary"), 2);

    let first = proxy.get(&origin.url("/etag")).await;
    assert_eq!(first.body, "validated body");
    origin.route(
        "/etag",
        Reply::status(304)
            .header("etag", "\"v1\"")
            .header("cache-control", "no-cache")
            .header("x-refreshed", "yes"),
    );
    let r = proxy.get(&origin.url("/etag")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, "validated body");
    assert_eq!(cache_status(&r), "robots-proxy; fwd=stale; fwd-status=304");
    assert_eq!(r.headers["x-refreshed"], "yes");
    assert_eq!(origin.hits("/etag"), 2);
    let seen = origin.seen_headers.lock().expect("seen").clone();
    let last = seen.last().expect("a request");
    assert_eq!(last["if-none-match"], "\"v1\"");
}

/// A stored response that must be revalidated on every request.
fn validated(body: &'static str, etag: &str) -> Reply {
    Reply::ok(body)
        .header("cache-control", "no-cache")
        .header("etag", etag)
        .header("content-type", "text/plain")
}

#[tokio::test]
async fn a_304s_cookie_is_its_clients_only_and_its_content_type_is_stored() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    origin.route("/r", validated("shared body", "\"v1\""));
    let proxy = cached_proxy().await;
    assert_eq!(proxy.get(&origin.url("/r")).await.body, "shared body");
    // Client A's revalidation: the origin sets A's cookie, a new
    // Content-Type and makes the response fresh.
    origin.route(
        "/r",
        Reply::status(304)
            .header("etag", "\"v1\"")
            .header("cache-control", "max-age=60")
            .header("content-type", "text/html")
            .header("set-cookie", "session=client-a"),
    );
    let a = proxy.get(&origin.url("/r")).await;
    assert_eq!((a.status, a.body.as_str()), (200, "shared body"));
    assert_eq!(cache_status(&a), "robots-proxy; fwd=stale; fwd-status=304");
    assert_eq!(a.header("set-cookie"), Some("session=client-a"));
    assert_eq!(a.header("content-type"), Some("text/html"));
    // Client B: a hit, without A's cookie, with the updated Content-Type.
    let b = proxy.get(&origin.url("/r")).await;
    assert_eq!((b.status, b.body.as_str()), (200, "shared body"));
    assert_eq!(cache_status(&b), "robots-proxy; hit");
    assert_eq!(b.header("set-cookie"), None, "{b:?}");
    assert_eq!(b.header("content-type"), Some("text/html"));
    assert_eq!(origin.hits("/r"), 2);
}

#[tokio::test]
async fn a_private_or_no_store_304_answers_its_client_and_drops_the_stored_response() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let proxy = cached_proxy().await;
    for (path, cc) in [
        ("/private", "private, max-age=60"),
        ("/nostore", "no-store"),
    ] {
        origin.route(path, validated("was shared", "\"v1\""));
        proxy.get(&origin.url(path)).await;
        origin.route(
            path,
            Reply::status(304)
                .header("etag", "\"v1\"")
                .header("cache-control", cc),
        );
        let r = proxy.get(&origin.url(path)).await;
        assert_eq!((r.status, r.body.as_str()), (200, "was shared"), "{path}");
        assert_eq!(r.header("cache-control"), Some(cc));
        // Nothing stored any more: the next request is a plain miss.
        origin.route(path, Reply::ok("new").header("cache-control", cc));
        let r = proxy.get(&origin.url(path)).await;
        assert_eq!(r.body, "new");
        assert_eq!(
            cache_status(&r),
            "robots-proxy; fwd=uri-miss; fwd-status=200",
            "{path}"
        );
        assert_eq!(origin.hits(path), 3);
    }
}

#[tokio::test]
async fn a_304_that_selects_nothing_stored_is_refetched_whole() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let proxy = cached_proxy().await;
    // A strong ETag that differs, a weak one that does not match: the
    // origin's 304 names a representation the cache does not have.
    for (path, other) in [("/strong", "\"v2\""), ("/weak", "W/\"v2\"")] {
        origin.route(path, validated("version one", "\"v1\""));
        proxy.get(&origin.url(path)).await;
        origin.route(
            path,
            validated("version two", other).if_none_match(Reply::status(304).header("etag", other)),
        );
        for _ in 0..2 {
            let r = proxy.get(&origin.url(path)).await;
            assert_eq!((r.status, r.body.as_str()), (200, "version two"), "{path}");
        }
        let seen = origin.seen_headers.lock().expect("seen").clone();
        // 1 store, then per GET: the revalidation and the unconditional
        // refetch (the first stores version two, which the second
        // revalidates: its 304 now selects it).
        let conditional: Vec<bool> = seen[seen.len() - 3..]
            .iter()
            .map(|h| h.contains_key("if-none-match"))
            .collect();
        assert_eq!(conditional, [true, false, true], "{path}");
        assert_eq!(origin.hits(path), 4, "{path}");
    }
    // A client's own conditional that the 304 answers gets the 304.
    origin.route("/own", validated("version one", "\"v1\""));
    proxy.get(&origin.url("/own")).await;
    origin.route(
        "/own",
        validated("version two", "\"v2\"")
            .if_none_match(Reply::status(304).header("etag", "\"v2\"")),
    );
    let r = proxy
        .request(get_with(
            &origin.url("/own"),
            &[("if-none-match", "\"v2\"")],
        ))
        .await;
    assert_eq!((r.status, r.body.as_str()), (304, ""));
    assert_eq!(origin.hits("/own"), 2);
}

#[tokio::test]
async fn variants_per_url_and_objects_are_capped_and_disk_is_counted_in_blocks() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    origin.route(
        "/ua",
        Reply::ok("per agent")
            .header("cache-control", "max-age=600")
            .header("vary", "User-Agent"),
    );
    let proxy = Proxy::start_with(|c| {
        enable(c, CacheMode::Rfc9111);
        c.cache.max_variants = 4;
        c.cache.max_objects = 6;
    })
    .await;
    let objects = |m: &str| metric(m, "robots_proxy_response_cache_objects{tier=\"disk\"}");
    for i in 0..6 {
        let ua = format!("scraper-{i}/1.0");
        let r = proxy
            .request(get_with(&origin.url("/ua"), &[("user-agent", ua.as_str())]))
            .await;
        assert!(cache_status(&r).ends_with("stored"), "{r:?}");
    }
    let m = proxy.metrics().await;
    assert_eq!(objects(&m), Some(4.0), "at most 4 variants of one URL");
    for i in 0..5 {
        let path = format!("/page/{i}");
        origin.route(
            &path,
            Reply::ok("page").header("cache-control", "max-age=600"),
        );
        proxy.get(&origin.url(&path)).await;
    }
    let m = proxy.metrics().await;
    assert_eq!(objects(&m), Some(6.0), "at most 6 objects");
    // Two files of one 4 KiB block each per small object.
    assert_eq!(
        metric(&m, "robots_proxy_response_cache_bytes{tier=\"disk\"}"),
        Some(6.0 * 8192.0)
    );
    // The newest are the ones kept.
    let r = proxy.get(&origin.url("/page/4")).await;
    assert_eq!(cache_status(&r), "robots-proxy; hit");
}

#[tokio::test]
async fn a_post_invalidates_and_robots_txt_is_applied_before_the_cache() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    origin.route(
        "/item",
        Reply::ok("item").header("cache-control", "max-age=60"),
    );
    let proxy = cached_proxy().await;
    proxy.get(&origin.url("/item")).await;
    proxy.get(&origin.url("/item")).await;
    assert_eq!(origin.hits("/item"), 1);
    let post = Request::post(origin.url("/item"))
        .body(Bytes::from_static(b"change"))
        .expect("req");
    let r = proxy.request(post).await;
    assert_eq!(cache_status(&r), "robots-proxy; fwd=bypass");
    assert_eq!(origin.hits("/item"), 2);
    let r = proxy.get(&origin.url("/item")).await;
    assert!(
        cache_status(&r).starts_with("robots-proxy; fwd=uri-miss"),
        "{r:?}"
    );
    assert_eq!(origin.hits("/item"), 3);
    assert_eq!(
        cache_status(&proxy.get(&origin.url("/item")).await),
        "robots-proxy; hit"
    );

    // robots.txt now disallows the cached page: 403, not the stored copy.
    origin.robots("User-agent: *\nDisallow: /item\n");
    let purge = format!("/purge?origin={}", origin.url("/"));
    assert_eq!(proxy.admin_post(&purge).await.status, 200);
    let r = proxy.get(&origin.url("/item")).await;
    assert_eq!(r.status, 403);
    assert!(r.headers.get("cache-status").is_none());
    assert_eq!(origin.hits("/item"), 3);
}

/// RFC 9111 §4.4: the Location of a successful POST is resolved against
/// its target as RFC 3986 §5.2 says (`?page=2` keeps the path, `../x`
/// drops a segment) and the page cached there is invalidated.
#[tokio::test]
async fn a_posts_relative_location_invalidates_the_page_it_resolves_to() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let fresh = |body: &'static str| Reply::ok(body).header("cache-control", "max-age=60");
    // POST /list?page=1 -> 303 to /list?page=2.
    origin.route("/list?page=2", fresh("page two"));
    origin.route(
        "/list?page=1",
        Reply::status(303).header("location", "?page=2"),
    );
    // POST /a/b/form -> 201 at /a/x.
    origin.route("/a/x", fresh("x"));
    origin.route("/a/b/form", Reply::status(201).header("location", "../x"));
    let proxy = cached_proxy().await;
    for (post_to, cached) in [("/list?page=1", "/list?page=2"), ("/a/b/form", "/a/x")] {
        proxy.get(&origin.url(cached)).await;
        let r = proxy.get(&origin.url(cached)).await;
        assert_eq!(cache_status(&r), "robots-proxy; hit", "{cached}");
        assert_eq!(origin.hits(cached), 1, "{cached}");
        let post = Request::post(origin.url(post_to))
            .body(Bytes::from_static(b"change"))
            .expect("req");
        let r = proxy.request(post).await;
        assert_eq!(cache_status(&r), "robots-proxy; fwd=bypass", "{post_to}");
        assert_eq!(origin.hits(post_to), 1, "{post_to}");
        let r = proxy.get(&origin.url(cached)).await;
        assert!(
            cache_status(&r).starts_with("robots-proxy; fwd=uri-miss"),
            "{cached}: {r:?}"
        );
        assert_eq!(origin.hits(cached), 2, "{cached}");
    }
}

#[tokio::test]
async fn admin_purges_by_url_and_prefix_and_explain_shows_the_stored_response() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    for p in ["/a/1", "/a/2", "/b"] {
        origin.route(p, Reply::ok("x").header("cache-control", "max-age=60"));
    }
    let proxy = cached_proxy().await;
    for p in ["/a/1", "/a/2", "/b"] {
        proxy.get(&origin.url(p)).await;
    }
    let v = proxy.explain(&origin.url("/b")).await;
    assert_eq!(v["response_cache"]["stored"][0]["status"], 200, "{v}");
    assert_eq!(v["response_cache"]["stored"][0]["fresh"], true, "{v}");
    let r = proxy
        .admin_post(&format!("/purge?prefix={}", origin.url("/a/")))
        .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["purged"], 2, "{v}");
    let r = proxy
        .admin_post(&format!("/purge?url={}", origin.url("/b")))
        .await;
    let v = r.json();
    assert_eq!(v["purged"], 1, "{v}");
    for p in ["/a/1", "/a/2", "/b"] {
        proxy.get(&origin.url(p)).await;
        assert_eq!(origin.hits(p), 2, "{p}");
    }
}

/// Every file under the proxy's `cache/objects/`.
fn cache_files(proxy: &Proxy) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![proxy.state_dir.join("cache/objects")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("cache dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[tokio::test]
async fn a_graceful_stop_finishes_deleting_what_a_purge_removed() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    const MANY: usize = 300;
    let paths: Vec<String> = (0..MANY).map(|i| format!("/many/{i}")).collect();
    for p in paths.iter().map(String::as_str).chain(["/keep"]) {
        origin.route(p, Reply::ok("x").header("cache-control", "max-age=600"));
    }
    let mut proxy = cached_proxy().await;
    for p in paths.iter().map(String::as_str).chain(["/keep"]) {
        assert_eq!(proxy.get(&origin.url(p)).await.status, 200);
    }
    assert_eq!(cache_files(&proxy).len(), 2 * (MANY + 1));
    let r = proxy
        .admin_post(&format!("/purge?prefix={}", origin.url("/many/")))
        .await;
    assert_eq!(r.json()["purged"], MANY, "{:?}", r.body);
    let hit = proxy.get(&origin.url("/keep")).await;
    assert_eq!(cache_status(&hit), "robots-proxy; hit");
    proxy.stop();
    proxy.finished().await;
    // Only the kept response's meta and body are left, and no purge is
    // left to apply at the next start.
    assert_eq!(cache_files(&proxy).len(), 2, "{:?}", cache_files(&proxy));
    let purges = std::fs::read(proxy.state_dir.join("cache/purges")).expect("purges file");
    assert!(purges.is_empty(), "{}", String::from_utf8_lossy(&purges));
}

#[tokio::test]
async fn https_is_cached_under_its_https_url() {
    let o = tls_origin_with_robots("127.0.0.1", "User-agent: *\nAllow: /\n").await;
    o.origin.route(
        "/s",
        Reply::ok("secret-ish").header("cache-control", "max-age=60"),
    );
    let proxy = proxy_trusting_with(&o, |c| {
        enable(c, CacheMode::Rfc9111);
    })
    .await;
    let port = o.origin.addr.port();
    let first = o.get_via(&proxy, "127.0.0.1", "/s", false).await;
    let second = o.get_via(&proxy, "127.0.0.1", "/s", true).await;
    assert_eq!(second.body, "secret-ish");
    assert!(cache_status(&first).contains("stored"));
    assert_eq!(cache_status(&second), "robots-proxy; hit");
    assert_eq!(o.origin.hits("/s"), 1);
    let url = format!("https://127.0.0.1:{port}/s");
    let v = proxy.explain(&url).await;
    assert_eq!(v["response_cache"]["url"], url);
    assert_eq!(
        v["response_cache"]["stored"].as_array().map(Vec::len),
        Some(1)
    );
}

#[tokio::test]
async fn only_if_cached_is_a_504_on_a_miss() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let proxy = cached_proxy().await;
    let req = Request::get(origin.url("/never"))
        .header("cache-control", "only-if-cached")
        .body(Bytes::new())
        .expect("req");
    let r = proxy.request(req).await;
    assert_eq!(r.status, 504);
    assert!(r.body.contains("not in the cache"), "{}", r.body);
    assert_eq!(origin.hits("/never"), 0);
}

#[tokio::test]
async fn a_hit_takes_no_crawl_delay_slot() {
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 3\nAllow: /\n").await;
    origin.route(
        "/p",
        Reply::ok("polite").header("cache-control", "max-age=60"),
    );
    let proxy = cached_proxy().await;
    proxy.get(&origin.url("/p")).await;
    let started = Instant::now();
    for _ in 0..3 {
        let r = proxy.get(&origin.url("/p")).await;
        assert_eq!(cache_status(&r), "robots-proxy; hit");
        assert!(r.headers.get("x-robots-proxy-delay").is_none());
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(origin.hits("/p"), 1);
}

#[tokio::test]
async fn store_all_then_offline_replays_what_was_recorded() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    origin.route(
        "/rec",
        Reply::ok("recorded")
            .header("cache-control", "no-store")
            .header("set-cookie", "s=1"),
    );
    let state = tempfile::tempdir().expect("tmp");
    let dir = state.path().to_path_buf();
    let mut recorder = Proxy::start_with({
        let dir = dir.clone();
        move |c| {
            enable(c, CacheMode::StoreAll);
            c.state_dir = Some(dir);
        }
    })
    .await;
    proxy_twice(&recorder, &origin.url("/rec")).await;
    assert_eq!(origin.hits("/rec"), 1);
    recorder.stop();
    let _ = (&mut recorder.done).await;

    let offline = Proxy::start_with(move |c| {
        enable(c, CacheMode::Offline);
        c.state_dir = Some(dir);
    })
    .await;
    let r = offline.get(&origin.url("/rec")).await;
    assert_eq!((r.status, r.body.as_str()), (200, "recorded"));
    assert_eq!(cache_status(&r), "robots-proxy; hit; detail=offline");
    let r = offline.get(&origin.url("/other")).await;
    assert_eq!(r.status, 504);
    assert!(r.body.contains("offline mode"), "{}", r.body);
    assert_eq!(origin.hits("/rec"), 1);
    assert_eq!(origin.hits("/other"), 0);
}

async fn proxy_twice(proxy: &Proxy, url: &str) {
    let first = proxy.get(url).await;
    assert!(cache_status(&first).ends_with("stored"), "{first:?}");
    let second = proxy.get(url).await;
    assert_eq!(cache_status(&second), "robots-proxy; hit");
    assert_eq!(second.headers["set-cookie"], "s=1");
}

#[tokio::test]
async fn a_response_over_max_object_size_arrives_whole_and_is_not_stored() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let big = "b".repeat(200_000);
    origin.route(
        "/big",
        Reply::ok(big.clone()).header("cache-control", "max-age=60"),
    );
    let proxy = Proxy::start_with(|c| {
        enable(c, CacheMode::Rfc9111);
        c.cache.max_object_size = 64 * 1024;
    })
    .await;
    for _ in 0..2 {
        let r = proxy.get(&origin.url("/big")).await;
        assert_eq!(r.body.len(), big.len());
        assert_eq!(
            cache_status(&r),
            "robots-proxy; fwd=uri-miss; fwd-status=200"
        );
    }
    assert_eq!(origin.hits("/big"), 2);
}
