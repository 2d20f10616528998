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
//! A message is `<kind>\n<node>\n<value>`; messages that do not parse, or
//! whose value is longer than [`MAX_VALUE`], are ignored.

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

/// An event of the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An origin's robots.txt entry was stored.
    Fetched(Arc<str>),
    /// A node (`from`) purged something.
    Purged { what: Purge, from: Arc<str> },
    /// A node (`from`) reloaded its configuration (SIGHUP): every node
    /// reads its own file again.
    Reload { from: Arc<str> },
    /// This node subscribed again after its subscription broke: what was
    /// said meanwhile (purges) was not heard. Never sent to other nodes.
    Rejoined,
    /// Redis answered this node again after an outage: what it decided
    /// alone meanwhile is shared again. Never sent to other nodes.
    Recovered,
}

impl Event {
    pub(crate) fn encode_from(&self, node: &str) -> Vec<u8> {
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
        let (from, value) = (Arc::<str>::from(from), Arc::<str>::from(value));
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
            from: self.node().into(),
        }
        .encode_from(self.node());
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
            from: self.node().into(),
        }
        .encode_from(self.node());
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

    #[test]
    fn messages_round_trip_and_junk_is_ignored() {
        for event in [
            Event::Fetched("https://a.example".into()),
            Event::Purged {
                what: Purge::Prefix("https://a.example/x".into()),
                from: "node-1".into(),
            },
            Event::Reload {
                from: "node-1".into(),
            },
        ] {
            let decoded = Event::decode(&event.encode_from("node-1"));
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
