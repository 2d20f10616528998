//! The proxy's own series: client requests by what was decided, upstream
//! latency, requests held for Crawl-delay. Registered when the proxy is
//! built ([`ProxyMetrics::new`]).

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::metrics::{GaugeGuard, Registry};

/// Upper bounds (seconds) of the upstream latency histogram: 1 ms .. 30 s.
pub(crate) const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Upper bounds (seconds) of the politeness hold histogram.
pub(crate) const HOLD_BUCKETS: [f64; 12] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 600.0,
];

/// What the proxy did with one client request (`decision` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Outcome {
    /// Robots.txt allowed the URL; forwarded.
    Allowed,
    /// Robots.txt disallowed the URL; refused with 403.
    Disallowed,
    /// Robots.txt could not be fetched (5xx/network); refused as RFC 9309 says.
    Unreachable,
    /// Refused or delayed too long by the politeness limiter.
    RateLimited,
    /// Refused before any robots.txt check (ACL, auth, bad request).
    Refused,
    /// A CONNECT tunnel passed through without inspection.
    Tunnelled,
    /// A CONNECT whose requests are judged and counted one by one
    /// (intercepted TLS, or plain HTTP inside the tunnel).
    Intercepted,
    /// A request the proxy cannot handle as sent: 400 (bad target, port,
    /// Host), 405 (TRACE, CONNECT inside a tunnel), 501 (transfer coding).
    BadRequest,
    /// A request that already passed through this proxy (508).
    LoopDetected,
    /// The origin gave no usable response (502, 504), or its robots.txt
    /// failed TLS verification (502).
    UpstreamError,
    /// Anything that failed inside the proxy (the audit log cannot be written).
    Error,
}

impl Outcome {
    /// Every variant, in label order.
    pub(crate) const ALL: [Outcome; 11] = [
        Outcome::Allowed,
        Outcome::Disallowed,
        Outcome::Unreachable,
        Outcome::RateLimited,
        Outcome::Refused,
        Outcome::Tunnelled,
        Outcome::Intercepted,
        Outcome::BadRequest,
        Outcome::LoopDetected,
        Outcome::UpstreamError,
        Outcome::Error,
    ];

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Disallowed => "disallowed",
            Outcome::Unreachable => "unreachable",
            Outcome::RateLimited => "rate_limited",
            Outcome::Refused => "refused",
            Outcome::Tunnelled => "tunnelled",
            Outcome::Intercepted => "intercepted",
            Outcome::BadRequest => "bad_request",
            Outcome::LoopDetected => "loop_detected",
            Outcome::UpstreamError => "upstream_error",
            Outcome::Error => "error",
        }
    }
}

/// The causes of a politeness hold or refusal.
const POLITENESS_CAUSES: [&str; 4] = ["crawl_delay", "default_interval", "retry_after", "backoff"];

/// The proxy's series; cheap clones of shared counters.
#[derive(Clone, Debug)]
pub(crate) struct ProxyMetrics {
    requests: [Counter; Outcome::ALL.len()],
    upstream_latency: Histogram,
    politeness_hold: Histogram,
    politeness_waiting: Gauge,
    /// Requests held or refused by politeness, by cause.
    politeness: Family<[(&'static str, &'static str); 2], Counter>,
    /// Pauses origins' 429s and 503s made, by cause.
    origin_pauses: Family<[(&'static str, &'static str); 1], Counter>,
    /// Pay per crawl outcomes (charged, refused, error).
    payments: Family<[(&'static str, &'static str); 1], Counter>,
    in_flight_waited: Counter,
    in_flight_refused: Counter,
    in_flight_leases: Gauge,
}

