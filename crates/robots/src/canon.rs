//! Readings: the ways an origin may read a request path, applied to the
//! path and to every rule pattern alike.
//!
//! A proxy forwards the request target as sent, but origins do not all read
//! it the same way: RFC 3986 servers remove dot-segments (`/a/../b` is
//! `/b`), nginx and Python's `http.server` also merge repeated slashes,
//! some servers decode `%2F` to `/` before resolving, Java servlet
//! containers drop `;parameters` from segments (`/..;/b` is `/b`), servers
//! that route with the WHATWG URL parser (Node's `new URL`, Deno, Bun) read
//! `\` as `/`, IIS also decodes `%5C` and drops a segment's trailing dots
//! and spaces (`/private./` is `/private/`), Python's `http.server` decodes
//! every escape (`/wiki/Special%3A` is `/wiki/Special:`), and applications
//! read a query's `%2F` and `/` alike. A rule that disallows a resource
//! must hold for every spelling that reaches it, so a compliance proxy
//! judges each reading and takes the strictest answer.
//!
//! A [`Reading`] is a function of a normalised path-and-query. Rules are
//! read too, but a reading of a rule may only carry it over to other
//! spellings of what it names, never widen it:
//!
//! * A `Disallow` is read by the reading's *decodings* alone
//!   ([`Reading::decode_pattern`]): an escape read as the octet it stands
//!   for (`%3A` as `:`, `%2F` and `%5C` as `/`, a query's delimiters),
//!   letters folded on case-insensitive origins. `Disallow:
//!   /wiki/Special%3A` and `Disallow: /wiki/Special:` both block
//!   `/wiki/Special%3ASearch`. The *removals* (dot-segments, doubled
//!   slashes, `;parameters`, a segment's trailing dots and spaces) are
//!   never applied to a `Disallow`: a rule that spells `//`, `;`, `.` or a
//!   trailing dot matches on those very characters, and removing them would
//!   make `Disallow: /*.$` (URLs ending in a dot) `/*$` (every URL),
//!   `Disallow: /;` `/` and `Disallow: //folder/` `/folder/`.
//! * An `Allow` is read in full ([`Reading::apply_pattern`]), so an `Allow`
//!   written in the very spelling of a request keeps allowing it in every
//!   reading (its image matches the path's image in full): without that, a
//!   reading could remove an explicit `Allow` (`Allow: /a;v=2` under
//!   `Disallow: /`, read on a server that drops `;v=2`). Reading an `Allow`
//!   can only make that reading's answer more permissive, never the answer
//!   for the path as sent.
//! * In every reading a rule keeps the precedence of its decoded spelling
//!   ([`Reading::decode_pattern`]'s length): removals do not make an
//!   `Allow` less specific than the `Disallow`s it beats as written.
//! * Only a rule's text before its first `*` is read as a path: what
//!   follows may match a query, so a `Disallow` is decoded there only
//!   where path and query read an escape alike (`Disallow: /*%26` stays
//!   about `%26`, which the decoded reading leaves in a query), and an
//!   `Allow` is read as the query is.
//!
//! Every reading is idempotent, keeps a path rooted and never above `/`,
//! and maps a string in normal form (see [`super::normalize`]) to one in
//! normal form. Pure functions, no I/O.

use std::borrow::Cow;

/// One way an origin may read a path. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reading {
    /// RFC 3986 §5.2.4: dot-segments removed, empty segments kept.
    Rfc3986,
    /// Empty and `.` segments dropped, `..` pops (nginx's `merge_slashes`,
    /// Python's `posixpath.normpath`).
    Merged,
    /// `%2F` decoded first, then as [`Reading::Rfc3986`].
    SlashDecoded,
    /// `%2F` decoded first, then as [`Reading::Merged`].
    SlashDecodedMerged,
    /// `%2F` decoded, `;parameters` dropped from every segment, merged.
    ParamsDropped,
    /// `;parameters` dropped from the path as sent, merged (Tomcat strips
    /// them before decoding, so `/admin;%2F../users` is `/admin/users`).
    ParamsDroppedFirst,
    /// `;parameters` dropped first, then `%2F` decoded, merged.
    ParamsDroppedThenDecoded,
    /// The WHATWG URL parser's (Node, Deno, Bun): `\` (normalised `%5C`) is
    /// `/`, then dot-segments removed.
    Backslash,
    /// IIS's: `%5C` and `%2F` are `/`, a segment's trailing dots and
    /// spaces are dropped (`/private./`, `/private%20/`), merged.
    Windows,
    /// Every reserved character decoded in the path (Python's
    /// `http.server`: `unquote`, then `normpath`), merged, and the query's
    /// delimiters decoded.
    Decoded,
    /// Every transform of the readings above at once: reserved characters
    /// and `%5C` decoded (`\` read as `/`), `;parameters` dropped, a
    /// segment's trailing dots and spaces dropped, merged; the query's
    /// delimiters decoded. For origins that stack them (a decoding proxy
    /// in front of Tomcat: `/public/..%3B/private/x`, `/public%5C..;/x`).
    Combined,
    /// An escaped percent sign decoded before the rest, at any depth
    /// (`%2570` is `%70`, that is `p`; `%255C` is `\`), then as
    /// [`Reading::Combined`]: origins that decode a path twice (a servlet
    /// that decodes `getRequestURI()` again, a proxy in front that decodes
    /// once, IIS's old `..%255c`). Rules are written with one level of
    /// encoding, so a rule is read as [`Reading::Combined`] reads it.
    DoubleDecoded,
    /// The path as sent, the query's delimiters (`%2F %3A %3F %40 %5B
    /// %5D`) decoded: applications read `?u=http%3A%2F%2Fx` as `?u=http://x`.
    QueryDecoded,
    /// ASCII letters of the path lower-cased: a case-insensitive origin.
    Folded,
    /// [`Reading::Windows`], then lower-cased: IIS on a case-insensitive
    /// file system.
    WindowsFolded,
    /// [`Reading::DoubleDecoded`], then lower-cased: every transform at
    /// once on a case-insensitive origin.
    CombinedFolded,
}

