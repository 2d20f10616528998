//! Policy and storage rules with real `Response` values; the origin is a
//! closure here (tests/collapsed.rs, beside this file, has real sockets).

use std::path::Path;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;

use super::*;
use crate::http::body::full_body;

mod collapsed;
mod janitor;

fn config(mode: CacheMode) -> CacheSettings {
    CacheSettings {
        mode,
        memory_size: 1 << 20,
        disk_size: 64 << 20,
        max_object_size: 8 << 20,
        store_all_ttl: Duration::from_secs(3600),
        lock_timeout: Duration::from_secs(5),
        max_objects: 100_000,
        max_variants: 32,
    }
}

fn open(dir: &Path, cfg: &CacheSettings) -> ResponseCache {
    ResponseCache::open(cfg, &dir.join("cache")).expect("open cache")
}

fn req(method: Method, url: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    let mut b = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).expect("request").into_parts().0
}

fn get(url: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    req(Method::GET, url, headers)
}

fn resp(status: u16, headers: &[(&str, &str)], body: &'static str) -> Response<Body> {
    let mut b = Response::builder().status(status);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b = b.header("content-length", body.len());
    b.body(full_body(Bytes::from_static(body.as_bytes())))
        .expect("response")
}

async fn read(resp: Response<Body>) -> (http::response::Parts, Bytes) {
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    (parts, bytes)
}

fn status_of(parts: &http::response::Parts) -> String {
    parts
        .headers
        .get("cache-status")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// One request through the cache; `origin` answers misses and sees the
/// forwarded headers. Returns the answer, its body and whether the origin
/// was asked.
async fn fetch(
    cache: &ResponseCache,
    r: &http::request::Parts,
    user: Option<&str>,
    mut origin: impl FnMut(&HeaderMap) -> Response<Body>,
) -> (http::response::Parts, Bytes, bool) {
    match cache.lookup(r, user).await {
        Lookup::Hit(resp) | Lookup::Unavailable(resp) => {
            let (p, b) = read(resp).await;
            (p, b, false)
        }
        Lookup::Miss(p) | Lookup::Revalidate(p) => {
            let mut headers = r.headers.clone();
            p.add_conditional_headers(&mut headers);
            let upstream = origin(&headers);
            let resp = match cache.complete(p, upstream).await {
                Completed::Response(r) => r,
                Completed::Refetch(p, _) => {
                    p.remove_conditional_headers(&mut headers);
                    let upstream = origin(&headers);
                    cache
                        .complete(*p, upstream)
                        .await
                        .into_response()
                        .expect("a refetch is completed")
                }
            };
            let (parts, body) = read(resp).await;
            (parts, body, true)
        }
        Lookup::Bypass => panic!("bypassed"),
    }
}

fn never(_: &HeaderMap) -> Response<Body> {
    panic!("the origin was asked")
}

const URL: &str = "http://example.test/page";

#[tokio::test]
async fn max_age_is_fresh_three_gets_one_origin_request() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let mut asked = 0;
    for i in 0..3 {
        let (p, body, origin) = fetch(&cache, &get(URL, &[]), None, |_| {
            resp(200, &[("cache-control", "max-age=60")], "hello")
        })
        .await;
        asked += usize::from(origin);
        assert_eq!(body, "hello");
        if i == 0 {
            assert_eq!(
                status_of(&p),
                "robots-proxy; fwd=uri-miss; fwd-status=200; stored"
            );
        } else {
            assert_eq!(status_of(&p), "robots-proxy; hit");
            assert_eq!(p.headers["age"], "0");
            assert_eq!(p.headers["content-length"], "5");
        }
    }
    assert_eq!(asked, 1);
    let c = cache.counters();
    assert_eq!((c.hits, c.misses, c.stored), (2, 1, 1));
    assert_eq!(c.memory_objects, 1);
    assert_eq!(c.disk_objects, 1);
}

#[tokio::test]
async fn age_grows_and_a_stale_response_is_revalidated_with_its_etag() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let headers = [("cache-control", "max-age=60"), ("etag", "\"v1\"")];
    fetch(&cache, &get(URL, &[]), None, |_| {
        resp(200, &headers, "body1")
    })
    .await;
    cache.advance_clock(Duration::from_secs(30));
    let (p, _, origin) = fetch(&cache, &get(URL, &[]), None, never).await;
    assert!(!origin);
    let age: u64 = p.headers["age"].to_str().expect("age").parse().expect("n");
    assert!((30..=31).contains(&age), "{age}");

    cache.advance_clock(Duration::from_secs(31));
    let (p, body, origin) = fetch(&cache, &get(URL, &[]), None, |h| {
        assert_eq!(h["if-none-match"], "\"v1\"");
        resp(
            304,
            &[
                ("cache-control", "max-age=120"),
                ("etag", "\"v1\""),
                ("x-new", "1"),
            ],
            "",
        )
    })
    .await;
    assert!(origin);
    assert_eq!(p.status, StatusCode::OK);
    assert_eq!(body, "body1");
    assert_eq!(status_of(&p), "robots-proxy; fwd=stale; fwd-status=304");
    assert_eq!(p.headers["x-new"], "1");
    assert_eq!(p.headers["content-length"], "5");
    // The 304's max-age now governs the stored response.
    cache.advance_clock(Duration::from_secs(100));
    let (p, body, origin) = fetch(&cache, &get(URL, &[]), None, never).await;
    assert!(!origin);
    assert_eq!(body, "body1");
    assert_eq!(p.headers["x-new"], "1");
    assert_eq!(cache.counters().revalidated, 1);
}

/// A 304 whose headers shorten the freshness governs at once: what the
/// stored response's earlier freshness was (worked out on a hit) is not
/// carried over to the refreshed one.
#[tokio::test]
async fn a_304_that_ends_freshness_is_not_outlived_by_the_earlier_one() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let headers = [("cache-control", "max-age=600"), ("etag", "\"v1\"")];
    fetch(&cache, &get(URL, &[]), None, |_| {
        resp(200, &headers, "body1")
    })
    .await;
    // A plain hit: the response is fresh for 600 s.
    let (_, _, origin) = fetch(&cache, &get(URL, &[]), None, never).await;
    assert!(!origin);
    // The client asks for revalidation; the origin says "fresh no more".
    let (p, _, origin) = fetch(
        &cache,
        &get(URL, &[("cache-control", "no-cache")]),
        None,
        |h| {
            assert_eq!(h["if-none-match"], "\"v1\"");
            resp(
                304,
                &[("cache-control", "max-age=0"), ("etag", "\"v1\"")],
                "",
            )
        },
    )
    .await;
    assert!(origin);
    assert!(
        status_of(&p).ends_with("fwd-status=304"),
        "{}",
        status_of(&p)
    );
    // The next plain request revalidates: the 600 s are gone.
    let (_, _, origin) = fetch(&cache, &get(URL, &[]), None, |_| {
        resp(
            304,
            &[("cache-control", "max-age=0"), ("etag", "\"v1\"")],
            "",
        )
    })
    .await;
    assert!(origin, "served as fresh by the earlier max-age");
}

