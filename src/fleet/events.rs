//! What the nodes of a fleet tell each other, on one Redis pub/sub
//! channel (`robots-proxy:<name>:events`): an origin's robots.txt was
//! stored (nodes waiting for it look again), or something was purged
//! (every node drops its own copy), or a node reloaded its
//! configuration (every node reads its own again), or an origin said
//! "slow down" (every node holds its requests to it, [`super::pauses`]).
//!
//! One subscriber task per process, started by the first
//! [`Fleet::events`] call, reconnects every [`RETRY_EVERY`] while Redis is
//! away (to the next seed node of a cluster) and ends when the fleet is
//! dropped. An event missed while it is away costs a waiting node one
//! poll. Purges are kept too, the last [`PURGES_KEPT`] for a month, in a
//! list of Redis (`robots-proxy:<name>:{events}:purges`), each stamped
//! with Redis's clock: a node that subscribes (at its start, or again
//! after its subscription broke) reads them ([`Fleet::purges_kept`]) and
//! applies each to what it stored before the purge was said.
//!
//! A message is `<kind>\n<node>#<instance>\n<value>` ([`Author`]), after
//! a first line `m1 <tag>` with the fleet key ([`super::key`]): one whose
//! tag fails is dropped, counted, before any node acts on it; a
//! `<node>` alone (an earlier version's) is read as a node of another
//! instance. Messages that do not parse, or whose value is longer than
//! [`MAX_VALUE`], are ignored.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::broadcast;

use super::{Fleet, RETRY_EVERY};

/// The longest value a message carries (an origin or URL).
pub const MAX_VALUE: usize = 8 * 1024;

/// How long the subscription may be quiet before the connection is asked
/// whether it is still there.
const QUIET: Duration = Duration::from_secs(5);

/// Events kept for a slow receiver before it is told it lagged.
const BACKLOG: usize = 1024;

/// Purges kept in Redis for nodes that were not listening.
pub const PURGES_KEPT: usize = 1000;

/// How long the purges are kept after the last one.
const PURGES_FOR: Duration = Duration::from_secs(30 * 24 * 3600);

/// Adds a purge message (ARGV[1]) to the list, stamped with Redis's clock
/// in microseconds: `<µs>\n<message>`, newest first, at most ARGV[2].
const LOG_PURGE_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', tonumber(t[2]))
redis.call('LPUSH', KEYS[1], now .. '\n' .. ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
";

/// Redis's clock (µs, as a string), the list's length and its first
/// ARGV[1] entries (newest first) of at most ARGV[2] bytes: what a list
/// written by something else holds costs a bounded read.
const READ_PURGES_SCRIPT: &str = r"
local t = redis.call('TIME')
local out = {}
for _, e in ipairs(redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)) do
  if string.len(e) <= tonumber(ARGV[2]) then out[#out + 1] = e end
end
return {t[1] .. string.format('%06d', tonumber(t[2])), redis.call('LLEN', KEYS[1]), out}
";

static LOG_PURGE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(LOG_PURGE_SCRIPT));
static READ_PURGES: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(READ_PURGES_SCRIPT));

/// A purge kept in Redis, and when it was said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub what: Purge,
    pub from: Author,
    /// Seconds since the epoch, on this node's clock: Redis's stamp moved
    /// by the difference between the two clocks read with the purges.
    pub said: u64,
}

/// The purges kept, as [`Fleet::purges_kept`] reads them.
#[derive(Debug, Default)]
pub struct Recent {
    /// Oldest first.
    pub purges: Vec<Kept>,
    /// When they were read (seconds, this node's clock).
    pub now: u64,
    /// When the list is full: when its oldest was said (this node's
    /// clock). Purges said before then may have been dropped.
    pub lost_before: Option<u64>,
}

/// What was purged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Purge {
    /// An origin's robots.txt.
    Robots(Arc<str>),
    /// One URL of the response cache.
    Url(Arc<str>),
    /// The response cache's URLs under a prefix.
    Prefix(Arc<str>),
}

/// Who said an event: a node by its name (for logs), and the instance
/// of the proxy that runs it, a random number drawn at its start: two
/// nodes given one name (say two containers of one image) are told apart
/// by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Author {
    pub node: Arc<str>,
    /// `None`: a node of an earlier version, which sends its name alone.
    pub instance: Option<u64>,
}

