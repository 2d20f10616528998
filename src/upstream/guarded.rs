//! The guarded connector: the one place the pooled upstream client turns a
//! URI into a socket, applying the destination policy
//! ([`crate::http::destination::Policy`]) to IP literals and to every
//! address a name resolves to, where the connection is made.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::http::destination::{Policy, strip_brackets};
/// Resolves `host` (port `port`) and applies `policy` to every address:
/// refused ones are dropped, and if none is left the error carries a
/// [`PrivateDestination`].
pub(crate) async fn resolve(host: &str, port: u16, policy: &Policy) -> io::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await?.collect();
    policy.filter(host, addrs)
}

/// A resolver for hyper-util's `HttpConnector` that applies [`resolve`];
/// made per connection, as the policy needs the port and a resolver is
/// given only the name.
#[derive(Clone, Debug)]
pub(crate) struct GuardedResolver {
    policy: Policy,
    port: u16,
}

impl tower_service::Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let (policy, port) = (self.policy.clone(), self.port);
        Box::pin(async move { Ok(resolve(name.as_str(), port, &policy).await?.into_iter()) })
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The one place the pooled upstream client turns a URI into a socket:
/// hyper-util's `HttpConnector` connects to an IP literal without asking
/// its resolver, so literals are checked here and names by
/// [`GuardedResolver`]. hyper-rustls wraps it for https.
#[derive(Clone, Debug)]
pub struct GuardedConnector {
    policy: Policy,
    connect_timeout: Duration,
}

impl GuardedConnector {
    pub(crate) fn new(policy: Policy, connect_timeout: Duration) -> GuardedConnector {
        GuardedConnector {
            policy,
            connect_timeout,
        }
    }
}

impl tower_service::Service<Uri> for GuardedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let (policy, timeout) = (self.policy.clone(), self.connect_timeout);
        Box::pin(async move {
            let Some(host) = dst.host() else {
                return Err("URI without a host".into());
            };
            let https = dst.scheme() == Some(&http::uri::Scheme::HTTPS);
            let port = dst.port_u16().unwrap_or(if https { 443 } else { 80 });
            // The test hyper-util makes to skip the resolver.
            let bare = strip_brackets(host);
            if let Ok(ip) = bare.parse::<IpAddr>() {
                policy.check(bare, SocketAddr::new(ip, port))?;
            }
            let mut http = HttpConnector::new_with_resolver(GuardedResolver { policy, port });
            http.enforce_http(false);
            http.set_nodelay(true);
            http.set_connect_timeout(Some(timeout));
            Ok(tower_service::Service::call(&mut http, dst).await?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::destination::{Refusal, find_private_destination};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The resolver reads numeric forms the way inet_aton does: they end
    /// up as the address they stand for, and are refused as such.
    #[tokio::test]
    async fn odd_ipv4_spellings_are_refused_once_resolved() {
        let policy = Policy::new(false);
        for host in ["2130706433", "127.1", "0x7f.0.0.1", "localhost"] {
            let err = resolve(host, 80, &policy).await.expect_err(host);
            assert!(find_private_destination(&err).is_some(), "{host}: {err}");
        }
    }

    /// A listener counting its accepts, and its port.
    async fn counting_listener(ip: &str) -> Option<(u16, Arc<AtomicUsize>)> {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.ok()?;
        let port = listener.local_addr().ok()?.port();
        let accepts = Arc::new(AtomicUsize::new(0));
        let counter = accepts.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Some((port, accepts))
    }

    #[tokio::test]
    async fn the_connector_refuses_ip_literals_without_connecting() {
        let (port, accepts) = counting_listener("127.0.0.1").await.expect("bind");
        let mut refusing = GuardedConnector::new(Policy::new(false), Duration::from_secs(5));
        for uri in [
            format!("http://127.0.0.1:{port}/"),
            format!("https://127.0.0.1:{port}/"),
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            format!("http://[::ffff:7f00:1]:{port}/"),
        ] {
            let dst: Uri = uri.parse().expect("uri");
            let err = tower_service::Service::call(&mut refusing, dst)
                .await
                .expect_err(&uri);
            assert!(find_private_destination(&*err).is_some(), "{uri}: {err}");
        }
        // Names go through the guarded resolver, with the port.
        let dst: Uri = format!("http://localhost:{port}/").parse().expect("uri");
        let err = tower_service::Service::call(&mut refusing, dst)
            .await
            .expect_err("localhost");
        assert!(find_private_destination(&*err).is_some(), "{err}");
        assert_eq!(accepts.load(Ordering::SeqCst), 0);
        // The same address as the proxy's own listener: refused even when
        // private destinations are allowed.
        let own = SocketAddr::from(([127, 0, 0, 1], port));
        let mut guarded = GuardedConnector::new(
            Policy::new(true).with_own_listeners([own]),
            Duration::from_secs(5),
        );
        for uri in [
            format!("http://127.0.0.1:{port}/"),
            format!("http://localhost:{port}/"),
        ] {
            let dst: Uri = uri.parse().expect("uri");
            let err = tower_service::Service::call(&mut guarded, dst)
                .await
                .expect_err(&uri);
            let refusal = find_private_destination(&*err).expect("a refusal");
            assert_eq!(refusal.why, Refusal::OwnListener, "{uri}");
        }
        assert_eq!(accepts.load(Ordering::SeqCst), 0);
        // Allowed: it connects.
        let mut allowing = GuardedConnector::new(Policy::new(true), Duration::from_secs(5));
        let dst: Uri = format!("http://127.0.0.1:{port}/").parse().expect("uri");
        tower_service::Service::call(&mut allowing, dst)
            .await
            .expect("connects");
    }
}
