//! Fleet mode: several proxies sharing one Redis (or a Redis Cluster) act
//! as one towards every origin: one Crawl-delay schedule per origin and
//! agent ([`schedule`]), one robots.txt fetch per origin, and limits that
//! hold across the fleet. Every node writes a heartbeat and keeps the
//! list of live nodes ([`nodes`]); [`FleetStats`] holds the counters
//! `/metrics` reads.
//!
//! This module holds what every shared piece of state needs: the
//! connection, the key names, and [`Fleet::call`], the one way to reach
//! Redis. Every call is bounded by `timeout`; when Redis is down or slow
//! the caller falls back to local state or refuses, as configured. During
//! an outage one call per [`RETRY_EVERY`] tries Redis again; the others
//! fall back at once, so a Redis that does not answer at all costs most
//! requests nothing, not the timeout each.
//!
//! Every key of one origin carries the origin as its hash tag
//! (`robots-proxy:<name>:{<origin>}:…`), so a script touches one slot of a
//! Redis Cluster and origins spread over its shards.

pub mod beat;
mod connection;
pub mod events;
pub mod floor;
pub mod key;
pub mod latency;
pub mod lease;
pub mod memory;
mod metrics;
pub mod nodes;
pub mod pauses;
pub mod queue;
pub mod rate;
pub mod robots;
pub mod schedule;
pub mod spend;
pub mod stamp;
pub mod witness;

use parking_lot::Mutex;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

pub use connection::{Connection, RedisTarget};
pub use nodes::LiveNodes;
pub use schedule::{Booking, Bounds};

/// During an outage, how often a call tries Redis again.
pub const RETRY_EVERY: Duration = Duration::from_secs(1);

/// What to do when Redis cannot be reached within the timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUnavailable {
    /// Go on with this node's own state (as without a fleet).
    Local,
    /// Refuse requests whose origin's state cannot be shared (503).
    Refuse,
}

/// Fleet settings, from `[fleet]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetSettings {
    /// One server, or a Redis Cluster's nodes.
    pub redis: RedisTarget,
    /// Key namespace: fleets sharing one Redis keep apart by name.
    pub name: String,
    /// This node's name, unique in the fleet.
    pub node: String,
    /// Longest any request waits on Redis.
    pub timeout: Duration,
    pub on_unavailable: OnUnavailable,
    /// The fleet key (`None`: an unauthenticated fleet, see `fleet::key`).
    pub keys: Option<key::KeySettings>,
}

/// Redis did not answer within the timeout, or answered an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable;

/// Why a call failed, for callers whose answer differs: an outage falls
/// back as `on_unavailable` says, a failure of the call alone is refused
/// (what the other nodes do meanwhile goes on on Redis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Redis, or the node of a cluster that holds the key, cannot be
    /// reached (this call's failure, or an outage under way), or takes no
    /// write for memory ([`memory`]).
    Outage,
    /// Redis answers, but not this call: cut short by the request's
    /// allowance, or the command failed on its key.
    Call,
}

impl From<Failure> for Unavailable {
    fn from(_: Failure) -> Unavailable {
        Unavailable
    }
}

