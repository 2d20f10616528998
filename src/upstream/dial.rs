//! TCP connections to an origin under the destination policy.

use std::time::Duration;

use tokio::net::TcpStream;

use super::error::{ErrorKind, UpstreamError};
use crate::http::destination;
use crate::http::origin::Origin;

/// Connects to an origin's address, applying the destination policy to
/// every resolved address. The addresses are tried in turn, each with an
/// even share of `timeout` (as hyper-util's connector does), so one that
/// does not answer leaves time for the next.
pub(crate) async fn connect_upstream(
    origin: &Origin,
    policy: &destination::Policy,
    timeout: Duration,
) -> Result<TcpStream, UpstreamError> {
    let host = url_host(origin);
    let usable = crate::upstream::guarded::resolve(origin.host(), origin.port(), policy)
        .await
        .map_err(|e| UpstreamError::classified(e, &host, ErrorKind::Dns))?;
    let share = timeout / u32::try_from(usable.len()).unwrap_or(u32::MAX).max(1);
    let mut last = None;
    for addr in usable {
        match tokio::time::timeout(share, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = Some(e),
            Err(_) => {
                last = Some(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("connecting to {addr} timed out"),
                ));
            }
        }
    }
    let e = last.unwrap_or_else(|| std::io::Error::other("no address"));
    Err(UpstreamError::classified(e, &host, ErrorKind::Connect))
}

/// The origin's host as a URL writes it (an IPv6 literal in brackets).
pub(crate) fn url_host(origin: &Origin) -> String {
    if origin.host().contains(':') {
        format!("[{}]", origin.host())
    } else {
        origin.host().to_string()
    }
}
