//! The upstream side of TLS over real loopback sockets: the trust
//! configuration (extra CA files), the proxy's own client, and the reasons
//! its errors give, against servers whose certificates the proxy's CA
//! mints.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;

use crate::tls::{self, Ca, Minter, TlsError};

fn minter() -> Minter {
    Minter::new(Ca::generate().unwrap(), 16).unwrap()
}

/// A TLS client with the proxy's own upstream trust: the built-in roots
/// and `ca_pem` as an extra CA file.
fn client_trusting(ca_pem: &str) -> TlsConnector {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ca.pem");
    std::fs::write(&file, ca_pem).unwrap();
    let (config, _) = super::tls::client_config_with(&[file], false).unwrap();
    TlsConnector::from(Arc::new(config))
}

/// Accepts one connection with `Minter::accept`, as after a CONNECT to
/// `connect_host`, and answers "hello" over TLS.
async fn intercepting_server(
    minter: Arc<Minter>,
    connect_host: &str,
) -> (SocketAddr, tokio::task::JoinHandle<Result<(), TlsError>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connect_host = connect_host.to_owned();
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let (mut stream, _) = minter.accept(tcp, &connect_host).await?;
        stream.write_all(b"hello").await.unwrap();
        stream.shutdown().await.unwrap();
        Ok(())
    });
    (addr, task)
}

/// Connects, completes the handshake, reads the greeting.
async fn connect(
    connector: &TlsConnector,
    addr: SocketAddr,
    name: ServerName<'static>,
) -> std::io::Result<()> {
    let tcp = TcpStream::connect(addr).await?;
    let mut stream = connector.connect(name, tcp).await?;
    let mut greeting = Vec::new();
    stream.read_to_end(&mut greeting).await?;
    assert_eq!(greeting, b"hello");
    Ok(())
}

#[tokio::test]
async fn wrong_host_certificate_is_rejected_by_the_client() {
    // Without SNI the client checks the CONNECT host's certificate against
    // the IP it wanted: a mismatch must fail, proving names are checked.
    let m = Arc::new(minter());
    let connector = client_trusting(&m.ca().cert_pem());
    let (addr, server) = intercepting_server(m.clone(), "10.0.0.1").await;
    let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
    let err = connect(&connector, addr, name).await.unwrap_err();
    let reason = super::tls::upstream_error_reason(&err, "127.0.0.1");
    eprintln!("reason: {reason}");
    assert!(reason.contains("name mismatch"), "{reason}");
    assert!(reason.ends_with("is for 10.0.0.1"), "{reason}");
    assert!(server.await.unwrap().is_err());
}

/// An HTTPS server on loopback whose certificate comes from `minter`,
/// answering every request with "upstream ok" over HTTP/1.1 or HTTP/2.
async fn https_origin(minter: Arc<Minter>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let minter = minter.clone();
            tokio::spawn(async move {
                let Ok((tls, _)) = minter.accept(tcp, "localhost").await else {
                    return;
                };
                let service = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                        Bytes::from_static(b"upstream ok"),
                    )))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    addr
}

/// The proxy's own upstream client (destination guard included), with
/// private destinations allowed for the loopback origins here.
fn http_client(config: ClientConfig) -> super::HttpClient {
    let settings = super::ClientSettings {
        policy: crate::http::destination::Policy::new(true),
        connect_timeout: std::time::Duration::from_secs(5),
        pool_idle_per_host: 0,
        pool_idle_max: 0,
        pool_idle_timeout: std::time::Duration::from_secs(1),
    };
    super::build_client(&settings, Arc::new(config))
}

#[tokio::test]
async fn upstream_trusts_a_loopback_server_through_an_extra_ca_file() {
    let origin_ca = Ca::generate().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let ca_file = tmp.path().join("internal-ca.pem");
    // A bundle: the relevant CA after an unrelated one.
    let bundle = Ca::generate().unwrap().cert_pem() + &origin_ca.cert_pem();
    std::fs::write(&ca_file, bundle).unwrap();
    let addr = https_origin(Arc::new(Minter::new(origin_ca, 4).unwrap())).await;
    let uri: hyper::Uri = format!("https://localhost:{}/", addr.port())
        .parse()
        .unwrap();

    let (config, stats) =
        super::tls::client_config_with(std::slice::from_ref(&ca_file), false).unwrap();
    assert_eq!(stats.extra, 2);
    assert!(stats.webpki > 100, "{stats:?}");
    let resp = http_client(config).get(uri.clone()).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), hyper::Version::HTTP_2, "ALPN h2");
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"upstream ok");

    // The full config (with the system store) works too.
    let config = super::tls::client_config(std::slice::from_ref(&ca_file)).unwrap();
    let resp = http_client(config).get(uri.clone()).await.unwrap();
    assert_eq!(resp.status(), 200);

    // Without the file the proxy's own roots do not know the issuer.
    let config = super::tls::client_config(&[]).unwrap();
    let err = http_client(config).get(uri).await.unwrap_err();
    let reason = super::tls::upstream_error_reason(&err, "localhost");
    eprintln!("reason: {reason}");
    assert!(reason.contains("UnknownIssuer"), "{reason}");
    assert!(
        reason.contains("not trusted") && reason.contains("localhost"),
        "{reason}"
    );
}