#[tokio::test]
async fn last_modified_is_revalidated_with_if_modified_since_and_a_200_replaces() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let lm = "Mon, 01 Jan 2024 00:00:00 GMT";
    fetch(&cache, &get(URL, &[]), None, |_| {
        resp(
            200,
            &[("cache-control", "no-cache"), ("last-modified", lm)],
            "old",
        )
    })
    .await;
    let (p, body, origin) = fetch(&cache, &get(URL, &[]), None, |h| {
        assert_eq!(h["if-modified-since"], lm);
        resp(200, &[("cache-control", "max-age=60")], "new")
    })
    .await;
    assert!(origin);
    assert_eq!(body, "new");
    assert_eq!(
        status_of(&p),
        "robots-proxy; fwd=stale; fwd-status=200; stored"
    );
    let (_, body, origin) = fetch(&cache, &get(URL, &[]), None, never).await;
    assert!(!origin);
    assert_eq!(body, "new");
}

#[tokio::test]
async fn no_store_private_set_cookie_are_not_stored() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let cases: [&[(&str, &str)]; 5] = [
        &[("cache-control", "no-store, max-age=60")],
        &[("cache-control", "private, max-age=60")],
        &[("cache-control", "max-age=60"), ("set-cookie", "a=b")],
        &[("cache-control", "max-age=60"), ("vary", "*")],
        &[("cache-control", "max-age=0")],
    ];
    for (i, headers) in cases.iter().enumerate() {
        let url = format!("http://example.test/{i}");
        for _ in 0..2 {
            let (p, _, origin) =
                fetch(&cache, &get(&url, &[]), None, |_| resp(200, headers, "x")).await;
            assert!(origin, "case {i}");
            assert_eq!(status_of(&p), "robots-proxy; fwd=uri-miss; fwd-status=200");
        }
    }
    assert_eq!(cache.counters().stored, 0);
    // A request's no-store too.
    let r = get(URL, &[("cache-control", "no-store")]);
    fetch(&cache, &r, None, |_| {
        resp(200, &[("cache-control", "max-age=60")], "x")
    })
    .await;
    assert_eq!(cache.counters().stored, 0);
}

#[tokio::test]
async fn authorization_is_stored_only_when_public_or_s_maxage() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let auth = [("authorization", "Bearer secret-token")];
    let u1 = "http://example.test/a1";
    fetch(&cache, &get(u1, &auth), None, |_| {
        resp(200, &[("cache-control", "max-age=60")], "x")
    })
    .await;
    assert_eq!(cache.counters().stored, 0);
    for (i, cc) in ["public, max-age=60", "s-maxage=60"].iter().enumerate() {
        let u = format!("http://example.test/b{i}");
        fetch(&cache, &get(&u, &auth), None, |_| {
            resp(200, &[("cache-control", cc)], "x")
        })
        .await;
        let (_, _, origin) = fetch(&cache, &get(&u, &[]), None, never).await;
        assert!(!origin);
    }
    assert_eq!(cache.counters().stored, 2);
    assert!(!dir_contains(dir.path(), b"secret-token"));
}

fn dir_contains(dir: &Path, needle: &[u8]) -> bool {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let bytes = std::fs::read(&p).expect("read");
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    return true;
                }
            }
        }
    }
    false
}

#[tokio::test]
async fn the_proxy_credentials_are_never_stored() {
    let dir = tempfile::tempdir().expect("tmp");
    for mode in [CacheMode::Rfc9111, CacheMode::StoreAll] {
        let cache = open(dir.path(), &config(mode));
        let r = get(
            URL,
            &[
                ("proxy-authorization", "Basic cHJveHlzZWNyZXQ="),
                ("accept", "a"),
            ],
        );
        fetch(&cache, &r, Some("alice"), |_| {
            resp(
                200,
                &[
                    ("cache-control", "max-age=60"),
                    ("vary", "Accept, Proxy-Authorization"),
                ],
                "x",
            )
        })
        .await;
    }
    assert!(!dir_contains(dir.path(), b"cHJveHlzZWNyZXQ="));
}

#[tokio::test]
async fn s_maxage_overrides_max_age_and_expires_and_heuristics_count() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let now = SystemTime::now();
    let date = httpdate(now);
    let later = httpdate(now + Duration::from_secs(600));
    let ten_days_ago = httpdate(now - Duration::from_secs(10 * 86400));
    let cases: Vec<(String, Vec<(&str, &str)>)> = vec![
        (
            "s".into(),
            vec![("cache-control", "max-age=0, s-maxage=60")],
        ),
        ("e".into(), vec![("date", &date), ("expires", &later)]),
        (
            "h".into(),
            vec![("date", &date), ("last-modified", &ten_days_ago)],
        ),
    ];
    for (path, headers) in &cases {
        let url = format!("http://example.test/{path}");
        let (_, _, origin) = fetch(&cache, &get(&url, &[]), None, |_| {
            let mut r = resp(200, &[], "x");
            for (k, v) in headers {
                r.headers_mut()
                    .insert(http::HeaderName::from_static(k), v.parse().expect("value"));
            }
            r
        })
        .await;
        assert!(origin);
        let (p, _, origin) = fetch(&cache, &get(&url, &[]), None, never).await;
        assert!(!origin, "{path}");
        assert_eq!(status_of(&p), "robots-proxy; hit");
    }
    // The heuristic gives a tenth of 10 days: stale after 1 day, Expires after 10 min.
    cache.advance_clock(Duration::from_secs(700));
    let (_, _, origin) = fetch(&cache, &get("http://example.test/e", &[]), None, |_| {
        resp(200, &[], "x")
    })
    .await;
    assert!(origin);
    let (_, _, origin) = fetch(&cache, &get("http://example.test/h", &[]), None, never).await;
    assert!(!origin);
    cache.advance_clock(Duration::from_secs(86400));
    let (_, _, origin) = fetch(&cache, &get("http://example.test/h", &[]), None, |_| {
        resp(200, &[], "x")
    })
    .await;
    assert!(origin);
}

