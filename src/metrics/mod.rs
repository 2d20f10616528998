//! The metrics registry, at the bottom of the layers: each layer registers
//! and owns its metric families when it is built (`judge::metrics`,
//! `fleet`'s collector, `response_cache::metrics`, `server`'s connection
//! counts, the audit log's write failures, `proxy::metrics`), and the admin
//! endpoint encodes the whole in the OpenMetrics text format. Nothing
//! reports upwards through a callback.
//!
//! Labelled series with a small fixed label set are resolved once, when
//! their family is registered, and kept as plain atomic counters: the hot
//! path never touches a `Family`'s hash map or its lock.

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Metric;

/// `Content-Type` for the body returned by [`Registry::encode`].
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The process's metrics; cheap to clone (one `Arc`), one per process.
#[derive(Clone, Default)]
pub struct Registry(Arc<Mutex<prometheus_client::registry::Registry>>);

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Registers `metric` (a clone of what its owner keeps: metrics are
    /// shared handles). Counter names are given without `_total`: the
    /// encoder adds it.
    pub(crate) fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.0.lock().register(name, help, metric);
    }

    /// Registers a collector, for series read from their owner's state at
    /// each scrape.
    pub(crate) fn register_collector(&self, collector: impl Collector) {
        self.0.lock().register_collector(Box::new(collector));
    }

    /// Every registered metric in the OpenMetrics text format (ends with
    /// `# EOF`); serve it with [`CONTENT_TYPE`].
    pub(crate) fn encode(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        // Writing into a String cannot fail; an Err could only come from a
        // metric's own encoder, and a partial page is better than none.
        let _ = encode(&mut out, &self.0.lock());
        out
    }
}

/// Counts one in a gauge (an open connection, a request waiting) until
/// dropped.
#[derive(Debug)]
#[must_use = "counted only while the guard lives"]
pub struct GaugeGuard(Gauge);

impl GaugeGuard {
    pub(crate) fn new(gauge: &Gauge) -> GaugeGuard {
        gauge.inc();
        GaugeGuard(gauge.clone())
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Encodes one unlabelled gauge read at scrape time (in a collector).
pub(crate) fn encode_gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> fmt::Result {
    let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    let m = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
    gauge.encode(m)
}

/// Encodes one unlabelled counter read at scrape time (in a collector);
/// `name` without `_total`.
pub(crate) fn encode_counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> fmt::Result {
    let counter = ConstCounter::new(value);
    let m = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
    counter.encode(m)
}

/// The value of the first sample line of `text` that starts with
/// `series ` (for tests of each layer's metrics).
#[cfg(test)]
pub(crate) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn what_layers_register_is_encoded_once_each() {
        let r = Registry::new();
        let c = Counter::<u64>::default();
        r.register("robots_proxy_x", "x", c.clone());
        let g = Gauge::<i64>::default();
        r.register("robots_proxy_g", "g", g.clone());
        c.inc();
        let held = GaugeGuard::new(&g);
        let t = r.encode();
        assert_eq!(sample(&t, "robots_proxy_x_total"), Some(1.0), "{t}");
        assert_eq!(sample(&t, "robots_proxy_g"), Some(1.0), "{t}");
        drop(held);
        assert_eq!(sample(&r.encode(), "robots_proxy_g"), Some(0.0));
        assert!(t.ends_with("# EOF\n"));
        assert!(!t.contains("_total_total"));
    }
}
