//! HTTP Message Signatures (RFC 9421) as Web Bot Auth profiles them
//! (draft-ietf-webbotauth-httpsig-protocol): the signature base of a list
//! of covered components, the `Signature-Input`, `Signature` and
//! `Signature-Agent` members, and a label that no signature already on the
//! message uses. Only what the proxy signs is built here: Ed25519 over
//! derived components and dictionary members it writes itself.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::keys::SigningKey;

/// The signature parameters, in the order the draft's examples write them.
pub struct Params<'a> {
    pub created: u64,
    pub expires: u64,
    pub nonce: Option<&'a str>,
    pub tag: &'a str,
}

/// One covered component: its identifier as `Signature-Input` writes it
/// (`"@authority"`, `"signature-agent";key="sig1"`) and its value.
pub type Component<'a> = (&'a str, &'a str);

/// The `@signature-params` value: the inner list of identifiers, then
/// `created`, `keyid`, `alg`, `expires`, `nonce`, `tag`.
pub fn signature_params(components: &[Component<'_>], keyid: &str, p: &Params<'_>) -> String {
    let mut out = String::with_capacity(160);
    out.push('(');
    for (i, (id, _)) in components.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(id);
    }
    out.push(')');
    use std::fmt::Write;
    let _ = write!(
        out,
        ";created={};keyid=\"{keyid}\";alg=\"ed25519\";expires={}",
        p.created, p.expires
    );
    if let Some(nonce) = p.nonce {
        let _ = write!(out, ";nonce=\"{nonce}\"");
    }
    let _ = write!(out, ";tag=\"{}\"", p.tag);
    out
}

