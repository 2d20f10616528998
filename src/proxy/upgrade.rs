//! Protocol upgrades (WebSocket): a judged request that asks to switch
//! protocols goes to the origin on a connection of its own with its
//! `Upgrade` intact; on `101 Switching Protocols` both sides are joined and
//! bytes are relayed as they are, under the tunnel idle timeout and the
//! shutdown grace like any tunnel.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;

use super::forward::{add_via, frame_request_body, relay_response, strip_hop_by_hop};
use super::phases::{Forwarded, Outcome};
use super::respond;
use crate::http::body::Body;
use crate::http::destination;
use crate::http::origin::{Origin, Scheme};
use crate::server::ConnectionHold;
use crate::server::relay::relay;
use crate::upstream::dial::url_host;
use crate::upstream::informational::capped;
use crate::upstream::{ErrorKind, UpstreamError, connect_upstream};

/// Strips hop-by-hop headers but keeps the WebSocket upgrade itself
/// (`Upgrade: websocket`, `Connection: upgrade`); any other protocol the
/// client offered alongside is dropped.
fn keep_upgrade(headers: &mut HeaderMap) {
    strip_hop_by_hop(headers);
    headers.remove("http2-settings");
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
}

/// How an upgrade is forwarded.
pub(crate) struct UpgradeSettings<'a> {
    pub(crate) policy: &'a destination::Policy,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) tunnel_idle_timeout: Duration,
    /// `upstream.max_informational`: 1xx responses before the answer (101
    /// is the answer here, not one of them).
    pub(crate) max_informational: usize,
    /// Upstream TLS for `https` origins (its ALPN is replaced by
    /// `http/1.1`: an upgrade is an HTTP/1.1 mechanism).
    pub(crate) tls: &'a Arc<rustls::ClientConfig>,
    pub(crate) via: Option<&'a HeaderValue>,
    pub(crate) peer: SocketAddr,
}

/// Sends the upgrade request `req` (absolute URI on `origin`) and returns
/// the origin's answer; on 101 the two connections are relayed in a task
/// that keeps the client connection's hold (its slot and its part in
/// shutdown) until it ends.
pub(crate) async fn forward(
    origin: &Origin,
    mut req: Request<Body>,
    s: UpgradeSettings<'_>,
) -> Forwarded {
    let client_side = hyper::upgrade::on(&mut req);
    let hold = req.extensions().get::<Arc<ConnectionHold>>().cloned();
    keep_upgrade(req.headers_mut());
    if let Some(via) = s.via {
        add_via(req.headers_mut(), via);
    }
    *req.version_mut() = http::Version::HTTP_11;
    frame_request_body(&mut req);
    let target = req.uri().clone();
    if let Some(authority) = target.authority() {
        match HeaderValue::from_str(authority.as_str()) {
            Ok(host) => {
                req.headers_mut().insert(header::HOST, host);
            }
            Err(_) => {
                return Forwarded::Failed(
                    Outcome::BadRequest,
                    respond::text(StatusCode::BAD_REQUEST, "Bad request target\n"),
                );
            }
        }
    }
    *req.uri_mut() = match target.path_and_query() {
        Some(pq) => Uri::from(pq.clone()),
        None => Uri::from_static("/"),
    };
    let host = url_host(origin);
    let exchange = async {
        let tcp = connect_upstream(origin, s.policy, s.connect_timeout).await?;
        match origin.scheme() {
            Scheme::Http => send(TokioIo::new(tcp), req, &host, s.max_informational).await,
            Scheme::Https => {
                let mut config = (**s.tls).clone();
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                let name = ServerName::try_from(origin.host().to_string())
                    .map_err(|e| UpstreamError::new(e, &host))?;
                let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
                    .connect(name, tcp)
                    .await
                    .map_err(|e| UpstreamError::new(e, &host))?;
                send(TokioIo::new(tls), req, &host, s.max_informational).await
            }
        }
    };
    let mut resp = match tokio::time::timeout(s.response_timeout, exchange).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) if e.kind() == ErrorKind::Refused => {
            return Forwarded::Refused(e.reason().to_string());
        }
        Ok(Err(e)) => {
            tracing::debug!(%target, error = %e, "upgrade request failed");
            return Forwarded::upstream_failed(respond::text(
                StatusCode::BAD_GATEWAY,
                format!("Upstream error for {target}: {e}\n"),
            ));
        }
        Err(_) => {
            return Forwarded::upstream_failed(respond::text(
                StatusCode::GATEWAY_TIMEOUT,
                format!("Upstream timeout: no answer to the upgrade from {target}\n"),
            ));
        }
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return relay_response(resp.map(crate::http::body::incoming), &target, s.via);
    }
    if !crate::http::headers::names_websocket(resp.headers()) {
        return Forwarded::upstream_failed(respond::text(
            StatusCode::BAD_GATEWAY,
            format!(
                "Upstream error for {target}: it switched to a protocol other than WebSocket\n"
            ),
        ));
    }
    let origin_side = hyper::upgrade::on(&mut resp);
    let (idle, peer) = (s.tunnel_idle_timeout, s.peer);
    tokio::spawn(async move {
        let stop = hold.as_ref().map(|h| h.stop());
        let _hold = hold;
        match tokio::try_join!(client_side, origin_side) {
            Ok((client_io, origin_io)) => {
                relay(
                    TokioIo::new(client_io),
                    TokioIo::new(origin_io),
                    idle,
                    stop,
                    peer,
                )
                .await;
            }
            Err(e) => tracing::debug!(client = %peer, error = %e, "upgrade not completed"),
        }
    });
    keep_upgrade(resp.headers_mut());
    if let Some(via) = s.via {
        add_via(resp.headers_mut(), via);
    }
    Forwarded::Response(resp.map(crate::http::body::incoming))
}

/// One request on a new HTTP/1.1 connection that may be upgraded; more
/// than `max_informational` 1xx responses before the answer are an error.
async fn send<IO>(
    io: IO,
    req: Request<Body>,
    host: &str,
    max_informational: usize,
) -> Result<Response<hyper::body::Incoming>, UpstreamError>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| UpstreamError::new(e, host))?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "upgrade connection ended with an error");
        }
    });
    match capped(req, max_informational, |req| sender.send_request(req)).await {
        Ok(sent) => sent.map_err(|e| UpstreamError::new(e, host)),
        Err(flooded) => Err(UpstreamError::new(flooded, host)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::headers::is_upgrade;

    #[test]
    fn only_websocket_is_an_upgrade() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        for other in ["h2c", "tcp", "websocketx", "TLS/1.0, h2c"] {
            h.insert(
                header::UPGRADE,
                HeaderValue::from_str(other).expect("value"),
            );
            assert!(!is_upgrade(&h), "{other}");
        }
        for ws in ["websocket", "WebSocket", "h2c, websocket"] {
            h.insert(header::UPGRADE, HeaderValue::from_str(ws).expect("value"));
            assert!(is_upgrade(&h), "{ws}");
        }
    }

    #[test]
    fn an_upgrade_needs_the_header_and_the_connection_option() {
        let mut h = HeaderMap::new();
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert!(!is_upgrade(&h));
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        assert!(is_upgrade(&h));
        keep_upgrade(&mut h);
        assert_eq!(
            h.get(header::UPGRADE).map(|v| v.as_bytes()),
            Some(&b"websocket"[..])
        );
        assert_eq!(
            h.get(header::CONNECTION).map(|v| v.as_bytes()),
            Some(&b"upgrade"[..])
        );
        h.remove(header::UPGRADE);
        assert!(!is_upgrade(&h));
    }
}