/// Every reading, in the order they are judged (RFC 3986 first).
pub const READINGS: [Reading; 16] = [
    Reading::Rfc3986,
    Reading::Merged,
    Reading::SlashDecoded,
    Reading::SlashDecodedMerged,
    Reading::ParamsDropped,
    Reading::ParamsDroppedFirst,
    Reading::ParamsDroppedThenDecoded,
    Reading::Backslash,
    Reading::Windows,
    Reading::Decoded,
    Reading::Combined,
    Reading::DoubleDecoded,
    Reading::QueryDecoded,
    Reading::Folded,
    Reading::WindowsFolded,
    Reading::CombinedFolded,
];

/// What one scan of a path (or pattern) found, so that readings that
/// cannot change it are skipped without building anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Traits(u16);

impl Traits {
    /// `//` or a `/.` in the path part: dot-segments or empty segments.
    const SEGMENTS: u16 = 1;
    /// `%2F` in the path part.
    const SLASH: u16 = 2;
    /// `;` in the path part.
    const PARAMS: u16 = 4;
    /// `%5C` in the path part.
    const BACKSLASH: u16 = 8;
    /// A segment ending in `.` or `%20`.
    const TRAILING: u16 = 16;
    /// An escape of a reserved character other than `%2F` in the path.
    const RESERVED: u16 = 32;
    /// An escaped delimiter in the query.
    const QUERY: u16 = 64;
    /// An upper-case ASCII letter in the path part.
    const UPPER: u16 = 128;
    /// An escaped percent sign (`%25`) in the path part.
    const DOUBLE: u16 = 256;

    /// One pass over `s` (a normalised path-and-query or pattern). Octets
    /// no trait depends on (most of a path: letters, digits) are skipped
    /// by one table look each.
    pub(crate) fn of(s: &str) -> Traits {
        let b = s.as_bytes();
        let mut t = 0u16;
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if !PATH_OCTETS[usize::from(c)] {
                i += 1;
                continue;
            }
            match c {
                b'?' => {
                    t |= Self::of_query(&b[i + 1..]);
                    break;
                }
                b'/' => {
                    if matches!(b.get(i + 1), Some(b'/' | b'.')) {
                        t |= Self::SEGMENTS;
                    }
                }
                b';' => t |= Self::PARAMS,
                b'.' => {
                    if matches!(b.get(i + 1), None | Some(b'/' | b'?' | b'$')) {
                        t |= Self::TRAILING;
                    }
                }
                b'A'..=b'Z' => t |= Self::UPPER,
                b'%' => match escaped(b, i) {
                    Some(b'/') => t |= Self::SLASH,
                    Some(b'\\') => t |= Self::BACKSLASH,
                    Some(b' ') => {
                        if matches!(b.get(i + 3), None | Some(b'/' | b'?' | b'$')) {
                            t |= Self::TRAILING;
                        }
                    }
                    Some(d) if PATH_RESERVED.contains(&d) => t |= Self::RESERVED,
                    Some(b'%') => t |= Self::DOUBLE,
                    _ => {}
                },
                _ => {}
            }
            i += 1;
        }
        Traits(t)
    }

    /// The query's part: an escaped delimiter.
    fn of_query(b: &[u8]) -> u16 {
        let escapes_delimiter = b.iter().enumerate().any(|(i, &c)| {
            c == b'%' && escaped(b, i).is_some_and(|d| QUERY_DELIMITERS.contains(&d))
        });
        if escapes_delimiter { Self::QUERY } else { 0 }
    }

    fn any(self, mask: u16) -> bool {
        self.0 & mask != 0
    }

    /// True if [`Reading::Decoded`] and [`Reading::QueryDecoded`] read a
    /// path of these traits alike (its path part has nothing the first
    /// decodes or resolves), so one's form serves for the other.
    pub(crate) fn decoded_as_query_decoded(self) -> bool {
        !self.any(Self::SEGMENTS | Self::SLASH | Self::RESERVED)
    }

    /// True if [`Reading::Combined`] reads a path of these traits as
    /// [`Reading::Decoded`] does: no reserved escape, parameter, backslash
    /// or trailing dot or space in its path part.
    pub(crate) fn combined_as_decoded(self) -> bool {
        !self.any(Self::SLASH | Self::RESERVED | Self::PARAMS | Self::BACKSLASH | Self::TRAILING)
    }

    /// True if the path has an escaped percent sign: without one,
    /// [`Reading::DoubleDecoded`] reads it (and every rule) as
    /// [`Reading::Combined`] does, so judging it again would change nothing.
    pub(crate) fn double_escaped(self) -> bool {
        self.any(Self::DOUBLE)
    }

    /// True unless `reading` certainly leaves a string of these traits as
    /// it is.
    pub(crate) fn may_change(self, reading: Reading) -> bool {
        self.any(Self::mask(reading))
    }

    /// The readings (bits in [`READINGS`] order) that may change a string
    /// of these traits, looked up per trait: none for most paths, which
    /// then cost no reading at all.
    pub(crate) fn readings(self) -> u16 {
        let mut bits = 0u16;
        let mut t = self.0;
        while t != 0 {
            bits |= READINGS_BY_TRAIT[t.trailing_zeros() as usize];
            t &= t - 1;
        }
        bits
    }

    /// The traits a change by `reading` needs.
    const fn mask(reading: Reading) -> u16 {
        use Reading::*;
        match reading {
            Rfc3986 | Merged => Self::SEGMENTS,
            SlashDecoded | SlashDecodedMerged => Self::SEGMENTS | Self::SLASH,
            ParamsDropped | ParamsDroppedFirst | ParamsDroppedThenDecoded => {
                Self::SEGMENTS | Self::SLASH | Self::PARAMS
            }
            Backslash => Self::SEGMENTS | Self::BACKSLASH,
            Windows => Self::SEGMENTS | Self::SLASH | Self::BACKSLASH | Self::TRAILING,
            Decoded => Self::SEGMENTS | Self::SLASH | Self::RESERVED | Self::QUERY,
            Combined => Self::COMBINED,
            // Rules are read as Combined reads them.
            DoubleDecoded => Self::COMBINED | Self::DOUBLE,
            QueryDecoded => Self::QUERY,
            Folded => Self::UPPER,
            WindowsFolded => {
                Self::SEGMENTS | Self::SLASH | Self::BACKSLASH | Self::TRAILING | Self::UPPER
            }
            CombinedFolded => Self::COMBINED | Self::DOUBLE | Self::UPPER,
        }
    }

    /// What [`Reading::Combined`] may change.
    const COMBINED: u16 = Self::SEGMENTS
        | Self::SLASH
        | Self::PARAMS
        | Self::BACKSLASH
        | Self::TRAILING
        | Self::RESERVED
        | Self::QUERY;
}

