//! The proxy's own certificate authority.
//!
//! Clients that want their HTTPS traffic checked against robots.txt trust
//! this CA; the [`Minter`](super::Minter) signs a leaf certificate per host
//! with it. It lives as two PEM files in a state directory: `ca.pem` (public,
//! handed to clients) and `ca.key` (PKCS#8, mode 0600).

use std::fmt;
use std::fs;
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use ring::rand::SecureRandom;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use time::{Duration, OffsetDateTime};

use super::TlsError;

/// File name of the CA certificate inside the state directory.
pub const CERT_FILE: &str = "ca.pem";
/// File name of the CA private key inside the state directory.
pub const KEY_FILE: &str = "ca.key";

/// How long a freshly generated CA is valid.
const CA_VALIDITY: Duration = Duration::days(3650);
/// Certificates start this long in the past so that clients with a slightly
/// slow clock accept them.
pub(crate) const BACKDATE: Duration = Duration::days(1);

/// The proxy's certificate authority: a self-signed CA certificate and its key.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_der: CertificateDer<'static>,
    common_name: String,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
}

impl fmt::Debug for Ca {
    // Hand-written so that the key can never end up in a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ca")
            .field("common_name", &self.common_name)
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("fingerprint", &self.fingerprint_sha256())
            .finish_non_exhaustive()
    }
}

impl Ca {
    /// Generates a new ECDSA P-256 CA valid for about ten years.
    ///
    /// The common name carries a random suffix so that two installations
    /// are told apart in a client's trust store.
    pub fn generate() -> Result<Ca, TlsError> {
        let mut suffix = [0u8; 4];
        random_fill(&mut suffix)?;
        let common_name = format!("robots-proxy CA {}", hex(&suffix));

        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name.as_str());
        dn.push(DnType::OrganizationName, "robots-proxy");

