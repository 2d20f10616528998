//! Requests in flight per client address (`max_requests_per_client`).
//!
//! `max_connections_per_client` bounds the connections one address opens
//! to the proxy, and over HTTP/1.1 a connection carries one request at a
//! time, so it also bounds what that address can make the proxy open
//! towards origins. HTTP/2 inside an intercepted tunnel carries many
//! requests per connection: without a bound of its own, 100 tunnels × 200
//! streams against a slow HTTP/1.1 origin made the proxy open 20,000
//! upstream connections and run out of descriptors for everyone. Each
//! request holds one of its address's slots from before robots.txt is
//! judged (a first request to an origin fetches its robots.txt) until its
//! response body has been sent or dropped (the upstream connection is busy
//! until then); a request over the limit waits its turn, in arrival order.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use http::Response;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::body::Body;

/// One semaphore per client address (an IPv6 client by its /64, as for
/// `max_connections_per_client`), kept while a request holds or awaits
/// one of its permits.
pub(crate) struct ClientSlots {
    limit: usize,
    /// Looked up twice per request: foldhash (lru's hasher, randomly
    /// seeded), not SipHash.
    by_client: Mutex<HashMap<IpAddr, Arc<Semaphore>, lru::DefaultHasher>>,
}

impl ClientSlots {
    pub(crate) fn new(limit: usize) -> Arc<ClientSlots> {
        Arc::new(ClientSlots {
            limit: limit.clamp(1, Semaphore::MAX_PERMITS),
            by_client: Mutex::default(),
        })
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// One of `ip`'s slots if one is free now (a free permit means nobody
    /// waits: tokio hands released permits to waiters first), without the
    /// timer a wait needs.
    pub(crate) fn try_acquire(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let ip = crate::net::client_key(ip);
        let permit = self.semaphore(ip).try_acquire_owned().ok()?;
        Some(Slot {
            permit: Some(permit),
            ip,
            slots: self.clone(),
        })
    }

    fn semaphore(&self, ip: IpAddr) -> Arc<Semaphore> {
        self.lock()
            .entry(ip)
            .or_insert_with(|| Arc::new(Semaphore::new(self.limit)))
            .clone()
    }

    /// Waits for one of `ip`'s slots (in arrival order).
    pub(crate) async fn acquire(self: &Arc<Self>, ip: IpAddr) -> Slot {
        let ip = crate::net::client_key(ip);
        let semaphore = self.semaphore(ip);
        // Never closed: an error cannot happen; a slot without a permit
        // would only be unbounded, not wrong.
        let permit = semaphore.acquire_owned().await.ok();
        Slot {
            permit,
            ip,
            slots: self.clone(),
        }
    }

    /// Addresses with a request holding or awaiting a slot.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.lock().len()
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Arc<Semaphore>, lru::DefaultHasher>> {
        self.by_client
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One request's slot under its address's limit, given back on drop.
pub(crate) struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    ip: IpAddr,
    slots: Arc<ClientSlots>,
}

impl Slot {
    /// `resp` with a body that keeps this slot until it is dropped.
    pub(crate) fn hold_until_sent(self, resp: Response<Body>) -> Response<Body> {
        crate::body::hold_until_dropped(resp, self)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut by_client = self.slots.lock();
        drop(self.permit.take());
        // Only the map holds it now: nobody holds or awaits a permit.
        if by_client
            .get(&self.ip)
            .is_some_and(|s| Arc::strong_count(s) == 1)
        {
            by_client.remove(&self.ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_are_bounded_per_address_and_forgotten_when_free() {
        let slots = ClientSlots::new(2);
        let a: IpAddr = "127.0.0.1".parse().expect("ip");
        let b: IpAddr = "127.0.0.2".parse().expect("ip");
        let first = slots.acquire(a).await;
        let second = slots.acquire(a).await;
        let other = slots.acquire(b).await;
        let mut third = Box::pin(slots.acquire(a));
        assert!(futures_util::poll!(third.as_mut()).is_pending());
        drop(first);
        let third = third.await;
        assert_eq!(slots.tracked(), 2);
        drop((second, third, other));
        assert_eq!(slots.tracked(), 0);
    }
}
