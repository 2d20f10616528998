//! The connection to the fleet's Redis: one server, or a Redis Cluster
//! reached through its seed nodes. [`Connection`] is either, and speaks
//! `redis::aio::ConnectionLike`, so scripts and commands are written once:
//! against a cluster each is routed to the master of its key's slot (every
//! key of one origin has one slot, see [`super::Fleet::key`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};
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
/// is replaced by a new one. The client reconnects by itself when a
/// connection is closed or refused, but not when it goes silent: a
/// half-open TCP connection (the Redis host gone behind a firewall that
/// drops its packets, a NAT that forgot it) times every call out for the
/// many minutes TCP takes to give up, while a new connection would be
/// answered at once. Any other state the client cannot leave on its own
/// ends the same way.
pub(super) const REPLACE_AFTER: Duration = Duration::from_secs(3);

/// The fleet's connection, made on first use and replaced when calls have
/// failed as an outage for [`REPLACE_AFTER`] (at most once per that).
pub(super) struct Link {
    clients: Clients,
    /// The connection and when it was made.
    current: RwLock<Option<(Connection, tokio::time::Instant)>>,
    /// Outage failures that go on: when the first one of this run was and
    /// when the last one was.
    streak: Mutex<Option<Streak>>,
    /// Whether `streak` is set: what a call that succeeds reads (one
    /// load while all is well).
    failing: AtomicBool,
    timeout: Duration,
}

#[derive(Clone, Copy)]
struct Streak {
    since: tokio::time::Instant,
    last: tokio::time::Instant,
}

impl Link {
    pub(super) fn new(clients: Clients, timeout: Duration) -> Link {
        Link {
            clients,
            current: RwLock::new(None),
            streak: Mutex::new(None),
            failing: AtomicBool::new(false),
            timeout,
        }
    }

    pub(super) fn clients(&self) -> &Clients {
        &self.clients
    }

    /// The connection (made now if there is none yet).
    pub(super) fn get(&self) -> redis::RedisResult<Connection> {
        if let Some((c, _)) = &*self.current.read().unwrap_or_else(PoisonError::into_inner) {
            return Ok(c.clone());
        }
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if let Some((c, _)) = &*current {
            return Ok(c.clone());
        }
        // Reconnects are the connection's own; each attempt is bounded
        // anyway by the timeout around every call.
        let c = self.clients.connect_lazily(self.timeout)?;
        *current = Some((c.clone(), tokio::time::Instant::now()));
        Ok(c)
    }

    /// A call was answered. The failures end once none came for
    /// [`REPLACE_AFTER`]: a call answered between failures (another key's
    /// node of a cluster, one connection of several) does not end them.
    pub(super) fn answered(&self) {
        if !self.failing.load(Ordering::Relaxed) {
            return;
        }
        let mut streak = self.streak.lock().unwrap_or_else(PoisonError::into_inner);
        if streak.is_some_and(|s| s.last.elapsed() >= REPLACE_AFTER) {
            *streak = None;
            self.failing.store(false, Ordering::Relaxed);
        }
    }

    /// A call failed as an outage. Returns whether the connection was
    /// replaced: failures have gone on for [`REPLACE_AFTER`] and the
    /// connection is at least that old.
    pub(super) fn failed(&self) -> bool {
        let now = tokio::time::Instant::now();
        let mut streak = self.streak.lock().unwrap_or_else(PoisonError::into_inner);
        let since = match *streak {
            Some(s) if now.duration_since(s.last) < REPLACE_AFTER => s.since,
            _ => now,
        };
        *streak = Some(Streak { since, last: now });
        self.failing.store(true, Ordering::Relaxed);
        if now.duration_since(since) < REPLACE_AFTER {
            return false;
        }
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        match &*current {
            Some((_, made)) if now.duration_since(*made) >= REPLACE_AFTER => {
                // The next call makes a new one; calls under way finish
                // on the old one, which closes when the last ends.
                *current = None;
                *streak = Some(Streak {
                    since: now,
                    last: now,
                });
                true
            }
            _ => false,
        }
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
    fn link() -> Link {
        let target = RedisTarget::Server("redis://127.0.0.1:1/0".into());
        Link::new(
            Clients::open(&target).expect("a URL"),
            Duration::from_millis(50),
        )
    }

    fn made(link: &Link) -> Option<tokio::time::Instant> {
        link.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(_, at)| *at)
    }

    #[tokio::test(start_paused = true)]
    async fn failures_for_the_whole_period_replace_the_connection_once() {
        let link = link();
        link.get().expect("lazy");
        let first = made(&link);
        for _ in 0..3 {
            assert!(!link.failed());
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        assert!(link.failed(), "3 s of failures");
        assert_eq!(made(&link), None, "the next call makes a new one");
        link.get().expect("lazy");
        assert!(made(&link) > first);
        // The replacement starts a new period: no second one at once.
        assert!(!link.failed());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!link.failed());
    }

    #[tokio::test(start_paused = true)]
    async fn calls_answered_between_failures_do_not_end_them() {
        // A cluster whose one master's connection went silent: the
        // heartbeat's key is answered, the booking's is not.
        let link = link();
        link.get().expect("lazy");
        for _ in 0..3 {
            assert!(!link.failed());
            link.answered();
            tokio::time::advance(Duration::from_secs(1)).await;
            link.answered();
        }
        assert!(link.failed());
    }

    #[tokio::test(start_paused = true)]
    async fn failures_that_stop_are_forgotten() {
        let link = link();
        link.get().expect("lazy");
        assert!(!link.failed());
        tokio::time::advance(Duration::from_secs(1)).await;
        link.answered();
        assert!(link.failing.load(Ordering::Relaxed), "1 s since a failure");
        tokio::time::advance(REPLACE_AFTER).await;
        link.answered();
        assert!(!link.failing.load(Ordering::Relaxed));
        assert!(!link.failed(), "a new run of failures");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!link.failed(), "2 s old");
    }

    #[tokio::test(start_paused = true)]
    async fn a_young_connection_is_not_replaced() {
        // Failures that began before the connection was made (Redis down
        // at start): the connection is given the whole period too.
        let link = link();
        for _ in 0..2 {
            assert!(!link.failed());
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        link.get().expect("lazy");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!link.failed(), "failing for 3 s, the connection 1 s old");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!link.failed());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(link.failed(), "the connection 3 s old");
    }
}