fn httpdate(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after epoch")
        .as_secs() as i64;
    let dt = time::OffsetDateTime::from_unix_timestamp(secs).expect("time");
    let fmt = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    dt.format(&fmt).expect("format")
}

#[tokio::test]
async fn client_directives_no_cache_max_stale_must_revalidate_only_if_cached() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    // only-if-cached on a miss: 504 with a clear body, origin not asked.
    let oic = [("cache-control", "only-if-cached")];
    let (p, body, origin) = fetch(&cache, &get(URL, &oic), None, never).await;
    assert!(!origin);
    assert_eq!(p.status, StatusCode::GATEWAY_TIMEOUT);
    assert!(String::from_utf8_lossy(&body).contains("not in the cache"));
    assert_eq!(
        status_of(&p),
        "robots-proxy; fwd=miss; detail=only-if-cached"
    );

    let h = [("cache-control", "max-age=10"), ("etag", "\"e\"")];
    fetch(&cache, &get(URL, &[]), None, |_| resp(200, &h, "v")).await;
    let (p, _, _) = fetch(&cache, &get(URL, &oic), None, never).await;
    assert_eq!(status_of(&p), "robots-proxy; hit");
    // no-cache from the client: revalidated although fresh.
    let (p, _, origin) = fetch(
        &cache,
        &get(URL, &[("cache-control", "no-cache")]),
        None,
        |h| {
            assert_eq!(h["if-none-match"], "\"e\"");
            resp(304, &[("etag", "\"e\"")], "")
        },
    )
    .await;
    assert!(origin);
    assert_eq!(status_of(&p), "robots-proxy; fwd=stale; fwd-status=304");
    // Stale: max-stale accepts it, only-if-cached refuses it.
    cache.advance_clock(Duration::from_secs(20));
    let (p, _, origin) = fetch(
        &cache,
        &get(URL, &[("cache-control", "max-stale=60")]),
        None,
        never,
    )
    .await;
    assert!(!origin);
    assert_eq!(status_of(&p), "robots-proxy; hit");
    let (p, _, _) = fetch(&cache, &get(URL, &oic), None, never).await;
    assert_eq!(p.status, StatusCode::GATEWAY_TIMEOUT);

    // must-revalidate: max-stale does not apply.
    let u = "http://example.test/mr";
    let h = [
        ("cache-control", "max-age=10, must-revalidate"),
        ("etag", "\"m\""),
    ];
    fetch(&cache, &get(u, &[]), None, |_| resp(200, &h, "v")).await;
    cache.advance_clock(Duration::from_secs(20));
    let r = get(u, &[("cache-control", "max-stale=600")]);
    assert!(matches!(
        cache.lookup(&r, None).await,
        Lookup::Revalidate(_)
    ));
}

#[tokio::test]
async fn a_clients_own_conditional_is_answered_304_from_the_cache() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let h = [("cache-control", "max-age=60"), ("etag", "\"e1\"")];
    fetch(&cache, &get(URL, &[]), None, |_| resp(200, &h, "body")).await;
    let (p, body, origin) = fetch(
        &cache,
        &get(URL, &[("if-none-match", "\"e1\"")]),
        None,
        never,
    )
    .await;
    assert!(!origin);
    assert_eq!(p.status, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());
    assert_eq!(p.headers["etag"], "\"e1\"");
    assert_eq!(status_of(&p), "robots-proxy; hit");
    let (p, body, _) = fetch(
        &cache,
        &get(URL, &[("if-none-match", "\"e0\"")]),
        None,
        never,
    )
    .await;
    assert_eq!((p.status, body.as_ref()), (StatusCode::OK, &b"body"[..]));
    // Stale: revalidated with both tags; the origin's 304 is the client's too.
    cache.advance_clock(Duration::from_secs(61));
    let r = get(URL, &[("if-none-match", "\"e1\"")]);
    let (p, body, origin) = fetch(&cache, &r, None, |h| {
        assert_eq!(h["if-none-match"], "\"e1\"");
        resp(
            304,
            &[("etag", "\"e1\""), ("cache-control", "max-age=60")],
            "",
        )
    })
    .await;
    assert!(origin);
    assert_eq!(p.status, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());
    assert_eq!(status_of(&p), "robots-proxy; fwd=stale; fwd-status=304");
}

#[tokio::test]
async fn hostile_headers_are_a_miss_or_clamped_never_a_panic() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let cases: [&[(&str, &str)]; 6] = [
        &[
            ("cache-control", "max-age=60"),
            ("age", "18446744073709551615"),
            ("etag", "\"a\""),
        ],
        &[("cache-control", "max-age=99999999999999999999999")],
        &[
            ("cache-control", "max-age=60"),
            ("age", "-5"),
            ("date", "yesterday"),
        ],
        &[("expires", "0"), ("last-modified", "Mon, 99 Foo 2024")],
        &[
            ("cache-control", "s-maxage=\"10\", max-age"),
            ("vary", ",,, ,"),
        ],
        &[
            ("cache-control", "max-age=60"),
            ("etag", "W/"),
            ("vary", "accept-language, *x"),
        ],
    ];
    for (i, headers) in cases.iter().enumerate() {
        let url = format!("http://example.test/h{i}");
        for _ in 0..2 {
            cache.advance_clock(Duration::from_secs(2));
            let (p, _, _) = fetch(&cache, &get(&url, &[("if-none-match", "W/")]), None, |_| {
                resp(200, headers, "x")
            })
            .await;
            assert!(p.status.is_success() || p.status == StatusCode::NOT_MODIFIED);
        }
    }
    // The 2^64 Age counts as 2^31 s: stale at once.
    let r = get("http://example.test/h0", &[]);
    assert!(!matches!(cache.lookup(&r, None).await, Lookup::Hit(_)));
}

