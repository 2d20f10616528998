//! Keys, the request view the cache policy sees, client directives and
//! the Cache-Status header (RFC 9211).

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use std::time::SystemTime;

use http::{Method, Uri};

use crate::http::date;

/// Name this cache gives itself in `Cache-Status`.
pub const CACHE_NAME: &str = "robots-proxy";

pub static CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// The absolute URL a request is cached under: lower-case scheme and
/// host, default port dropped, path and query as sent (`/` when empty).
/// `None` without a scheme or host.
pub fn cache_url(uri: &Uri) -> Option<String> {
    // Built in one buffer: this runs on every lookup, hits included.
    let scheme = uri.scheme_str()?;
    let (scheme, default) = if scheme.eq_ignore_ascii_case("http") {
        ("http", 80)
    } else if scheme.eq_ignore_ascii_case("https") {
        ("https", 443)
    } else {
        return None;
    };
    let auth = uri.authority()?;
    let host = auth.host();
    let pq = uri.path_and_query().map_or("/", |p| p.as_str());
    let pq = if pq.is_empty() { "/" } else { pq };
    let mut url = String::with_capacity(scheme.len() + 3 + host.len() + 6 + pq.len());
    url.push_str(scheme);
    url.push_str("://");
    let at = url.len();
    url.push_str(host);
    url[at..].make_ascii_lowercase();
    if let Some(p) = auth.port_u16().filter(|&p| p != default) {
        url.push(':');
        push_decimal(&mut url, p);
    }
    url.push_str(pq);
    Some(url)
}

/// Appends `n` in decimal, without the formatting machinery.
fn push_decimal(out: &mut String, n: u16) {
    let mut digits = [0u8; 5];
    let mut at = digits.len();
    let mut n = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

/// `scheme://authority` of a cache URL.
pub fn origin_of(url: &str) -> &str {
    let after = url.find("://").map_or(0, |i| i + 3);
    match url[after..].find('/') {
        Some(i) => &url[..after + i],
        None => url,
    }
}

/// Primary key: the URL, and the user too in `store-all`.
pub fn primary_key(url: &str, user: Option<&str>, per_user: bool) -> String {
    // Built by hand: this runs on every lookup, hits included.
    if per_user {
        let user = user.unwrap_or("-");
        let mut key = String::with_capacity(10 + url.len() + 1 + user.len());
        key.push_str("store-all\n");
        key.push_str(url);
        key.push('\n');
        key.push_str(user);
        key
    } else {
        let mut key = String::with_capacity(4 + url.len());
        key.push_str("GET\n");
        key.push_str(url);
        key
    }
}

/// The object key text: the primary key and the Vary'd request values.
pub fn variant_key(primary: &str, vary: &[String], headers: &HeaderMap) -> String {
    let mut k = primary.to_string();
    for name in vary {
        k.push('\n');
        k.push_str(name);
        k.push(':');
        for v in headers.get_all(name.as_str()) {
            k.push_str(&String::from_utf8_lossy(v.as_bytes()));
            k.push('\u{0}');
        }
    }
    k
}

/// Lower-case header names in the response's Vary; `None` for `*`.
pub fn vary_names(headers: &HeaderMap) -> Option<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    for v in headers.get_all(header::VARY) {
        for n in String::from_utf8_lossy(v.as_bytes()).split(',') {
            let n = n.trim().to_ascii_lowercase();
            if n == "*" {
                return None;
            }
            if !n.is_empty() && !names.contains(&n) {
                names.push(n);
            }
        }
    }
    names.sort();
    Some(names)
}

