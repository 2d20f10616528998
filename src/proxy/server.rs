//! Accepting client connections: HTTP/1.1 with keep-alive and upgrades
//! (CONNECT), and graceful shutdown that lets in-flight requests finish.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, Request};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::Proxy;
use crate::metrics::ConnectionGuard;

/// How often reaching the connection limit is logged, at most.
const LIMIT_WARNING_EVERY: Duration = Duration::from_secs(60);

/// Serves `listener` until `shutdown` completes, then stops accepting and
/// waits up to `grace` for open connections to finish their requests.
/// With `max_connections` open, accepting pauses until one closes (new
/// clients wait in the kernel's listen queue). Returns the number of
/// connections still open when the grace ran out.
pub async fn serve(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
    max_connections: usize,
) -> usize {
    let (stop_tx, stop_rx) = watch::channel(false);
    let slots = Arc::new(Semaphore::new(
        max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let mut warned: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                proxy.metrics.connection_limit_reached();
                if warned.is_none_or(|t| t.elapsed() >= LIMIT_WARNING_EVERY) {
                    warned = Some(Instant::now());
                    tracing::warn!(
                        max_connections,
                        "connection limit reached: new clients wait until a connection closes"
                    );
                }
                tokio::select! {
                    _ = &mut shutdown => break,
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => break,
                    },
                }
            }
        };
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning
                        // (the client waits in the listen queue meanwhile).
                        warn_accept_failed(&e);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve_connection(stream, peer, proxy.clone(), stop_rx.clone(), slot));
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(stop_rx);
    match tokio::time::timeout(grace, stop_tx.closed()).await {
        Ok(()) => 0,
        Err(_) => stop_tx.receiver_count(),
    }
}

/// What a client connection holds while it is open: its place under
/// `max_connections` and its count in `robots_proxy_open_connections`.
/// A CONNECT request carries a clone in its extensions, so a tunnel keeps
/// both until it closes, long after hyper has handed the socket over.
pub struct ConnectionHold {
    _slot: OwnedSemaphorePermit,
    _open: ConnectionGuard,
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    proxy: Arc<Proxy>,
    mut stop: watch::Receiver<bool>,
    slot: OwnedSemaphorePermit,
) {
    let hold = Arc::new(ConnectionHold {
        _slot: slot,
        _open: proxy.metrics.connection_opened(),
    });
    let service = service_fn(move |mut req: Request<Incoming>| {
        if req.method() == Method::CONNECT {
            req.extensions_mut().insert(hold.clone());
        }
        let proxy = proxy.clone();
        async move { Ok::<_, std::convert::Infallible>(proxy.handle(peer, req).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(conn);
    let mut stopping = *stop.borrow();
    if stopping {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "client connection ended with an error");
                }
                break;
            }
            changed = stop.changed(), if !stopping => {
                stopping = true;
                if changed.is_ok() {
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// Logs a failed accept at most once per [`LIMIT_WARNING_EVERY`], with the
/// number left unlogged since: out of descriptors, accept fails 20 times a
/// second until one is freed.
fn warn_accept_failed(e: &std::io::Error) {
    static LAST: std::sync::Mutex<(Option<Instant>, u64)> = std::sync::Mutex::new((None, 0));
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    let (at, skipped) = &mut *last;
    if at.is_some_and(|t| t.elapsed() < LIMIT_WARNING_EVERY) {
        *skipped += 1;
        return;
    }
    tracing::warn!(error = %e, unlogged_since_last = *skipped,
        "accept failed: new clients wait in the listen queue (retrying every 50 ms)");
    *at = Some(Instant::now());
    *skipped = 0;
}
