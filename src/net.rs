//! Destination policy: which addresses the proxy may connect to, enforced
//! where the connection is made (in the DNS resolver of the upstream
//! client), so a name that resolves to a private address is refused too and
//! DNS rebinding cannot slip past a check made earlier.

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::Name;

/// True for loopback, private (RFC 1918, unique-local), link-local,
/// shared (CGNAT), unspecified, broadcast and multicast addresses: places a
/// proxy on the open internet must not reach on a client's behalf.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_private_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_private_v4(v4);
            }
            let seg0 = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (seg0 & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (seg0 & 0xffc0) == 0xfe80 // link-local fe80::/10
                || v6 == Ipv6Addr::from([0, 0, 0, 0, 0, 0, 0, 1])
        }
    }
}

fn is_private_v4(v4: Ipv4Addr) -> bool {
    let o = v4.octets();
    v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_multicast()
        || o[0] == 0
        || (o[0] == 100 && (o[1] & 0xc0) == 64) // 100.64.0.0/10 shared address space
}

/// The error a refused destination produces; found again in the client's
/// error chain to answer 403 instead of 502.
#[derive(Debug, thiserror::Error)]
#[error(
    "destination {host} is a private or local address ({ip}); set allow_private_destinations to permit it"
)]
pub struct PrivateDestination {
    pub host: String,
    pub ip: IpAddr,
}

/// An error and its causes, outermost first. Unlike `source()` alone it
/// also steps into the payload of an `io::Error` (whose `source()` skips
/// the wrapped error), which is where hyper-util and rustls put theirs.
pub fn causes<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    let mut next = Some(err);
    std::iter::from_fn(move || {
        let current = next?;
        next = match current
            .downcast_ref::<io::Error>()
            .and_then(|e| e.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => current.source(),
        };
        Some(current)
    })
}

/// Finds a [`PrivateDestination`] among an error's causes.
pub fn find_private_destination<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a PrivateDestination> {
    causes(err).find_map(|e| e.downcast_ref::<PrivateDestination>())
}

/// Resolves `host` (port `port`) and applies the destination policy: with
/// `allow_private` false, private addresses are dropped, and if none is
/// left the error carries a [`PrivateDestination`].
pub async fn resolve(host: &str, port: u16, allow_private: bool) -> io::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await?.collect();
    if allow_private {
        return Ok(addrs);
    }
    let public: Vec<SocketAddr> = addrs
        .iter()
        .copied()
        .filter(|a| !is_private(a.ip()))
        .collect();
    match (public.is_empty(), addrs.first()) {
        (true, Some(first)) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            PrivateDestination {
                host: host.to_string(),
                ip: first.ip(),
            },
        )),
        _ => Ok(public),
    }
}

/// A resolver for hyper-util's `HttpConnector` that applies [`resolve`].
#[derive(Clone, Debug)]
pub struct GuardedResolver {
    pub allow_private: bool,
}

impl tower_service::Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let allow_private = self.allow_private;
        Box::pin(async move {
            // The connector sets the port itself.
            Ok(resolve(name.as_str(), 0, allow_private).await?.into_iter())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_ranges() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_private(ip.parse().expect("ip")), "{ip}");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
            assert!(!is_private(ip.parse().expect("ip")), "{ip}");
        }
    }
}
