//! Forwarding an allowed request: hop-by-hop headers removed, `Via` added,
//! bodies streamed both ways.

use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;

use super::client::{Body, HttpClient};
use super::respond;
use crate::fetch::error_chain;
use crate::net;

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("keep-alive"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes hop-by-hop headers, including those `Connection` lists.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
}

/// Appends our `Via` entry.
pub fn add_via(headers: &mut HeaderMap, via: &HeaderValue) {
    headers.append(header::VIA, via.clone());
}

/// Sends `req` (absolute URI) upstream and returns the response to relay.
/// Upstream failures become 502 (or 403 for a refused private destination),
/// a response that does not start within `timeout` a 504.
pub async fn forward(
    client: &HttpClient,
    mut req: Request<Body>,
    via: &HeaderValue,
    timeout: Duration,
) -> Response<Body> {
    strip_hop_by_hop(req.headers_mut());
    add_via(req.headers_mut(), via);
    // The proxy speaks its own HTTP version on each side.
    *req.version_mut() = http::Version::HTTP_11;
    // The target URI is authoritative (RFC 9112 §3.2.2): the client sets
    // Host (HTTP/1.1) or :authority (HTTP/2) from it.
    req.headers_mut().remove(header::HOST);
    // Kept for error messages; cloning a Uri shares its bytes.
    let target = req.uri().clone();
    match tokio::time::timeout(timeout, client.request(req)).await {
        Err(_) => respond::text(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "Upstream timeout: no response from {target} within {}\n",
                humantime::format_duration(timeout)
            ),
        ),
        Ok(Err(e)) => {
            if let Some(p) = net::find_private_destination(&e) {
                return respond::refused(&p.to_string());
            }
            tracing::debug!(%target, error = %error_chain(&e), "upstream request failed");
            let reason = crate::tls::upstream_error_reason(&e, target.host().unwrap_or_default());
            respond::text(
                StatusCode::BAD_GATEWAY,
                format!("Upstream error for {target}: {reason}\n"),
            )
        }
        Ok(Ok(resp)) => {
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            add_via(&mut parts.headers, via);
            parts.version = http::Version::HTTP_11;
            Response::from_parts(parts, body.boxed())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_connection_listed_headers_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, X-Secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("proxy-authorization", HeaderValue::from_static("Basic x"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key(header::ACCEPT));
    }
}
