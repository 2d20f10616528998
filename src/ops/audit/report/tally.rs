//! Counts per key in bounded memory. A table keeps at most twice its cap
//! of keys; when a new key would pass that, the keys with the lowest
//! counts are folded into "others" until the cap is left. Totals stay
//! exact (rows plus others), and a table that never folded is exact row
//! by row; after a fold a key that comes back counts from zero again, so
//! its count may be short by up to the largest count folded, which the
//! table reports.

use std::collections::HashMap;

use foldhash::fast::RandomState;

/// Requests, and how many of them were blocked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Counts {
    pub(crate) requests: u64,
    pub(crate) blocked: u64,
}

impl Counts {
    pub(crate) fn add(&mut self, blocked: bool) {
        self.requests += 1;
        self.blocked += u64::from(blocked);
    }

    pub(crate) fn merge(&mut self, other: Counts) {
        self.requests += other.requests;
        self.blocked += other.blocked;
    }
}

/// A value a [`Tally`] ranks by its counts.
pub(crate) trait Tallied: Default {
    fn counts(&self) -> Counts;
}

impl Tallied for Counts {
    fn counts(&self) -> Counts {
        *self
    }
}

/// Keys to values, at most `2 × cap` of them.
#[derive(Debug)]
pub(crate) struct Tally<V> {
    map: HashMap<Box<str>, V, RandomState>,
    cap: usize,
    /// What was folded away.
    others: Counts,
    /// The largest request count folded: how short a count may be.
    pub(crate) short_by: u64,
}

impl<V: Tallied> Tally<V> {
    pub(crate) fn new(cap: usize) -> Tally<V> {
        Tally {
            map: HashMap::default(),
            cap: cap.max(1),
            others: Counts::default(),
            short_by: 0,
        }
    }

    /// Applies `f` to the value of `key`, added if new (folding first when
    /// full).
    pub(crate) fn add(&mut self, key: &str, f: impl FnOnce(&mut V)) {
        if let Some(v) = self.map.get_mut(key) {
            f(v);
            return;
        }
        if self.map.len() >= 2 * self.cap {
            self.fold();
        }
        let mut v = V::default();
        f(&mut v);
        self.map.insert(key.into(), v);
    }

    /// Keeps the `cap` keys with the highest counts; the rest go to others.
    fn fold(&mut self) {
        let mut all: Vec<(Box<str>, V)> = self.map.drain().collect();
        // The `cap` first in rank order, in linear time: the rest follow.
        if self.cap < all.len() {
            all.select_nth_unstable_by(self.cap, |a, b| rank(&a.0, &a.1, &b.0, &b.1));
        }
        for (_, v) in all.drain(self.cap.min(all.len())..) {
            let c = v.counts();
            self.short_by = self.short_by.max(c.requests);
            self.others.merge(c);
        }
        self.map.extend(all);
    }

    /// The `top` keys with the highest counts, in order, and the counts
    /// of everything else (the rows not shown and what was folded).
    pub(crate) fn top(&self, top: usize) -> (Vec<(&str, &V)>, Counts) {
        let mut rows: Vec<(&str, &V)> = self.map.iter().map(|(k, v)| (&**k, v)).collect();
        rows.sort_unstable_by(|a, b| rank(a.0, a.1, b.0, b.1));
        let mut rest = self.others;
        for (_, v) in rows.iter().skip(top) {
            rest.merge(v.counts());
        }
        rows.truncate(top);
        (rows, rest)
    }
}

/// Most requests first, then most blocked, then by key.
fn rank<V: Tallied>(ka: &str, a: &V, kb: &str, b: &V) -> std::cmp::Ordering {
    let (a, b) = (a.counts(), b.counts());
    b.requests
        .cmp(&a.requests)
        .then(b.blocked.cmp(&a.blocked))
        .then(ka.cmp(kb))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_table_is_exact() {
        let mut t: Tally<Counts> = Tally::new(10);
        for (key, blocked) in [("a", true), ("b", false), ("a", false), ("c", true)] {
            t.add(key, |c| c.add(blocked));
        }
        let (rows, rest) = t.top(2);
        let rows: Vec<_> = rows.into_iter().map(|(k, v)| (k, *v)).collect();
        assert_eq!(
            rows,
            [
                (
                    "a",
                    Counts {
                        requests: 2,
                        blocked: 1
                    }
                ),
                (
                    "c",
                    Counts {
                        requests: 1,
                        blocked: 1
                    }
                )
            ]
        );
        assert_eq!(
            rest,
            Counts {
                requests: 1,
                blocked: 0
            }
        );
        assert_eq!(t.short_by, 0);
    }

    #[test]
    fn a_table_past_its_cap_folds_the_least_counted_and_keeps_totals() {
        let mut t: Tally<Counts> = Tally::new(2);
        for _ in 0..5 {
            t.add("hot", |c| c.add(true));
        }
        for i in 0..100 {
            t.add(&format!("cold{i}"), |c| c.add(false));
        }
        assert!(t.map.len() <= 4);
        let (rows, rest) = t.top(1);
        assert_eq!(rows[0].0, "hot");
        assert_eq!(
            *rows[0].1,
            Counts {
                requests: 5,
                blocked: 5
            }
        );
        assert_eq!(rest.requests, 100);
        assert_eq!(t.short_by, 1);
    }
}
