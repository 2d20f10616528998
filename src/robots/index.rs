//! The prefilter of large groups: finds the highest-precedence matching rule
//! without trying every rule.
//!
//! Every rule whose longest literal segment has at least two octets is
//! reachable through that literal: a path can only match the rule if it
//! contains the literal. One Aho-Corasick pass over the path reports every
//! literal that occurs, and only those literals' rules are tried, each at
//! most once, and only while they could still beat the best match so far.
//! Rules without such a literal (`/*`, `/*a*a*a*b`, `/$`) are tried
//! directly, after a cheap necessary condition: a path can only match if it
//! holds at least as many of each octet as the pattern's literal segments
//! do (they match at disjoint places). Counting the path's octets once
//! rules out long chains such as `/*a*a*a*a*a*a*b` for almost every path.
//!
//! The automaton is stepped by hand (no iterator, no prefilter: paths are
//! short and full of the `/` that starts most literals). It is a contiguous
//! NFA: on real files it searches as fast as a DFA (paths are short and
//! stay near the root states, which are dense), while it is several times
//! smaller and cheaper to build, and a proxy keeps many of these.

use aho_corasick::automaton::Automaton;
use aho_corasick::{Anchored, MatchKind, nfa::contiguous};

use super::{Rule, pattern};

/// See the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct Index {
    searcher: contiguous::NFA,
    /// Rules containing literal `p` are `ids[offsets[p]..offsets[p + 1]]`,
    /// ascending (precedence order).
    offsets: Box<[u32]>,
    ids: Box<[u32]>,
    /// Rules without a useful literal, ascending.
    always: Box<[Always]>,
}

/// A rule without a useful literal, with the octets it needs.
#[derive(Clone, Debug)]
struct Always {
    rule: u32,
    /// Up to four (octet, minimum count) pairs, the largest counts first;
    /// unused pairs have count 0.
    need: [(u8, u8); 4],
}

impl Always {
    fn new(rule: u32, pattern: &str) -> Always {
        let body = pattern.strip_suffix('$').unwrap_or(pattern);
        let mut counts = [0u8; 256];
        for b in body.bytes().filter(|&b| b != b'*') {
            counts[b as usize] = counts[b as usize].saturating_add(1);
        }
        let mut pairs: Vec<(u8, u8)> = (0..=255u8)
            .filter(|&b| counts[b as usize] > 0)
            .map(|b| (b, counts[b as usize]))
            .collect();
        pairs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut need = [(0u8, 0u8); 4];
        for (slot, pair) in need.iter_mut().zip(pairs) {
            *slot = pair;
        }
        Always { rule, need }
    }

    #[inline]
    fn possible(&self, counts: &[u8; 256]) -> bool {
        self.need.iter().all(|&(b, n)| counts[b as usize] >= n)
    }
}

impl Index {
    /// Builds the index of `rules` (in precedence order). `None` if the
    /// automaton cannot be built, in which case callers scan every rule.
    pub(crate) fn build(rules: &[Rule]) -> Option<Index> {
        let mut literals: Vec<&str> = Vec::new();
        let mut by_literal: Vec<Vec<u32>> = Vec::new();
        let mut always = Vec::new();
        let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (i, rule) in rules.iter().enumerate() {
            let lit = pattern::longest_literal(rule.pattern());
            if lit.len() < 2 {
                always.push(Always::new(i as u32, rule.pattern()));
                continue;
            }
            let id = *seen.entry(lit).or_insert_with(|| {
                literals.push(lit);
                by_literal.push(Vec::new());
                literals.len() - 1
            });
            by_literal[id].push(i as u32);
        }
        let searcher = contiguous::NFA::builder()
            .match_kind(MatchKind::Standard)
            .prefilter(false)
            .build(&literals)
            .ok()?;
        let mut offsets = Vec::with_capacity(by_literal.len() + 1);
        let mut ids = Vec::with_capacity(rules.len());
        offsets.push(0u32);
        for list in &by_literal {
            ids.extend_from_slice(list);
            offsets.push(ids.len() as u32);
        }
        Some(Index {
            searcher,
            offsets: offsets.into_boxed_slice(),
            ids: ids.into_boxed_slice(),
            always: always.into_boxed_slice(),
        })
    }

    /// The lowest index (highest precedence) of a rule in `rules` that
    /// matches `path`.
    pub(crate) fn first_match(&self, rules: &[Rule], path: &str) -> Option<usize> {
        let mut best = usize::MAX;
        let mut tried = Tried::new(rules.len());
        let mut on_literal = |literal: usize| {
            let (from, to) = (self.offsets[literal], self.offsets[literal + 1]);
            for &i in &self.ids[from as usize..to as usize] {
                let i = i as usize;
                if i >= best {
                    break;
                }
                if tried.insert(i) && pattern::matches(rules[i].pattern(), path) {
                    best = i;
                    break;
                }
            }
        };
        scan(&self.searcher, path.as_bytes(), &mut on_literal);
        // Only the rules without a literal that could still beat `best`.
        let open = self.always.partition_point(|a| (a.rule as usize) < best);
        if open > 0 {
            let mut counts = [0u8; 256];
            for &b in path.as_bytes() {
                counts[b as usize] = counts[b as usize].saturating_add(1);
            }
            for a in &self.always[..open] {
                let i = a.rule as usize;
                if a.possible(&counts) && pattern::matches(rules[i].pattern(), path) {
                    best = i;
                    break;
                }
            }
        }
        (best != usize::MAX).then_some(best)
    }

    /// Heap bytes owned by the index.
    pub(crate) fn memory_usage(&self) -> usize {
        self.searcher.memory_usage()
            + 4 * (self.offsets.len() + self.ids.len())
            + std::mem::size_of::<Always>() * self.always.len()
    }
}

/// Runs `aut` over `hay`, calling `found` with the pattern id of every
/// literal occurrence (overlapping ones included).
#[inline]
fn scan<A: Automaton>(aut: &A, hay: &[u8], found: &mut impl FnMut(usize)) {
    let Ok(mut sid) = aut.start_state(Anchored::No) else {
        return;
    };
    for &b in hay {
        sid = aut.next_state(Anchored::No, sid, b);
        if aut.is_special(sid) {
            if aut.is_dead(sid) {
                return;
            }
            if aut.is_match(sid) {
                for k in 0..aut.match_len(sid) {
                    found(aut.match_pattern(sid, k).as_usize());
                }
            }
        }
    }
}

/// A set of rule indices already tried for one path; on the stack for
/// groups of up to 1024 rules.
enum Tried {
    Small([u64; 16]),
    Large(Vec<u64>),
}

impl Tried {
    fn new(n: usize) -> Tried {
        if n <= 1024 {
            Tried::Small([0; 16])
        } else {
            Tried::Large(vec![0; n.div_ceil(64)])
        }
    }

    /// Marks `i`; true if it was not marked before.
    #[inline]
    fn insert(&mut self, i: usize) -> bool {
        let words: &mut [u64] = match self {
            Tried::Small(a) => a,
            Tried::Large(v) => v,
        };
        let (w, bit) = (i / 64, 1u64 << (i % 64));
        let fresh = words[w] & bit == 0;
        words[w] |= bit;
        fresh
    }
}
