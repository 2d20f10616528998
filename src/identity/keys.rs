//! The Web Bot Auth signing keys: Ed25519 key pairs (through `ring`) kept
//! in a file as a JWK Set of private keys (RFC 8037), each with the time it
//! starts signing (`nbf`) and the time it leaves the directory (`exp`);
//! their RFC 7638 thumbprints, which are the `keyid` of every signature and
//! the `kid` of the directory.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{Ed25519KeyPair, KeyPair};
use serde::{Deserialize, Serialize};

/// A key file larger than this is refused (a handful of keys is a few
/// hundred bytes).
const MAX_FILE_BYTES: usize = 64 * 1024;
/// Keys one file may hold.
const MAX_KEYS: usize = 32;

/// A key file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

/// One private key as stored: an OKP JWK with its validity.
#[derive(Debug, Serialize, Deserialize)]
struct StoredKey {
    kty: String,
    crv: String,
    /// The 32-byte seed, base64url.
    d: String,
    /// The public key, base64url.
    x: String,
    /// Unix time from which it signs.
    #[serde(default)]
    nbf: u64,
    /// Unix time at which it leaves the directory; none: it stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    exp: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredSet {
    keys: Vec<StoredKey>,
}

/// One signing key.
pub struct SigningKey {
    pair: Ed25519KeyPair,
    /// The public key, base64url.
    x: String,
    /// Its RFC 7638 thumbprint, base64url.
    kid: String,
    nbf: u64,
    exp: Option<u64>,
}

impl SigningKey {
    /// The RFC 7638 thumbprint: the `keyid` it signs with.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// An Ed25519 signature of `message`.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.pair.sign(message).as_ref().to_vec()
    }

    /// Whether it is in the directory at `now`.
    fn listed(&self, now: u64) -> bool {
        self.exp.is_none_or(|exp| now < exp)
    }

    /// Its public JWK, as the directory lists it.
    pub fn public_jwk(&self) -> serde_json::Value {
        let mut jwk = serde_json::json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "kid": self.kid,
            "x": self.x,
            "use": "sig",
            "nbf": self.nbf,
        });
        if let (Some(exp), Some(obj)) = (self.exp, jwk.as_object_mut()) {
            obj.insert("exp".into(), exp.into());
        }
        jwk
    }
}

/// The RFC 7638 thumbprint of an Ed25519 public key (`x`, base64url):
/// SHA-256 of the required members in lexicographic order (RFC 8037 A.3).
pub fn thumbprint(x: &str) -> String {
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    let digest = ring::digest::digest(&ring::digest::SHA256, canonical.as_bytes());
    URL_SAFE_NO_PAD.encode(digest.as_ref())
}

/// The keys of a key file, oldest `nbf` first.
pub struct KeyRing {
    keys: Vec<SigningKey>,
}

