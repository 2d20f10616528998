//! Forwarding an allowed request: hop-by-hop headers removed, `Via` added,
//! bodies streamed both ways.

use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Body as _;

use super::phases::Forwarded;
use super::respond;
use crate::http::body::Body;
use crate::http::origin::{Origin, Scheme};
use crate::upstream::informational::{Flooded, Inline, capped, capped_inline};
use crate::upstream::{ErrorKind, HttpClient, Pool, UpstreamError};

pub(crate) use crate::http::headers::strip_hop_by_hop;
use crate::http::headers::{TRANSFER_ENCODING_PRESENT, has, hop_by_hop_present, strip_present};

/// Appends our `Via` entry.
pub(crate) fn add_via(headers: &mut HeaderMap, via: &HeaderValue) {
    headers.append(header::VIA, via.clone());
}

/// True if `headers` hold one Host and it is byte for byte the one the
/// upstream client derives from an `http` URI for HTTP/1.1 (the host, then
/// `:port` unless the port is absent or 80): here, when it equals the URI's
/// authority and that has no user info and no port the client would drop
/// (80) or rewrite (leading zeros). `https` may go out over HTTP/2, which
/// carries no Host, so it always takes the client's.
fn host_is_derived(headers: &HeaderMap, uri: &http::Uri) -> bool {
    let Some(authority) = uri.authority().map(|a| a.as_str().as_bytes()) else {
        return false;
    };
    let mut values = headers.get_all(header::HOST).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    // One pass: user info, the last ':', the last ']' (an IPv6 literal's end).
    let (mut at, mut colon, mut bracket) = (false, None, None);
    for (i, &b) in authority.iter().enumerate() {
        match b {
            b'@' => at = true,
            b':' => colon = Some(i),
            b']' => bracket = Some(i),
            _ => {}
        }
    }
    if value.as_bytes() != authority || uri.scheme_str() != Some("http") || at {
        return false;
    }
    // The port: after the last ':' unless that is inside an IPv6 literal.
    let port = match colon {
        Some(i) if bracket.is_none_or(|j| j < i) => &authority[i + 1..],
        _ => return true,
    };
    // Written back as a number: no sign, no leading zero, not the default.
    if !port.first().is_some_and(|d| (b'1'..=b'9').contains(d)) || port.len() > 5 {
        return false;
    }
    let mut n = 0u32;
    for &d in port {
        if !d.is_ascii_digit() {
            return false;
        }
        n = n * 10 + u32::from(d - b'0');
    }
    n <= u32::from(u16::MAX) && n != 80
}

