//! Requests in flight per origin (`politeness.max_in_flight`): at most
//! that many requests to one origin (scheme, host, port) at once, on this
//! node and, in a fleet, across the fleet.
//!
//! A request takes a [`Lease`] before its Crawl-delay slot (so what is
//! sent keeps both the cap and the interval, see `proxy::flow`) and keeps
//! it until its response body has been read to its end or dropped (the
//! pipeline hands the lease to the response body): what an origin serves
//! at once is what it is asked to. A request that finds the origin full
//! waits, in `mode = "delay"`, up to `max_wait` (at most `max_queue`
//! waiting per origin on this node), else it is refused at once (429,
//! `Retry-After`).
//!
//! On this node the leases are a count per origin in a map that holds
//! only the origins with requests in flight or waiting (so it is bounded
//! by them), woken on each release. In a fleet a request also takes a
//! lease on Redis ([`crate::fleet::lease`]): first this node's count
//! (with the cap, so a node never asks Redis for what it could not take
//! anyway), then Redis's. Waiting for Redis's is woken by the `lease-free`
//! event a release publishes when nodes wait, or by a poll. While the
//! request lives its lease is renewed; a node that dies stops renewing
//! and its leases expire within [`LEASE_FOR`].
//!
//! When Redis is unavailable and `fleet.on_unavailable = "local"`, each
//! node keeps to its share of the cap (`max_in_flight / N` over the `N`
//! live nodes, the remainder to the lowest ranks, so the shares add up to
//! the cap; a node whose share is 0 refuses, as with `"refuse"`). Its
//! leases are renewed on Redis as soon as it answers again, so what is
//! in flight is counted there again.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Mode, NotNow, RateLimited};
use crate::fleet::lease::{Leased, POLL_EVERY, RENEW_EVERY};
use crate::fleet::{Failure, Fleet, OnUnavailable};

pub use crate::fleet::lease::LEASE_FOR;

/// One origin's requests in flight (and waiting) on this node.
#[derive(Debug)]
struct Entry {
    n: usize,
    waiting: usize,
    free: Arc<Notify>,
}

/// The requests in flight per origin; share one per process.
#[derive(Debug)]
pub struct InFlight {
    max: usize,
    mode: Mode,
    origins: Mutex<HashMap<Box<str>, Entry>>,
    waited: AtomicU64,
    refused: AtomicU64,
}

/// A request's place among its origin's requests in flight: given back
/// when dropped (on this node at once; on Redis by a task).
#[derive(Debug)]
pub struct Lease {
    in_flight: Arc<InFlight>,
    origin: Box<str>,
    shared: Option<Shared>,
    /// How long the request waited for it.
    waited: Duration,
    /// Held as long as the lease (a gauge's count).
    guard: Option<crate::metrics::GaugeGuard>,
}

impl Lease {
    /// How long the request waited for its lease.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// Keeps `guard` as long as the lease.
    pub fn hold(&mut self, guard: crate::metrics::GaugeGuard) {
        self.guard = Some(guard);
    }
}

/// A lease's part on Redis.
#[derive(Debug)]
struct Shared {
    fleet: Arc<Fleet>,
    id: String,
    renew: tokio::task::JoinHandle<()>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.in_flight.give_back(&self.origin);
        if let Some(shared) = self.shared.take() {
            shared.renew.abort();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let origin = std::mem::take(&mut self.origin);
                rt.spawn(async move {
                    // A release that fails leaves the lease to expire.
                    let _ = shared.fleet.release_lease(&origin, &shared.id).await;
                });
            }
        }
    }
}

/// This node's share of `max` with `nodes` live nodes, at rank `rank`:
/// the shares of all ranks add up to `max`.
pub(crate) fn share(max: usize, nodes: usize, rank: usize) -> usize {
    let nodes = nodes.max(1);
    max / nodes + usize::from(rank % nodes < max % nodes)
}

