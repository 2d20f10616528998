//! Per-host leaf certificates signed by the proxy's CA, and the TLS accept
//! step of a CONNECT.
//!
//! One ECDSA P-256 leaf key is generated at startup and shared by every
//! leaf (as mitmproxy does), so minting is a single signature. Finished
//! [`ServerConfig`]s are kept in a bounded LRU per host name, so a request
//! never mints: only the first connection to a host (or the first after
//! eviction or near expiry) does.

use parking_lot::Mutex;
use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use lru::LruCache;
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::ServerConfig;
use rustls::server::{Acceptor, ClientHello, ResolvesServerCert, ServerSessionMemoryCache};
use rustls::sign::{CertifiedKey, SigningKey, SingleCertAndKey};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use time::{Duration, OffsetDateTime};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::server::TlsStream;

use super::ca::{BACKDATE, random_serial, whole_seconds};
use super::{ALPN, Ca, TlsError};

/// Default number of hosts whose server config is kept.
pub const DEFAULT_CAPACITY: usize = 1024;
/// Lifetime of a leaf certificate (clamped to the CA's).
const LEAF_VALIDITY: Duration = Duration::days(365);
/// A cached leaf this close to expiry is minted again.
const RENEW_BEFORE: Duration = Duration::days(1);
/// TLS session-resumption entries, shared by all hosts' configs (rustls
/// would otherwise preallocate 256 per config). rustls refuses to resume a
/// session under a different SNI name, so sharing is safe.
const SESSION_CACHE_SIZE: usize = 4096;

/// Mints leaf certificates signed by the CA and caches one TLS server config per host.
pub struct Minter {
    ca: Ca,
    leaf_key: KeyPair,
    leaf_signer: Arc<dyn SigningKey>,
    /// Everything but the certificate; cloned for each host.
    template: ServerConfig,
    cache: Mutex<LruCache<String, Arc<Slot>>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// The leaf cache's observable counters: the public way to see what the
/// cache did (hits, mints, occupancy), as the tests and benches do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinterStats {
    /// Lookups answered from the cache (including waiting for another
    /// thread's mint of the same host).
    pub hits: u64,
    /// Lookups that minted a certificate.
    pub misses: u64,
    /// Hosts currently cached.
    pub cached: usize,
    /// Maximum number of hosts cached.
    pub capacity: usize,
}

/// A cache slot: filled once by whichever thread first asks for the host;
/// concurrent first requests wait for that one mint instead of each minting.
#[derive(Default)]
struct Slot(OnceLock<Result<Entry, String>>);

struct Entry {
    config: Arc<ServerConfig>,
    /// The same, offering only HTTP/1.1 (see [`Minter::accept`]): made
    /// once per leaf, not per connection.
    h1: Arc<ServerConfig>,
    renew_after: OffsetDateTime,
}

/// A host name normalised for certificates and cache keys.
struct Host {
    /// Lower-case DNS name without trailing dot, or the canonical IP text.
    key: String,
    ip: Option<IpAddr>,
}

impl Host {
    fn parse(raw: &str) -> Result<Host, TlsError> {
        let invalid = || TlsError::InvalidHost {
            host: raw.to_owned(),
        };
        let s = raw.trim();
        if let Some(inner) = s.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
            let ip: Ipv6Addr = inner.parse().map_err(|_| invalid())?;
            return Ok(Host {
                key: ip.to_string(),
                ip: Some(IpAddr::V6(ip)),
            });
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Host {
                key: ip.to_string(),
                ip: Some(ip),
            });
        }
        let name = s.strip_suffix('.').unwrap_or(s).to_ascii_lowercase();
        // Letters, digits, '-' and '_' (seen in real host names) only: the
        // client's TLS library is the judge of anything stricter.
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if name.len() > 253 || !name.split('.').all(label_ok) {
            return Err(invalid());
        }
        Ok(Host {
            key: name,
            ip: None,
        })
    }
}

/// Resolver of the template config, which is never used to serve.
#[derive(Debug)]
struct NoCert;

impl ResolvesServerCert for NoCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        None
    }
}

