//! A shared robots.txt entry's stamp: when it was stored and until when
//! it may be used, under its fleet-key tag, so an old entry written back
//! (a replay) is told from the one in force.
//!
//! The tag ([`super::key`]) binds an entry to its Redis key, but a copy
//! of an old entry (`DUMP` and `RESTORE`, or `HGET` and `HSET`) carries a
//! good tag too. So the sealed value begins with `s1 <stored> <until>\n`
//! in ms on Redis's clock: `stored` is when the lease it was fetched
//! under was taken (leases of one origin follow each other, so a later
//! entry has a later time, whatever the nodes' clocks say), `until` the
//! end of its life in Redis (fresh, then kept as the stale-on-error
//! copy). A look returns Redis's time with the entry, and a node refuses
//! an entry
//!
//! - past its life by more than [`GRACE`] (a copy kept and written back
//!   later), and
//! - stored before the latest entry this node has read or stored for
//!   that origin (bounded memory, [`GENERATIONS`] origins): an older copy
//!   over a newer one.
//!
//! Either is counted (`robots_proxy_fleet_rejected_total{kind="replay"}`)
//! and handled as no entry: fetched again. What remains: a node that has
//! not seen the newer entry (it started since, or forgot the origin) takes
//! an old copy written back within that copy's own life.

use std::time::Duration;

use lru::LruCache;
use parking_lot::Mutex;

/// How long past its life an entry is still taken (a look that began
/// as it ended).
pub const GRACE: Duration = Duration::from_secs(1);

/// Origins whose latest entry a node remembers.
pub const GENERATIONS: usize = 100_000;

/// Bytes a stamp takes at most.
pub const STAMP_MAX: usize = 48;

/// `meta`, stamped: stored at `stored_ms`, usable until `until_ms`.
pub fn stamp(meta: &[u8], stored_ms: u64, until_ms: u64) -> Vec<u8> {
    let mut out = format!("s1 {stored_ms} {until_ms}\n").into_bytes();
    out.extend_from_slice(meta);
    out
}

/// The stamp's times and the `meta` after it; `None` when it has none.
pub fn unstamp(value: &[u8]) -> Option<(u64, u64, &[u8])> {
    let rest = value.strip_prefix(b"s1 ")?;
    let end = rest.iter().take(STAMP_MAX).position(|&b| b == b'\n')?;
    let head = std::str::from_utf8(&rest[..end]).ok()?;
    let (stored, until) = head.split_once(' ')?;
    Some((stored.parse().ok()?, until.parse().ok()?, &rest[end + 1..]))
}

/// Why an entry is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stale {
    /// Past its life.
    Expired,
    /// Older than one this node has seen.
    Older,
}

/// The latest entry each origin's this node has read or stored (ms of
/// Unix time it was stored).
#[derive(Debug)]
pub struct Generations {
    map: Mutex<LruCache<Box<str>, u64>>,
}

impl Default for Generations {
    fn default() -> Self {
        Generations {
            map: super::floor::remembering(GENERATIONS),
        }
    }
}

impl Generations {
    /// Whether an entry of `origin` stored at `stored_ms` and usable until
    /// `until_ms` may be used at `now_ms`; if so it is the latest seen.
    pub fn admit(
        &self,
        origin: &str,
        stored_ms: u64,
        until_ms: u64,
        now_ms: u64,
    ) -> Result<(), Stale> {
        if now_ms > until_ms.saturating_add(super::millis(GRACE)) {
            return Err(Stale::Expired);
        }
        let mut map = self.map.lock();
        match map.get_mut(origin) {
            Some(latest) if stored_ms < *latest => Err(Stale::Older),
            Some(latest) => {
                *latest = stored_ms;
                Ok(())
            }
            None => {
                map.put(origin.into(), stored_ms);
                Ok(())
            }
        }
    }

    /// This node stored an entry of `origin` at `stored_ms`: the latest
    /// (even if Redis's clock went back, so a node never refuses its own).
    pub fn stored(&self, origin: &str, stored_ms: u64) {
        self.map.lock().put(origin.into(), stored_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_copies_and_spent_entries_are_refused() {
        let stamped = stamp(b"{\"meta\":1}", 1_000_000, 2_000_000);
        let (stored, until, meta) = unstamp(&stamped).expect("stamped");
        assert_eq!(
            (stored, until, meta),
            (1_000_000, 2_000_000, &b"{\"meta\":1}"[..])
        );
        assert_eq!(unstamp(b"{\"meta\":1}"), None);
        assert_eq!(unstamp(b"s1 12 x\n{}"), None);
        let g = Generations::default();
        let origin = "http://a:80";
        assert_eq!(g.admit(origin, 1_000_000, 2_000_000, 1_500_000), Ok(()));
        assert_eq!(g.admit(origin, 1_000_500, 3_000_000, 1_950_000), Ok(()));
        // The first copy, written back: older than the one seen.
        assert_eq!(
            g.admit(origin, 1_000_000, 2_000_000, 1_960_000),
            Err(Stale::Older)
        );
        // Past its life (and the grace).
        assert_eq!(
            g.admit("http://b:80", 1_000_000, 2_000_000, 2_001_001),
            Err(Stale::Expired)
        );
        // What this node stored is the latest, even if earlier.
        g.stored(origin, 900_000);
        assert_eq!(g.admit(origin, 900_000, 3_000_000, 1_960_000), Ok(()));
    }
}
