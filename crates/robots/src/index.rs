//! The prefilter of large groups: finds the highest-precedence matching rule
//! without trying every rule.
//!
//! Each rule is reachable through one literal that every matching path must
//! contain, and only the rules whose literal occurs are tried, each at most
//! once, and only while they could still beat the best match so far:
//!
//! * most rules (`/admin/`, `/p/*/reviews`) start with a literal prefix of
//!   two octets or more; a matching path *starts* with it. These rules are
//!   kept sorted by their prefix, so the rules whose prefix is a prefix of
//!   the path are found by a few binary searches (one per prefix found,
//!   plus one per shortening of the part of the path looked up). The array
//!   holds 4 bytes per rule and reads the prefixes from the rules' own text;
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
//! the occurrence starts (and ends, for `$`), and, when its literal is longer
//! than the part searched (`/*/followers`), by the rest of it following.
//! Only the others are matched in full, once each.
//!
//! A path in which a small set's literals occur very often (`aaaaaaaa` at
//! every octet of a 10 KiB run of `a`) stops the scan: the set's rules that
//! could still win are then matched one by one, each in one linear pass.
//!
//! The automaton is stepped by hand (no iterator, no prefilter object); in
//! the unanchored pass, octets that start no literal are skipped with a
//! table look-up while the automaton is in its start state. It is a
//! contiguous NFA with literals cut to [`MAX_LITERAL`] octets: on real
//! files it searches about as fast as a DFA (paths are short), while it is
//! many times smaller and cheaper to build, and a proxy keeps many of these.

use aho_corasick::automaton::Automaton;
use aho_corasick::{Anchored, MatchKind, nfa::contiguous};

use super::parse::MAX_BYTES;
use super::{Table, pattern};

/// Literals are cut to this many octets. Any part of a literal is as
/// necessary a condition as the whole, and the first few octets nearly
/// always tell rules apart; cutting them keeps the automata small (some
/// sites list thousands of 80-octet URLs).
const MAX_LITERAL: usize = 8;

/// A rule `/*` + literal whose literal is cut is decided by comparing the
/// rest of the literal at each occurrence of the cut part if the literal is
/// at most this long (a bounded cost per path octet); longer ones are
/// matched in full, once.
const MAX_CUT_LITERAL: usize = 64;

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

/// How an occurrence of an inner literal decides its rule, packed in a byte:
/// the shape in the low bits, [`ANCHORED`] for a final `$`, [`CUT`] when the
/// literal searched is cut short of the pattern's, and the length of the
/// prefix before the star (0 or 1) in the high nibble.
#[derive(Clone, Copy)]
enum Shape {
    /// Match the whole pattern against the path.
    Verify = 0,
    /// The pattern is a prefix of at most one octet, `*`, the literal (plus
    /// `$`): an occurrence that starts after the prefix decides. With
    /// [`CUT`], an occurrence of the cut literal where the whole literal
    /// (at most [`MAX_CUT_LITERAL`] octets) follows.
    StarLiteral = 2,
}

const SHAPE: u8 = 0b11;
const STAR_LITERAL: u8 = Shape::StarLiteral as u8;
const ANCHORED: u8 = 0b100;
const CUT: u8 = 0b1000;

