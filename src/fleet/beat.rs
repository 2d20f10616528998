//! A heartbeat's seal, and the peer listeners a node remembers.
//!
//! A heartbeat's value in the fleet's listeners hash is the time it was
//! written (ms on Redis's clock, as the node estimates it from the last
//! time Redis told it) and the node's listeners, tagged under the fleet
//! key ([`super::key`]) for the hash and the member it belongs to. A
//! reader takes a heartbeat only if its tag holds and it was written
//! within [`FRESH_FOR`] of Redis's time now: a member without one, with
//! a bad tag, or with an old one written back is not a live node (no
//! rank, no count) and its listeners are not taken; it is counted
//! (`robots_proxy_fleet_rejected_total{kind="heartbeat"}`).
//!
//! Listeners learned from a good heartbeat stay refused as destinations
//! for [`REMEMBER_PEERS`] after they were last seen, so deleting or
//! spoiling heartbeats in Redis does not open a peer's admin listener to
//! the node's clients at once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::key::{Keys, Kind};

/// How long after its writing a heartbeat is taken: two periods of
/// [`super::nodes::DEAD_AFTER`] back (a node's estimate of Redis's time
/// drifts a little), one ahead.
pub const FRESH_FOR: Duration = Duration::from_secs(6);

/// How long a peer's listener stays refused after its last good
/// heartbeat.
pub const REMEMBER_PEERS: Duration = Duration::from_secs(600);

/// Most peer listeners remembered.
const MAX_REMEMBERED: usize = 8 * super::nodes::MAX_NODES;

/// What the tag of `member`'s heartbeat in the hash `place` covers.
fn tag_place(place: &str, member: &str) -> String {
    format!("{place}\n{member}")
}

/// `member`'s heartbeat value: written at `at_ms` (Redis's clock), with
/// its `listeners`, sealed.
pub fn seal(keys: &Keys, place: &str, member: &str, at_ms: u64, listeners: &str) -> Vec<u8> {
    keys.seal_line(
        "heartbeat",
        &tag_place(place, member),
        format!("{at_ms} {listeners}").into_bytes(),
    )
}

/// The listeners in `member`'s heartbeat value, if its tag holds and it
/// was written within [`FRESH_FOR`] of `now_ms` (Redis's time); `None`,
/// counted, otherwise. Without a fleet key, any value is taken.
pub fn open(keys: &Keys, place: &str, member: &str, sealed: &[u8], now_ms: u64) -> Option<String> {
    let at = tag_place(place, member);
    let value = keys.open_line(Kind::Heartbeat, "heartbeat", &at, sealed)?;
    let text = String::from_utf8_lossy(value);
    let (written, listeners) = match text.split_once(' ') {
        Some((t, l)) => (t.parse::<u64>().ok(), l),
        None => (text.parse::<u64>().ok(), ""),
    };
    if !keys.enabled() {
        return Some(listeners.to_string());
    }
    let fresh = FRESH_FOR.as_millis() as u64;
    match written {
        Some(t) if t + fresh >= now_ms && t <= now_ms + fresh / 2 => Some(listeners.to_string()),
        _ => {
            keys.rejected(Kind::Heartbeat, &at);
            None
        }
    }
}

/// Redis's clock as a node estimates it, and the peer listeners it
/// remembers.
#[derive(Debug, Default)]
pub struct Beats {
    /// Redis's time (ms) at the last heartbeat, and when that was here.
    clock: Mutex<Option<(u64, Instant)>>,
    /// Each peer listener, and when a good heartbeat last named it.
    known: Mutex<HashMap<SocketAddr, Instant>>,
}

impl Beats {
    /// Redis's time now as estimated from the last one read; `None`
    /// before any was.
    pub fn redis_now(&self) -> Option<u64> {
        let (ms, at) = (*self.clock.lock())?;
        Some(ms.saturating_add(at.elapsed().as_millis() as u64))
    }

    /// Redis said it was `ms` just now.
    pub fn set_redis_now(&self, ms: u64) {
        *self.clock.lock() = Some((ms, Instant::now()));
    }

    /// Takes the listeners of this heartbeat's good peers, and returns
    /// every listener named by one within [`REMEMBER_PEERS`].
    pub fn remember(&self, seen: impl IntoIterator<Item = SocketAddr>) -> Vec<SocketAddr> {
        let now = Instant::now();
        let mut known = self.known.lock();
        for addr in seen {
            if known.len() < MAX_REMEMBERED || known.contains_key(&addr) {
                known.insert(addr, now);
            }
        }
        known.retain(|_, at| now.duration_since(*at) < REMEMBER_PEERS);
        let mut out: Vec<SocketAddr> = known.keys().copied().collect();
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::key::{FleetKey, KEY_LEN, KeySettings};

    fn keys(k: u8) -> Keys {
        Keys::new(Some(&KeySettings {
            current: FleetKey([k; KEY_LEN]),
            old: None,
        }))
    }

    #[test]
    fn heartbeats_open_for_their_member_while_fresh() {
        let k = keys(1);
        let sealed = seal(&k, "h", "a#1", 10_000, "127.0.0.1:1");
        assert_eq!(
            open(&k, "h", "a#1", &sealed, 11_000).as_deref(),
            Some("127.0.0.1:1")
        );
        // Another member, another key, too old, untagged: refused.
        assert_eq!(open(&k, "h", "b#1", &sealed, 11_000), None);
        assert_eq!(open(&keys(2), "h", "a#1", &sealed, 11_000), None);
        assert_eq!(open(&k, "h", "a#1", &sealed, 17_000), None);
        assert_eq!(open(&k, "h", "a#1", b"10000 127.0.0.1:1", 11_000), None);
        assert_eq!(k.rejected_count(Kind::Heartbeat), 3);
        // Without a key: taken as written.
        let none = Keys::new(None);
        assert_eq!(
            open(&none, "h", "a#1", b"5 127.0.0.1:1", 99_999).as_deref(),
            Some("127.0.0.1:1")
        );
    }

    #[test]
    fn listeners_are_remembered_after_their_heartbeat_goes() {
        let b = Beats::default();
        let a: SocketAddr = "127.0.0.1:9".parse().expect("addr");
        assert_eq!(b.remember([a]), vec![a]);
        assert_eq!(b.remember([]), vec![a]);
    }
}