impl Minter {
    /// Creates a minter for `ca` that caches configs for up to `capacity`
    /// hosts (at least 1); generates the shared leaf key.
    pub fn new(ca: Ca, capacity: usize) -> Result<Minter, TlsError> {
        let leaf_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| TlsError::generate("the leaf key", e))?;
        let provider = super::provider();
        let leaf_signer = provider
            .key_provider
            .load_private_key(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                leaf_key.serialize_der(),
            )))?;
        let mut template = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(NoCert));
        template.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
        template.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE_SIZE);
        // The suite by the provider's order (AES-128-GCM, SHA-256: the
        // cheaper handshake), not by the client's (OpenSSL and rustls
        // clients list AES-256-GCM, SHA-384, first).
        template.ignore_client_order = true;
        // One TLS 1.3 ticket per handshake (rustls sends two by default):
        // a client that resumes gets a new one each time it does, and one
        // that never resumes (most HTTP client libraries keep no sessions)
        // costs a ticket less: three system calls for random bytes, a key
        // derivation and a record per handshake.
        template.send_tls13_tickets = 1;

        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        Ok(Minter {
            ca,
            leaf_key,
            leaf_signer,
            template,
            cache: Mutex::new(LruCache::new(capacity)),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    /// The CA this minter signs with.
    pub fn ca(&self) -> &Ca {
        &self.ca
    }

    /// The server config for `host` (a DNS name, an IP literal, or a
    /// bracketed IPv6 literal; no port), from the cache or freshly minted.
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, TlsError> {
        self.lookup(host, false).map(|(config, _)| config)
    }

    /// Completes the client's TLS handshake after a CONNECT: reads the
    /// ClientHello, serves a certificate for its SNI name, or for
    /// `connect_host` when the client sent none (IP literals), and returns
    /// the stream and the host name the certificate was made for.
    ///
    /// Without SNI, a client that offers `http/1.1` gets it rather than
    /// `h2`: HTTP/2 clients that pool sessions by the server name (got's
    /// http2-wrapper, under Crawlee for JavaScript) fail on a session that
    /// has none (`Requested origin … does not match server undefined`).
    /// One that offers `h2` alone still gets it.
    ///
    /// No timeout is applied: wrap the call in `tokio::time::timeout`.
    pub async fn accept<IO>(
        &self,
        io: IO,
        connect_host: &str,
    ) -> Result<(TlsStream<IO>, String), TlsError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let start = LazyConfigAcceptor::new(Acceptor::default(), io)
            .await
            .map_err(TlsError::ClientHandshake)?;
        let hello = start.client_hello();
        let sni = hello.server_name().map(str::to_owned);
        let offers_h1 = hello
            .alpn()
            .is_some_and(|mut offered| offered.any(|p| p == b"http/1.1"));
        let h1_only = sni.is_none() && offers_h1;
        let (config, served) = self.lookup(sni.as_deref().unwrap_or(connect_host), h1_only)?;
        let stream = start
            .into_stream(config)
            .await
            .map_err(TlsError::ClientHandshake)?;
        Ok((stream, served))
    }

    /// Signs a new leaf certificate for `host` without touching the cache
    /// (for inspection and benchmarks).
    pub fn mint_certificate(&self, host: &str) -> Result<CertificateDer<'static>, TlsError> {
        let host = Host::parse(host)?;
        let (not_before, not_after) = self
            .validity()
            .map_err(|reason| TlsError::generate(&host.key, reason))?;
        self.sign_leaf(&host, not_before, not_after)
            .map_err(|reason| TlsError::generate(&host.key, reason))
    }

    /// The leaf cache's counters ([`MinterStats`]).
    pub fn stats(&self) -> MinterStats {
        let cache = self.cache.lock();
        MinterStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            cached: cache.len(),
            capacity: cache.cap().get(),
        }
    }

    /// The config for `host` (its HTTP/1.1-only one if `h1_only`), and the
    /// host name it was made for.
    fn lookup(&self, host: &str, h1_only: bool) -> Result<(Arc<ServerConfig>, String), TlsError> {
        let host = Host::parse(host)?;
        loop {
            // The lock is held only to find or insert the slot; the mint
            // itself happens outside it, inside the slot's OnceLock.
            let slot = {
                let mut cache = self.cache.lock();
                match cache.get(&host.key) {
                    Some(slot) => slot.clone(),
                    None => {
                        let slot = Arc::new(Slot::default());
                        cache.put(host.key.clone(), slot.clone());
                        slot
                    }
                }
            };
            let mut minted = false;
            let result = slot.0.get_or_init(|| {
                minted = true;
                self.misses.fetch_add(1, Ordering::Relaxed);
                self.mint_entry(&host)
            });
            match result {
                Ok(entry) if minted || entry.renew_after > OffsetDateTime::now_utc() => {
                    if !minted {
                        self.hits.fetch_add(1, Ordering::Relaxed);
                    }
                    let config = if h1_only { &entry.h1 } else { &entry.config };
                    return Ok((config.clone(), host.key));
                }
                // Close to expiry: drop it and go round to mint a new one.
                Ok(_) => self.evict(&host.key, &slot),
                Err(reason) => {
                    // Do not keep failures: the next request tries again.
                    self.evict(&host.key, &slot);
                    return Err(TlsError::generate(host.key, reason));
                }
            }
        }
    }

    /// Removes `slot` from the cache unless another thread already replaced it.
    fn evict(&self, key: &str, slot: &Arc<Slot>) {
        let mut cache = self.cache.lock();
        if cache.peek(key).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            cache.pop(key);
        }
    }

    fn validity(&self) -> Result<(OffsetDateTime, OffsetDateTime), String> {
        let now = whole_seconds(OffsetDateTime::now_utc());
        let not_before = (now - BACKDATE).max(self.ca.not_before());
        let not_after = (now + LEAF_VALIDITY).min(self.ca.not_after());
        if not_after <= now {
            return Err("the CA certificate has expired".into());
        }
        Ok((not_before, not_after))
    }

    fn mint_entry(&self, host: &Host) -> Result<Entry, String> {
        let (not_before, not_after) = self.validity()?;
        let leaf = self.sign_leaf(host, not_before, not_after)?;
        let certified = CertifiedKey::new(vec![leaf], self.leaf_signer.clone());
        let mut config = self.template.clone();
        config.cert_resolver = Arc::new(SingleCertAndKey::from(certified));
        let mut h1 = config.clone();
        h1.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Entry {
            config: Arc::new(config),
            h1: Arc::new(h1),
            renew_after: not_after - RENEW_BEFORE,
        })
    }

    fn sign_leaf(
        &self,
        host: &Host,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> Result<CertificateDer<'static>, String> {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        // X.509 caps the common name at 64 characters; clients go by the
        // SAN, and rcgen marks it critical when the subject is empty.
        if host.key.len() <= 64 {
            params
                .distinguished_name
                .push(DnType::CommonName, host.key.as_str());
        }
        params.subject_alt_names = vec![match host.ip {
            Some(ip) => SanType::IpAddress(ip),
            None => SanType::DnsName(host.key.as_str().try_into().map_err(|e| format!("{e}"))?),
        }];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(random_serial().map_err(|e| e.to_string())?);
        params.not_before = not_before;
        params.not_after = not_after;
        let cert = params
            .signed_by(&self.leaf_key, self.ca.issuer())
            .map_err(|e| e.to_string())?;
        Ok(cert.into())
    }
}

#[cfg(test)]
mod tests {
    use super::Host;

    #[test]
    fn host_normalisation() {
        let key = |h: &str| Host::parse(h).map(|h| (h.key, h.ip.is_some())).ok();
        assert_eq!(key("Example.COM."), Some(("example.com".into(), false)));
        assert_eq!(
            key(" under_score.example "),
            Some(("under_score.example".into(), false))
        );
        assert_eq!(
            key("[::FFFF:1.2.3.4]"),
            Some(("::ffff:1.2.3.4".into(), true))
        );
        assert_eq!(key("2001:DB8::0:1"), Some(("2001:db8::1".into(), true)));
        assert_eq!(key("192.0.2.1"), Some(("192.0.2.1".into(), true)));
        assert_eq!(key("[192.0.2.1]"), None);
        assert_eq!(key("fe80::1%eth0"), None);
        assert_eq!(key("example.com:443"), None);
        assert_eq!(key(&"a".repeat(64)), None);
        assert_eq!(key(&["a"; 128].join(".")), None);
        assert!(key(&["a"; 127].join(".")).is_some());
    }
}