        let now = whole_seconds(OffsetDateTime::now_utc());
        let mut params = CertificateParams::default();
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_before = now - BACKDATE;
        params.not_after = now + CA_VALIDITY;
        params.serial_number = Some(random_serial()?);

        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| TlsError::generate(&common_name, e))?;
        let cert = params
            .self_signed(&key)
            .map_err(|e| TlsError::generate(&common_name, e))?;
        Ok(Ca {
            cert_der: cert.der().clone(),
            common_name,
            not_before: params.not_before,
            not_after: params.not_after,
            issuer: Issuer::new(params, key),
        })
    }

    /// Writes `dir/ca.pem` and `dir/ca.key`, creating `dir` (mode 0700) if
    /// missing.
    ///
    /// Each file is written to a temporary name and renamed into place, and
    /// the key file is created with mode 0600, so the key is never readable
    /// by others, not even for a moment, and a crash never leaves half a file.
    pub fn write(&self, dir: &Path) -> Result<(), TlsError> {
        create_dir(dir)?;
        write_atomically(
            &dir.join(KEY_FILE),
            self.issuer.key().serialize_pem().as_bytes(),
            0o600,
        )?;
        write_atomically(&dir.join(CERT_FILE), self.cert_pem().as_bytes(), 0o644)
    }

    /// Loads `dir/ca.pem` and `dir/ca.key`, checking that the certificate is
    /// a CA, has not expired and belongs to the key.
    pub fn load(dir: &Path) -> Result<Ca, TlsError> {
        let cert_path = dir.join(CERT_FILE);
        let key_path = dir.join(KEY_FILE);
        let cert_pem = fs::read(&cert_path).map_err(|e| TlsError::io(&cert_path, e))?;
        let key_pem = fs::read(&key_path).map_err(|e| TlsError::io(&key_path, e))?;
        Ca::from_pem(&cert_pem, &key_pem, &cert_path, &key_path)
    }

    /// Loads the CA from `dir`, or generates and writes a new one when
    /// neither file exists. The flag is true when a CA was created.
    ///
    /// When only one of the two files exists this is an error rather than a
    /// silent regeneration: clients trust the old CA.
    pub fn load_or_create(dir: &Path) -> Result<(Ca, bool), TlsError> {
        let cert_path = dir.join(CERT_FILE);
        let key_path = dir.join(KEY_FILE);
        let exists = |p: &Path| p.try_exists().map_err(|e| TlsError::io(p, e));
        match (exists(&cert_path)?, exists(&key_path)?) {
            (true, true) => Ok((Ca::load(dir)?, false)),
            (false, false) => {
                let ca = Ca::generate()?;
                ca.write(dir)?;
                Ok((ca, true))
            }
            (true, false) => Err(TlsError::Incomplete {
                present: cert_path,
                missing: key_path,
            }),
            (false, true) => Err(TlsError::Incomplete {
                present: key_path,
                missing: cert_path,
            }),
        }
    }

    /// Builds a CA from PEM text; the paths are only used in error messages.
    pub fn from_pem(
        cert_pem: &[u8],
        key_pem: &[u8],
        cert_path: &Path,
        key_path: &Path,
    ) -> Result<Ca, TlsError> {
        let cert_der = CertificateDer::from_pem_slice(cert_pem).map_err(|e| TlsError::BadPem {
            path: cert_path.to_owned(),
            what: pem_error("certificate", "CERTIFICATE", e),
        })?;
        let key_der = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::BadPem {
            path: key_path.to_owned(),
            what: pem_error("private key", "PRIVATE KEY", e),
        })?;
        Ca::from_der(cert_der, &key_der, cert_path, key_path)
    }

    fn from_der(
        cert_der: CertificateDer<'static>,
        key_der: &PrivateKeyDer<'_>,
        cert_path: &Path,
        key_path: &Path,
    ) -> Result<Ca, TlsError> {
        let bad_ca = |reason: String| TlsError::BadCa {
            path: cert_path.to_owned(),
            reason,
        };
        let (_, x509) =
            x509_parser::parse_x509_certificate(&cert_der).map_err(|e| TlsError::BadPem {
                path: cert_path.to_owned(),
                what: format!("not a valid X.509 certificate: {e}"),
            })?;

        match x509.basic_constraints() {
            Ok(Some(bc)) if bc.value.ca => {}
            _ => {
                return Err(bad_ca(
                    "not a CA certificate (basicConstraints CA:TRUE is missing)".into(),
                ));
            }
        }
        let not_before = x509.validity().not_before.to_datetime();
        let not_after = x509.validity().not_after.to_datetime();
        if not_after <= OffsetDateTime::now_utc() {
            return Err(bad_ca(format!(
                "the CA certificate expired on {}; remove {CERT_FILE} and {KEY_FILE} to generate a new CA (clients will then have to trust the new one)",
                rfc3339(not_after)
            )));
        }
        // rcgen re-encodes the subject when signing and only supports one
        // attribute per RDN (it panics on an empty one): refuse such names
        // here so a hand-made CA gives an error, not a crash.
        if x509.subject().iter().any(|rdn| rdn.iter().count() != 1) {
            return Err(bad_ca(
                "subject name has multi-valued or empty RDNs, which are not supported".into(),
            ));
        }
        let common_name = x509
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .unwrap_or("")
            .to_owned();

        // ring only loads PKCS#8; say how to convert instead of a bare
        // "could not parse".
        if !matches!(key_der, PrivateKeyDer::Pkcs8(_)) {
            return Err(TlsError::BadPem {
                path: key_path.to_owned(),
                what: "the key must be PKCS#8 (-----BEGIN PRIVATE KEY-----); convert it with `openssl pkcs8 -topk8 -nocrypt`".into(),
            });
        }
        let key = KeyPair::try_from(key_der).map_err(|e| TlsError::BadPem {
            path: key_path.to_owned(),
            what: format!("unsupported or invalid private key: {e}"),
        })?;
        if x509.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            return Err(TlsError::KeyMismatch {
                cert: cert_path.to_owned(),
                key: key_path.to_owned(),
            });
        }

        let issuer = Issuer::from_ca_cert_der(&cert_der, key)
            .map_err(|e| bad_ca(format!("cannot sign with this certificate: {e}")))?;
        Ok(Ca {
            issuer,
            cert_der,
            common_name,
            not_before,
            not_after,
        })
    }

    /// The CA certificate, DER-encoded.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// The CA certificate as PEM text, as clients import it.
    pub fn cert_pem(&self) -> String {
        pem::encode(&pem::Pem::new("CERTIFICATE", self.cert_der.to_vec()))
    }

    /// The certificate's common name, e.g. `robots-proxy CA 1a2b3c4d`.
    pub fn common_name(&self) -> &str {
        &self.common_name
    }

    /// Start of the CA's validity.
    pub fn not_before(&self) -> OffsetDateTime {
        self.not_before
    }

    /// End of the CA's validity; leaf certificates never outlive it.
    pub fn not_after(&self) -> OffsetDateTime {
        self.not_after
    }

    /// SHA-256 fingerprint of the certificate as colon-separated hex, the
    /// form browsers and `openssl x509 -fingerprint -sha256` show.
    pub fn fingerprint_sha256(&self) -> String {
        let digest = ring::digest::digest(&ring::digest::SHA256, &self.cert_der);
        digest
            .as_ref()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<Vec<_>>()
            .join(":")
    }

    pub(crate) fn issuer(&self) -> &Issuer<'static, KeyPair> {
        &self.issuer
    }
}

