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
//! Most rules need no matching at all once their literal is found: a rule
//! that is just its literal (`/admin/`, `/ajax$`) is decided by the walk
//! reaching it, and a rule `/*` + literal (`/*/about`, `/*.php$`) by where
//! the occurrence starts (and ends, for `$`). Only the others are matched in
//! full, once each.
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

/// How an occurrence of a rule's literal decides the rule, packed in a byte:
/// the shape in the low bits, [`ANCHORED`] for a final `$`, and the length
/// of the prefix before the star (0 or 1) in the high nibble.
#[derive(Clone, Copy)]
enum Shape {
    /// Match the whole pattern against the path.
    Verify = 0,
    /// The pattern is the literal (plus `$`): a walk from the start of the
    /// path that reaches it decides.
    Exact = 1,
    /// The pattern is a prefix of at most one octet, `*`, the literal (plus
    /// `$`): an occurrence that starts after the prefix decides.
    StarLiteral = 2,
}

const SHAPE: u8 = 0b11;
const EXACT: u8 = Shape::Exact as u8;
const STAR_LITERAL: u8 = Shape::StarLiteral as u8;
const ANCHORED: u8 = 0b100;

impl Shape {
    fn pack(self, anchored: bool, prefix_len: usize) -> u8 {
        self as u8 | if anchored { ANCHORED } else { 0 } | ((prefix_len.min(15) as u8) << 4)
    }
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
    /// For each entry of `ids`, how an occurrence of its literal decides
    /// the rule ([`Shape`], packed in a byte).
    shapes: Box<[u8]>,
    /// The length of each literal.
    lens: Box<[u8]>,
    /// The lowest rule index in the set: if the best match so far is
    /// already at or before it, the set need not be searched.
    min_rule: u32,
}

impl LiteralSet {
    /// `None` for an empty set, or if the automaton cannot be built (then
    /// the caller gives up indexing and scans every rule).
    fn build(pairs: Vec<(&str, u32, u8)>, anchored: bool) -> Result<Option<LiteralSet>, ()> {
        if pairs.is_empty() {
            return Ok(None);
        }
        let mut literals: Vec<&str> = Vec::new();
        let mut by_literal: Vec<Vec<(u32, u8)>> = Vec::new();
        let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (lit, rule, shape) in pairs {
            let id = *seen.entry(lit).or_insert_with(|| {
                literals.push(lit);
                by_literal.push(Vec::new());
                literals.len() - 1
            });
            by_literal[id].push((rule, shape));
        }
        let nfa = contiguous::NFA::builder()
            .match_kind(MatchKind::Standard)
            .prefilter(false)
            .dense_depth(DENSE_DEPTH)
            .build(&literals)
            .map_err(|_| ())?;
        let mut offsets = Vec::with_capacity(by_literal.len() + 1);
        let mut ids = Vec::new();
        let mut shapes = Vec::new();
        offsets.push(0u32);
        for list in &by_literal {
            ids.extend(list.iter().map(|&(rule, _)| rule));
            shapes.extend(list.iter().map(|&(_, shape)| shape));
            offsets.push(ids.len() as u32);
        }
        // Literals are cut to MAX_LITERAL octets, so they fit a byte.
        let lens = literals.iter().map(|l| l.len() as u8).collect();
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
            shapes: shapes.into_boxed_slice(),
            lens,
        }))
    }

    /// Calls `found` with each occurrence of a literal in `hay` (for an
    /// anchored set, the walk from the start of `hay`): the literal's id and
    /// where the occurrence ends. An anchored walk also reports literals
    /// that merely end where a longer one does (they do not start at 0);
    /// `found` returns false to stop the scan.
    #[inline]
    fn scan(&self, hay: &[u8], found: &mut impl FnMut(&LiteralSet, usize, usize) -> bool) {
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
                        if !found(self, p, at) {
                            return;
                        }
                    }
                }
            }
        }
    }

    fn memory_usage(&self) -> usize {
        self.nfa.memory_usage()
            + 4 * (self.offsets.len() + self.ids.len())
            + self.shapes.len()
            + self.lens.len()
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
            let pat = rule.pattern();
            let (body, anchored) = match pat.strip_suffix('$') {
                Some(body) => (body, true),
                None => (pat, false),
            };
            let prefix = pattern::literal_prefix(pat);
            if prefix.len() >= 2 {
                let lit = cut(prefix);
                // `/admin/` or `/admin/$`: reaching the whole literal from
                // the start of the path decides.
                let shape = if lit == body {
                    Shape::Exact.pack(anchored, 0)
                } else {
                    Shape::Verify.pack(false, 0)
                };
                prefixes.push((lit, i, shape));
                continue;
            }
            let lit = pattern::longest_literal(pat);
            if lit.len() >= 2 {
                let cut_lit = cut(lit);
                // `/*/about` or `*.pdf$`: a prefix of at most one octet,
                // one star, then the whole literal. Any occurrence that
                // starts after the prefix decides (ending the path, if `$`).
                let shape = match body.strip_suffix(lit).and_then(|p| p.strip_suffix('*')) {
                    Some(p) if cut_lit == lit && !p.contains('*') => {
                        Shape::StarLiteral.pack(anchored, p.len())
                    }
                    _ => Shape::Verify.pack(false, 0),
                };
                inner.push((cut_lit, i, shape));
            } else {
                always.push(Always::new(i, pat));
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
            set.scan(path.as_bytes(), &mut |set, p, end| {
                search.on_literal(set, p, end)
            });
        }
        if let Some(set) = &self.inner
            && (set.min_rule as usize) < search.best
        {
            set.scan(path.as_bytes(), &mut |set, p, end| {
                search.on_literal(set, p, end)
            });
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
    /// Tries the rules reached through an occurrence of literal `p` of
    /// `set`, ending at `end`, in precedence order, while they could beat
    /// the best so far; false once nothing can (the best is the first rule).
    #[inline]
    fn on_literal(&mut self, set: &LiteralSet, p: usize, end: usize) -> bool {
        let start = end - set.lens[p] as usize;
        let (from, to) = (set.offsets[p] as usize, set.offsets[p + 1] as usize);
        let len = self.path.len();
        for (&i, &shape) in set.ids[from..to].iter().zip(&set.shapes[from..to]) {
            let i = i as usize;
            if i >= self.best {
                break;
            }
            let anchored_ok = shape & ANCHORED == 0 || end == len;
            let hit = match shape & SHAPE {
                // Reached by the walk from the start: the path starts with
                // the whole pattern (a suffix reported at a longer
                // literal's end does not start at 0).
                EXACT => start == 0 && anchored_ok,
                // After a prefix of `shape >> 4` octets (`/` or nothing);
                // every path passed here starts with `/`.
                STAR_LITERAL => {
                    let plen = (shape >> 4) as usize;
                    start >= plen
                        && anchored_ok
                        && self.path.as_bytes()[..plen]
                            == self.rules[i].pattern().as_bytes()[..plen]
                }
                // Each rule is matched in full once; later occurrences of
                // its literal cannot change that answer.
                _ => self.tried.insert(i) && pattern::matches(self.rules[i].pattern(), self.path),
            };
            if hit {
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
