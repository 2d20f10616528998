//! The client side: which upstream certificates the proxy trusts, and
//! short reasons for failed upstream connections (for 502 bodies and
//! logs).
//!
//! Trust anchors are the union of
//! - webpki-roots (Mozilla's set, compiled in: the same everywhere,
//!   including in a systemd sandbox that hides /etc/ssl),
//! - the system store when it can be read (rustls-native-certs: picks up
//!   CAs an administrator added with `update-ca-certificates`; honours
//!   `SSL_CERT_FILE`/`SSL_CERT_DIR`),
//! - every certificate in the files given with `--upstream-ca`.
//!
//! Being a union, the system store can only add trust, never remove the
//! compiled-in roots, so behaviour differs between hosts only for sites
//! signed by locally added CAs.

use std::collections::HashSet;
use std::error::Error as StdError;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use rustls::{CertificateError, ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, TrustAnchor, UnixTime};

use crate::tls::{ALPN, TlsError, provider};

/// How many trust anchors came from where, for the startup log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RootStats {
    /// Compiled-in Mozilla roots.
    pub webpki: usize,
    /// System roots not already among the compiled-in ones.
    pub(crate) native: usize,
    /// Errors met while reading the system store (it is skipped in part or whole).
    pub(crate) native_errors: usize,
    /// Certificates from `--upstream-ca` files.
    pub extra: usize,
}

/// Client config for upstream connections: webpki roots + system roots +
/// the certificates in `extra_ca_files`; ALPN h2 and http/1.1.
pub fn client_config(extra_ca_files: &[PathBuf]) -> Result<ClientConfig, TlsError> {
    let (config, stats) = client_config_with(extra_ca_files, true)?;
    tracing::info!(
        webpki = stats.webpki,
        system = stats.native,
        system_errors = stats.native_errors,
        extra = stats.extra,
        "upstream TLS trust anchors loaded"
    );
    Ok(config)
}

/// [`client_config`] with the system store optional, also returning where
/// the anchors came from.
pub fn client_config_with(
    extra_ca_files: &[PathBuf],
    system_roots: bool,
) -> Result<(ClientConfig, RootStats), TlsError> {
    let mut stats = RootStats::default();
    let mut store = AnchorSet::default();
    stats.webpki = store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());

    if system_roots {
        let native = rustls_native_certs::load_native_certs();
        for err in &native.errors {
            tracing::warn!(error = %err, "could not read some system trust roots");
        }
        stats.native_errors = native.errors.len();
        // The system store often holds odd certificates (expired, bad
        // encodings): skip those one by one, as browsers do.
        let mut native_store = RootCertStore::empty();
        native_store.add_parsable_certificates(native.certs);
        let anchors = native_store.roots;
        stats.native = store.extend(anchors);
    }

    for path in extra_ca_files {
        for cert in read_certs(path)? {
            // The operator named this file: a bad certificate in it is an
            // error, not something to skip.
            let mut one = RootCertStore::empty();
            one.add(cert).map_err(|e| TlsError::BadPem {
                path: path.clone(),
                what: format!("certificate not usable as a trust anchor: {e}"),
            })?;
            stats.extra += 1;
            store.extend(one.roots);
        }
    }

    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(RootCertStore { roots: store.roots })
        .with_no_client_auth();
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok((config, stats))
}

/// Trust anchors without duplicates (the system store repeats most of
/// Mozilla's set).
#[derive(Default)]
struct AnchorSet {
    roots: Vec<TrustAnchor<'static>>,
    seen: HashSet<(Vec<u8>, Vec<u8>)>,
}

impl AnchorSet {
    /// Adds the new anchors and returns how many were new.
    fn extend(&mut self, anchors: impl IntoIterator<Item = TrustAnchor<'static>>) -> usize {
        let before = self.roots.len();
        for anchor in anchors {
            let key = (
                anchor.subject.as_ref().to_vec(),
                anchor.subject_public_key_info.as_ref().to_vec(),
            );
            if self.seen.insert(key) {
                self.roots.push(anchor);
            }
        }
        self.roots.len() - before
    }
}

