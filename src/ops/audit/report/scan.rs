//! Reading the fields a report needs from an audit line without the JSON
//! parser, for the lines as the proxy writes them: one compact flat
//! object (no whitespace), no escape and no control character anywhere,
//! valid UTF-8, known fields of the types [`Entry`] takes, other fields
//! strings, numbers, `true`, `false` or `null`. Anything else (escapes,
//! nesting, a repeated known field, a number where text is read, a
//! `changed` or `usage_evidence` list, trailing bytes...) is `None`, and
//! the caller parses the line with serde_json, so such a line reads
//! exactly as the parser reads it. A line this reads is one the parser
//! reads the same (tested against it on hostile lines).
//!
//! The caller gives the line as text: a line that is not UTF-8 goes to
//! the parser. Pure: no I/O, linear in the line, no allocation.

use std::borrow::Cow;

use super::Entry;

/// Where a text field's value is in its line; `NONE` when absent or null.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Span {
    from: u32,
    to: u32,
}

impl Span {
    const NONE: Span = Span {
        from: u32::MAX,
        to: u32::MAX,
    };
}

/// The text fields read, by their index in [`Fields::texts`].
const KIND: usize = 0;
const TIME: usize = 1;
const CLIENT: usize = 2;
const USER: usize = 3;
const URL: usize = 4;
const AGENT: usize = 5;
const DECISION: usize = 6;
const RULE: usize = 7;
const ROBOTS_SHA256: usize = 8;
const NODE: usize = 9;
const ACTION: usize = 10;
const BY: usize = 11;
const TARGET: usize = 12;
const SCOPE: usize = 13;
const OUTCOME: usize = 14;
const REASON: usize = 15;
const TEXTS: usize = 16;

/// A field of [`Entry`], by its JSON key.
#[derive(Clone, Copy)]
enum Key {
    Text(usize),
    RuleLine,
    Count,
    Changed,
    UsageEvidence,
    Other,
}

fn key(name: &[u8]) -> Key {
    match name {
        b"type" => Key::Text(KIND),
        b"time" => Key::Text(TIME),
        b"client" => Key::Text(CLIENT),
        b"user" => Key::Text(USER),
        b"url" => Key::Text(URL),
        b"agent" => Key::Text(AGENT),
        b"decision" => Key::Text(DECISION),
        b"rule" => Key::Text(RULE),
        b"robots_sha256" => Key::Text(ROBOTS_SHA256),
        b"node" => Key::Text(NODE),
        b"action" => Key::Text(ACTION),
        b"by" => Key::Text(BY),
        b"target" => Key::Text(TARGET),
        b"scope" => Key::Text(SCOPE),
        b"outcome" => Key::Text(OUTCOME),
        b"reason" => Key::Text(REASON),
        b"rule_line" => Key::RuleLine,
        b"count" => Key::Count,
        b"changed" => Key::Changed,
        b"usage_evidence" => Key::UsageEvidence,
        _ => Key::Other,
    }
}

/// The fields a report reads of one line, as places in the line.
#[derive(Clone, Copy)]
pub(super) struct Fields {
    texts: [Span; TEXTS],
    rule_line: Option<u64>,
    count: Option<u64>,
}

impl Fields {
    /// The fields of `line`, if it is of the form described above.
    pub(super) fn of(line: &str) -> Option<Fields> {
        let line = line.as_bytes();
        // No line this long is one the proxy writes; spans are u32.
        if line.len() >= u32::MAX as usize || !plain(line) {
            return None;
        }
        let mut f = Fields {
            texts: [Span::NONE; TEXTS],
            rule_line: None,
            count: None,
        };
        // Known fields seen, one bit each: a repeated one is an error to
        // the parser.
        let mut seen: u32 = 0;
        let mut at = 1;
        if *line.first()? != b'{' {
            return None;
        }
        if line.get(1) == Some(&b'}') {
            return (line.len() == 2).then_some(f);
        }
        loop {
            // "key":
            if line.get(at) != Some(&b'"') {
                return None;
            }
            let key_end = at + 1 + quote(line.get(at + 1..)?)?;
            let which = key(&line[at + 1..key_end]);
            if line.get(key_end + 1) != Some(&b':') {
                return None;
            }
            at = key_end + 2;
            let bit = match which {
                Key::Text(i) => 1 << i,
                Key::RuleLine => 1 << TEXTS,
                Key::Count => 1 << (TEXTS + 1),
                Key::Changed => 1 << (TEXTS + 2),
                Key::UsageEvidence | Key::Other => 0,
            };
            if seen & bit != 0 {
                return None;
            }
            seen |= bit;
            // The value.
            let first = *line.get(at)?;
            match (which, first) {
                (Key::UsageEvidence, _) => return None,
                (Key::Text(i), b'"') => {
                    let end = at + 1 + quote(line.get(at + 1..)?)?;
                    f.texts[i] = Span {
                        from: (at + 1) as u32,
                        to: end as u32,
                    };
                    at = end + 1;
                }
                (Key::Other, b'"') => {
                    at += 2 + quote(line.get(at + 1..)?)?;
                }
                (Key::RuleLine | Key::Count, b'0'..=b'9') => {
                    let (n, len) = unsigned(&line[at..])?;
                    match which {
                        Key::RuleLine => f.rule_line = Some(n),
                        _ => f.count = Some(n),
                    }
                    at += len;
                }
                (Key::Other, b'-' | b'0'..=b'9') => at += number(&line[at..])?,
                (_, b'n') => at += word(&line[at..], b"null")?,
                (Key::Other, b't') => at += word(&line[at..], b"true")?,
                (Key::Other, b'f') => at += word(&line[at..], b"false")?,
                _ => return None,
            }
            match line.get(at) {
                Some(b',') => at += 1,
                Some(b'}') if at + 1 == line.len() => return Some(f),
                _ => return None,
            }
        }
    }

