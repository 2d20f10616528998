//! Percent-encoding normalisation of URL paths and rule patterns (RFC 9309 §2.2.2).
//!
//! Both sides of a comparison go through the same function so that `/a%62c`,
//! `/abc` and a rule `Disallow: /ab%63` all compare equal:
//!
//! * `%xx` of an unreserved character (`A-Z a-z 0-9 - . _ ~`) is decoded;
//! * any other `%xx` is kept with its hex digits upper-cased (so `%2F` stays
//!   `%2F`: an encoded reserved character is data, not the delimiter, and
//!   RFC 3986 does not make the two equivalent);
//! * a `%` not followed by two hex digits is a literal percent sign: `%25`;
//! * octets outside printable US-ASCII, and characters that may not appear
//!   in a URI at all (space, `"`, `<`, `>`, `\`, `^`, backtick, `{`, `|`, `}`),
//!   are percent-encoded;
//! * `*` and `$` in a URL are encoded (`%2A`, `%24`) so that only a rule's own
//!   wildcards are special; in a pattern `*` stays a wildcard and a final `$`
//!   stays the anchor, any other `$` is encoded;
//! * everything else is kept as written, in the path and in the query alike:
//!   the general delimiters `: / ? # [ ] @` in a query are matched as they
//!   are, so `Disallow: /*/print` matches `/a?next=/b/print`.
//!
//! The RFC's example table shows `/foo/bar?baz=http://foo.bar` normalised to
//! `/foo/bar?baz=http%3A%2F%2Ffoo.bar`. That table is illustrative; this
//! module follows the reading of Google's matcher and the other widely used
//! parsers (texting_robots, Protego), which leave the query's delimiters as
//! written, so that a rule means here what it means to the crawlers that
//! site owners test against.

use std::borrow::Cow;

/// Which side of the comparison a string is on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Side {
    /// A URL's path and query, as requested.
    Url,
    /// An allow/disallow pattern from robots.txt.
    Pattern,
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// What to do with one literal (non-`%`) octet. The same in the path and
/// in the query.
#[inline]
const fn must_encode(b: u8, side: Side, is_last: bool) -> bool {
    match b {
        0..=0x20 | 0x7f..=0xff => true,
        b'"' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}' => true,
        b'*' => matches!(side, Side::Url),
        b'$' => matches!(side, Side::Url) || !is_last,
        _ => false,
    }
}

/// Octets that are copied as they are, with no further thought: not `%`,
/// not to be encoded, and (in patterns) not `$`, which is kept only as the
/// last octet.
const fn plain_table(side: Side) -> [bool; 256] {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c != b'%' && c != b'$' && !must_encode(c, side, false);
        b += 1;
    }
    t
}

static URL_PLAIN: [bool; 256] = plain_table(Side::Url);
static PATTERN_PLAIN: [bool; 256] = plain_table(Side::Pattern);

/// Where `s` stops being in normal form: the offset of the first octet that
/// the copying pass must change. `None` if `s` is already normal, so callers
/// can skip the copy.
#[inline]
fn first_change(s: &[u8], side: Side) -> Option<usize> {
    let plain = match side {
        Side::Url => &URL_PLAIN,
        Side::Pattern => &PATTERN_PLAIN,
    };
    let n = s.len();
    let mut i = 0;
    while i < n {
        // Most URLs are plain ASCII to the end: look at 16 octets at a
        // time, with no branch per octet.
        if let Some(chunk) = s.get(i..i + 16)
            && chunk.iter().fold(true, |ok, &b| ok & plain[b as usize])
        {
            i += 16;
            continue;
        }
        let stop = (i + 16).min(n);
        while i < stop {
            let b = s[i];
            if plain[b as usize] {
                i += 1;
                continue;
            }
            match b {
                b'%' if normal_escape(s, i) => i += 3,
                b'$' if side == Side::Pattern && i + 1 == n => i += 1,
                _ => return Some(i),
            }
        }
    }
    None
}