/// Every certificate in a PEM file; none at all is an error naming the file.
pub(crate) fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let data = fs::read(path).map_err(|e| TlsError::io(path, e))?;
    let certs = CertificateDer::pem_slice_iter(&data)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem {
            path: path.to_owned(),
            what: format!("invalid PEM: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// True if `err` (or a cause) is a TLS failure, e.g. an untrusted or
/// mismatched certificate: the origin is not who it should be, which is a
/// bad gateway rather than an unreachable origin.
pub fn is_tls_failure(err: &(dyn StdError + 'static)) -> bool {
    crate::http::destination::causes(err).any(|e| e.downcast_ref::<rustls::Error>().is_some())
}

/// A short human reason why a connection to `host` failed, for a 502 body:
/// "certificate not trusted: UnknownIssuer for host X", "certificate name
/// mismatch ...", "... expired ...", "connection refused by X" ...
///
/// Walks the `source()` chain (and the payload of `io::Error`s, which
/// `source()` skips) looking for the rustls error first.
pub fn upstream_error_reason(err: &(dyn StdError + 'static), host: &str) -> String {
    if let Some(tls) =
        crate::http::destination::causes(err).find_map(|e| e.downcast_ref::<rustls::Error>())
    {
        return describe_tls(tls, host);
    }
    if crate::http::destination::causes(err).any(|e| e.to_string() == "dns error") {
        return format!("DNS lookup for {host} failed");
    }
    if let Some(kind) = crate::http::destination::causes(err)
        .find_map(|e| e.downcast_ref::<io::Error>().map(|e| e.kind()))
    {
        let what = match kind {
            io::ErrorKind::ConnectionRefused => Some(format!("connection refused by {host}")),
            io::ErrorKind::ConnectionReset => Some(format!("connection reset by {host}")),
            io::ErrorKind::TimedOut => Some(format!("connection to {host} timed out")),
            io::ErrorKind::UnexpectedEof => {
                Some(format!("{host} closed the connection unexpectedly"))
            }
            _ => None,
        };
        if let Some(what) = what {
            return what;
        }
    }
    let mut text: Vec<String> = Vec::new();
    for e in crate::http::destination::causes(err) {
        let s = e.to_string();
        // Wrappers often repeat their source's message.
        if !text.last().is_some_and(|last| last.contains(&s)) {
            text.push(s);
        }
    }
    format!("connection to {host} failed: {}", text.join(": "))
}

fn describe_tls(err: &rustls::Error, host: &str) -> String {
    use rustls::Error as E;
    match err {
        E::InvalidCertificate(cert) => describe_cert(cert, host),
        E::AlertReceived(alert) => {
            format!("TLS handshake with {host} failed: it sent the alert {alert:?}")
        }
        E::PeerIncompatible(why) => format!(
            "TLS handshake with {host} failed: no common TLS version or cipher suite ({why:?})"
        ),
        E::NoCertificatesPresented => format!("{host} presented no certificate"),
        E::InvalidMessage(_)
        | E::PeerMisbehaved(_)
        | E::InappropriateMessage { .. }
        | E::InappropriateHandshakeMessage { .. } => {
            format!("TLS protocol error from {host}: {err}")
        }
        other => format!("TLS error with {host}: {other}"),
    }
}

fn describe_cert(err: &CertificateError, host: &str) -> String {
    use CertificateError as C;
    match err {
        C::UnknownIssuer => format!(
            "certificate not trusted: UnknownIssuer for host {host} (its issuer is not a CA the proxy trusts; for an internal CA use --upstream-ca)"
        ),
        C::NotValidForName => format!("certificate name mismatch: not valid for host {host}"),
        C::NotValidForNameContext { presented, .. } => format!(
            "certificate name mismatch: the certificate of {host} is for {}",
            if presented.is_empty() {
                "no names".to_owned()
            } else {
                presented
                    .iter()
                    .map(|n| plain_name(n))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
        C::Expired => format!("certificate of host {host} expired"),
        C::ExpiredContext { not_after, .. } => format!(
            "certificate of host {host} expired at {}",
            unix_rfc3339(*not_after)
        ),
        C::NotValidYet => format!("certificate of host {host} is not valid yet"),
        C::NotValidYetContext { not_before, .. } => format!(
            "certificate of host {host} is not valid yet (valid from {})",
            unix_rfc3339(*not_before)
        ),
        C::Revoked => format!("certificate of host {host} is revoked"),
        C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
            format!("certificate of host {host} is not for TLS servers")
        }
        C::Other(other) => describe_webpki(&other.0.to_string(), host),
        other => format!("certificate of host {host} rejected: {other:?}"),
    }
}

/// The certificate errors rustls passes on from its verifier (webpki) by
/// name, in words; the name stays in brackets for a search.
fn describe_webpki(name: &str, host: &str) -> String {
    let what = match name {
        "CaUsedAsEndEntity" => {
            "is a CA certificate, which cannot identify a server (the server must present a certificate issued by that CA)"
        }
        "EndEntityUsedAsCa" => "was issued by a server certificate, which cannot issue others",
        "BadDer" | "BadDerTime" | "TrailingData" => "is malformed",
        "UnsupportedSignatureAlgorithm"
        | "UnsupportedSignatureAlgorithmForPublicKey"
        | "UnsupportedSignatureAlgorithmContext"
        | "UnsupportedSignatureAlgorithmForPublicKeyContext" => {
            "is signed with an algorithm the proxy does not accept"
        }
        "UnsupportedCriticalExtension" | "ExtensionValueInvalid" => {
            "has an extension the proxy cannot read"
        }
        "RequiredEkuNotFound" | "RequiredEkuNotFoundContext" => "is not for TLS servers",
        "PathLenConstraintViolated" | "MaximumPathDepthExceeded" => {
            "has a chain longer than its issuers allow"
        }
        "NameConstraintViolation" | "MaximumNameConstraintComparisonsExceeded" => {
            "names a host its issuer may not certify"
        }
        "InvalidCertValidity" => "has a validity period that ends before it begins",
        "UnsupportedCertVersion" => "has an X.509 version the proxy does not accept",
        _ => "was rejected",
    };
    let name = name.split(['(', ' ', '{']).next().unwrap_or(name);
    format!("certificate of host {host} {what} ({name})")
}

/// webpki renders presented names as `DnsName("a.example")` and
/// `IpAddress(192.0.2.1)`; a 502 body reads better with the bare names.
fn plain_name(debug: &str) -> &str {
    debug
        .strip_prefix("DnsName(\"")
        .and_then(|s| s.strip_suffix("\")"))
        .or_else(|| {
            debug
                .strip_prefix("IpAddress(")
                .and_then(|s| s.strip_suffix(')'))
        })
        .unwrap_or(debug)
}

fn unix_rfc3339(t: UnixTime) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(t.as_secs())).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that wraps another, as hyper and hyper-util do.
    #[derive(Debug)]
    struct Wrap(&'static str, Box<dyn StdError + Send + Sync>);

    impl std::fmt::Display for Wrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl StdError for Wrap {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&*self.1)
        }
    }

    /// Stands for a webpki error, whose text is its name.
    #[derive(Debug)]
    struct Named(&'static str);

    impl std::fmt::Display for Named {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl StdError for Named {}

    #[test]
    fn verifier_errors_are_said_in_words() {
        let other = |name: &'static str| {
            rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(
                std::sync::Arc::new(Named(name)),
            )))
        };
        let reason = upstream_error_reason(
            &io::Error::new(io::ErrorKind::InvalidData, other("CaUsedAsEndEntity")),
            "ca.example",
        );
        assert_eq!(
            reason,
            "certificate of host ca.example is a CA certificate, which cannot identify a server \
             (the server must present a certificate issued by that CA) (CaUsedAsEndEntity)"
        );
        assert!(!reason.contains("OtherError"));
        let reason = upstream_error_reason(
            &io::Error::new(io::ErrorKind::InvalidData, other("SomethingNew")),
            "x.example",
        );
        assert_eq!(
            reason,
            "certificate of host x.example was rejected (SomethingNew)"
        );
    }

    #[test]
    fn reasons_through_wrappers_and_io_payloads() {
        let tls = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let err = Wrap(
            "client error (Connect)",
            Box::new(io::Error::new(io::ErrorKind::InvalidData, tls)),
        );
        let reason = upstream_error_reason(&err, "intranet.example");
        assert!(
            reason.starts_with("certificate not trusted: UnknownIssuer for host intranet.example"),
            "{reason}"
        );

        let err = Wrap(
            "client error (Connect)",
            Box::new(Wrap(
                "dns error",
                Box::new(io::Error::other("failed to lookup address information")),
            )),
        );
        assert_eq!(
            upstream_error_reason(&err, "nx.example"),
            "DNS lookup for nx.example failed"
        );

        let err = Wrap(
            "client error (Connect)",
            Box::new(io::Error::from(io::ErrorKind::TimedOut)),
        );
        assert_eq!(
            upstream_error_reason(&err, "slow.example"),
            "connection to slow.example timed out"
        );

        let alert = rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure);
        let reason = upstream_error_reason(
            &io::Error::new(io::ErrorKind::InvalidData, alert),
            "old.example",
        );
        assert_eq!(
            reason,
            "TLS handshake with old.example failed: it sent the alert HandshakeFailure"
        );

        let expired = rustls::Error::InvalidCertificate(CertificateError::Expired);
        assert_eq!(
            upstream_error_reason(&expired, "e.example"),
            "certificate of host e.example expired"
        );

        let err = Wrap("request failed: boom", Box::new(io::Error::other("boom")));
        assert_eq!(
            upstream_error_reason(&err, "x.example"),
            "connection to x.example failed: request failed: boom"
        );
    }

    #[test]
    fn presented_names_are_shown_bare() {
        assert_eq!(plain_name("DnsName(\"a.example\")"), "a.example");
        assert_eq!(plain_name("IpAddress(192.0.2.1)"), "192.0.2.1");
        assert_eq!(plain_name("DirectoryName"), "DirectoryName");
    }
}
