//! The audit log's hash chain and its checkpoint signatures: the one
//! definition the writer and `robots-proxy audit verify` share.
//!
//! A line is a JSON object whose first field is `seq` (1, 2, 3, … over
//! every file the log was ever rotated into) and whose last field is
//! `chain`. Let B be the line's bytes without the `chain` field: the line
//! up to `,"chain":"` followed by `}` (a JSON object ending in `}`). Then
//!
//! ```text
//! chain = SHA-256(previous line's chain, as 32 raw bytes ‖ B)
//! line  = B with its final `}` replaced by `,"chain":"<64 lowercase hex>"}`, then `\n`
//! ```
//!
//! and the first line of a chain links to 32 zero bytes. A checkpoint
//! line (`"type":"checkpoint"`) may carry `sig`, the field just before
//! `chain`: let M be B without the `sig` field (B up to `,"sig":"`,
//! followed by `}`); then `sig` is the Ed25519 signature of M, as 128
//! lowercase hex digits. M holds the checkpoint's `head` (the previous
//! line's chain), so a signature vouches for every line before it.

use std::borrow::Cow;

use ring::digest;

/// The previous chain of a chain's first line.
pub(crate) const GENESIS: [u8; 32] = [0; 32];

const CHAIN_OPEN: &[u8] = b",\"chain\":\"";
const SIG_OPEN: &[u8] = b",\"sig\":\"";
/// `,"chain":"<64 hex>"}`.
const CHAIN_SUFFIX_LEN: usize = CHAIN_OPEN.len() + 64 + 2;
/// `,"sig":"<128 hex>"` (the `}` after it is the chain suffix's).
const SIG_FIELD_LEN: usize = SIG_OPEN.len() + 128 + 1;

/// The last line written: its `seq` and `chain` (`seq` 0 and
/// [`GENESIS`] before the first line of a chain).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) seq: u64,
    pub(crate) chain: [u8; 32],
}

impl Head {
    /// Before the first line of a chain.
    pub(crate) const GENESIS: Head = Head {
        seq: 0,
        chain: GENESIS,
    };
}

/// SHA-256(`prev` ‖ the concatenation of `parts`).
pub(crate) fn link(prev: &[u8; 32], parts: &[&[u8]]) -> [u8; 32] {
    let mut ctx = digest::Context::new(&digest::SHA256);
    ctx.update(prev);
    for part in parts {
        ctx.update(part);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// Seals the JSON object in `line[body_start..]` (B, ending in `}`):
/// replaces its final `}` with the `chain` field and a newline, and
/// returns the chain.
pub(crate) fn seal(line: &mut Vec<u8>, body_start: usize, prev: &[u8; 32]) -> [u8; 32] {
    let chain = link(prev, &[&line[body_start..]]);
    debug_assert_eq!(line.last(), Some(&b'}'));
    line.pop();
    line.extend_from_slice(CHAIN_OPEN);
    push_hex(line, &chain);
    line.extend_from_slice(b"\"}\n");
    chain
}

/// Adds the `sig` field to the JSON object `body` (M, ending in `}`),
/// turning it into B.
pub(crate) fn append_sig(body: &mut Vec<u8>, sig: &[u8]) {
    debug_assert_eq!(body.last(), Some(&b'}'));
    body.pop();
    body.extend_from_slice(SIG_OPEN);
    push_hex(body, sig);
    body.extend_from_slice(b"\"}");
}

/// A line (without its newline) split as the chain defines it.
#[derive(Debug)]
pub(crate) struct Sealed<'a> {
    /// B without its final `}`.
    open_body: &'a [u8],
    /// The `chain` the line carries.
    pub(crate) chain: [u8; 32],
}

impl<'a> Sealed<'a> {
    /// Splits a line ending in `,"chain":"<64 lowercase hex>"}`; `None`
    /// if it does not.
    pub(crate) fn split(line: &'a [u8]) -> Option<Sealed<'a>> {
        let at = line.len().checked_sub(CHAIN_SUFFIX_LEN)?;
        let suffix = &line[at..];
        if !suffix.starts_with(CHAIN_OPEN) || !suffix.ends_with(b"\"}") {
            return None;
        }
        let chain = parse_hex32(&suffix[CHAIN_OPEN.len()..CHAIN_OPEN.len() + 64])?;
        Some(Sealed {
            open_body: &line[..at],
            chain,
        })
    }

    /// The chain this line should carry after a line whose chain is `prev`.
    pub(crate) fn expected(&self, prev: &[u8; 32]) -> [u8; 32] {
        link(prev, &[self.open_body, b"}"])
    }

    /// The signed bytes M and the signature, when the line ends its body
    /// with a `sig` field in the form [`append_sig`] writes.
    pub(crate) fn signed(&self) -> Option<(Vec<u8>, [u8; 64])> {
        let at = self.open_body.len().checked_sub(SIG_FIELD_LEN)?;
        let field = &self.open_body[at..];
        if !field.starts_with(SIG_OPEN) || field.last() != Some(&b'"') {
            return None;
        }
        let sig = parse_hex(&field[SIG_OPEN.len()..SIG_OPEN.len() + 128])?;
        let mut message = Vec::with_capacity(at + 1);
        message.extend_from_slice(&self.open_body[..at]);
        message.push(b'}');
        let mut out = [0u8; 64];
        out.copy_from_slice(&sig);
        Some((message, out))
    }
}

pub(crate) use crate::http::text::{hex, push_hex};

/// Lowercase hex to bytes; `None` on an odd length or another character.
pub(crate) fn parse_hex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks_exact(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

/// 64 lowercase hex digits to 32 bytes.
pub(crate) fn parse_hex32(text: &[u8]) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    let mut bad = 0u8;
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        let (hi, lo) = (HEX[pair[0] as usize], HEX[pair[1] as usize]);
        bad |= hi | lo;
        *byte = hi << 4 | (lo & 0x0f);
    }
    (bad & 0xf0 == 0).then_some(out)
}

/// Each byte's value as a lowercase hex digit; 0xff for any other byte.
static HEX: [u8; 256] = {
    let mut table = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};

/// A lowercase hex digit's value.
fn digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// The fields of a line the verifier and the tail reader look at;
/// everything else is left to the bytes.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct ChainFields<'a> {
    pub(crate) seq: Option<u64>,
    #[serde(rename = "type", borrow, default)]
    pub(crate) kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) head: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) chain_start: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) sig: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(crate) chain: Option<Cow<'a, str>>,
}

