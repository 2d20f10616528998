//! The paths an origin may resolve a request path to.
//!
//! A proxy forwards the request target as sent, but origins do not all read
//! it the same way: RFC 3986 servers remove dot-segments (`/a/../b` is
//! `/b`), nginx and Python's `http.server` also merge repeated slashes
//! (`//b` is `/b`), some servers decode `%2F` to `/` before resolving, and
//! Java servlet containers drop `;parameters` from segments (`/..;/b` is
//! `/b`). A rule that disallows `/b` must hold for every such spelling, so a
//! compliance proxy judges each reading and takes the strictest answer.
//!
//! Everything here works on the path part of a request target already
//! normalised by [`super::normalize`] (so `%2E` has become `.` and `%2f` is
//! `%2F`); a query is carried over unchanged. Pure functions, no I/O.

use std::borrow::Cow;

/// One way an origin may read a path; each is resolved (dot-segments
/// removed) after its own decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reading {
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
}

const READINGS: [Reading; 7] = [
    Reading::Rfc3986,
    Reading::Merged,
    Reading::SlashDecoded,
    Reading::SlashDecodedMerged,
    Reading::ParamsDropped,
    Reading::ParamsDroppedFirst,
    Reading::ParamsDroppedThenDecoded,
];

/// True if `path` (the path part only) could resolve to another path: it
/// holds `//`, a `.` segment candidate (`/.`), an encoded slash (`%2F`) or
/// a `;`. A single pass; false for almost every real request.
pub(crate) fn may_resolve_differently(path: &str) -> bool {
    // A plain loop: paths are short, and a memchr call costs more than it
    // saves on them.
    let b = path.as_bytes();
    b.iter().enumerate().any(|(i, &c)| match c {
        b'/' => matches!(b.get(i + 1), Some(b'/' | b'.')),
        b'%' => b.get(i + 1) == Some(&b'2') && matches!(b.get(i + 2), Some(b'F' | b'f')),
        b';' => true,
        _ => false,
    })
}

/// Splits a request target into its path and its query (with the `?`).
fn split_query(path_and_query: &str) -> (&str, &str) {
    match path_and_query.bytes().position(|b| b == b'?') {
        Some(i) => path_and_query.split_at(i),
        None => (path_and_query, ""),
    }
}

/// The readings of `path_and_query` that differ from it, without
/// duplicates, in a fixed order (RFC 3986 first): the path resolved in each
/// way an origin may resolve it, and the query with its delimiters
/// decoded or encoded (an application reads `?u=http%3A%2F%2Fx` and
/// `?u=http://x` alike, while matching compares them as written). Empty in
/// the common case, which costs one scan of the path and of the query.
pub fn resolved_forms(path_and_query: &str) -> Vec<String> {
    let (path, query) = split_query(path_and_query);
    let mut forms: Vec<String> = Vec::new();
    let mut add = |form: String| {
        if form != path_and_query && !forms.contains(&form) {
            forms.push(form);
        }
    };
    if may_resolve_differently(path) {
        for reading in READINGS {
            let mut form = resolve(path, reading);
            form.push_str(query);
            add(form);
        }
    }
    if query.len() > 1 {
        for form in [
            decode_query_delimiters(query),
            encode_query_delimiters(query),
        ] {
            if let Cow::Owned(q) = form {
                add(format!("{path}{q}"));
            }
        }
    }
    forms
}

/// The general delimiters a query may carry either way.
const QUERY_DELIMITERS: [(u8, &str); 6] = [
    (b'/', "%2F"),
    (b':', "%3A"),
    (b'?', "%3F"),
    (b'@', "%40"),
    (b'[', "%5B"),
    (b']', "%5D"),
];

/// `query` (with its leading `?`) with `%2F %3A %3F %40 %5B %5D` decoded.
fn decode_query_delimiters(query: &str) -> Cow<'_, str> {
    if !query.bytes().any(|b| b == b'%') {
        return Cow::Borrowed(query);
    }
    let b = query.as_bytes();
    let mut out = String::with_capacity(query.len());
    let (mut i, mut start) = (0, 0);
    while i < b.len() {
        let decoded = (b[i] == b'%')
            .then(|| {
                QUERY_DELIMITERS.iter().find(|(_, enc)| {
                    b.get(i..i + 3)
                        .is_some_and(|e| e.eq_ignore_ascii_case(enc.as_bytes()))
                })
            })
            .flatten();
        match decoded {
            Some((c, _)) => {
                out.push_str(&query[start..i]);
                out.push(char::from(*c));
                i += 3;
                start = i;
            }
            None => i += 1,
        }
    }
    if start == 0 {
        return Cow::Borrowed(query);
    }
    out.push_str(&query[start..]);
    Cow::Owned(out)
}

