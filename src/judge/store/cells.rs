//! The robots cache's LRU: each origin's cell (its entry, the fetch under
//! way), the bytes entries hold, the policy refusals among them, the purge
//! count fetches are checked against, and the origins decided without the
//! fleet.

use std::sync::Arc;

use futures_util::future::{BoxFuture, Shared};
use lru::LruCache;
use prometheus_client::metrics::gauge::Gauge;

use super::entry::{Entry, State};
use crate::http::origin::Origin;

/// A fetch under way, shared by every request waiting for it.
pub(super) type Flight = Shared<BoxFuture<'static, Arc<Entry>>>;

/// An origin's place in the robots cache: its entry, the fetch under way.
pub(super) struct Cell {
    pub(super) entry: Option<Arc<Entry>>,
    pub(super) flight: Option<Flight>,
    /// Bytes accounted for `entry`.
    pub(super) weight: usize,
}

/// The LRU, the bytes its entries hold and how many of them are policy
/// refusals.
pub(super) struct Cells {
    pub(super) lru: LruCache<Origin, Cell>,
    pub(super) bytes: usize,
    /// Entries that are [`State::Refused`]: kept so a refused origin is not
    /// fetched again on every request, but not counted as cached robots.txt
    /// state ([`super::RobotsCache::len`]).
    pub(super) refused: usize,
    /// Purges so far: a fetch that was under way during a purge may have
    /// read the file the purge is for, so its entry is not kept.
    pub(super) purges: u64,
    /// In a fleet, origins whose entry this node decided alone while Redis
    /// was unavailable (a fetch of its own, a copy restored from disk):
    /// dropped when Redis answers again ([`super::RobotsCache::forget_alone`]).
    /// At most the LRU's capacity; `None` once that overflowed (every
    /// entry is dropped then).
    alone: Option<std::collections::HashSet<Origin>>,
    /// `robots_proxy_robots_cache_entries`: what [`super::RobotsCache::len`]
    /// says, set after every change.
    pub(super) entries: Gauge,
}

/// True if `cell` holds a destination-policy refusal.
fn is_refused(cell: &Cell) -> bool {
    cell.entry
        .as_ref()
        .is_some_and(|e| matches!(e.state, State::Refused { .. }))
}

impl Cells {
    pub(super) fn new(lru: LruCache<Origin, Cell>) -> Cells {
        Cells {
            lru,
            bytes: 0,
            refused: 0,
            purges: 0,
            alone: Some(Default::default()),
            entries: Gauge::default(),
        }
    }

    /// Origins whose robots.txt state is held (or being fetched), policy
    /// refusals not counted.
    pub(super) fn len(&self) -> usize {
        self.lru.len() - self.refused
    }

    /// Sets the entries gauge after a change.
    fn settle(&self) {
        self.entries
            .set(i64::try_from(self.len()).unwrap_or(i64::MAX));
    }

    /// Ends `origin`'s flight with `entry`, fetched when the purge count
    /// was `purges`; `alone`: decided without the fleet.
    pub(super) fn finish(
        &mut self,
        origin: Origin,
        entry: &Arc<Entry>,
        purges: u64,
        alone: bool,
        max_bytes: usize,
    ) {
        if self.purges != purges {
            // Purged meanwhile: the waiting requests get it, nothing is
            // kept, the next request fetches again.
        } else if matches!(entry.state, State::LocalError { .. }) {
            // Says nothing about the origin: the waiting requests get it,
            // the cell keeps what it had, and the next request fetches
            // again.
            if let Some(cell) = self.lru.get_mut(&origin) {
                cell.flight = None;
            }
        } else {
            if alone {
                self.note_alone(&origin);
            }
            self.store(origin, entry.clone(), max_bytes);
        }
    }

    /// Drops the entries decided alone ([`Self::note_alone`]), every entry
    /// if they overflowed; returns how many were dropped.
    pub(super) fn forget_alone(&mut self) -> usize {
        match self.alone.replace(Default::default()) {
            Some(alone) => alone.iter().filter(|o| self.remove(o)).count(),
            None => self.clear(),
        }
    }

    /// Accounts for a cell that left the LRU.
    pub(super) fn forget(&mut self, old: &Cell) {
        self.bytes -= old.weight;
        self.refused -= usize::from(is_refused(old));
    }

    /// Stores `entry` for `origin` (finishing its flight), then drops least
    /// recently used entries while over `max_bytes` (never the last one).
    pub(super) fn store(&mut self, origin: Origin, entry: Arc<Entry>, max_bytes: usize) {
        let weight = entry.memory_usage();
        match self.lru.get_mut(&origin) {
            Some(cell) => {
                self.bytes = self.bytes - cell.weight + weight;
                self.refused -= usize::from(is_refused(cell));
                cell.entry = Some(entry);
                self.refused += usize::from(is_refused(cell));
                cell.flight = None;
                cell.weight = weight;
            }
            None => {
                self.bytes += weight;
                let cell = Cell {
                    entry: Some(entry),
                    flight: None,
                    weight,
                };
                self.refused += usize::from(is_refused(&cell));
                if let Some((_, old)) = self.lru.push(origin, cell) {
                    self.forget(&old);
                }
            }
        }
        while self.bytes > max_bytes && self.lru.len() > 1 {
            match self.lru.pop_lru() {
                Some((_, old)) => self.forget(&old),
                None => break,
            }
        }
        self.settle();
    }

    /// A new cell for `origin`, whose first fetch is `flight`.
    pub(super) fn push_flight(&mut self, origin: Origin, flight: Flight) {
        let cell = Cell {
            entry: None,
            flight: Some(flight),
            weight: 0,
        };
        if let Some((_, old)) = self.lru.push(origin, cell) {
            self.forget(&old);
        }
        self.settle();
    }

    /// Notes that `origin`'s entry was decided without the fleet.
    fn note_alone(&mut self, origin: &Origin) {
        let cap = self.lru.cap().get();
        if let Some(alone) = &mut self.alone {
            if alone.len() < cap {
                alone.insert(origin.clone());
            } else {
                self.alone = None;
            }
        }
    }

    /// Drops every entry (fetches under way keep their flights' waiters,
    /// not their cells); returns how many there were.
    pub(super) fn clear(&mut self) -> usize {
        let n = self.lru.len();
        self.lru.clear();
        self.bytes = 0;
        self.refused = 0;
        self.alone = Some(Default::default());
        self.settle();
        n
    }

    pub(super) fn remove(&mut self, origin: &Origin) -> bool {
        match self.lru.pop(origin) {
            Some(old) => {
                self.forget(&old);
                self.settle();
                true
            }
            None => false,
        }
    }
}
