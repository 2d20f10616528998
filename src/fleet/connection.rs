//! The connection to the fleet's Redis: one server, or a Redis Cluster
//! reached through its seed nodes. [`Connection`] is either, and speaks
//! `redis::aio::ConnectionLike`, so scripts and commands are written once:
//! against a cluster each is routed to the master of its key's slot (every
//! key of one origin has one slot, see [`super::Fleet::key`]).

use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// Where the fleet's Redis is (`fleet.redis`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server: `redis://host:port/db`, or `rediss://` for TLS.
    Server(String),
    /// A Redis Cluster: the URLs of some of its nodes (seeds); the others
    /// are learnt from them.
    Cluster(Vec<String>),
}

/// One URL: one server.
impl From<&str> for RedisTarget {
    fn from(url: &str) -> RedisTarget {
        RedisTarget::Server(url.to_string())
    }
}

/// One URL: one server.
impl From<String> for RedisTarget {
    fn from(url: String) -> RedisTarget {
        RedisTarget::Server(url)
    }
}

impl RedisTarget {
    /// Whether the URLs can be used: well-formed, a scheme the build
    /// speaks, and for a cluster at least one node and one password, TLS
    /// mode and database among them. Nothing is contacted.
    pub fn check(&self) -> Result<(), String> {
        let urls = match self {
            RedisTarget::Server(url) => std::slice::from_ref(url),
            RedisTarget::Cluster(urls) if urls.is_empty() => {
                return Err("an empty list: name at least one of the cluster's nodes".into());
            }
            RedisTarget::Cluster(urls) => urls.as_slice(),
        };
        for url in urls {
            redis::Client::open(url.as_str()).map_err(|e| {
                format!("{url:?} is not a Redis URL (redis://host:port/db, rediss:// for TLS): {e}")
            })?;
        }
        Clients::open(self).map(drop).map_err(|e| match self {
            RedisTarget::Cluster(_) => format!("not one Redis Cluster's nodes: {e}"),
            RedisTarget::Server(_) => e.to_string(),
        })
    }
}

/// The clients connections are made from.
pub(super) struct Clients {
    /// The server, or each of a cluster's seed nodes: for pub/sub (a
    /// cluster passes published messages to every node, so one will do).
    singles: Vec<redis::Client>,
    /// The cluster, when `fleet.redis` lists its nodes.
    cluster: Option<ClusterClient>,
}

impl Clients {
    pub(super) fn open(target: &RedisTarget) -> redis::RedisResult<Clients> {
        Ok(match target {
            RedisTarget::Server(url) => Clients {
                singles: vec![redis::Client::open(url.as_str())?],
                cluster: None,
            },
            RedisTarget::Cluster(urls) => {
                if urls.is_empty() {
                    return Err(redis::RedisError::from((
                        redis::ErrorKind::InvalidClientConfig,
                        "a Redis Cluster needs at least one node's URL",
                    )));
                }
                Clients {
                    singles: urls
                        .iter()
                        .map(|u| redis::Client::open(u.as_str()))
                        .collect::<Result<_, _>>()?,
                    cluster: Some(cluster_builder(urls).build()?),
                }
            }
        })
    }

    /// A client for each server: the one server, or each seed node of a
    /// cluster (never empty).
    pub(super) fn singles(&self) -> &[redis::Client] {
        &self.singles
    }

    /// A connection that connects, and reconnects, by itself. `timeout`
    /// bounds each attempt; every call is bounded by it anyway.
    pub(super) fn connect_lazily(&self, timeout: Duration) -> redis::RedisResult<Connection> {
        Ok(match (&self.cluster, self.singles.first()) {
            (None, None) => {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "no Redis URL",
                )));
            }
            (None, Some(single)) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_secs(1));
                Connection::Server(ConnectionManager::new_lazy_with_config(
                    single.clone(),
                    config,
                )?)
            }
            (Some(cluster), _) => {
                // The slot map is fetched in the background; a command sent
                // before it is known waits for it, within the call's
                // timeout. A redirection (MOVED, ASK) is one retry.
                let config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(timeout)
                    .set_response_timeout(timeout);
                Connection::Cluster(cluster.get_pending_async_connection_with_config(config))
            }
        })
    }
}

/// Builds the cluster client with the fleet's retry policy: a couple of
/// quick retries (a redirection, a node that just failed over), never
/// longer waits than the call's timeout allows anyway.
fn cluster_builder(urls: &[String]) -> ClusterClientBuilder {
    ClusterClient::builder(urls.iter().map(String::as_str))
        .retries(2)
        .min_retry_wait(5)
        .max_retry_wait(100)
}

/// How long calls must keep failing, as an outage, before the connection
/// is replaced by a new one (three timeouts when that is longer). The
/// client reconnects by itself when a connection is closed or refused,
/// but not when it goes silent: a half-open TCP connection (the Redis
/// host gone behind a firewall that drops its packets, a NAT that forgot
/// it) times every call out for the many minutes TCP takes to give up,
/// while a new connection would be answered at once. Any other state the
/// client cannot leave on its own ends the same way.
pub(super) const REPLACE_AFTER: Duration = Duration::from_secs(3);