/// Headers the policy crate alone would misread (RFC 9111 §4.2.3, §5.1,
/// §5.2, §5.3; RFC 9110 §5.6.7): whether a second GET is a hit.
#[tokio::test]
async fn freshness_follows_rfc_9111_whatever_the_spelling_of_the_headers() {
    let now = SystemTime::now();
    let secs = |d: u64| Duration::from_secs(d);
    let rfc850 = |t: SystemTime| {
        let d = time::OffsetDateTime::from(t);
        let day = [
            "Monday",
            "Tuesday",
            "Wednesday",
            "Thursday",
            "Friday",
            "Saturday",
            "Sunday",
        ][d.weekday().number_days_from_monday() as usize];
        let fixdate = httpdate(t);
        // "Sun, 06 Nov 1994 08:49:37 GMT" -> "Sunday, 06-Nov-94 08:49:37 GMT"
        let f: Vec<&str> = fixdate.split(' ').collect();
        format!("{day}, {}-{}-{} {} GMT", f[1], f[2], &f[3][2..], f[4])
    };
    type Case = (&'static str, Vec<(&'static str, String)>, bool);
    let cases: Vec<Case> = vec![
        (
            "MAX-AGE is max-age",
            vec![("cache-control", "MAX-AGE=3600".into())],
            true,
        ),
        (
            "No-CaChE is no-cache",
            vec![
                ("cache-control", "max-age=3600, No-CaChE".into()),
                ("etag", "\"e\"".into()),
            ],
            false,
        ),
        (
            "the first Age of a list counts",
            vec![
                ("cache-control", "max-age=3600".into()),
                ("age", "7200, 0".into()),
                ("etag", "\"e\"".into()),
            ],
            false,
        ),
        (
            "an invalid Expires is already expired",
            vec![
                ("expires", httpdate(now + secs(3600)).replacen(' ', "  ", 1)),
                ("etag", "\"e\"".into()),
            ],
            false,
        ),
        (
            "an RFC 850 Expires is a date",
            vec![("expires", rfc850(now + secs(3600)))],
            true,
        ),
        (
            "Date counts in the age",
            vec![
                ("cache-control", "max-age=3600".into()),
                ("date", httpdate(now - secs(7200))),
                ("etag", "\"e\"".into()),
            ],
            false,
        ),
    ];
    for (i, (what, headers, hit)) in cases.into_iter().enumerate() {
        let dir = tempfile::tempdir().expect("tmp");
        let cache = open(dir.path(), &config(CacheMode::Rfc9111));
        let url = format!("http://example.test/{i}");
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        fetch(&cache, &get(&url, &[]), None, |_| resp(200, &h, "x")).await;
        let second = cache.lookup(&get(&url, &[]), None).await;
        assert_eq!(matches!(second, Lookup::Hit(_)), hit, "{what}: {second:?}");
    }
}

#[tokio::test]
async fn client_no_cache_on_a_fresh_response_is_fwd_request() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    fetch(&cache, &get(URL, &[]), None, |_| {
        resp(200, &[("cache-control", "max-age=60")], "v")
    })
    .await;
    let r = get(URL, &[("pragma", "no-cache")]);
    match cache.lookup(&r, None).await {
        Lookup::Revalidate(p) => {
            assert_eq!(p.fwd(), "request");
            assert!(p.conditional_headers().is_empty());
            assert!(p.is_revalidation());
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn vary_keys_variants_apart() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let h = [("cache-control", "max-age=60"), ("vary", "Accept-Language")];
    let fr = [("accept-language", "fr")];
    let en = [("accept-language", "en")];
    fetch(&cache, &get(URL, &fr), None, |_| resp(200, &h, "bonjour")).await;
    let (p, body, origin) = fetch(&cache, &get(URL, &en), None, |_| resp(200, &h, "hello")).await;
    assert!(origin);
    assert_eq!(body, "hello");
    assert_eq!(
        status_of(&p),
        "robots-proxy; fwd=vary-miss; fwd-status=200; stored"
    );
    let (_, body, origin) = fetch(&cache, &get(URL, &fr), None, never).await;
    assert!(!origin);
    assert_eq!(body, "bonjour");
    let (_, body, origin) = fetch(&cache, &get(URL, &en), None, never).await;
    assert!(!origin);
    assert_eq!(body, "hello");
    let d = cache.describe(URL);
    assert_eq!(d["stored"].as_array().map(Vec::len), Some(2), "{d}");
}

#[tokio::test]
async fn head_is_answered_from_a_stored_get_without_a_body() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    // A HEAD miss is forwarded and not stored.
    let head = req(Method::HEAD, URL, &[]);
    let (_, _, origin) = fetch(&cache, &head, None, |_| {
        resp(200, &[("cache-control", "max-age=60")], "")
    })
    .await;
    assert!(origin);
    assert_eq!(cache.counters().stored, 0);
    fetch(&cache, &get(URL, &[]), None, |_| {
        resp(200, &[("cache-control", "max-age=60")], "twelve bytes")
    })
    .await;
    let (p, body, origin) = fetch(&cache, &head, None, never).await;
    assert!(!origin);
    assert!(body.is_empty());
    assert_eq!(p.headers["content-length"], "12");
    assert_eq!(status_of(&p), "robots-proxy; hit");
}

#[tokio::test]
async fn unsafe_methods_invalidate_the_uri_and_same_origin_locations() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let urls = [
        URL,
        "http://example.test/created",
        "http://example.test/other",
        "http://elsewhere.test/x",
    ];
    for u in urls {
        fetch(&cache, &get(u, &[]), None, |_| {
            resp(200, &[("cache-control", "max-age=60")], "x")
        })
        .await;
    }
    let mut h = HeaderMap::new();
    // A failed POST invalidates nothing; a GET never does.
    assert_eq!(
        cache.invalidate(
            &Method::POST,
            &URL.parse().expect("uri"),
            StatusCode::INTERNAL_SERVER_ERROR,
            &h
        ),
        0
    );
    assert_eq!(
        cache.invalidate(&Method::GET, &URL.parse().expect("uri"), StatusCode::OK, &h),
        0
    );
    h.insert("location", "/created".parse().expect("v"));
    h.insert(
        "content-location",
        "http://elsewhere.test/x".parse().expect("v"),
    );
    let n = cache.invalidate(
        &Method::POST,
        &URL.parse().expect("uri"),
        StatusCode::CREATED,
        &h,
    );
    assert_eq!(n, 2);
    for (u, stored) in [
        (urls[0], false),
        (urls[1], false),
        (urls[2], true),
        (urls[3], true),
    ] {
        let found = matches!(cache.lookup(&get(u, &[]), None).await, Lookup::Hit(_));
        assert_eq!(found, stored, "{u}");
    }
    for m in [Method::PUT, Method::DELETE, Method::PATCH] {
        let u = "http://example.test/other";
        fetch(&cache, &get(u, &[]), None, |_| {
            resp(200, &[("cache-control", "max-age=60")], "x")
        })
        .await;
        assert_eq!(
            cache.invalidate(
                &m,
                &u.parse().expect("uri"),
                StatusCode::NO_CONTENT,
                &HeaderMap::new()
            ),
            1
        );
    }
}

