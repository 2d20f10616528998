//! Requests in flight to one origin, counted for the whole fleet
//! (`politeness.max_in_flight`).
//!
//! An origin's requests in flight are one sorted set (`…:{<origin>}:inflight`)
//! of lease ids (`<instance> <n>`), each scored by its expiry in
//! milliseconds of Redis's clock (`TIME`), so the nodes' clocks do not
//! matter. [`ACQUIRE_SCRIPT`] drops the expired leases and adds one when
//! fewer than the cap are left; [`RELEASE_SCRIPT`] takes one out. A lease
//! lasts [`LEASE_FOR`] and is renewed every [`RENEW_EVERY`] while its
//! request lives (a long download keeps it); a node that dies (SIGKILL, a
//! lost host) stops renewing, and its leases are dropped by the next
//! acquire once they expire, within [`LEASE_FOR`].
//!
//! A node refused a lease marks the origin as waited for
//! (`…:{<origin>}:inflight-waiting`, kept a few polls); a release on a
//! waited-for origin publishes a `lease-free` event, which wakes the
//! waiting nodes at once ([`super::events`]). A waiting node also tries
//! again every [`POLL_EVERY`] at the latest, and when the first lease
//! expires, so a lost message (pub/sub is best effort) costs one poll. A
//! release nobody waits for publishes nothing.
//!
//! Redis's count may only make a node stricter, never looser: each node
//! counts its own leases per origin ([`OwnLeases`]), and an acquire that
//! finds fewer leases in Redis than the node holds itself (deleted by a
//! writer to Redis) is counted
//! (`robots_proxy_fleet_rejected_total{kind="lease"}`), and so is a
//! renewal that finds its lease gone; the renewal writes it back (within
//! [`RENEW_EVERY`]). A node
//! also never holds more than the cap itself, whatever Redis says (its
//! local lease is taken first, `judge::politeness`).

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::events::Event;
use super::{Failure, Fleet, Unavailable, millis};

/// How long a lease lasts unless renewed.
pub const LEASE_FOR: Duration = Duration::from_secs(5);

/// How often a request in flight renews its lease.
pub const RENEW_EVERY: Duration = Duration::from_secs(1);

/// How often a node waiting for a lease tries again when no `lease-free`
/// event wakes it first.
pub const POLL_EVERY: Duration = Duration::from_millis(250);

/// KEYS: the origin's lease set, its waiting mark. ARGV: the cap, lease
/// ms, lease id, how long the waiting mark is kept (ms). Returns
/// `{1, in flight with this one, 0}` when leased, `{0, in flight, ms
/// until the first lease expires}` when not (the mark set).
const ACQUIRE_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
local lease = tonumber(ARGV[2])
if n < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], lease * 2)
  return {1, n + 1, 0}
end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[4])
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local wait = 0
if first[2] then wait = math.max(0, math.floor(tonumber(first[2]) - now)) end
return {0, n, wait}
";

/// KEYS: the origin's lease set, its waiting mark. ARGV: lease id,
/// channel, message. Takes the lease out; tells the waiting nodes when
/// there are any. Returns 1 when the lease was there.
const RELEASE_SCRIPT: &str = r"
local gone = redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return gone
";

/// KEYS: the origin's lease set. ARGV: lease id, lease ms. Moves the
/// lease's expiry to now + lease ms, adding it if it was dropped (its
/// request is in flight whatever Redis lost: counting it is the polite
/// direction). Returns how many are in flight, and 1 if the lease had
/// to be added.
const RENEW_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
local added = redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
redis.call('PEXPIRE', KEYS[1], lease * 2)
return {redis.call('ZCOUNT', KEYS[1], now, '+inf'), added}
";

/// KEYS: the origin's lease set. Returns how many leases are live.
const COUNT_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], now, '+inf')
";

static ACQUIRE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(ACQUIRE_SCRIPT));
static RELEASE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RELEASE_SCRIPT));
static RENEW: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RENEW_SCRIPT));
static COUNT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(COUNT_SCRIPT));

/// This node's leases held in Redis, by the Redis key of their set: the
/// ids of each origin's (at most its `max_in_flight`).
#[derive(Debug, Default)]
pub struct OwnLeases(parking_lot::Mutex<std::collections::HashMap<Box<str>, Vec<Box<str>>>>);

impl OwnLeases {
    /// The ids held on `set` now.
    fn held(&self, set: &str) -> Vec<Box<str>> {
        self.0.lock().get(set).cloned().unwrap_or_default()
    }

    /// How many of `before` are still held: leases held from before a
    /// call was sent until after it was answered, so in Redis when its
    /// script ran (a release takes its lease out here before it is sent).
    fn still_held(&self, set: &str, before: &[Box<str>]) -> u64 {
        let own = self.0.lock();
        let now = own.get(set).map(Vec::as_slice).unwrap_or_default();
        before.iter().filter(|id| now.contains(id)).count() as u64
    }

    fn add(&self, set: &str, id: &str) {
        self.0.lock().entry(set.into()).or_default().push(id.into());
    }