impl Author {
    /// As a message carries it: `<node>#<instance>` (16 hex digits).
    pub(crate) fn encode(&self) -> String {
        match self.instance {
            Some(i) => format!("{}#{i:016x}", self.node),
            None => self.node.to_string(),
        }
    }

    /// A message's author; without an instance, the name as sent.
    fn decode(from: &str) -> Author {
        if let Some((node, hex)) = from.rsplit_once('#')
            && hex.len() == 16
            && hex.bytes().all(|b| b.is_ascii_hexdigit())
            && let Ok(instance) = u64::from_str_radix(hex, 16)
        {
            return Author {
                node: node.into(),
                instance: Some(instance),
            };
        }
        Author {
            node: from.into(),
            instance: None,
        }
    }
}

/// The node's name.
impl std::fmt::Display for Author {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.node)
    }
}

/// A random number for this instance of the proxy: its fleet's events
/// and leases carry it.
pub(crate) fn new_instance() -> u64 {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        // No randomness from the system (not seen in practice): the
        // clock and the process id are unlikely to repeat together.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        return nanos ^ (u64::from(std::process::id()) << 32);
    }
    u64::from_le_bytes(bytes)
}

/// An event of the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An origin's robots.txt entry was stored.
    Fetched(Arc<str>),
    /// A lease on an origin's requests in flight was given back while
    /// nodes wait for one ([`super::lease`]).
    LeaseFree(Arc<str>),
    /// A node (`from`) purged something.
    Purged { what: Purge, from: Author },
    /// A node (`from`) reloaded its configuration (SIGHUP): every node
    /// reads its own file again.
    Reload { from: Author },
    /// This node subscribed: at its start (`heard` `None`), or again
    /// after its subscription broke, which last heard from Redis at
    /// `heard`. What was said meanwhile (purges) was not heard. Never
    /// sent to other nodes.
    Subscribed { heard: Option<tokio::time::Instant> },
    /// Redis answered this node again after an outage: what it decided
    /// alone meanwhile is shared again. Never sent to other nodes.
    Recovered,
    /// A request held on a Crawl-delay schedule (its Redis key) left, and
    /// those held behind it moved up: nodes holding some read their slots
    /// again ([`super::queue`]).
    Moved(Arc<str>),
    /// A node (`from`) found a schedule's key gone that must have been
    /// there: the fleet's keys were lost (`FLUSHALL`, a failover to an
    /// empty replica). Every node handles it as the return from an outage.
    Lost { from: Author },
    /// An origin said "slow down" (429, 503): every node holds its
    /// requests until the pause ends ([`super::pauses`]).
    Paused(super::pauses::Paused),
}

impl Event {
    pub(crate) fn encode_from(&self, from: &Author) -> Vec<u8> {
        let node = from.encode();
        let (kind, value) = match self {
            Event::Fetched(o) => ("fetched", o),
            Event::Moved(k) => ("moved", k),
            Event::LeaseFree(o) => ("lease-free", o),
            Event::Reload { .. } => return format!("reload\n{node}\nconfiguration").into_bytes(),
            Event::Lost { .. } => return format!("lost\n{node}\nkeys").into_bytes(),
            Event::Subscribed { .. } | Event::Recovered => return Vec::new(),
            Event::Paused(p) => return format!("paused\n{node}\n{}", p.encode()).into_bytes(),
            Event::Purged { what, .. } => match what {
                Purge::Robots(v) => ("purge-robots", v),
                Purge::Url(v) => ("purge-url", v),
                Purge::Prefix(v) => ("purge-prefix", v),
            },
        };
        format!("{kind}\n{node}\n{value}").into_bytes()
    }

    fn decode(bytes: &[u8]) -> Option<Event> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut parts = text.splitn(3, '\n');
        let (kind, from, value) = (parts.next()?, parts.next()?, parts.next()?);
        if value.len() > MAX_VALUE || value.is_empty() {
            return None;
        }
        let (from, value) = (Author::decode(from), Arc::<str>::from(value));
        Some(match kind {
            "fetched" => Event::Fetched(value),
            "moved" => Event::Moved(value),
            "lease-free" => Event::LeaseFree(value),
            "purge-robots" => Event::Purged {
                what: Purge::Robots(value),
                from,
            },
            "purge-url" => Event::Purged {
                what: Purge::Url(value),
                from,
            },
            "purge-prefix" => Event::Purged {
                what: Purge::Prefix(value),
                from,
            },
            "reload" => Event::Reload { from },
            "lost" => Event::Lost { from },
            "paused" => Event::Paused(super::pauses::Paused::decode(&value)?),
            _ => return None,
        })
    }
}

