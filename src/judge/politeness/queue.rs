//! The requests held for one key of the local schedule, in slot order: a
//! request whose client gives up while held leaves the queue, and every
//! request behind it moves up one place (takes the slot of the one before
//! it), so the slot freed is used and no interval is lost.
//!
//! Each held request sleeps until its slot or until the queue says its
//! slot moved ([`Queue::moved`]), then reads its slot again. Leaving costs
//! one pass over the requests behind (at most `max_queue`, or what
//! `max_wait` allows) and one wake-up of each.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;

/// One key's held requests.
#[derive(Debug)]
pub(super) struct Queue {
    /// Ticket and slot of each held request, earliest slot first.
    held: VecDeque<(u64, Instant)>,
    /// The slot granted before the first held one: the key's latest once
    /// every held request has left.
    before: Instant,
    /// Told when slots move earlier.
    moved: Arc<Notify>,
}

impl Queue {
    /// A queue whose first held request has `slot`, booked after `before`.
    pub(super) fn new(before: Instant) -> Queue {
        Queue {
            held: VecDeque::new(),
            before,
            moved: Arc::new(Notify::new()),
        }
    }

    pub(super) fn hold(&mut self, ticket: u64, slot: Instant) {
        self.held.push_back((ticket, slot));
    }

    /// The slot `ticket` holds now, if it is held.
    pub(super) fn slot(&self, ticket: u64) -> Option<Instant> {
        self.held.iter().find(|h| h.0 == ticket).map(|h| h.1)
    }

    pub(super) fn moved(&self) -> Arc<Notify> {
        self.moved.clone()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// `ticket`'s slot has come: it goes, and stays the latest granted
    /// before the requests still held.
    pub(super) fn went(&mut self, ticket: u64) {
        if let Some(i) = self.held.iter().position(|h| h.0 == ticket) {
            if i == 0 {
                self.before = self.held[0].1;
            }
            self.held.remove(i);
        }
    }

    /// `ticket` left before its slot: those behind it move up one place.
    /// Returns the key's latest granted slot now (the last held one, or the
    /// one before the queue), or `None` when `ticket` was not held.
    pub(super) fn left(&mut self, ticket: u64) -> Option<Instant> {
        let i = self.held.iter().position(|h| h.0 == ticket)?;
        for j in (i + 1..self.held.len()).rev() {
            self.held[j].1 = self.held[j - 1].1;
        }
        self.held.remove(i);
        if i < self.held.len() {
            self.moved.notify_waiters();
        }
        Some(self.held.back().map_or(self.before, |h| h.1))
    }
}
