//! CONNECT: blind tunnels (host-level decision only) and, with a CA, TLS
//! interception so every inner request is judged by path.

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::Proxy;
use super::client::{Body, empty_body};
use super::respond;
use crate::audit::Record;
use crate::net;
use crate::origin::{Origin, Scheme};

/// Parses a CONNECT target (`host:port`, `[v6]:port`).
fn connect_origin(req: &Request<Incoming>) -> Result<Origin, String> {
    let authority = req
        .uri()
        .authority()
        .ok_or_else(|| "CONNECT needs host:port".to_string())?;
    let port = authority
        .port_u16()
        .ok_or_else(|| "CONNECT needs an explicit port".to_string())?;
    let scheme = if port == 80 {
        Scheme::Http
    } else {
        Scheme::Https
    };
    Origin::new(scheme, authority.host(), Some(port)).map_err(|e| e.to_string())
}

/// Handles a CONNECT request.
pub async fn handle(
    proxy: Arc<Proxy>,
    client: SocketAddr,
    req: Request<Incoming>,
) -> Response<Body> {
    let origin = match connect_origin(&req) {
        Ok(o) => o,
        Err(e) => return respond::text(StatusCode::BAD_REQUEST, format!("Bad CONNECT: {e}\n")),
    };
    tunnel(proxy, client, origin, req).await
}

/// A blind tunnel: only a host-level decision (is `/` allowed?) is possible.
async fn tunnel(
    proxy: Arc<Proxy>,
    client: SocketAddr,
    origin: Origin,
    req: Request<Incoming>,
) -> Response<Body> {
    let agent = proxy
        .settings()
        .agent_for(req.headers().get(http::header::USER_AGENT));
    let judgement = proxy.gate.judge(&origin, "/", &agent).await;
    if let Some(resp) = proxy.audit_and_block(&judgement, client, "CONNECT") {
        return resp;
    }
    // Allowed at host level: record that paths go unchecked.
    let record = Record::with_decision(&judgement, client, None, "CONNECT", "tunnelled");
    if proxy.audit.write(&record).is_err() {
        return respond::text(
            StatusCode::SERVICE_UNAVAILABLE,
            "robots-proxy cannot write its audit log\n",
        );
    }
    let upstream = match connect_upstream(&origin, proxy.gate.allows_private()).await {
        Ok(s) => s,
        Err(ConnectFailure::Refused(reason)) => return respond::refused(&reason),
        Err(ConnectFailure::Io(e)) => {
            return respond::text(
                StatusCode::BAD_GATEWAY,
                format!("Cannot connect to {}: {e}\n", origin.authority()),
            );
        }
    };
    tokio::spawn(async move {
        match hyper::upgrade::on(req).await {
            Ok(upgraded) => {
                let mut client_io = TokioIo::new(upgraded);
                let mut upstream = upstream;
                let _ = tokio::io::copy_bidirectional(&mut client_io, &mut upstream).await;
            }
            Err(e) => tracing::debug!(error = %e, "CONNECT upgrade failed"),
        }
    });
    Response::new(empty_body())
}

/// Why an upstream TCP connection was not made.
pub enum ConnectFailure {
    Refused(String),
    Io(std::io::Error),
}

/// Connects to an origin's address, applying the destination policy to
/// every resolved address.
pub async fn connect_upstream(
    origin: &Origin,
    allow_private: bool,
) -> Result<TcpStream, ConnectFailure> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((origin.host(), origin.port()))
        .await
        .map_err(ConnectFailure::Io)?
        .collect();
    let usable: Vec<SocketAddr> = addrs
        .iter()
        .copied()
        .filter(|a| allow_private || !net::is_private(a.ip()))
        .collect();
    if usable.is_empty() {
        return Err(match addrs.first() {
            Some(a) => ConnectFailure::Refused(
                net::PrivateDestination {
                    host: origin.host().to_string(),
                    ip: a.ip(),
                }
                .to_string(),
            ),
            None => ConnectFailure::Io(std::io::Error::other("no address")),
        });
    }
    let mut last = None;
    for addr in usable {
        match TcpStream::connect(addr).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(ConnectFailure::Io(
        last.unwrap_or_else(|| std::io::Error::other("no address")),
    ))
}