impl Fleet {
    /// This node, as its events name it.
    pub(crate) fn author(&self) -> Author {
        Author {
            node: self.node().into(),
            instance: Some(self.instance),
        }
    }

    /// `event` as this node sends it: from this node, tagged under the
    /// fleet key ([`super::key`]).
    pub(crate) fn message(&self, event: &Event) -> Vec<u8> {
        self.keys
            .seal_message(&self.channel(), event.encode_from(&self.author()))
    }

    /// Whether `from` is this very node: another of the same name is not.
    pub fn is_me(&self, from: &Author) -> bool {
        from.instance == Some(self.instance)
    }

    /// The fleet's pub/sub channel.
    pub(crate) fn channel(&self) -> String {
        format!("robots-proxy:{}:events", self.name)
    }

    /// The fleet's events from now on. The first call starts the
    /// subscriber (it must be made inside the tokio runtime).
    pub fn events(&self) -> broadcast::Receiver<Event> {
        let rx = self.events.subscribe();
        self.subscriber.get_or_init(|| {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(subscribe(
                    self.pubsub_clients(),
                    self.channel(),
                    self.keys.clone(),
                    self.events.downgrade(),
                    self.timeout,
                ));
            }
        });
        rx
    }

    /// Tells every other node to read its configuration again, as a
    /// SIGHUP on this one did.
    pub async fn publish_reload(&self) -> Result<u64, super::Unavailable> {
        let message = self.message(&Event::Reload {
            from: self.author(),
        });
        self.publish(message).await
    }

    /// Publishes a message made by [`Event::encode_from`].
    pub(crate) async fn publish_message(
        &self,
        message: Vec<u8>,
    ) -> Result<u64, super::Unavailable> {
        self.publish(message).await
    }

    /// Publishes `message`; returns how many subscribers heard it (on a
    /// Redis Cluster, those subscribed through the node it went to).
    pub(super) async fn publish(&self, message: Vec<u8>) -> Result<u64, super::Unavailable> {
        let channel = self.channel();
        self.call(|mut conn| async move {
            redis::cmd("PUBLISH")
                .arg(channel)
                .arg(message)
                .query_async::<u64>(&mut conn)
                .await
        })
        .await
    }

    /// Tells every node (this one included) about `what`; returns how
    /// many subscribers heard it. The purge is kept for nodes that are not
    /// listening now ([`Fleet::purges_kept`]).
    pub async fn publish_purge(&self, what: Purge) -> Result<u64, super::Unavailable> {
        let message = self.message(&Event::Purged {
            what,
            from: self.author(),
        });
        let key = self.purges_key();
        let kept = message.clone();
        // Best effort: a log Redis cannot write (memory full, its slot's
        // master down) must not keep the purge from the nodes listening.
        let logged = self
            .call(|mut conn| async move {
                LOG_PURGE
                    .key(key)
                    .arg(kept)
                    .arg(PURGES_KEPT as u64)
                    .arg(super::micros(PURGES_FOR) / 1000)
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await;
        if logged.is_err() {
            tracing::warn!(
                "fleet: a purge could not be kept in Redis: a node not listening now will not hear of it"
            );
        }
        self.publish(message).await
    }

    fn purges_key(&self) -> String {
        self.key("events", "purges")
    }

    /// The purges kept, tried even during an outage (a node reads them
    /// when it subscribes, which may be before its calls try Redis again).
    pub async fn purges_kept(&self) -> Result<Recent, super::Unavailable> {
        let key = self.purges_key();
        let (now, listed, kept) = self
            .call_always(|mut conn| async move {
                READ_PURGES
                    .key(key)
                    .arg(PURGES_KEPT as u64)
                    // The stamp, the message's kind and author, the value.
                    .arg((MAX_VALUE + 512) as u64)
                    .invoke_async::<(String, u64, Vec<Vec<u8>>)>(&mut conn)
                    .await
            })
            .await?;
        let channel = self.channel();
        let opened = kept.iter().filter_map(|entry| {
            let at_end = entry.iter().position(|&b| b == b'\n')?;
            let message = self.keys.open_message(
                super::key::Kind::KeptPurge,
                &channel,
                &entry[at_end + 1..],
            )?;
            let mut out = entry[..=at_end].to_vec();
            out.extend_from_slice(message);
            Some(out)
        });
        let opened: Vec<Vec<u8>> = opened.collect();
        Ok(recent(
            &now,
            super::now_micros() / 1_000_000,
            listed,
            &opened,
        ))
    }
}

/// The purges of `kept` (newest first, as the list holds them), oldest
/// first, their times moved to this node's clock; `now`: Redis's clock
/// (µs), `here`: this node's (seconds), read together; `listed`: how many
/// the list holds (more than were read when it is over-full). Entries
/// that do not parse are skipped.
fn recent(now: &str, here: u64, listed: u64, kept: &[Vec<u8>]) -> Recent {
    let there = now.parse::<u64>().map_or(0, |us| us / 1_000_000);
    let to_here = |said: u64| {
        if here >= there {
            said.saturating_add(here - there)
        } else {
            said.saturating_sub(there - here)
        }
    };
    let mut purges: Vec<Kept> = kept
        .iter()
        .filter_map(|entry| {
            let at_end = entry.iter().position(|&b| b == b'\n')?;
            let at: u64 = std::str::from_utf8(&entry[..at_end]).ok()?.parse().ok()?;
            match Event::decode(&entry[at_end + 1..])? {
                Event::Purged { what, from } => Some(Kept {
                    what,
                    from,
                    said: to_here(at / 1_000_000),
                }),
                _ => None,
            }
        })
        .collect();
    // Oldest first, whatever order a list written by something else is in.
    purges.sort_by_key(|k| k.said);
    let full = listed >= PURGES_KEPT as u64;
    Recent {
        now: here,
        lost_before: full.then(|| purges.first().map_or(u64::MAX, |k| k.said)),
        purges,
    }
}

/// Forwards the channel's messages to `events` until every sender is
/// gone; reconnects while Redis is away.
async fn subscribe(
    clients: Vec<redis::Client>,
    channel: String,
    keys: Arc<super::key::Keys>,
    events: broadcast::WeakSender<Event>,
    timeout: Duration,
) {
    let timeout = timeout.max(Duration::from_secs(1));
    // When the subscription last heard from Redis (`None`: never
    // subscribed).
    let mut heard: Option<tokio::time::Instant> = None;
    for client in clients.iter().cycle() {
        let connected = tokio::time::timeout(timeout, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await;
        if let Ok(Ok(pubsub)) = connected {
            let (mut sink, mut messages) = pubsub.split();
            // Messages sent while this node was away, or before it
            // started, were not heard.
            match events.upgrade() {
                Some(tx) => drop(tx.send(Event::Subscribed { heard })),
                None => return,
            }
            heard = Some(tokio::time::Instant::now());
            loop {
                let next = tokio::time::timeout(QUIET, messages.next()).await;
                let Some(tx) = events.upgrade() else { return };
                match next {
                    Ok(Some(msg)) => {
                        heard = Some(tokio::time::Instant::now());
                        let opened = keys.open_message(
                            super::key::Kind::Message,
                            &channel,
                            msg.get_payload_bytes(),
                        );
                        if let Some(event) = opened.and_then(Event::decode) {
                            let _ = tx.send(event);
                        }
                    }
                    // The connection is gone: connect again.
                    Ok(None) => break,
                    // Quiet: a connection a partition or a NAT dropped
                    // without a word stays quiet for ever, so ask.
                    Err(_) => {
                        let pong = tokio::time::timeout(timeout, sink.ping::<redis::Value>()).await;
                        if !matches!(pong, Ok(Ok(_))) {
                            break;
                        }
                        heard = Some(tokio::time::Instant::now());
                    }
                }
            }
        }
        if events.upgrade().is_none() {
            return;
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
}

pub(crate) fn new_channel() -> broadcast::Sender<Event> {
    broadcast::channel(BACKLOG).0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_1() -> Author {
        Author {
            node: "node-1".into(),
            instance: Some(0x00ab_cdef_0123_4567),
        }
    }

    #[test]
    fn authors_are_read_with_their_instance_or_as_named() {
        assert_eq!(node_1().encode(), "node-1#00abcdef01234567");
        assert_eq!(Author::decode("node-1#00abcdef01234567"), node_1());
        // An earlier version's name alone, or a name with a '#' of its own.
        for name in [
            "node-1",
            "node#1",
            "a#+0abcdef01234567",
            "a#00abcdef0123456",
        ] {
            let author = Author::decode(name);
            assert_eq!((&*author.node, author.instance), (name, None));
        }
        assert_eq!(Author::decode("a#b#00abcdef01234567").node.as_ref(), "a#b");
        assert_ne!(new_instance(), new_instance());
    }

    #[test]
    fn messages_round_trip_and_junk_is_ignored() {
        for event in [
            Event::Fetched("https://a.example".into()),
            Event::Moved("robots-proxy:f:{https://a.example:443}:bot:next".into()),
            Event::LeaseFree("https://a.example:443".into()),
            Event::Purged {
                what: Purge::Prefix("https://a.example/x".into()),
                from: node_1(),
            },
            Event::Reload { from: node_1() },
            Event::Lost { from: node_1() },
        ] {
            let decoded = Event::decode(&event.encode_from(&node_1()));
            match (&event, decoded) {
                (Event::Fetched(a), Some(Event::Fetched(b))) => assert_eq!(*a, b),
                (e, d) => assert_eq!(Some(e.clone()), d),
            }
        }
        assert_eq!(Event::decode(b"fetched\nnode"), None);
        assert_eq!(Event::decode(b"reboot\nnode\nnow"), None);
        assert_eq!(Event::decode(&[0xff, b'\n', b'a', b'\n', b'b']), None);
        let long = format!("fetched\nn\n{}", "a".repeat(MAX_VALUE + 1));
        assert_eq!(Event::decode(long.as_bytes()), None);
    }

    /// A kept entry: `<µs>\n<message>`.
    fn kept(at: u64, what: Purge) -> Vec<u8> {
        let message = Event::Purged {
            what,
            from: node_1(),
        }
        .encode_from(&node_1());
        let mut entry = format!("{at}\n").into_bytes();
        entry.extend(message);
        entry
    }

    #[test]
    fn purges_kept_are_read_oldest_first_with_when_they_were_said() {
        let now = 1_800_000_000_000_000u64;
        let s = 1_000_000;
        // Newest first, as the list holds them; some entries broken.
        let list = vec![
            kept(now - s, Purge::Url("http://a/1".into())),
            b"junk".to_vec(),
            b"12\nnot a message".to_vec(),
            kept(now - 5 * s, Purge::Prefix("http://a/".into())),
            kept(now - 20 * s, Purge::Url("http://a/old".into())),
        ];
        let r = recent(&now.to_string(), 1_800_000_000, 5, &list);
        let got: Vec<(&Purge, u64)> = r.purges.iter().map(|k| (&k.what, k.said)).collect();
        assert_eq!(
            got,
            [
                (&Purge::Url("http://a/old".into()), 1_800_000_000 - 20),
                (&Purge::Prefix("http://a/".into()), 1_800_000_000 - 5),
                (&Purge::Url("http://a/1".into()), 1_800_000_000 - 1),
            ]
        );
        assert_eq!(r.purges[0].from, node_1());
        assert_eq!(r.now, 1_800_000_000);
        assert_eq!(r.lost_before, None, "the list is not full: nothing lost");
        // This node's clock 10 s ahead of Redis's: the times move with it.
        let ahead = recent(&now.to_string(), 1_800_000_010, 5, &list);
        assert_eq!(ahead.purges[0].said, 1_800_000_000 - 10);
        assert_eq!(ahead.now, 1_800_000_010);
    }

    #[test]
    fn a_full_list_may_have_lost_what_was_said_before_its_oldest() {
        let now = 1_800_000_000_000_000u64;
        let full: Vec<Vec<u8>> = (0..PURGES_KEPT as u64)
            .map(|i| {
                kept(
                    now - i * 1_000_000,
                    Purge::Url(format!("http://a/{i}").into()),
                )
            })
            .collect();
        let n = PURGES_KEPT as u64;
        let r = recent(&now.to_string(), 1_800_000_000, n, &full);
        assert_eq!(r.purges.len(), PURGES_KEPT);
        assert_eq!(r.lost_before, Some(1_800_000_000 - (n - 1)));
        // Over-full (written by something else): some may be lost too.
        assert!(
            recent(&now.to_string(), 1_800_000_000, n + 5, &full[1..])
                .lost_before
                .is_some()
        );
        assert_eq!(
            recent(&now.to_string(), 1_800_000_000, n - 1, &full[1..]).lost_before,
            None
        );
        // Nothing readable in a full list: everything may be lost.
        let junk = vec![b"junk".to_vec(); PURGES_KEPT];
        assert_eq!(
            recent("", 1_800_000_000, n, &junk).lost_before,
            Some(u64::MAX)
        );
    }
}