/// The request as the cache policy sees and stores it: only Host (from
/// the URL), Cache-Control, Pragma and the Vary'd headers; Authorization
/// only as a marker, and the proxy's own Proxy-Authorization never.
pub fn policy_request(
    method: Method,
    url: &str,
    headers: &HeaderMap,
    vary: &[String],
) -> Option<http::request::Parts> {
    let uri: Uri = url.parse().ok()?;
    let mut out = HeaderMap::new();
    if let Some(a) = uri.authority() {
        out.insert(header::HOST, HeaderValue::from_str(a.as_str()).ok()?);
    }
    let keep = [header::CACHE_CONTROL, header::PRAGMA];
    for name in keep.iter() {
        for v in headers.get_all(name) {
            out.append(name.clone(), v.clone());
        }
    }
    lower_directive_names(&mut out, header::CACHE_CONTROL);
    for name in vary {
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            continue;
        };
        if name == header::PROXY_AUTHORIZATION
            || name == header::AUTHORIZATION
            || name == header::HOST
        {
            continue;
        }
        for v in headers.get_all(&name) {
            out.append(name.clone(), v.clone());
        }
    }
    if headers.contains_key(header::AUTHORIZATION) {
        out.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("[redacted]"),
        );
    }
    let mut parts = http::Request::new(()).into_parts().0;
    parts.method = method;
    parts.uri = uri;
    parts.headers = out;
    Some(parts)
}

/// Largest Age taken from a response (RFC 9111 §1.2.2: 2^31 s stands for
/// any larger value); a bigger one would overflow the policy's arithmetic.
pub const MAX_AGE_HEADER: u64 = 1 << 31;

/// The response as the cache policy sees it: its status and headers as
/// [`normalise_for_policy`] makes them, received at `now`.
pub fn policy_response(parts: &http::response::Parts, now: SystemTime) -> http::Response<()> {
    let mut r = http::Response::new(());
    *r.status_mut() = parts.status;
    *r.headers_mut() = parts.headers.clone();
    normalise_for_policy(r.headers_mut(), now);
    r
}

/// Rewrites response headers so that the policy crate reads them as RFC
/// 9111 says (its own parsing is case-sensitive, takes only RFC 2822
/// dates and ignores Date for the age), received at `now`:
/// * Cache-Control directive names lower-cased (§5.2: case-insensitive);
/// * Age: the first value of a list (§5.1), clamped to 2^31 s; one that
///   is not a number is 0;
/// * the apparent age (§4.2.3): Age raised to `now` minus Date when that
///   is larger (the crate counts Age and the time since `now` only);
/// * Expires, Date, Last-Modified in any of the three HTTP-date forms
///   (RFC 9110 §5.6.7) written as IMF-fixdate; an invalid Expires as a
///   date long past (§5.3: "already expired"), an invalid Date or
///   Last-Modified dropped (then the response time stands for Date, and
///   no heuristic freshness comes from a date that is not one).
///
/// Only the policy's view changes: clients get the headers as received.
pub fn normalise_for_policy(headers: &mut HeaderMap, now: SystemTime) {
    lower_directive_names(headers, header::CACHE_CONTROL);
    let first_date = |h: &HeaderMap, name: &HeaderName| {
        h.get(name).map(|v| v.to_str().ok().and_then(date::parse))
    };
    match first_date(headers, &header::EXPIRES) {
        Some(Some(t)) => set_date(headers, header::EXPIRES, t),
        Some(None) => set_date(headers, header::EXPIRES, 0),
        None => {}
    }
    let mut date_value = None;
    for name in [header::DATE, header::LAST_MODIFIED] {
        match first_date(headers, &name) {
            Some(Some(t)) => {
                if name == header::DATE {
                    date_value = Some(t);
                }
                set_date(headers, name, t);
            }
            Some(None) => {
                headers.remove(name);
            }
            None => {}
        }
    }
    let age = headers.get(header::AGE).map(|v| {
        v.to_str()
            .ok()
            .and_then(|s| s.split(',').next())
            .and_then(|s| s.trim().parse::<u128>().ok())
            .map_or(0, |a| a.min(u128::from(MAX_AGE_HEADER)) as u64)
    });
    let apparent = date_value.map(|d| {
        let now = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        now.saturating_sub(d).clamp(0, MAX_AGE_HEADER as i64) as u64
    });
    match (age, apparent) {
        (None, None | Some(0)) => {}
        (a, b) => {
            let corrected = a.unwrap_or(0).max(b.unwrap_or(0));
            headers.insert(header::AGE, HeaderValue::from(corrected));
        }
    }
}

fn set_date(headers: &mut HeaderMap, name: HeaderName, unix: i64) {
    if let Some(v) = date::format(unix).and_then(|s| HeaderValue::from_str(&s).ok()) {
        headers.insert(name, v);
    }
}

