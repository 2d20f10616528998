//! The cache's counters as Prometheus metrics, read from its own atomics
//! at each scrape; registered by [`ResponseCache::register_metrics`]
//! (nothing while the cache is disabled).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::ResponseCache;
use crate::metrics::{Registry, encode_counter};

impl ResponseCache {
    /// Registers `robots_proxy_response_cache_*` in `registry`.
    pub(crate) fn register_metrics(&self, registry: &Registry) {
        registry.register_collector(CacheCollector {
            cache: self.clone(),
        });
    }
}

/// Encodes `robots_proxy_response_cache_*`.
struct CacheCollector {
    cache: ResponseCache,
}

impl std::fmt::Debug for CacheCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheCollector").finish_non_exhaustive()
    }
}

fn gauge(v: u64) -> ConstGauge {
    ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX))
}

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let c = self.cache.counters();
        let counters: [(&str, &str, u64); 11] = [
            (
                "robots_proxy_response_cache_hits",
                "Requests answered from the response cache",
                c.hits,
            ),
            (
                "robots_proxy_response_cache_misses",
                "Requests forwarded without a usable stored response",
                c.misses,
            ),
            (
                "robots_proxy_response_cache_revalidations",
                "Requests forwarded to revalidate a stored response",
                c.revalidations,
            ),
            (
                "robots_proxy_response_cache_revalidated",
                "Revalidations answered 304: the stored response was served",
                c.revalidated,
            ),
            (
                "robots_proxy_response_cache_stored",
                "Responses stored",
                c.stored,
            ),
            (
                "robots_proxy_response_cache_too_large",
                "Responses not stored for passing cache.max_object_size",
                c.too_large,
            ),
            (
                "robots_proxy_response_cache_collapsed_waits",
                "Requests that waited for another request's response to the same URL",
                c.collapsed_waits,
            ),
            (
                "robots_proxy_response_cache_invalidations",
                "Stored responses removed by unsafe requests or purges",
                c.invalidations,
            ),
            (
                "robots_proxy_response_cache_corrupt",
                "Stored files that failed verification (deleted)",
                c.corrupt,
            ),
            (
                "robots_proxy_response_cache_unavailable",
                "504 answers of offline mode or only-if-cached",
                c.unavailable,
            ),
            (
                "robots_proxy_response_cache_delete_errors",
                "Cache files that could not be deleted, and purges that could not be recorded on disk",
                c.delete_errors,
            ),
        ];
        for (name, help, v) in counters {
            encode_counter(&mut encoder, name, help, v)?;
        }
        let pending = gauge(c.deletions_pending);
        let m = encoder.encode_descriptor(
            "robots_proxy_response_cache_deletions_pending",
            "Removed responses and files whose deletion is queued",
            None,
            pending.metric_type(),
        )?;
        pending.encode(m)?;
        let tiered: [(&str, &str, bool, u64, u64); 3] = [
            (
                "robots_proxy_response_cache_evictions",
                "Stored responses evicted, by tier",
                true,
                c.evictions_memory,
                c.evictions_disk,
            ),
            (
                "robots_proxy_response_cache_bytes",
                "Bytes held by the response cache, by tier",
                false,
                c.memory_bytes,
                c.disk_bytes,
            ),
            (
                "robots_proxy_response_cache_objects",
                "Responses held by the response cache, by tier",
                false,
                c.memory_objects,
                c.disk_objects,
            ),
        ];
        for (name, help, counter, memory, disk) in tiered {
            let ty = if counter {
                ConstCounter::new(0u64).metric_type()
            } else {
                gauge(0).metric_type()
            };
            let mut m = encoder.encode_descriptor(name, help, None, ty)?;
            for (tier, v) in [("memory", memory), ("disk", disk)] {
                let labels = [("tier", tier)];
                let e = m.encode_family(&labels)?;
                if counter {
                    ConstCounter::new(v).encode(e)?;
                } else {
                    gauge(v).encode(e)?;
                }
            }
        }
        Ok(())
    }
}
