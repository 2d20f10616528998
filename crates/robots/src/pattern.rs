//! Matching one normalised allow/disallow pattern against a normalised path.
//!
//! A pattern is a run of literal segments separated by `*`, optionally ending
//! in `$`. Because `*` is the only wildcard, the segments can be matched
//! greedily, each at its leftmost occurrence after the previous one: if any
//! placement matches, the leftmost one does too, and it leaves the most room
//! for the rest. With a final `$` the last segment must instead be a suffix
//! that starts after the previous segments. Each segment is searched once
//! from a position that only moves forward, so a match costs O(path + pattern)
//! whatever the number of stars: no backtracking blow-up on `/*a*a*a*a*b`.

use memchr::memmem;

/// True if `path` (normalised, starting with `/`) matches `pattern`
/// (normalised, as stored in a [`super::Rule`]).
pub fn matches(pattern: &str, path: &str) -> bool {
    let pattern = pattern.as_bytes();
    let path = path.as_bytes();
    let (pattern, anchored) = match pattern.split_last() {
        Some((b'$', rest)) => (rest, true),
        _ => (pattern, false),
    };
    let mut segments = pattern.split(|&b| b == b'*');
    // `split` always yields at least one (possibly empty) item.
    let first = segments.next().unwrap_or_default();
    if !path.starts_with(first) {
        return false;
    }
    let mut pos = first.len();
    let Some(mut current) = segments.next() else {
        return !anchored || pos == path.len();
    };
    // `current` follows a star; find every segment but the last leftmost.
    for next in segments {
        if !current.is_empty() {
            match find(&path[pos..], current) {
                Some(i) => pos += i + current.len(),
                None => return false,
            }
        }
        current = next;
    }
    if anchored {
        path.len() - pos >= current.len() && path.ends_with(current)
    } else {
        current.is_empty() || find(&path[pos..], current).is_some()
    }
}

/// The leftmost occurrence of `needle` in `hay`. Paths are short: for them
/// a `memchr` on the first octet and a compare beats setting up a `memmem`
/// searcher (and is bounded: at most 64 × 64 octet compares); long
/// haystacks get `memmem`'s linear-time search.
#[inline]
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let n = needle.len();
    match needle.first() {
        None => Some(0),
        Some(&b) if n == 1 => memchr::memchr(b, hay),
        Some(&b) if hay.len() <= 64 => {
            let last = hay.len().checked_sub(n)?;
            let mut i = 0;
            while i <= last {
                let k = i + memchr::memchr(b, &hay[i..=last])?;
                if &hay[k..k + n] == needle {
                    return Some(k);
                }
                i = k + 1;
            }
            None
        }
        Some(_) => memmem::find(hay, needle),
    }
}

/// The part of `pattern` before its first `*` (without a final `$`): every
/// matching path starts with it.
pub(crate) fn literal_prefix(pattern: &str) -> &str {
    let p = pattern.strip_suffix('$').unwrap_or(pattern);
    match p.find('*') {
        Some(i) => &p[..i],
        None => p,
    }
}

/// The longest literal segment of `pattern`: every matching path contains it.
pub(crate) fn longest_literal(pattern: &str) -> &str {
    let p = pattern.strip_suffix('$').unwrap_or(pattern);
    p.split('*').max_by_key(|s| s.len()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn prefix_match() {
        assert!(matches("/fish", "/fish"));
        assert!(matches("/fish", "/fish.html"));
        assert!(!matches("/fish", "/Fish.asp"));
        assert!(!matches("/fish", "/catfish"));
    }

    #[test]
    fn star_and_anchor() {
        assert!(matches("/*.php$", "/folder/filename.php"));
        assert!(!matches("/*.php$", "/filename.php?parameters"));
        assert!(matches("/fish*.php", "/fishheads/catfish.php?parameters"));
        assert!(matches("/$", "/"));
        assert!(!matches("/$", "/a"));
        assert!(matches("/*", "/anything"));
        assert!(matches("*", "/anything"));
    }

    #[test]
    fn anchored_suffix_must_not_overlap_earlier_segments() {
        // "/ab" then "b" must come after it: "/ab" alone is too short.
        assert!(!matches("/ab*b$", "/ab"));
        assert!(matches("/ab*b$", "/abb"));
        assert!(matches("/a*bc*c$", "/abcc"));
        assert!(!matches("/a*bc*c$", "/abc"));
    }

    #[test]
    fn adversarial_chain_is_linear() {
        let path = format!("/{}", "a".repeat(10_000));
        assert!(!matches("/*a*a*a*a*a*a*b", &path));
        assert!(matches("/*a*a*a*a*a*a$", &path));
    }
}