impl Shape {
    fn pack(self, anchored: bool, cut: bool, prefix_len: usize) -> u8 {
        self as u8
            | if anchored { ANCHORED } else { 0 }
            | if cut { CUT } else { 0 }
            | ((prefix_len.min(15) as u8) << 4)
    }
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct Index {
    /// Rules with a literal prefix, sorted by it.
    prefixes: Prefixes,
    /// Inner literals of rules that start with a wildcard, searched
    /// anywhere (boxed: the automaton's type is large).
    inner: Option<Box<LiteralSet>>,
    /// Rules without a useful literal, ascending.
    always: Box<[Always]>,
}

/// The rules with a literal prefix of two octets or more, sorted by that
/// prefix (then by precedence): 4 bytes per rule, packing where its
/// pattern starts in the table's text, two flags and the prefix's length.
/// The prefix itself is read from the rule's pattern. Reading a prefix's
/// octet is one load from the text; the rule's index is looked up only for
/// a prefix that matches.
#[derive(Clone, Debug, Default)]
struct Prefixes {
    entries: Box<[u32]>,
    /// (entry position, prefix length) of the prefixes too long for an
    /// entry's length field, ascending by position (few files have any).
    long: Box<[(u32, u32)]>,
}

/// Bits of an entry that hold the text offset. The file is capped at
/// [`MAX_BYTES`]; normalising grows it at most 3×: an octet outside
/// printable ASCII, valid UTF-8 or not, is encoded as `%XX`. (A reading's
/// rules are never longer than the rules it reads.)
const OFFSET_BITS: u32 = 23;
const OFFSET_MASK: u32 = (1 << OFFSET_BITS) - 1;
const _: () = assert!(3 * MAX_BYTES <= OFFSET_MASK as usize);
/// The pattern is its prefix (`/admin/`, `/admin/$`): reaching it decides.
const WHOLE: u32 = 1 << OFFSET_BITS;
/// The pattern ends in `$`.
const DOLLAR: u32 = 1 << (OFFSET_BITS + 1);
const LEN_SHIFT: u32 = OFFSET_BITS + 2;
/// The prefix length field's largest value, which stands for "look the
/// length up in [`Prefixes::long`]".
const LONG_PREFIX: u32 = (1 << (32 - LEN_SHIFT)) - 1;

/// Ranges this small are narrowed by counting the entries below and up to
/// the path's octet, not by binary searches.
const LINEAR_RANGE: usize = 48;

/// Ranges this small are finished by comparing each prefix with the path
/// instead of narrowing them further.
const SMALL_RANGE: usize = 8;

impl Prefixes {
    /// Sorts `rules` by their literal prefixes. Returns the rules that do
    /// not fit an entry (none for files within [`MAX_BYTES`]) for the caller
    /// to try another way.
    fn build(table: &Table, rules: Vec<u32>) -> (Prefixes, Vec<u32>) {
        let (mut fit, rest): (Vec<u32>, Vec<u32>) = rules
            .into_iter()
            .partition(|&i| table.start(i as usize) <= OFFSET_MASK as usize);
        fit.sort_by_cached_key(|&i| (pattern::literal_prefix(table.pattern(i as usize)), i));
        let mut long = Vec::new();
        let entries = fit
            .into_iter()
            .enumerate()
            .map(|(pos, i)| {
                let pat = table.pattern(i as usize);
                let (body, dollar) = match pat.strip_suffix('$') {
                    Some(body) => (body, DOLLAR),
                    None => (pat, 0),
                };
                let prefix = pattern::literal_prefix(pat);
                let whole = if prefix.len() == body.len() { WHOLE } else { 0 };
                let len = if prefix.len() >= LONG_PREFIX as usize {
                    long.push((pos as u32, prefix.len() as u32));
                    LONG_PREFIX
                } else {
                    prefix.len() as u32
                };
                table.start(i as usize) as u32 | whole | dollar | (len << LEN_SHIFT)
            })
            .collect();
        (
            Prefixes {
                entries,
                long: long.into_boxed_slice(),
            },
            rest,
        )
    }

