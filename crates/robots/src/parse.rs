//! Reading robots.txt bytes into lines of (key, value), leniently.
//!
//! What is accepted, and why:
//! * a leading UTF-8 byte order mark is skipped; octets that are not valid
//!   UTF-8 are percent-encoded (`%E9`), never rejected;
//! * lines end at CR, LF or CRLF; input past [`MAX_BYTES`] is ignored, and a
//!   line cut by that limit is dropped rather than read half;
//! * `#` starts a comment; space and tab around keys and values are ignored;
//! * `key: value`, and also `key value` when the line is exactly two words
//!   (Google accepts the missing colon);
//! * keys are case-insensitive and the typos Google accepts are read as the
//!   key they misspell;
//! * lines longer than [`MAX_LINE`] bytes are cut there.

/// Content past this many bytes is ignored (RFC 9309 §2.5: at least 500 KiB).
pub const MAX_BYTES: usize = 500 * 1024;

/// Longest line kept, in bytes; the rest of a longer line is dropped.
/// Google's parser uses the same order of magnitude (8 × the 2083-byte URL
/// limit of old browsers).
pub(crate) const MAX_LINE: usize = 16 * 1024;

/// The keys robots-proxy understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Key {
    UserAgent,
    Allow,
    Disallow,
    Sitemap,
    CrawlDelay,
    /// `Content-Usage` (draft-ietf-aipref-attach).
    ContentUsage,
    /// `Content-Signal` (Cloudflare).
    ContentSignal,
    /// `License` (RSL 1.0): a licence document's URL, for every agent.
    License,
    Unknown,
}

impl Key {
    /// Classifies a key, case-insensitively, accepting Google's typos.
    pub(crate) fn classify(key: &str) -> Key {
        // Longest accepted key is 14 bytes; longer ones are unknown.
        if key.len() > 16 {
            return Key::Unknown;
        }
        let mut buf = [0u8; 16];
        let lower = &mut buf[..key.len()];
        lower.copy_from_slice(key.as_bytes());
        lower.make_ascii_lowercase();
        match &*lower {
            b"user-agent" | b"useragent" | b"user agent" | b"user_agent" => Key::UserAgent,
            b"allow" => Key::Allow,
            b"disallow" | b"dissallow" | b"dissalow" | b"disalow" | b"diasllow" | b"disallaw" => {
                Key::Disallow
            }
            b"sitemap" | b"site-map" => Key::Sitemap,
            b"crawl-delay" | b"crawldelay" | b"crawl delay" | b"crawl_delay" => Key::CrawlDelay,
            b"content-usage" => Key::ContentUsage,
            b"content-signal" => Key::ContentSignal,
            b"license" => Key::License,
            _ => Key::Unknown,
        }
    }
}

/// One meaningful line.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Line<'a> {
    /// 1-based line number in the file.
    pub(crate) number: u32,
    pub(crate) key: Key,
    pub(crate) value: &'a str,
}

/// Prepares raw bytes for [`lines`]: drops a BOM, applies [`MAX_BYTES`]
/// (dropping a line cut in the middle) and percent-encodes invalid UTF-8.
/// Returns the text and whether anything was cut off.
pub fn prepare(bytes: &[u8]) -> (std::borrow::Cow<'_, str>, bool) {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let truncated = bytes.len() > MAX_BYTES;
    let bytes = if truncated {
        let kept = &bytes[..MAX_BYTES];
        // Keep whole lines only: up to and including the last line break.
        match kept.iter().rposition(|&b| b == b'\n' || b == b'\r') {
            Some(i) => &kept[..=i],
            None => &[][..],
        }
    } else {
        bytes
    };
    (encode_invalid_utf8(bytes), truncated)
}

/// `bytes` as text, each octet that is not part of valid UTF-8
/// percent-encoded (`/caf\xE9` is `/caf%E9`), as Google's matcher reads a
/// Latin-1 file: a rule then matches the URL that carries the same octets
/// (`/caf%E9`), which a replacement character (`%EF%BF%BD`) never would.
fn encode_invalid_utf8(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(bytes.len() + 16);
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for &b in chunk.invalid() {
            super::normalize::push_enc(&mut out, b);
        }
    }
    std::borrow::Cow::Owned(out)
}

fn is_ws(c: char) -> bool {
    c == ' ' || c == '\t' || c == '\x0b' || c == '\x0c'
}

