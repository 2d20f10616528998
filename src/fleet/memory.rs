//! Redis's memory and the fleet: schedules before anything a client can
//! make the fleet store.
//!
//! What the fleet keeps in Redis is of two kinds. Schedules, rate
//! windows, leases and heartbeats are small (a key of tens of bytes per
//! origin and agent) and hold the fleet's promises to origins: one lost
//! lets a request through early. Shared robots.txt entries are large (up
//! to [`super::robots::MAX_SHARED_TEXT`] compressed) and optional: a node
//! that finds none fetches the file itself. Clients choose which origins
//! the fleet fetches, so they choose how much of the second kind there
//! is. Three rules keep the first safe from the second:
//!
//! - a shared entry is stored only while Redis's used memory stays under
//!   [`ROBOTS_SHARE`] of its `maxmemory` (read by the storing script from
//!   `INFO memory`, on the node of a cluster that holds the entry); past
//!   it the fetching node keeps its entry to itself and the others fetch
//!   their own: entries cannot bring Redis to `maxmemory`, so they never
//!   make it evict or refuse a schedule;
//! - a write Redis refuses for memory (`OOM`, with `noeviction`) is an
//!   outage for what it wrote: a booking falls back as
//!   `fleet.on_unavailable` says, counted
//!   (`robots_proxy_fleet_redis_full_total`) and logged, and the
//!   connection is kept (it is not what failed);
//! - the eviction policy is read at start: any other than `noeviction`
//!   may evict a schedule (they all carry an expiry, so `volatile-*`
//!   evicts them as readily as `allkeys-*`) when something else fills
//!   Redis, so it is logged as a warning and exposed as
//!   `robots_proxy_fleet_redis_may_evict`.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Fleet;

/// The part of Redis's `maxmemory` under which shared robots.txt entries
/// are stored: the rest is the schedules', and any other user's.
pub const ROBOTS_SHARE: f64 = 0.5;

/// What the fleet counts of Redis's memory, read by `/metrics`.
#[derive(Debug, Default)]
pub struct MemoryStats {
    /// Writes Redis refused for memory (`OOM`).
    pub full: AtomicU64,
    /// Shared robots.txt entries stored.
    pub robots_stored: AtomicU64,
    /// Entries not shared: text larger than `MAX_SHARED_TEXT`.
    pub robots_too_large: AtomicU64,
    /// Entries not shared: Redis's memory past [`ROBOTS_SHARE`].
    pub robots_over_share: AtomicU64,
    /// The eviction policy as read at start: 0 not read (yet), 1
    /// `noeviction`, 2 another (may evict schedules).
    pub policy: AtomicU64,
    /// The minute a refusal for memory was last logged.
    logged: AtomicU64,
}

/// Whether Redis refused a command for memory (`maxmemory` reached with
/// `noeviction`, or nothing left to evict).
pub(super) fn is_full(e: &redis::RedisError) -> bool {
    e.code() == Some("OOM")
}

impl Fleet {
    /// Counts a write Redis refused for memory, and logs it once a minute.
    pub(super) fn refused_for_memory(&self) {
        let m = &self.memory;
        m.full.fetch_add(1, Ordering::Relaxed);
        let minute = super::now_micros() / 60_000_000;
        if m.logged.swap(minute, Ordering::Relaxed) != minute {
            tracing::warn!(
                "fleet: Redis refused a write for memory (maxmemory reached): state no longer \
                 shared, Crawl-delay bookings fall back as fleet.on_unavailable says; give \
                 Redis more maxmemory, or find what else fills it (docs/operating.md)"
            );
        }
    }

    /// What the fleet counts of Redis's memory.
    pub fn memory_stats(&self) -> &MemoryStats {
        &self.memory
    }

    /// Reads Redis's `maxmemory-policy` and `maxmemory` once (the first
    /// call that gets an answer); warns when the policy may evict
    /// schedules. A Redis that does not allow `CONFIG` (some managed
    /// services) is not read: said once, at `info`.
    pub(super) async fn check_memory_policy(&self) {
        if self.memory.policy.load(Ordering::Relaxed) != 0 {
            return;
        }
        let read = self
            .call_always(|mut conn| async move {
                let policy: Vec<String> = redis::cmd("CONFIG")
                    .arg("GET")
                    .arg("maxmemory-policy")
                    .query_async(&mut conn)
                    .await?;
                let max: Vec<String> = redis::cmd("CONFIG")
                    .arg("GET")
                    .arg("maxmemory")
                    .query_async(&mut conn)
                    .await?;
                Ok((policy, max))
            })
            .await;
        let Ok((policy, max)) = read else {
            // Unreachable (tried again at the next heartbeat) or refused.
            if self.is_reachable() {
                self.memory.policy.store(1, Ordering::Relaxed);
                tracing::info!(
                    "fleet: cannot read Redis's maxmemory-policy (CONFIG GET refused): \
                     make sure it is noeviction (docs/operating.md)"
                );
            }
            return;
        };
        let policy = policy.get(1).map_or("", String::as_str);
        let max = max.get(1).map_or("", String::as_str);
        if policy == "noeviction" {
            self.memory.policy.store(1, Ordering::Relaxed);
            if max == "0" {
                tracing::info!(
                    "fleet: Redis has no maxmemory: shared robots.txt entries are bounded \
                     by size and time only (docs/operating.md)"
                );
            }
        } else {
            self.memory.policy.store(2, Ordering::Relaxed);
            tracing::warn!(
                policy,
                maxmemory = max,
                "fleet: Redis's maxmemory-policy may evict Crawl-delay schedules when Redis \
                 fills up: set maxmemory-policy noeviction (docs/operating.md)"
            );
        }
    }
}