    /// The literal prefix of the entry at `pos` (`text` is the table's).
    #[inline]
    fn key<'t>(&self, text: &'t [u8], pos: usize) -> &'t [u8] {
        let entry = self.entries[pos];
        let start = (entry & OFFSET_MASK) as usize;
        let len = match entry >> LEN_SHIFT {
            LONG_PREFIX => self.long_len(pos),
            len => len as usize,
        };
        &text[start..start + len]
    }

    #[cold]
    fn long_len(&self, pos: usize) -> usize {
        self.long
            .binary_search_by_key(&(pos as u32), |&(p, _)| p)
            .map_or(0, |k| self.long[k].1 as usize)
    }

    /// Calls `found(offset, whole, dollar, end)` for each rule whose literal
    /// prefix is a prefix of `path` (ending at `end`), with the offset of its
    /// pattern in the table's text (which grows with the rule's index);
    /// `found` returns false to stop.
    ///
    /// Entries in `lo..hi` all have prefixes that start with `path[..k]`;
    /// those whose prefix is exactly that sort first; the rest are narrowed
    /// to the ones whose next octet is `path[k]` (two binary searches; the
    /// octets that the range's first and last prefixes and the path share
    /// are skipped without searching), until few are left, which are
    /// compared with the path one by one. Every step reads at most as far
    /// as the path.
    #[inline]
    fn scan(
        &self,
        table: &Table,
        path: &[u8],
        found: &mut impl FnMut(usize, bool, bool, usize) -> bool,
    ) {
        let entries = &self.entries;
        let text = table.text();
        let mut report = |e: u32, end: usize| {
            found(
                (e & OFFSET_MASK) as usize,
                e & WHOLE != 0,
                e & DOLLAR != 0,
                end,
            )
        };
        // Every prefix starts with `/`, as every path does: start at octet 1.
        if path.first() != Some(&b'/') {
            return;
        }
        let (mut lo, mut hi, mut k) = (0, entries.len(), 1);
        loop {
            if hi - lo <= SMALL_RANGE {
                for pos in lo..hi {
                    let key = self.key(text, pos);
                    if key.len() <= path.len()
                        && key[k..] == path[k..key.len()]
                        && !report(entries[pos], key.len())
                    {
                        return;
                    }
                }
                return;
            }
            while lo < hi && self.key(text, lo).len() == k {
                if !report(entries[lo], k) {
                    return;
                }
                lo += 1;
            }
            if lo >= hi || k >= path.len() {
                return;
            }
            // Sorted: all of `lo..hi` share what the first and last prefixes
            // share; skip the part the path has too.
            let (first, last) = (self.key(text, lo), self.key(text, hi - 1));
            let shared = first[k..]
                .iter()
                .zip(&last[k..])
                .zip(&path[k..])
                .take_while(|((a, b), c)| a == b && a == c)
                .count();
            if shared > 0 {
                k += shared;
                continue;
            }
            // Every prefix left is longer than k, so octet k exists.
            let b = path[k];
            let octet = |e: u32| text[(e & OFFSET_MASK) as usize + k];
            let (first, last) = if hi - lo <= LINEAR_RANGE {
                // Counting costs more loads than a binary search, but they
                // do not wait on each other.
                let (mut below, mut upto) = (0, 0);
                for &e in &entries[lo..hi] {
                    let o = octet(e);
                    below += usize::from(o < b);
                    upto += usize::from(o <= b);
                }
                (lo + below, lo + upto)
            } else {
                let first = lo + entries[lo..hi].partition_point(|&e| octet(e) < b);
                (
                    first,
                    first + entries[first..hi].partition_point(|&e| octet(e) == b),
                )
            };
            lo = first;
            hi = last;
            k += 1;
        }
    }

    fn memory_usage(&self) -> usize {
        std::mem::size_of_val(&*self.entries) + std::mem::size_of_val(&*self.long)
    }
}

/// Literals and, for each, the rules reached through it.
#[derive(Clone, Debug)]
struct LiteralSet {
    nfa: contiguous::NFA,
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
    /// The rules reached through the set, ascending, each once.
    rules: Box<[u32]>,
}

impl LiteralSet {
    /// `None` for an empty set, or if the automaton cannot be built (then
    /// the caller gives up indexing and scans every rule).
    fn build(pairs: Vec<(&str, u32, u8)>) -> Result<Option<LiteralSet>, ()> {
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
        let mut rules = ids.clone();
        rules.sort_unstable();
        rules.dedup();
        let mut starts = [0u64; 4];
        for lit in &literals {
            if let Some(&b) = lit.as_bytes().first() {
                starts[(b >> 6) as usize] |= 1 << (b & 63);
            }
        }
        Ok(Some(LiteralSet {
            min_rule,
            rules: rules.into_boxed_slice(),
            nfa,
            starts,
            offsets: offsets.into_boxed_slice(),
            ids: ids.into_boxed_slice(),
            shapes: shapes.into_boxed_slice(),
            lens,
        }))
    }

