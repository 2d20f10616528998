//! What a node knows of a Crawl-delay schedule, kept against a writer to
//! Redis that would loosen it.
//!
//! The schedule's next free slot is a plain number that the booking
//! script ([`super::schedule`]) reads and writes on Redis's clock: Lua on
//! Redis cannot check an HMAC cheaply, and the fleet key must not be in
//! Redis. So the number is checked by the nodes around it, from two
//! things a writer without the fleet key cannot forge:
//!
//! - **Seals.** After each booking a node writes, beside the schedule
//!   (`…:next:seal`, a hash with one field per node), the next free slot
//!   its booking left, tagged under the fleet key ([`super::key`]). The
//!   booking script returns the seals with the slot it booked; a slot
//!   earlier than a good seal says means the number was lowered (no
//!   booking lowers it; a request that leaves the queue does, and its
//!   script clears the seals as it does). The node counts it
//!   (`robots_proxy_fleet_rejected_total{kind="schedule"}`), books again
//!   from the seal, which writes the corrected number back.
//! - **Floors.** Each node keeps, per schedule it booked, the next free
//!   slot its own last booking left (bounded, least recently used out),
//!   and books no earlier than that: seals can be deleted, a node's
//!   memory cannot. A `moved` event (a request left the queue: tagged,
//!   so no forger can send one) forgets the floor of its schedule.
//!   The same holds for a pause ([`super::pauses`]): a pause Redis says
//!   ends more than a second before the end this node knows is taken to
//!   end when the node knows (within a second, clocks and messages a
//!   little apart, Redis's stands).
//!
//! What a writer to Redis can still do: delete the schedule and its seals
//! together (as a flush does), and then each node keeps its own spacing
//! only, until the next booking has written the schedule again; a node
//! that booked it lately finds it gone ([`super::schedule::Bounds`]'s
//! `expected`) and handles it as lost keys. Raising the number (a delay)
//! is availability, not a looser decision.

use std::num::NonZeroUsize;

use lru::LruCache;
use parking_lot::Mutex;

use super::key::{Keys, Kind};

/// Schedules whose floor a node keeps.
pub const FLOORS: usize = 10_000;

/// Most seals a booking reads (one per node; more is a hostile hash).
pub const MAX_SEALS: usize = 64;

/// The next free slot (µs on Redis's clock) each schedule this node booked
/// was left at by its last booking, by the schedule's Redis key.
#[derive(Debug)]
pub struct Floors {
    map: Mutex<LruCache<Box<str>, u64>>,
}

impl Default for Floors {
    fn default() -> Self {
        Floors {
            map: remembering(FLOORS),
        }
    }
}

/// A map of at most `n` keys to a time, least recently used out (the
/// floors here, the stamps' generations in [`super::stamp`]).
pub(crate) fn remembering(n: usize) -> Mutex<LruCache<Box<str>, u64>> {
    Mutex::new(LruCache::new(
        NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN),
    ))
}

impl Floors {
    /// The floor of `schedule` (0: none known).
    pub fn get(&self, schedule: &str) -> u64 {
        self.map.lock().get(schedule).copied().unwrap_or(0)
    }

    /// `schedule`'s next free slot is at least `next` now.
    pub fn raise(&self, schedule: &str, next: u64) {
        let mut map = self.map.lock();
        match map.get_mut(schedule) {
            Some(was) => *was = (*was).max(next),
            None => {
                map.put(schedule.into(), next);
            }
        }
    }

    /// A request left `schedule`'s queue: its next free slot moved
    /// earlier, legitimately.
    pub fn forget(&self, schedule: &str) {
        self.map.lock().pop(schedule);
    }
}

/// The Redis key of `schedule`'s seals (in its cluster slot).
pub fn seal_key(schedule: &str) -> String {
    format!("{schedule}:seal")
}

/// What a seal is tagged under: its hash and field.
fn place(seal_key: &str, node: &str) -> String {
    format!("{seal_key} {node}")
}

/// `next` (µs on Redis's clock) sealed by `node` for `seal_key`.
pub fn seal(keys: &Keys, seal_key: &str, node: &str, next: u64) -> Vec<u8> {
    keys.seal_entry(&place(seal_key, node), next.to_string().as_bytes())
}

/// The latest next free slot the seals `fields` (`[node, sealed, …]`, as
/// `HGETALL` gives them) vouch for; 0 when none. A seal that fails its
/// tag is counted and ignored.
pub fn vouched(keys: &Keys, seal_key: &str, fields: &[Vec<u8>]) -> u64 {
    fields
        .chunks_exact(2)
        .take(MAX_SEALS)
        .filter_map(|pair| {
            let node = std::str::from_utf8(&pair[0]).ok()?;
            let value = keys.open_entry(Kind::Schedule, &place(seal_key, node), pair[1].clone())?;
            std::str::from_utf8(&value).ok()?.parse::<u64>().ok()
        })
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::key::{FleetKey, KEY_LEN, KeySettings};

    #[test]
    fn seals_vouch_under_their_own_field_only() {
        let keys = Keys::new(Some(&KeySettings {
            current: FleetKey([3; KEY_LEN]),
            old: None,
        }));
        let at = seal_key("robots-proxy:f:{http://a:80}:bot:next");
        let one = seal(&keys, &at, "node-1", 5_000_000);
        let two = seal(&keys, &at, "node-2", 7_000_000);
        let fields = vec![
            b"node-1".to_vec(),
            one.clone(),
            b"node-2".to_vec(),
            two.clone(),
        ];
        assert_eq!(vouched(&keys, &at, &fields), 7_000_000);
        // Moved to another field, or forged: ignored and counted.
        let moved = vec![b"node-1".to_vec(), two, b"node-3".to_vec(), b"9".to_vec()];
        assert_eq!(vouched(&keys, &at, &moved), 0);
        assert_eq!(keys.rejected_count(Kind::Schedule), 2);
        let floors = Floors::default();
        floors.raise("k", 10);
        floors.raise("k", 4);
        assert_eq!(floors.get("k"), 10);
        floors.forget("k");
        assert_eq!(floors.get("k"), 0);
    }
}