/// Lower-cases the directive names in every `name` field, leaving values
/// (quoted strings included) as they are.
pub fn lower_directive_names(headers: &mut HeaderMap, name: HeaderName) {
    let needs = headers
        .get_all(&name)
        .iter()
        .any(|v| v.as_bytes().iter().any(u8::is_ascii_uppercase));
    if !needs {
        return;
    }
    let values: Vec<HeaderValue> = headers
        .get_all(&name)
        .iter()
        .map(|v| {
            let mut out = Vec::with_capacity(v.len());
            // In a name: from the start or a comma outside quotes to `=`.
            let (mut in_name, mut quoted, mut escaped) = (true, false, false);
            for &b in v.as_bytes() {
                if quoted {
                    if escaped {
                        escaped = false;
                    } else if b == b'\\' {
                        escaped = true;
                    } else if b == b'"' {
                        quoted = false;
                    }
                    out.push(b);
                    continue;
                }
                match b {
                    b',' => in_name = true,
                    b'=' => in_name = false,
                    b'"' => quoted = true,
                    _ => {}
                }
                out.push(if in_name { b.to_ascii_lowercase() } else { b });
            }
            HeaderValue::from_bytes(&out).unwrap_or_else(|_| v.clone())
        })
        .collect();
    headers.remove(&name);
    for v in values {
        headers.append(name.clone(), v);
    }
}

/// Cache-Control directives of a request or response, lower-case names.
pub struct Directives(Vec<(String, Option<String>)>);

impl Directives {
    pub fn parse(headers: &HeaderMap) -> Directives {
        let mut d = Vec::new();
        for v in headers.get_all(header::CACHE_CONTROL) {
            for part in String::from_utf8_lossy(v.as_bytes()).split(',') {
                let part = part.trim();
                if part.is_empty() {
                    continue;
                }
                let (k, v) = match part.split_once('=') {
                    Some((k, v)) => (k, Some(v.trim().trim_matches('"').to_string())),
                    None => (part, None),
                };
                d.push((k.trim().to_ascii_lowercase(), v));
            }
        }
        Directives(d)
    }

    pub fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(k, _)| k == name)
    }
}

/// Headers never stored or served from the cache: hop-by-hop ones
/// (the proxy's own rule, [`crate::http::headers::strip_hop_by_hop`]: RFC 9110
/// §7.6.1 and those named by Connection), Proxy-Authenticate, and
/// Age/Cache-Status, which the cache writes itself.
pub fn storable_headers(headers: &HeaderMap) -> HeaderMap {
    let mut out = headers.clone();
    crate::http::headers::strip_hop_by_hop(&mut out);
    for name in [header::PROXY_AUTHENTICATE, header::AGE] {
        out.remove(name);
    }
    out.remove("cache-status");
    out
}

/// Merges the headers of a 304 into stored ones (RFC 9111 §3.2, §4.3.4):
/// each field the 304 carries replaces the stored one (Content-Type
/// included), except those that describe the stored bytes (a 304 cannot
/// re-encode or re-frame them: Content-Length, Content-Encoding,
/// Transfer-Encoding, Content-Range) and Set-Cookie: a cookie the origin
/// sets on a revalidation is the requesting client's, never the shared
/// response's (see [`set_cookies`]).
pub fn merge_304(stored: &HeaderMap, fresh: &HeaderMap) -> HeaderMap {
    const KEEP: [&str; 6] = [
        "content-length",
        "content-encoding",
        "transfer-encoding",
        "content-range",
        "set-cookie",
        "set-cookie2",
    ];
    let fresh = storable_headers(fresh);
    let mut out = stored.clone();
    for name in fresh.keys() {
        if KEEP.contains(&name.as_str()) {
            continue;
        }
        out.remove(name);
        for v in fresh.get_all(name) {
            out.append(name.clone(), v.clone());
        }
    }
    out
}

/// The cookies a response sets: forwarded to the client that caused the
/// response, never stored for others.
pub fn set_cookies(headers: &HeaderMap) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
    headers
        .iter()
        .filter(|(n, _)| *n == header::SET_COOKIE || n.as_str() == "set-cookie2")
}

