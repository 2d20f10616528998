//! Percent-encoding normalisation of URL paths and rule patterns (RFC 9309 §2.2.2).
//!
//! Both sides of a comparison go through the same function so that `/a%62c`,
//! `/abc` and a rule `Disallow: /ab%63` all compare equal:
//!
//! * `%xx` of an unreserved character (`A-Z a-z 0-9 - . _ ~`) is decoded;
//! * any other `%xx` is kept with its hex digits upper-cased;
//! * a `%` not followed by two hex digits is a literal percent sign: `%25`;
//! * octets outside printable US-ASCII, and characters that may not appear
//!   in a URI at all (space, `"`, `<`, `>`, `\`, `^`, backtick, `{`, `|`, `}`),
//!   are percent-encoded;
//! * `*` and `$` in a URL are encoded (`%2A`, `%24`) so that only a rule's own
//!   wildcards are special; in a pattern `*` stays a wildcard and a final `$`
//!   stays the anchor, any other `$` is encoded;
//! * in the query (after the first `?`) the general delimiters `: / ? # [ ] @`
//!   are encoded, which is what the RFC's example
//!   `/foo/bar?baz=http://foo.bar` → `/foo/bar?baz=http%3A%2F%2Ffoo.bar` shows.
//!   In the path they are structure and are kept.

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

/// What to do with one literal (non-`%`) octet.
#[inline]
fn must_encode(b: u8, side: Side, in_query: bool, is_last: bool) -> bool {
    match b {
        0..=0x20 | 0x7f..=0xff => true,
        b'"' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}' => true,
        b'*' => side == Side::Url,
        b'$' => side == Side::Url || !is_last,
        b':' | b'/' | b'?' | b'[' | b']' | b'@' | b'#' => in_query,
        _ => false,
    }
}

/// True if `s` is already in normal form, so callers can skip the copy.
fn is_normal(s: &[u8], side: Side) -> bool {
    let mut in_query = false;
    let n = s.len();
    let mut i = 0;
    while i < n {
        let b = s[i];
        if b == b'%' {
            match (s.get(i + 1).copied(), s.get(i + 2).copied()) {
                (Some(h), Some(l)) => match (hex_val(h), hex_val(l)) {
                    (Some(hv), Some(lv)) => {
                        if is_unreserved(hv * 16 + lv)
                            || h.is_ascii_lowercase()
                            || l.is_ascii_lowercase()
                        {
                            return false;
                        }
                        i += 3;
                        continue;
                    }
                    _ => return false,
                },
                _ => return false,
            }
        }
        if must_encode(b, side, in_query, i + 1 == n) {
            return false;
        }
        if b == b'?' {
            in_query = true;
        }
        i += 1;
    }
    true
}

/// Normalises `s` (a path with optional query, or a pattern) as described in
/// the module documentation. Borrows when nothing changes, which is the
/// common case.
pub fn normalize(s: &[u8], side: Side) -> Cow<'_, str> {
    if is_normal(s, side) {
        // Normal form is pure ASCII, so this cannot fail; fall through to the
        // copying path if it ever did.
        if let Ok(text) = std::str::from_utf8(s) {
            return Cow::Borrowed(text);
        }
    }
    let mut out = String::with_capacity(s.len() + 8);
    normalize_into(s, side, &mut out);
    Cow::Owned(out)
}

/// Like [`normalize`], appending into a caller-owned buffer (no allocation
/// once the buffer is warm).
pub fn normalize_into(s: &[u8], side: Side, out: &mut String) {
    fn push_enc(out: &mut String, b: u8) {
        out.push('%');
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
    let mut in_query = false;
    let n = s.len();
    let mut i = 0;
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
        if must_encode(b, side, in_query, i + 1 == n) {
            push_enc(out, b);
        } else {
            out.push(b as char);
        }
        if b == b'?' {
            in_query = true;
        }
        i += 1;
    }
}

/// The path-and-query part of a URL given as `https://host/a?b#f`, `/a?b` or
/// `` (empty means `/`). The fragment is dropped. A string that is neither an
/// absolute URL nor a path is read as a path relative to the root.
pub fn path_and_query(url: &str) -> &str {
    let url = url.trim();
    let url = match url.find('#') {
        Some(i) => &url[..i],
        None => url,
    };
    let rest = match url.find("://") {
        Some(i)
            if url[..i]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) =>
        {
            &url[i + 3..]
        }
        _ => return if url.is_empty() { "/" } else { url },
    };
    match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => &rest[i..],
        // `http://host?q` has an empty path: the request path is `/`, the
        // query stays. Returned as `?q`; callers treat a leading `?` as `/?`.
        Some(i) => &rest[i..],
        None => "/",
    }
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

    #[test]
    fn rfc_table_reserved_characters_in_query_are_encoded() {
        assert_eq!(
            url("/foo/bar?baz=http://foo.bar"),
            "/foo/bar?baz=http%3A%2F%2Ffoo.bar"
        );
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
    }
}