#[tokio::test]
async fn https_is_cached_under_its_own_scheme() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let h = [("cache-control", "max-age=60")];
    fetch(&cache, &get("https://example.test/page", &[]), None, |_| {
        resp(200, &h, "secure")
    })
    .await;
    let (_, body, origin) = fetch(&cache, &get("http://example.test/page", &[]), None, |_| {
        resp(200, &h, "plain")
    })
    .await;
    assert!(origin);
    assert_eq!(body, "plain");
    let (_, body, origin) =
        fetch(&cache, &get("https://example.test/page", &[]), None, never).await;
    assert!(!origin);
    assert_eq!(body, "secure");
    assert_eq!(
        cache.describe("https://example.test/page")["url"],
        "https://example.test/page"
    );
}

#[tokio::test]
async fn range_and_unsafe_requests_bypass() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    assert!(matches!(
        cache
            .lookup(&get(URL, &[("range", "bytes=0-1")]), None)
            .await,
        Lookup::Bypass
    ));
    assert!(matches!(
        cache.lookup(&req(Method::POST, URL, &[]), None).await,
        Lookup::Bypass
    ));
    assert!(matches!(
        cache.lookup(&get("/relative", &[]), None).await,
        Lookup::Bypass
    ));
    let mut r = resp(200, &[], "");
    ResponseCache::mark_bypass(&mut r);
    assert_eq!(r.headers()["cache-status"], "robots-proxy; fwd=bypass");
}

#[tokio::test]
async fn store_all_stores_everything_per_user_for_its_ttl() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::StoreAll));
    let h = [
        ("cache-control", "no-store, private"),
        ("set-cookie", "session=alice"),
    ];
    let (p, _, _) = fetch(&cache, &get(URL, &[]), Some("alice"), |_| {
        resp(200, &h, "alice's")
    })
    .await;
    assert_eq!(
        status_of(&p),
        "robots-proxy; fwd=uri-miss; fwd-status=200; stored"
    );
    let (p, body, origin) = fetch(&cache, &get(URL, &[]), Some("alice"), never).await;
    assert!(!origin);
    assert_eq!(body, "alice's");
    assert_eq!(p.headers["set-cookie"], "session=alice");
    // Another user never gets it.
    let (_, body, origin) = fetch(&cache, &get(URL, &[]), Some("bob"), |_| {
        resp(200, &[], "bob's")
    })
    .await;
    assert!(origin);
    assert_eq!(body, "bob's");
    // Not 404s.
    let u = "http://example.test/missing";
    fetch(&cache, &get(u, &[]), Some("alice"), |_| {
        resp(404, &[("cache-control", "max-age=60")], "")
    })
    .await;
    assert_eq!(cache.counters().stored, 2);
    // Expired after store_all_ttl.
    cache.advance_clock(Duration::from_secs(3601));
    let (_, _, origin) = fetch(&cache, &get(URL, &[]), Some("alice"), |_| {
        resp(200, &[], "again")
    })
    .await;
    assert!(origin);
}

#[tokio::test]
async fn offline_answers_stale_entries_and_504s_misses() {
    let dir = tempfile::tempdir().expect("tmp");
    {
        let cache = open(dir.path(), &config(CacheMode::Rfc9111));
        fetch(&cache, &get(URL, &[]), None, |_| {
            resp(200, &[("cache-control", "max-age=1")], "kept")
        })
        .await;
    }
    {
        let cache = open(dir.path(), &config(CacheMode::StoreAll));
        fetch(
            &cache,
            &get("http://example.test/mine", &[]),
            Some("alice"),
            |_| resp(200, &[("cache-control", "no-store")], "recorded"),
        )
        .await;
    }
    let cache = open(dir.path(), &config(CacheMode::Offline));
    cache.advance_clock(Duration::from_secs(3600));
    let (p, body, _) = fetch(&cache, &get(URL, &[]), None, never).await;
    assert_eq!(body, "kept");
    assert_eq!(status_of(&p), "robots-proxy; hit; detail=offline");
    let (_, body, _) = fetch(
        &cache,
        &get("http://example.test/mine", &[]),
        Some("alice"),
        never,
    )
    .await;
    assert_eq!(body, "recorded");
    let (p, body, _) = fetch(
        &cache,
        &get("http://example.test/mine", &[]),
        Some("bob"),
        never,
    )
    .await;
    assert_eq!(p.status, StatusCode::GATEWAY_TIMEOUT);
    assert!(String::from_utf8_lossy(&body).contains("offline mode"));
    assert_eq!(status_of(&p), "robots-proxy; fwd=miss; detail=offline");
    assert_eq!(cache.counters().unavailable, 1);
    // Nothing else reaches an origin either.
    for r in [
        req(Method::POST, URL, &[]),
        get(URL, &[("upgrade", "websocket"), ("connection", "upgrade")]),
    ] {
        let got = cache.lookup(&r, None).await;
        assert!(matches!(got, Lookup::Unavailable(_)), "{got:?}");
    }
    // A Range is answered with the whole stored response.
    let (p, body, _) = fetch(&cache, &get(URL, &[("range", "bytes=0-1")]), None, never).await;
    assert_eq!((p.status, body.as_ref()), (StatusCode::OK, &b"kept"[..]));
}

#[tokio::test]
async fn purge_and_describe() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    for p in ["/a/1", "/a/2", "/b/1"] {
        let u = format!("http://example.test{p}");
        fetch(&cache, &get(&u, &[]), None, |_| {
            resp(
                200,
                &[("cache-control", "max-age=60"), ("etag", "\"x\"")],
                "x",
            )
        })
        .await;
    }
    let d = cache.describe("http://EXAMPLE.test/a/1");
    assert_eq!(d["mode"], "rfc9111");
    assert_eq!(d["stored"][0]["status"], 200);
    assert_eq!(d["stored"][0]["fresh"], true);
    assert_eq!(d["stored"][0]["etag"], "\"x\"");
    assert_eq!(d["stored"][0]["tiers"][0], "memory");
    assert_eq!(cache.purge_prefix("http://example.test/a/"), 2);
    assert_eq!(cache.purge_url("http://example.test/b/1"), 1);
    assert_eq!(cache.purge_url("http://example.test/b/1"), 0);
    assert_eq!(
        cache.describe("http://example.test/a/1")["stored"],
        serde_json::json!([])
    );
    let c = cache.counters();
    assert_eq!(
        (
            c.invalidations,
            c.disk_objects,
            c.disk_bytes,
            c.memory_bytes
        ),
        (3, 0, 0, 0)
    );
    // The files go after the index let them go.
    cache.settled().await;
    assert!(object_files(dir.path()).is_empty());
}

// ---- storage ----

