//! What the nodes of a fleet tell each other, on one Redis pub/sub
//! channel (`robots-proxy:<name>:events`): an origin's robots.txt was
//! stored (nodes waiting for it look again), or something was purged
//! (every node drops its own copy), or a node reloaded its
//! configuration (every node reads its own again).
//!
//! One subscriber task per process, started by the first
//! [`Fleet::events`] call, reconnects every [`RETRY_EVERY`] while Redis is
//! away (to the next seed node of a cluster) and ends when the fleet is
//! dropped. An event missed while it is
//! away costs a waiting node one poll; a purge missed then leaves that
//! node's copy until it expires (the shared entry is gone, so it is
//! fetched again then).
//!
//! A message is `<kind>\n<node>#<instance>\n<value>` ([`Author`]); a
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
    fn encode(&self) -> String {
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
    /// A node (`from`) purged something.
    Purged { what: Purge, from: Author },
    /// A node (`from`) reloaded its configuration (SIGHUP): every node
    /// reads its own file again.
    Reload { from: Author },
    /// This node subscribed again after its subscription broke: what was
    /// said meanwhile (purges) was not heard. Never sent to other nodes.
    Rejoined,
    /// Redis answered this node again after an outage: what it decided
    /// alone meanwhile is shared again. Never sent to other nodes.
    Recovered,
}

impl Event {
    pub(crate) fn encode_from(&self, from: &Author) -> Vec<u8> {
        let node = from.encode();
        let (kind, value) = match self {
            Event::Fetched(o) => ("fetched", o),
            Event::Reload { .. } => return format!("reload\n{node}\nconfiguration").into_bytes(),
            Event::Rejoined | Event::Recovered => return Vec::new(),
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
        let message = Event::Reload {
            from: self.author(),
        }
        .encode_from(&self.author());
        self.publish(message).await
    }

    /// Publishes `message`; returns how many subscribers heard it (on a
    /// Redis Cluster, those subscribed through the node it went to).
    async fn publish(&self, message: Vec<u8>) -> Result<u64, super::Unavailable> {
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
    /// many subscribers heard it.
    pub async fn publish_purge(&self, what: Purge) -> Result<u64, super::Unavailable> {
        let message = Event::Purged {
            what,
            from: self.author(),
        }
        .encode_from(&self.author());
        self.publish(message).await
    }
}

/// Forwards the channel's messages to `events` until every sender is
/// gone; reconnects while Redis is away.
async fn subscribe(
    clients: Vec<redis::Client>,
    channel: String,
    events: broadcast::WeakSender<Event>,
    timeout: Duration,
) {
    let timeout = timeout.max(Duration::from_secs(1));
    let mut subscribed_before = false;
    for client in clients.iter().cycle() {
        let connected = tokio::time::timeout(timeout, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await;
        if let Ok(Ok(pubsub)) = connected {
            let (mut sink, mut messages) = pubsub.split();
            if subscribed_before {
                // Messages sent while this node was away are lost.
                match events.upgrade() {
                    Some(tx) => drop(tx.send(Event::Rejoined)),
                    None => return,
                }
            }
            subscribed_before = true;
            loop {
                let next = tokio::time::timeout(QUIET, messages.next()).await;
                let Some(tx) = events.upgrade() else { return };
                match next {
                    Ok(Some(msg)) => {
                        if let Some(event) = Event::decode(msg.get_payload_bytes()) {
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
            Event::Purged {
                what: Purge::Prefix("https://a.example/x".into()),
                from: node_1(),
            },
            Event::Reload { from: node_1() },
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
}
