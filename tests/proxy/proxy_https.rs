//! HTTPS through the proxy: CONNECT interception with the proxy's CA,
//! verified upstream TLS to a loopback origin whose certificate comes from a
//! test CA, the no-intercept list, HTTP/2 inside the tunnel, curl end to end.

use rustls_pki_types::ServerName;

use crate::support;
use crate::support::tls::{
    ca_cert, connect, https_get, proxy_trusting, proxy_trusting_with, tls_origin,
    tls_origin_offering, tls_origin_with_robots, tls_trusting,
};
use crate::support::{Conn, Origin, Proxy, admin, get_with, metric, requests_total};

#[tokio::test]
async fn intercepted_https_allowed_path_returns_the_origins_body() {
    let o = tls_origin_with_robots("127.0.0.1", "User-agent: *\nDisallow: /private\n").await;
    o.origin
        .route("/hello", support::Reply::ok("hello over tls"));
    let proxy = proxy_trusting(&o).await;
    let resp = o.get_via(&proxy, "127.0.0.1", "/hello", false).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, "hello over tls");
    // robots.txt was fetched from the origin itself, over HTTPS.
    assert_eq!(o.origin.hits("/robots.txt"), 1);
}

#[tokio::test]
async fn intercepted_https_disallowed_path_gets_403_and_never_reaches_the_origin() {
    let o = tls_origin_with_robots("127.0.0.1", "User-agent: *\nDisallow: /private\n").await;
    let proxy = proxy_trusting(&o).await;
    let port = o.origin.addr.port();
    let resp = o.get_via(&proxy, "127.0.0.1", "/private/x", false).await;
    assert_eq!(resp.status, 403);
    assert!(
        resp.body.contains("line 2: Disallow: /private"),
        "{}",
        resp.body
    );
    assert_eq!(o.origin.hits("/private/x"), 0);
    let line = proxy.only_audit_line();
    assert_eq!(line["url"], format!("https://127.0.0.1:{port}/private/x"));
    assert_eq!(
        line["robots_url"],
        format!("https://127.0.0.1:{port}/robots.txt")
    );
    assert_eq!(line["decision"], "disallowed");
}

#[tokio::test]
async fn intercepted_https_by_name_uses_sni_and_a_dns_certificate() {
    let o = tls_origin_with_robots("localhost", "User-agent: *\nDisallow: /no\n").await;
    let proxy = proxy_trusting(&o).await;
    assert_eq!(
        o.get_via(&proxy, "localhost", "/yes", false).await.status,
        200
    );
    assert_eq!(
        o.get_via(&proxy, "localhost", "/no", false).await.status,
        403
    );
}

#[tokio::test]
async fn http2_inside_the_tunnel_and_upstream() {
    let o = tls_origin_with_robots("127.0.0.1", "User-agent: *\nDisallow: /no\n").await;
    let proxy = proxy_trusting(&o).await;
    let resp = o.get_via(&proxy, "127.0.0.1", "/page", true).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, "page /page");
    assert_eq!(
        o.get_via(&proxy, "127.0.0.1", "/no", true).await.status,
        403
    );
    // The origin offers h2 by ALPN, so the proxy used it upstream too.
    let versions = o.origin.versions.lock().expect("versions").clone();
    assert!(
        versions.iter().all(|v| *v == http::Version::HTTP_2),
        "{versions:?}"
    );
}

/// An origin that speaks HTTP/1.1 only: the requests of several
/// intercepted tunnels go over one kept-alive upstream connection.
#[tokio::test]
async fn intercepted_requests_share_a_kept_alive_http1_upstream_connection() {
    let o = tls_origin_offering("127.0.0.1", &[b"http/1.1"]).await;
    o.origin.robots("User-agent: *\nDisallow: /no\n");
    let proxy = proxy_trusting(&o).await;
    for path in ["/a", "/b", "/c"] {
        let resp = o.get_via(&proxy, "127.0.0.1", path, false).await;
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body, format!("page {path}"));
    }
    // robots.txt fetches keep no connection: one each, and one for the rest.
    let connections = o
        .origin
        .connections
        .load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(connections, o.origin.hits("/robots.txt") + 1);
    let versions = o.origin.versions.lock().expect("versions").clone();
    assert!(
        versions.iter().all(|v| *v == http::Version::HTTP_11),
        "{versions:?}"
    );
}