    /// The entry of `line`, whose fields these are.
    pub(super) fn entry<'a>(&self, line: &'a str) -> Option<Entry<'a>> {
        let mut texts: [Option<Cow<'a, str>>; TEXTS] = Default::default();
        for (text, span) in texts.iter_mut().zip(&self.texts) {
            if *span != Span::NONE {
                *text = Some(Cow::Borrowed(
                    line.get(span.from as usize..span.to as usize)?,
                ));
            }
        }
        let mut take = |i: usize| texts[i].take();
        Some(Entry {
            kind: take(KIND),
            time: take(TIME),
            client: take(CLIENT),
            user: take(USER),
            url: take(URL),
            agent: take(AGENT),
            decision: take(DECISION),
            rule: take(RULE),
            rule_line: self.rule_line,
            robots_sha256: take(ROBOTS_SHA256),
            node: take(NODE),
            action: take(ACTION),
            by: take(BY),
            target: take(TARGET),
            scope: take(SCOPE),
            count: self.count,
            changed: None,
            outcome: take(OUTCOME),
            reason: take(REASON),
            usage_evidence: Vec::new(),
        })
    }
}

/// Each byte of a word.
const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit set in the bytes of `w` below `n` (at most 128): the
/// lowest set is exact, those above it may not be.
fn below(w: u64, n: u8) -> u64 {
    w.wrapping_sub(ONES * u64::from(n)) & !w & HIGHS
}

/// The bytes of `text` eight at a time, as little-endian words, and the
/// bytes left over.
fn words(text: &[u8]) -> (impl Iterator<Item = u64> + '_, &[u8]) {
    let chunks = text.chunks_exact(8);
    let rest = chunks.remainder();
    let words = chunks.map(|c| {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        u64::from_le_bytes(w)
    });
    (words, rest)
}

/// No control character and no backslash anywhere: then every string in
/// the line is its own text (no escape to undo, nothing the parser
/// refuses). Eight bytes at a time.
fn plain(line: &[u8]) -> bool {
    const BACKSLASH: u64 = ONES * b'\\' as u64;
    let (words, rest) = words(line);
    let odd = words.fold(0, |odd, w| odd | below(w, 0x20) | below(w ^ BACKSLASH, 1));
    odd == 0 && rest.iter().all(|&b| b >= 0x20 && b != b'\\')
}

