//! Connections open per client address (`max_connections_per_client`),
//! an IPv6 client counted by its /64.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// Connections open per client address (an IPv6 client by its /64, see
/// [`crate::http::destination::client_key`]), for `max_connections_per_client`.
#[derive(Clone)]
pub(crate) struct PerClient {
    limit: usize,
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl PerClient {
    pub(crate) fn new(limit: usize) -> PerClient {
        PerClient {
            limit: limit.max(1),
            counts: Arc::default(),
        }
    }

    /// A place for one more connection from `ip`; `None` at the limit.
    pub(crate) fn take(&self, ip: IpAddr) -> Option<ClientSlot> {
        let ip = crate::http::destination::client_key(ip);
        let mut counts = self.counts.lock();
        let n = counts.entry(ip).or_default();
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            ip,
            counts: self.counts.clone(),
        })
    }
}

/// One connection's place under its address's limit, given back on drop.
pub(crate) struct ClientSlot {
    ip: IpAddr,
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock();
        if let Some(n) = counts.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}