/// Fewest failures of a run that replace the connection.
const REPLACE_FAILURES: u32 = 3;

/// The connection is replaced only while at least one call in this many
/// fails (counted over the last two periods at most): a connection that
/// mostly answers (a Redis whose answers now and then come after the
/// timeout) is kept.
const FAILING_ONE_IN: u32 = 5;

/// The fleet's connection, made on first use and replaced when calls on it
/// have kept failing as an outage (see [`REPLACE_AFTER`]).
pub(super) struct Link {
    clients: Clients,
    /// The connection, its number (each one made gets the next) and when
    /// it was made.
    current: RwLock<Option<Made>>,
    /// Numbers the connections: failures of one already replaced (calls
    /// that were under way on it) do not count against the next.
    made: AtomicU64,
    /// The run of outage failures under way, if any.
    streak: Mutex<Option<Streak>>,
    /// Whether `streak` is set: what a call that succeeds reads (one load
    /// while all is well).
    failing: AtomicBool,
    timeout: Duration,
}

#[derive(Clone)]
struct Made {
    conn: Connection,
    number: u64,
    at: tokio::time::Instant,
}

#[derive(Clone, Copy)]
struct Streak {
    since: tokio::time::Instant,
    last: tokio::time::Instant,
    /// Calls are counted from here, for two periods at most: what a
    /// connection answered long ago says nothing of it now.
    counted_from: tokio::time::Instant,
    failed: u32,
    answered: u32,
}

impl Streak {
    fn new(now: tokio::time::Instant) -> Streak {
        Streak {
            since: now,
            last: now,
            counted_from: now,
            failed: 0,
            answered: 0,
        }
    }

    /// Starts counting afresh when the count is two periods old.
    fn recount(&mut self, now: tokio::time::Instant, period: Duration) {
        if now.duration_since(self.counted_from) >= period * 2 {
            self.counted_from = now;
            self.failed = 0;
            self.answered = 0;
        }
    }
}

impl Link {
    pub(super) fn new(clients: Clients, timeout: Duration) -> Link {
        Link {
            clients,
            current: RwLock::new(None),
            made: AtomicU64::new(0),
            streak: Mutex::new(None),
            failing: AtomicBool::new(false),
            timeout,
        }
    }

    pub(super) fn clients(&self) -> &Clients {
        &self.clients
    }

    /// How long failures must go on, and the longest gap between two of
    /// one run: an idle node tries once per heartbeat or timeout.
    fn period(&self) -> Duration {
        REPLACE_AFTER.max(self.timeout * 3)
    }

    /// The connection and its number (made now if there is none).
    pub(super) fn get(&self) -> redis::RedisResult<(Connection, u64)> {
        if let Some(m) = &*self.current.read() {
            return Ok((m.conn.clone(), m.number));
        }
        let mut current = self.current.write();
        if let Some(m) = &*current {
            return Ok((m.conn.clone(), m.number));
        }
        // Reconnects are the connection's own; each attempt is bounded
        // anyway by the timeout around every call.
        let conn = self.clients.connect_lazily(self.timeout)?;
        let number = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        *current = Some(Made {
            conn: conn.clone(),
            number,
            at: tokio::time::Instant::now(),
        });
        Ok((conn, number))
    }

    /// Whether `number` is the connection in use.
    fn is_current(&self, number: u64) -> bool {
        self.current
            .read()
            .as_ref()
            .is_some_and(|m| m.number == number)
    }

    /// A call on connection `number` was answered. It counts in the run of
    /// failures under way (a cluster's other nodes answer while one does
    /// not); the run ends once none came for a period.
    pub(super) fn answered(&self, number: u64) {
        if !self.failing.load(Ordering::Relaxed) {
            return;
        }
        let period = self.period();
        let now = tokio::time::Instant::now();
        let mut streak = self.streak.lock();
        let Some(s) = streak.as_mut() else { return };
        if now.duration_since(s.last) >= period {
            *streak = None;
            self.failing.store(false, Ordering::Relaxed);
        } else if self.is_current(number) {
            s.recount(now, period);
            s.answered = s.answered.saturating_add(1);
        }
    }

    /// A call on connection `number` failed as an outage. Returns whether
    /// the connection was replaced: failures on it have gone on for a
    /// period, at least [`REPLACE_FAILURES`] of them and one call in
    /// [`FAILING_ONE_IN`] or more, and it is at least a period old.
    pub(super) fn failed(&self, number: u64) -> bool {
        let period = self.period();
        let now = tokio::time::Instant::now();
        let mut streak = self.streak.lock();
        let mut current = self.current.write();
        let Some(made) = current.as_ref().filter(|m| m.number == number) else {
            // A call under way on a connection already replaced.
            return false;
        };
        let mut s = match *streak {
            Some(s) if now.duration_since(s.last) < period => s,
            _ => Streak::new(now),
        };
        s.recount(now, period);
        s.last = now;
        s.failed = s.failed.saturating_add(1);
        *streak = Some(s);
        self.failing.store(true, Ordering::Relaxed);
        // One call in FAILING_ONE_IN or more: failed / (failed + answered)
        // >= 1 / FAILING_ONE_IN.
        let replace = now.duration_since(s.since) >= period
            && now.duration_since(made.at) >= period
            && s.failed >= REPLACE_FAILURES
            && s.failed.saturating_mul(FAILING_ONE_IN - 1) >= s.answered;
        if replace {
            // The next call makes a new one; calls under way finish on
            // the old one, which closes when the last ends.
            *current = None;
            *streak = None;
            self.failing.store(false, Ordering::Relaxed);
        }
        replace
    }
}