/// For each trait bit, the readings (bits in [`READINGS`] order) whose
/// [`Traits::mask`] holds it.
const READINGS_BY_TRAIT: [u16; 16] = {
    let mut table = [0u16; 16];
    let mut t = 0;
    while t < 16 {
        let mut k = 0;
        while k < READINGS.len() {
            if Traits::mask(READINGS[k]) & (1 << t) != 0 {
                table[t] |= 1 << k;
            }
            k += 1;
        }
        t += 1;
    }
    table
};

/// The bits (in [`READINGS`] order) of the case-folding readings.
pub(crate) const FOLDING_READINGS: u16 = {
    let mut bits = 0u16;
    let mut k = 0;
    while k < READINGS.len() {
        if READINGS[k].folds_case() {
            bits |= 1 << k;
        }
        k += 1;
    }
    bits
};

/// The bit (in [`READINGS`] order) of [`Reading::DoubleDecoded`].
pub(crate) const DOUBLE_DECODED: u16 = {
    let mut k = 0;
    while !matches!(READINGS[k], Reading::DoubleDecoded) {
        k += 1;
    }
    1 << k
};

/// The octet `%xx` at `b[i..]` stands for, if it is an escape.
fn escaped(b: &[u8], i: usize) -> Option<u8> {
    let h = (*b.get(i + 1)? as char).to_digit(16)?;
    let l = (*b.get(i + 2)? as char).to_digit(16)?;
    Some((h * 16 + l) as u8)
}

/// The octets of a path part that [`Traits::of`] looks at.
static PATH_OCTETS: [bool; 256] = {
    let mut t = [false; 256];
    t[b'?' as usize] = true;
    t[b'/' as usize] = true;
    t[b';' as usize] = true;
    t[b'.' as usize] = true;
    t[b'%' as usize] = true;
    let mut c = b'A';
    while c <= b'Z' {
        t[c as usize] = true;
        c += 1;
    }
    t
};

/// The general delimiters a query may carry either way.
const QUERY_DELIMITERS: [u8; 6] = [b'/', b':', b'?', b'@', b'[', b']'];

/// Reserved characters that [`Reading::Decoded`] decodes in a path (`%2F`
/// is the slash readings' and is decoded there too). Not `?` and `#`
/// (decoded, they would end the path), `*` and `$` (a URL's are always
/// encoded, so that only a rule's own are wildcards) or `%`.
const PATH_RESERVED: [u8; 13] = [
    b':', b'@', b'!', b'&', b'\'', b'(', b')', b'+', b',', b';', b'=', b'[', b']',
];

