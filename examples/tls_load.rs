//! A load client for HTTPS through a CONNECT proxy (which wrk cannot do),
//! or straight to a TLS server, for bench/tls-cost.
//!
//! Modes:
//! - `keep`: each connection opens once (CONNECT, TLS handshake) and then
//!   sends requests one after another until the time is up;
//! - `new`: each request on a connection of its own (CONNECT, a full TLS
//!   handshake, the request, close);
//! - `resume`: as `new`, resuming the TLS session of an earlier connection
//!   (tickets or session IDs, as the server offers), as a client that keeps
//!   its sessions does.
//!
//! - `plain`: as `keep`, but plain HTTP requests in absolute form to the
//!   proxy (what a forwarded `http://` request costs, with the same client).
//!
//! Prints one line: `RESULT requests=N p99_us=P resumed=R` (R: handshakes
//! that resumed a session).
//!
//! ```sh
//! cargo run --release --example tls_load -- --proxy 127.0.0.1:3128 \
//!     --target 127.0.0.1:8443 --ca ca.pem --path /small.html \
//!     --mode keep --conns 32 --seconds 4
//! ```
//! `--host NAME` asks for NAME (CONNECT, SNI, Host) instead of the
//! target's address, for a proxy that resolves it (Squid's `hosts_file`).
//! With `--sync DIR`, the kept-alive modes open their connections first
//! (one request each), then the client creates `DIR/ready` and waits for
//! `DIR/go` before the timed requests (so that a profiler can start
//! counting after the handshakes).
//!
//! Without `--proxy` it connects to the target directly (a TLS-terminating
//! server or reverse proxy). `--ca` names the PEM file of the CA that signs
//! the certificate the client sees (the proxy's `ca.pem` when it intercepts).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls::client::Resumption;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Keep,
    New,
    Resume,
    Plain,
}

struct Options {
    proxy: Option<SocketAddr>,
    target: SocketAddr,
    /// The name asked for in CONNECT, SNI and Host (the target's address
    /// by default).
    host: Option<String>,
    ca: String,
    path: String,
    mode: Mode,
    conns: usize,
    seconds: f64,
    sync: Option<std::path::PathBuf>,
}

fn options() -> Result<Options, Error> {
    let mut args = std::env::args().skip(1);
    let (mut proxy, mut target, mut ca, mut sync, mut host) = (None, None, None, None, None);
    let (mut path, mut mode, mut conns, mut seconds) = ("/".to_string(), Mode::Keep, 32, 4.0);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--proxy" => proxy = Some(value.parse()?),
            "--target" => target = Some(value.parse()?),
            "--ca" => ca = Some(value),
            "--host" => host = Some(value),
            "--path" => path = value,
            "--sync" => sync = Some(value.into()),
            "--conns" => conns = value.parse()?,
            "--seconds" => seconds = value.parse()?,
            "--mode" => {
                mode = match value.as_str() {
                    "keep" => Mode::Keep,
                    "new" => Mode::New,
                    "resume" => Mode::Resume,
                    "plain" => Mode::Plain,
                    _ => return Err(format!("--mode {value}: keep, new, resume or plain").into()),
                }
            }
            _ => return Err(format!("unknown option {flag}").into()),
        }
    }
    Ok(Options {
        proxy,
        target: target.ok_or("--target HOST:PORT is needed")?,
        host,
        ca: ca.unwrap_or_default(),
        path,
        mode,
        conns,
        seconds,
        sync,
    })
}

fn client_config(ca: Option<&str>, mode: Mode) -> Result<Arc<rustls::ClientConfig>, Error> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in ca
        .map(CertificateDer::pem_file_iter)
        .transpose()?
        .into_iter()
        .flatten()
    {
        roots.add(cert?)?;
    }
    // ring's own suite order (AES-256-GCM first, as OpenSSL's clients),
    // not the proxy's.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    if mode != Mode::Resume {
        config.resumption = Resumption::disabled();
    }
    Ok(Arc::new(config))
}

