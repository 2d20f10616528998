//! The key that signs audit checkpoints: Ed25519, kept as a PKCS#8
//! `PRIVATE KEY` PEM file (mode 0600, in a directory created 0700),
//! generated on first start like the interception CA. A key made with
//! `openssl genpkey -algorithm ed25519` is read as well.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use ring::rand::SystemRandom;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};

/// The signing key.
pub(crate) struct SigningKey {
    pair: Ed25519KeyPair,
}

/// A key file that cannot be read, written or understood; names the file.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: {what}")]
    Bad { path: PathBuf, what: String },
}

const PEM_TAG: &str = "PRIVATE KEY";

impl SigningKey {
    /// Loads the key at `path`, or generates and writes one when there is
    /// no file there. The flag is true when a key was created.
    pub(crate) fn load_or_create(path: &Path) -> Result<(SigningKey, bool), KeyError> {
        let io = |source| KeyError::Io {
            path: path.to_owned(),
            source,
        };
        if path.try_exists().map_err(io)? {
            return Ok((SigningKey::load(path)?, false));
        }
        let rng = SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| KeyError::Bad {
            path: path.to_owned(),
            what: "cannot generate an Ed25519 key".into(),
        })?;
        let text = pem::encode(&pem::Pem::new(PEM_TAG, pkcs8.as_ref()));
        crate::http::files::write_atomically(path, text.as_bytes(), 0o600).map_err(io)?;
        Ok((SigningKey::load(path)?, true))
    }

    /// Loads the key at `path`.
    pub(crate) fn load(path: &Path) -> Result<SigningKey, KeyError> {
        let bad = |what: String| KeyError::Bad {
            path: path.to_owned(),
            what,
        };
        let text = fs::read(path).map_err(|source| KeyError::Io {
            path: path.to_owned(),
            source,
        })?;
        let block = pem::parse(&text).map_err(|e| bad(format!("not a PEM file: {e}")))?;
        if block.tag() != PEM_TAG {
            return Err(bad(format!(
                "a PEM block {:?}, expected \"{PEM_TAG}\" (PKCS#8 Ed25519)",
                block.tag()
            )));
        }
        let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(block.contents())
            .map_err(|e| bad(format!("not a PKCS#8 Ed25519 key: {e}")))?;
        Ok(SigningKey { pair })
    }

    /// The 32-byte public key.
    pub(crate) fn public(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out.copy_from_slice(self.pair.public_key().as_ref());
        out
    }

    /// The 64-byte signature of `message`.
    pub(crate) fn sign(&self, message: &[u8]) -> [u8; 64] {
        let mut out = [0u8; 64];
        out.copy_from_slice(self.pair.sign(message).as_ref());
        out
    }
}

/// Whether `sig` is `public`'s signature of `message`.
pub(crate) fn verifies(public: &[u8; 32], message: &[u8], sig: &[u8; 64]) -> bool {
    UnparsedPublicKey::new(&ED25519, public)
        .verify(message, sig)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_key_is_created_private_once_and_then_loaded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("audit-key").join("signing.pem");
        let (key, created) = SigningKey::load_or_create(&path).expect("created");
        assert!(created);
        let mode = |p: &Path| fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().expect("dir")), 0o700);
        let (again, created) = SigningKey::load_or_create(&path).expect("loaded");
        assert!(!created);
        assert_eq!(again.public(), key.public());
        let sig = key.sign(b"m");
        assert!(verifies(&again.public(), b"m", &sig));
        assert!(!verifies(&again.public(), b"n", &sig));
    }

    #[test]
    fn a_bad_key_file_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("k.pem");
        fs::write(&path, "not a key").expect("write");
        let err = SigningKey::load(&path).err().expect("refused").to_string();
        assert!(err.starts_with(&path.display().to_string()), "{err}");
        assert!(err.contains("not a PEM file"), "{err}");
        fs::write(&path, pem::encode(&pem::Pem::new(PEM_TAG, vec![1, 2, 3]))).expect("write");
        let err = SigningKey::load(&path).err().expect("refused").to_string();
        assert!(err.contains("not a PKCS#8 Ed25519 key"), "{err}");
    }
}
