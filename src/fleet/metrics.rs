//! The fleet's series, read from its own atomics at each scrape: the
//! request path pays one atomic add per Redis call, no lock and no
//! registry. Registered by [`Fleet::register_metrics`].

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeMetric;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::{Fleet, ROUND_TRIP_BUCKETS_US};
use crate::metrics::{Registry, encode_counter, encode_gauge};

impl Fleet {
    /// Registers the fleet's series (`robots_proxy_fleet_*`) in `registry`.
    pub(crate) fn register_metrics(self: &Arc<Self>, registry: &Registry) {
        registry.register_collector(FleetCollector(self.clone()));
    }
}

struct FleetCollector(Arc<Fleet>);

impl fmt::Debug for FleetCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetCollector").finish_non_exhaustive()
    }
}

impl Collector for FleetCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let fleet = &self.0;
        let stats = fleet.stats();
        let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
        encode_gauge(
            &mut encoder,
            "robots_proxy_fleet_reachable",
            "Whether the fleet's Redis answered the last call (1) or not (0)",
            u64::from(fleet.is_reachable()),
        )?;
        encode_gauge(
            &mut encoder,
            "robots_proxy_fleet_live_nodes",
            "Nodes of the fleet with a heartbeat in Redis within the last 3 seconds, as last read (kept during an outage)",
            count(&stats.live_nodes),
        )?;
        let counters: [(&str, &str, &AtomicU64); 4] = [
            (
                "robots_proxy_fleet_robots_waited",
                "robots.txt fetches this node waited for from another node of the fleet",
                &stats.robots_waited,
            ),
            (
                "robots_proxy_fleet_robots_fetched",
                "robots.txt fetches this node made for the fleet (under the fleet's lease)",
                &stats.robots_fetched,
            ),
            (
                "robots_proxy_fleet_reconnects",
                "connections to Redis replaced by new ones after calls kept failing (a silent connection)",
                &stats.reconnects,
            ),
            (
                "robots_proxy_fleet_unavailable",
                "Crawl-delay bookings and fleet-wide rate checks (max_rps, auth_failures_per_minute) that found the fleet's Redis unavailable (done locally or refused)",
                &stats.unavailable,
            ),
        ];
        for (name, help, v) in counters {
            encode_counter(&mut encoder, name, help, count(v))?;
        }
        let mut m = encoder.encode_descriptor(
            "robots_proxy_fleet_rejected",
            "Values read from the fleet's Redis whose fleet-key tag failed, ignored as if absent, by kind (robots: a shared robots.txt entry; message: a message on the fleet's channel; kept_purge: a purge kept for nodes not listening; schedule: a Crawl-delay schedule or pause lower than the node knows it, or a seal that failed; replay: a shared entry older than one the node has seen, or past its life; witness: an audit checkpoint kept in Redis, read by audit verify, so 0 on a node)",
            None,
            MetricType::Counter,
        )?;
        for kind in super::key::Kind::ALL {
            let labels = [("kind", kind.label())];
            prometheus_client::metrics::counter::ConstCounter::new(
                fleet.keys().rejected_count(kind),
            )
            .encode(m.encode_family(&labels)?)?;
        }
        encode_memory(&mut encoder, fleet.memory_stats())?;
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

/// The series of [`crate::fleet::memory`].
fn encode_memory(
    encoder: &mut DescriptorEncoder,
    m: &crate::fleet::memory::MemoryStats,
) -> Result<(), fmt::Error> {
    let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let counters: [(&str, &str, &AtomicU64); 4] = [
        (
            "robots_proxy_fleet_redis_full",
            "Writes the fleet's Redis refused for memory (OOM: maxmemory reached); each falls back as fleet.on_unavailable says",
            &m.full,
        ),
        (
            "robots_proxy_fleet_robots_stored",
            "robots.txt entries this node stored in Redis for the fleet",
            &m.robots_stored,
        ),
        (
            "robots_proxy_fleet_robots_too_large",
            "robots.txt entries not shared because their compressed text is over the shared entry's bound (each node fetches its own)",
            &m.robots_too_large,
        ),
        (
            "robots_proxy_fleet_robots_over_share",
            "robots.txt entries not shared because Redis's used memory is past their share of maxmemory (each node fetches its own)",
            &m.robots_over_share,
        ),
    ];
    for (name, help, v) in counters {
        encode_counter(encoder, name, help, count(v))?;
    }
    encode_gauge(
        encoder,
        "robots_proxy_fleet_redis_may_evict",
        "Whether Redis's maxmemory-policy, as read at start, may evict the fleet's schedules (1: any policy but noeviction)",
        u64::from(m.policy.load(Ordering::Relaxed) == 2),
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::fleet::{FleetSettings, OnUnavailable};
    use crate::metrics::sample;

    #[tokio::test]
    async fn the_fleet_is_exposed_once_registered() {
        let m = Registry::new();
        assert!(!m.encode().contains("robots_proxy_fleet_reachable"));
        // Nothing listens on port 1: the call fails at once.
        let fleet = Arc::new(
            Fleet::new(&FleetSettings {
                redis: "redis://127.0.0.1:1/0".into(),
                name: "t".into(),
                node: "n1".into(),
                timeout: Duration::from_secs(2),
                on_unavailable: OnUnavailable::Local,
                keys: None,
            })
            .expect("fleet"),
        );
        fleet.stats().robots_waited.fetch_add(2, Ordering::Relaxed);
        fleet.register_metrics(&m);
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
            sample(&t, "robots_proxy_fleet_unavailable_total"),
            Some(0.0)
        );
        assert_eq!(
            sample(&t, "robots_proxy_fleet_round_trip_seconds_count"),
            Some(0.0)
        );
        assert!(fleet.heartbeat().await.is_err());
        fleet.fell_back();
        let t = m.encode();
        assert_eq!(sample(&t, "robots_proxy_fleet_reachable"), Some(0.0), "{t}");
        assert_eq!(
            sample(&t, "robots_proxy_fleet_unavailable_total"),
            Some(1.0)
        );
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
