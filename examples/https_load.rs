//! Throughput of cached-allowed HTTPS requests through robots-proxy, against
//! the same HTTPS origin served directly.
//!
//! Starts a loopback HTTPS origin (certificate from a throwaway CA), starts
//! the release binary as a child process trusting that CA, then runs
//! `CONNECTIONS` keep-alive clients for `SECONDS` each way: direct TLS to the
//! origin, and CONNECT + TLS (the proxy's minted certificate) through the
//! proxy. Prints requests/s and p50/p99 latency, plus the CONNECT+handshake
//! time through the proxy for a new host (minted leaf) and a cached one.
//!
//! `cargo build --release && cargo run --release --example https_load -- [CONNECTIONS] [SECONDS]`

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use robots_proxy::tls::{Ca, Minter};
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Error = Box<dyn std::error::Error + Send + Sync>;

async fn origin(config: Arc<rustls::ServerConfig>) -> Result<SocketAddr, Error> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let body = Bytes::from(vec![b'x'; 1400]);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, body) = (acceptor.clone(), body.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let body = if req.uri().path() == "/robots.txt" {
                        Bytes::from_static(b"User-agent: *\nDisallow: /private\n")
                    } else {
                        body.clone()
                    };
                    async move {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(body)))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    Ok(addr)
}

fn client_config(root: CertificateDer<'static>) -> Result<Arc<rustls::ClientConfig>, Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root)?;
    let mut config = rustls::ClientConfig::builder_with_provider(robots_proxy::tls::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A TLS stream to `target`, directly or through a CONNECT tunnel.
async fn open(
    proxy: Option<SocketAddr>,
    target: SocketAddr,
    host: &str,
    tls: Arc<rustls::ClientConfig>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Error> {
    let mut stream = TcpStream::connect(proxy.unwrap_or(target)).await?;
    stream.set_nodelay(true)?;
    if proxy.is_some() {
        let port = target.port();
        stream
            .write_all(
                format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n").as_bytes(),
            )
            .await?;
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await? == 0 {
                return Err("proxy closed the tunnel".into());
            }
            head.push(byte[0]);
        }
        if !head.starts_with(b"HTTP/1.1 200") {
            return Err(String::from_utf8_lossy(&head).into_owned().into());
        }
    }
    let name = ServerName::try_from(host.to_string())?;
    Ok(tokio_rustls::TlsConnector::from(tls)
        .connect(name, stream)
        .await?)
}

/// Runs `connections` keep-alive clients for `seconds`; returns latencies.
async fn load(
    proxy: Option<SocketAddr>,
    target: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    connections: usize,
    seconds: u64,
) -> Result<Vec<Duration>, Error> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let tls = tls.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let stream = open(proxy, target, "127.0.0.1", tls).await?;
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            while Instant::now() < deadline {
                let start = Instant::now();
                let req = Request::get("/page")
                    .header("host", format!("127.0.0.1:{}", target.port()))
                    .body(Full::new(Bytes::new()))?;
                let resp = sender.send_request(req).await?;
                let status = resp.status();
                resp.into_body().collect().await?;
                if !status.is_success() {
                    return Err::<Vec<Duration>, Error>(format!("status {status}").into());
                }
                lat.push(start.elapsed());
            }
            Ok(lat)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    all.sort();
    Ok(all)
}

fn report(name: &str, lat: &[Duration], seconds: u64) {
    let pct = |p: f64| lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)));
    println!(
        "{name:<10} {:>9.0} req/s   p50 {:>7.3} ms   p99 {:>7.3} ms",
        lat.len() as f64 / seconds as f64,
        pct(0.50).map_or(0.0, |d| d.as_secs_f64() * 1e3),
        pct(0.99).map_or(0.0, |d| d.as_secs_f64() * 1e3),
    );
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let connections: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(32);
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);

    let dir = tempfile::tempdir()?;
    let origin_ca = Ca::generate()?;
    let ca_file = dir.path().join("origin-ca.pem");
    std::fs::write(&ca_file, origin_ca.cert_pem())?;
    let origin_root = origin_ca.cert_der().clone();
    let server_config = Minter::new(origin_ca, 4)?.server_config("127.0.0.1")?;
    let target = origin(server_config).await?;

    let binary = concat!(env!("CARGO_MANIFEST_DIR"), "/target/release/robots-proxy");
    let mut child = Command::new(binary)
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--allow-private-destinations",
        ])
        .arg("--upstream-ca")
        .arg(&ca_file)
        .arg("--ca-dir")
        .arg(dir.path().join("ca"))
        .arg("--audit-log")
        .arg(dir.path().join("audit.jsonl"))
        .env("RUST_LOG", "warn,robots_proxy=info")
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{binary}: {e} (cargo build --release first)"))?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let proxy: SocketAddr = loop {
        let line = lines.next().ok_or("proxy exited")??;
        if let Some(i) = line.find("listen=") {
            let rest = &line[i + 7..];
            let end = rest.find(' ').unwrap_or(rest.len());
            break rest[..end].parse()?;
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let pem = std::fs::read(dir.path().join("ca/ca.pem"))?;
    let proxy_root = rustls_pki_types::pem::PemObject::pem_slice_iter(&pem)
        .next()
        .ok_or("no proxy CA")??;

    // Handshake cost through the proxy: first connection mints, the rest reuse.
    let proxy_tls = client_config(proxy_root)?;
    let mut times = Vec::new();
    for _ in 0..21 {
        let start = Instant::now();
        let _ = open(Some(proxy), target, "127.0.0.1", proxy_tls.clone()).await?;
        times.push(start.elapsed());
    }
    let fresh = times[0];
    let mut cached = times[1..].to_vec();
    cached.sort();
    println!(
        "CONNECT + TLS handshake through the proxy: new host (minted leaf) {:.3} ms, cached leaf median {:.3} ms",
        fresh.as_secs_f64() * 1e3,
        cached[cached.len() / 2].as_secs_f64() * 1e3
    );

    println!("{connections} connections, {seconds} s each, 1.4 KB body, HTTP/1.1 over TLS:");
    let direct_tls = client_config(origin_root)?;
    let direct = load(None, target, direct_tls, connections, seconds).await?;
    let proxied = load(Some(proxy), target, proxy_tls, connections, seconds).await?;
    report("direct", &direct, seconds);
    report("proxied", &proxied, seconds);
    println!(
        "ratio proxied/direct: {:.2}",
        proxied.len() as f64 / direct.len().max(1) as f64
    );
    let _ = child.kill();
    Ok(())
}
