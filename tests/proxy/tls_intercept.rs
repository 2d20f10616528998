//! The TLS building blocks over real loopback sockets: the proxy CA on disk,
//! minted leaves, `Minter::accept` against a real rustls client. (The
//! upstream trust configuration and its error reasons are unit tests of
//! `upstream`: src/upstream/tls_tests.rs.)

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use robots_proxy::tls::{self, Ca, Minter, TlsError};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{ASN1Time, parse_x509_certificate};

fn minter() -> Minter {
    Minter::new(Ca::generate().unwrap(), 16).unwrap()
}

/// A rustls client that trusts only `ca`.
fn client_trusting(ca: &CertificateDer<'static>, alpn: &[&[u8]]) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let mut config = ClientConfig::builder_with_provider(tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

/// What the server side of one intercepted connection saw.
#[derive(Debug)]
struct Served {
    host: String,
    alpn: Option<Vec<u8>>,
}

/// Accepts `n` connections with `Minter::accept`, as after a CONNECT to
/// `connect_host`; each answers "hello" over TLS.
async fn intercepting_server(
    minter: Arc<Minter>,
    connect_host: &str,
    n: usize,
) -> (
    SocketAddr,
    tokio::task::JoinHandle<Vec<Result<Served, TlsError>>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connect_host = connect_host.to_owned();
    let task = tokio::spawn(async move {
        let mut out = Vec::new();
        for _ in 0..n {
            let (tcp, _) = listener.accept().await.unwrap();
            let result = minter.accept(tcp, &connect_host).await;
            out.push(match result {
                Ok((mut stream, host)) => {
                    let alpn = stream.get_ref().1.alpn_protocol().map(|p| p.to_vec());
                    stream.write_all(b"hello").await.unwrap();
                    stream.shutdown().await.unwrap();
                    Ok(Served { host, alpn })
                }
                Err(e) => Err(e),
            });
        }
        out
    });
    (addr, task)
}

/// Connects, completes the handshake, reads the greeting; returns the
/// negotiated ALPN protocol.
async fn connect(
    connector: &TlsConnector,
    addr: SocketAddr,
    name: ServerName<'static>,
) -> std::io::Result<Option<Vec<u8>>> {
    let tcp = TcpStream::connect(addr).await?;
    let mut stream = connector.connect(name, tcp).await?;
    let alpn = stream.get_ref().1.alpn_protocol().map(|p| p.to_vec());
    let mut greeting = Vec::new();
    stream.read_to_end(&mut greeting).await?;
    assert_eq!(greeting, b"hello");
    Ok(alpn)
}

fn sans(der: &[u8]) -> Vec<String> {
    let (_, cert) = parse_x509_certificate(der).unwrap();
    let san = cert.subject_alternative_name().unwrap().unwrap();
    san.value
        .general_names
        .iter()
        .map(|n| match n {
            GeneralName::DNSName(d) => format!("dns:{d}"),
            GeneralName::IPAddress(b) => match b.len() {
                4 => format!("ip:{}", Ipv4Addr::from(<[u8; 4]>::try_from(*b).unwrap())),
                16 => format!("ip:{}", Ipv6Addr::from(<[u8; 16]>::try_from(*b).unwrap())),
                _ => panic!("bad IP SAN length"),
            },
            other => format!("other:{other:?}"),
        })
        .collect()
}

#[test]
fn leaf_sans_for_names_and_ip_literals() {
    let m = minter();
    let cases = [
        ("localhost", "dns:localhost"),
        ("LocalHost.", "dns:localhost"),
        ("127.0.0.1", "ip:127.0.0.1"),
        ("::1", "ip:::1"),
        ("[::1]", "ip:::1"),
        ("[0:0::1]", "ip:::1"),
    ];
    for (host, want) in cases {
        let der = m.mint_certificate(host).unwrap();
        assert_eq!(sans(&der), vec![want.to_owned()], "host {host}");
    }
}

#[test]
fn leaf_is_a_server_cert_issued_by_the_ca_within_its_validity() {
    let m = minter();
    let a = m.mint_certificate("example.org").unwrap();
    let b = m.mint_certificate("example.org").unwrap();
    let (_, ca) = parse_x509_certificate(m.ca().cert_der()).unwrap();
    let (_, leaf) = parse_x509_certificate(&a).unwrap();
    let (_, leaf_b) = parse_x509_certificate(&b).unwrap();

    assert_eq!(leaf.issuer().as_raw(), ca.subject().as_raw());
    assert!(leaf.verify_signature(Some(ca.public_key())).is_ok());
    let eku = leaf.extended_key_usage().unwrap().unwrap();
    assert!(eku.value.server_auth);
    assert!(!leaf.is_ca());
    assert_eq!(
        leaf.subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap(),
        "example.org"
    );
    // Shared key, so the serial must not come from the key.
    assert_eq!(leaf.public_key().raw, leaf_b.public_key().raw);
    assert_ne!(leaf.raw_serial(), leaf_b.raw_serial());

    let now = ASN1Time::now().timestamp();
    let nb = leaf.validity().not_before.timestamp();
    let na = leaf.validity().not_after.timestamp();
    assert!(
        nb < now - 23 * 3600 && nb > now - 25 * 3600,
        "backdated a day"
    );
    assert!(
        na > now + 360 * 86400 && na <= now + 366 * 86400,
        "about a year"
    );
    assert!(na <= ca.validity().not_after.timestamp());
}

#[test]
fn generated_cas_differ_and_are_ten_year_p256_cas() {
    let a = Ca::generate().unwrap();
    let b = Ca::generate().unwrap();
    assert_ne!(a.common_name(), b.common_name());
    assert_ne!(a.fingerprint_sha256(), b.fingerprint_sha256());
    assert!(a.common_name().starts_with("robots-proxy CA "));
    assert_eq!(a.fingerprint_sha256().len(), 32 * 3 - 1);

    let (_, cert) = parse_x509_certificate(a.cert_der()).unwrap();
    assert!(cert.is_ca());
    let ku = cert.key_usage().unwrap().unwrap().value;
    assert!(ku.key_cert_sign() && ku.crl_sign());
    let years = (cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp())
        as f64
        / (365.25 * 86400.0);
    assert!((9.9..10.1).contains(&years), "{years} years");
    // id-ecPublicKey with the P-256 curve.
    assert_eq!(
        cert.public_key().algorithm.algorithm.to_id_string(),
        "1.2.840.10045.2.1"
    );
    assert_eq!(cert.public_key().subject_public_key.data.len(), 65);
}

#[tokio::test]
async fn handshake_with_sni_negotiates_h2() {
    let m = Arc::new(minter());
    let connector = client_trusting(m.ca().cert_der(), &[b"h2", b"http/1.1"]);
    // The SNI name wins over the CONNECT host.
    let (addr, server) = intercepting_server(m.clone(), "connect-host.invalid", 1).await;
    let alpn = connect(&connector, addr, ServerName::try_from("localhost").unwrap())
        .await
        .unwrap();
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
    let served = server.await.unwrap().pop().unwrap().unwrap();
    assert_eq!(served.host, "localhost");
    assert_eq!(served.alpn.as_deref(), Some(&b"h2"[..]));
}

#[tokio::test]
async fn handshake_without_sni_uses_the_connect_host_ipv4() {
    let m = Arc::new(minter());
    let connector = client_trusting(m.ca().cert_der(), &[b"http/1.1"]);
    let (addr, server) = intercepting_server(m.clone(), "127.0.0.1", 1).await;
    // rustls sends no SNI for an IP address.
    let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
    let alpn = connect(&connector, addr, name).await.unwrap();
    assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
    let served = server.await.unwrap().pop().unwrap().unwrap();
    assert_eq!(served.host, "127.0.0.1");
}

#[tokio::test]
async fn handshake_without_sni_offers_only_http_1_1() {
    // A client that offers h2 to a bare IP (no SNI) gets HTTP/1.1: h2
    // clients that pool sessions by server name fail on a nameless one.
    let m = Arc::new(minter());
    let connector = client_trusting(m.ca().cert_der(), &[b"h2", b"http/1.1"]);
    let (addr, server) = intercepting_server(m.clone(), "127.0.0.1", 2).await;
    let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
    let alpn = connect(&connector, addr, name).await.unwrap();
    assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
    // One that offers h2 alone still gets it.
    let h2_only = client_trusting(m.ca().cert_der(), &[b"h2"]);
    let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
    let alpn = connect(&h2_only, addr, name).await.unwrap();
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
    let served = server.await.unwrap();
    assert_eq!(
        served[0].as_ref().unwrap().alpn.as_deref(),
        Some(&b"http/1.1"[..])
    );
}

#[tokio::test]
async fn handshake_without_sni_uses_the_connect_host_ipv6() {
    let m = Arc::new(minter());
    let connector = client_trusting(m.ca().cert_der(), &[]);
    // The CONNECT line carries the brackets; the socket is v4 loopback so the
    // test does not need IPv6 on the machine: only the name is checked.
    let (addr, server) = intercepting_server(m.clone(), "[::1]", 1).await;
    let name = ServerName::IpAddress(IpAddr::V6(Ipv6Addr::LOCALHOST).into());
    let alpn = connect(&connector, addr, name).await.unwrap();
    assert_eq!(alpn, None);
    let served = server.await.unwrap().pop().unwrap().unwrap();
    assert_eq!(served.host, "::1");
}

#[tokio::test]
async fn second_connection_for_a_host_does_not_mint_again() {
    let m = Arc::new(minter());
    let connector = client_trusting(m.ca().cert_der(), &[b"h2"]);
    let (addr, server) = intercepting_server(m.clone(), "localhost", 3).await;
    for name in ["localhost", "LOCALHOST", "localhost"] {
        connect(&connector, addr, ServerName::try_from(name).unwrap())
            .await
            .unwrap();
    }
    for served in server.await.unwrap() {
        assert_eq!(served.unwrap().host, "localhost");
    }
    let stats = m.stats();
    assert_eq!((stats.misses, stats.hits, stats.cached), (1, 2, 1));
}

#[test]
fn concurrent_first_requests_mint_once() {
    let m = Arc::new(minter());
    let barrier = Arc::new(std::sync::Barrier::new(32));
    let threads: Vec<_> = (0..32)
        .map(|_| {
            let (m, barrier) = (m.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                m.server_config("same.example").unwrap()
            })
        })
        .collect();
    let configs: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(configs.iter().all(|c| Arc::ptr_eq(c, &configs[0])));
    let stats = m.stats();
    assert_eq!((stats.misses, stats.hits), (1, 31));
}

