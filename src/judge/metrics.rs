//! The robots store's metrics, registered by the store when it is built:
//! fetches by outcome and status class, lookups by result, entries held.

use std::sync::OnceLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::judge::fetch::{Concluded, Fetched};
use crate::metrics::Registry;

type Labels1 = [(&'static str, &'static str); 1];
type Labels2 = [(&'static str, &'static str); 2];

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

    /// How `fetched` ended.
    fn of(fetched: &Fetched) -> FetchOutcome {
        match &fetched.outcome {
            Concluded::Parsed(..) => FetchOutcome::Ok,
            Concluded::RedirectLimit(_) => FetchOutcome::RedirectLimit,
            Concluded::Unavailable(_) => FetchOutcome::Unavailable,
            Concluded::Unreachable(_) | Concluded::BadTls(_) => FetchOutcome::Unreachable,
            // Nothing was fetched: the destination policy refused it.
            Concluded::Refused(_) => FetchOutcome::Refused,
            Concluded::LocalError(_) => FetchOutcome::LocalError,
        }
    }
}

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

/// A robots.txt cache lookup's result (`event` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheEvent {
    /// Fresh entry served.
    Hit,
    /// No entry; fetched.
    Miss,
    /// A stale copy served (robots.txt could not be fetched again).
    Stale,
    /// Expired entry fetched again.
    Expired,
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

/// The robots store's series; cheap clones of shared counters.
#[derive(Clone, Default)]
pub(crate) struct StoreMetrics {
    fetch_family: Family<Labels2, Counter>,
    /// `[outcome][status_class]`; the usual pairs are filled in
    /// [`StoreMetrics::new`] so they show as 0 from the start, odd ones
    /// (ok/5xx) appear when used.
    fetches: std::sync::Arc<[[OnceLock<Counter>; 5]; FetchOutcome::ALL.len()]>,
    lookups: [Counter; CacheEvent::ALL.len()],
    /// Origins whose robots.txt state is held (policy refusals not
    /// counted).
    pub(crate) entries: Gauge,
}

impl StoreMetrics {
    /// The store's series, registered in `registry`.
    pub(crate) fn new(registry: &Registry) -> StoreMetrics {
        let m = StoreMetrics::default();
        registry.register(
            "robots_proxy_robots_fetches",
            "robots.txt fetches by outcome and HTTP status class",
            m.fetch_family.clone(),
        );
        for (outcome, status) in [
            (FetchOutcome::Ok, Some(200)),
            (FetchOutcome::Unavailable, Some(404)),
            (FetchOutcome::Unreachable, Some(500)),
            (FetchOutcome::Unreachable, None),
            (FetchOutcome::RedirectLimit, Some(301)),
            (FetchOutcome::LocalError, None),
            (FetchOutcome::Refused, None),
        ] {
            m.fetch_counter(outcome, status);
        }
        let lookups = Family::<Labels1, Counter>::default();
        let m = StoreMetrics {
            lookups: CacheEvent::ALL.map(|e| lookups.get_or_create_owned(&[("event", e.as_str())])),
            ..m
        };
        registry.register(
            "robots_proxy_robots_cache_events",
            "robots.txt cache lookups by result",
            lookups,
        );
        registry.register(
            "robots_proxy_robots_cache_entries",
            "robots.txt entries held in the cache",
            m.entries.clone(),
        );
        m
    }

    /// Counts one fetch.
    pub(crate) fn fetched(&self, fetched: &Fetched) {
        self.fetch_counter(FetchOutcome::of(fetched), fetched.status)
            .inc();
    }

    /// Counts one lookup.
    pub(crate) fn looked_up(&self, event: CacheEvent) {
        self.lookups[event as usize].inc();
    }

    fn fetch_counter(&self, outcome: FetchOutcome, status: Option<u16>) -> &Counter {
        let class = status_class_index(status);
        self.fetches[outcome as usize][class].get_or_init(|| {
            self.fetch_family.get_or_create_owned(&[
                ("outcome", outcome.as_str()),
                ("status_class", STATUS_CLASSES[class]),
            ])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::sample;

    fn fetched(outcome: Concluded, status: Option<u16>) -> Fetched {
        Fetched {
            outcome,
            status,
            max_age: None,
            retry_after: None,
        }
    }

    #[test]
    fn all_label_values_start_at_zero() {
        let r = Registry::new();
        let _m = StoreMetrics::new(&r);
        let text = r.encode();
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
        assert_eq!(
            sample(&text, "robots_proxy_robots_cache_entries"),
            Some(0.0)
        );
    }

    #[test]
    fn counters_count() {
        let r = Registry::new();
        let m = StoreMetrics::new(&r);
        let parsed = || Concluded::Parsed(crate::robots::Robots::parse(b""), None);
        m.fetched(&fetched(parsed(), Some(200)));
        m.fetched(&fetched(Concluded::Unavailable(String::new()), Some(404)));
        m.fetched(&fetched(Concluded::Unreachable(String::new()), None));
        m.fetched(&fetched(Concluded::Unreachable(String::new()), Some(503)));
        m.fetched(&fetched(Concluded::RedirectLimit(String::new()), Some(301)));
        m.fetched(&fetched(parsed(), Some(503)));
        m.looked_up(CacheEvent::Hit);
        m.looked_up(CacheEvent::Hit);
        m.looked_up(CacheEvent::Hit);
        m.looked_up(CacheEvent::Stale);
        m.entries.set(42);
        let t = r.encode();
        let get = |s: &str| sample(&t, s);
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
        assert_eq!(get("robots_proxy_robots_cache_entries"), Some(42.0));
    }

    #[test]
    fn a_fetch_failed_for_lack_of_a_local_resource_is_counted_apart() {
        let r = Registry::new();
        let m = StoreMetrics::new(&r);
        for outcome in [
            Concluded::LocalError("the proxy is out of file descriptors".into()),
            Concluded::Unreachable("connection refused".into()),
        ] {
            m.fetched(&fetched(outcome, None));
        }
        let text = r.encode();
        for outcome in ["local_error", "unreachable"] {
            let line = format!(
                "robots_proxy_robots_fetches_total{{outcome=\"{outcome}\",status_class=\"none\"}} 1"
            );
            assert!(text.contains(&line), "{line} missing from:\n{text}");
        }
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
}