impl KeyRing {
    /// Reads a key file.
    pub fn load(path: &std::path::Path) -> Result<KeyRing, KeyError> {
        let read = |source| KeyError::Read {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(read)?;
        if meta.len() > MAX_FILE_BYTES as u64 {
            return Err(KeyError::Invalid(format!(
                "{}: larger than {MAX_FILE_BYTES} bytes",
                path.display()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        KeyRing::parse(&text).map_err(|e| KeyError::Invalid(format!("{}: {e}", path.display())))
    }

    /// Parses a key file's text: `{"keys": [JWK, ...]}` of Ed25519 private
    /// keys.
    pub fn parse(text: &str) -> Result<KeyRing, String> {
        if text.len() > MAX_FILE_BYTES {
            return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
        }
        let set: StoredSet =
            serde_json::from_str(text).map_err(|e| format!("not a JWK Set of keys: {e}"))?;
        if set.keys.is_empty() {
            return Err("no key".into());
        }
        if set.keys.len() > MAX_KEYS {
            return Err(format!("more than {MAX_KEYS} keys"));
        }
        let mut keys = set
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| from_stored(k).map_err(|e| format!("key {}: {e}", i + 1)))
            .collect::<Result<Vec<_>, _>>()?;
        keys.sort_by_key(|k| k.nbf);
        Ok(KeyRing { keys })
    }

    /// The key that signs at `now`: the newest whose `nbf` has come and
    /// whose `exp` has not.
    pub fn signing(&self, now: u64) -> Option<&SigningKey> {
        self.keys
            .iter()
            .rev()
            .find(|k| k.nbf <= now && k.listed(now))
    }

    /// The keys the directory lists at `now`: all whose `exp` has not
    /// come (a key yet to sign is listed ahead of its use).
    pub fn listed(&self, now: u64) -> impl Iterator<Item = &SigningKey> {
        self.keys.iter().filter(move |k| k.listed(now))
    }
}

fn from_stored(k: &StoredKey) -> Result<SigningKey, String> {
    if k.kty != "OKP" || k.crv != "Ed25519" {
        return Err(format!(
            "kty {:?}, crv {:?}: only OKP Ed25519 keys sign",
            k.kty, k.crv
        ));
    }
    let seed = URL_SAFE_NO_PAD
        .decode(k.d.trim_end_matches('='))
        .map_err(|e| format!("d: {e}"))?;
    let public = URL_SAFE_NO_PAD
        .decode(k.x.trim_end_matches('='))
        .map_err(|e| format!("x: {e}"))?;
    let pair = Ed25519KeyPair::from_seed_and_public_key(&seed, &public)
        .map_err(|e| format!("d and x are not an Ed25519 key pair: {e}"))?;
    if k.exp.is_some_and(|exp| exp <= k.nbf) {
        return Err("exp is not after nbf".into());
    }
    let x = URL_SAFE_NO_PAD.encode(public);
    Ok(SigningKey {
        kid: thumbprint(&x),
        pair,
        x,
        nbf: k.nbf,
        exp: k.exp,
    })
}

/// The key file's text with a new key added: it signs from `nbf`, and
/// leaves the directory at `exp`. Keys of `existing` whose `exp` has passed
/// at `now` are dropped; the others are kept (the previous key stays listed
/// until its own `exp`).
pub fn add_key(
    existing: Option<&str>,
    now: u64,
    nbf: u64,
    exp: Option<u64>,
) -> Result<(String, String), String> {
    let mut set = match existing {
        Some(text) => {
            KeyRing::parse(text)?;
            serde_json::from_str::<StoredSet>(text).map_err(|e| e.to_string())?
        }
        None => StoredSet { keys: Vec::new() },
    };
    set.keys.retain(|k| k.exp.is_none_or(|exp| now < exp));
    if set.keys.len() >= MAX_KEYS {
        return Err(format!("the file already holds {MAX_KEYS} keys"));
    }
    let seed: [u8; 32] = ring::rand::generate(&ring::rand::SystemRandom::new())
        .map_err(|_| "the system's random generator failed".to_string())?
        .expose();
    let pair = Ed25519KeyPair::from_seed_unchecked(&seed)
        .map_err(|e| format!("cannot make a key: {e}"))?;
    let x = URL_SAFE_NO_PAD.encode(pair.public_key().as_ref());
    let kid = thumbprint(&x);
    set.keys.push(StoredKey {
        kty: "OKP".into(),
        crv: "Ed25519".into(),
        d: URL_SAFE_NO_PAD.encode(seed),
        x,
        nbf,
        exp,
    });
    let text = serde_json::to_string_pretty(&set).map_err(|e| e.to_string())?;
    Ok((text + "\n", kid))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 9421 Appendix B.1.4's test key.
    pub(crate) const RFC9421_ED25519: &str = r#"{"keys":[{"kty":"OKP","crv":"Ed25519",
        "d":"n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU",
        "x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"}]}"#;

    #[test]
    fn the_test_keys_thumbprint_is_the_drafts_keyid() {
        let ring = KeyRing::parse(RFC9421_ED25519).expect("key");
        let key = ring.signing(0).expect("signing key");
        // draft-ietf-webbotauth-httpsig-protocol's Ed25519 test vectors.
        assert_eq!(key.kid(), "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U");
    }

    #[test]
    fn the_newest_started_key_signs_and_expired_keys_leave_the_directory() {
        let (one, _) = add_key(None, 100, 100, Some(1000)).expect("first");
        let (two, kid2) = add_key(Some(&one), 200, 300, Some(2000)).expect("second");
        let ring = KeyRing::parse(&two).expect("two keys");
        let first = ring.signing(250).expect("first signs").kid().to_string();
        assert_ne!(first, kid2);
        assert_eq!(ring.signing(300).expect("second").kid(), kid2);
        assert_eq!(ring.listed(999).count(), 2);
        assert_eq!(ring.listed(1000).count(), 1);
        // Adding a third after the first's exp drops it from the file.
        let (three, _) = add_key(Some(&two), 1500, 1500, None).expect("third");
        assert_eq!(KeyRing::parse(&three).expect("ring").listed(0).count(), 2);
    }

    #[test]
    fn bad_key_files_are_clear_errors() {
        for (text, says) in [
            ("", "not a JWK Set"),
            (r#"{"keys":[]}"#, "no key"),
            (
                r#"{"keys":[{"kty":"RSA","crv":"x","d":"","x":""}]}"#,
                "only OKP Ed25519",
            ),
            (
                r#"{"keys":[{"kty":"OKP","crv":"Ed25519","d":"AAAA","x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"}]}"#,
                "not an Ed25519 key pair",
            ),
            (
                r#"{"keys":[{"kty":"OKP","crv":"Ed25519","d":"!","x":"x"}]}"#,
                "d:",
            ),
        ] {
            let e = KeyRing::parse(text).err().expect("refused");
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