/// The signature base (RFC 9421 §2.5): one line per component, then the
/// `@signature-params` line, joined by LF with none after the last.
pub fn signature_base(components: &[Component<'_>], params: &str) -> String {
    let mut out = String::with_capacity(256);
    for (id, value) in components {
        out.push_str(id);
        out.push_str(": ");
        out.push_str(value);
        out.push('\n');
    }
    out.push_str("\"@signature-params\": ");
    out.push_str(params);
    out
}

/// A signature made: the `Signature-Input` and `Signature` members'
/// values (after `label=`).
pub struct Signed {
    pub input: String,
    pub signature: String,
}

/// Signs `components` with `key`.
pub fn sign(components: &[Component<'_>], key: &SigningKey, p: &Params<'_>) -> Signed {
    let input = signature_params(components, key.kid(), p);
    let base = signature_base(components, &input);
    let sig = key.sign(base.as_bytes());
    Signed {
        input,
        signature: format!(":{}:", STANDARD.encode(sig)),
    }
}

/// `value` as a Structured Field String (`"..."`, with `"` and `\`
/// escaped); `None` if it holds a character a String may not (controls,
/// non-ASCII).
pub fn sf_string(value: &str) -> Option<String> {
    if !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return None;
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Some(out)
}

/// The member keys of a Structured Field Dictionary as written (for the
/// labels already used on a message): each key starts the value or follows
/// a comma outside strings, byte sequences and inner lists. Linear in the
/// value; a malformed value gives what it gives, never a panic.
pub fn dictionary_keys(value: &str) -> Vec<&str> {
    let bytes = value.as_bytes();
    let mut keys = Vec::new();
    let (mut i, mut depth, mut at_key) = (0usize, 0usize, true);
    while i < bytes.len() {
        let b = bytes[i];
        if at_key {
            if b == b' ' || b == b'\t' {
                i += 1;
                continue;
            }
            let start = i;
            while i < bytes.len()
                && (bytes[i].is_ascii_lowercase()
                    || bytes[i].is_ascii_digit()
                    || matches!(bytes[i], b'_' | b'-' | b'.' | b'*'))
            {
                i += 1;
            }
            if i > start {
                keys.push(&value[start..i]);
            }
            at_key = false;
            continue;
        }
        match b {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b':' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b':' {
                    i += 1;
                }
            }
            b'(' => depth += 1,
            b')' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => at_key = true,
            _ => {}
        }
        i += 1;
    }
    keys
}

/// The first label of `sig1`, `sig2`, … that none of `taken` uses.
pub fn free_label(taken: &[&str]) -> String {
    (1..)
        .map(|n| format!("sig{n}"))
        .find(|l| !taken.contains(&l.as_str()))
        .unwrap_or_else(|| "robots-proxy".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::keys::KeyRing;

    /// draft-ietf-webbotauth-httpsig-protocol, "Test Vectors", Ed25519
    /// with a `Signature-Agent` (RFC 9421 B.1.4's key): the signature base
    /// byte for byte, and the signature (Ed25519 is deterministic).
    #[test]
    fn the_drafts_ed25519_vector_byte_for_byte() {
        let ring = KeyRing::parse(
            r#"{"keys":[{"kty":"OKP","crv":"Ed25519",
            "d":"n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU",
            "x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"}]}"#,
        )
        .expect("key");
        let key = ring.signing(1_735_689_600).expect("key");
        let nonce = "n9p433xm+NJ3ph3upfBIGmsuwHw387YV7Q/F+6BSpGCVjYCqQw6rznNA8PVVLySrAWsv0hQtFioQb6E1YsauiA==";
        let params = Params {
            created: 1_735_689_600,
            expires: 4_889_289_600,
            nonce: Some(nonce),
            tag: "web-bot-auth",
        };
        let components = [
            ("\"@authority\"", "example.com"),
            (
                "\"signature-agent\";key=\"agent2\"",
                "\"https://signature-agent.test\"",
            ),
        ];
        let input = signature_params(&components, key.kid(), &params);
        let base = signature_base(&components, &input);
        assert_eq!(
            base,
            "\"@authority\": example.com\n\
             \"signature-agent\";key=\"agent2\": \"https://signature-agent.test\"\n\
             \"@signature-params\": (\"@authority\" \"signature-agent\";key=\"agent2\")\
             ;created=1735689600;keyid=\"poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U\"\
             ;alg=\"ed25519\";expires=4889289600\
             ;nonce=\"n9p433xm+NJ3ph3upfBIGmsuwHw387YV7Q/F+6BSpGCVjYCqQw6rznNA8PVVLySrAWsv0hQtFioQb6E1YsauiA==\"\
             ;tag=\"web-bot-auth\""
        );
        let signed = sign(&components, key, &params);
        assert_eq!(format!("sig2={}", signed.input), format!("sig2={input}"));
        assert_eq!(
            signed.signature,
            ":RdNFx5Bj6au3YgAMQL/RzmUlZE8QZLIaXGRpw985hWnwPfMxT228NMk6ehRS1PSl4e8PhbNZACSanGdhEwYCCg==:"
        );
    }

    #[test]
    fn dictionary_keys_skip_strings_lists_and_byte_sequences() {
        let v = r#"sig1=("@authority" "a,b";key="x,y=z");created=1, web=:YSxi=:, x="q\",r=", last"#;
        assert_eq!(dictionary_keys(v), ["sig1", "web", "x", "last"]);
        assert_eq!(dictionary_keys(""), Vec::<&str>::new());
        assert_eq!(dictionary_keys("\"unterminated, a=1"), Vec::<&str>::new());
        assert_eq!(free_label(&["sig1", "sig2"]), "sig3");
    }

    #[test]
    fn sf_strings_escape_and_refuse_what_they_cannot_hold() {
        assert_eq!(
            sf_string("https://a.example/").as_deref(),
            Some("\"https://a.example/\"")
        );
        assert_eq!(sf_string("a\"b\\").as_deref(), Some(r#""a\"b\\""#));
        assert_eq!(sf_string("é"), None);
        assert_eq!(sf_string("a\nb"), None);
    }
}