/// The `Host` an HTTP/1.1 request for `uri` carries, as hyper-util's
/// client writes it: the host as written (IPv6 bracketed), then `:port`
/// unless it is absent or the scheme's default (80, 443 for `https`).
fn host_header(uri: &Uri) -> HeaderValue {
    let host = uri.host().unwrap_or_default();
    let default = if uri.scheme() == Some(&http::uri::Scheme::HTTPS) {
        443
    } else {
        80
    };
    let text = match uri.port_u16().filter(|&p| p != default) {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    respond::header_value(&text)
}

/// Writes a target whose host ends in a dot (`http://localhost.:8081/`)
/// as its origin's host, without it: the origin is the name without the
/// dot (robots.txt is fetched from it, with that `Host`), and the request
/// goes with the same `Host`, not with another name for the same site
/// that a virtual-host origin may serve otherwise.
pub(crate) fn drop_trailing_dot(req: &mut Request<Body>, origin: &Origin) {
    // A host ends in a dot only where its authority has one at its end or
    // before a ':': one look at the bytes spares most requests the parse
    // of the authority that `host()` makes.
    let Some(authority) = req.uri().authority().map(|a| a.as_str().as_bytes()) else {
        return;
    };
    if !authority.ends_with(b".") && !authority.windows(2).any(|w| w == b".:") {
        return;
    }
    if !req.uri().host().is_some_and(|h| h.ends_with('.')) {
        return;
    }
    let path = crate::http::origin::path_of(req.uri());
    if let Ok(uri) = origin.url(&path).parse::<Uri>() {
        *req.uri_mut() = uri;
    }
}

/// Makes a request body of unknown length (the client's own was chunked:
/// its Transfer-Encoding, hop-by-hop, is gone by now) go out chunked.
/// hyper's client would otherwise send it chunked for most methods but as
/// no body at all for GET and HEAD, and the origin would get the request
/// without the body the client sent. (Over HTTP/2 the header is dropped and
/// the body sent in frames.)
pub(super) fn frame_request_body(req: &mut Request<Body>) {
    let body = req.body();
    if body.is_end_stream()
        || body.size_hint().exact().is_some()
        || req.headers().contains_key(header::CONTENT_LENGTH)
    {
        return;
    }
    req.headers_mut().insert(
        header::TRANSFER_ENCODING,
        HeaderValue::from_static("chunked"),
    );
}

/// True for a request whose method defines no meaning for a body (RFC
/// 9110: GET §9.3.1, HEAD §9.3.2, DELETE §9.3.5; OPTIONS §9.3.7 allows
/// one with a Content-Type but defines no use for it, and CORS preflights
/// never send one) and which carries one anyway: a Content-Length above
/// zero or a chunked body (`Content-Length: 0` is no body). Many origins
/// (Python's `BaseHTTPRequestHandler` apps among them) never read such a
/// body, and read it as the next request on the connection instead: a
/// path the proxy never judged, fetched without an audit line, its
/// response handed to whichever request comes next on that connection.
pub(crate) fn undefined_body(req: &Request<Body>) -> bool {
    let method = req.method();
    let bodyless = method == Method::GET
        || method == Method::HEAD
        || method == Method::DELETE
        || method == Method::OPTIONS;
    let body = req.body();
    bodyless && !body.is_end_stream() && body.size_hint().exact() != Some(0)
}

/// The Transfer-Encoding of a message, if it is anything but `chunked`
/// alone. hyper undoes only chunked; Transfer-Encoding is hop-by-hop and
/// removed, so a body under another coding (`gzip, chunked`) would reach
/// the other side still coded, with nothing saying so.
pub(crate) fn other_transfer_coding(headers: &HeaderMap) -> Option<String> {
    if !has(headers, &header::TRANSFER_ENCODING) {
        return None;
    }
    let mut codings = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(|c| c.trim_ascii())
        .filter(|c| !c.is_empty());
    match (codings.next(), codings.next()) {
        (None, _) => None,
        (Some(c), None) if c.eq_ignore_ascii_case(b"chunked") => None,
        _ => {
            let all: Vec<&[u8]> = headers
                .get_all(header::TRANSFER_ENCODING)
                .iter()
                .map(HeaderValue::as_bytes)
                .collect();
            Some(String::from_utf8_lossy(&all.join(&b", "[..])).into_owned())
        }
    }
}

/// Sends `req` (absolute URI) upstream and returns the response to relay.
/// A request without a body goes over `upstream`, driven in this task,
/// unless its origin is an `https` one known to speak HTTP/2; others over
/// the pooled `client` (one multiplexed connection per HTTP/2 origin).
/// Upstream failures become 502 (or 403 for a refused private
/// destination), a response that does not start within `timeout` a 504,
/// more than `max_informational` 1xx responses before it a 502.
pub(crate) async fn forward(
    client: &HttpClient,
    upstream: &Arc<Pool>,
    origin: &Origin,
    mut req: Request<Body>,
    via: Option<&HeaderValue>,
    timeout: ResponseTimeout,
    max_informational: usize,
) -> Forwarded {
    let (deadline, timeout) = (timeout.started + timeout.after, timeout.after);
    strip_hop_by_hop(req.headers_mut());
    if undefined_body(&req) {
        // Only for an origin in `upstream.allow_bodies_for`: should it
        // ignore the body after all and read it as a request, the
        // connection ends after this exchange, so no response to it can be
        // taken for the next request's.
        req.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    frame_request_body(&mut req);
    if let Some(via) = via {
        add_via(req.headers_mut(), via);
    }
    // The proxy speaks its own HTTP version on each side.
    *req.version_mut() = http::Version::HTTP_11;
    // The target URI is authoritative (RFC 9112 §3.2.2): Host is set from
    // it. A Host that already is exactly that stays, sparing the formatting.
    let host_is_derived = host_is_derived(req.headers(), req.uri());
    // A request with a body goes over the pooled client, whose connection
    // task keeps sending the body whatever the client reads: driven here, a
    // client that reads nothing until its upload is done and an origin that
    // answers at length before reading it would wait on each other.
    // `Err` is the answer for a request that got no response.
    let inline = req.body().is_end_stream()
        && match origin.scheme() {
            Scheme::Http => true,
            Scheme::Https => !upstream.speaks_h2(origin),
        };
    let (sent, target): (Result<Response<Body>, Forwarded>, Uri) = if inline {
        if !host_is_derived {
            let host = host_header(req.uri());
            req.headers_mut().insert(header::HOST, host);
        }
        let origin_form = match req.uri().path_and_query() {
            Some(pq) => Uri::from(pq.clone()),
            None => Uri::from_static("/"),
        };
        // The absolute target, kept for error messages.
        let target = std::mem::replace(req.uri_mut(), origin_form);
        let send = |req| upstream.send(origin, req);
        let sent = match capped_inline(req, max_informational, deadline, send).await {
            Inline::Sent(Ok(resp)) => Ok(resp),
            Inline::Sent(Err(e)) => {
                let e = e.for_host(target.host().unwrap_or_default());
                Err(upstream_error(&e, &target))
            }
            Inline::Flooded(flooded) => Err(upstream_flooded(flooded, &target)),
            Inline::TimedOut => Err(upstream_timeout(&target, timeout)),
        };
        (sent, target)
    } else {
        // Kept for error messages; cloning a Uri shares its bytes.
        let target = req.uri().clone();
        // The client sets Host (HTTP/1.1) or :authority (HTTP/2).
        if !host_is_derived {
            req.headers_mut().remove(header::HOST);
        }
        let sent = capped(req, max_informational, |req| client.request(req));
        let sent = match tokio::time::timeout_at(deadline, sent).await {
            Ok(Ok(Ok(resp))) => Ok(resp.map(crate::http::body::incoming)),
            Ok(Ok(Err(e))) => {
                let e = UpstreamError::new(e, target.host().unwrap_or_default());
                Err(upstream_error(&e, &target))
            }
            Ok(Err(flooded)) => Err(upstream_flooded(flooded, &target)),
            Err(_) => Err(upstream_timeout(&target, timeout)),
        };
        (sent, target)
    };
    match sent {
        Ok(resp) => relay_response(resp, &target, via),
        Err(answer) => answer,
    }
}

/// How long a request waits for its response to start: `after`, counted
/// from `started` (the clock read that also times the exchange).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ResponseTimeout {
    pub(crate) started: tokio::time::Instant,
    pub(crate) after: Duration,
}

/// An origin's response made ready for the client: a transfer coding that
/// cannot be relayed is a 502, a `Content-Length` that `Transfer-Encoding`
/// overrides is dropped, hop-by-hop headers are removed and `Via` added.
pub(super) fn relay_response(
    resp: Response<Body>,
    target: &Uri,
    via: Option<&HeaderValue>,
) -> Forwarded {
    let (mut parts, body) = resp.into_parts();
    // One look at the names says which hop-by-hop headers are there.
    let present = hop_by_hop_present(&parts.headers);
    if present & TRANSFER_ENCODING_PRESENT != 0 {
        if let Some(coding) = other_transfer_coding(&parts.headers) {
            return Forwarded::upstream_failed(respond::text(
                StatusCode::BAD_GATEWAY,
                format!(
                    "Upstream error for {target}: the response has Transfer-Encoding {coding:?}, \
                     which robots-proxy cannot relay as it was sent (only chunked is supported)\n"
                ),
            ));
        }
        // The encoding overrides the length (RFC 9112 §6.3), and hyper read
        // the body that way. Kept once Transfer-Encoding (hop-by-hop) is
        // removed, the length would frame the body to the client and cut
        // it short.
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    strip_present(&mut parts.headers, present);
    if let Some(via) = via {
        add_via(&mut parts.headers, via);
    }
    parts.version = http::Version::HTTP_11;
    Forwarded::Response(Response::from_parts(parts, body))
}

/// The answer to a request whose response did not start within `timeout`.
fn upstream_timeout(target: &Uri, timeout: Duration) -> Forwarded {
    Forwarded::upstream_failed(respond::text(
        StatusCode::GATEWAY_TIMEOUT,
        format!(
            "Upstream timeout: no response from {target} within {}\n",
            humantime::format_duration(timeout)
        ),
    ))
}

/// The answer to a request the origin sent too many 1xx responses to.
fn upstream_flooded(flooded: Flooded, target: &Uri) -> Forwarded {
    tracing::debug!(%target, "{flooded}");
    Forwarded::upstream_failed(respond::text(
        StatusCode::BAD_GATEWAY,
        format!("Upstream error for {target}: {flooded}\n"),
    ))
}

/// The answer to a request that got no response from `target`: 403 for a
/// refused private destination, else 502 with the reason.
fn upstream_error(e: &UpstreamError, target: &Uri) -> Forwarded {
    if e.kind() == ErrorKind::Refused {
        return Forwarded::Refused(e.reason().to_string());
    }
    tracing::debug!(%target, error = %e.chain(), "upstream request failed");
    Forwarded::upstream_failed(respond::text(
        StatusCode::BAD_GATEWAY,
        format!("Upstream error for {target}: {}\n", e.reason()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_is_kept_only_when_it_is_what_the_client_derives() {
        let derived = |uri: &str, hosts: &[&str]| {
            let mut h = HeaderMap::new();
            for v in hosts {
                h.append(header::HOST, HeaderValue::from_str(v).expect("value"));
            }
            host_is_derived(&h, &uri.parse().expect("uri"))
        };
        assert!(derived("http://a.example/x", &["a.example"]));
        assert!(!derived("http://a.example:80/x", &["a.example"]));
        assert!(derived("http://a.example:8080/x", &["a.example:8080"]));
        assert!(derived("http://127.0.0.1:8080/", &["127.0.0.1:8080"]));
        assert!(derived("http://[::1]:8080/", &["[::1]:8080"]));
        assert!(derived("http://[::1]/", &["[::1]"]));
        assert!(!derived("http://a.example:/x", &["a.example:"]));
        assert!(!derived("http://u@a.example/x", &["u@a.example"]));
        assert!(!derived("http://a.example:80/x", &["a.example:80"]));
        assert!(!derived("http://a.example/x", &["A.example"]));
        assert!(!derived("http://a.example/x", &["a.example:80"]));
        assert!(!derived("http://a.example:8080/x", &["a.example:08080"]));
        assert!(!derived("http://a.example:8080/x", &["a.example:+8080"]));
        assert!(!derived("http://a.example:8080/x", &["a.example:8081"]));
        assert!(!derived("http://a.example:8080/x", &["a.example"]));
        assert!(!derived("http://a.example/x", &["b.example"]));
        assert!(!derived("http://a.example/x", &[]));
        assert!(!derived("http://a.example/x", &["a.example", "a.example"]));
        assert!(!derived("https://a.example/x", &["a.example"]));
    }

    /// Kept only when equal to what hyper-util's client writes: its rule
    /// (host, then the port unless absent or the scheme's default).
    #[test]
    fn a_kept_host_equals_the_one_the_client_would_write() {
        for uri in [
            "http://a.example/",
            "http://a.example:80/",
            "http://a.example:8080/",
            "http://a.example:080/",
            "http://a.example:00/",
            "http://a.example:65535/",
            "http://A.Example:1/",
            "http://127.0.0.1:3128/",
            "http://[::1]/",
            "http://[::1]:80/",
            "http://[::1]:81/",
            "http://a.example:/",
            "http://u:p@a.example:81/",
            "http://a.example./",
        ] {
            let uri: http::Uri = uri.parse().expect("uri");
            let authority = uri.authority().expect("authority").as_str();
            let host = uri.host().expect("host");
            let client = match uri.port().filter(|p| p.as_u16() != 80) {
                Some(port) => format!("{host}:{port}"),
                None => host.to_string(),
            };
            let mut h = HeaderMap::new();
            h.insert(
                header::HOST,
                HeaderValue::from_str(authority).expect("value"),
            );
            if host_is_derived(&h, &uri) {
                assert_eq!(authority, client, "{uri}");
            }
            // What the proxy writes when it does not keep the client's.
            assert_eq!(host_header(&uri), client.as_str(), "{uri}");
        }
    }
}