impl ProxyMetrics {
    /// The proxy's series, registered in `registry`; every `decision`
    /// starts at 0 so dashboards and `rate()` see it before the first
    /// request.
    pub(crate) fn new(registry: &Registry) -> ProxyMetrics {
        let requests = Family::<[(&'static str, &'static str); 1], Counter>::default();
        let m = ProxyMetrics {
            requests: Outcome::ALL
                .map(|d| requests.get_or_create_owned(&[("decision", d.as_str())])),
            upstream_latency: Histogram::new(LATENCY_BUCKETS),
            politeness_hold: Histogram::new(HOLD_BUCKETS),
            politeness_waiting: Gauge::default(),
            politeness: Family::default(),
            origin_pauses: Family::default(),
            payments: Family::default(),
            in_flight_waited: Counter::default(),
            in_flight_refused: Counter::default(),
            in_flight_leases: Gauge::default(),
        };
        for cause in POLITENESS_CAUSES {
            for result in ["held", "refused"] {
                let _ = m
                    .politeness
                    .get_or_create(&[("cause", cause), ("result", result)]);
            }
        }
        for cause in ["retry_after", "backoff"] {
            let _ = m.origin_pauses.get_or_create(&[("cause", cause)]);
        }
        registry.register(
            "robots_proxy_politeness",
            "Requests held or refused by politeness, by cause (crawl_delay, default_interval, retry_after, backoff)",
            m.politeness.clone(),
        );
        registry.register(
            "robots_proxy_payments",
            "Pay per crawl 402s by outcome (charged, refused, error)",
            m.payments.clone(),
        );
        registry.register(
            "robots_proxy_origin_pauses",
            "Pauses an origin's own 429 or 503 made, by cause (retry_after, backoff)",
            m.origin_pauses.clone(),
        );
        registry.register(
            "robots_proxy_requests",
            "Client requests by what the proxy decided",
            requests,
        );
        registry.register(
            "robots_proxy_upstream_latency_seconds",
            "Time from sending a request upstream to its response head",
            m.upstream_latency.clone(),
        );
        registry.register(
            "robots_proxy_politeness_hold_seconds",
            "How long requests were held for Crawl-delay (or politeness.default_interval)",
            m.politeness_hold.clone(),
        );
        registry.register(
            "robots_proxy_politeness_waiting",
            "Requests held for their Crawl-delay slot (or a place among their origin's requests in flight) now",
            m.politeness_waiting.clone(),
        );
        registry.register(
            "robots_proxy_in_flight_waited",
            "Requests that waited for a place among their origin's requests in flight (politeness.max_in_flight)",
            m.in_flight_waited.clone(),
        );
        registry.register(
            "robots_proxy_in_flight_refused",
            "Requests refused (429) for want of a place among their origin's requests in flight (politeness.max_in_flight)",
            m.in_flight_refused.clone(),
        );
        registry.register(
            "robots_proxy_in_flight_leases",
            "Requests of this node holding a place among their origin's requests in flight now (politeness.max_in_flight)",
            m.in_flight_leases.clone(),
        );
        m
    }

    /// Counts a request that waited for an in-flight lease (`refused`:
    /// and did not get one).
    pub(crate) fn in_flight_wait(&self, refused: bool) {
        if refused {
            self.in_flight_refused.inc();
        } else {
            self.in_flight_waited.inc();
        }
    }

    /// Counts an in-flight lease held until the guard is dropped.
    pub(crate) fn in_flight_lease(&self) -> GaugeGuard {
        GaugeGuard::new(&self.in_flight_leases)
    }

    /// Counts one client request.
    pub(crate) fn request(&self, decision: Outcome) {
        self.requests[decision as usize].inc();
    }

    /// Records one upstream round trip.
    pub(crate) fn observe_upstream(&self, elapsed: Duration) {
        self.upstream_latency.observe(elapsed.as_secs_f64());
    }

    /// Counts a request waiting in politeness until the guard is dropped.
    pub(crate) fn politeness_waiting(&self) -> GaugeGuard {
        GaugeGuard::new(&self.politeness_waiting)
    }

    /// Requests held for their Crawl-delay slot now.
    pub(crate) fn politeness_waiting_now(&self) -> i64 {
        self.politeness_waiting.get()
    }

    /// Counts a request held (`refused` false) or refused by politeness
    /// for `cause`.
    pub(crate) fn politeness(&self, cause: &'static str, refused: bool) {
        let result = if refused { "refused" } else { "held" };
        self.politeness
            .get_or_create(&[("cause", cause), ("result", result)])
            .inc();
    }

