//! Cost of intercepting HTTPS: a full TLS handshake over loopback with a
//! cached leaf certificate versus one minted for a new host, a resumed
//! handshake, and minting alone.
//!
//! Run with `cargo bench --bench tls`.

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use robots_proxy::tls::{self, Ca, Minter};
use rustls::client::Resumption;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, HandshakeKind, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio_rustls::TlsConnector;

/// Serves `Minter::accept` on loopback; each connection gets one byte once
/// the server side of the handshake is complete.
async fn server(minter: Arc<Minter>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let minter = minter.clone();
            tokio::spawn(async move {
                if let Ok((mut tls, _)) = minter.accept(tcp, "localhost").await {
                    let _ = tls.write_all(b"!").await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    addr
}

fn connector(minter: &Minter, resume: bool) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    roots.add(minter.ca().cert_der().clone()).unwrap();
    let mut config = ClientConfig::builder_with_provider(tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    if !resume {
        config.resumption = Resumption::disabled();
    }
    TlsConnector::from(Arc::new(config))
}

async fn handshake(
    connector: &TlsConnector,
    addr: SocketAddr,
    host: String,
) -> Option<HandshakeKind> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let name = ServerName::try_from(host).unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    let mut byte = [0u8; 1];
    tls.read_exact(&mut byte).await.unwrap();
    tls.get_ref().1.handshake_kind()
}

fn benches(c: &mut Criterion) {
    // One thread for client and server: the figure is the CPU both sides
    // spend, without scheduling noise from a shared machine.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let minter = Arc::new(Minter::new(Ca::generate().unwrap(), 1024).unwrap());
    let addr = rt.block_on(server(minter.clone()));
    let full = connector(&minter, false);
    let resuming = connector(&minter, true);
    let counter = AtomicU64::new(0);
    let fresh_host = || format!("h{}.bench.test", counter.fetch_add(1, Ordering::Relaxed));

    // Check that each case measures what its name says.
    for _ in 0..2 {
        let kind = run(&rt, handshake(&full, addr, "cached.bench.test".into()));
        assert_eq!(kind, Some(HandshakeKind::Full));
    }
    run(&rt, handshake(&resuming, addr, "resumed.bench.test".into()));
    let kind = run(&rt, handshake(&resuming, addr, "resumed.bench.test".into()));
    assert_eq!(kind, Some(HandshakeKind::Resumed));
    let misses = minter.stats().misses;
    run(&rt, handshake(&full, addr, fresh_host()));
    assert_eq!(minter.stats().misses, misses + 1);

    let mut group = c.benchmark_group("handshake");
    group.bench_function("cached_leaf", |b| {
        b.iter(|| run(&rt, handshake(&full, addr, "cached.bench.test".into())))
    });
    group.bench_function("fresh_leaf", |b| {
        b.iter(|| run(&rt, handshake(&full, addr, fresh_host())))
    });
    group.bench_function("resumed", |b| {
        b.iter(|| run(&rt, handshake(&resuming, addr, "resumed.bench.test".into())))
    });
    group.finish();

    let mut group = c.benchmark_group("mint");
    group.bench_function("sign_leaf", |b| {
        b.iter(|| black_box(minter.mint_certificate("mint.bench.test").unwrap()))
    });
    group.bench_function("server_config_miss", |b| {
        b.iter(|| black_box(minter.server_config(&fresh_host()).unwrap()))
    });
    group.bench_function("server_config_hit", |b| {
        b.iter(|| black_box(minter.server_config("cached.bench.test").unwrap()))
    });
    // What a per-host key (instead of the shared one) would add to a mint.
    group.bench_function("p256_keygen", |b| {
        b.iter(|| black_box(rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap()))
    });
    group.finish();
}

fn run<F: std::future::Future>(rt: &Runtime, f: F) -> F::Output {
    rt.block_on(f)
}

criterion_group! {
    name = tls_benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = benches
}
criterion_main!(tls_benches);