    /// Calls `found` with each occurrence of a literal in `hay`: the
    /// literal's id and where the occurrence ends; `found` returns false to
    /// stop the scan.
    #[inline]
    fn scan(&self, hay: &[u8], found: &mut impl FnMut(&LiteralSet, usize, usize) -> bool) {
        let aut = &self.nfa;
        let Ok(start) = aut.start_state(Anchored::No) else {
            return;
        };
        let mut sid = start;
        let mut at = 0;
        while at < hay.len() {
            if sid == start {
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
            sid = aut.next_state(Anchored::No, sid, hay[at]);
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
        std::mem::size_of::<Self>()
            + self.nfa.memory_usage()
            + 4 * (self.offsets.len() + self.ids.len() + self.rules.len())
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
    /// Builds the index of `table`'s rules (in precedence order). `None` if
    /// an automaton cannot be built, in which case callers scan every rule.
    pub(crate) fn build(table: &Table) -> Option<Index> {
        let mut prefixes = Vec::new();
        let mut inner = Vec::new();
        let mut always = Vec::new();
        for i in 0..table.len() {
            let pat = table.pattern(i);
            let i = i as u32;
            let (body, anchored) = match pat.strip_suffix('$') {
                Some(body) => (body, true),
                None => (pat, false),
            };
            // `x*` and `x*$` match what `x` matches (`*/unanswered/*`).
            let (body, anchored) = match body.trim_end_matches('*') {
                trimmed if trimmed.len() < body.len() => (trimmed, false),
                _ => (body, anchored),
            };
            if pattern::literal_prefix(pat).len() >= 2 {
                prefixes.push(i);
                continue;
            }
            let lit = pattern::longest_literal(pat);
            if lit.len() >= 2 {
                let cut_lit = cut(lit);
                // `/*/about` or `*.pdf$`: a prefix of at most one octet,
                // one star, then the whole literal. Any occurrence that
                // starts after the prefix decides (ending the path, if `$`);
                // for a literal longer than the cut (`/*/followers`), one
                // where the rest of the literal follows.
                let shape = match body.strip_suffix(lit).and_then(|p| p.strip_suffix('*')) {
                    Some(p) if !p.contains('*') && lit.len() <= MAX_CUT_LITERAL => {
                        Shape::StarLiteral.pack(anchored, cut_lit != lit, p.len())
                    }
                    _ => Shape::Verify.pack(false, false, 0),
                };
                inner.push((cut_lit, i, shape));
            } else {
                always.push(Always::new(i, pat));
            }
        }
        let (prefixes, rest) = Prefixes::build(table, prefixes);
        if !rest.is_empty() {
            // Beyond an entry's offset range (not for files within the
            // size cap): tried directly, like the rules without a literal.
            always.extend(
                rest.into_iter()
                    .map(|i| Always::new(i, table.pattern(i as usize))),
            );
            always.sort_by_key(|a| a.rule);
        }
        Some(Index {
            prefixes,
            inner: LiteralSet::build(inner).ok()?.map(Box::new),
            always: always.into_boxed_slice(),
        })
    }

    /// The lowest index (highest precedence) of a rule in `table` that
    /// matches `path`.
    pub(crate) fn first_match(&self, table: &Table, path: &str) -> Option<usize> {
        let len = path.len();
        let mut best = usize::MAX;
        // Rules are compared by where their pattern starts, which orders
        // them as their indices do; the index is looked up only for a rule
        // that must be matched in full, and for the winner.
        let mut best_offset = usize::MAX;
        self.prefixes
            .scan(table, path.as_bytes(), &mut |offset, whole, dollar, end| {
                if offset < best_offset {
                    // `/admin/` or `/admin/$`: a path that starts with the whole
                    // literal (and ends there, for `$`) matches.
                    let hit = if whole {
                        !dollar || end == len
                    } else {
                        pattern::matches(table.pattern(table.rule_at(offset)), path)
                    };
                    if hit {
                        best_offset = offset;
                    }
                }
                best_offset != 0
            });
        if best_offset != usize::MAX {
            best = table.rule_at(best_offset);
        }
        if let Some(set) = &self.inner
            && (set.min_rule as usize) < best
        {
            let mut search = Search {
                table,
                path,
                best,
                tried: Tried::new(table.len()),
                cut_misses: 0,
                occurrences: 0,
                dense: false,
            };
            set.scan(path.as_bytes(), &mut |set, p, end| {
                search.on_literal(set, p, end)
            });
            if search.dense {
                search.match_each(set);
            }
            best = search.best;
        }
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
                if (!counted || a.possible(&counts)) && pattern::matches(table.pattern(i), path) {
                    best = i;
                    break;
                }
            }
        }
        (best != usize::MAX).then_some(best)
    }

    /// Heap bytes owned by the index.
    pub(crate) fn memory_usage(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.prefixes.memory_usage()
            + self.inner.as_ref().map_or(0, |s| s.memory_usage())
            + std::mem::size_of::<Always>() * self.always.len()
    }
}

/// The state of one [`Index::first_match`].
struct Search<'a> {
    table: &'a Table,
    path: &'a str,
    best: usize,
    tried: Tried,
    /// Occurrences of cut literals that did not decide their rule.
    cut_misses: u32,
    /// Occurrences of literals so far.
    occurrences: u32,
    /// The scan stopped on too many occurrences: see [`Search::on_literal`].
    dense: bool,
}

