//! Password hashes: Argon2id PHC strings (`$argon2id$v=19$m=...`), made by
//! [`hash_password`] (`robots-proxy hash-password`), parsed once per
//! reload and verified in memory the caller keeps.

/// Argon2 cost parameters for [`hash_password_with`].
pub use argon2::Params;
use argon2::password_hash::CustomizedPasswordHasher;
use argon2::password_hash::phc::{Output, PasswordHash, Salt};
use argon2::{Algorithm, Argon2, Block, Version};

use super::AuthError;

/// Argon2 verification of `password` against `hash` (whose algorithm,
/// version and cost are `settings`), in `memory` (grown as needed, kept by
/// the caller for the next one). The outputs are compared in constant time
/// (`Output`'s equality).
pub(super) fn verify(
    hash: &PasswordHash,
    settings: &(Algorithm, Version, Params),
    password: &str,
    memory: &mut Vec<Block>,
) -> bool {
    let (Some(salt), Some(expected)) = (&hash.salt, &hash.hash) else {
        return false;
    };
    let (algorithm, version, params) = settings.clone();
    let blocks = params.block_count();
    if memory.len() < blocks {
        memory.resize(blocks, Block::new());
    }
    let mut buffer = [0u8; Output::MAX_LENGTH];
    let Some(out) = buffer.get_mut(..expected.len()) else {
        return false;
    };
    let argon2 = Argon2::new(algorithm, version, params);
    if argon2
        .hash_password_into_with_memory(password.as_bytes(), salt, out, &mut memory[..blocks])
        .is_err()
    {
        return false;
    }
    Output::new(out).is_ok_and(|out| out == *expected)
}

pub(super) fn parse_hash(user: &str, s: &str) -> Result<PasswordHash, AuthError> {
    let bad = |reason: String| AuthError::BadHash {
        user: user.to_owned(),
        reason,
    };
    let hash = PasswordHash::new(s.trim()).map_err(|e| bad(e.to_string()))?;
    hash_settings(user, &hash)?;
    if hash.salt.is_none() || hash.hash.is_none() {
        return Err(bad("no salt or no hash output".to_owned()));
    }
    Ok(hash)
}

/// Algorithm, version and cost of a parsed hash, checked to be Argon2.
pub(super) fn hash_settings(
    user: &str,
    hash: &PasswordHash,
) -> Result<(Algorithm, Version, Params), AuthError> {
    let bad = |reason: String| AuthError::BadHash {
        user: user.to_owned(),
        reason,
    };
    let algorithm = Algorithm::try_from(hash.algorithm.as_str()).map_err(|e| bad(e.to_string()))?;
    let version = match hash.version {
        Some(v) => Version::try_from(v).map_err(|e| bad(e.to_string()))?,
        None => Version::default(),
    };
    let params = Params::try_from(hash).map_err(|e| bad(e.to_string()))?;
    Ok((algorithm, version, params))
}

/// Hashes a password for the config (`robots-proxy hash-password`):
/// Argon2id, v19, m=19 MiB, t=2, p=1 (the OWASP minimum), random salt.
pub fn hash_password(password: &str) -> Result<String, AuthError> {
    hash_password_with(password, Params::default())
}

/// [`hash_password`] with explicit cost parameters (tests use cheap ones).
pub fn hash_password_with(password: &str, params: Params) -> Result<String, AuthError> {
    let salt_bytes = argon2::password_hash::try_generate_salt().map_err(|_| AuthError::Random)?;
    let salt = Salt::new(&salt_bytes).map_err(|e| AuthError::Hash(e.to_string()))?;
    Argon2::default()
        .hash_password_customized(password.as_bytes(), salt.as_ref(), None, None, params)
        .map(|h| h.to_string())
        .map_err(|e| AuthError::Hash(e.to_string()))
}