#[test]
fn cache_is_bounded_lru() {
    let m = Minter::new(Ca::generate().unwrap(), 2).unwrap();
    let a = m.server_config("a.example").unwrap();
    m.server_config("b.example").unwrap();
    assert!(Arc::ptr_eq(&a, &m.server_config("a.example").unwrap()));
    m.server_config("c.example").unwrap(); // evicts b, the least recently used
    let stats = m.stats();
    assert_eq!((stats.cached, stats.capacity, stats.misses), (2, 2, 3));
    m.server_config("a.example").unwrap();
    assert_eq!(m.stats().misses, 3);
    m.server_config("b.example").unwrap();
    assert_eq!(m.stats().misses, 4);
}

#[test]
fn invalid_hosts_are_refused_without_caching() {
    let m = minter();
    for host in [
        "",
        "a..b",
        "bad host",
        "exa*mple.com",
        "[not-ipv6]",
        "é.example",
    ] {
        match m.server_config(host) {
            Err(TlsError::InvalidHost { host: h }) => assert_eq!(h, host),
            other => panic!("{host:?}: {other:?}"),
        }
    }
    assert_eq!(m.stats().cached, 0);
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn ca_write_load_roundtrip_and_the_loaded_ca_still_signs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state").join("tls");
    let ca = Ca::generate().unwrap();
    ca.write(&dir).unwrap();

    #[cfg(unix)]
    {
        assert_eq!(mode(&dir.join("ca.key")), 0o600);
        assert_eq!(mode(&dir), 0o700);
    }
    let pem = std::fs::read_to_string(dir.join("ca.pem")).unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
    assert_eq!(pem, ca.cert_pem());
    let key = std::fs::read_to_string(dir.join("ca.key")).unwrap();
    assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"));

    let loaded = Ca::load(&dir).unwrap();
    assert_eq!(loaded.cert_der(), ca.cert_der());
    assert_eq!(loaded.common_name(), ca.common_name());
    assert_eq!(loaded.not_after(), ca.not_after());
    assert_eq!(loaded.not_before(), ca.not_before());

    // Leaves signed by the loaded CA chain to the certificate clients got
    // from the original one.
    let m = Arc::new(Minter::new(loaded, 4).unwrap());
    let connector = client_trusting(ca.cert_der(), &[]);
    let (addr, server) = intercepting_server(m, "localhost", 1).await;
    connect(&connector, addr, ServerName::try_from("localhost").unwrap())
        .await
        .unwrap();
    server.await.unwrap().pop().unwrap().unwrap();

    // Writing again replaces the files atomically and keeps the modes.
    Ca::generate().unwrap().write(&dir).unwrap();
    #[cfg(unix)]
    assert_eq!(mode(&dir.join("ca.key")), 0o600);
    assert_ne!(Ca::load(&dir).unwrap().cert_der(), ca.cert_der());
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "no temporary files left: {names:?}");
}

