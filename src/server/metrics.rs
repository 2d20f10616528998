//! The listeners' series: open connections, pauses at the connection
//! limit, connections closed at accept. Registered when the proxy is
//! built ([`ServerMetrics::new`]).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::{GaugeGuard, Registry};

type Labels2 = [(&'static str, &'static str); 2];

/// Why a connection was closed at accept, before a byte was read
/// (`reason` label of `robots_proxy_connections_refused_total`, with the
/// `listener`: `proxy` or `admin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ConnRefusal {
    /// Proxy listener: the address is not in `access.allow_clients`.
    NotAllowed,
    /// Proxy listener: `max_connections_per_client` reached.
    PerClientLimit,
    /// Admin listener: the address is not in `admin.allow_clients`.
    AdminNotAllowed,
    /// Admin listener: `admin.max_connections` reached.
    AdminLimit,
    /// Admin listener: `admin.max_connections_per_client` reached.
    AdminPerClientLimit,
}

impl ConnRefusal {
    /// Every variant, in index order.
    pub(crate) const ALL: [ConnRefusal; 5] = [
        ConnRefusal::NotAllowed,
        ConnRefusal::PerClientLimit,
        ConnRefusal::AdminNotAllowed,
        ConnRefusal::AdminLimit,
        ConnRefusal::AdminPerClientLimit,
    ];

    /// The `listener` and `reason` label values.
    pub(crate) fn labels(self) -> Labels2 {
        match self {
            ConnRefusal::NotAllowed => [("listener", "proxy"), ("reason", "not_allowed")],
            ConnRefusal::PerClientLimit => [("listener", "proxy"), ("reason", "per_client_limit")],
            ConnRefusal::AdminNotAllowed => [("listener", "admin"), ("reason", "not_allowed")],
            ConnRefusal::AdminLimit => [("listener", "admin"), ("reason", "connection_limit")],
            ConnRefusal::AdminPerClientLimit => {
                [("listener", "admin"), ("reason", "per_client_limit")]
            }
        }
    }
}

/// The listeners' series; cheap clones of shared counters.
#[derive(Clone, Debug, Default)]
pub struct ServerMetrics {
    open_connections: Gauge,
    connection_limit_reached: Counter,
    connections_refused: [Counter; ConnRefusal::ALL.len()],
}

impl ServerMetrics {
    /// The listeners' series, registered in `registry`.
    pub fn new(registry: &Registry) -> ServerMetrics {
        let m = ServerMetrics::default();
        registry.register(
            "robots_proxy_open_connections",
            "Client connections currently open",
            m.open_connections.clone(),
        );
        registry.register(
            "robots_proxy_connection_limit_reached",
            "Times accepting paused because max_connections client connections were open",
            m.connection_limit_reached.clone(),
        );
        let refused = Family::<Labels2, Counter>::default();
        let m = ServerMetrics {
            connections_refused: ConnRefusal::ALL.map(|r| refused.get_or_create_owned(&r.labels())),
            ..m
        };
        registry.register(
            "robots_proxy_connections_refused",
            "Connections closed at accept, before a byte was read, by listener and reason",
            refused,
        );
        m
    }

    /// Counts an open client connection until the returned guard is dropped.
    pub fn connection_opened(&self) -> GaugeGuard {
        GaugeGuard::new(&self.open_connections)
    }

    /// Counts one pause of accepting at the connection limit.
    pub(crate) fn connection_limit_reached(&self) {
        self.connection_limit_reached.inc();
    }

    /// Counts one connection closed at accept.
    pub(crate) fn connection_refused(&self, why: ConnRefusal) {
        self.connections_refused[why as usize].inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::sample;

    #[test]
    fn gauges_and_connection_guard() {
        let r = Registry::new();
        let m = ServerMetrics::new(&r);
        let g1 = m.connection_opened();
        let g2 = m.clone().connection_opened();
        let t = r.encode();
        assert_eq!(sample(&t, "robots_proxy_open_connections"), Some(2.0));
        assert!(
            t.contains(
                "robots_proxy_connections_refused_total{listener=\"proxy\",reason=\"not_allowed\"}"
            ),
            "{t}"
        );
        drop(g1);
        assert_eq!(
            sample(&r.encode(), "robots_proxy_open_connections"),
            Some(1.0)
        );
        drop(g2);
        assert_eq!(
            sample(&r.encode(), "robots_proxy_open_connections"),
            Some(0.0)
        );
        m.connection_refused(ConnRefusal::AdminLimit);
        assert_eq!(
            sample(
                &r.encode(),
                "robots_proxy_connections_refused_total{listener=\"admin\",reason=\"connection_limit\"}"
            ),
            Some(1.0)
        );
    }
}
