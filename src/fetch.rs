//! Retrieving robots.txt with RFC 9309's status-code policy.
//!
//! | result                                   | outcome                    |
//! |------------------------------------------|----------------------------|
//! | 2xx                                      | parse the first 500 KiB    |
//! | 3xx                                      | follow, up to `max_redirects` hops, across hosts |
//! | more redirects than that                 | unavailable (allow all)    |
//! | 4xx except 429                           | unavailable (allow all)    |
//! | 429, 5xx, other codes, network errors, timeouts | unreachable (disallow all) |

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::header::{ACCEPT, CACHE_CONTROL, LOCATION, USER_AGENT};
use http::{Request, StatusCode, Uri};
use http_body_util::BodyExt;

use crate::origin::Origin;
use crate::proxy::client::{HttpClient, empty_body};
use crate::robots::Robots;
use crate::robots::parse::MAX_BYTES;

/// What a robots.txt fetch concluded.
#[derive(Debug)]
pub enum Outcome {
    /// A 2xx response, parsed.
    Parsed(Robots),
    /// 4xx (not 429) or too many redirects: no restrictions apply.
    Unavailable(String),
    /// 429, 5xx or a network failure: everything is disallowed.
    Unreachable(String),
    /// The destination policy forbids connecting to the origin.
    Refused(String),
    /// TLS with the origin failed (untrusted or mismatched certificate...).
    BadTls(String),
}

/// A finished fetch.
#[derive(Debug)]
pub struct Fetched {
    pub outcome: Outcome,
    /// Final HTTP status, if a response arrived.
    pub status: Option<u16>,
    /// `Cache-Control: max-age` of the final response.
    pub max_age: Option<Duration>,
    /// How long the fetch took.
    pub elapsed: Duration,
}

/// Settings for [`fetch`].
#[derive(Clone, Debug)]
pub struct FetchSettings {
    pub user_agent: String,
    pub timeout: Duration,
    pub max_redirects: u8,
}

/// Fetches `origin`'s robots.txt. Never fails: errors are an [`Outcome`].
pub async fn fetch(client: &HttpClient, origin: &Origin, settings: &FetchSettings) -> Fetched {
    let start = Instant::now();
    let result =
        tokio::time::timeout(settings.timeout, fetch_chain(client, origin, settings)).await;
    let (outcome, status, max_age) = match result {
        Ok(r) => r,
        Err(_) => (
            Outcome::Unreachable(format!(
                "timed out after {} fetching {}",
                humantime::format_duration(settings.timeout),
                origin.robots_url()
            )),
            None,
            None,
        ),
    };
    Fetched {
        outcome,
        status,
        max_age,
        elapsed: start.elapsed(),
    }
}

async fn fetch_chain(
    client: &HttpClient,
    origin: &Origin,
    settings: &FetchSettings,
) -> (Outcome, Option<u16>, Option<Duration>) {
    let mut url: Uri = match origin.robots_url().parse() {
        Ok(u) => u,
        Err(e) => {
            return (
                Outcome::Unreachable(format!("bad robots.txt URL: {e}")),
                None,
                None,
            );
        }
    };
    let mut hops = 0u8;
    loop {
        let request = Request::get(url.clone())
            .header(USER_AGENT, settings.user_agent.as_str())
            .header(ACCEPT, "text/plain, */*;q=0.5")
            .body(empty_body());
        let request = match request {
            Ok(r) => r,
            Err(e) => {
                return (
                    Outcome::Unreachable(format!("bad request: {e}")),
                    None,
                    None,
                );
            }
        };
        let response = match client.request(request).await {
            Ok(r) => r,
            Err(e) => {
                if let Some(p) = crate::net::find_private_destination(&e) {
                    return (Outcome::Refused(p.to_string()), None, None);
                }
                if crate::tls::is_tls_failure(&e) {
                    let host = url.host().unwrap_or_default();
                    let reason = crate::tls::upstream_error_reason(&e, host);
                    return (
                        Outcome::BadTls(format!("fetching {url}: {reason}")),
                        None,
                        None,
                    );
                }
                return (
                    Outcome::Unreachable(format!("fetching {url}: {}", error_chain(&e))),
                    None,
                    None,
                );
            }
        };
        let status = response.status();
        let code = Some(status.as_u16());
        if status.is_redirection() {
            if hops >= settings.max_redirects {
                return (
                    Outcome::Unavailable(format!(
                        "more than {} redirects fetching {}",
                        settings.max_redirects,
                        origin.robots_url()
                    )),
                    code,
                    None,
                );
            }
            let next = response
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|loc| resolve_location(&url, loc));
            match next {
                Some(next) => {
                    hops += 1;
                    url = next;
                    continue;
                }
                None => {
                    return (
                        Outcome::Unavailable(format!(
                            "{status} from {url} without a usable Location"
                        )),
                        code,
                        None,
                    );
                }
            }
        }
        let max_age = max_age(response.headers());
        if status.is_success() {
            return match read_capped(response.into_body(), MAX_BYTES + 1).await {
                Ok(body) => (parse_off_the_workers(body).await, code, max_age),
                Err(e) => (
                    Outcome::Unreachable(format!("reading {url}: {e}")),
                    code,
                    None,
                ),
            };
        }
        let outcome = if status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS {
            Outcome::Unavailable(format!("{status} from {url}"))
        } else {
            Outcome::Unreachable(format!("{status} from {url}"))
        };
        return (outcome, code, max_age);
    }
}