fn pem_error(what: &str, label: &str, err: rustls_pki_types::pem::Error) -> String {
    match err {
        rustls_pki_types::pem::Error::NoItemsFound => {
            format!("no {what} found (expected a -----BEGIN {label}----- section)")
        }
        other => format!("invalid PEM: {other}"),
    }
}

/// Certificates carry whole seconds; keeping the same here makes the stored
/// validity equal to what was encoded.
pub(crate) fn whole_seconds(t: OffsetDateTime) -> OffsetDateTime {
    t - Duration::nanoseconds(i64::from(t.nanosecond()))
}

pub(crate) fn rfc3339(t: OffsetDateTime) -> String {
    let secs = t.unix_timestamp();
    let st = if secs >= 0 {
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.unsigned_abs())
    } else {
        std::time::UNIX_EPOCH - std::time::Duration::from_secs(secs.unsigned_abs())
    };
    humantime::format_rfc3339_seconds(st).to_string()
}

pub(crate) fn random_fill(buf: &mut [u8]) -> Result<(), TlsError> {
    ring::rand::SystemRandom::new()
        .fill(buf)
        .map_err(|_| TlsError::generate("random bytes", "the system random generator failed"))
}

/// A random positive 128-bit serial. rcgen would otherwise derive the serial
/// from the public key, and all leaves share one key: equal issuer+serial
/// pairs make Firefox reject the certificate.
pub(crate) fn random_serial() -> Result<SerialNumber, TlsError> {
    let mut bytes = [0u8; 16];
    random_fill(&mut bytes)?;
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01; // never zero, never padded
    Ok(SerialNumber::from_slice(&bytes))
}

use crate::http::text::hex;

fn create_dir(dir: &Path) -> Result<(), TlsError> {
    crate::http::files::create_private_dir(dir).map_err(|e| TlsError::io(dir, e))
}

/// Writes `data` to `path` through a temporary file created with `mode`
/// (0600 for the key: created that way, never chmod-ed afterwards).
fn write_atomically(path: &Path, data: &[u8], mode: u32) -> Result<(), TlsError> {
    crate::http::files::write_atomically(path, data, mode).map_err(|e| TlsError::Io {
        path: path.to_owned(),
        source: e,
    })
}
