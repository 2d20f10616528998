//! What limits the flow of requests to an origin besides its Crawl-delay:
//! its response time ([`super::latency`]) and its requests in flight
//! ([`super::inflight`]). Both off by default, and then nothing is
//! measured, counted or asked of Redis.

use std::sync::Arc;
use std::time::Duration;

use super::Mode;
use super::inflight::InFlight;
use super::latency::Latency;

/// `politeness.latency_factor` and `politeness.max_in_flight`, with what
/// they need of the other politeness settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowSettings {
    /// 0: off.
    pub latency_factor: f64,
    /// 0: no cap.
    pub max_in_flight: usize,
    pub mode: Mode,
    pub max_tracked: usize,
    pub max_crawl_delay: Duration,
}

/// The state of both; share one per process.
#[derive(Debug, Clone)]
pub struct Flow {
    pub latency: Option<Arc<Latency>>,
    pub in_flight: Option<Arc<InFlight>>,
    settings: FlowSettings,
}

impl Flow {
    /// Built from `settings`, or `previous`'s state kept when its
    /// settings are the same (a reload that changes nothing here).
    pub fn new(settings: FlowSettings, previous: Option<&Flow>) -> Flow {
        if let Some(p) = previous
            && p.settings == settings
        {
            return p.clone();
        }
        Flow {
            latency: Latency::new(
                settings.latency_factor,
                settings.max_tracked,
                settings.max_crawl_delay,
            )
            .map(Arc::new),
            in_flight: InFlight::new(settings.max_in_flight, settings.mode),
            settings,
        }
    }

    /// The least interval between requests to `origin` its response time
    /// asks for (`None`: no floor): for the admin listener's `/explain`.
    pub fn latency_floor(&self, origin: &str) -> Option<Duration> {
        self.latency.as_ref()?.floor(origin)
    }

    /// Requests to `origin` in flight from this node, and the cap
    /// (`None`: no cap): for the admin listener's `/explain` (the fleet's
    /// count: [`crate::fleet::Fleet::leases_in_flight`]).
    pub fn in_flight(&self, origin: &str) -> Option<(usize, usize)> {
        let f = self.in_flight.as_ref()?;
        Some((f.in_flight(origin), f.max()))
    }
}