impl ChainFields<'_> {
    pub(crate) fn is_checkpoint(&self) -> bool {
        self.kind.as_deref() == Some("checkpoint")
    }
}

impl<'a> ChainFields<'a> {
    /// The fields of a plain record's line read without a JSON parser:
    /// `{"seq":N,` first, the `chain` field last in the sealed form, no
    /// other `seq`, `chain`, `type`, `head`, `chain_start` or `sig` key
    /// and no escape anywhere (so that no key can be hidden). `None` when
    /// the line is not of that form: the parser reads it then. Its bytes
    /// are checked by its chain, not by a parse.
    pub(crate) fn plain(line: &'a [u8]) -> Option<ChainFields<'a>> {
        const SEQ: &[u8] = b"{\"seq\":";
        let rest = line.strip_prefix(SEQ)?;
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || digits > 20 || (digits > 1 && rest[0] == b'0') {
            return None;
        }
        if rest.get(digits) != Some(&b',') {
            return None;
        }
        let mut seq: u64 = 0;
        for &d in &rest[..digits] {
            seq = seq.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        }
        let at = line.len().checked_sub(CHAIN_SUFFIX_LEN)?;
        let middle = line.get(SEQ.len() + digits..at)?;
        let suffix = &line[at..];
        if !suffix.starts_with(CHAIN_OPEN) || !suffix.ends_with(b"\"}") {
            return None;
        }
        if memchr::memchr(b'\\', line).is_some() {
            return None;
        }
        const KEYS: [&[u8]; 6] = [
            b"\"seq",
            b"\"chain",
            b"\"type",
            b"\"head",
            b"\"chain_start",
            b"\"sig",
        ];
        static KEY_END: std::sync::OnceLock<memchr::memmem::Finder<'static>> =
            std::sync::OnceLock::new();
        let finder = KEY_END.get_or_init(|| memchr::memmem::Finder::new(b"\":"));
        for colon in finder.find_iter(middle) {
            let key = &middle[..colon];
            if KEYS.iter().any(|k| key.ends_with(k)) {
                return None;
            }
        }
        let chain = std::str::from_utf8(&suffix[CHAIN_OPEN.len()..CHAIN_OPEN.len() + 64]).ok()?;
        Some(ChainFields {
            seq: Some(seq),
            kind: None,
            head: None,
            chain_start: None,
            sig: None,
            chain: Some(Cow::Borrowed(chain)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_line_splits_back_into_its_body_and_chain() {
        let prev = [7u8; 32];
        let mut line = b"xx{\"seq\":3,\"url\":\"http://a/\"}".to_vec();
        let chain = seal(&mut line, 2, &prev);
        let text = std::str::from_utf8(&line).expect("utf-8");
        assert!(text.ends_with(&format!(",\"chain\":\"{}\"}}\n", hex(&chain))));
        let body = &line[2..line.len() - 1];
        let sealed = Sealed::split(body).expect("sealed form");
        assert_eq!(sealed.chain, chain);
        assert_eq!(sealed.expected(&prev), chain);
        assert_ne!(sealed.expected(&GENESIS), chain);
        serde_json::from_slice::<serde_json::Value>(body).expect("still JSON");
    }

    /// The definition, computed independently: `printf '%s' B` after 32
    /// zero bytes, through sha256sum.
    #[test]
    fn the_chain_is_sha256_of_the_previous_chain_and_the_line_without_it() {
        // (head -c 32 /dev/zero; printf '{"seq":1,"a":"b"}') | sha256sum
        let mut line = b"{\"seq\":1,\"a\":\"b\"}".to_vec();
        let chain = seal(&mut line, 0, &GENESIS);
        assert_eq!(
            hex(&chain),
            "431fc3ad4b6cf3a1b3c2f6315890c7988d7a60805d27b10cd1c0b4a95d02a211"
        );
    }

    #[test]
    fn a_signature_field_splits_off_the_signed_bytes() {
        let mut body = b"{\"seq\":1,\"type\":\"checkpoint\"}".to_vec();
        let signed = body.clone();
        append_sig(&mut body, &[0xab; 64]);
        let mut line = body.clone();
        seal(&mut line, 0, &GENESIS);
        let sealed = Sealed::split(&line[..line.len() - 1]).expect("sealed");
        let (message, sig) = sealed.signed().expect("signed");
        assert_eq!(message, signed);
        assert_eq!(sig, [0xab; 64]);
    }

    #[test]
    fn lines_not_in_the_sealed_form_are_refused() {
        assert!(Sealed::split(b"{\"seq\":1}").is_none());
        let upper = format!("{{\"seq\":1,\"chain\":\"{}\"}}", "A".repeat(64));
        assert!(Sealed::split(upper.as_bytes()).is_none());
        let short = format!("{{\"seq\":1,\"chain\":\"{}\"}}", "a".repeat(63));
        assert!(Sealed::split(short.as_bytes()).is_none());
    }

    #[test]
    fn a_plain_record_reads_without_the_parser_and_anything_else_is_left_to_it() {
        let sealed = |body: &str| {
            let mut line = body.as_bytes().to_vec();
            seal(&mut line, 0, &GENESIS);
            line.pop();
            line
        };
        let line = sealed("{\"seq\":42,\"url\":\"http://a/\",\"rule\":null}");
        let fast = ChainFields::plain(&line).expect("plain");
        let parsed: ChainFields<'_> = serde_json::from_slice(&line).expect("JSON");
        assert_eq!(fast.seq, parsed.seq);
        assert_eq!(fast.chain, parsed.chain);
        assert!(fast.kind.is_none() && fast.head.is_none() && fast.sig.is_none());
        for body in [
            "{\"seq\":1,\"type\":\"checkpoint\",\"head\":\"00\"}",
            "{\"seq\":1,\"x\":1,\"chain_start\":\"empty\"}",
            "{\"seq\":1,\"x\":1,\"seq\":2}",
            "{\"seq\":1,\"chain\":\"x\",\"y\":1}",
            "{\"seq\":1,\"sig\":\"00\"}",
            "{\"seq\":1,\"\\u0074ype\":\"checkpoint\"}",
            "{\"seq\":01,\"x\":1}",
            "{\"seq\":99999999999999999999,\"x\":1}",
            "{\"seq\":\"1\",\"x\":1}",
            "{\"x\":1,\"seq\":1}",
        ] {
            assert!(ChainFields::plain(&sealed(body)).is_none(), "{body}");
        }
        assert!(ChainFields::plain(b"{\"seq\":1,\"x\":1}").is_none());
    }

    #[test]
    fn hex_round_trips() {
        let bytes = [0u8, 1, 0x7f, 0x80, 0xff];
        assert_eq!(hex(&bytes), "00017f80ff");
        assert_eq!(parse_hex(b"00017f80ff"), Some(bytes.to_vec()));
        assert_eq!(parse_hex(b"0"), None);
        assert_eq!(parse_hex(b"zz"), None);
    }
}
