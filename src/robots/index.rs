//! The prefilter of large groups: finds the highest-precedence matching rule
//! without trying every rule.
//!
//! Each rule is reachable through one literal that every matching path must
//! contain, and only the rules whose literal occurs are tried, each at most
//! once, and only while they could still beat the best match so far:
//!
//! * most rules (`/admin/`, `/p/*/reviews`) start with a literal prefix of
//!   two octets or more; a matching path *starts* with it. These prefixes
//!   are found by one anchored walk from the start of the path, which stops
//!   as soon as no prefix can continue: a few octets, whatever the path's
//!   length or the number of rules;
//! * rules that start with a wildcard (`/*.pdf$`, `/*?sort=`) are found
//!   through their longest literal segment, if it has two octets or more,
//!   by one unanchored Aho-Corasick pass over the path;
//! * the rest (`/*`, `/*a*a*a*b`, `*$`) are tried directly, after a cheap
//!   necessary condition: a path can only match if it holds at least as
//!   many of each octet as the pattern's literal segments do (they match at
//!   disjoint places). Counting the path's octets once rules out long chains
//!   such as `/*a*a*a*a*a*a*b` for almost every path.
//!
//! The automata are stepped by hand (no iterator, no prefilter object); in
//! the unanchored pass, octets that start no literal are skipped with a
//! table look-up while the automaton is in its start state. They are
//! contiguous NFAs with literals cut to [`MAX_LITERAL`] octets: on real
//! files they search about as fast as DFAs (paths are short and stay near
//! the root), while they are many times smaller and cheaper to build, and a
//! proxy keeps many of these.

use aho_corasick::automaton::Automaton;
use aho_corasick::{Anchored, MatchKind, nfa::contiguous};

use super::{Rule, pattern};

/// Literals are cut to this many octets. Any part of a literal is as
/// necessary a condition as the whole, and the first few octets nearly
/// always tell rules apart; cutting them keeps the automata small (some
/// sites list thousands of 80-octet URLs).
const MAX_LITERAL: usize = 8;

/// States this close to the root get a dense transition table.
const DENSE_DEPTH: usize = 1;

/// Paths up to this long have their octets counted for the rules without a
/// literal.
const MAX_COUNTED_PATH: usize = 512;

