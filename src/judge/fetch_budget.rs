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
//!
//! Each client (its proxy user when authenticated, else its address) has
//! a share: at most [`CLIENT_SHARE`] of the budget, and
//! [`CLIENT_FETCHES`] fetches in flight, whatever their size. A client
//! whose origins trickle their files a byte a second holds its share
//! until they time out; the rest of the budget stays free, and another
//! client's first fetch starts at once. A fetch waits for its client's
//! share first, then for the budget; the time waited does not count
//! against the origin's timeout. The clients are known from the request
//! that started the fetch ([`for_client`]); fetches of no client (an
//! admin's `/explain`) have no share of their own, only the budget.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::Registry;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The part of the budget one client's fetches may hold at once.
pub const CLIENT_SHARE: f64 = 0.25;

/// Fetches one client may have in flight at once (the others it starts
/// wait their turn).
pub const CLIENT_FETCHES: usize = 64;

/// Clients tracked at once (those with fetches in flight or waiting);
/// past it, new ones share one account.
const MAX_CLIENTS: usize = 4096;

/// Who a fetch is for: the request's proxy user, else its address (an
/// IPv6 one by its /64, as every per-client limit counts them).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Client {
    User(Arc<str>),
    Address(std::net::IpAddr),
    /// The clients past [`MAX_CLIENTS`], together.
    Others,
}

tokio::task_local! {
    static CLIENT: Client;
}

/// Runs `work` (a request's judgement) with the robots.txt fetches it
/// starts counted to `client`.
pub(crate) async fn for_client<F: Future>(client: Client, work: F) -> F::Output {
    CLIENT.scope(client, work).await
}

/// The client of the request running now, if any.
pub(crate) fn current_client() -> Option<Client> {
    CLIENT.try_with(Client::clone).ok()
}

/// Runs `work` (a fetch started for a request, in a task of its own) for
/// `client`, as the request that started it was.
pub(crate) async fn continue_for<F: Future>(client: Option<Client>, work: F) -> F::Output {
    match client {
        Some(c) => CLIENT.scope(c, work).await,
        None => work.await,
    }
}

/// One client's share: its part of the budget and its fetches in flight.
struct Share {
    kib: Arc<Semaphore>,
    fetches: Arc<Semaphore>,
    /// Fetches holding or waiting for this share: dropped at 0.
    users: usize,
}

/// The budget, in KiB. Shared by all fetches.
pub struct FetchBudget {
    kib: usize,
    /// What one client may hold.
    share_kib: usize,
    clients: Mutex<HashMap<Client, Share>>,
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
            share_kib: ((kib as f64 * CLIENT_SHARE) as usize).max(1),
            clients: Mutex::new(HashMap::new()),
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

    /// The share of the client of the request running now, counted as
    /// used until the guard is dropped; `None` for no client.
    fn share(self: &Arc<Self>) -> Option<ShareGuard> {
        let client = current_client()?;
        let mut clients = self.clients.lock();
        let key = if clients.len() >= MAX_CLIENTS && !clients.contains_key(&client) {
            // Bounded: the clients past the bound share one account.
            Client::Others
        } else {
            client
        };
        let share = clients.entry(key.clone()).or_insert_with(|| Share {
            kib: Arc::new(Semaphore::new(self.share_kib)),
            fetches: Arc::new(Semaphore::new(CLIENT_FETCHES)),
            users: 0,
        });
        share.users += 1;
        Some(ShareGuard {
            kib: share.kib.clone(),
            fetches: share.fetches.clone(),
            key,
            budget: self.clone(),
        })
    }

    /// Waits until the client of the request running now has a fetch in
    /// flight free, and holds it until the returned guard is dropped (the
    /// fetch is over). `None`: no client, no wait.
    pub(crate) async fn start_fetch(self: &Arc<Self>) -> Option<InFlight> {
        let guard = self.share()?;
        // Never closed.
        let permit = guard.fetches.clone().acquire_owned().await.ok();
        Some(InFlight {
            _permit: permit,
            _guard: guard,
        })
    }