impl Reading {
    /// A short name, as `check` and the decision header print it.
    pub fn name(self) -> &'static str {
        use Reading::*;
        match self {
            Rfc3986 => "rfc3986",
            Merged => "merged",
            SlashDecoded => "slash-decoded",
            SlashDecodedMerged => "slash-decoded-merged",
            ParamsDropped => "params-dropped",
            ParamsDroppedFirst => "params-dropped-first",
            ParamsDroppedThenDecoded => "params-dropped-then-decoded",
            Backslash => "backslash",
            Windows => "windows",
            Decoded => "decoded",
            Combined => "combined",
            DoubleDecoded => "double-decoded",
            QueryDecoded => "query-decoded",
            Folded => "folded",
            WindowsFolded => "windows-folded",
            CombinedFolded => "combined-folded",
        }
    }

    /// True for the readings judged only on origins known to be
    /// case-insensitive.
    pub const fn folds_case(self) -> bool {
        matches!(
            self,
            Reading::Folded | Reading::WindowsFolded | Reading::CombinedFolded
        )
    }

    /// This reading of a normalised path-and-query (rooted).
    pub fn apply(self, path_and_query: &str) -> Cow<'_, str> {
        self.apply_with(path_and_query, true)
    }

    /// [`Reading::apply`]; `paths` false for a rule's text, which is
    /// written with one level of encoding (no escaped escape is decoded).
    fn apply_with(self, path_and_query: &str, paths: bool) -> Cow<'_, str> {
        let (path, query) = split_query(path_and_query);
        let query = self.apply_query(query);
        let path = self.apply_path(path, paths);
        if let (Cow::Borrowed(_), Cow::Borrowed(_)) = (&path, &query)
            && path.len() + query.len() == path_and_query.len()
        {
            return Cow::Borrowed(path_and_query);
        }
        Cow::Owned(format!("{path}{query}"))
    }

    /// This reading of a query (with its `?`): its delimiters decoded by
    /// the readings that decode, as it is otherwise.
    fn apply_query(self, query: &str) -> Cow<'_, str> {
        match self {
            Reading::Decoded
            | Reading::Combined
            | Reading::DoubleDecoded
            | Reading::QueryDecoded => decode_query_delimiters(query),
            _ => Cow::Borrowed(query),
        }
    }

    /// This reading of a normalised `Allow` pattern: a final `$` stays the
    /// anchor. What comes before the first `*` (it matches from the start
    /// of a path) is read as this reading reads a path; what follows is
    /// read as this reading reads a query, where an Allow's escapes after a
    /// `*` most often are; it is never resolved, trimmed or folded.
    pub fn apply_pattern(self, pattern: &str) -> Cow<'_, str> {
        self.read_pattern(pattern, true)
    }

    /// This reading's decodings of a normalised pattern, and nothing else:
    /// escapes read as the octets they stand for (`%3A` as `:`, `%2F` and
    /// `%5C` as `/`, a query's delimiters) and letters folded, as the
    /// reading does them; no segment is resolved, merged or trimmed and no
    /// parameter dropped. How a `Disallow` is read (see the module
    /// documentation): it names the same octets in another spelling and
    /// never more paths. After a `*` only the escapes the reading decodes
    /// in a path and in a query alike are decoded (`/ : @ [ ]`, for the
    /// readings that decode both): there the text may match either.
    pub fn decode_pattern(self, pattern: &str) -> Cow<'_, str> {
        self.read_pattern(pattern, false)
    }

    fn read_pattern(self, pattern: &str, full: bool) -> Cow<'_, str> {
        let (body, anchor) = split_anchor(pattern);
        let (head, tail) = body.split_at(body.find('*').unwrap_or(body.len()));
        // An Allow is read as the path it may be the spelling of (escaped
        // escapes too); a Disallow is written with one level of encoding.
        let head_read = if full && head.starts_with('/') {
            self.apply_with(head, true)
        } else {
            let (path, query) = split_query(head);
            let query = self.apply_query(query);
            let path = self.decode_only(path);
            match (path, query) {
                (Cow::Borrowed(_), Cow::Borrowed(_)) => Cow::Borrowed(head),
                (path, query) => Cow::Owned(format!("{path}{query}")),
            }
        };
        // After a `?` the tail is in the query; an Allow's escapes after a
        // `*` are most often a query's too (`*url=https%3A%2F%2F…`), so it
        // keeps allowing its own spelling there. A Disallow's may match
        // either: decoded only where both read an escape alike.
        let tail_read = if full || head.contains('?') {
            self.apply_query(tail)
        } else {
            self.decode_anywhere(tail)
        };
        if let (Cow::Borrowed(_), Cow::Borrowed(_)) = (&head_read, &tail_read) {
            return Cow::Borrowed(pattern);
        }
        let read = format!("{head_read}{tail_read}");
        if read == body {
            return Cow::Borrowed(pattern);
        }
        Cow::Owned(format!("{read}{anchor}"))
    }

    /// The decodings this reading applies in a path and in a query alike:
    /// for rule text that may match either.
    fn decode_anywhere(self, text: &str) -> Cow<'_, str> {
        use Reading::*;
        match self {
            Decoded | Combined | DoubleDecoded => decode(text, &DECODED_ANYWHERE),
            _ => Cow::Borrowed(text),
        }
    }

    /// The path part's reading (no query).
    fn apply_path(self, path: &str, paths: bool) -> Cow<'_, str> {
        use Reading::*;
        let read = match self {
            Rfc3986 => resolved(Cow::Borrowed(path), false),
            Merged => resolved(Cow::Borrowed(path), true),
            SlashDecoded => resolved(decode(path, b"/"), false),
            SlashDecodedMerged => resolved(decode(path, b"/"), true),
            ParamsDropped => resolved(Cow::Owned(drop_params(&decode(path, b"/"))), true),
            ParamsDroppedFirst => resolved(Cow::Owned(drop_params(path)), true),
            ParamsDroppedThenDecoded => resolved(
                Cow::Owned(decode(&drop_params(path), b"/").into_owned()),
                true,
            ),
            Backslash => resolved(backslashes(path), false),
            Windows => Cow::Owned(windows(path)),
            Decoded => resolved(decode(path, &DECODED), true),
            Combined => Cow::Owned(combined(path)),
            DoubleDecoded => Cow::Owned(combined(&undoubled(path, paths))),
            QueryDecoded => return Cow::Borrowed(path),
            Folded => return fold(path),
            WindowsFolded => Cow::Owned(fold(&windows(path)).into_owned()),
            CombinedFolded => Cow::Owned(fold(&combined(&undoubled(path, paths))).into_owned()),
        };
        match read {
            Cow::Owned(owned) if owned == path => Cow::Borrowed(path),
            read => read,
        }
    }

    /// The decoding and folding of this reading, without resolving
    /// segments (for patterns that do not start with `/`).
    fn decode_only(self, path: &str) -> Cow<'_, str> {
        use Reading::*;
        match self {
            SlashDecoded | SlashDecodedMerged | ParamsDropped | ParamsDroppedThenDecoded => {
                decode(path, b"/")
            }
            Backslash => backslashes(path),
            Windows => Cow::Owned(backslashes(&decode(path, b"/")).into_owned()),
            Decoded => decode(path, &DECODED),
            Combined | DoubleDecoded => {
                Cow::Owned(backslashes(&decode(path, &DECODED)).into_owned())
            }
            CombinedFolded => Cow::Owned(fold(&backslashes(&decode(path, &DECODED))).into_owned()),
            Folded => fold(path),
            WindowsFolded => Cow::Owned(fold(&backslashes(&decode(path, b"/"))).into_owned()),
            Rfc3986 | Merged | ParamsDroppedFirst | QueryDecoded => Cow::Borrowed(path),
        }
    }
}