/// A path with more occurrences of a small set's literals than this
/// (`aaaaaaaa` at every octet of `/aaaa…`, `/a` in `/abc/abc/…`) has the
/// set's rules matched one by one instead: each match is one linear,
/// memchr-driven pass, cheaper than visiting every occurrence.
const DENSE_OCCURRENCES: u32 = 64;

/// See [`DENSE_OCCURRENCES`]: larger sets are always scanned.
const DENSE_MAX_RULES: usize = 64;

/// See [`Search::on_literal`].
const MAX_CUT_MISSES: u32 = 16;

impl Search<'_> {
    /// Tries the rules reached through an occurrence of literal `p` of
    /// `set`, ending at `end`, in precedence order, while they could beat
    /// the best so far; false once nothing can (the best is the first rule).
    #[inline]
    fn on_literal(&mut self, set: &LiteralSet, p: usize, end: usize) -> bool {
        self.occurrences += 1;
        if self.occurrences > DENSE_OCCURRENCES && set.rules.len() <= DENSE_MAX_RULES {
            self.dense = true;
            return false;
        }
        let start = end - set.lens[p] as usize;
        let (from, to) = (set.offsets[p] as usize, set.offsets[p + 1] as usize);
        let len = self.path.len();
        for (&i, &shape) in set.ids[from..to].iter().zip(&set.shapes[from..to]) {
            let i = i as usize;
            if i >= self.best {
                break;
            }
            let anchored_ok = shape & ANCHORED == 0 || end == len;
            let hit = match shape & (SHAPE | CUT) {
                // After a prefix of `shape >> 4` octets (`/` or nothing);
                // every path passed here starts with `/`.
                STAR_LITERAL => {
                    let plen = (shape >> 4) as usize;
                    start >= plen
                        && anchored_ok
                        && self.path.as_bytes()[..plen] == self.table.pattern(i).as_bytes()[..plen]
                }
                // The same with the whole literal: `/followers` must follow
                // where `/followe` was found. Every occurrence of the whole
                // literal is one of the cut literal, so this is exact. Past
                // a few misses in one path (`aaaaaaaa` in a run of `a`), each
                // rule is matched in full instead, once.
                s if s == STAR_LITERAL | CUT => {
                    if self.cut_misses < MAX_CUT_MISSES {
                        let hit = self.star_literal_at(i, shape, start, end);
                        self.cut_misses += u32::from(!hit);
                        hit
                    } else {
                        self.tried.insert(i) && pattern::matches(self.table.pattern(i), self.path)
                    }
                }
                // Each rule is matched in full once; later occurrences of
                // its literal cannot change that answer.
                _ => self.tried.insert(i) && pattern::matches(self.table.pattern(i), self.path),
            };
            if hit {
                self.best = i;
                break;
            }
        }
        self.best != 0
    }

    /// Matches the set's rules that could still beat the best so far, in
    /// precedence order, until one matches (after a scan stopped early).
    fn match_each(&mut self, set: &LiteralSet) {
        for &i in set.rules.iter() {
            let i = i as usize;
            if i >= self.best {
                break;
            }
            if self.tried.insert(i) && pattern::matches(self.table.pattern(i), self.path) {
                self.best = i;
                break;
            }
        }
    }

    /// True if rule `i`, of shape [`Shape::StarLiteral`] with a cut
    /// literal, matches with its literal at `start`, where its first
    /// `end - start` octets were found.
    #[inline]
    fn star_literal_at(&self, i: usize, shape: u8, start: usize, end: usize) -> bool {
        let path = self.path.as_bytes();
        let pat = self.table.pattern(i).as_bytes();
        let anchored = shape & ANCHORED != 0;
        // The pattern without its `$` and trailing stars (see `build`).
        let mut body = pat.strip_suffix(b"$").unwrap_or(pat);
        while let [rest @ .., b'*'] = body {
            body = rest;
        }
        let plen = (shape >> 4) as usize;
        // The rest of the literal, after the part found.
        let rest = &body[plen + 1 + (end - start)..];
        let tail = &path[end..];
        start >= plen
            && if anchored {
                tail.len() == rest.len()
            } else {
                tail.len() >= rest.len()
            }
            // A short compare, in place (no call).
            && rest.iter().zip(tail).all(|(a, b)| a == b)
            && path[..plen] == body[..plen]
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