#[tokio::test]
async fn untrusted_upstream_certificate_is_a_502_that_says_why() {
    let o = tls_origin_with_robots("127.0.0.1", "User-agent: *\nDisallow:\n").await;
    // This proxy does not trust the origin's CA.
    let proxy = Proxy::start().await;
    let resp = o.get_via(&proxy, "127.0.0.1", "/x", false).await;
    assert_eq!(resp.status, 502);
    assert!(resp.body.contains("not trusted"), "{}", resp.body);
    assert_eq!(o.origin.hits("/x"), 0);
}

/// An origin that presents a CA certificate as its own (trusted as a CA
/// through `upstream.ca_files`): the 502 says so in words, not in the
/// verifier's debug form (`Other(OtherError(CaUsedAsEndEntity))`).
#[tokio::test]
async fn an_origin_presenting_a_ca_certificate_is_a_502_in_words() {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).expect("self-signed CA");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_file = dir.path().join("ca-as-leaf.pem");
    std::fs::write(&ca_file, cert.pem()).expect("write");
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .expect("server config");
    let origin = Origin::start_tls(std::sync::Arc::new(config)).await;
    origin.robots("User-agent: *\nDisallow:\n");
    let proxy = Proxy::start_with(move |c| c.upstream.ca_files = vec![ca_file]).await;
    let resp = https_get(&proxy, "127.0.0.1", origin.addr.port(), "/x", false).await;
    let says = "is a CA certificate, which cannot identify a server";
    resp.assert_says("a CA as the server's certificate", 502, &[says]);
    assert!(!resp.body.contains("OtherError"), "{}", resp.body);
    assert_eq!(origin.hits("/x"), 0);
}

/// A certificate the proxy did not trust is retried after a restart that
/// trusts its CA, without a purge: the kept robots.txt state (`bad_tls`)
/// depends on the configuration, which the restart changed.
#[tokio::test]
async fn an_untrusted_certificate_is_tried_again_after_a_restart_that_trusts_it() {
    let o = tls_origin_with_robots("127.0.0.1", "User-agent: *\nDisallow: /private\n").await;
    o.origin.route("/x", support::Reply::ok("x over tls"));
    let state = tempfile::tempdir().expect("tempdir");
    let dir = state.path().to_path_buf();
    let start = |trust: Option<std::path::PathBuf>| {
        let dir = dir.clone();
        Proxy::start_with(move |c| {
            c.audit.path = Some(dir.join("audit.jsonl"));
            c.state_dir = Some(dir);
            c.upstream.ca_files = trust.into_iter().collect();
        })
    };
    let mut first = start(None).await;
    let resp = o.get_via(&first, "127.0.0.1", "/x", false).await;
    assert_eq!(resp.status, 502, "{}", resp.body);
    first.stop();
    first.finished().await;

    let second = start(Some(o.ca_file.clone())).await;
    let resp = o.get_via(&second, "127.0.0.1", "/x", false).await;
    assert_eq!((resp.status, resp.body.as_str()), (200, "x over tls"));
    assert_eq!(o.origin.hits("/robots.txt"), 1);
}

#[tokio::test]
async fn no_intercept_host_is_tunnelled_blindly_and_audited() {
    let o = tls_origin_with_robots("localhost", "User-agent: *\nDisallow: /private\n").await;
    let proxy = proxy_trusting_with(&o, |c| {
        c.tls.no_intercept = vec!["localhost".into()];
    })
    .await;
    let port = o.origin.addr.port();
    // The client talks TLS with the origin itself: it must trust the origin's CA.
    let tunnel = connect(&proxy, &format!("localhost:{port}"))
        .await
        .expect("tunnel");
    let name = ServerName::try_from("localhost").expect("name");
    let tls = tls_trusting(tunnel, ca_cert(&o.ca_file), name, b"http/1.1").await;
    // Paths cannot be checked in a blind tunnel: even /private gets through.
    let resp = Conn::over(tls)
        .await
        .send(get_with("/private/x", &[("host", "localhost")]))
        .await;
    assert_eq!(resp.status, 200);
    let line = proxy.only_audit_line();
    assert_eq!(line["decision"], "tunnelled");
    assert_eq!(line["method"], "CONNECT");
}