#[tokio::test]
async fn a_stored_response_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(CacheMode::Rfc9111);
    {
        let cache = open(dir.path(), &cfg);
        fetch(&cache, &get(URL, &[("accept", "text/html")]), None, |_| {
            resp(
                200,
                &[("cache-control", "max-age=600"), ("vary", "Accept")],
                "persisted",
            )
        })
        .await;
    }
    let cache = open(dir.path(), &cfg);
    let c = cache.counters();
    assert_eq!((c.disk_objects, c.memory_objects), (1, 0));
    let (p, body, origin) = fetch(&cache, &get(URL, &[("accept", "text/html")]), None, never).await;
    assert!(!origin);
    assert_eq!(body, "persisted");
    assert_eq!(status_of(&p), "robots-proxy; hit");
    assert_eq!(cache.counters().memory_objects, 1);
    // The memory tier counts the meta read back and the body it kept.
    let meta_len = object_files(dir.path())
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "meta"))
        .map(|p| p.metadata().expect("md").len())
        .expect("a meta file");
    assert_eq!(
        cache.counters().memory_bytes,
        meta_len * 10 + "persisted".len() as u64
    );
}

#[tokio::test]
async fn cache_files_are_the_proxy_users_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tmp");
    let mode = |p: &Path| p.metadata().expect("md").permissions().mode() & 0o777;
    // A cache directory left open by an earlier version is closed.
    std::fs::create_dir_all(dir.path().join("cache/objects")).expect("mkdir");
    std::fs::set_permissions(
        dir.path().join("cache"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    fetch(&cache, &get(URL, &[]), None, |_| {
        resp(200, &[("cache-control", "max-age=60")], "private")
    })
    .await;
    for d in ["cache", "cache/objects", "cache/tmp"] {
        assert_eq!(mode(&dir.path().join(d)), 0o700, "{d}");
    }
    let files = object_files(dir.path());
    assert_eq!(files.len(), 2);
    for f in &files {
        assert_eq!(mode(f), 0o600, "{f:?}");
        let shard = f.parent().expect("shard");
        assert_eq!(mode(shard), 0o700, "{shard:?}");
    }
}

/// Every file under `cache/objects/` (its shard directories included).
fn object_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.join("cache/objects")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("objects") {
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

fn body_files(dir: &Path) -> Vec<std::path::PathBuf> {
    object_files(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "body"))
        .collect()
}

#[tokio::test]
async fn temp_files_truncated_and_corrupted_bodies_are_never_served() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(CacheMode::Rfc9111);
    let h = [("cache-control", "max-age=600")];
    {
        let cache = open(dir.path(), &cfg);
        fetch(&cache, &get("http://example.test/t", &[]), None, |_| {
            resp(200, &h, "truncate me")
        })
        .await;
    }
    // A crash mid-write leaves a temp file; a truncated body.
    std::fs::write(dir.path().join("cache/tmp/0000.body.tmp"), b"partial").expect("write");
    std::fs::write(dir.path().join("cache/objects/junk"), b"?").expect("write");
    let bodies = body_files(dir.path());
    assert_eq!(bodies.len(), 1);
    std::fs::write(&bodies[0], b"trunc").expect("truncate");
    let shard = bodies[0].parent().expect("shard").to_path_buf();
    std::fs::write(shard.join("stray.body"), b"?").expect("write");
    let cache = open(dir.path(), &cfg);
    assert_eq!(
        std::fs::read_dir(dir.path().join("cache/tmp"))
            .expect("tmp")
            .count(),
        0
    );
    assert_eq!(cache.counters().disk_objects, 0);
    assert_eq!(cache.counters().corrupt, 1);
    cache.settled().await;
    assert!(object_files(dir.path()).is_empty());

    // Corrupted in place (same length) while running: a miss, and deleted.
    fetch(&cache, &get("http://example.test/c", &[]), None, |_| {
        resp(200, &h, "corrupt me")
    })
    .await;
    drop(cache);
    let bodies = body_files(dir.path());
    std::fs::write(&bodies[0], b"CORRUPT me").expect("corrupt");
    let cache = open(dir.path(), &cfg);
    let (_, body, origin) = fetch(&cache, &get("http://example.test/c", &[]), None, |_| {
        resp(200, &h, "fresh copy")
    })
    .await;
    assert!(origin);
    assert_eq!(body, "fresh copy");
    assert_eq!(cache.counters().corrupt, 1);

    // A corrupted meta file is dropped at start.
    drop(cache);
    let meta = object_files(dir.path())
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "meta"))
        .expect("meta");
    let mut bytes = std::fs::read(&meta).expect("read");
    let last = bytes.len() - 3;
    bytes[last] ^= 1;
    std::fs::write(&meta, bytes).expect("write");
    let cache = open(dir.path(), &cfg);
    assert_eq!(cache.counters().disk_objects, 0);
}

#[tokio::test]
async fn a_large_corrupted_body_never_arrives_whole() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = config(CacheMode::Rfc9111);
    let big: &'static str = Box::leak("z".repeat(1 << 20).into_boxed_str());
    {
        let cache = open(dir.path(), &cfg);
        fetch(&cache, &get(URL, &[]), None, |_| {
            resp(200, &[("cache-control", "max-age=600")], big)
        })
        .await;
    }
    let bodies = body_files(dir.path());
    let mut bytes = std::fs::read(&bodies[0]).expect("read");
    bytes[1000] = b'Z';
    std::fs::write(&bodies[0], bytes).expect("write");
    let cache = open(dir.path(), &cfg);
    let Lookup::Hit(r) = cache.lookup(&get(URL, &[]), None).await else {
        panic!("the length is right: a hit until the digest is checked");
    };
    assert_eq!(
        r.headers()["content-length"],
        (1u64 << 20).to_string().as_str()
    );
    let got = r.into_body().collect().await.expect("body").to_bytes();
    assert!(got.len() < 1 << 20, "a corrupt body must end short");
    assert_eq!(cache.counters().disk_objects, 0);
    cache.settled().await;
    assert!(body_files(dir.path()).is_empty());
}