/// `query` (with its leading `?`) with its delimiters after the `?`
/// percent-encoded.
fn encode_query_delimiters(query: &str) -> Cow<'_, str> {
    let body = query.get(1..).unwrap_or_default();
    let delimiter = |b: u8| matches!(b, b'/' | b':' | b'?' | b'@' | b'[' | b']');
    if !body.bytes().any(delimiter) {
        return Cow::Borrowed(query);
    }
    let mut out = String::with_capacity(query.len() + 8);
    out.push('?');
    for c in body.chars() {
        match QUERY_DELIMITERS.iter().find(|(d, _)| char::from(*d) == c) {
            Some((_, enc)) => out.push_str(enc),
            None => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn resolve(path: &str, reading: Reading) -> String {
    match reading {
        Reading::Rfc3986 => remove_dot_segments(path),
        Reading::Merged => merge_segments(path),
        Reading::SlashDecoded => remove_dot_segments(&decode_slashes(path)),
        Reading::SlashDecodedMerged => merge_segments(&decode_slashes(path)),
        Reading::ParamsDropped => merge_segments(&drop_params(&decode_slashes(path))),
        Reading::ParamsDroppedFirst => merge_segments(&drop_params(path)),
        Reading::ParamsDroppedThenDecoded => merge_segments(&decode_slashes(&drop_params(path))),
    }
}

/// `%2F` (either case) decoded to `/`.
pub(crate) fn decode_slashes(path: &str) -> Cow<'_, str> {
    let b = path.as_bytes();
    let is_slash = |i: usize| {
        b.get(i) == Some(&b'%')
            && b.get(i + 1) == Some(&b'2')
            && matches!(b.get(i + 2), Some(b'F' | b'f'))
    };
    if !(0..b.len()).any(is_slash) {
        return Cow::Borrowed(path);
    }
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    let mut start = 0;
    while i < b.len() {
        if is_slash(i) {
            out.push_str(&path[start..i]);
            out.push('/');
            i += 3;
            start = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&path[start..]);
    Cow::Owned(out)
}

/// Every segment with its `;parameters` removed (`/a;x=1/b` is `/a/b`,
/// `/..;/b` is `/../b`).
fn drop_params(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        out.push_str(segment.split(';').next().unwrap_or_default());
    }
    out
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
    merge_segments(&drop_params(&decode_slashes(path)))
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
        resolved_forms(p)
    }

    #[test]
    fn bypass_spellings_resolve_to_the_disallowed_path() {
        // As normalisation leaves them: `%2e` is already `.`, `%2f` is `%2F`.
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
        ] {
            assert!(
                forms(sent).iter().any(|f| f == resolved),
                "{sent}: {:?}",
                forms(sent)
            );
        }
    }

    #[test]
    fn queries_are_carried_over_and_not_resolved() {
        assert_eq!(forms("/a/../b?x=1"), vec!["/b?x=1".to_string()]);
        assert!(
            forms("/a?next=//b/../c")
                .iter()
                .all(|f| f.starts_with("/a?"))
        );
    }

    #[test]
    fn query_delimiters_are_judged_decoded_and_encoded() {
        assert_eq!(
            forms("/go?url=http%3A%2F%2Fevil.example"),
            vec!["/go?url=http://evil.example".to_string()]
        );
        assert_eq!(
            forms("/n?next=/admin"),
            vec!["/n?next=%2Fadmin".to_string()]
        );
        assert!(forms("/search?q=rust&page=2").is_empty());
        assert!(forms("/a?").is_empty());
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
        ] {
            assert!(forms(p).iter().all(|f| f != p), "{p}");
        }
        assert!(!may_resolve_differently("/a/b-c.html"));
        assert!(may_resolve_differently("/a/./b"));
        assert!(forms("/a/b-c.html").is_empty());
    }

    #[test]
    fn canonical_examples() {
        assert_eq!(canonical("/public/..%2fprivate/"), "/private/");
        assert_eq!(canonical("/a;jsessionid=1/b"), "/a/b");
        assert_eq!(canonical("/../.."), "/");
    }
}