/// The first [`MAX_LITERAL`] octets of `lit` (normalised patterns are ASCII,
/// so any cut is a character boundary; the loop is for safety only).
fn cut(lit: &str) -> &str {
    let mut end = lit.len().min(MAX_LITERAL);
    while !lit.is_char_boundary(end) {
        end -= 1;
    }
    &lit[..end]
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct Index {
    /// Literal prefixes, searched anchored at the start of the path.
    prefixes: Option<LiteralSet>,
    /// Inner literals of rules that start with a wildcard, searched anywhere.
    inner: Option<LiteralSet>,
    /// Rules without a useful literal, ascending.
    always: Box<[Always]>,
}

/// Literals and, for each, the rules reached through it.
#[derive(Clone, Debug)]
struct LiteralSet {
    nfa: contiguous::NFA,
    anchored: Anchored,
    /// The octets that start a literal, as a 256-bit set.
    starts: [u64; 4],
    /// Rules reached through literal `p` are `ids[offsets[p]..offsets[p + 1]]`,
    /// ascending (precedence order).
    offsets: Box<[u32]>,
    ids: Box<[u32]>,
    /// The lowest rule index in the set: if the best match so far is
    /// already at or before it, the set need not be searched.
    min_rule: u32,
}

impl LiteralSet {
    /// `None` for an empty set, or if the automaton cannot be built (then
    /// the caller gives up indexing and scans every rule).
    fn build(pairs: Vec<(&str, u32)>, anchored: bool) -> Result<Option<LiteralSet>, ()> {
        if pairs.is_empty() {
            return Ok(None);
        }
        let mut literals: Vec<&str> = Vec::new();
        let mut by_literal: Vec<Vec<u32>> = Vec::new();
        let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (lit, rule) in pairs {
            let id = *seen.entry(lit).or_insert_with(|| {
                literals.push(lit);
                by_literal.push(Vec::new());
                literals.len() - 1
            });
            by_literal[id].push(rule);
        }
        let nfa = contiguous::NFA::builder()
            .match_kind(MatchKind::Standard)
            .prefilter(false)
            .dense_depth(DENSE_DEPTH)
            .build(&literals)
            .map_err(|_| ())?;
        let mut offsets = Vec::with_capacity(by_literal.len() + 1);
        let mut ids = Vec::new();
        offsets.push(0u32);
        for list in &by_literal {
            ids.extend_from_slice(list);
            offsets.push(ids.len() as u32);
        }
        let min_rule = ids.iter().copied().min().unwrap_or(u32::MAX);
        let mut starts = [0u64; 4];
        for lit in &literals {
            if let Some(&b) = lit.as_bytes().first() {
                starts[(b >> 6) as usize] |= 1 << (b & 63);
            }
        }
        Ok(Some(LiteralSet {
            min_rule,
            nfa,
            starts,
            anchored: if anchored {
                Anchored::Yes
            } else {
                Anchored::No
            },
            offsets: offsets.into_boxed_slice(),
            ids: ids.into_boxed_slice(),
        }))
    }

    /// Calls `found` with each rule reached through a literal that occurs in
    /// `hay` (an anchored set: that `hay` starts with). A rule may be
    /// reported more than once, and a few that cannot match may be too (an
    /// anchored walk also reports literals that end where a longer one
    /// does); callers verify each.
    #[inline]
    fn scan(&self, hay: &[u8], found: &mut impl FnMut(&[u32]) -> bool) {
        let aut = &self.nfa;
        let Ok(start) = aut.start_state(self.anchored) else {
            return;
        };
        let mut sid = start;
        let mut at = 0;
        while at < hay.len() {
            if sid == start && self.anchored == Anchored::No {
                // In the start state, an octet that starts no literal leads
                // back to it: skip those with a table look-up per octet,
                // which (unlike automaton steps) do not wait on each other.
                let starts = &self.starts;
                match hay[at..]
                    .iter()
                    .position(|&b| starts[(b >> 6) as usize] & (1 << (b & 63)) != 0)
                {
                    Some(k) => at += k,
                    None => return,
                }
            }
            sid = aut.next_state(self.anchored, sid, hay[at]);
            at += 1;
            if aut.is_special(sid) {
                if aut.is_dead(sid) {
                    return;
                }
                if aut.is_match(sid) {
                    for k in 0..aut.match_len(sid) {
                        let p = aut.match_pattern(sid, k).as_usize();
                        let (from, to) = (self.offsets[p] as usize, self.offsets[p + 1] as usize);
                        if !found(&self.ids[from..to]) {
                            return;
                        }
                    }
                }
            }
        }
    }

    fn memory_usage(&self) -> usize {
        self.nfa.memory_usage() + 4 * (self.offsets.len() + self.ids.len())
    }
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
    /// Builds the index of `rules` (in precedence order). `None` if an
    /// automaton cannot be built, in which case callers scan every rule.
    pub(crate) fn build(rules: &[Rule]) -> Option<Index> {
        let mut prefixes = Vec::new();
        let mut inner = Vec::new();
        let mut always = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            let i = i as u32;
            let prefix = pattern::literal_prefix(rule.pattern());
            if prefix.len() >= 2 {
                prefixes.push((cut(prefix), i));
                continue;
            }
            let lit = pattern::longest_literal(rule.pattern());
            if lit.len() >= 2 {
                inner.push((cut(lit), i));
            } else {
                always.push(Always::new(i, rule.pattern()));
            }
        }
        Some(Index {
            prefixes: LiteralSet::build(prefixes, true).ok()?,
            inner: LiteralSet::build(inner, false).ok()?,
            always: always.into_boxed_slice(),
        })
    }

    /// The lowest index (highest precedence) of a rule in `rules` that
    /// matches `path`.
    pub(crate) fn first_match(&self, rules: &[Rule], path: &str) -> Option<usize> {
        let mut search = Search {
            rules,
            path,
            best: usize::MAX,
            tried: Tried::new(rules.len()),
        };
        if let Some(set) = &self.prefixes {
            set.scan(path.as_bytes(), &mut |ids| search.try_rules(ids));
        }
        if let Some(set) = &self.inner
            && (set.min_rule as usize) < search.best
        {
            set.scan(path.as_bytes(), &mut |ids| search.try_rules(ids));
        }
        let mut best = search.best;
        // Only the rules without a literal that could still beat `best`.
        let open = self.always.partition_point(|a| (a.rule as usize) < best);
        if open > 0 {
            // Counting costs a few cycles per octet: worth it for the paths
            // of real URLs, not for very long ones, where each rule's own
            // (linear, memchr-driven) match is as cheap.
            let counted = path.len() <= MAX_COUNTED_PATH;
            let mut counts = [0u8; 256];
            if counted {
                for &b in path.as_bytes() {
                    counts[b as usize] = counts[b as usize].saturating_add(1);
                }
            }
            for a in &self.always[..open] {
                let i = a.rule as usize;
                if (!counted || a.possible(&counts)) && pattern::matches(rules[i].pattern(), path) {
                    best = i;
                    break;
                }
            }
        }
        (best != usize::MAX).then_some(best)
    }

    /// Heap bytes owned by the index.
    pub(crate) fn memory_usage(&self) -> usize {
        self.prefixes.as_ref().map_or(0, LiteralSet::memory_usage)
            + self.inner.as_ref().map_or(0, LiteralSet::memory_usage)
            + std::mem::size_of::<Always>() * self.always.len()
    }
}

/// The state of one [`Index::first_match`].
struct Search<'a> {
    rules: &'a [Rule],
    path: &'a str,
    best: usize,
    tried: Tried,
}

impl Search<'_> {
    /// Tries candidates (ascending) that could beat the best so far; false
    /// once nothing can (the best is the first rule).
    #[inline]
    fn try_rules(&mut self, ids: &[u32]) -> bool {
        for &i in ids {
            let i = i as usize;
            if i >= self.best {
                break;
            }
            if self.tried.insert(i) && pattern::matches(self.rules[i].pattern(), self.path) {
                self.best = i;
                break;
            }
        }
        self.best != 0
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