/// A TLS stream to the target, through a CONNECT tunnel when there is a
/// proxy; also whether the handshake resumed a session.
async fn open(
    o: &Options,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<(tokio_rustls::client::TlsStream<TcpStream>, bool), Error> {
    let mut stream = TcpStream::connect(o.proxy.unwrap_or(o.target)).await?;
    stream.set_nodelay(true)?;
    let host = o.host.clone().unwrap_or_else(|| o.target.ip().to_string());
    if o.proxy.is_some() {
        let port = o.target.port();
        let connect = format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n");
        stream.write_all(connect.as_bytes()).await?;
        // The answer has no body: read up to its blank line, no further.
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await? == 0 {
                return Err("the proxy closed the connection".into());
            }
            head.push(byte[0]);
        }
        if !head.starts_with(b"HTTP/1.1 200") {
            return Err(String::from_utf8_lossy(&head).into_owned().into());
        }
    }
    let name = ServerName::try_from(host)?;
    let tls = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, stream)
        .await?;
    let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    Ok((tls, resumed))
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn get(o: &Options, sender: &mut Sender) -> Result<(), Error> {
    let uri = match o.mode {
        Mode::Plain => format!("http://{}{}", o.target, o.path),
        _ => o.path.clone(),
    };
    let host = match &o.host {
        Some(name) => format!("{name}:{}", o.target.port()),
        None => o.target.to_string(),
    };
    let req = Request::get(uri).header("host", host).body(Empty::new())?;
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    resp.into_body().collect().await?;
    if !status.is_success() {
        return Err(format!("status {status}").into());
    }
    Ok(())
}

async fn connection(o: &Options, tls: &Arc<rustls::ClientConfig>) -> Result<(Sender, bool), Error> {
    if o.mode == Mode::Plain {
        let stream = TcpStream::connect(o.proxy.ok_or("--mode plain needs --proxy")?).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        return Ok((sender, false));
    }
    let (stream, resumed) = open(o, tls).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok((sender, resumed))
}

/// One client until the deadline: its latencies.
async fn client(
    o: Arc<Options>,
    tls: Arc<rustls::ClientConfig>,
    deadline: Instant,
    resumed: Arc<AtomicU64>,
    mut kept: Option<Sender>,
) -> Result<Vec<Duration>, Error> {
    let mut latencies = Vec::new();
    while Instant::now() < deadline {
        let start = Instant::now();
        let mut sender = match kept.take() {
            Some(sender) => sender,
            None => {
                let (sender, again) = connection(&o, &tls).await?;
                resumed.fetch_add(u64::from(again), Ordering::Relaxed);
                sender
            }
        };
        get(&o, &mut sender).await?;
        if matches!(o.mode, Mode::Keep | Mode::Plain) {
            kept = Some(sender);
        }
        latencies.push(start.elapsed());
    }
    Ok(latencies)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let o = Arc::new(options()?);
    let tls = match o.mode {
        Mode::Plain => client_config(None, o.mode)?,
        _ => {
            let ca = Some(o.ca.as_str()).filter(|ca| !ca.is_empty());
            client_config(Some(ca.ok_or("--ca FILE is needed")?), o.mode)?
        }
    };
    if o.mode == Mode::Resume {
        // A first session for the clients to resume.
        connection(&o, &tls).await?;
    }
    let mut opened: Vec<Option<Sender>> = (0..o.conns).map(|_| None).collect();
    if let Some(dir) = &o.sync {
        if matches!(o.mode, Mode::Keep | Mode::Plain) {
            for slot in opened.iter_mut() {
                let (mut sender, _) = connection(&o, &tls).await?;
                get(&o, &mut sender).await?;
                *slot = Some(sender);
            }
        }
        std::fs::write(dir.join("ready"), "")?;
        while !dir.join("go").exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs_f64(o.seconds);
    let resumed = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = opened
        .into_iter()
        .map(|kept| {
            let (o, tls, resumed) = (o.clone(), tls.clone(), resumed.clone());
            tokio::spawn(client(o, tls, deadline, resumed, kept))
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    all.sort();
    let p99 = all
        .get((all.len() * 99 / 100).min(all.len().saturating_sub(1)))
        .map_or(0, Duration::as_micros);
    println!(
        "RESULT requests={} p99_us={p99} resumed={}",
        all.len(),
        resumed.load(Ordering::Relaxed)
    );
    Ok(())
}