/// True if `s[i..]` starts with a `%xx` escape that normalisation keeps as
/// it is: upper-case hex digits of an octet that is not unreserved.
#[inline]
fn normal_escape(s: &[u8], i: usize) -> bool {
    match (s.get(i + 1).copied(), s.get(i + 2).copied()) {
        (Some(h), Some(l)) => match (hex_val(h), hex_val(l)) {
            (Some(hv), Some(lv)) => {
                !is_unreserved(hv * 16 + lv) && !h.is_ascii_lowercase() && !l.is_ascii_lowercase()
            }
            _ => false,
        },
        _ => false,
    }
}

/// Normalises `s` (a path with optional query, or a pattern) as described in
/// the module documentation. Borrows when nothing changes, which is the
/// common case.
pub fn normalize(s: &[u8], side: Side) -> Cow<'_, str> {
    match first_change(s, side) {
        None => match std::str::from_utf8(s) {
            // Normal form is pure ASCII, so this cannot fail.
            Ok(text) => Cow::Borrowed(text),
            Err(_) => {
                let mut out = String::with_capacity(s.len() + 8);
                normalize_from(s, side, 0, &mut out);
                Cow::Owned(out)
            }
        },
        Some(at) => {
            let mut out = String::with_capacity(s.len() + 16);
            // Everything before `at` is normal, hence ASCII.
            out.extend(s[..at].iter().map(|&b| b as char));
            normalize_from(s, side, at, &mut out);
            Cow::Owned(out)
        }
    }
}

/// Like [`normalize`], for text already known to be UTF-8: when nothing
/// changes (the common case) it costs one table-driven scan and no copy.
pub fn normalize_str(s: &str, side: Side) -> Cow<'_, str> {
    match first_change(s.as_bytes(), side) {
        None => Cow::Borrowed(s),
        Some(at) => {
            let mut out = String::with_capacity(s.len() + 16);
            // Everything before `at` is normal, hence ASCII.
            out.push_str(&s[..at]);
            normalize_from(s.as_bytes(), side, at, &mut out);
            Cow::Owned(out)
        }
    }
}

/// The copying pass, from offset `i`.
/// Appends `%XX` (upper-case hex) for the octet `b`.
pub(crate) fn push_enc(out: &mut String, b: u8) {
    out.push('%');
    out.push(HEX[(b >> 4) as usize] as char);
    out.push(HEX[(b & 15) as usize] as char);
}

fn normalize_from(s: &[u8], side: Side, mut i: usize, out: &mut String) {
    let n = s.len();
    while i < n {
        let b = s[i];
        if b == b'%' {
            let hv = s.get(i + 1).copied().and_then(hex_val);
            let lv = s.get(i + 2).copied().and_then(hex_val);
            if let (Some(hv), Some(lv)) = (hv, lv) {
                let v = hv * 16 + lv;
                if is_unreserved(v) {
                    out.push(v as char);
                } else {
                    push_enc(out, v);
                }
                i += 3;
            } else {
                push_enc(out, b'%');
                i += 1;
            }
            continue;
        }
        if must_encode(b, side, i + 1 == n) {
            push_enc(out, b);
        } else {
            out.push(b as char);
        }
        i += 1;
    }
}