#[tokio::test]
async fn both_tiers_evict_by_bytes() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(CacheMode::Rfc9111);
    cfg.memory_size = 64 * 1024; // small objects up to 8 KiB in memory
    cfg.disk_size = 100 * 1024;
    cfg.max_object_size = 50 * 1024;
    let cache = open(dir.path(), &cfg);
    let body: &'static str = Box::leak("m".repeat(6 * 1024).into_boxed_str());
    for i in 0..20 {
        let u = format!("http://example.test/{i}");
        fetch(&cache, &get(&u, &[]), None, |_| {
            resp(200, &[("cache-control", "max-age=60")], body)
        })
        .await;
    }
    let c = cache.counters();
    assert!(c.memory_bytes <= 64 * 1024, "{c:?}");
    assert!(c.disk_bytes <= 100 * 1024, "{c:?}");
    assert!(c.evictions_memory >= 4, "{c:?}");
    assert!(c.evictions_disk >= 1, "{c:?}");
    // The oldest went first, the newest is there.
    assert!(!matches!(
        cache.lookup(&get("http://example.test/0", &[]), None).await,
        Lookup::Hit(_)
    ));
    assert!(matches!(
        cache
            .lookup(&get("http://example.test/19", &[]), None)
            .await,
        Lookup::Hit(_)
    ));
    // Disk usage on the file system agrees with the count, in blocks.
    cache.settled().await;
    let on_disk: u64 = object_files(dir.path())
        .iter()
        .map(|p| store::on_disk(p.metadata().expect("md").len()))
        .sum();
    assert_eq!(on_disk, cache.counters().disk_bytes);
}

async fn store_fresh(cache: &ResponseCache, url: &str, headers: &[(&str, &str)]) {
    let (_, _, origin) = fetch(cache, &get(url, headers), None, |_| {
        resp(
            200,
            &[("cache-control", "max-age=600"), ("vary", "User-Agent")],
            "small",
        )
    })
    .await;
    assert!(origin, "{url} was stored already");
}

async fn is_hit(cache: &ResponseCache, url: &str, headers: &[(&str, &str)]) -> bool {
    matches!(cache.lookup(&get(url, headers), None).await, Lookup::Hit(_))
}

#[tokio::test]
async fn the_index_is_bounded_by_count_and_evicts_with_the_files() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(CacheMode::Rfc9111);
    cfg.max_objects = 5;
    let cache = open(dir.path(), &cfg);
    for i in 0..8 {
        store_fresh(&cache, &format!("http://example.test/{i}"), &[]).await;
    }
    let c = cache.counters();
    assert_eq!((c.disk_objects, c.evictions_disk), (5, 3), "{c:?}");
    cache.settled().await;
    assert_eq!(object_files(dir.path()).len(), 10, "a meta and a body each");
    assert!(!is_hit(&cache, "http://example.test/2", &[]).await);
    assert!(is_hit(&cache, "http://example.test/3", &[]).await);
    // One small object takes two files of one 4 KiB block each.
    assert_eq!(c.disk_bytes, 5 * 2 * 4096);
    // Reopened with a smaller budget: the newest are indexed, the rest
    // deleted before anything is served.
    drop(cache);
    cfg.max_objects = 2;
    let cache = open(dir.path(), &cfg);
    assert_eq!(cache.counters().disk_objects, 2);
    // The files over the budget are deleted after the cache opened.
    cache.settled().await;
    assert_eq!(object_files(dir.path()).len(), 4);
    assert!(is_hit(&cache, "http://example.test/7", &[]).await);
    assert!(is_hit(&cache, "http://example.test/6", &[]).await);
    assert!(!is_hit(&cache, "http://example.test/5", &[]).await);
}

#[tokio::test]
async fn variants_per_url_are_capped_oldest_first() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(CacheMode::Rfc9111);
    cfg.max_variants = 3;
    let cache = open(dir.path(), &cfg);
    let uas = ["a/1", "b/1", "c/1", "d/1", "e/1"];
    for (i, ua) in uas.iter().enumerate() {
        store_fresh(&cache, URL, &[("user-agent", ua)]).await;
        // Distinct stored_at seconds: the oldest is the first stored.
        if i + 1 < uas.len() {
            cache.advance_clock(Duration::from_secs(1));
        }
    }
    assert_eq!(cache.counters().disk_objects, 3);
    assert_eq!(
        cache.describe(URL)["stored"].as_array().map(Vec::len),
        Some(3)
    );
    for (ua, kept) in [("a/1", false), ("b/1", false), ("c/1", true), ("e/1", true)] {
        assert_eq!(
            is_hit(&cache, URL, &[("user-agent", ua)]).await,
            kept,
            "{ua}"
        );
    }
    // Other URLs are not affected.
    store_fresh(&cache, "http://example.test/other", &[]).await;
    assert_eq!(cache.counters().disk_objects, 4);
}

/// A body of `n` bytes made in 64 KiB chunks as it is read, never whole.
fn generated(n: u64, fill: fn(u64) -> u8) -> Body {
    let chunk = 64 * 1024u64;
    let stream = futures_util::stream::unfold(0u64, move |off| async move {
        if off >= n {
            return None;
        }
        let len = chunk.min(n - off);
        let data: Vec<u8> = (off..off + len).map(fill).collect();
        Some((
            Ok::<_, crate::http::body::BodyError>(hyper::body::Frame::data(Bytes::from(data))),
            off + len,
        ))
    });
    http_body_util::StreamBody::new(stream).boxed()
}

fn pattern(i: u64) -> u8 {
    (i % 251) as u8
}

#[tokio::test]
async fn an_object_over_the_cap_is_not_stored_but_arrives_whole() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(CacheMode::Rfc9111);
    cfg.max_object_size = 1 << 20;
    let cache = open(dir.path(), &cfg);
    // Without Content-Length: found out while streaming.
    let Lookup::Miss(p) = cache.lookup(&get(URL, &[]), None).await else {
        panic!("miss");
    };
    let mut up = Response::new(generated(3 << 20, pattern));
    up.headers_mut()
        .insert("cache-control", "max-age=60".parse().expect("v"));
    let (_, body) = read(
        cache
            .complete(p, up)
            .await
            .into_response()
            .expect("response"),
    )
    .await;
    assert_eq!(body.len(), 3 << 20);
    assert!(
        body.iter()
            .enumerate()
            .all(|(i, b)| *b == pattern(i as u64))
    );
    let c = cache.counters();
    assert_eq!((c.stored, c.too_large, c.disk_objects), (0, 1, 0));
    // The unfinished body goes with the janitor.
    cache.settled().await;
    assert_eq!(
        std::fs::read_dir(dir.path().join("cache/tmp"))
            .expect("tmp")
            .count(),
        0
    );
    // With Content-Length: not even started.
    let Lookup::Miss(p) = cache.lookup(&get(URL, &[]), None).await else {
        panic!("miss");
    };
    let mut up = Response::new(generated(2 << 20, pattern));
    up.headers_mut()
        .insert("cache-control", "max-age=60".parse().expect("v"));
    up.headers_mut()
        .insert("content-length", (2u64 << 20).into());
    let r = cache
        .complete(p, up)
        .await
        .into_response()
        .expect("response");
    assert_eq!(
        r.headers()["cache-status"],
        "robots-proxy; fwd=uri-miss; fwd-status=200"
    );
    assert_eq!(read(r).await.1.len(), 2 << 20);
}