    /// Waits until `bytes` (rounded up to KiB; at most the whole budget,
    /// so a file larger than it is fetched alone) are free, in the budget
    /// and in the share of the request's client, and holds them until the
    /// reservation is dropped.
    pub(crate) async fn reserve(self: &Arc<Self>, bytes: usize) -> Reservation {
        let kib = bytes.div_ceil(1024).clamp(1, self.kib);
        let share = match self.share() {
            Some(guard) => {
                let n = u32::try_from(kib.min(self.share_kib)).unwrap_or(u32::MAX);
                let permit = guard.kib.clone().acquire_many_owned(n).await.ok();
                Some((permit, guard))
            }
            None => None,
        };
        let n = u32::try_from(kib).unwrap_or(u32::MAX);
        // Never closed: no error can come; unbudgeted is the fallback.
        let permit = self.permits.clone().acquire_many_owned(n).await.ok();
        let now = self.in_use.fetch_add(kib, Ordering::Relaxed) + kib;
        let peak = self.peak.fetch_max(now, Ordering::Relaxed).max(now);
        self.report(now, peak);
        Reservation {
            kib,
            _permit: permit,
            _share: share,
            budget: self.clone(),
        }
    }

    /// Clients with fetches in flight or waiting (for tests).
    #[cfg(test)]
    fn clients(&self) -> usize {
        self.clients.lock().len()
    }

    fn report(&self, now: usize, peak: usize) {
        if let Some((in_use, most)) = &self.gauges {
            in_use.set(i64::try_from(now).unwrap_or(i64::MAX));
            most.set(i64::try_from(peak).unwrap_or(i64::MAX));
        }
    }
}

/// A client's share, counted as used while held.
struct ShareGuard {
    kib: Arc<Semaphore>,
    fetches: Arc<Semaphore>,
    key: Client,
    budget: Arc<FetchBudget>,
}

impl Drop for ShareGuard {
    fn drop(&mut self) {
        let mut clients = self.budget.clients.lock();
        if let Some(share) = clients.get_mut(&self.key) {
            share.users = share.users.saturating_sub(1);
            if share.users == 0 {
                clients.remove(&self.key);
            }
        }
    }
}

/// A fetch in flight of a client, held until the fetch is over.
pub struct InFlight {
    _permit: Option<OwnedSemaphorePermit>,
    _guard: ShareGuard,
}

/// Part of the budget, held by one fetch until its entry is built.
pub struct Reservation {
    kib: usize,
    _permit: Option<OwnedSemaphorePermit>,
    /// The part of its client's share, if it has a client.
    _share: Option<(Option<OwnedSemaphorePermit>, ShareGuard)>,
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

    #[tokio::test]
    async fn a_client_holds_its_share_and_the_others_go_at_once() {
        // 4 MiB: a share of 1 MiB.
        let budget = FetchBudget::new(4);
        let hog = Client::Address([192, 0, 2, 1].into());
        let held = for_client(hog.clone(), budget.reserve(1 << 20)).await;
        let mut more = Box::pin(for_client(hog.clone(), budget.reserve(1024)));
        assert!(
            futures_util::poll!(more.as_mut()).is_pending(),
            "its share is used"
        );
        let other = for_client(
            Client::Address([192, 0, 2, 2].into()),
            budget.reserve(2 << 20),
        )
        .await;
        assert_eq!(budget.clients(), 2);
        drop(held);
        let more = more.await;
        drop((more, other));
        assert_eq!(budget.clients(), 0, "no client is kept once done");
        assert_eq!(budget.in_use.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_client_has_so_many_fetches_in_flight() {
        let budget = FetchBudget::new(4);
        let hog = Client::User("mallory".into());
        let mut flights = Vec::new();
        for _ in 0..CLIENT_FETCHES {
            flights.push(for_client(hog.clone(), budget.start_fetch()).await);
        }
        let mut next = Box::pin(for_client(hog.clone(), budget.start_fetch()));
        assert!(futures_util::poll!(next.as_mut()).is_pending());
        assert!(
            for_client(Client::User("alice".into()), budget.start_fetch())
                .await
                .is_some()
        );
        assert!(budget.start_fetch().await.is_none(), "no client, no share");
        flights.pop();
        assert!(next.await.is_some());
    }
}