/// The path-and-query part of a URL given as `https://host/a?b#f`, `/a?b` or
/// `` (empty means `/`). The fragment is dropped. A string that is neither an
/// absolute URL nor a path is read as a path relative to the root.
pub fn path_and_query(url: &str) -> &str {
    // `str::trim` is Unicode-aware and comparatively slow; most URLs need
    // no trimming, which one look at either end tells.
    let needs_trim = |b: &u8| *b <= b' ' || *b >= 0x80;
    let bytes = url.as_bytes();
    let url = if bytes.first().is_some_and(needs_trim) || bytes.last().is_some_and(needs_trim) {
        url.trim()
    } else {
        url
    };
    let bytes = url.as_bytes();
    // An absolute URL starts with a scheme (letters, digits, `+ - .`) and
    // `://`. Most are `https://` or `http://`; others are scanned by hand
    // (a scheme is a few octets).
    let after_scheme = if bytes.starts_with(b"https://") {
        Some(8)
    } else if bytes.starts_with(b"http://") {
        Some(7)
    } else {
        let scheme = bytes
            .iter()
            .position(|&b| !(b.is_ascii_alphanumeric() || b"+-.".contains(&b)))
            .unwrap_or(bytes.len());
        bytes[scheme..].starts_with(b"://").then_some(scheme + 3)
    };
    let rest = match after_scheme {
        None => url,
        Some(i) => {
            // The authority ends at the first `/`, `?` or `#` (or the end);
            // it is short, so a loop beats a search call.
            let host_end = bytes[i..]
                .iter()
                .position(|&b| matches!(b, b'/' | b'?' | b'#'))
                .map_or(bytes.len(), |k| i + k);
            &url[host_end..]
        }
    };
    // The fragment is dropped.
    let rest = match memchr::memchr(b'#', rest.as_bytes()) {
        Some(i) => &rest[..i],
        None => rest,
    };
    if rest.is_empty() {
        return "/";
    }
    // `http://host?q` has an empty path: the request path is `/`, the query
    // stays. Returned as `?q`; callers treat a leading `?` as `/?`.
    rest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> String {
        normalize(s.as_bytes(), Side::Url).into_owned()
    }
    fn pat(s: &str) -> String {
        normalize(s.as_bytes(), Side::Pattern).into_owned()
    }

    #[test]
    fn rfc_table_plain_path_is_unchanged() {
        assert_eq!(url("/foo/bar?baz=quz"), "/foo/bar?baz=quz");
    }

    /// The RFC's example table encodes these (`http%3A%2F%2Ffoo.bar`); the
    /// table is illustrative, and the project follows Google's matcher and
    /// the other peers, which match a query's delimiters as written.
    #[test]
    fn query_delimiters_are_matched_as_written_like_googles_matcher() {
        assert_eq!(
            url("/foo/bar?baz=http://foo.bar"),
            "/foo/bar?baz=http://foo.bar"
        );
        assert_eq!(url("/a?b=/c:d@e?f[g]"), "/a?b=/c:d@e?f[g]");
        assert_eq!(pat("/*?next=http://"), "/*?next=http://");
        // An encoded delimiter is not the delimiter: `%2F` stays `%2F`.
        assert_eq!(url("/a?b=%2Fc%3a"), "/a?b=%2Fc%3A");
        assert_eq!(pat("/a?b=%2fc"), "/a?b=%2Fc");
    }

    #[test]
    fn rfc_table_non_ascii_is_encoded() {
        assert_eq!(url("/foo/bar/\u{30c4}"), "/foo/bar/%E3%83%84");
    }

    #[test]
    fn rfc_table_encoded_non_ascii_is_kept() {
        assert_eq!(url("/foo/bar/%E3%83%84"), "/foo/bar/%E3%83%84");
        assert_eq!(url("/foo/bar/%e3%83%84"), "/foo/bar/%E3%83%84");
    }

    #[test]
    fn rfc_table_encoded_unreserved_is_decoded() {
        assert_eq!(url("/foo/bar/%62%61%7A"), "/foo/bar/baz");
    }

    #[test]
    fn wildcards_in_url_are_encoded_but_not_in_patterns() {
        assert_eq!(url("/a*b$"), "/a%2Ab%24");
        assert_eq!(pat("/a*b$"), "/a*b$");
        assert_eq!(pat("/a$b"), "/a%24b");
    }

    #[test]
    fn stray_percent_is_a_literal() {
        assert_eq!(url("/a%zz"), "/a%25zz");
        assert_eq!(url("/a%"), "/a%25");
        assert_eq!(url("/a%2"), "/a%252");
    }

    #[test]
    fn path_and_query_of_absolute_and_relative_urls() {
        assert_eq!(path_and_query("https://example.com/a?b#frag"), "/a?b");
        assert_eq!(path_and_query("http://example.com"), "/");
        assert_eq!(path_and_query("http://example.com?x=1"), "?x=1");
        assert_eq!(path_and_query("/a?b"), "/a?b");
        assert_eq!(path_and_query(""), "/");
        assert_eq!(path_and_query("/p#f"), "/p");
        assert_eq!(path_and_query("http://example.com#f/x?y"), "/");
        assert_eq!(path_and_query("https://example.com/a#b?c"), "/a");
        assert_eq!(path_and_query("HTTPS://example.com/a?b"), "/a?b");
        assert_eq!(path_and_query("ftp://example.com"), "/");
        assert_eq!(path_and_query("a#b://c/d"), "a");
        assert_eq!(path_and_query("#x"), "/");
    }
}