/// Whether a 304 answering the cache's own conditional selects the stored
/// response it was asked about (RFC 9111 §4.3.4): a strong ETag selects a
/// stored response with the same strong ETag, a weak one a stored response
/// whose ETag matches it weakly; without an ETag, the stored response is
/// the one the request asked about unless both carry Last-Modified and
/// they differ. Anything else selects nothing: merging it would serve the
/// stored body under another representation's validator.
pub fn selects(stored: &HeaderMap, not_modified: &HeaderMap) -> bool {
    let text = |h: &HeaderMap, n: HeaderName| {
        h.get(n)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.trim().to_string())
    };
    match (text(not_modified, header::ETAG), text(stored, header::ETAG)) {
        (Some(new), Some(old)) => match new.strip_prefix("W/") {
            Some(weak) => old.trim_start_matches("W/") == weak,
            None => !old.starts_with("W/") && old == new,
        },
        (Some(_), None) => false,
        (None, _) => match (
            text(not_modified, header::LAST_MODIFIED),
            text(stored, header::LAST_MODIFIED),
        ) {
            (Some(new), Some(old)) => {
                new == old
                    || matches!((date::parse(&new), date::parse(&old)), (Some(a), Some(b)) if a == b)
            }
            _ => true,
        },
    }
}

/// Whether a 304's ETag is one the client itself asked about in
/// If-None-Match (weak comparison): then the 304 is the client's answer.
pub fn answers_client(req: &HeaderMap, not_modified: &HeaderMap) -> bool {
    if_none_match(req, not_modified)
}

/// Whether the request's If-None-Match names the ETag of `headers` (weak
/// comparison, RFC 9110 §13.1.2), or is `*` for a response that has one.
fn if_none_match(req: &HeaderMap, headers: &HeaderMap) -> bool {
    let Some(etag) = headers
        .get(header::ETAG)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().trim_start_matches("W/"))
    else {
        return false;
    };
    req.get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|t| t == "*" || t.trim_start_matches("W/") == etag)
}

/// Whether a client's conditional GET is satisfied by stored headers:
/// If-None-Match against the ETag (weak comparison), else
/// If-Modified-Since against Last-Modified.
pub fn not_modified(req: &HeaderMap, stored: &HeaderMap) -> bool {
    // Most requests are not conditional: nothing to compare, nothing to copy.
    let has = crate::http::headers::has;
    if !has(req, &header::IF_NONE_MATCH) && !has(req, &header::IF_MODIFIED_SINCE) {
        return false;
    }
    let text = |h: &HeaderMap, n: HeaderName| {
        h.get(n)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.trim().to_string())
    };
    if req.contains_key(header::IF_NONE_MATCH) {
        return if_none_match(req, stored);
    }
    let (Some(ims), Some(lm)) = (
        text(req, header::IF_MODIFIED_SINCE),
        text(stored, header::LAST_MODIFIED),
    ) else {
        return false;
    };
    if ims == lm {
        return true;
    }
    matches!((date::parse(&ims), date::parse(&lm)), (Some(i), Some(l)) if l <= i)
}

/// A Cache-Status value: `robots-proxy; hit`, `robots-proxy;
/// fwd=uri-miss; fwd-status=200; stored`, ...
pub fn cache_status(params: &str) -> HeaderValue {
    // The usual ones without formatting: every hit carries one.
    match params {
        "hit" => return HeaderValue::from_static("robots-proxy; hit"),
        "hit; collapsed" => return HeaderValue::from_static("robots-proxy; hit; collapsed"),
        _ => {}
    }
    HeaderValue::from_str(&format!("{CACHE_NAME}; {params}"))
        .unwrap_or_else(|_| HeaderValue::from_static(CACHE_NAME))
}

/// Resolves a Location or Content-Location value against `base` (a
/// cache URL) by RFC 3986 §5.2 reference resolution (`Url::join`),
/// rendered as [`cache_url`] keys a request for it: lower-case scheme and
/// host, default port dropped, `/` for an empty path, no fragment (a
/// fragment never reaches a request, so nothing is stored under one).
/// Characters the url crate percent-encodes (a space, `"` or `'` in a
/// query) stay encoded: a client following the Location sends them so.
/// `None` when either does not parse or the target is not http(s).
pub fn resolve(base: &str, reference: &str) -> Option<String> {
    cache_url(&crate::http::origin::resolve_reference(base, reference)?)
}

