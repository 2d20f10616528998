//! Prometheus metrics for the proxy, encoded in the OpenMetrics text format.
//!
//! Every labelled series has a small fixed label set, so each one is resolved
//! once (in [`Metrics::new`], or on first use for unusual fetch combinations)
//! and kept as a plain atomic counter: the hot path never touches the
//! `Family` hash map or its lock.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::fleet::{Fleet, ROUND_TRIP_BUCKETS_US};

/// `Content-Type` for the body returned by [`Metrics::encode`].
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds (seconds) of the upstream latency histogram: 1 ms .. 30 s.
pub(crate) const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

type Labels1 = [(&'static str, &'static str); 1];
type Labels2 = [(&'static str, &'static str); 2];

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

/// How a robots.txt fetch ended (`outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FetchOutcome {
    /// Got a robots.txt body (2xx).
    Ok,
    /// 4xx: treated as "no robots.txt", everything allowed.
    Unavailable,
    /// 5xx or network failure: treated as "disallow everything".
    Unreachable,
    /// Gave up following redirects.
    RedirectLimit,
    /// The proxy ran short of file descriptors, memory or local ports:
    /// nothing learnt about the origin, nothing cached.
    LocalError,
    /// Not fetched: the destination policy refused the origin or a
    /// redirect hop (nothing was sent).
    Refused,
}

impl FetchOutcome {
    /// Every variant, in label order.
    pub(crate) const ALL: [FetchOutcome; 6] = [
        FetchOutcome::Ok,
        FetchOutcome::Unavailable,
        FetchOutcome::Unreachable,
        FetchOutcome::RedirectLimit,
        FetchOutcome::LocalError,
        FetchOutcome::Refused,
    ];

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FetchOutcome::Ok => "ok",
            FetchOutcome::Unavailable => "unavailable",
            FetchOutcome::Unreachable => "unreachable",
            FetchOutcome::RedirectLimit => "redirect_limit",
            FetchOutcome::LocalError => "local_error",
            FetchOutcome::Refused => "refused",
        }
    }
}

/// Upper bounds (seconds) of the politeness hold histogram: 10 ms .. 10 min.
pub(crate) const HOLD_BUCKETS: [f64; 12] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 600.0,
];

/// `status_class` label values; index with [`status_class_index`].
pub(crate) const STATUS_CLASSES: [&str; 5] = ["2xx", "3xx", "4xx", "5xx", "none"];

/// Index into [`STATUS_CLASSES`]; no status, or one outside 200..=599, is "none".
pub(crate) fn status_class_index(status: Option<u16>) -> usize {
    match status {
        Some(200..=299) => 0,
        Some(300..=399) => 1,
        Some(400..=499) => 2,
        Some(500..=599) => 3,
        _ => 4,
    }
}

/// A robots.txt cache event (`event` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CacheEvent {
    /// Fresh entry served.
    Hit,
    /// No entry; fetched.
    Miss,
    /// Expired entry served while it is refreshed (or because refresh failed).
    Stale,
    /// Expired entry dropped and refetched.
    Expired,
}

impl From<crate::judge::StoreEvent> for CacheEvent {
    fn from(event: crate::judge::StoreEvent) -> CacheEvent {
        use crate::judge::StoreEvent;
        match event {
            StoreEvent::Hit => CacheEvent::Hit,
            StoreEvent::Stale => CacheEvent::Stale,
            StoreEvent::Miss => CacheEvent::Miss,
            StoreEvent::Expired => CacheEvent::Expired,
        }
    }
}

impl CacheEvent {
    /// Every variant, in label order.
    pub(crate) const ALL: [CacheEvent; 4] = [
        CacheEvent::Hit,
        CacheEvent::Miss,
        CacheEvent::Stale,
        CacheEvent::Expired,
    ];

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CacheEvent::Hit => "hit",
            CacheEvent::Miss => "miss",
            CacheEvent::Stale => "stale",
            CacheEvent::Expired => "expired",
        }
    }
}

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
}

impl ConnRefusal {
    /// Every variant, in index order.
    pub(crate) const ALL: [ConnRefusal; 4] = [
        ConnRefusal::NotAllowed,
        ConnRefusal::PerClientLimit,
        ConnRefusal::AdminNotAllowed,
        ConnRefusal::AdminLimit,
    ];

