//! HTTPS test helpers: an origin with a certificate from a test CA, a
//! proxy trusting that CA, and requests through intercepted tunnels.

use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use robots_proxy::tls::{Ca, Minter};
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{NO_HANG, Origin, Proxy, Resp};

/// A test CA, its PEM file, and an HTTPS origin whose certificate it signed.
pub struct TlsOrigin {
    pub origin: Origin,
    pub ca_file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

pub async fn tls_origin(host: &str) -> TlsOrigin {
    tls_origin_offering(host, &[b"h2", b"http/1.1"]).await
}

/// [`tls_origin`] offering the protocols `alpn` (none: no ALPN answer).
pub async fn tls_origin_offering(host: &str, alpn: &[&[u8]]) -> TlsOrigin {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, ca_file) = origin_config(host, dir.path());
    let mut config = (*config).clone();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let config = Arc::new(config);
    TlsOrigin {
        origin: Origin::start_tls(config).await,
        ca_file,
        _dir: dir,
    }
}

/// A server config for `host` whose certificate a new test CA signed, and
/// that CA's certificate written to `dir/origin-ca.pem` (to trust it).
pub fn origin_config(
    host: &str,
    dir: &std::path::Path,
) -> (Arc<rustls::ServerConfig>, std::path::PathBuf) {
    let ca = Ca::generate().expect("test CA");
    let ca_file = dir.join("origin-ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).expect("write CA");
    let minter = Minter::new(ca, 4).expect("minter");
    let config = minter.server_config(host).expect("origin config");
    (config, ca_file)
}

/// The first certificate of a PEM file (a CA's).
pub fn ca_cert(path: &std::path::Path) -> CertificateDer<'static> {
    let pem = std::fs::read(path).expect("CA PEM file");
    let mut certs = rustls_pki_types::pem::PemObject::pem_slice_iter(&pem);
    certs.next().expect("one cert").expect("valid PEM")
}

/// The proxy's CA certificate (created on first start in its state dir).
pub fn proxy_ca(proxy: &Proxy) -> CertificateDer<'static> {
    ca_cert(&proxy.state_dir.join("ca/ca.pem"))
}

/// Opens a CONNECT tunnel through the proxy; returns the stream after a 2xx,
/// or the response head of a refusal.
pub async fn connect(proxy: &Proxy, target: &str) -> Result<TcpStream, String> {
    connect_to(proxy.addr, target).await
}

/// Like [`connect`], through the proxy listening on `addr` (the binary's).
pub async fn connect_to(addr: std::net::SocketAddr, target: &str) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect(addr).await.expect("connect proxy");
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .expect("write CONNECT");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(NO_HANG, s.read(&mut byte)).await {
            Ok(Ok(1)) => head.push(byte[0]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    if text.starts_with("HTTP/1.1 200") {
        Ok(s)
    } else {
        Err(text)
    }
}

/// GET `path` on `host:port` through an intercepted tunnel, trusting only
/// the proxy's CA; `h2` negotiates HTTP/2 inside the tunnel.
pub async fn https_get(proxy: &Proxy, host: &str, port: u16, path: &str, h2: bool) -> Resp {
    try_https_get(proxy, host, port, path, h2)
        .await
        .expect("response")
}

/// Like [`https_get`]; a request the proxy answers with a stream or
/// connection error (not a response) is an `Err`.
pub async fn try_https_get(
    proxy: &Proxy,
    host: &str,
    port: u16,
    path: &str,
    h2: bool,
) -> Result<Resp, hyper::Error> {
    let tunnel = connect(proxy, &format!("{host}:{port}"))
        .await
        .expect("tunnel");
    let name = ServerName::try_from(host.to_string()).expect("server name");
    let alpn: &[u8] = if h2 { b"h2" } else { b"http/1.1" };
    let tls = proxy_tls(proxy, tunnel, name, alpn).await;
    let uri = format!("https://{host}:{port}{path}");
    let resp = if h2 {
        let (mut sender, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            TokioIo::new(tls),
        )
        .await
        .expect("h2 handshake");
        tokio::spawn(conn);
        let req = Request::get(uri)
            .body(Full::new(Bytes::new()))
            .expect("req");
        sender.send_request(req).await?
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        let req = Request::get(path)
            .header("host", format!("{host}:{port}"))
            .body(Full::new(Bytes::new()))
            .expect("req");
        sender.send_request(req).await?
    };
    let version = resp.version();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await?.to_bytes();
    if h2 {
        assert_eq!(version, http::Version::HTTP_2);
    }
    Ok(Resp {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

impl TlsOrigin {
    /// [`https_get`] of `path` on this origin, named `host`, through
    /// `proxy`'s interception; `h2` negotiates HTTP/2 inside the tunnel.
    pub async fn get_via(&self, proxy: &Proxy, host: &str, path: &str, h2: bool) -> Resp {
        https_get(proxy, host, self.origin.addr.port(), path, h2).await
    }
}

/// [`tls_origin`] whose `/robots.txt` is `text`.
pub async fn tls_origin_with_robots(host: &str, text: &str) -> TlsOrigin {
    let o = tls_origin(host).await;
    o.origin.robots(text);
    o
}

/// A proxy that trusts `origin`'s CA.
pub async fn proxy_trusting(origin: &TlsOrigin) -> Proxy {
    proxy_trusting_with(origin, |_| {}).await
}

/// [`proxy_trusting`], with `adjust` applied.
pub async fn proxy_trusting_with(
    origin: &TlsOrigin,
    adjust: impl FnOnce(&mut robots_proxy::config::Config),
) -> Proxy {
    let ca_file = origin.ca_file.clone();
    Proxy::start_with(move |c| {
        c.upstream.ca_files = vec![ca_file];
        adjust(c);
    })
    .await
}

/// TLS over `io` (a tunnel through the proxy) to `name`, trusting only the
/// proxy's CA (so the certificate is the one it minted), offering `alpn`.
pub async fn proxy_tls<IO>(
    proxy: &Proxy,
    io: IO,
    name: ServerName<'static>,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<IO>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    tls_trusting(io, proxy_ca(proxy), name, alpn).await
}

/// TLS over `io` to `name`, trusting only `ca`, offering `alpn`.
pub async fn tls_trusting<IO>(
    io: IO,
    ca: CertificateDer<'static>,
    name: ServerName<'static>,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<IO>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).expect("add root");
    let mut config = rustls::ClientConfig::builder_with_provider(robots_proxy::tls::provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, io)
        .await
        .expect("TLS with the trusted CA's certificate")
}