#[tokio::test]
async fn no_intercept_host_whose_robots_disallows_everything_is_refused_at_connect() {
    let o = tls_origin_with_robots("localhost", "User-agent: *\nDisallow: /\n").await;
    let proxy = proxy_trusting_with(&o, |c| {
        c.tls.no_intercept = vec!["*.example".into(), "localhost".into()];
    })
    .await;
    let err = connect(&proxy, &format!("localhost:{}", o.origin.addr.port()))
        .await
        .expect_err("refused");
    assert!(err.starts_with("HTTP/1.1 403"), "{err}");
    let audit = proxy.audit();
    assert_eq!(audit[0]["decision"], "disallowed");
    assert_eq!(audit[0]["method"], "CONNECT");
}

#[tokio::test]
async fn plain_http_inside_connect_is_judged_as_http() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let proxy = Proxy::start().await;
    let tunnel = connect(&proxy, &origin.addr.to_string())
        .await
        .expect("tunnel");
    let mut conn = Conn::over(tunnel).await;
    let host = origin.addr.to_string();
    for (path, status) in [("/open", 200), ("/private/x", 403)] {
        let resp = conn.send(get_with(path, &[("host", &host)])).await;
        assert_eq!(resp.status, status, "{path}");
    }
    assert_eq!(origin.hits("/private/x"), 0);
    assert_eq!(proxy.audit()[0]["url"], origin.url("/private/x"));
}

#[tokio::test]
async fn connect_to_a_private_destination_is_refused_by_default() {
    let o = tls_origin("127.0.0.1").await;
    let proxy = Proxy::start_with(|c| c.allow_private_destinations = false).await;
    let err = connect(&proxy, &o.origin.addr.to_string())
        .await
        .expect_err("refused");
    assert!(err.starts_with("HTTP/1.1 403"), "{err}");
}

/// curl -x ... --cacert DIR/ca.pem, HTTP/1.1 and HTTP/2: HTTP/2 to a
/// host name; to a bare IP (no SNI) a client offering HTTP/1.1 too gets
/// it, as HTTP/2 clients that pool sessions by server name fail without
/// one.
#[tokio::test(flavor = "multi_thread")]
async fn curl_end_to_end_with_the_proxy_ca() {
    let named = tls_origin_with_robots("localhost", "User-agent: *\n").await;
    named.origin.route("/pub", support::Reply::ok("public"));
    let o = tls_origin_with_robots("127.0.0.1", "User-agent: *\nDisallow: /private\n").await;
    o.origin.route("/pub", support::Reply::ok("public"));
    let (ip_ca, named_ca) = (o.ca_file.clone(), named.ca_file.clone());
    let proxy = Proxy::start_with(move |c| c.upstream.ca_files = vec![ip_ca, named_ca]).await;
    let ca = proxy.state_dir.join("ca/ca.pem");
    let proxy_url = format!("http://{}", proxy.addr);
    let port = o.origin.addr.port();
    let named_port = named.origin.addr.port();
    let run = move |path: &str, extra: &[&str]| {
        let out = std::process::Command::new("curl")
            .args(["-s", "-S", "--max-time", "10", "-x", &proxy_url, "--cacert"])
            .arg(&ca)
            .args(extra)
            .args(["-w", "\n%{http_code} %{http_version}"])
            .arg(match path.strip_prefix("named:") {
                Some(path) => format!("https://localhost:{named_port}{path}"),
                None => format!("https://127.0.0.1:{port}{path}"),
            })
            .output()
            .expect("curl runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let results = tokio::task::spawn_blocking(move || {
        (
            run("/pub", &["--http1.1"]),
            run("named:/pub", &["--http2"]),
            run("/private/x", &[]),
            run("/pub", &["--http2"]),
        )
    })
    .await
    .expect("curl task");
    assert!(results.0.ends_with("public\n200 1.1"), "{}", results.0);
    assert!(results.1.ends_with("public\n200 2"), "{}", results.1);
    assert!(results.3.ends_with("public\n200 1.1"), "{}", results.3);
    assert!(
        results.2.contains("Disallow: /private") && results.2.contains("403"),
        "{}",
        results.2
    );
}