    /// The `listener` and `reason` label values.
    pub(crate) fn labels(self) -> Labels2 {
        match self {
            ConnRefusal::NotAllowed => [("listener", "proxy"), ("reason", "not_allowed")],
            ConnRefusal::PerClientLimit => [("listener", "proxy"), ("reason", "per_client_limit")],
            ConnRefusal::AdminNotAllowed => [("listener", "admin"), ("reason", "not_allowed")],
            ConnRefusal::AdminLimit => [("listener", "admin"), ("reason", "connection_limit")],
        }
    }
}

/// The proxy's metrics; cheap to clone (one `Arc`), share one per process.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    requests: [Counter; Outcome::ALL.len()],
    fetch_family: Family<Labels2, Counter>,
    /// `[outcome][status_class]`; the usual pairs are filled in `new` so
    /// they show as 0 from the start, odd ones (ok/5xx) appear when used.
    fetches: [[OnceLock<Counter>; 5]; FetchOutcome::ALL.len()],
    cache_events: [Counter; 4],
    cache_entries: Gauge,
    upstream_latency: Histogram,
    open_connections: Gauge,
    connection_limit_reached: Counter,
    connections_refused: [Counter; 4],
    audit_write_failures: Counter,
    politeness_hold: Histogram,
    politeness_waiting: Gauge,
    /// Fleet bookings that found Redis unavailable.
    fleet_unavailable: Counter,
    /// robots.txt fetch budget: KiB in use, most ever in use.
    fetch_budget: (Gauge, Gauge),
    /// The response cache whose counters are exposed, once attached.
    response_cache: Arc<OnceLock<crate::response_cache::ResponseCache>>,
    /// The fleet whose state is exposed, once attached.
    fleet: Arc<OnceLock<Arc<Fleet>>>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric; all labelled series start at 0 so dashboards
    /// and `rate()` see them before the first event.
    pub fn new() -> Self {
        let mut registry = Registry::default();

        // Counter names are registered without `_total`: the encoder adds it.
        let requests_family = Family::<Labels1, Counter>::default();
        let requests =
            Outcome::ALL.map(|d| requests_family.get_or_create_owned(&[("decision", d.as_str())]));
        registry.register(
            "robots_proxy_requests",
            "Client requests by what the proxy decided",
            requests_family,
        );

        let fetch_family = Family::<Labels2, Counter>::default();
        registry.register(
            "robots_proxy_robots_fetches",
            "robots.txt fetches by outcome and HTTP status class",
            fetch_family.clone(),
        );
        let fetches: [[OnceLock<Counter>; 5]; FetchOutcome::ALL.len()] = Default::default();
        for (outcome, status) in [
            (FetchOutcome::Ok, Some(200)),
            (FetchOutcome::Unavailable, Some(404)),
            (FetchOutcome::Unreachable, Some(500)),
            (FetchOutcome::Unreachable, None),
            (FetchOutcome::RedirectLimit, Some(301)),
            (FetchOutcome::LocalError, None),
            (FetchOutcome::Refused, None),
        ] {
            fetch_counter(&fetch_family, &fetches, outcome, status);
        }

        let cache_family = Family::<Labels1, Counter>::default();
        let cache_events =
            CacheEvent::ALL.map(|e| cache_family.get_or_create_owned(&[("event", e.as_str())]));
        registry.register(
            "robots_proxy_robots_cache_events",
            "robots.txt cache lookups by result",
            cache_family,
        );

        let cache_entries = Gauge::default();
        registry.register(
            "robots_proxy_robots_cache_entries",
            "robots.txt entries held in the cache",
            cache_entries.clone(),
        );

        let upstream_latency = Histogram::new(LATENCY_BUCKETS);
        registry.register(
            "robots_proxy_upstream_latency_seconds",
            "Time from sending a request upstream to its response head",
            upstream_latency.clone(),
        );

        let open_connections = Gauge::default();
        registry.register(
            "robots_proxy_open_connections",
            "Client connections currently open",
            open_connections.clone(),
        );

        let connection_limit_reached = Counter::default();
        registry.register(
            "robots_proxy_connection_limit_reached",
            "Times accepting paused because max_connections client connections were open",
            connection_limit_reached.clone(),
        );

        let refused_family = Family::<Labels2, Counter>::default();
        let connections_refused =
            ConnRefusal::ALL.map(|r| refused_family.get_or_create_owned(&r.labels()));
        registry.register(
            "robots_proxy_connections_refused",
            "Connections closed at accept, before a byte was read, by listener and reason",
            refused_family,
        );

        let audit_write_failures = Counter::default();
        registry.register(
            "robots_proxy_audit_write_failures",
            "Audit log records that could not be written",
            audit_write_failures.clone(),
        );

        let politeness_hold = Histogram::new(HOLD_BUCKETS);
        registry.register(
            "robots_proxy_politeness_hold_seconds",
            "How long requests were held for Crawl-delay (or politeness.default_interval)",
            politeness_hold.clone(),
        );

        let politeness_waiting = Gauge::default();
        registry.register(
            "robots_proxy_politeness_waiting",
            "Requests held for their Crawl-delay slot now",
            politeness_waiting.clone(),
        );

        let fleet_unavailable = Counter::default();
        registry.register(
            "robots_proxy_fleet_unavailable",
            "Crawl-delay bookings and fleet-wide rate checks (max_rps, auth_failures_per_minute) that found the fleet's Redis unavailable (done locally or refused)",
            fleet_unavailable.clone(),
        );

        let budget_family = Family::<Labels1, Gauge>::default();
        let fetch_budget = (
            budget_family.get_or_create_owned(&[("state", "in_use")]),
            budget_family.get_or_create_owned(&[("state", "peak")]),
        );
        registry.register(
            "robots_proxy_robots_fetch_budget_kib",
            "KiB of robots.txt fetches reserved (robots.fetch_budget_mib): in use now, and the most ever",
            budget_family,
        );

        let response_cache = Arc::new(OnceLock::new());
        registry.register_collector(Box::new(crate::response_cache::CacheCollector::new(
            response_cache.clone(),
        )));
        let fleet = Arc::new(OnceLock::new());
        registry.register_collector(Box::new(FleetCollector {
            fleet: fleet.clone(),
        }));

        Metrics {
            inner: Arc::new(Inner {
                registry,
                requests,
                fetch_family,
                fetches,
                cache_events,
                cache_entries,
                upstream_latency,
                open_connections,
                connection_limit_reached,
                connections_refused,
                audit_write_failures,
                politeness_hold,
                politeness_waiting,
                fleet_unavailable,
                fetch_budget,
                response_cache,
                fleet,
            }),
        }
    }

    /// Counts one client request.
    pub(crate) fn request(&self, decision: Outcome) {
        self.inner.requests[decision as usize].inc();
    }

    /// Counts one robots.txt fetch; `status` is the final HTTP status, if any.
    pub(crate) fn robots_fetch(&self, outcome: FetchOutcome, status: Option<u16>) {
        fetch_counter(
            &self.inner.fetch_family,
            &self.inner.fetches,
            outcome,
            status,
        )
        .inc();
    }

    /// The gauges the robots.txt fetch budget reports to.
    pub(crate) fn fetch_budget_gauges(&self) -> (Gauge, Gauge) {
        self.inner.fetch_budget.clone()
    }

    /// Counts one robots.txt cache event.
    pub(crate) fn cache_event(&self, event: CacheEvent) {
        self.inner.cache_events[event as usize].inc();
    }

    /// Sets the robots.txt cache size.
    pub(crate) fn set_cache_entries(&self, n: usize) {
        self.inner
            .cache_entries
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Records one upstream round trip.
    pub(crate) fn observe_upstream(&self, elapsed: Duration) {
        self.inner.upstream_latency.observe(elapsed.as_secs_f64());
    }

    /// Counts an open client connection until the returned guard is dropped.
    #[must_use = "the connection is counted only while the guard lives"]
    pub fn connection_opened(&self) -> ConnectionGuard {
        self.inner.open_connections.inc();
        ConnectionGuard {
            gauge: self.inner.open_connections.clone(),
        }
    }

    /// Counts one pause of accepting at the connection limit.
    pub(crate) fn connection_limit_reached(&self) {
        self.inner.connection_limit_reached.inc();
    }

    /// Counts a request waiting in politeness until the guard is dropped.
    #[must_use = "the request is counted only while the guard lives"]
    pub(crate) fn politeness_waiting(&self) -> ConnectionGuard {
        self.inner.politeness_waiting.inc();
        ConnectionGuard {
            gauge: self.inner.politeness_waiting.clone(),
        }
    }

    /// Counts a fleet booking that found Redis unavailable.
    pub(crate) fn fleet_unavailable(&self) {
        self.inner.fleet_unavailable.inc();
    }

    /// Requests held for their Crawl-delay slot now.
    pub(crate) fn politeness_waiting_now(&self) -> i64 {
        self.inner.politeness_waiting.get()
    }

    /// Records how long a request was held for its politeness slot.
    pub(crate) fn observe_hold(&self, held: Duration) {
        self.inner.politeness_hold.observe(held.as_secs_f64());
    }

    /// Counts one connection closed at accept.
    pub(crate) fn connection_refused(&self, why: ConnRefusal) {
        self.inner.connections_refused[why as usize].inc();
    }

    /// Counts one audit record that could not be written.
    pub(crate) fn audit_write_failure(&self) {
        self.inner.audit_write_failures.inc();
    }

    /// Exposes the response cache's counters (`robots_proxy_response_cache_*`).
    pub fn attach_response_cache(&self, cache: crate::response_cache::ResponseCache) {
        let _ = self.inner.response_cache.set(cache);
    }

    /// Exposes the fleet's state (`robots_proxy_fleet_reachable`, its
    /// round trips, live nodes and shared robots.txt fetches).
    pub fn attach_fleet(&self, fleet: Arc<Fleet>) {
        let _ = self.inner.fleet.set(fleet);
    }

    /// The whole registry in the OpenMetrics text format (ends with `# EOF`);
    /// serve it with [`CONTENT_TYPE`].
    pub(crate) fn encode(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        // Writing into a String cannot fail; an Err could only come from a
        // metric's own encoder, and a partial page is better than none.
        let _ = encode(&mut out, &self.inner.registry);
        out
    }
}

