//! Live nodes: every node writes a heartbeat to one sorted set of the
//! fleet, scored with Redis's own clock (`TIME`), and reads back the
//! members seen within [`DEAD_AFTER`]. The list is kept in [`Fleet`] and
//! survives an outage unchanged: it is what the interleaved local fallback
//! ranks the nodes by (see `judge::politeness`), and what `/metrics`
//! counts.
//!
//! A member is the node's name and its instance (`<node>#<16 hex digits>`,
//! [`super::events::Author`]): two nodes given one name are two nodes,
//! each with a rank of its own.
//!
//! Bounded: the script returns at most [`MAX_NODES`] members of at most
//! [`MAX_NODE_NAME`] bytes and an instance, so a polluted Redis cannot
//! make a node allocate without bound. Dead members are removed by every
//! heartbeat, and the key expires when the whole fleet has stopped.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Fleet, Unavailable};

/// How often a node writes its heartbeat and reads the live nodes.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// A node whose last heartbeat is older than this is dead: three periods.
pub const DEAD_AFTER: Duration = Duration::from_secs(3);

/// Most live nodes read from Redis.
pub const MAX_NODES: usize = 1000;

/// Longest node name read from Redis (longer members are skipped).
pub const MAX_NODE_NAME: usize = 255;

/// What a member adds to the name: `#` and the instance's 16 hex digits.
const INSTANCE_LEN: usize = 17;

/// Writes KEYS[1] member ARGV[1] with Redis's time (ms) as score, drops
/// members older than ARGV[2] ms, keeps the key ten times that long, and
/// returns Redis's time, then at most ARGV[3] live members of at most
/// ARGV[4] bytes, each followed by its heartbeat. The heartbeat (ARGV[5]:
/// this node's sealed listeners, [`super::beat`], at most ARGV[6] bytes)
/// is kept in the hash KEYS[2], whose dead members go with it.
const HEARTBEAT_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead_after = tonumber(ARGV[2])
local oldest = string.format('%.0f', now - dead_after)
redis.call('ZADD', KEYS[1], string.format('%.0f', now), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[5])
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. oldest, 'LIMIT', 0, 1000)
if #dead > 0 then redis.call('HDEL', KEYS[2], unpack(dead)) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. oldest)
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', dead_after * 10))
redis.call('PEXPIRE', KEYS[2], string.format('%.0f', dead_after * 10))
local live = redis.call('ZRANGEBYSCORE', KEYS[1], oldest, '+inf', 'LIMIT', 0, ARGV[3])
local max_len = tonumber(ARGV[4])
local max_listeners = tonumber(ARGV[6])
local out = {tostring(now)}
for _, m in ipairs(live) do
  if #m <= max_len then
    local l = redis.call('HGET', KEYS[2], m)
    if type(l) ~= 'string' or #l > max_listeners then l = '' end
    out[#out + 1] = m
    out[#out + 1] = l
  end
end
return out
";

/// Longest heartbeat read from Redis for one node (longer ones are
/// taken as none).
const MAX_LISTENERS_LEN: usize = 1024;

/// The listener addresses in a heartbeat's list (`ip:port,ip:port`) that
/// another node may refuse as destinations: private, loopback or
/// unspecified ones only, so a value forged in Redis cannot make the
/// fleet refuse a public site.
fn peer_listeners(list: &str) -> impl Iterator<Item = std::net::SocketAddr> + '_ {
    list.split(',')
        .filter_map(|a| a.trim().parse::<std::net::SocketAddr>().ok())
        .filter(|a| {
            let ip = a.ip().to_canonical();
            ip.is_unspecified() || crate::http::destination::is_private(ip)
        })
        .take(8)
}

static HEARTBEAT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(HEARTBEAT_SCRIPT));

/// The live nodes as last read from Redis, sorted by name, this node
/// among them, and this node's place in that order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LiveNodes {
    /// Heartbeat members (`<node>#<instance>`), sorted, without
    /// duplicates; empty until Redis first answered.
    pub names: Vec<Box<str>>,
    /// This node's index in `names` (0 while `names` is empty).
    pub rank: usize,
}

impl LiveNodes {
    /// From the names Redis returned: sorted, deduplicated, capped at
    /// [`MAX_NODES`], with `me` added if it is missing (a heartbeat that
    /// a full set left out, or a name longer than [`MAX_NODE_NAME`]).
    pub fn from_names(mut names: Vec<String>, me: &str) -> LiveNodes {
        names.truncate(MAX_NODES);
        if !names.iter().any(|n| n == me) {
            names.push(me.to_string());
        }
        names.sort_unstable();
        names.dedup();
        let rank = names.iter().position(|n| n == me).unwrap_or(0);
        LiveNodes {
            names: names.into_iter().map(String::into_boxed_str).collect(),
            rank,
        }
    }

    /// How many nodes share the interleaved schedule: at least 1 (this
    /// node alone while no list was ever read).
    pub fn count(&self) -> usize {
        self.names.len().max(1)
    }
}

impl Fleet {
    /// The key of the fleet's heartbeat sorted set.
    pub fn nodes_key(&self) -> String {
        self.key("nodes", "live")
    }

    /// The key of the fleet's listeners hash (same slot as
    /// [`Fleet::nodes_key`]).
    fn listeners_key(&self) -> String {
        self.key("nodes", "listeners")
    }

