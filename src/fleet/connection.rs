//! The connection to the fleet's Redis: one server, or a Redis Cluster
//! reached through its seed nodes. [`Connection`] is either, and speaks
//! `redis::aio::ConnectionLike`, so scripts and commands are written once:
//! against a cluster each is routed to the master of its key's slot (every
//! key of one origin has one slot, see [`super::Fleet::key`]).

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