/// Encodes the fleet's state at each scrape, read from the fleet's own
/// atomics (nothing without a fleet): the request path pays one atomic add
/// per Redis call, no lock and no registry.
struct FleetCollector {
    fleet: Arc<OnceLock<Arc<Fleet>>>,
}

impl fmt::Debug for FleetCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetCollector").finish_non_exhaustive()
    }
}

impl Collector for FleetCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(fleet) = self.fleet.get() else {
            return Ok(());
        };
        let stats = fleet.stats();
        let count = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        let gauges: [(&str, &str, u64); 2] = [
            (
                "robots_proxy_fleet_reachable",
                "Whether the fleet's Redis answered the last call (1) or not (0)",
                u64::from(fleet.is_reachable()),
            ),
            (
                "robots_proxy_fleet_live_nodes",
                "Nodes of the fleet with a heartbeat in Redis within the last 3 seconds, as last read (kept during an outage)",
                count(&stats.live_nodes),
            ),
        ];
        for (name, help, v) in gauges {
            let gauge = ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
            let m = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(m)?;
        }
        let counters: [(&str, &str, u64); 3] = [
            (
                "robots_proxy_fleet_robots_waited",
                "robots.txt fetches this node waited for from another node of the fleet",
                count(&stats.robots_waited),
            ),
            (
                "robots_proxy_fleet_robots_fetched",
                "robots.txt fetches this node made for the fleet (under the fleet's lease)",
                count(&stats.robots_fetched),
            ),
            (
                "robots_proxy_fleet_reconnects",
                "connections to Redis replaced by new ones after calls kept failing (a silent connection)",
                count(&stats.reconnects),
            ),
        ];
        for (name, help, v) in counters {
            let counter = ConstCounter::new(v);
            let m = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(m)?;
        }
        let (per_bucket, sum_us) = stats.round_trips.snapshot();
        let bounds = ROUND_TRIP_BUCKETS_US
            .iter()
            .map(|&us| us as f64 / 1e6)
            .chain(std::iter::once(f64::INFINITY));
        let buckets: Vec<(f64, u64)> = bounds.zip(per_bucket).collect();
        let mut m = encoder.encode_descriptor(
            "robots_proxy_fleet_round_trip_seconds",
            "Time of each call to the fleet's Redis, to its answer (calls cut off by fleet.timeout count at the timeout)",
            None,
            MetricType::Histogram,
        )?;
        m.encode_histogram::<NoLabelSet>(
            sum_us as f64 / 1e6,
            per_bucket.iter().sum(),
            &buckets,
            None,
        )?;
        Ok(())
    }
}

