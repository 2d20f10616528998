//! A memory budget for robots.txt bodies being fetched, decoded, parsed
//! and compiled at once (`robots.fetch_budget_mib`).
//!
//! Each fetch holds its body as read, its decoded text, the parsed file
//! and the compiled rules until its entry is built: about three times the
//! file (1,000 concurrent first requests to origins serving 500 KiB files
//! peaked at 1.5 GB, against a 224 MiB robots cache). The cache's own
//! budget counts entries once stored, not fetches in flight. Here a fetch
//! reserves what it may hold before it reads the body (sized by its
//! `Content-Length` when it has one, else by the read caps), in one
//! piece, and keeps it until its entry is built; a fetch that finds the
//! budget used waits its turn (first come, first served). Reserving in
//! one piece is what makes waiting safe: a fetch never waits while holding
//! part of the budget, so fetches cannot starve each other half-way.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::Registry;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget, in KiB. Shared by all fetches.
pub struct FetchBudget {
    kib: usize,
    permits: Arc<Semaphore>,
    in_use: AtomicUsize,
    peak: AtomicUsize,
    /// `robots_proxy_robots_fetch_budget_kib{state="in_use"|"peak"}`.
    gauges: Option<(Gauge, Gauge)>,
}

impl FetchBudget {
    /// A budget of `mib` MiB (at least 1).
    pub fn new(mib: usize) -> Arc<FetchBudget> {
        let kib = mib.max(1).saturating_mul(1024).min(Semaphore::MAX_PERMITS);
        Arc::new(FetchBudget {
            kib,
            permits: Arc::new(Semaphore::new(kib)),
            in_use: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            gauges: None,
        })
    }

    /// The budget reporting what is in use, and the most ever, to
    /// `robots_proxy_robots_fetch_budget_kib`, registered in `registry`.
    pub(crate) fn registered(mib: usize, registry: &Registry) -> Arc<FetchBudget> {
        let family = Family::<[(&'static str, &'static str); 1], Gauge>::default();
        let gauges = (
            family.get_or_create_owned(&[("state", "in_use")]),
            family.get_or_create_owned(&[("state", "peak")]),
        );
        registry.register(
            "robots_proxy_robots_fetch_budget_kib",
            "KiB of robots.txt fetches reserved (robots.fetch_budget_mib): in use now, and the most ever",
            family,
        );
        let mut budget = FetchBudget::new(mib);
        if let Some(b) = Arc::get_mut(&mut budget) {
            b.gauges = Some(gauges);
        }
        budget
    }

    /// Waits until `bytes` (rounded up to KiB; at most the whole budget,
    /// so a file larger than it is fetched alone) are free, and holds them
    /// until the reservation is dropped.
    pub(crate) async fn reserve(self: &Arc<Self>, bytes: usize) -> Reservation {
        let kib = bytes.div_ceil(1024).clamp(1, self.kib);
        let n = u32::try_from(kib).unwrap_or(u32::MAX);
        // Never closed: no error can come; unbudgeted is the fallback.
        let permit = self.permits.clone().acquire_many_owned(n).await.ok();
        let now = self.in_use.fetch_add(kib, Ordering::Relaxed) + kib;
        let peak = self.peak.fetch_max(now, Ordering::Relaxed).max(now);
        self.report(now, peak);
        Reservation {
            kib,
            _permit: permit,
            budget: self.clone(),
        }
    }

    fn report(&self, now: usize, peak: usize) {
        if let Some((in_use, most)) = &self.gauges {
            in_use.set(i64::try_from(now).unwrap_or(i64::MAX));
            most.set(i64::try_from(peak).unwrap_or(i64::MAX));
        }
    }
}

/// Part of the budget, held by one fetch until its entry is built.
pub struct Reservation {
    kib: usize,
    _permit: Option<OwnedSemaphorePermit>,
    budget: Arc<FetchBudget>,
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reservation({} KiB)", self.kib)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let b = &self.budget;
        let now = b.in_use.fetch_sub(self.kib, Ordering::Relaxed) - self.kib;
        b.report(now, b.peak.load(Ordering::Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reservations_wait_for_the_budget_and_are_capped_to_it() {
        let budget = FetchBudget::new(1);
        let first = budget.reserve(600 * 1024).await;
        let mut second = Box::pin(budget.reserve(600 * 1024));
        assert!(futures_util::poll!(second.as_mut()).is_pending());
        drop(first);
        let second = second.await;
        drop(second);
        // Larger than the whole budget: capped, fetched alone.
        let huge = budget.reserve(10 << 20).await;
        assert_eq!(huge.kib, 1024);
        drop(huge);
        assert_eq!(budget.peak.load(Ordering::Relaxed), 1024);
        assert_eq!(budget.in_use.load(Ordering::Relaxed), 0);
    }
}