    /// One heartbeat: writes this node's (and its listeners), reads the
    /// live nodes and their listeners and keeps those whose heartbeat
    /// holds ([`super::beat`]). On failure the last known lists are kept.
    pub async fn heartbeat(&self) -> Result<(), Unavailable> {
        let me = self.member();
        let member = &me;
        let place = self.listeners_key();
        let at = match self.beats.redis_now() {
            Some(ms) => ms,
            None => self.redis_time().await?,
        };
        let mine = super::beat::seal(&self.keys, &place, &me, at, &self.listeners.lock());
        let mine = &mine;
        let reply = self
            .call_always(|mut conn| async move {
                HEARTBEAT
                    .key(self.nodes_key())
                    .key(self.listeners_key())
                    .arg(member)
                    .arg(super::millis(DEAD_AFTER))
                    .arg(MAX_NODES as u64)
                    .arg((MAX_NODE_NAME + INSTANCE_LEN) as u64)
                    .arg(mine)
                    .arg(MAX_LISTENERS_LEN as u64)
                    .invoke_async::<Vec<Vec<u8>>>(&mut conn)
                    .await
            })
            .await?;
        let Some((now, pairs)) = reply.split_first() else {
            return Ok(());
        };
        let now = std::str::from_utf8(now)
            .ok()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(at);
        self.beats.set_redis_now(now);
        let mut names = Vec::with_capacity(pairs.len() / 2);
        let mut seen = Vec::new();
        for pair in pairs.chunks(2) {
            let [name, heartbeat] = pair else { break };
            let name = String::from_utf8_lossy(name).into_owned();
            if name != me {
                let Some(listeners) = super::beat::open(&self.keys, &place, &name, heartbeat, now)
                else {
                    continue;
                };
                seen.extend(peer_listeners(&listeners));
            }
            names.push(name);
        }
        self.peers.set(self.beats.remember(seen));
        // Right after an outage the set holds only the nodes that have
        // noticed Redis is back: the list the outage was interleaved by is
        // kept until every node has had the time to ([`Fleet::settle`]).
        if self.settling() {
            return Ok(());
        }
        let live = LiveNodes::from_names(names, &me);
        let count = u64::try_from(live.names.len()).unwrap_or(u64::MAX);
        *self.live.lock() = Arc::new(live);
        self.stats.live_nodes.store(count, Ordering::Relaxed);
        Ok(())
    }

    /// Redis's time (ms), asked once: before this node's first heartbeat,
    /// which is stamped with it ([`super::beat`]).
    async fn redis_time(&self) -> Result<u64, Unavailable> {
        let (secs, micros) = self
            .call_always(|mut conn| async move {
                redis::cmd("TIME")
                    .query_async::<(u64, u64)>(&mut conn)
                    .await
            })
            .await?;
        let ms = secs.saturating_mul(1000).saturating_add(micros / 1000);
        self.beats.set_redis_now(ms);
        Ok(ms)
    }

    /// Heartbeats every [`HEARTBEAT_EVERY`] until the task is dropped or
    /// aborted. Started once with the proxy (`App::serve`); during an
    /// outage it is also what brings the fleet back (`Fleet::call` tries
    /// Redis again once a second) when no request needs Redis.
    pub async fn keep_heartbeat(self: Arc<Self>) {
        let mut every = tokio::time::interval(HEARTBEAT_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            // Failures are logged and counted by `call`.
            if self.heartbeat().await.is_ok() {
                self.check_memory_policy().await;
            }
        }
    }

    /// Takes this node's heartbeat out (a clean stop), so the others see
    /// it gone at their next heartbeat rather than [`DEAD_AFTER`] later.
    pub async fn leave(&self) -> Result<(), Unavailable> {
        let me = self.member();
        let me = &me;
        self.call(|mut conn| async move {
            redis::pipe()
                .cmd("ZREM")
                .arg(self.nodes_key())
                .arg(me)
                .ignore()
                .cmd("HDEL")
                .arg(self.listeners_key())
                .arg(me)
                .ignore()
                .query_async::<()>(&mut conn)
                .await
        })
        .await
    }

    /// This node's member of the heartbeat set: its name and instance.
    fn member(&self) -> String {
        self.author().encode()
    }

    /// The live nodes as last read (kept during an outage).
    pub fn live_nodes(&self) -> Arc<LiveNodes> {
        self.live.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_list_is_sorted_and_names_this_node() {
        let live = LiveNodes::from_names(names(&["c:1", "a:1", "b:1", "a:1"]), "b:1");
        let got: Vec<&str> = live.names.iter().map(|n| &**n).collect();
        assert_eq!(got, ["a:1", "b:1", "c:1"]);
        assert_eq!((live.rank, live.count()), (1, 3));
        // Missing from what Redis returned: added in its place.
        let live = LiveNodes::from_names(names(&["c:1", "a:1"]), "b:1");
        assert_eq!((live.rank, live.count()), (1, 3));
        // Never read: this node alone.
        let none = LiveNodes::default();
        assert_eq!((none.rank, none.count()), (0, 1));
    }

    #[test]
    fn the_list_is_capped() {
        let many: Vec<String> = (0..5000).map(|i| format!("n{i:05}")).collect();
        let live = LiveNodes::from_names(many, "zz");
        assert_eq!(live.names.len(), MAX_NODES + 1);
        assert_eq!(live.rank, MAX_NODES);
    }
}