#[tokio::test]
async fn a_64_mib_body_streams_to_disk_and_back() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(CacheMode::Rfc9111);
    cfg.max_object_size = 128 << 20;
    cfg.disk_size = 256 << 20;
    let cache = open(dir.path(), &cfg);
    let n: u64 = 64 << 20;
    let Lookup::Miss(p) = cache.lookup(&get(URL, &[]), None).await else {
        panic!("miss");
    };
    let mut up = Response::new(generated(n, pattern));
    up.headers_mut()
        .insert("cache-control", "max-age=60".parse().expect("v"));
    let mut body = cache
        .complete(p, up)
        .await
        .into_response()
        .expect("response")
        .into_body();
    let mut total = 0u64;
    while let Some(f) = body.frame().await {
        let f = f.expect("frame");
        if let Some(d) = f.data_ref() {
            assert!(
                d.iter()
                    .enumerate()
                    .all(|(i, b)| *b == pattern(total + i as u64))
            );
            total += d.len() as u64;
        }
    }
    assert_eq!(total, n);
    let c = cache.counters();
    assert_eq!((c.stored, c.memory_objects), (1, 0));
    assert!(c.disk_bytes > n);
    let Lookup::Hit(r) = cache.lookup(&get(URL, &[]), None).await else {
        panic!("hit");
    };
    assert_eq!(r.headers()["content-length"], n.to_string().as_str());
    let mut body = r.into_body();
    let (mut total, mut frames, mut largest) = (0u64, 0usize, 0usize);
    while let Some(f) = body.frame().await {
        let f = f.expect("frame");
        if let Some(d) = f.data_ref() {
            assert!(
                d.iter()
                    .enumerate()
                    .all(|(i, b)| *b == pattern(total + i as u64))
            );
            total += d.len() as u64;
            frames += 1;
            largest = largest.max(d.len());
        }
    }
    assert_eq!(total, n);
    assert!(
        frames >= 1024 && largest <= 64 * 1024,
        "{frames} frames, {largest} largest"
    );
}

#[tokio::test]
async fn a_client_that_leaves_does_not_stop_the_storing() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let Lookup::Miss(p) = cache.lookup(&get(URL, &[]), None).await else {
        panic!("miss");
    };
    let mut up = Response::new(generated(1 << 20, pattern));
    up.headers_mut()
        .insert("cache-control", "max-age=60".parse().expect("v"));
    drop(
        cache
            .complete(p, up)
            .await
            .into_response()
            .expect("response"),
    );
    // The lock is released once stored: the next lookup waits for it.
    let Lookup::Hit(r) = cache.lookup(&get(URL, &[]), None).await else {
        panic!("hit");
    };
    assert_eq!(read(r).await.1.len(), 1 << 20);
}

#[tokio::test(start_paused = true)]
async fn followers_wait_for_the_leader_then_hit() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let Lookup::Miss(leader) = cache.lookup(&get(URL, &[]), None).await else {
        panic!("miss");
    };
    let c2 = cache.clone();
    let follower = tokio::spawn(async move {
        match c2.lookup(&get(URL, &[]), None).await {
            Lookup::Hit(r) => read(r).await,
            other => panic!("{other:?}"),
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let r = cache
        .complete(
            leader,
            resp(200, &[("cache-control", "max-age=60")], "once"),
        )
        .await
        .into_response()
        .expect("response");
    read(r).await;
    let (p, body) = follower.await.expect("follower");
    assert_eq!(body, "once");
    assert_eq!(status_of(&p), "robots-proxy; hit; collapsed");
    assert_eq!(cache.counters().collapsed_waits, 1);
}

#[tokio::test(start_paused = true)]
async fn followers_go_themselves_after_the_lock_timeout_or_an_unstorable_answer() {
    let dir = tempfile::tempdir().expect("tmp");
    let cache = open(dir.path(), &config(CacheMode::Rfc9111));
    let Lookup::Miss(leader) = cache.lookup(&get(URL, &[]), None).await else {
        panic!("miss");
    };
    let started = tokio::time::Instant::now();
    match cache.lookup(&get(URL, &[]), None).await {
        Lookup::Miss(p) => assert_eq!(p.fwd(), "miss"),
        other => panic!("{other:?}"),
    }
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    // The leader's answer is not storable: the waiting follower goes on.
    let c2 = cache.clone();
    let follower = tokio::spawn(async move { c2.lookup(&get(URL, &[]), None).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = tokio::time::Instant::now();
    read(
        cache
            .complete(leader, resp(200, &[("cache-control", "no-store")], "x"))
            .await
            .into_response()
            .expect("response"),
    )
    .await;
    let got = follower.await.expect("follower");
    assert!(matches!(got, Lookup::Miss(_)), "{got:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
    // A dropped Pending (the forward failed) releases the lock too.
    let Lookup::Miss(p) = cache.lookup(&get(URL, &[]), None).await else {
        panic!("miss");
    };
    drop(p);
    assert!(matches!(
        cache.lookup(&get(URL, &[]), None).await,
        Lookup::Miss(_)
    ));
}

#[tokio::test]
#[ignore = "a measurement: cargo test --release --lib ten_thousand -- --ignored --nocapture"]
async fn ten_thousand_small_objects() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(CacheMode::Rfc9111);
    cfg.memory_size = 1; // disk reads, not the memory tier
    let cache = open(dir.path(), &cfg);
    let body: &'static str = Box::leak("s".repeat(1400).into_boxed_str());
    let started = std::time::Instant::now();
    for i in 0..10_000 {
        let u = format!("http://example.test/{i}");
        fetch(&cache, &get(&u, &[]), None, |_| {
            resp(200, &[("cache-control", "max-age=600")], body)
        })
        .await;
    }
    let store = started.elapsed();
    drop(cache);
    let started = std::time::Instant::now();
    let cache = open(dir.path(), &cfg);
    let reopen = started.elapsed();
    let started = std::time::Instant::now();
    for i in 0..10_000 {
        let u = format!("http://example.test/{i}");
        let (_, b, origin) = fetch(&cache, &get(&u, &[]), None, never).await;
        assert!(!origin && b.len() == 1400);
    }
    let read = started.elapsed();
    println!("10,000 x 1.4 KB: store {store:?}, reopen (index rebuild) {reopen:?}, read {read:?}");
}