    /// Counts a pause an origin's signal made.
    pub(crate) fn origin_pause(&self, cause: &'static str) {
        self.origin_pauses.get_or_create(&[("cause", cause)]).inc();
    }

    /// Counts a pay per crawl outcome.
    pub(crate) fn payment(&self, outcome: &'static str) {
        self.payments.get_or_create(&[("outcome", outcome)]).inc();
    }

    /// Records how long a request was held for its politeness slot.
    pub(crate) fn observe_hold(&self, held: Duration) {
        self.politeness_hold.observe(held.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::sample;

    #[test]
    fn every_metric_name_is_exposed() {
        // Each layer's series, as the proxy is built with them.
        let r = Registry::new();
        let _proxy = ProxyMetrics::new(&r);
        let _server = crate::server::metrics::ServerMetrics::new(&r);
        let _store = crate::judge::metrics::StoreMetrics::new(&r);
        let dir = std::env::temp_dir().join(format!("rp-metrics-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let _audit = crate::ops::audit::AuditLog::open(&dir.join("audit.log"), false, None)
            .expect("audit log")
            .with_metrics(&r);
        let text = r.encode();
        let _ = std::fs::remove_dir_all(&dir);
        for name in [
            "robots_proxy_requests_total",
            "robots_proxy_robots_fetches_total",
            "robots_proxy_robots_cache_events_total",
            "robots_proxy_robots_cache_entries",
            "robots_proxy_upstream_latency_seconds_bucket",
            "robots_proxy_upstream_latency_seconds_sum",
            "robots_proxy_upstream_latency_seconds_count",
            "robots_proxy_in_flight_waited_total",
            "robots_proxy_in_flight_refused_total",
            "robots_proxy_in_flight_leases",
            "robots_proxy_open_connections",
            "robots_proxy_audit_write_failures_total",
            "robots_proxy_audit_syncs_total",
            "robots_proxy_connections_refused_total{listener=\"proxy\",reason=\"not_allowed\"}",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
        assert!(!text.contains("_total_total"));
    }

    #[test]
    fn requests_start_at_zero_and_count() {
        let r = Registry::new();
        let m = ProxyMetrics::new(&r);
        let text = r.encode();
        for d in Outcome::ALL {
            let s = format!("robots_proxy_requests_total{{decision=\"{}\"}}", d.as_str());
            assert_eq!(sample(&text, &s), Some(0.0), "{s}");
        }
        m.request(Outcome::Allowed);
        m.request(Outcome::Allowed);
        m.request(Outcome::RateLimited);
        let t = r.encode();
        let get = |s: &str| sample(&t, s);
        assert_eq!(
            get("robots_proxy_requests_total{decision=\"allowed\"}"),
            Some(2.0)
        );
        assert_eq!(
            get("robots_proxy_requests_total{decision=\"rate_limited\"}"),
            Some(1.0)
        );
        assert_eq!(
            get("robots_proxy_requests_total{decision=\"disallowed\"}"),
            Some(0.0)
        );
    }

    #[test]
    fn latency_histogram_buckets() {
        let r = Registry::new();
        let m = ProxyMetrics::new(&r);
        m.observe_upstream(Duration::from_micros(500));
        m.observe_upstream(Duration::from_millis(30));
        m.observe_upstream(Duration::from_secs(60));
        let t = r.encode();
        let b = |le: &str| {
            sample(
                &t,
                &format!("robots_proxy_upstream_latency_seconds_bucket{{le=\"{le}\"}}"),
            )
        };
        assert_eq!(b("0.001"), Some(1.0));
        assert_eq!(b("0.025"), Some(1.0));
        assert_eq!(b("0.05"), Some(2.0));
        assert_eq!(b("30.0"), Some(2.0));
        assert_eq!(b("+Inf"), Some(3.0));
        assert_eq!(
            sample(&t, "robots_proxy_upstream_latency_seconds_count"),
            Some(3.0)
        );
    }
}