fn fetch_counter<'a>(
    family: &Family<Labels2, Counter>,
    slots: &'a [[OnceLock<Counter>; 5]; FetchOutcome::ALL.len()],
    outcome: FetchOutcome,
    status: Option<u16>,
) -> &'a Counter {
    let class = status_class_index(status);
    slots[outcome as usize][class].get_or_init(|| {
        family.get_or_create_owned(&[
            ("outcome", outcome.as_str()),
            ("status_class", STATUS_CLASSES[class]),
        ])
    })
}

/// Decrements its gauge (open connections, requests waiting in politeness)
/// when dropped.
#[derive(Debug)]
pub struct ConnectionGuard {
    gauge: Gauge,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the first sample line that starts with `series `.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
        })
    }

    #[test]
    fn every_metric_name_is_exposed() {
        let text = Metrics::new().encode();
        for name in [
            "robots_proxy_requests_total",
            "robots_proxy_robots_fetches_total",
            "robots_proxy_robots_cache_events_total",
            "robots_proxy_robots_cache_entries",
            "robots_proxy_upstream_latency_seconds_bucket",
            "robots_proxy_upstream_latency_seconds_sum",
            "robots_proxy_upstream_latency_seconds_count",
            "robots_proxy_open_connections",
            "robots_proxy_audit_write_failures_total",
            "robots_proxy_connections_refused_total{listener=\"proxy\",reason=\"not_allowed\"}",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
        assert!(!text.contains("_total_total"));
    }

    #[test]
    fn all_label_values_start_at_zero() {
        let text = Metrics::new().encode();
        for d in Outcome::ALL {
            let s = format!("robots_proxy_requests_total{{decision=\"{}\"}}", d.as_str());
            assert_eq!(sample(&text, &s), Some(0.0), "{s}");
        }
        for (o, c) in [
            ("ok", "2xx"),
            ("unavailable", "4xx"),
            ("unreachable", "5xx"),
            ("unreachable", "none"),
            ("redirect_limit", "3xx"),
            ("local_error", "none"),
        ] {
            let s = format!(
                "robots_proxy_robots_fetches_total{{outcome=\"{o}\",status_class=\"{c}\"}}"
            );
            assert_eq!(sample(&text, &s), Some(0.0), "{s}");
        }
        // Odd pairs appear only once used.
        assert!(!text.contains("outcome=\"ok\",status_class=\"5xx\""));
        for e in CacheEvent::ALL {
            let s = format!(
                "robots_proxy_robots_cache_events_total{{event=\"{}\"}}",
                e.as_str()
            );
            assert_eq!(sample(&text, &s), Some(0.0), "{s}");
        }
    }

    #[test]
    fn counters_count() {
        let m = Metrics::new();
        m.request(Outcome::Allowed);
        m.request(Outcome::Allowed);
        m.request(Outcome::RateLimited);
        m.robots_fetch(FetchOutcome::Ok, Some(200));
        m.robots_fetch(FetchOutcome::Unavailable, Some(404));
        m.robots_fetch(FetchOutcome::Unreachable, None);
        m.robots_fetch(FetchOutcome::Unreachable, Some(503));
        m.robots_fetch(FetchOutcome::RedirectLimit, Some(301));
        m.robots_fetch(FetchOutcome::Ok, Some(503));
        m.cache_event(CacheEvent::Hit);
        m.cache_event(CacheEvent::Hit);
        m.cache_event(CacheEvent::Hit);
        m.cache_event(CacheEvent::Stale);
        m.audit_write_failure();
        let t = m.encode();
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
        for (o, c) in [
            ("ok", "2xx"),
            ("unavailable", "4xx"),
            ("unreachable", "none"),
            ("unreachable", "5xx"),
            ("redirect_limit", "3xx"),
            ("ok", "5xx"),
        ] {
            let s = format!(
                "robots_proxy_robots_fetches_total{{outcome=\"{o}\",status_class=\"{c}\"}}"
            );
            assert_eq!(get(&s), Some(1.0), "{s}");
        }
        assert_eq!(
            get("robots_proxy_robots_cache_events_total{event=\"hit\"}"),
            Some(3.0)
        );
        assert_eq!(
            get("robots_proxy_robots_cache_events_total{event=\"stale\"}"),
            Some(1.0)
        );
        assert_eq!(get("robots_proxy_audit_write_failures_total"), Some(1.0));
    }

    #[test]
    fn status_classes() {
        assert_eq!(STATUS_CLASSES[status_class_index(Some(204))], "2xx");
        assert_eq!(STATUS_CLASSES[status_class_index(Some(308))], "3xx");
        assert_eq!(STATUS_CLASSES[status_class_index(Some(451))], "4xx");
        assert_eq!(STATUS_CLASSES[status_class_index(Some(599))], "5xx");
        assert_eq!(STATUS_CLASSES[status_class_index(Some(101))], "none");
        assert_eq!(STATUS_CLASSES[status_class_index(Some(600))], "none");
        assert_eq!(STATUS_CLASSES[status_class_index(None)], "none");
    }

    #[test]
    fn gauges_and_connection_guard() {
        let m = Metrics::new();
        m.set_cache_entries(42);
        let g1 = m.connection_opened();
        let g2 = m.clone().connection_opened();
        let t = m.encode();
        assert_eq!(sample(&t, "robots_proxy_robots_cache_entries"), Some(42.0));
        assert_eq!(sample(&t, "robots_proxy_open_connections"), Some(2.0));
        drop(g1);
        assert_eq!(
            sample(&m.encode(), "robots_proxy_open_connections"),
            Some(1.0)
        );
        drop(g2);
        assert_eq!(
            sample(&m.encode(), "robots_proxy_open_connections"),
            Some(0.0)
        );
    }

    #[test]
    fn latency_histogram_buckets() {
        let m = Metrics::new();
        m.observe_upstream(Duration::from_micros(500));
        m.observe_upstream(Duration::from_millis(30));
        m.observe_upstream(Duration::from_secs(60));
        let t = m.encode();
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

    #[tokio::test]
    async fn the_fleet_is_exposed_once_attached() {
        use crate::fleet::{FleetSettings, OnUnavailable};
        let m = Metrics::new();
        assert!(!m.encode().contains("robots_proxy_fleet_reachable"));
        // Nothing listens on port 1: the call fails at once.
        let fleet = Arc::new(
            Fleet::new(&FleetSettings {
                redis: "redis://127.0.0.1:1/0".into(),
                name: "t".into(),
                node: "n1".into(),
                timeout: Duration::from_secs(2),
                on_unavailable: OnUnavailable::Local,
            })
            .expect("fleet"),
        );
        fleet
            .stats()
            .robots_waited
            .fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        m.attach_fleet(fleet.clone());
        let t = m.encode();
        assert_eq!(sample(&t, "robots_proxy_fleet_reachable"), Some(1.0), "{t}");
        assert_eq!(sample(&t, "robots_proxy_fleet_live_nodes"), Some(0.0));
        assert_eq!(
            sample(&t, "robots_proxy_fleet_robots_waited_total"),
            Some(2.0)
        );
        assert_eq!(
            sample(&t, "robots_proxy_fleet_robots_fetched_total"),
            Some(0.0)
        );
        assert_eq!(sample(&t, "robots_proxy_fleet_reconnects_total"), Some(0.0));
        assert_eq!(
            sample(&t, "robots_proxy_fleet_round_trip_seconds_count"),
            Some(0.0)
        );
        assert!(fleet.heartbeat().await.is_err());
        let t = m.encode();
        assert_eq!(sample(&t, "robots_proxy_fleet_reachable"), Some(0.0), "{t}");
        assert_eq!(
            sample(&t, "robots_proxy_fleet_round_trip_seconds_count"),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &t,
                "robots_proxy_fleet_round_trip_seconds_bucket{le=\"+Inf\"}"
            ),
            Some(1.0),
            "{t}"
        );
        assert!(
            t.contains("robots_proxy_fleet_round_trip_seconds_bucket{le=\"0.0001\"}"),
            "{t}"
        );
        assert!(!t.contains("le=\"5e"), "{t}");
        assert!(t.ends_with("# EOF\n"));
    }
}