impl InFlight {
    /// `None` when `max` is 0 (no cap).
    pub fn new(max: usize, mode: Mode) -> Option<Arc<InFlight>> {
        (max > 0).then(|| {
            Arc::new(InFlight {
                max,
                mode,
                origins: Mutex::new(HashMap::new()),
                waited: AtomicU64::new(0),
                refused: AtomicU64::new(0),
            })
        })
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Requests to `origin` in flight from this node.
    pub fn in_flight(&self, origin: &str) -> usize {
        self.origins.lock().get(origin).map_or(0, |e| e.n)
    }

    #[cfg(test)]
    /// Origins with requests in flight or waiting on this node.
    pub fn tracked(&self) -> usize {
        self.origins.lock().len()
    }

    #[cfg(test)]
    /// Requests that waited for a lease.
    pub fn waited(&self) -> u64 {
        self.waited.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    /// Requests refused for want of a lease (`max_wait`, `max_queue`, or
    /// reject mode).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Takes a lease on `origin`, on this node and, with `fleet`, on
    /// Redis; the request was held `held` for its Crawl-delay slot (taken
    /// from `max_wait`) and waited `fleet_spent` on Redis (taken from
    /// `fleet.timeout` for the first call).
    pub async fn acquire(
        self: &Arc<Self>,
        origin: &str,
        fleet: Option<&Arc<Fleet>>,
        held: Duration,
        fleet_spent: Duration,
    ) -> Result<Lease, NotNow> {
        let now = Instant::now();
        let deadline = match self.mode {
            Mode::Delay { max_wait, .. } => now + max_wait.saturating_sub(held),
            Mode::Reject => now,
        };
        let local = self
            .take(origin, self.max, deadline)
            .await
            .map_err(NotNow::Limited)?;
        let mut lease = match fleet {
            None => local,
            Some(fleet) => {
                self.acquire_in_fleet(local, fleet, deadline, fleet_spent)
                    .await?
            }
        };
        lease.waited = now.elapsed();
        Ok(lease)
    }

    async fn acquire_in_fleet(
        self: &Arc<Self>,
        mut local: Lease,
        fleet: &Arc<Fleet>,
        deadline: Instant,
        fleet_spent: Duration,
    ) -> Result<Lease, NotNow> {
        let id = fleet.lease_id();
        let mut allowance = fleet.timeout().saturating_sub(fleet_spent);
        let mut events = None;
        let mut waited = false;
        loop {
            match fleet.lease(&local.origin, self.max, &id, allowance).await {
                Ok(Leased::Yes(_)) => {
                    local.shared = Some(Shared::new(fleet, &local.origin, id));
                    return Ok(local);
                }
                Ok(Leased::Full(_, first_expires)) => {
                    let now = Instant::now();
                    if now >= deadline {
                        self.refused.fetch_add(1, Ordering::Relaxed);
                        let retry_after = first_expires.clamp(Duration::from_secs(1), LEASE_FOR);
                        return Err(NotNow::Limited(RateLimited { retry_after }));
                    }
                    if !waited {
                        waited = true;
                        self.waited.fetch_add(1, Ordering::Relaxed);
                    }
                    let events = events.get_or_insert_with(|| fleet.events());
                    let until = deadline
                        .min(now + POLL_EVERY)
                        .min(now + first_expires + Duration::from_millis(1));
                    let origin = &*local.origin;
                    let _ = tokio::time::timeout_at(until, async {
                        use tokio::sync::broadcast::error::RecvError;
                        loop {
                            match events.recv().await {
                                Ok(crate::fleet::events::Event::LeaseFree(o)) if *o == *origin => {
                                    return;
                                }
                                Ok(_) => {}
                                Err(RecvError::Lagged(_)) => return,
                                Err(RecvError::Closed) => std::future::pending::<()>().await,
                            }
                        }
                    })
                    .await;
                    allowance = fleet.timeout();
                }
                Err(Failure::Call) => {
                    fleet.fell_back();
                    return Err(NotNow::FleetUnavailable);
                }
                Err(Failure::Outage) => {
                    fleet.fell_back();
                    if fleet.on_unavailable() == OnUnavailable::Refuse {
                        return Err(NotNow::FleetUnavailable);
                    }
                    let live = fleet.live_nodes();
                    let mine = share(self.max, live.count(), live.rank);
                    if mine == 0 {
                        return Err(NotNow::FleetUnavailable);
                    }
                    if self.in_flight(&local.origin) > mine {
                        // Over this node's share: wait for one of its own.
                        let origin = local.origin.clone();
                        drop(local);
                        local = self
                            .take(&origin, mine, deadline)
                            .await
                            .map_err(NotNow::Limited)?;
                    }
                    // Renewed on Redis once it answers again.
                    local.shared = Some(Shared::new(fleet, &local.origin, id));
                    return Ok(local);
                }
            }
        }
    }

    /// Takes one of `limit` places for `origin` on this node, waiting
    /// until `deadline` at most.
    async fn take(
        self: &Arc<Self>,
        origin: &str,
        limit: usize,
        deadline: Instant,
    ) -> Result<Lease, RateLimited> {
        let max_queue = match self.mode {
            Mode::Delay { max_queue, .. } => max_queue,
            Mode::Reject => 0,
        };
        let mut waiting = false;
        loop {
            let free: Arc<Notify>;
            let notified;
            {
                let mut origins = self.origins.lock();
                let e = match origins.get_mut(origin) {
                    Some(e) => e,
                    None => origins.entry(origin.into()).or_insert_with(|| Entry {
                        n: 0,
                        waiting: 0,
                        free: Arc::new(Notify::new()),
                    }),
                };
                if e.n < limit {
                    e.n += 1;
                    if waiting {
                        e.waiting -= 1;
                    }
                    return Ok(Lease {
                        in_flight: self.clone(),
                        origin: origin.into(),
                        shared: None,
                        waited: Duration::ZERO,
                        guard: None,
                    });
                }
                if !waiting {
                    let full =
                        (max_queue > 0 && e.waiting >= max_queue) || Instant::now() >= deadline;
                    if full {
                        let forget = e.n == 0 && e.waiting == 0;
                        if forget {
                            origins.remove(origin);
                        }
                        self.refused.fetch_add(1, Ordering::Relaxed);
                        return Err(RateLimited {
                            retry_after: Duration::from_secs(1),
                        });
                    }
                    e.waiting += 1;
                    waiting = true;
                    self.waited.fetch_add(1, Ordering::Relaxed);
                }
                free = e.free.clone();
                // Registered now, under the lock: a release after the
                // lock is let go wakes it.
                notified = free.notified();
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let mut origins = self.origins.lock();
                if let Some(e) = origins.get_mut(origin) {
                    e.waiting -= 1;
                    if e.n == 0 && e.waiting == 0 {
                        origins.remove(origin);
                    }
                }
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Err(RateLimited {
                    retry_after: Duration::from_secs(1),
                });
            }
        }
    }

    /// A place of `origin` given back: the waiting are woken.
    fn give_back(&self, origin: &str) {
        let mut origins = self.origins.lock();
        if let Some(e) = origins.get_mut(origin) {
            e.n = e.n.saturating_sub(1);
            e.free.notify_waiters();
            if e.n == 0 && e.waiting == 0 {
                origins.remove(origin);
            }
        }
    }
}

impl Shared {
    /// The part on Redis of a lease `id`: renewed every [`RENEW_EVERY`]
    /// until dropped.
    fn new(fleet: &Arc<Fleet>, origin: &str, id: String) -> Shared {
        let (f, o, i) = (fleet.clone(), origin.to_owned(), id.clone());
        let renew = tokio::spawn(async move {
            let mut every = tokio::time::interval_at(Instant::now() + RENEW_EVERY, RENEW_EVERY);
            loop {
                every.tick().await;
                let _ = f.renew_lease(&o, &i).await;
            }
        });
        Shared {
            fleet: fleet.clone(),
            id,
            renew,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delay(max_wait: Duration, max_queue: usize) -> Mode {
        Mode::Delay {
            max_wait,
            max_queue,
        }
    }

    #[test]
    fn shares_add_up_to_the_cap() {
        for max in 1..10 {
            for nodes in 1..8 {
                let sum: usize = (0..nodes).map(|r| share(max, nodes, r)).sum();
                assert_eq!(sum, max, "max {max}, {nodes} nodes");
            }
        }
        assert_eq!(share(2, 3, 2), 0);
        assert_eq!(share(5, 0, 0), 5, "no list read: alone");
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_max_in_flight_the_next_waits_for_a_release() {
        let f = InFlight::new(2, delay(Duration::from_secs(10), 0)).expect("on");
        let o = "http://a.example:80";
        let a = f.acquire(o, None, Duration::ZERO, Duration::ZERO).await;
        let b = f.acquire(o, None, Duration::ZERO, Duration::ZERO).await;
        assert_eq!(f.in_flight(o), 2);
        let mut third = Box::pin(f.acquire(o, None, Duration::ZERO, Duration::ZERO));
        assert!(futures_util::poll!(third.as_mut()).is_pending());
        // Another origin is not held up.
        let other = f
            .acquire("http://b.example:80", None, Duration::ZERO, Duration::ZERO)
            .await
            .expect("another origin");
        tokio::time::advance(Duration::from_secs(3)).await;
        assert!(futures_util::poll!(third.as_mut()).is_pending());
        drop(a);
        let c = third.await.expect("leased once one was given back");
        assert_eq!(f.in_flight(o), 2);
        assert_eq!(f.waited(), 1);
        drop((b, c, other));
        assert_eq!(
            f.tracked(),
            0,
            "origins with nothing in flight are forgotten"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_is_bounded_by_what_is_left_of_max_wait_and_by_max_queue() {
        let f = InFlight::new(1, delay(Duration::from_secs(10), 1)).expect("on");
        let o = "http://a.example:80";
        let _a = f.acquire(o, None, Duration::ZERO, Duration::ZERO).await;
        let started = Instant::now();
        // Held 7 s for Crawl-delay already: 3 s left to wait.
        let waiting = tokio::spawn({
            let f = f.clone();
            async move {
                f.acquire(o, None, Duration::from_secs(7), Duration::ZERO)
                    .await
            }
        });
        tokio::task::yield_now().await;
        // max_queue 1: a second waiter is refused at once.
        let refused = f.acquire(o, None, Duration::ZERO, Duration::ZERO).await;
        assert!(matches!(refused, Err(NotNow::Limited(_))), "{refused:?}");
        assert_eq!(started.elapsed(), Duration::ZERO);
        let timed_out = waiting.await.expect("task");
        assert!(matches!(timed_out, Err(NotNow::Limited(_))));
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert_eq!(f.refused(), 2);
        let r = InFlight::new(1, Mode::Reject).expect("on");
        let _held = r.acquire(o, None, Duration::ZERO, Duration::ZERO).await;
        assert!(
            r.acquire(o, None, Duration::ZERO, Duration::ZERO)
                .await
                .is_err()
        );
    }
}
