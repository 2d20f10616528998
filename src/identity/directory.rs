//! The key directory (`/.well-known/http-message-signatures-directory`):
//! the JWK Set of the keys listed now, served as
//! `application/http-message-signatures-directory+json` with a
//! `Content-Digest` and one signature per key over `@authority` (of the
//! request) and `content-digest`, tagged `http-message-signatures-directory`
//! (the draft's possession proof).

use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::{Signer, sign, unix};

/// The directory's path.
pub const PATH: &str = "/.well-known/http-message-signatures-directory";
/// Its media type.
pub const MEDIA_TYPE: &str = "application/http-message-signatures-directory+json";
/// The `tag` of its signatures.
pub const TAG: &str = "http-message-signatures-directory";

/// The directory as served: its body and the headers that go with it
/// (`Content-Digest`, `Signature-Input`, `Signature`).
pub struct Directory {
    pub body: String,
    pub content_digest: String,
    /// `None` when no key is listed.
    pub signature_input: Option<String>,
    pub signature: Option<String>,
}

/// The directory for a request to `authority`, at `now`, its signatures
/// valid for `valid`.
pub fn directory(signer: &Signer, authority: &str, now: SystemTime, valid: Duration) -> Directory {
    let now_s = unix(now);
    let keys: Vec<_> = signer.keys().listed(now_s).collect();
    let set =
        serde_json::json!({ "keys": keys.iter().map(|k| k.public_jwk()).collect::<Vec<_>>() });
    let body = format!("{set:#}\n");
    let digest = ring::digest::digest(&ring::digest::SHA256, body.as_bytes());
    let content_digest = format!("sha-256=:{}:", STANDARD.encode(digest.as_ref()));
    let (mut inputs, mut signatures) = (Vec::new(), Vec::new());
    for (i, key) in keys.iter().enumerate() {
        let components = [
            ("\"@authority\";req", authority),
            ("\"content-digest\"", content_digest.as_str()),
        ];
        let params = sign::Params {
            created: now_s,
            expires: now_s.saturating_add(valid.as_secs().max(1)),
            nonce: None,
            tag: TAG,
        };
        let signed = sign::sign(&components, key, &params);
        inputs.push(format!("binding{i}={}", signed.input));
        signatures.push(format!("binding{i}={}", signed.signature));
    }
    let join = |v: Vec<String>| (!v.is_empty()).then(|| v.join(", "));
    Directory {
        body,
        content_digest,
        signature_input: join(inputs),
        signature: join(signatures),
    }
}