#[test]
fn load_or_create_creates_once_then_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ca");
    let (first, created) = Ca::load_or_create(&dir).unwrap();
    assert!(created);
    let (second, created) = Ca::load_or_create(&dir).unwrap();
    assert!(!created);
    assert_eq!(first.fingerprint_sha256(), second.fingerprint_sha256());

    // Half a CA is an error naming both files, never a silent new CA.
    std::fs::remove_file(dir.join("ca.key")).unwrap();
    let err = Ca::load_or_create(&dir).unwrap_err();
    assert!(matches!(err, TlsError::Incomplete { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("ca.pem") && msg.contains("ca.key"), "{msg}");
}

#[test]
fn load_errors_name_the_file_and_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let good = Ca::generate().unwrap();
    let other = Ca::generate().unwrap();
    let other_dir = tmp.path().join("other");
    other.write(&other_dir).unwrap();
    let other_key = std::fs::read(other_dir.join("ca.key")).unwrap();

    // Missing files.
    let err = Ca::load(&dir.join("nowhere")).unwrap_err();
    assert!(matches!(err, TlsError::Missing { .. }), "{err:?}");
    assert!(err.to_string().contains("nowhere/ca.pem"), "{err}");

    // Garbage certificate.
    good.write(dir).unwrap();
    std::fs::write(dir.join("ca.pem"), b"\x00\xffnot a certificate at all").unwrap();
    let err = Ca::load(dir).unwrap_err().to_string();
    assert!(
        err.contains("ca.pem") && err.contains("no certificate found"),
        "{err}"
    );

    // A PEM block whose body is not a certificate.
    std::fs::write(
        dir.join("ca.pem"),
        "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let err = Ca::load(dir).unwrap_err().to_string();
    assert!(
        err.contains("ca.pem") && err.contains("not a valid X.509"),
        "{err}"
    );

    // Garbage key.
    good.write(dir).unwrap();
    std::fs::write(dir.join("ca.key"), "garbage").unwrap();
    let err = Ca::load(dir).unwrap_err().to_string();
    assert!(
        err.contains("ca.key") && err.contains("no private key found"),
        "{err}"
    );

    // Someone else's key.
    std::fs::write(dir.join("ca.key"), other_key).unwrap();
    let err = Ca::load(dir).unwrap_err();
    assert!(matches!(err, TlsError::KeyMismatch { .. }), "{err:?}");
    assert!(err.to_string().contains("does not match"), "{err}");

    // A leaf certificate is not a CA.
    good.write(dir).unwrap();
    let leaf = Minter::new(Ca::load(dir).unwrap(), 1)
        .unwrap()
        .mint_certificate("example.org")
        .unwrap();
    std::fs::write(
        dir.join("ca.pem"),
        ::pem::encode(&::pem::Pem::new("CERTIFICATE", leaf.to_vec())),
    )
    .unwrap();
    let err = Ca::load(dir).unwrap_err();
    assert!(matches!(err, TlsError::BadCa { .. }), "{err:?}");
    assert!(err.to_string().contains("not a CA"), "{err}");
}

/// A CA made outside the proxy, valid from `not_before` to `not_after`, as PEM.
fn foreign_ca(
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.not_before = not_before;
    params.not_after = not_after;
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// A [`foreign_ca`] loaded as if from `dir/ca.pem` and `dir/ca.key`.
fn load_foreign_ca(
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
) -> Result<Ca, TlsError> {
    let (cert, key) = foreign_ca(not_before, not_after);
    Ca::from_pem(
        cert.as_bytes(),
        key.as_bytes(),
        Path::new("dir/ca.pem"),
        Path::new("dir/ca.key"),
    )
}

#[test]
fn leaves_never_outlive_the_ca_and_are_reminted_near_its_end() {
    let now = time::OffsetDateTime::now_utc();
    let ca = load_foreign_ca(
        now - time::Duration::hours(1),
        now + time::Duration::hours(12),
    )
    .unwrap();
    let ca_end = ca.not_after().unix_timestamp();
    let ca_start = ca.not_before().unix_timestamp();
    let m = Minter::new(ca, 4).unwrap();

    let der = m.mint_certificate("x.example").unwrap();
    let (_, leaf) = parse_x509_certificate(&der).unwrap();
    assert_eq!(leaf.validity().not_after.timestamp(), ca_end);
    assert_eq!(leaf.validity().not_before.timestamp(), ca_start);

    // Within a day of expiry a cached config is not reused.
    let a = m.server_config("x.example").unwrap();
    let b = m.server_config("x.example").unwrap();
    assert!(!Arc::ptr_eq(&a, &b));
    assert_eq!(
        (m.stats().misses, m.stats().hits, m.stats().cached),
        (2, 0, 1)
    );
}

#[test]
fn an_expired_ca_is_refused_on_load() {
    let now = time::OffsetDateTime::now_utc();
    let err = load_foreign_ca(
        now - time::Duration::days(30),
        now - time::Duration::days(1),
    )
    .unwrap_err();
    assert!(matches!(err, TlsError::BadCa { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.starts_with("dir/ca.pem: the CA certificate expired on "),
        "{msg}"
    );
}

/// Connects with `config`, reads the greeting; returns the negotiated
/// suite and the kind of handshake.
async fn connect_with(
    config: &Arc<ClientConfig>,
    addr: SocketAddr,
    name: &str,
) -> (rustls::CipherSuite, rustls::HandshakeKind) {
    let name = match name.parse::<IpAddr>() {
        Ok(ip) => ServerName::IpAddress(ip.into()),
        Err(_) => ServerName::try_from(name.to_owned()).unwrap(),
    };
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut stream = TlsConnector::from(config.clone())
        .connect(name, tcp)
        .await
        .unwrap();
    let mut greeting = Vec::new();
    // Read to the end: the session tickets come after the handshake.
    stream.read_to_end(&mut greeting).await.unwrap();
    assert_eq!(greeting, b"hello");
    let conn = stream.get_ref().1;
    let suite = conn.negotiated_cipher_suite().unwrap().suite();
    (suite, conn.handshake_kind().unwrap())
}

/// A client with ring's own suite order (AES-256-GCM first, as OpenSSL's
/// clients have it), keeping its sessions.
fn client_preferring_aes_256(ca: &CertificateDer<'static>, alpn: &[u8]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let provider = rustls::crypto::ring::default_provider();
    assert_eq!(
        provider.cipher_suites[0].suite(),
        rustls::CipherSuite::TLS13_AES_256_GCM_SHA384
    );
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

#[tokio::test]
async fn interception_chooses_aes_128_gcm_and_a_returning_client_resumes() {
    use rustls::{CipherSuite, HandshakeKind};
    // By name (SNI, h2) and by IP address (no SNI: the HTTP/1.1-only config).
    for (host, alpn) in [("localhost", &b"h2"[..]), ("127.0.0.1", b"http/1.1")] {
        let m = Arc::new(minter());
        let config = client_preferring_aes_256(m.ca().cert_der(), alpn);
        let (addr, server) = intercepting_server(m.clone(), host, 3).await;
        let mut kinds = Vec::new();
        for _ in 0..3 {
            let (suite, kind) = connect_with(&config, addr, host).await;
            // The proxy's order, not the client's: SHA-256, not SHA-384.
            assert_eq!(suite, CipherSuite::TLS13_AES_128_GCM_SHA256, "{host}");
            kinds.push(kind);
        }
        assert_eq!(
            kinds,
            [
                HandshakeKind::Full,
                HandshakeKind::Resumed,
                HandshakeKind::Resumed
            ],
            "{host}"
        );
        for served in server.await.unwrap() {
            let served = served.unwrap();
            assert_eq!(served.alpn.as_deref(), Some(alpn), "{host}");
        }
        assert_eq!(m.stats().misses, 1, "{host}");
    }
}