/// `path` with its escaped escapes read ([`undouble`]) if it is a path
/// (`paths`), as it is if it is a rule's text.
fn undoubled(path: &str, paths: bool) -> Cow<'_, str> {
    if paths {
        Cow::Owned(undouble(path))
    } else {
        Cow::Borrowed(path)
    }
}

/// What [`Reading::Decoded`] decodes in a path: the reserved characters
/// and the slash.
const DECODED: [u8; 14] = [
    b'/', b':', b'@', b'!', b'&', b'\'', b'(', b')', b'+', b',', b';', b'=', b'[', b']',
];

/// What [`Reading::Decoded`] decodes in a path and in a query alike.
const DECODED_ANYWHERE: [u8; 5] = [b'/', b':', b'@', b'[', b']'];

/// Every transform at once ([`Reading::Combined`]): reserved characters
/// and `%5C` decoded, `\` as `/`, `;parameters` dropped, a segment's
/// trailing dots and spaces dropped, merged.
fn combined(path: &str) -> String {
    merge_segments(&trim_segments(&drop_params(&backslashes(&decode(
        path, &DECODED,
    )))))
}

/// Splits a pattern into its body and its final `$` anchor (or `""`).
fn split_anchor(pattern: &str) -> (&str, &str) {
    match pattern.strip_suffix('$') {
        Some(body) => (body, "$"),
        None => (pattern, ""),
    }
}

/// A path (in normal form) with every escaped escape read as that escape,
/// at any depth, as decoding it again and again would: `%2570` and
/// `%252570` are `%70`, which is `p`; `%25%2541` is `%25A`... One pass: each
/// octet is appended, then the tail is rewritten while it ends in `%25` and
/// two hex digits (an escaped escape: `%` and the digits, upper-cased) or
/// in the escape of an unreserved octet (that octet, as normal form has
/// it). Each rewrite shortens the output, so the pass is linear; its
/// result is in normal form and a second pass changes nothing.
fn undouble(path: &str) -> String {
    let hex = |b: u8| b.is_ascii_hexdigit();
    let mut out: Vec<u8> = Vec::with_capacity(path.len());
    for &c in path.as_bytes() {
        out.push(c);
        loop {
            let n = out.len();
            if n >= 5 && &out[n - 5..n - 2] == b"%25" && hex(out[n - 2]) && hex(out[n - 1]) {
                let (h, l) = (
                    out[n - 2].to_ascii_uppercase(),
                    out[n - 1].to_ascii_uppercase(),
                );
                out.truncate(n - 4);
                out.push(h);
                out.push(l);
                continue;
            }
            if n >= 3 && out[n - 3] == b'%' && hex(out[n - 2]) && hex(out[n - 1]) {
                let v = (char::from(out[n - 2]).to_digit(16).unwrap_or(0) * 16
                    + char::from(out[n - 1]).to_digit(16).unwrap_or(0))
                    as u8;
                if v.is_ascii_alphanumeric() || matches!(v, b'-' | b'.' | b'_' | b'~') {
                    out.truncate(n - 3);
                    out.push(v);
                    continue;
                }
            }
            break;
        }
    }
    // Only ASCII was rewritten; what was not ASCII is copied as it was.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Splits a request target into its path and its query (with the `?`).
fn split_query(path_and_query: &str) -> (&str, &str) {
    match path_and_query.bytes().position(|b| b == b'?') {
        Some(i) => path_and_query.split_at(i),
        None => (path_and_query, ""),
    }
}

/// `s` with the escapes of the octets in `set` decoded (either hex case).
fn decode<'a>(s: &'a str, set: &[u8]) -> Cow<'a, str> {
    let b = s.as_bytes();
    // The escapes of `set`, found by a vectorised search for `%`.
    let mut hits = memchr::memchr_iter(b'%', b)
        .filter_map(|i| escaped(b, i).filter(|d| set.contains(d)).map(|d| (i, d)));
    let Some((first, d)) = hits.next() else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len());
    out.push_str(&s[..first]);
    out.push(char::from(d));
    let mut start = first + 3;
    for (i, d) in hits {
        // Hex digits are never `%`: escapes do not overlap.
        debug_assert!(i >= start);
        out.push_str(&s[start..i]);
        out.push(char::from(d));
        start = i + 3;
    }
    out.push_str(&s[start..]);
    Cow::Owned(out)
}

