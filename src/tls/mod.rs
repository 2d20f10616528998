//! TLS building blocks for HTTPS interception and upstream connections.
//!
//! - [`Ca`]: the proxy's own certificate authority, persisted as
//!   `ca.pem` + `ca.key` in a state directory.
//! - [`Minter`]: signs per-host leaf certificates with that CA, caches one
//!   [`rustls::ServerConfig`] per host and terminates the client's TLS after
//!   a CONNECT ([`Minter::accept`]).
//!
//! The client side (trust roots for origins, reasons for failed upstream
//! handshakes) is [`crate::upstream::tls`].
//!
//! Every rustls config here is built with the ring provider explicitly:
//! rustls is compiled without a process-wide default provider.

pub mod ca;
pub(crate) mod mint;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

pub use ca::Ca;
pub use mint::{DEFAULT_CAPACITY, Minter, MinterStats};

/// The crypto provider every config in this module is built with: ring,
/// its cipher suites ordered with AES-128-GCM first in each TLS version
/// (then ring's order: AES-256-GCM, ChaCha20-Poly1305).
///
/// AES-128-GCM's TLS 1.3 suite hashes with SHA-256, which x86 processors
/// compute in hardware (SHA-NI), where AES-256-GCM's SHA-384 runs in
/// software: every handshake's key schedule and transcript hashes cost
/// less (see docs/performance.md). It is TLS 1.3's mandatory suite and the
/// one browsers prefer. The interception side chooses by this order
/// whatever the client's ([`Minter`]); towards origins it is the
/// order offered.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    use rustls::CipherSuite as S;
    let mut provider = rustls::crypto::ring::default_provider();
    // A stable sort: the suites keep ring's order otherwise.
    provider.cipher_suites.sort_by_key(|suite| {
        !matches!(
            suite.suite(),
            S::TLS13_AES_128_GCM_SHA256
                | S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
                | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
        )
    });
    Arc::new(provider)
}

/// ALPN protocols offered/accepted on both sides, in preference order.
pub(crate) const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// Everything that can go wrong in the TLS module.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file that must exist does not.
    #[error("{path}: file not found")]
    Missing {
        /// The missing file.
        path: PathBuf,
    },
    /// Only one of the CA's two files exists.
    #[error(
        "{present} exists but {missing} is missing; restore it, or remove {present} to generate a new CA (clients will then have to trust the new one)"
    )]
    Incomplete {
        /// The file that exists.
        present: PathBuf,
        /// The file that does not.
        missing: PathBuf,
    },
    /// Reading, writing or creating a file or directory failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A file does not hold the PEM data it should.
    #[error("{path}: {what}")]
    BadPem {
        /// The file concerned.
        path: PathBuf,
        /// What was wrong with it.
        what: String,
    },
    /// A PEM file that should hold certificates holds none.
    #[error("{path}: no certificate (no -----BEGIN CERTIFICATE----- section) found")]
    NoCertificate {
        /// The file concerned.
        path: PathBuf,
    },
    /// The CA key does not belong to the CA certificate.
    #[error("{key} does not match the certificate in {cert}")]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// The CA certificate parses but is unusable (not a CA, expired ...).
    #[error("{path}: {reason}")]
    BadCa {
        /// The certificate file.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
    /// A host name for which no certificate can be made.
    #[error("invalid host name for a certificate: {host:?}")]
    InvalidHost {
        /// The host as given.
        host: String,
    },
    /// Generating or signing a certificate failed.
    #[error("generating a certificate for {subject}: {reason}")]
    Generate {
        /// What the certificate was for.
        subject: String,
        /// The underlying error, rendered.
        reason: String,
    },
    /// A rustls configuration could not be built.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// The TLS handshake with the proxy's client failed.
    #[error("TLS handshake with client failed: {0}")]
    ClientHandshake(#[source] io::Error),
}

impl TlsError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        let path = path.into();
        if source.kind() == io::ErrorKind::NotFound {
            TlsError::Missing { path }
        } else {
            TlsError::Io { path, source }
        }
    }

    /// True when the client aborted the handshake because it does not
    /// trust the proxy's certificate: the usual sign that the CA has not
    /// been installed on the client (worth a hint in the log).
    pub fn client_distrusts_ca(&self) -> bool {
        use rustls::AlertDescription as A;
        let TlsError::ClientHandshake(io) = self else {
            return false;
        };
        matches!(
            io.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()),
            Some(rustls::Error::AlertReceived(
                A::UnknownCA | A::BadCertificate | A::CertificateUnknown | A::AccessDenied
            ))
        )
    }

    fn generate(subject: impl Into<String>, err: impl std::fmt::Display) -> Self {
        TlsError::Generate {
            subject: subject.into(),
            reason: err.to_string(),
        }
    }
}
