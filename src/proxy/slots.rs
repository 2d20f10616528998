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

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Weak};

use http::Response;
use tokio::sync::Semaphore;

use crate::http::body::Body;

/// The queues of the client addresses connected now (an IPv6 client by its
/// /64, as for `max_connections_per_client`).
pub(crate) struct ClientSlots {
    limit: usize,
    /// Looked up once per connection; an entry lives while a connection
    /// or a request of its address holds the queue.
    by_client: Mutex<HashMap<IpAddr, Weak<ClientQueue>, lru::DefaultHasher>>,
}

impl ClientSlots {
    pub(crate) fn new(limit: usize) -> Arc<ClientSlots> {
        Arc::new(ClientSlots {
            limit: limit.clamp(1, Semaphore::MAX_PERMITS),
            by_client: Mutex::default(),
        })
    }

    /// The queue of `ip`'s address, shared by all its connections: taken
    /// once per connection, so that a request's slot costs no lookup.
    pub(crate) fn queue(self: &Arc<Self>, ip: IpAddr) -> Arc<ClientQueue> {
        let ip = crate::http::destination::client_key(ip);
        let mut by_client = self.by_client.lock();
        if let Some(queue) = by_client.get(&ip).and_then(Weak::upgrade) {
            return queue;
        }
        let queue = Arc::new(ClientQueue {
            semaphore: Semaphore::new(self.limit),
            limit: self.limit,
            ip,
            slots: self.clone(),
        });
        by_client.insert(ip, Arc::downgrade(&queue));
        queue
    }

    /// Addresses with a connection or a request holding their queue.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.by_client.lock().len()
    }
}

/// One client address's slots, held by its connections and its requests
/// in flight; forgotten when the last of them is gone.
pub(crate) struct ClientQueue {
    semaphore: Semaphore,
    limit: usize,
    ip: IpAddr,
    slots: Arc<ClientSlots>,
}

impl std::fmt::Debug for ClientQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientQueue")
            .field("ip", &self.ip)
            .field("free", &self.semaphore.available_permits())
            .finish()
    }
}

impl ClientQueue {
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// A slot if one is free now (a free permit means nobody waits: tokio
    /// hands released permits to waiters first), without the timer a wait
    /// needs.
    pub(crate) fn try_acquire(self: &Arc<Self>) -> Option<ClientPermit> {
        self.semaphore.try_acquire().ok()?.forget();
        Some(ClientPermit {
            queue: self.clone(),
            held: true,
        })
    }

    /// Waits for a slot (in arrival order).
    pub(crate) async fn acquire(self: &Arc<Self>) -> ClientPermit {
        // Never closed: an error cannot happen; a slot without a permit
        // would only be unbounded, not wrong.
        let held = match self.semaphore.acquire().await {
            Ok(permit) => {
                permit.forget();
                true
            }
            Err(_) => false,
        };
        ClientPermit {
            queue: self.clone(),
            held,
        }
    }
}

impl Drop for ClientQueue {
    fn drop(&mut self) {
        let mut by_client = self.slots.by_client.lock();
        // Another connection of the address may have made a new queue
        // since this one's last holder let go: remove only a dead entry.
        if by_client
            .get(&self.ip)
            .is_some_and(|w| w.strong_count() == 0)
        {
            by_client.remove(&self.ip);
        }
    }
}

/// One request's slot under its address's limit, given back on drop.
pub(crate) struct ClientPermit {
    queue: Arc<ClientQueue>,
    /// False only for a slot of a closed semaphore (which never happens).
    held: bool,
}

impl ClientPermit {
    /// `resp` with a body that keeps this slot until it is dropped.
    pub(crate) fn hold_until_sent(self, resp: Response<Body>) -> Response<Body> {
        crate::http::body::hold_until_dropped(resp, self)
    }
}

impl Drop for ClientPermit {
    fn drop(&mut self) {
        if self.held {
            self.queue.semaphore.add_permits(1);
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
        let (qa, qb) = (slots.queue(a), slots.queue(b));
        let first = qa.acquire().await;
        let second = slots.queue(a).try_acquire().expect("a free slot");
        let other = qb.acquire().await;
        assert!(qa.try_acquire().is_none());
        let mut third = Box::pin(qa.acquire());
        assert!(futures_util::poll!(third.as_mut()).is_pending());
        drop(first);
        let third = third.await;
        drop((qa, qb));
        // The requests in flight keep their addresses' queues.
        assert_eq!(slots.tracked(), 2);
        drop((second, third, other));
        assert_eq!(slots.tracked(), 0);
        assert_eq!(slots.queue(a).try_acquire().map(|_| ()), Some(()));
    }
}