/// `%5C` (either case) read as `/`: in normal form a `\` is always `%5C`.
fn backslashes(s: &str) -> Cow<'_, str> {
    match decode(s, b"\\") {
        Cow::Owned(decoded) => Cow::Owned(decoded.replace('\\', "/")),
        borrowed => borrowed,
    }
}

/// `query` (with its leading `?`) with `%2F %3A %3F %40 %5B %5D` decoded.
fn decode_query_delimiters(query: &str) -> Cow<'_, str> {
    decode(query, &QUERY_DELIMITERS)
}

/// ASCII letters lower-cased, escapes (`%C3`) left as they are so the
/// result stays in normal form (where a `%` always starts an escape).
fn fold(path: &str) -> Cow<'_, str> {
    if !path.bytes().any(|b| b.is_ascii_uppercase()) {
        return Cow::Borrowed(path);
    }
    let mut out = String::with_capacity(path.len());
    let mut escape = 0;
    for c in path.chars() {
        if escape > 0 {
            out.push(c);
            escape -= 1;
        } else {
            if c == '%' {
                escape = 2;
            }
            out.push(c.to_ascii_lowercase());
        }
    }
    Cow::Owned(out)
}

/// IIS's reading: `%5C` and `%2F` are slashes, a segment's trailing dots
/// and spaces are dropped (a segment of nothing else is `.`, except `..`),
/// merged.
fn windows(path: &str) -> String {
    merge_segments(&trim_segments(&backslashes(&decode(path, b"/"))))
}

fn trim_segment(segment: &str) -> &str {
    if segment == ".." || segment.is_empty() {
        return segment;
    }
    let mut s = segment;
    loop {
        if let Some(rest) = s.strip_suffix('.') {
            s = rest;
        } else if let Some(rest) = s.strip_suffix("%20") {
            s = rest;
        } else {
            break;
        }
    }
    if s.is_empty() { "." } else { s }
}

/// Every segment with its `;parameters` removed (`/a;x=1/b` is `/a/b`,
/// `/..;/b` is `/../b`).
fn drop_params(path: &str) -> String {
    map_segments(path, |segment| {
        segment.split(';').next().unwrap_or_default()
    })
}

/// A segment's trailing dots and spaces dropped, in every segment.
fn trim_segments(path: &str) -> String {
    map_segments(path, trim_segment)
}

/// `path` with `f` applied to each of its segments.
fn map_segments(path: &str, f: impl Fn(&str) -> &str) -> String {
    let mut out = String::with_capacity(path.len());
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        out.push_str(f(segment));
    }
    out
}

/// `path` with its segments resolved ([`merge_segments`] if `merge`, else
/// [`remove_dot_segments`]); as it is, without a copy, when it has no
/// empty, `.` or `..` segment (no `//` and no `/.`), which is most paths.
fn resolved(path: Cow<'_, str>, merge: bool) -> Cow<'_, str> {
    let b = path.as_bytes();
    if b.first() == Some(&b'/')
        && memchr::memmem::find(b, b"//").is_none()
        && memchr::memmem::find(b, b"/.").is_none()
    {
        return path;
    }
    Cow::Owned(if merge {
        merge_segments(&path)
    } else {
        remove_dot_segments(&path)
    })
}

/// RFC 3986 §5.2.4, for a path that starts with `/` (one that does not is
/// read from the root). Empty segments are kept; the result starts with `/`
/// and holds no `.` or `..` segment.
pub fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let mut segments = path.strip_prefix('/').unwrap_or(path).split('/').peekable();
    // A trailing `.` or `..` leaves a trailing slash (`/a/..` is `/`).
    let mut trailing_slash = false;
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        match segment {
            "." => trailing_slash = last,
            ".." => {
                out.pop();
                trailing_slash = last;
            }
            s => {
                out.push(s);
                trailing_slash = false;
            }
        }
    }
    join(&out, trailing_slash)
}

/// Like [`remove_dot_segments`], with empty segments dropped as well
/// (`/a//b/` is `/a/b/`): the reading of servers that merge slashes.
pub fn merge_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let ends_with_slash = path.ends_with('/');
    let mut trailing_slash = ends_with_slash;
    let mut segments = path.split('/').filter(|s| !s.is_empty()).peekable();
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        match segment {
            "." => trailing_slash = trailing_slash || last,
            ".." => {
                out.pop();
                trailing_slash = trailing_slash || last;
            }
            s => {
                out.push(s);
                if last {
                    trailing_slash = ends_with_slash;
                }
            }
        }
    }
    join(&out, trailing_slash && !out.is_empty())
}