#[tokio::test]
async fn upstream_error_reasons_for_expired_and_refused() {
    // An origin with an expired certificate from a CA the client trusts.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let mut leaf = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    leaf.not_before = rcgen::date_time_ymd(2020, 1, 1);
    leaf.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
    let server_config = rustls::ServerConfig::builder_with_provider(tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf_cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let _ = acceptor.accept(tcp).await;
    });

    let connector = client_trusting(&ca_cert.pem());
    let tcp = TcpStream::connect(addr).await.unwrap();
    let err = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap_err();
    let reason = super::tls::upstream_error_reason(&err, "localhost");
    eprintln!("reason: {reason}");
    assert!(reason.contains("expired at 2021-01-01"), "{reason}");

    // A port nobody listens on.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let client = http_client(super::tls::client_config_with(&[], false).unwrap().0);
    let uri: hyper::Uri = format!("https://localhost:{port}/").parse().unwrap();
    let err = client.get(uri).await.unwrap_err();
    let reason = super::tls::upstream_error_reason(&err, "localhost");
    eprintln!("reason: {reason}");
    assert_eq!(reason, "connection refused by localhost");
}

#[test]
fn extra_ca_files_must_hold_certificates() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty.pem");
    std::fs::write(&empty, "# nothing here\n").unwrap();
    let err = super::tls::client_config_with(std::slice::from_ref(&empty), false).unwrap_err();
    assert!(matches!(err, TlsError::NoCertificate { .. }), "{err:?}");
    assert!(err.to_string().contains("empty.pem"), "{err}");

    // A key file given by mistake.
    let dir = tmp.path().join("ca");
    Ca::generate().unwrap().write(&dir).unwrap();
    let err = super::tls::client_config_with(&[dir.join("ca.key")], false).unwrap_err();
    assert!(matches!(err, TlsError::NoCertificate { .. }), "{err:?}");

    let missing = tmp.path().join("missing.pem");
    let err = super::tls::client_config_with(&[missing], false).unwrap_err();
    assert!(matches!(err, TlsError::Missing { .. }), "{err:?}");
    assert!(err.to_string().contains("missing.pem"), "{err}");
}

#[tokio::test]
async fn upstream_name_mismatch_lists_the_certificate_names() {
    // A certificate for localhost, reached under another name.
    let m = minter();
    let acceptor = tokio_rustls::TlsAcceptor::from(m.server_config("localhost").unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let _ = acceptor.accept(tcp).await;
    });
    let connector = client_trusting(&m.ca().cert_pem());
    let tcp = TcpStream::connect(addr).await.unwrap();
    let err = connector
        .connect(ServerName::try_from("www.example.test").unwrap(), tcp)
        .await
        .unwrap_err();
    let reason = super::tls::upstream_error_reason(&err, "www.example.test");
    eprintln!("reason: {reason}");
    assert_eq!(
        reason,
        "certificate name mismatch: the certificate of www.example.test is for localhost"
    );
}

#[tokio::test]
async fn a_client_without_the_ca_is_recognised_in_the_error() {
    let m = Arc::new(minter());
    let other_ca = Ca::generate().unwrap();
    let connector = client_trusting(&other_ca.cert_pem());
    let (addr, server) = intercepting_server(m, "localhost").await;
    let err = connect(&connector, addr, ServerName::try_from("localhost").unwrap())
        .await
        .unwrap_err();
    assert!(super::tls::upstream_error_reason(&err, "localhost").contains("UnknownIssuer"));
    let server_err = server.await.unwrap().unwrap_err();
    assert!(server_err.client_distrusts_ca(), "{server_err:?}");
    assert!(
        server_err
            .to_string()
            .starts_with("TLS handshake with client failed")
    );
}
