//! The pooled upstream client shared by forwarding and robots.txt fetches.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::net::GuardedResolver;

/// Body type used on both sides of the proxy: streams, never buffered whole.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// The upstream client: HTTP/1.1 and HTTP/2 (by ALPN), http and https.
pub type HttpClient = Client<HttpsConnector<HttpConnector<GuardedResolver>>, Body>;

/// An empty body.
pub fn empty_body() -> Body {
    Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed()
}

/// A body holding `bytes`.
pub fn full_body(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// Settings for [`build_client`].
#[derive(Clone, Debug)]
pub struct ClientSettings {
    pub allow_private: bool,
    pub connect_timeout: Duration,
    pub pool_idle_per_host: usize,
    pub pool_idle_timeout: Duration,
}

/// Builds the upstream client with `tls` as its rustls configuration.
pub fn build_client(settings: &ClientSettings, tls: Arc<rustls::ClientConfig>) -> HttpClient {
    let mut http = HttpConnector::new_with_resolver(GuardedResolver {
        allow_private: settings.allow_private,
    });
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(settings.connect_timeout));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((*tls).clone())
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .pool_max_idle_per_host(settings.pool_idle_per_host)
        .pool_idle_timeout(settings.pool_idle_timeout)
        .build(https)
}

/// A rustls client configuration trusting the compiled-in Mozilla roots
/// (webpki-roots) and every certificate in `extra_pem_files`.
pub fn default_tls_config(
    extra_pem_files: &[std::path::PathBuf],
) -> Result<rustls::ClientConfig, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for path in extra_pem_files {
        let mut n = 0;
        for cert in CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        {
            let cert = cert.map_err(|e| format!("bad PEM in {}: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("bad certificate in {}: {e}", path.display()))?;
            n += 1;
        }
        if n == 0 {
            return Err(format!("{} holds no certificate", path.display()));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // ALPN is set by hyper-rustls (h2, http/1.1); it must not be preset here.
    Ok(config)
}