fn join(segments: &[&str], trailing_slash: bool) -> String {
    let mut out = String::with_capacity(segments.iter().map(|s| s.len() + 1).sum::<usize>() + 1);
    for s in segments {
        out.push('/');
        out.push_str(s);
    }
    if trailing_slash || out.is_empty() {
        out.push('/');
    }
    out
}

/// The most resolved reading of a path: `%2F` decoded, parameters dropped,
/// slashes merged, dot-segments removed. Idempotent, and never above `/`.
pub fn canonical(path: &str) -> String {
    merge_segments(&drop_params(&decode(path, b"/")))
}

/// The readings of `path_and_query` (normalised) that differ from it,
/// each with its text, in [`READINGS`] order, without duplicates; the
/// case-folding ones only for a case-insensitive origin. Empty in the
/// common case, which costs one scan.
pub fn readings(path_and_query: &str, case_insensitive: bool) -> Vec<(Reading, String)> {
    let traits = Traits::of(path_and_query);
    let mut out: Vec<(Reading, String)> = Vec::new();
    for reading in READINGS {
        if (reading.folds_case() && !case_insensitive) || !traits.may_change(reading) {
            continue;
        }
        if let Cow::Owned(form) = reading.apply(path_and_query)
            && form != path_and_query
            && !out.iter().any(|(_, f)| *f == form)
        {
            out.push((reading, form));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3986_examples_of_dot_segment_removal() {
        // RFC 3986 §5.2.4 and §5.4 (paths only).
        assert_eq!(remove_dot_segments("/a/b/c/./../../g"), "/a/g");
        assert_eq!(remove_dot_segments("/mid/content=5/../6"), "/mid/6");
        assert_eq!(remove_dot_segments("/b/c/."), "/b/c/");
        assert_eq!(remove_dot_segments("/b/c/./"), "/b/c/");
        assert_eq!(remove_dot_segments("/b/c/.."), "/b/");
        assert_eq!(remove_dot_segments("/b/c/../"), "/b/");
        assert_eq!(remove_dot_segments("/b/c/../.."), "/");
        assert_eq!(remove_dot_segments("/../../g"), "/g");
        assert_eq!(remove_dot_segments("/b/c/g."), "/b/c/g.");
        assert_eq!(remove_dot_segments("/b/c/.g"), "/b/c/.g");
        assert_eq!(remove_dot_segments("/b/c/g.."), "/b/c/g..");
        assert_eq!(remove_dot_segments("/b/c/..g"), "/b/c/..g");
        assert_eq!(remove_dot_segments("/b/c/./../g"), "/b/g");
        assert_eq!(remove_dot_segments("/b/c/g/./h"), "/b/c/g/h");
        assert_eq!(remove_dot_segments("/b/c/g/../h"), "/b/c/h");
        assert_eq!(remove_dot_segments("/"), "/");
        assert_eq!(remove_dot_segments("//a"), "//a");
        assert_eq!(remove_dot_segments("/a//../b"), "/a/b");
    }

    #[test]
    fn merged_reading_drops_empty_segments() {
        assert_eq!(
            merge_segments("//private/secret.html"),
            "/private/secret.html"
        );
        assert_eq!(merge_segments("/a//../b"), "/b");
        assert_eq!(merge_segments("/admin//"), "/admin/");
        assert_eq!(merge_segments("/a/b/.."), "/a/");
        assert_eq!(merge_segments("/.."), "/");
        assert_eq!(merge_segments("/a/."), "/a/");
        assert_eq!(merge_segments("/a"), "/a");
        assert_eq!(merge_segments(""), "/");
    }

    fn forms(p: &str) -> Vec<String> {
        readings(p, false).into_iter().map(|(_, f)| f).collect()
    }

    #[test]
    fn bypass_spellings_resolve_to_the_disallowed_path() {
        // As normalisation leaves them: `%2e` is already `.`, `%2f` is
        // `%2F`, `\` is `%5C`.
        for (sent, resolved) in [
            ("/public/../private/secret.html", "/private/secret.html"),
            ("/./private/secret.html", "/private/secret.html"),
            ("//private/secret.html", "/private/secret.html"),
            ("/public/..%2Fprivate/secret.html", "/private/secret.html"),
            ("/%2Fprivate/secret.html", "/private/secret.html"),
            ("//admin/", "/admin/"),
            ("/admin%2F", "/admin/"),
            ("/public/..;/private/secret.html", "/private/secret.html"),
            ("/admin;%2F../users", "/admin/users"),
            ("/public%5C..%5Cprivate/x", "/private/x"),
            ("/public/..%5Cprivate/x", "/private/x"),
            ("/a%5C..%5C..%5Cprivate/x", "/private/x"),
            ("/private./x", "/private/x"),
            ("/private%20/x", "/private/x"),
            ("/private.%20./x", "/private/x"),
            ("/wiki/Special%3ASearch", "/wiki/Special:Search"),
            ("/%40admin", "/@admin"),
            ("/report%282024%29", "/report(2024)"),
        ] {
            assert!(
                forms(sent).iter().any(|f| f == resolved),
                "{sent}: {:?}",
                forms(sent)
            );
        }
    }

    #[test]
    fn case_is_folded_only_for_case_insensitive_origins() {
        assert!(forms("/PRIVATE/x").is_empty());
        let folded = readings("/PRIVATE./x%C3%A9", true);
        assert!(folded.contains(&(Reading::Folded, "/private./x%C3%A9".into())));
        assert!(folded.contains(&(Reading::WindowsFolded, "/private/x%C3%A9".into())));
    }

    #[test]
    fn queries_are_carried_over_and_decoded_not_resolved() {
        assert_eq!(forms("/a/../b?x=1"), vec!["/b?x=1".to_string()]);
        assert!(
            forms("/a?next=//b/../c")
                .iter()
                .all(|f| f.starts_with("/a?"))
        );
        assert_eq!(
            forms("/go?url=http%3A%2F%2Fevil.example"),
            vec!["/go?url=http://evil.example".to_string()]
        );
        // A query as written is its own decoded reading.
        assert!(forms("/n?next=/admin").is_empty());
        assert!(forms("/search?q=rust&page=2").is_empty());
        assert!(forms("/a?").is_empty());
    }

    #[test]
    fn patterns_are_read_as_paths_with_their_wildcards_kept() {
        let p = |r: Reading, s: &str| r.apply_pattern(s).into_owned();
        assert_eq!(p(Reading::Decoded, "/wiki/Special%3A"), "/wiki/Special:");
        assert_eq!(p(Reading::Decoded, "/a%3A*b$"), "/a:*b$");
        assert_eq!(
            p(Reading::QueryDecoded, "/n?next=%2Fadmin"),
            "/n?next=/admin"
        );
        assert_eq!(p(Reading::Rfc3986, "/a/../b*"), "/b*");
        assert_eq!(p(Reading::Merged, "/"), "/");
        assert_eq!(p(Reading::Merged, "/$"), "/$");
        // After a `*` an Allow is read as the query is, never resolved.
        assert_eq!(p(Reading::Windows, "*%5Cx"), "*%5Cx");
        assert_eq!(p(Reading::Folded, "*.PDF$"), "*.PDF$");
        assert_eq!(p(Reading::Rfc3986, "*/../x"), "*/../x");
        assert_eq!(p(Reading::Rfc3986, "/a/*/../b"), "/a/*/../b");
        assert_eq!(
            p(Reading::Decoded, "/redirect*url=https%3A%2F%2Fexample.com"),
            "/redirect*url=https://example.com"
        );
        assert_eq!(
            p(
                Reading::QueryDecoded,
                "/redirect*url=https%3A%2F%2Fexample.com"
            ),
            "/redirect*url=https://example.com"
        );
        // After a `?`, as the query is read.
        assert_eq!(p(Reading::QueryDecoded, "/a?*%3A"), "/a?*:");
        // A Disallow is decoded there only where path and query read alike.
        let d = |r: Reading, s: &str| r.decode_pattern(s).into_owned();
        assert_eq!(d(Reading::Decoded, "/*%26"), "/*%26");
        assert_eq!(d(Reading::Decoded, "/*%3D"), "/*%3D");
        assert_eq!(d(Reading::Decoded, "/x%26*%26"), "/x&*%26");
        assert_eq!(d(Reading::Decoded, "/*%3A"), "/*:");
        assert_eq!(d(Reading::Windows, "*%5Cx"), "*%5Cx");
        assert_eq!(d(Reading::Folded, "*.PDF$"), "*.PDF$");
    }

    #[test]
    fn an_escaped_escape_is_read_at_any_depth_in_one_pass() {
        for (sent, read) in [
            ("/%2570rivate", "/private"),
            ("/%252570rivate", "/private"),
            ("/%25%25413", "/%A3"),
            ("/%25%2541cc", "/%ACc"),
            ("/%2525%2532%2546", "/%2F"),
            ("/100%25", "/100%25"),
            ("/100%25x", "/100%25x"),
            ("/%25", "/%25"),
            ("/%252", "/%252"),
        ] {
            let once = undouble(sent);
            assert_eq!(once, read, "{sent}");
            assert_eq!(undouble(&once), once, "{sent}: idempotent");
        }
    }

    #[test]
    fn ordinary_paths_have_no_other_reading() {
        for p in [
            "/",
            "/index.html",
            "/a/b/c?d=e",
            "/.well-known/x",
            "/a.b/c",
            "/a%2Eb",
            "/caf%C3%A9",
            "/a?b=http://x/y",
        ] {
            assert!(forms(p).is_empty(), "{p}: {:?}", forms(p));
        }
    }

    #[test]
    fn the_readings_looked_up_per_trait_are_those_that_may_change() {
        for t in 0..(1u16 << 9) {
            let traits = Traits(t);
            for (k, reading) in READINGS.iter().enumerate() {
                assert_eq!(
                    traits.readings() & (1 << k) != 0,
                    traits.may_change(*reading),
                    "{t:#b} {reading:?}"
                );
            }
        }
        assert_eq!(FOLDING_READINGS.count_ones(), 3);
        assert_eq!(
            READINGS[DOUBLE_DECODED.trailing_zeros() as usize],
            Reading::DoubleDecoded
        );
    }

    #[test]
    fn canonical_examples() {
        assert_eq!(canonical("/public/..%2fprivate/"), "/private/");
        assert_eq!(canonical("/a;jsessionid=1/b"), "/a/b");
        assert_eq!(canonical("/../.."), "/");
    }
}