/// Splits one raw line into key and value; `None` for blank, comment-only
/// and unreadable lines.
pub(crate) fn split_line(raw: &str) -> Option<(&str, &str)> {
    let line = if raw.len() > MAX_LINE {
        let mut end = MAX_LINE;
        while !raw.is_char_boundary(end) {
            end -= 1;
        }
        &raw[..end]
    } else {
        raw
    };
    let line = match line.find('#') {
        Some(i) => &line[..i],
        None => line,
    };
    let line = line.trim_matches(is_ws);
    if line.is_empty() {
        return None;
    }
    if let Some(i) = line.find(':') {
        let key = line[..i].trim_matches(is_ws);
        let value = line[i + 1..].trim_matches(is_ws);
        return if key.is_empty() {
            None
        } else {
            Some((key, value))
        };
    }
    // No colon: accept `key value` if the line is exactly two words.
    let i = line.find(is_ws)?;
    let key = &line[..i];
    let value = line[i..].trim_start_matches(is_ws);
    if value.contains(is_ws) {
        None
    } else {
        Some((key, value))
    }
}

/// The meaningful lines of prepared text, with 1-based line numbers.
pub(crate) fn lines(text: &str) -> impl Iterator<Item = Line<'_>> {
    LineIter {
        rest: text,
        number: 0,
    }
    .filter_map(|(number, raw)| {
        let (key, value) = split_line(raw)?;
        Some(Line {
            number,
            key: Key::classify(key),
            value,
        })
    })
}

/// Every line of prepared text with its 1-based number, as [`lines`]
/// numbers them (blank and comment lines too): for showing a file with
/// its rules' line numbers.
pub fn raw_lines(text: &str) -> impl Iterator<Item = (u32, &str)> {
    LineIter {
        rest: text,
        number: 0,
    }
}

/// Raw lines split at CR, LF or CRLF.
struct LineIter<'a> {
    rest: &'a str,
    number: u32,
}

impl<'a> Iterator for LineIter<'a> {
    type Item = (u32, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        self.number = self.number.saturating_add(1);
        let bytes = self.rest.as_bytes();
        match memchr::memchr2(b'\n', b'\r', bytes) {
            Some(i) => {
                let line = &self.rest[..i];
                let skip = if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                self.rest = &self.rest[i + skip..];
                Some((self.number, line))
            }
            None => {
                let line = self.rest;
                self.rest = "";
                Some((self.number, line))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(text: &str) -> Vec<(u32, Key, &str)> {
        lines(text).map(|l| (l.number, l.key, l.value)).collect()
    }

    #[test]
    fn cr_lf_and_crlf_all_end_lines() {
        let got = collect("user-agent: a\rdisallow: /x\r\nallow: /y\ndisallow: /z");
        assert_eq!(
            got,
            vec![
                (1, Key::UserAgent, "a"),
                (2, Key::Disallow, "/x"),
                (3, Key::Allow, "/y"),
                (4, Key::Disallow, "/z"),
            ]
        );
    }

    #[test]
    fn comments_and_blank_lines_are_skipped_but_counted() {
        let got = collect("# hi\n\nuser-agent: a # trailing\n");
        assert_eq!(got, vec![(3, Key::UserAgent, "a")]);
    }

    #[test]
    fn missing_colon_is_accepted_for_two_words_only() {
        assert_eq!(split_line("disallow /x"), Some(("disallow", "/x")));
        assert_eq!(split_line("disallow /x /y"), None);
        assert_eq!(split_line("disallow"), None);
    }

    #[test]
    fn typos_google_accepts() {
        for k in [
            "dissallow",
            "dissalow",
            "disalow",
            "diasllow",
            "disallaw",
            "DISALLOW",
        ] {
            assert_eq!(Key::classify(k), Key::Disallow, "{k}");
        }
        for k in ["useragent", "user agent", "User-Agent"] {
            assert_eq!(Key::classify(k), Key::UserAgent, "{k}");
        }
        assert_eq!(Key::classify("Crawl-delay"), Key::CrawlDelay);
        assert_eq!(Key::classify("noindex"), Key::Unknown);
    }

    #[test]
    fn bom_is_skipped_and_invalid_utf8_percent_encoded() {
        let (text, cut) = prepare(b"\xEF\xBB\xBFuser-agent: a\n\xFF\xFEdisallow: /x\xE9\n");
        assert!(!cut);
        assert!(text.starts_with("user-agent"));
        assert!(text.contains("%FF%FEdisallow: /x%E9"), "{text}");
    }

    #[test]
    fn input_past_the_cap_is_ignored_whole_lines_only() {
        let mut big = Vec::new();
        while big.len() < MAX_BYTES - 5 {
            big.extend_from_slice(b"# padding padding padding\n");
        }
        big.truncate(MAX_BYTES - 5);
        big.extend_from_slice(b"\ndisallow: /cut-in-half\n");
        let (text, cut) = prepare(&big);
        assert!(cut);
        assert!(text.len() <= MAX_BYTES);
        assert!(!text.contains("disallow"));
    }

    #[test]
    fn over_long_line_is_cut() {
        let line = format!("disallow: /{}", "a".repeat(MAX_LINE * 2));
        let (_, v) = split_line(&line).expect("line is read");
        assert!(v.len() < MAX_LINE);
    }
}