/// A connection to the fleet's Redis, one server or a cluster: what
/// [`super::Fleet::call`] hands its closure. Cheap to clone; clones share
/// the connections underneath.
#[derive(Clone)]
pub enum Connection {
    Server(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Server(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Server(c) => c.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Server(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link to a server nothing listens on: connections are made lazily,
    /// so nothing is contacted.
    fn link(timeout: Duration) -> Link {
        let target = RedisTarget::Server("redis://127.0.0.1:1/0".into());
        Link::new(Clients::open(&target).expect("a URL"), timeout)
    }

    fn number(link: &Link) -> u64 {
        link.get().expect("lazy").1
    }

    fn second() -> Duration {
        Duration::from_secs(1)
    }

    #[tokio::test(start_paused = true)]
    async fn failures_for_a_period_replace_the_connection_once() {
        let link = link(Duration::from_millis(50));
        let first = number(&link);
        for _ in 0..3 {
            assert!(!link.failed(first));
            tokio::time::advance(second()).await;
        }
        assert!(link.failed(first), "3 s of failures");
        let second_one = number(&link);
        assert_eq!(second_one, first + 1, "the next call makes a new one");
        // Calls that were under way on the old one fail too: not held
        // against the new one.
        for _ in 0..5 {
            assert!(!link.failed(first));
            tokio::time::advance(second()).await;
        }
        assert_eq!(number(&link), second_one);
        assert!(!link.failing.load(Ordering::Relaxed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_of_a_cluster_that_fails_while_the_others_answer_is_replaced() {
        // One master's connection went silent: the heartbeat's key is
        // answered, the booking's is not.
        let link = link(Duration::from_millis(50));
        let n = number(&link);
        for _ in 0..3 {
            assert!(!link.failed(n));
            link.answered(n);
            tokio::time::advance(second()).await;
            link.answered(n);
        }
        assert!(link.failed(n));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_mostly_answers_is_kept() {
        // Now and then an answer after the timeout, many answered between.
        let link = link(Duration::from_millis(50));
        let n = number(&link);
        for _ in 0..10 {
            assert!(!link.failed(n));
            for _ in 0..20 {
                link.answered(n);
            }
            tokio::time::advance(second()).await;
        }
        assert_eq!(number(&link), n);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_that_stop_are_forgotten() {
        let link = link(Duration::from_millis(50));
        let n = number(&link);
        assert!(!link.failed(n));
        tokio::time::advance(second()).await;
        link.answered(n);
        assert!(link.failing.load(Ordering::Relaxed), "1 s since a failure");
        tokio::time::advance(REPLACE_AFTER).await;
        link.answered(n);
        assert!(!link.failing.load(Ordering::Relaxed));
        for _ in 0..2 {
            assert!(!link.failed(n), "a new run");
            tokio::time::advance(second()).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_is_given_a_whole_period() {
        let link = link(Duration::from_millis(50));
        let n = number(&link);
        for _ in 0..3 {
            assert!(!link.failed(n));
            tokio::time::advance(second()).await;
        }
        assert!(link.failed(n));
        let m = number(&link);
        for _ in 0..3 {
            tokio::time::advance(second()).await;
            assert!(!link.failed(m), "a run of its own, under 3 s");
        }
        tokio::time::advance(second()).await;
        assert!(link.failed(m), "3 s of failures on it");
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_timeout_stretches_the_period() {
        // Timeout 2 s: an idle node fails once per 2 s or so; the run
        // holds, and lasts three timeouts.
        let link = link(Duration::from_secs(2));
        let n = number(&link);
        for _ in 0..3 {
            assert!(!link.failed(n));
            tokio::time::advance(Duration::from_secs(2)).await;
        }
        assert!(link.failed(n), "6 s of failures 2 s apart");
    }

    #[tokio::test(start_paused = true)]
    async fn answers_long_ago_do_not_keep_a_silent_connection() {
        // A busy node: one late answer, thousands answered; then the
        // connection goes silent and only failures come, two a second.
        let link = link(Duration::from_millis(50));
        let n = number(&link);
        assert!(!link.failed(n));
        for _ in 0..3000 {
            link.answered(n);
        }
        let mut waited = Duration::ZERO;
        loop {
            tokio::time::advance(Duration::from_millis(500)).await;
            waited += Duration::from_millis(500);
            if link.failed(n) {
                break;
            }
            assert!(waited < Duration::from_secs(10), "not replaced");
        }
    }
}
