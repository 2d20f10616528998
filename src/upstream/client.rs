//! The upstream clients: the pooled one forwarding uses (requests with a
//! body, https origins that chose HTTP/2), and one that keeps no idle
//! connection for robots.txt fetches.

use std::sync::Arc;
use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::http::body::Body;
use crate::http::destination::Policy;
use crate::upstream::guarded::GuardedConnector;

/// The upstream client: HTTP/1.1 and HTTP/2 (by ALPN), http and https.
pub type HttpClient = Client<HttpsConnector<GuardedConnector>, Body>;

/// Settings for [`build_client`].
#[derive(Clone, Debug)]
pub struct ClientSettings {
    /// Where connections may go; applied to every connection made.
    pub policy: Policy,
    pub connect_timeout: Duration,
    pub pool_idle_per_host: usize,
    /// Idle in-task connections (http, and https over HTTP/1.1) kept over
    /// all origins (the pooled client has only the per-origin limit:
    /// hyper-util's pool has no total and cannot be asked to close one).
    pub pool_idle_max: usize,
    pub pool_idle_timeout: Duration,
}

/// Builds the upstream client with `tls` as its rustls configuration.
pub fn build_client(settings: &ClientSettings, tls: Arc<rustls::ClientConfig>) -> HttpClient {
    build(settings, tls, settings.pool_idle_per_host)
}

/// Builds the client robots.txt fetches use: like [`build_client`], but it
/// keeps no idle connection, so a fetch's socket closes when the fetch
/// ends (its response read to the end, or dropped: a body cut at the size
/// cap has an unread rest, and that connection could not serve again
/// anyway). A robots.txt is fetched once per origin per TTL: pooling
/// would buy one handshake at most, and a crawl over new origins would
/// leave one idle socket per origin behind for `pool_idle_timeout`,
/// outside every budget.
pub fn build_fetch_client(settings: &ClientSettings, tls: Arc<rustls::ClientConfig>) -> HttpClient {
    build(settings, tls, 0)
}

fn build(
    settings: &ClientSettings,
    tls: Arc<rustls::ClientConfig>,
    idle_per_host: usize,
) -> HttpClient {
    let http = GuardedConnector::new(settings.policy.clone(), settings.connect_timeout);
    // hyper-rustls sets ALPN (h2, http/1.1) itself and refuses a preset one.
    let mut tls = (*tls).clone();
    tls.alpn_protocols.clear();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .pool_max_idle_per_host(idle_per_host)
        .pool_idle_timeout(settings.pool_idle_timeout)
        .build(https)
}