/// The cache URL a successful unsafe request to `base` (a cache URL)
/// invalidates for a Location or Content-Location value (RFC 9111 §4.4):
/// the value [`resolve`]d, when it has the origin of `base` (scheme, host
/// and port; both are cache URLs, so a default port is written alike).
pub fn invalidation_target(base: &str, reference: &str) -> Option<String> {
    resolve(base, reference).filter(|t| origin_of(t) == origin_of(base))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prebuilt_cache_status_values_are_the_formatted_ones() {
        for params in ["hit", "hit; collapsed"] {
            assert_eq!(
                cache_status(params),
                HeaderValue::from_str(&format!("{CACHE_NAME}; {params}")).expect("value")
            );
        }
    }

    #[test]
    fn ports_are_written_in_decimal() {
        for p in [0u16, 1, 9, 10, 80, 443, 8080, 9999, 10000, 65535] {
            let mut s = String::from("x");
            push_decimal(&mut s, p);
            assert_eq!(s, format!("x{p}"));
        }
        let u = |s: &str| cache_url(&s.parse().expect("uri"));
        assert_eq!(u("http://a:1/").as_deref(), Some("http://a:1/"));
        assert_eq!(u("http://a:65535/").as_deref(), Some("http://a:65535/"));
        assert_eq!(
            primary_key("http://a/", Some("u"), true),
            format!("store-all\n{}\n{}", "http://a/", "u")
        );
        assert_eq!(
            primary_key("http://a/", None, true),
            "store-all\nhttp://a/\n-"
        );
        assert_eq!(primary_key("http://a/", Some("u"), false), "GET\nhttp://a/");
    }

    #[test]
    fn urls_keep_the_scheme_and_drop_default_ports() {
        let u = |s: &str| cache_url(&s.parse().expect("uri"));
        assert_eq!(
            u("http://Example.COM/a?b").as_deref(),
            Some("http://example.com/a?b")
        );
        assert_eq!(
            u("http://example.com:80").as_deref(),
            Some("http://example.com/")
        );
        assert_eq!(
            u("https://example.com:443/x").as_deref(),
            Some("https://example.com/x")
        );
        assert_eq!(
            u("https://example.com:8443/x").as_deref(),
            Some("https://example.com:8443/x")
        );
        assert_eq!(
            u("HTTPS://[::1]:8443/x").as_deref(),
            Some("https://[::1]:8443/x")
        );
        assert_eq!(u("ftp://example.com/x"), None);
        assert_eq!(u("/relative"), None);
        assert_eq!(origin_of("https://a.b:8/x/y"), "https://a.b:8");
    }

    #[test]
    fn references_resolve_against_the_target() {
        let b = "http://h.test/a/b?q";
        assert_eq!(resolve(b, "/x").as_deref(), Some("http://h.test/x"));
        assert_eq!(resolve(b, "c").as_deref(), Some("http://h.test/a/c"));
        assert_eq!(
            resolve(b, "https://o.test/y").as_deref(),
            Some("https://o.test/y")
        );
        assert_eq!(resolve(b, "//o.test/z").as_deref(), Some("http://o.test/z"));
    }

    /// RFC 3986 §5.4's base URI.
    const RFC_BASE: &str = "http://a/b/c/d;p?q";

    /// RFC 3986 §5.4.1 (normal examples) then §5.4.2 (abnormal ones):
    /// each reference and its target exactly as the RFC lists it. For
    /// `http:g` the RFC lists `http:g` for strict parsers and
    /// `http://a/b/c/g` for backward compatibility: `Url::join` (WHATWG)
    /// is the latter.
    const RFC_EXAMPLES: [(&str, &str); 42] = [
        // §5.4.1
        ("g:h", "g:h"),
        ("g", "http://a/b/c/g"),
        ("./g", "http://a/b/c/g"),
        ("g/", "http://a/b/c/g/"),
        ("/g", "http://a/g"),
        ("//g", "http://g"),
        ("?y", "http://a/b/c/d;p?y"),
        ("g?y", "http://a/b/c/g?y"),
        ("#s", "http://a/b/c/d;p?q#s"),
        ("g#s", "http://a/b/c/g#s"),
        ("g?y#s", "http://a/b/c/g?y#s"),
        (";x", "http://a/b/c/;x"),
        ("g;x", "http://a/b/c/g;x"),
        ("g;x?y#s", "http://a/b/c/g;x?y#s"),
        ("", "http://a/b/c/d;p?q"),
        (".", "http://a/b/c/"),
        ("./", "http://a/b/c/"),
        ("..", "http://a/b/"),
        ("../", "http://a/b/"),
        ("../g", "http://a/b/g"),
        ("../..", "http://a/"),
        ("../../", "http://a/"),
        ("../../g", "http://a/g"),
        // §5.4.2
        ("../../../g", "http://a/g"),
        ("../../../../g", "http://a/g"),
        ("/./g", "http://a/g"),
        ("/../g", "http://a/g"),
        ("g.", "http://a/b/c/g."),
        (".g", "http://a/b/c/.g"),
        ("g..", "http://a/b/c/g.."),
        ("..g", "http://a/b/c/..g"),
        ("./../g", "http://a/b/g"),
        ("./g/.", "http://a/b/c/g/"),
        ("g/./h", "http://a/b/c/g/h"),
        ("g/../h", "http://a/b/c/h"),
        ("g;x=1/./y", "http://a/b/c/g;x=1/y"),
        ("g;x=1/../y", "http://a/b/c/y"),
        ("g?y/./x", "http://a/b/c/g?y/./x"),
        ("g?y/../x", "http://a/b/c/g?y/../x"),
        ("g#s/./x", "http://a/b/c/g#s/./x"),
        ("g#s/../x", "http://a/b/c/g#s/../x"),
        ("http:g", "http://a/b/c/g"),
    ];

    /// What the cache keys each RFC target as, and so what the
    /// invalidation purges: the target without its fragment (the cache
    /// drops fragments: no request carries one), `/` for the empty path
    /// of `http://g` (RFC 9110 §4.2.3), and nothing for `g:h` (not an
    /// http(s) URL: nothing is cached there).
    fn rfc_key(target: &str) -> Option<String> {
        if target == "g:h" {
            return None;
        }
        let target = target.split('#').next().unwrap_or(target);
        Some(if target == "http://g" {
            "http://g/".to_string()
        } else {
            target.to_string()
        })
    }

    #[test]
    fn references_resolve_as_rfc_3986_section_5_4_lists_them() {
        for (reference, target) in RFC_EXAMPLES {
            // The resolution itself, fragments included; the url crate
            // writes the empty path of `http://g` as `/` (RFC 3986
            // §6.2.3: the same URI).
            let joined = url::Url::parse(RFC_BASE)
                .and_then(|base| base.join(reference))
                .expect(reference);
            let expected = if target == "http://g" {
                "http://g/"
            } else {
                target
            };
            assert_eq!(joined.as_str(), expected, "{reference:?}");
            // And as the cache keys it.
            assert_eq!(
                resolve(RFC_BASE, reference),
                rfc_key(target),
                "{reference:?}"
            );
        }
        // The cases the old hand-written join got wrong, spelled out.
        assert_eq!(
            resolve(RFC_BASE, "?y").as_deref(),
            Some("http://a/b/c/d;p?y")
        );
        assert_eq!(resolve(RFC_BASE, "../g").as_deref(), Some("http://a/b/g"));
        assert_eq!(
            resolve(RFC_BASE, "g;x?y#s").as_deref(),
            Some("http://a/b/c/g;x?y")
        );
    }

    #[test]
    fn the_invalidation_takes_every_same_origin_rfc_example_and_no_other() {
        for (reference, target) in RFC_EXAMPLES {
            // Every example stays on http://a except `g:h` and `//g`.
            let same_origin = !matches!(reference, "g:h" | "//g");
            assert_eq!(
                invalidation_target(RFC_BASE, reference),
                rfc_key(target).filter(|_| same_origin),
                "{reference:?}"
            );
        }
    }

    #[test]
    fn invalidation_targets_are_keyed_as_requests_are_and_stay_on_the_origin() {
        let b = "http://h.test:8080/list/all?page=1";
        let t = |r: &str| invalidation_target(b, r);
        assert_eq!(
            t("?page=2").as_deref(),
            Some("http://h.test:8080/list/all?page=2")
        );
        assert_eq!(t("../x").as_deref(), Some("http://h.test:8080/x"));
        assert_eq!(
            t("HTTP://H.TEST:8080/y#frag").as_deref(),
            Some("http://h.test:8080/y")
        );
        assert_eq!(t("//h.test:8080").as_deref(), Some("http://h.test:8080/"));
        // Another port, host or scheme is another origin.
        for other in [
            "http://h.test/x",
            "http://h.test:8081/x",
            "//other.test:8080/x",
            "https://h.test:8080/x",
            "mailto:a@h.test",
        ] {
            assert_eq!(t(other), None, "{other}");
        }
        // The default port is the port.
        let d = "https://h.test/a";
        assert_eq!(
            invalidation_target(d, "https://H.test:443/b").as_deref(),
            Some("https://h.test/b")
        );
        assert_eq!(invalidation_target(d, "http://h.test:443/b"), None);
        // A value that does not parse is ignored.
        for bad in ["http://", "http://[::1/x", "http://h.test:99999/", "//:80/"] {
            assert_eq!(invalidation_target(d, bad), None, "{bad}");
            assert_eq!(resolve(d, bad), None, "{bad}");
        }
        // And so is a base that does not.
        assert_eq!(resolve("not a url", "/x"), None);
        assert_eq!(invalidation_target("/relative", "/x"), None);
    }

    #[test]
    fn the_policy_request_never_carries_credentials() {
        let mut h = HeaderMap::new();
        h.insert(
            "proxy-authorization",
            HeaderValue::from_static("Basic c2VjcmV0"),
        );
        h.insert(
            "authorization",
            HeaderValue::from_static("Bearer topsecret"),
        );
        h.insert("cookie", HeaderValue::from_static("a=b"));
        h.insert("accept-language", HeaderValue::from_static("fr"));
        let vary = vec![
            "accept-language".to_string(),
            "proxy-authorization".to_string(),
        ];
        let p = policy_request(Method::GET, "http://h.test/", &h, &vary).expect("parts");
        assert!(p.headers.get("proxy-authorization").is_none());
        assert!(p.headers.get("cookie").is_none());
        assert_eq!(p.headers["authorization"], "[redacted]");
        assert_eq!(p.headers["accept-language"], "fr");
        assert_eq!(p.headers["host"], "h.test");
    }

    #[test]
    fn client_conditionals_against_stored_validators() {
        let mut stored = HeaderMap::new();
        stored.insert("etag", HeaderValue::from_static("\"v1\""));
        stored.insert(
            "last-modified",
            HeaderValue::from_static("Mon, 01 Jan 2024 00:00:00 GMT"),
        );
        let req = |k: &'static str, v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(k, HeaderValue::from_static(v));
            h
        };
        assert!(not_modified(
            &req("if-none-match", "\"v0\", W/\"v1\""),
            &stored
        ));
        assert!(not_modified(&req("if-none-match", "*"), &stored));
        assert!(!not_modified(&req("if-none-match", "\"v2\""), &stored));
        // If-None-Match wins over If-Modified-Since.
        let mut both = req("if-none-match", "\"v2\"");
        both.insert(
            "if-modified-since",
            HeaderValue::from_static("Tue, 02 Jan 2024 00:00:00 GMT"),
        );
        assert!(!not_modified(&both, &stored));
        assert!(not_modified(
            &req("if-modified-since", "Tue, 02 Jan 2024 00:00:00 GMT"),
            &stored
        ));
        assert!(not_modified(
            &req("if-modified-since", "Mon, 01 Jan 2024 00:00:00 GMT"),
            &stored
        ));
        assert!(!not_modified(
            &req("if-modified-since", "Sun, 31 Dec 2023 00:00:00 GMT"),
            &stored
        ));
        assert!(!not_modified(&req("if-modified-since", "garbage"), &stored));
        assert!(!not_modified(&HeaderMap::new(), &stored));
    }

    #[test]
    fn a_304_selects_a_stored_response_by_its_validator() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, HeaderValue::from_static(v));
            }
            h
        };
        let strong = h(&[("etag", "\"a\"")]);
        let weak = h(&[("etag", "W/\"a\"")]);
        assert!(selects(&strong, &strong));
        assert!(!selects(&strong, &h(&[("etag", "\"b\"")])));
        assert!(
            !selects(&weak, &strong),
            "strong comparison needs two strong tags"
        );
        assert!(selects(&strong, &weak));
        assert!(selects(&weak, &weak));
        assert!(!selects(&weak, &h(&[("etag", "W/\"b\"")])));
        assert!(!selects(&HeaderMap::new(), &strong));
        assert!(selects(&strong, &HeaderMap::new()));
        let lm = |d| h(&[("last-modified", d)]);
        assert!(selects(
            &lm("Mon, 01 Jan 2024 00:00:00 GMT"),
            &lm("Mon, 01 Jan 2024 00:00:00 GMT")
        ));
        assert!(!selects(
            &lm("Mon, 01 Jan 2024 00:00:00 GMT"),
            &lm("Tue, 02 Jan 2024 00:00:00 GMT")
        ));
    }

    #[test]
    fn the_policy_reads_directives_ages_and_dates_as_rfc_9111_says() {
        let mut h = HeaderMap::new();
        h.insert(
            "cache-control",
            HeaderValue::from_static("No-CaChE, MAX-AGE=60, Private=\"Set-Cookie, X-Y\""),
        );
        h.insert("age", HeaderValue::from_static("7200, 0"));
        h.insert(
            "expires",
            HeaderValue::from_static("Sun,  06 Nov 1994 08:49:37 GMT"),
        );
        h.insert(
            "last-modified",
            HeaderValue::from_static("Sunday, 06-Nov-94 08:49:37 GMT"),
        );
        h.insert("date", HeaderValue::from_static("yesterday"));
        let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
        normalise_for_policy(&mut h, now);
        assert_eq!(
            h["cache-control"],
            "no-cache, max-age=60, private=\"Set-Cookie, X-Y\""
        );
        assert_eq!(h["age"], "7200");
        assert_eq!(h["expires"], "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(h["last-modified"], "Sun, 06 Nov 1994 08:49:37 GMT");
        assert!(h.get("date").is_none());
        // The apparent age: received 100 s after its Date.
        let mut h = HeaderMap::new();
        h.insert("date", HeaderValue::from_static("Sun Sep  9 01:45:00 2001"));
        h.insert("age", HeaderValue::from_static("10"));
        normalise_for_policy(&mut h, now);
        assert_eq!(h["date"], "Sun, 09 Sep 2001 01:45:00 GMT");
        assert_eq!(h["age"], "100");
    }

    #[test]
    fn vary_star_and_names() {
        let mut h = HeaderMap::new();
        h.append(
            "vary",
            HeaderValue::from_static("Accept-Encoding, accept-language"),
        );
        h.append("vary", HeaderValue::from_static("Accept-Encoding"));
        assert_eq!(
            vary_names(&h),
            Some(vec![
                "accept-encoding".to_string(),
                "accept-language".to_string()
            ])
        );
        h.append("vary", HeaderValue::from_static("*"));
        assert_eq!(vary_names(&h), None);
    }

    #[test]
    fn a_304_replaces_fields_but_not_the_body_description() {
        let mut stored = HeaderMap::new();
        stored.insert("content-length", HeaderValue::from_static("10"));
        stored.insert("etag", HeaderValue::from_static("\"a\""));
        stored.append("link", HeaderValue::from_static("<a>"));
        stored.append("link", HeaderValue::from_static("<b>"));
        stored.insert("cache-control", HeaderValue::from_static("max-age=1"));
        let mut fresh = HeaderMap::new();
        fresh.insert("content-length", HeaderValue::from_static("0"));
        fresh.insert("cache-control", HeaderValue::from_static("max-age=60"));
        fresh.insert("connection", HeaderValue::from_static("close"));
        fresh.insert("content-type", HeaderValue::from_static("text/html"));
        fresh.insert("set-cookie", HeaderValue::from_static("id=client-a"));
        let m = merge_304(&stored, &fresh);
        assert_eq!(m["content-type"], "text/html");
        assert!(m.get("set-cookie").is_none());
        assert_eq!(m["content-length"], "10");
        assert_eq!(m["cache-control"], "max-age=60");
        assert_eq!(m.get_all("link").iter().count(), 2);
        assert!(m.get("connection").is_none());
    }
}