/// The fleet's shared state; one per process.
pub struct Fleet {
    link: connection::Link,
    name: String,
    node: String,
    /// This instance of the proxy, random ([`events::Author`]).
    instance: u64,
    timeout: Duration,
    on_unavailable: OnUnavailable,
    /// Whether the last call failed: one warning per outage.
    down: AtomicBool,
    /// The minute a command error was last logged.
    command_error_logged: AtomicU64,
    /// During an outage, when Redis is next tried.
    retry_at: Mutex<Option<Instant>>,
    /// The live nodes as last read by the heartbeat ([`nodes`]).
    live: Mutex<Arc<LiveNodes>>,
    stats: FleetStats,
    /// Redis's memory as the fleet sees it ([`memory`]).
    memory: memory::MemoryStats,
    /// What the nodes tell each other ([`events`]).
    events: tokio::sync::broadcast::Sender<events::Event>,
    /// Set once the subscriber task runs.
    subscriber: OnceLock<()>,
    /// This node's listeners as its heartbeat tells the others
    /// (`ip:port,ip:port`).
    listeners: Mutex<String>,
    /// The other live nodes' listeners, refused as destinations.
    peers: crate::http::destination::PeerListeners,
    /// Redis's clock and the peer listeners remembered ([`beat`]).
    beats: beat::Beats,
    /// This node's leases held in Redis ([`lease`]).
    own_leases: lease::OwnLeases,
    /// The allowance each rate key was left at by this node's own last
    /// admission ([`rate`]).
    rate_floors: floor::Floors,
    /// The requests this node holds on the fleet's schedules ([`queue`]).
    waiters: queue::Waiters,
    /// The origins this node knows to be paused ([`pauses`]).
    pauses: pauses::Known,
    /// Tags what this node writes, verifies what it reads ([`key`]).
    keys: Arc<key::Keys>,
    /// What this node knows of the schedules it booked ([`floor`]).
    floors: floor::Floors,
    /// The latest shared robots.txt entry read per origin ([`stamp`]).
    generations: stamp::Generations,
}

/// Upper bounds (microseconds) of the Redis round-trip histogram:
/// 50 µs (loopback) .. 1 s; a last bucket holds the rest.
pub const ROUND_TRIP_BUCKETS_US: [u64; 13] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
];