    fn remove(&self, set: &str, id: &str) {
        let mut own = self.0.lock();
        if let Some(ids) = own.get_mut(set) {
            ids.retain(|held| **held != *id);
            if ids.is_empty() {
                own.remove(set);
            }
        }
    }
}

/// What an acquire found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leased {
    /// Leased: this many in flight with it.
    Yes(u64),
    /// The cap is reached: this many in flight, and the time until the
    /// first of them expires (if not released before).
    Full(u64, Duration),
}

impl Fleet {
    /// The Redis keys of `origin`'s leases: the set, the waiting mark.
    fn lease_keys(&self, origin: &str) -> (String, String) {
        (
            self.key(origin, "inflight"),
            self.key(origin, "inflight-waiting"),
        )
    }

    /// A new lease id: this instance of the proxy, this lease.
    pub fn lease_id(&self) -> String {
        static LEASES: AtomicU64 = AtomicU64::new(0);
        let n = LEASES.fetch_add(1, Ordering::Relaxed);
        format!("{:016x} {n}", self.instance)
    }

    /// Takes a lease `id` on `origin` if fewer than `max` are in flight,
    /// within `allowance` (what is left of the request's `fleet.timeout`).
    pub async fn lease(
        &self,
        origin: &str,
        max: usize,
        id: &str,
        allowance: Duration,
    ) -> Result<Leased, Failure> {
        let (set, waiting) = self.lease_keys(origin);
        let before = self.own_leases.held(&set);
        let place = &set;
        let (leased, n, wait) = self
            .call_within(allowance, |mut conn| async move {
                ACQUIRE
                    .key(place)
                    .key(waiting)
                    .arg(max as u64)
                    .arg(millis(LEASE_FOR))
                    .arg(id)
                    .arg(millis(POLL_EVERY) * 4)
                    .invoke_async::<(i64, i64, i64)>(&mut conn)
                    .await
            })
            .await?;
        let n = u64::try_from(n).unwrap_or(0);
        let own = self.own_leases.still_held(&set, &before);
        // With this one, Redis holds at least this node's own.
        let found = if leased == 1 { n.saturating_sub(1) } else { n };
        if found < own {
            self.keys.rejected(super::key::Kind::Lease, &set);
        }
        Ok(if leased == 1 {
            self.own_leases.add(&set, id);
            Leased::Yes(n.max(own + 1))
        } else {
            let wait = Duration::from_millis(u64::try_from(wait).unwrap_or(0));
            Leased::Full(n.max(own), wait)
        })
    }

    /// Gives lease `id` on `origin` back; the nodes waiting for one are
    /// told. `Ok(false)`: it had expired already.
    pub async fn release_lease(&self, origin: &str, id: &str) -> Result<bool, Unavailable> {
        let (set, waiting) = self.lease_keys(origin);
        self.own_leases.remove(&set, id);
        let message = self.message(&Event::LeaseFree(origin.into()));
        let channel = self.channel();
        let gone = self
            .call(|mut conn| async move {
                RELEASE
                    .key(set)
                    .key(waiting)
                    .arg(id)
                    .arg(channel)
                    .arg(message)
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await?;
        Ok(gone == 1)
    }

    /// Renews lease `id` on `origin` for [`LEASE_FOR`] (adding it again if
    /// Redis lost it, counted: renewed every [`RENEW_EVERY`], a lease
    /// lasts several renewals); returns how many are in flight.
    pub async fn renew_lease(&self, origin: &str, id: &str) -> Result<u64, Unavailable> {
        let (set, _) = self.lease_keys(origin);
        let place = &set;
        let (n, added) = self
            .call(|mut conn| async move {
                RENEW
                    .key(place)
                    .arg(id)
                    .arg(millis(LEASE_FOR))
                    .invoke_async::<(i64, i64)>(&mut conn)
                    .await
            })
            .await?;
        if added == 1 {
            self.keys.rejected(super::key::Kind::Lease, &set);
        }
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// How many requests to `origin` are in flight in the whole fleet (for
    /// `/explain`).
    pub async fn leases_in_flight(&self, origin: &str) -> Result<u64, Unavailable> {
        let (set, _) = self.lease_keys(origin);
        let n = self
            .call(|mut conn| async move { COUNT.key(set).invoke_async::<i64>(&mut conn).await })
            .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_outlive_several_renewals_and_the_waiting_mark_several_polls() {
        assert!(LEASE_FOR >= RENEW_EVERY * 3);
        assert!(ACQUIRE_SCRIPT.contains("'PX', ARGV[4]"));
    }

    #[test]
    fn only_leases_held_across_a_call_are_expected_in_redis() {
        let own = OwnLeases::default();
        own.add("s", "a 1");
        own.add("s", "a 2");
        let before = own.held("s");
        // During the call: one released, one taken.
        own.remove("s", "a 2");
        own.add("s", "a 3");
        assert_eq!(own.still_held("s", &before), 1);
        own.remove("s", "a 1");
        own.remove("s", "a 3");
        assert!(own.held("s").is_empty());
        assert!(own.0.lock().is_empty());
    }
}