/// Parses a fetched file on the blocking pool: a large one takes
/// milliseconds, which on an async worker would stall every connection it
/// serves.
async fn parse_off_the_workers(body: Bytes) -> Outcome {
    match tokio::task::spawn_blocking(move || Robots::parse(&body)).await {
        Ok(robots) => Outcome::Parsed(robots),
        Err(e) => Outcome::Unreachable(format!("internal error parsing robots.txt: {e}")),
    }
}

/// Reads at most `limit` bytes of a body; the rest is not read.
async fn read_capped(mut body: hyper::body::Incoming, limit: usize) -> Result<Bytes, hyper::Error> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            let room = limit - buf.len();
            buf.extend_from_slice(&data[..data.len().min(room)]);
            if buf.len() >= limit {
                break;
            }
        }
    }
    Ok(buf.freeze())
}

/// Resolves a `Location` header against the URL that returned it.
fn resolve_location(base: &Uri, location: &str) -> Option<Uri> {
    let location = location.trim();
    let lower = location.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return location.parse().ok();
    }
    if lower.contains("://") {
        return None; // another scheme: not followed
    }
    let scheme = base.scheme_str()?;
    let authority = base.authority()?.as_str();
    let abs = if let Some(rest) = location.strip_prefix("//") {
        format!("{scheme}://{rest}")
    } else if location.starts_with('/') {
        format!("{scheme}://{authority}{location}")
    } else {
        let path = base.path();
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        format!("{scheme}://{authority}{dir}{location}")
    };
    abs.parse().ok()
}

/// `max-age` from `Cache-Control` (`s-maxage` is for shared caches: this
/// cache is one, so it wins when present).
fn max_age(headers: &http::HeaderMap) -> Option<Duration> {
    let mut max_age = None;
    let mut s_maxage = None;
    for value in headers.get_all(CACHE_CONTROL) {
        let Ok(value) = value.to_str() else { continue };
        for directive in value.split(',') {
            let directive = directive.trim();
            let Some((name, v)) = directive.split_once('=') else {
                continue;
            };
            let Ok(secs) = v.trim().trim_matches('"').parse::<u64>() else {
                continue;
            };
            match name.trim().to_ascii_lowercase().as_str() {
                "max-age" => max_age = Some(Duration::from_secs(secs)),
                "s-maxage" => s_maxage = Some(Duration::from_secs(secs)),
                _ => {}
            }
        }
    }
    s_maxage.or(max_age)
}

/// An error and its causes on one line: `a: b: c`.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    for e in crate::net::causes(err).skip(1) {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_against_the_base() {
        let base: Uri = "http://a.example:8080/robots.txt".parse().expect("uri");
        let r = |l: &str| resolve_location(&base, l).map(|u| u.to_string());
        assert_eq!(
            r("/r2.txt").as_deref(),
            Some("http://a.example:8080/r2.txt")
        );
        assert_eq!(r("r3.txt").as_deref(), Some("http://a.example:8080/r3.txt"));
        assert_eq!(
            r("//b.example/robots.txt").as_deref(),
            Some("http://b.example/robots.txt")
        );
        assert_eq!(
            r("https://c.example/x").as_deref(),
            Some("https://c.example/x")
        );
        assert_eq!(r("ftp://c.example/x"), None);
    }

    #[test]
    fn max_age_reads_cache_control() {
        let mut h = http::HeaderMap::new();
        h.insert(CACHE_CONTROL, "public, max-age=3600".parse().expect("hv"));
        assert_eq!(max_age(&h), Some(Duration::from_secs(3600)));
        h.insert(CACHE_CONTROL, "no-cache".parse().expect("hv"));
        assert_eq!(max_age(&h), None);
    }
}