/// The round trips of [`Fleet::call`]: one atomic per bucket, read by
/// `/metrics` at scrape time. Calls cut off by `timeout` count at the
/// timeout; calls refused at once during an outage are not round trips.
#[derive(Debug, Default)]
pub struct RoundTrips {
    /// Per bucket (not cumulative); the last one is above every bound.
    buckets: [AtomicU64; ROUND_TRIP_BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

impl RoundTrips {
    fn observe(&self, took: Duration) {
        let us = micros(took);
        let i = ROUND_TRIP_BUCKETS_US.partition_point(|&b| b < us);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Counts per bucket (the last above every bound) and the sum in
    /// microseconds.
    pub fn snapshot(&self) -> ([u64; ROUND_TRIP_BUCKETS_US.len() + 1], u64) {
        (
            std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            self.sum_us.load(Ordering::Relaxed),
        )
    }
}

/// The fleet's counters, cheap to update (atomics), read by `/metrics`.
#[derive(Debug, Default)]
pub struct FleetStats {
    /// Round trips of every call to Redis.
    pub round_trips: RoundTrips,
    /// Live nodes as last read (0 until Redis first answered).
    pub live_nodes: AtomicU64,
    /// When Redis last answered (µs of Unix time; 0: never).
    pub answered_at: AtomicU64,
    /// When Redis last answered again after an outage (µs of Unix time;
    /// 0: never).
    pub recovered_at: AtomicU64,
    /// robots.txt fetches this node waited for from another node
    /// (`robots_proxy_fleet_robots_waited_total`).
    pub robots_waited: AtomicU64,
    /// robots.txt fetches this node made for the fleet, under its lease
    /// (`robots_proxy_fleet_robots_fetched_total`).
    pub robots_fetched: AtomicU64,
    /// Connections to Redis replaced after calls kept failing
    /// (`robots_proxy_fleet_reconnects_total`).
    pub reconnects: AtomicU64,
    /// Crawl-delay bookings and fleet-wide rate checks that found Redis
    /// unavailable and were done locally or refused
    /// (`robots_proxy_fleet_unavailable_total`; [`Fleet::fell_back`]).
    pub unavailable: AtomicU64,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("name", &self.name)
            .field("node", &self.node)
            .field("timeout", &self.timeout)
            .field("on_unavailable", &self.on_unavailable)
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// Parses the URLs; nothing is contacted until the first call.
    pub fn new(settings: &FleetSettings) -> Result<Fleet, redis::RedisError> {
        Ok(Fleet {
            link: connection::Link::new(
                connection::Clients::open(&settings.redis)?,
                settings.timeout,
            ),
            name: settings.name.clone(),
            node: settings.node.clone(),
            instance: events::new_instance(),
            timeout: settings.timeout,
            on_unavailable: settings.on_unavailable,
            down: AtomicBool::new(false),
            command_error_logged: AtomicU64::new(0),
            retry_at: Mutex::new(None),
            live: Mutex::new(Arc::default()),
            stats: FleetStats::default(),
            memory: memory::MemoryStats::default(),
            events: events::new_channel(),
            subscriber: OnceLock::new(),
            listeners: Mutex::new(String::new()),
            peers: Default::default(),
            beats: beat::Beats::default(),
            own_leases: lease::OwnLeases::default(),
            rate_floors: floor::Floors::default(),
            waiters: queue::Waiters::default(),
            pauses: pauses::Known::default(),
            keys: Arc::new(key::Keys::new(settings.keys.as_ref())),
            floors: floor::Floors::default(),
            generations: stamp::Generations::default(),
        })
    }

    /// This node's listeners, told to the other nodes by its heartbeat,
    /// and where the other nodes' are kept (the destination policy's
    /// list).
    pub fn with_listeners(
        mut self,
        own: impl IntoIterator<Item = std::net::SocketAddr>,
        peers: crate::http::destination::PeerListeners,
    ) -> Fleet {
        let own: Vec<String> = own.into_iter().map(|a| a.to_string()).collect();
        *self.listeners.get_mut() = own.join(",");
        self.peers = peers;
        self
    }

    pub fn on_unavailable(&self) -> OnUnavailable {
        self.on_unavailable
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The fleet's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Longest any call waits on Redis.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The key `robots-proxy:<name>:{<tag>}:<suffix>`: keys with one tag
    /// (one origin) are kept on one Redis Cluster slot.
    pub fn key(&self, tag: &str, suffix: &str) -> String {
        format!("robots-proxy:{}:{{{tag}}}:{suffix}", self.name)
    }

    /// The fleet key's signer and verifier.
    pub fn keys(&self) -> &Arc<key::Keys> {
        &self.keys
    }

    /// Whether Redis answered the last call.
    pub fn is_reachable(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }

    /// The fleet's counters, for `/metrics`.
    /// Counts a booking or rate check that found Redis unavailable.
    pub(crate) fn fell_back(&self) {
        self.stats.unavailable.fetch_add(1, Ordering::Relaxed);
    }

    pub fn stats(&self) -> &FleetStats {
        &self.stats
    }

    /// The earliest a node's first slot of the interleaved fallback may
    /// start (µs of Unix time) for `interval`: one interval after every
    /// node has noticed the outage and stopped using shared slots (see
    /// `fleet::queue`). Redis answered this node at most a heartbeat
    /// period before the outage began, and every node notices it within a
    /// heartbeat period and the timeout after that: two heartbeat periods
    /// and the timeout after Redis last answered this node. 0 when Redis
    /// never answered.
    pub fn interleave_from(&self, interval: Duration) -> u64 {
        match self.stats.answered_at.load(Ordering::Relaxed) {
            0 => 0,
            at => at
                .saturating_add(micros(nodes::HEARTBEAT_EVERY) * 2)
                .saturating_add(micros(self.timeout))
                .saturating_add(micros(interval)),
        }
    }

    /// Clients for pub/sub: the server, or each of a cluster's seed nodes
    /// (a cluster passes every published message to every node, so
    /// subscribing on any one hears the whole fleet; the next is tried
    /// when one is down).
    pub(crate) fn pubsub_clients(&self) -> Vec<redis::Client> {
        self.link.clients().singles().to_vec()
    }

    /// Runs `call` on a connection to Redis within the timeout. During an
    /// outage, fails at once except once per [`RETRY_EVERY`]; logs once
    /// when Redis stops answering and once when it answers again.
    pub async fn call<T, F, Fut>(&self, call: F) -> Result<T, Unavailable>
    where
        F: FnOnce(Connection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        Ok(self.attempt(self.timeout, true, call).await?)
    }

    /// [`Fleet::call`] within `allowance` too: what is left of a request's
    /// `timeout` for all its calls to Redis together (its user's
    /// `max_rps`, then its Crawl-delay booking), so a Redis that answers
    /// each call just within the timeout cannot hold a request several
    /// times as long. A call cut short by the allowance fails without
    /// counting as an outage; the failure says which it was.
    pub async fn call_within<T, F, Fut>(&self, allowance: Duration, call: F) -> Result<T, Failure>
    where
        F: FnOnce(Connection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.attempt(allowance, true, call).await
    }

    /// [`Fleet::call`] even during an outage, when it is not this call's
    /// turn to try: the heartbeat, so every node tries Redis once per
    /// [`nodes::HEARTBEAT_EVERY`] at least and notices its return within
    /// that (what [`Fleet::settle`] counts on).
    pub(crate) async fn call_always<T, F, Fut>(&self, call: F) -> Result<T, Unavailable>
    where
        F: FnOnce(Connection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        Ok(self.attempt(self.timeout, false, call).await?)
    }

    async fn attempt<T, F, Fut>(
        &self,
        allowance: Duration,
        gated: bool,
        call: F,
    ) -> Result<T, Failure>
    where
        F: FnOnce(Connection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let limit = allowance.min(self.timeout);
        // A call cut short by the request's allowance says nothing of
        // Redis: during an outage it is the outage's, else its own.
        let cut_short = || {
            if self.down.load(Ordering::Relaxed) {
                Failure::Outage
            } else {
                Failure::Call
            }
        };
        if limit.is_zero() {
            // This request has waited on Redis for the whole timeout.
            return Err(cut_short());
        }
        if gated && self.down.load(Ordering::Relaxed) {
            let mut retry_at = self.retry_at.lock();
            let now = Instant::now();
            match *retry_at {
                Some(at) if now < at => return Err(Failure::Outage),
                // This call tries; the others keep falling back.
                _ => *retry_at = Some(now + RETRY_EVERY),
            }
        }
        let link = self.link.get();
        let number = link.as_ref().map_or(0, |(_, n)| *n);
        let work = async move { call(link?.0).await };
        let started = Instant::now();
        let answered = tokio::time::timeout(limit, work).await;
        self.stats.round_trips.observe(started.elapsed());
        if answered.is_err() && limit < self.timeout {
            // Cut short by the request's allowance, not by Redis's
            // timeout.
            return Err(cut_short());
        }
        if matches!(answered, Ok(Ok(_))) {
            self.stats
                .answered_at
                .store(now_micros(), Ordering::Relaxed);
        }
        let result = match answered {
            Ok(Ok(r)) => Ok(r),
            // Redis answered, with an error for this command (a script
            // error, a key of another type): this call fails, the others
            // go on sharing.
            Ok(Err(e)) if !is_outage(&e) => {
                self.link.answered(number);
                // One line a minute at most: a key of the wrong type
                // fails every request that uses it.
                let now = now_micros() / 60_000_000;
                if self.command_error_logged.swap(now, Ordering::Relaxed) != now {
                    tracing::warn!(error = %e, "fleet: a Redis command failed");
                }
                return Err(Failure::Call);
            }
            Ok(Err(e)) => {
                if memory::is_full(&e) {
                    // Redis answers, but takes no write: the connection is
                    // not what failed.
                    // Logged once a minute there.
                    self.refused_for_memory();
                    self.link.answered(number);
                    *self.retry_at.lock() = Some(Instant::now() + RETRY_EVERY);
                    self.down.store(true, Ordering::Relaxed);
                    return Err(Failure::Outage);
                }
                Err(e.to_string())
            }
            Err(_) => Err(format!(
                "no answer within {}",
                humantime::format_duration(self.timeout)
            )),
        };
        match result {
            Ok(r) => {
                self.link.answered(number);
                if self.down.swap(false, Ordering::Relaxed) {
                    self.stats
                        .recovered_at
                        .store(now_micros(), Ordering::Relaxed);
                    tracing::info!("fleet: Redis answers again: state shared again");
                    // What this node decided alone meanwhile is shared
                    // again (see `app::admin::follow_fleet_purges`).
                    let _ = self.events.send(events::Event::Recovered);
                }
                Ok(r)
            }
            Err(error) => {
                *self.retry_at.lock() = Some(Instant::now() + RETRY_EVERY);
                if self.link.failed(number) {
                    self.stats.reconnects.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%error, after = %humantime::format_duration(connection::REPLACE_AFTER),
                        "fleet: Redis calls keep failing: the connection is replaced by a new one");
                }
                if !self.down.swap(true, Ordering::Relaxed) {
                    // Requests held on shared slots move to this node's own.
                    self.waiters.broke();
                    let on_unavailable = match self.on_unavailable {
                        OnUnavailable::Local => "local",
                        OnUnavailable::Refuse => "refuse",
                    };
                    tracing::warn!(%error, on_unavailable,
                        "fleet: Redis unavailable: state no longer shared");
                }
                Err(Failure::Outage)
            }
        }
    }
}

/// Whether `e` says Redis (or the part of a cluster a key lives on) cannot
/// be reached, rather than that one command failed. The client's own
/// failures count: a command it could not hand to its connection (the
/// cluster client's "request wasn't handled due to internal failure") did
/// not reach Redis.
fn is_outage(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_cluster_error()
        || memory::is_full(e)
        || matches!(
            e.kind(),
            redis::ErrorKind::AuthenticationFailed
                | redis::ErrorKind::Client
                | redis::ErrorKind::ClusterConnectionNotFound
                | redis::ErrorKind::Server(
                    redis::ServerErrorKind::BusyLoading
                        | redis::ServerErrorKind::ClusterDown
                        | redis::ServerErrorKind::MasterDown
                        | redis::ServerErrorKind::TryAgain
                        | redis::ServerErrorKind::ReadOnly
                )
        )
}

pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Microseconds of Unix time, now (0 before 1970).
pub(crate) fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map(micros)
        .unwrap_or(0)
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_fall_in_their_bucket() {
        let r = RoundTrips::default();
        for us in [0, 100, 101, 50_000, 1_000_000, 1_000_001, 10_000_000] {
            r.observe(Duration::from_micros(us));
        }
        let (buckets, _) = r.snapshot();
        assert_eq!(buckets[0], 1, "0 µs: le 50 µs");
        assert_eq!(buckets[1], 1, "100 µs: le 100 µs");
        assert_eq!(buckets[2], 1, "101 µs: le 250 µs");
        assert_eq!(buckets[9], 1, "50 ms");
        assert_eq!(buckets[12], 1, "1 s");
        assert_eq!(buckets[13], 2, "above every bound");
        assert_eq!(buckets.iter().sum::<u64>(), 7);
    }

    #[test]
    fn failures_of_the_way_to_redis_are_outages_failures_of_a_command_are_not() {
        use redis::{ErrorKind, RedisError};
        let outage = [
            RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)),
            RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
            RedisError::from((ErrorKind::Io, "Cluster connection task were dropped")),
            RedisError::from((
                ErrorKind::Client,
                "request wasn't handled due to internal failure",
            )),
            RedisError::from((ErrorKind::ClusterConnectionNotFound, "No connections found")),
        ];
        for e in &outage {
            assert!(is_outage(e), "{e}");
        }
        let command = [
            RedisError::from((ErrorKind::UnexpectedReturnType, "not a number")),
            RedisError::from((
                ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "WRONGTYPE",
            )),
        ];
        for e in &command {
            assert!(!is_outage(e), "{e}");
        }
    }
}
