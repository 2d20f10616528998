//! Listener plumbing shared by the proxy and admin listeners: how a
//! server connection is built, and counting connections closed at accept.

use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::Instant;

use crate::server::metrics::{ConnRefusal, ServerMetrics};

/// How often reaching a connection limit, or refusing connections at
/// accept, is logged, at most (per reason).
pub(crate) const LIMIT_WARNING_EVERY: Duration = Duration::from_secs(60);

/// How every hyper server connection of the proxy is built (proxy
/// listener, admin listener, connections inside intercepted tunnels): the
/// timer, the header timeout (which, counted from the end of the previous
/// response, is also the idle timeout of a keep-alive connection) and the
/// keep-alive policy live here and nowhere else.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectionPolicy {
    pub(crate) header_timeout: Duration,
}

impl ConnectionPolicy {
    /// An HTTP/1.1-only server (the proxy and admin listeners).
    pub(crate) fn http1(&self) -> hyper::server::conn::http1::Builder {
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_timeout)
            .keep_alive(true);
        builder
    }

    /// An HTTP/1.1 or HTTP/2 server (inside intercepted tunnels). HTTP/2
    /// has no header timeout of its own: the proxy's connection driver
    /// closes a connection with no request in flight for `header_timeout`.
    /// At most `max_streams` HTTP/2 streams are open at once (the client
    /// is told in its SETTINGS and waits for one to end before it opens
    /// another).
    pub(crate) fn auto(
        &self,
        max_streams: u32,
    ) -> hyper_util::server::conn::auto::Builder<TokioExecutor> {
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_timeout)
            .keep_alive(true);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(max_streams);
        builder
    }
}

/// Counts connections closed at accept and logs them, once a minute per
/// reason at most (with how many went unlogged since): a flood of refused
/// clients cannot flood the log.
pub(crate) struct RefusalLog {
    metrics: ServerMetrics,
    last: Mutex<[Option<Instant>; ConnRefusal::ALL.len()]>,
    unlogged: [AtomicU64; ConnRefusal::ALL.len()],
}

impl RefusalLog {
    pub(crate) fn new(metrics: ServerMetrics) -> RefusalLog {
        RefusalLog {
            metrics,
            last: Mutex::new([None; ConnRefusal::ALL.len()]),
            unlogged: Default::default(),
        }
    }

    /// Counts (and perhaps logs) closing `peer`'s connection for `why`.
    /// The caller drops the connection unread.
    pub(crate) fn refuse(&self, why: ConnRefusal, peer: SocketAddr) {
        self.metrics.connection_refused(why);
        let i = why as usize;
        let mut last = self.last.lock();
        if last[i].is_some_and(|t| t.elapsed() < LIMIT_WARNING_EVERY) {
            self.unlogged[i].fetch_add(1, Ordering::Relaxed);
            return;
        }
        last[i] = Some(Instant::now());
        drop(last);
        let unlogged = self.unlogged[i].swap(0, Ordering::Relaxed);
        let [(_, listener), (_, reason)] = why.labels();
        tracing::warn!(client_ip = %peer.ip(), listener, reason, also_refused_unlogged = unlogged,
            "connection closed at accept (logged once a minute per reason; \
             robots_proxy_connections_refused_total counts them all)");
    }
}