/// A tunnel, blind or intercepted, keeps its client connection's place
/// under `max_connections` until it closes (hyper is done with the
/// connection once it has handed the socket over).
#[tokio::test]
async fn an_open_tunnel_counts_against_max_connections() {
    let o = tls_origin("localhost").await;
    let plain = Origin::start().await;
    let proxy = proxy_trusting_with(&o, |c| {
        admin(c);
        c.max_connections = 1;
        c.tls.no_intercept = vec!["localhost".into()];
    })
    .await;
    let paused = |t: &str| metric(t, "robots_proxy_connection_limit_reached_total").unwrap_or(0.0);
    let port = o.origin.addr.port();
    // localhost is tunnelled blindly, 127.0.0.1 intercepted.
    for target in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let (before, served) = (paused(&proxy.metrics().await), plain.hits("/after"));
        let tunnel = connect(&proxy, &target).await.expect("tunnel");
        // The acceptor waits for a free connection once it has taken the
        // tunnel's: nothing more is accepted while the tunnel is open.
        let what = format!("{target}: the acceptor to wait at the limit");
        proxy.until_metrics(&what, |t| paused(t) > before).await;
        let (addr, url) = (proxy.addr, plain.url("/after"));
        let waiting = tokio::spawn(async move { support::Conn::open(addr).await.get(&url).await });
        proxy
            .assert_metric("robots_proxy_open_connections", 1.0, &target)
            .await;
        assert!(
            !waiting.is_finished(),
            "{target}: a client was served beside an open tunnel"
        );
        assert_eq!(plain.hits("/after"), served, "{target}");
        drop(tunnel);
        let resp = tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
            .await
            .expect("the waiting client is never served")
            .expect("client task");
        assert_eq!(resp.status, 200, "{target}: {resp:?}");
    }
}

/// With every decision logged, a blind tunnel is still one decision: one
/// audit line (`tunnelled`) and one count, not `allowed` as well.
#[tokio::test]
async fn a_blind_tunnel_is_recorded_and_counted_once_with_log_all() {
    let o = tls_origin_with_robots("localhost", "User-agent: *\nDisallow: /private\n").await;
    let proxy = proxy_trusting_with(&o, |c| {
        c.tls.no_intercept = vec!["localhost".into()];
        c.audit.log_all = true;
        admin(c);
    })
    .await;
    let port = o.origin.addr.port();
    let _tunnel = connect(&proxy, &format!("localhost:{port}"))
        .await
        .expect("tunnel");
    let line = proxy.only_audit_line();
    assert_eq!(line["decision"], "tunnelled");
    let metrics = proxy.metrics().await;
    assert_eq!(requests_total(&metrics, "tunnelled"), 1.0, "{metrics}");
    assert_eq!(requests_total(&metrics, "allowed"), 0.0, "{metrics}");
}

/// A client that keeps its TLS sessions (as curl does within one process,
/// and browsers) resumes on its next tunnel to the same host, and every
/// request on a resumed session is still judged by path.
#[tokio::test]
async fn a_returning_client_resumes_its_tls_session_and_is_still_judged() {
    use http_body_util::{BodyExt, Empty};
    use rustls::HandshakeKind;
    let o = tls_origin_with_robots("localhost", "User-agent: *\nDisallow: /no\n").await;
    let proxy = proxy_trusting(&o).await;
    let port = o.origin.addr.port();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(crate::support::tls::proxy_ca(&proxy))
        .expect("proxy CA");
    // rustls' client keeps sessions by default (an in-memory store).
    let mut config = rustls::ClientConfig::builder_with_provider(robots_proxy::tls::provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let mut seen = Vec::new();
    for path in ["/yes", "/yes", "/no"] {
        let tunnel = connect(&proxy, &format!("localhost:{port}"))
            .await
            .expect("tunnel");
        let name = ServerName::try_from("localhost").expect("name");
        let tls = connector.connect(name, tunnel).await.expect("TLS");
        let kind = tls.get_ref().1.handshake_kind().expect("handshake done");
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .expect("http1 handshake");
        let conn = tokio::spawn(conn);
        let req = http::Request::get(format!("https://localhost:{port}{path}"))
            .header(http::header::CONNECTION, "close")
            .body(Empty::<bytes::Bytes>::new())
            .expect("request");
        let resp = sender.send_request(req).await.expect("response");
        let status = resp.status().as_u16();
        resp.into_body().collect().await.expect("body");
        // The tickets came before the answer; the connection ends here.
        conn.await.expect("connection task").expect("connection");
        seen.push((kind, status));
    }
    assert_eq!(
        seen,
        [
            (HandshakeKind::Full, 200),
            (HandshakeKind::Resumed, 200),
            (HandshakeKind::Resumed, 403)
        ]
    );
    assert_eq!(o.origin.hits("/no"), 0);
}