/// Where the first `"` is in `text`. Eight bytes at a time.
fn quote(text: &[u8]) -> Option<usize> {
    const QUOTES: u64 = ONES * b'"' as u64;
    let (words, rest) = words(text);
    let mut at = 0;
    for w in words {
        let found = below(w ^ QUOTES, 1);
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    rest.iter().position(|&b| b == b'"').map(|i| at + i)
}

/// An unsigned integer as JSON writes it (no sign, fraction or exponent,
/// no leading zero) that fits a u64, and its length.
fn unsigned(text: &[u8]) -> Option<(u64, usize)> {
    let len = text.iter().take_while(|b| b.is_ascii_digit()).count();
    if len == 0 || (len > 1 && text[0] == b'0') {
        return None;
    }
    if matches!(text.get(len), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    let mut n: u64 = 0;
    for &d in &text[..len] {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some((n, len))
}

/// The length of the JSON number `text` begins with.
fn number(text: &[u8]) -> Option<usize> {
    let digits = |from: usize| {
        text[from..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let mut at = usize::from(text.first() == Some(&b'-'));
    let int = digits(at);
    if int == 0 || (int > 1 && text[at] == b'0') {
        return None;
    }
    at += int;
    if text.get(at) == Some(&b'.') {
        let frac = digits(at + 1);
        if frac == 0 {
            return None;
        }
        at += 1 + frac;
    }
    if matches!(text.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(text.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        let exp = digits(at);
        if exp == 0 {
            return None;
        }
        at += exp;
    }
    Some(at)
}

/// The length of `word` if `text` begins with it.
fn word(text: &[u8], word: &[u8]) -> Option<usize> {
    text.starts_with(word).then_some(word.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the parser makes of `line`, and what the scanner makes of it
    /// when it reads it at all.
    fn both(line: &[u8]) -> (Option<Entry<'_>>, Option<Entry<'_>>) {
        let parsed = serde_json::from_slice::<Entry<'_>>(line).ok();
        let scanned = std::str::from_utf8(line).ok().and_then(|text| {
            Fields::of(text).map(|f| f.entry(text).expect("the entry of its line"))
        });
        (parsed, scanned)
    }

    /// The scanner reads a line only as the parser does.
    fn agrees(line: &[u8]) -> bool {
        let (parsed, scanned) = both(line);
        match scanned {
            None => true,
            Some(s) => {
                assert_eq!(
                    parsed.as_ref(),
                    Some(&s),
                    "{}",
                    String::from_utf8_lossy(line)
                );
                true
            }
        }
    }

    #[test]
    fn the_lines_the_proxy_writes_are_read_as_the_parser_reads_them() {
        for line in [
            r#"{"seq":7,"time":"2026-11-22T01:00:00Z","client":"10.0.0.1:4711","method":"GET","url":"https://a.example/x","agent":"bot","decision":"disallowed","reason":"disallowed by line 2","rule_line":2,"rule":"Disallow: /x","fetch_status":200,"cache_age_secs":0,"robots_sha256":"ab","node":"n1","chain":"00"}"#,
            r#"{"seq":8,"time":"2026-11-22T01:00:00Z","url":"https://a.example/","decision":"allowed","rule_line":null,"rule":null,"paid":false,"tls":true,"ratio":-1.5e-3}"#,
            r#"{"seq":1,"type":"checkpoint","time":"2026-03-01T00:00:00.000Z","reason":"start","file_start":true,"head":"00"}"#,
            r#"{"type":"admin","time":"2026-11-22T01:00:00Z","action":"purge","by":"ops","target":"https://a.example/","scope":"origin","count":12,"changed":null,"outcome":"ok"}"#,
            r#"{"type":"evidence_removed","time":"t","node":"n","robots_sha256":"ab","reason":"age"}"#,
            r#"{"url":"https://ä.example/ü","agent":"bötchen 🤖"}"#,
            "{}",
        ] {
            let (parsed, scanned) = both(line.as_bytes());
            assert!(scanned.is_some(), "read by places: {line}");
            assert_eq!(parsed, scanned, "{line}");
        }
    }

    #[test]
    fn anything_else_is_left_to_the_parser() {
        for line in [
            // Escapes, in values and in keys.
            r#"{"url":"https://a.example/\"x"}"#,
            r#"{"url":"https://a.example/\\x"}"#,
            r#"{"url":"https://a.example/\u0041"}"#,
            r#"{"\u0074ype":"checkpoint"}"#,
            r#"{"other":"\n"}"#,
            // Nesting.
            r#"{"url":"u","extra":{"a":1}}"#,
            r#"{"url":"u","extra":[1,2]}"#,
            r#"{"url":"u","usage_evidence":["train-ai=tdmrep.json: x"]}"#,
            r#"{"url":"u","usage_evidence":null}"#,
            r#"{"type":"admin","changed":["a"]}"#,
            // A known field twice, or of another type.
            r#"{"url":"a","url":"b"}"#,
            r#"{"rule_line":1,"rule_line":2}"#,
            r#"{"url":1}"#,
            r#"{"url":true}"#,
            r#"{"rule_line":"2"}"#,
            r#"{"rule_line":2.0}"#,
            r#"{"rule_line":-2}"#,
            r#"{"rule_line":1e2}"#,
            r#"{"count":18446744073709551616}"#,
            r#"{"count":01}"#,
            // Not the proxy's compact form, or not JSON.
            r#"{ "url":"u"}"#,
            r#"{"url": "u"}"#,
            r#"{"url":"u"} "#,
            r#"{"url":"u"}x"#,
            r#"{"url":"u",}"#,
            r#"{"url":"u""#,
            r#"{"url":"u"#,
            r#"{"n":01}"#,
            r#"{"n":1.}"#,
            r#"{"n":1e}"#,
            r#"{"n":-}"#,
            r#"{"n":nul}"#,
            r#"{"n":tru}"#,
            r#"["url"]"#,
            "",
            "not json",
            "{\"url\":\"u\tv\"}",
        ] {
            assert!(Fields::of(line).is_none(), "left to the parser: {line}");
            agrees(line.as_bytes());
        }
        // Bytes that are not UTF-8 are not given to the scanner.
        agrees(b"{\"url\":\"\xff\"}");
        agrees(b"{\"other\":\"\xc3\"}");
    }

    #[test]
    fn quotes_and_odd_bytes_are_found_at_every_place_of_a_word() {
        for len in 0..24 {
            for at in 0..len {
                // Bytes that could carry a borrow: zero-ish, high, and
                // the byte just past the one sought.
                let mut text: Vec<u8> = (0..len).map(|i| [b'!', 0xc3, b'#', 0xff][i % 4]).collect();
                text[at] = b'"';
                if at + 1 < len {
                    text[at + 1] = b'"';
                }
                assert_eq!(quote(&text), Some(at), "{len} {at}");
                for odd in [0x00, 0x1f, b'\\'] {
                    let mut line = text.clone();
                    line[at] = odd;
                    assert!(!plain(&line), "{len} {at} {odd}");
                }
            }
            let clean: Vec<u8> = (0..len)
                .map(|i| [b' ', 0x80, b'~', 0xff, 0x7f][i % 5])
                .collect();
            assert_eq!(quote(&clean), None);
            assert!(plain(&clean));
        }
    }

    const TEXT_KEYS: [&str; 8] = [
        "\"type\"",
        "\"time\"",
        "\"url\"",
        "\"agent\"",
        "\"decision\"",
        "\"rule\"",
        "\"node\"",
        "\"reason\"",
    ];
    const NUMBER_KEYS: [&str; 2] = ["\"rule_line\"", "\"count\""];
    const OTHER_KEYS: [&str; 7] = [
        "\"seq\"",
        "\"x\"",
        "\"\\u0074ime\"",
        "\"tïme\"",
        "\"changed\"",
        "\"usage_evidence\"",
        "\"\"",
    ];
    const TEXT_VALUES: [&str; 12] = [
        "\"a\"",
        "\"\"",
        "\"https://a.example/p\"",
        "\"checkpoint\"",
        "\"admin\"",
        "\"blocked\"",
        "\"2026-11-22T01:00:00Z\"",
        "\"\\\"\"",
        "\"\\\\\"",
        "\"\\u0041\"",
        "\"\\ud83e\\udd16\"",
        "\"é🤖 \u{7f}\"",
    ];
    const NUMBERS: [&str; 10] = [
        "0",
        "7",
        "01",
        "-0",
        "-3",
        "2.5",
        "1e3",
        "18446744073709551615",
        "18446744073709551616",
        "null",
    ];
    const OTHERS: [&str; 6] = ["\"12\"", "true", "false", "[]", "[\"a\"]", "{\"a\":1}"];

    /// One `key:value` of an audit line: mostly of the types the report
    /// reads, sometimes not.
    fn piece() -> impl Strategy<Value = String> {
        let pick = |from: &[&'static str]| prop::sample::select(from.to_vec());
        let any_key = pick(&[&TEXT_KEYS[..], &NUMBER_KEYS, &OTHER_KEYS].concat());
        let any_value = pick(&[&TEXT_VALUES[..], &NUMBERS, &OTHERS].concat());
        prop_oneof![
            4 => (pick(&TEXT_KEYS), pick(&TEXT_VALUES)),
            2 => (pick(&NUMBER_KEYS), pick(&NUMBERS)),
            2 => (pick(&OTHER_KEYS), any_value.clone()),
            1 => (any_key, any_value),
        ]
        .prop_map(|(k, v)| format!("{k}:{v}"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5_000))]
        #[test]
        fn hostile_lines_read_as_the_parser_reads_them(
            pieces in prop::collection::vec(piece(), 0..6),
            glue in prop::sample::select(vec![",", ",", ",", ",", ", ", ":", ""]),
            open in prop::sample::select(vec!["{", "{", "{", "{", "[", " {", ""]),
            close in prop::sample::select(vec!["}", "}", "}", "}", "} ", "}}", "]", ""]),
            cut in any::<prop::sample::Index>(),
            flip in any::<Option<(prop::sample::Index, u8)>>(),
        ) {
            let mut line = format!("{open}{}{close}", pieces.join(glue)).into_bytes();
            prop_assert!(agrees(&line));
            if let Some((at, byte)) = flip {
                let i = at.index(line.len().max(1)).min(line.len().saturating_sub(1));
                if let Some(b) = line.get_mut(i) {
                    *b = byte;
                }
                prop_assert!(agrees(&line));
            }
            line.truncate(cut.index(line.len() + 1));
            prop_assert!(agrees(&line));
        }
    }
}
