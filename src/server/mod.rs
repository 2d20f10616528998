//! Accepting client connections: admission at accept (client allow-list,
//! per-address cap, `max_connections`), HTTP/1.1 with keep-alive and
//! upgrades (CONNECT), and graceful shutdown that lets in-flight requests
//! finish, inside intercepted tunnels as well.

mod conn;
mod drive;
mod h1;
pub(crate) mod io;
pub(crate) mod listen;
pub(crate) mod metrics;
pub(crate) mod per_client;
pub(crate) mod relay;
mod threads;

pub(crate) use drive::{InFlight, answered_malformed, drive};
use per_client::{ClientSlot, PerClient};
use threads::{ServingThread, ThreadLoad, start_threads};

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::{Request, Response};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::Instant;

use crate::http::body::Body;
use crate::metrics::GaugeGuard;
use crate::server::listen::LIMIT_WARNING_EVERY;
pub(crate) use crate::server::listen::{ConnectionPolicy, RefusalLog};
use crate::server::metrics::{ConnRefusal, ServerMetrics};

/// What the server serves, seen from below: the proxy implements it, so
/// that accepting and driving connections know nothing of the phases.
pub(crate) trait Handler: Send + Sync + 'static {
    /// What a connection gives each of its requests (taken once, when it
    /// is accepted).
    type Connection: Clone + Send + Sync + 'static;
    fn server_metrics(&self) -> &ServerMetrics;
    /// True if `ip` may use the proxy now (`access.allow_clients`).
    fn admits(&self, ip: IpAddr) -> bool;
    fn shutdown_grace(&self) -> Duration;
    fn header_timeout(&self) -> Duration;
    fn connection(&self, peer: SocketAddr) -> Self::Connection;
    fn handle(
        self: Arc<Self>,
        peer: SocketAddr,
        connection: Self::Connection,
        req: Request<Body>,
    ) -> impl Future<Output = Response<Body>> + Send;
    /// Counts a request hyper answered itself (malformed: 400, 431, 505).
    fn count_malformed(&self);
}

/// Where a listener is in its life; every connection and tunnel watches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    Serving,
    /// Shutdown began: finish the requests in flight, then close.
    Draining,
    /// The grace period is over: close whatever is still open.
    Cut,
}

/// A connection's view of its listener's [`Lifecycle`].
pub(crate) type Stop = watch::Receiver<Lifecycle>;

/// AcceptLimits applied when a connection is accepted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AcceptLimits {
    /// Client connections open at once; beyond it accepting pauses.
    pub(crate) max_connections: usize,
    /// Client connections open at once from one address; beyond it new
    /// ones are closed at accept.
    pub(crate) per_client: usize,
    /// Threads serving connections (`workers`), the calling one included.
    pub(crate) threads: usize,
}

/// Serves `listener` until `shutdown` completes, then stops accepting and
/// waits up to `grace` for open connections (tunnels included) to finish
/// their requests. With `max_connections` open, accepting pauses until one
/// closes (new clients wait in the kernel's listen queue). A client whose
/// address is not in `access.allow_clients`, or that already has
/// `per_client` connections open, is closed at accept before a byte is
/// read. Returns the number of connections still open when the grace ran
/// out (`shutdown_grace` as in force when shutdown begins); they are
/// closed then.
///
/// Connections are served on `limits.threads` threads: the calling
/// runtime's and as many more less one, each an event loop of its own (a
/// current-thread runtime). Each accepted connection goes to the thread
/// with the fewest open, and stays there to its end with its requests and
/// the upstream connections they take, so a request over HTTP/1.1 upstream
/// never waits for a wake-up from another thread (HTTP/2 origins and
/// requests with a body share hyper-util's pooled client, robots.txt fetches and the
/// response cache's collapsed misses are shared by all threads).
pub(crate) async fn serve<H: Handler>(
    listener: TcpListener,
    proxy: Arc<H>,
    shutdown: impl Future<Output = ()>,
    limits: AcceptLimits,
) -> usize {
    let (phase_tx, phase_rx) = watch::channel(Lifecycle::Serving);
    // One receiver per open connection (in its hold): the count of open
    // connections, and `closed()` when the last one is gone.
    let (alive_tx, alive_rx) = watch::channel(());
    let (threads, handles) = start_threads(&proxy, &phase_rx, limits.threads.saturating_sub(1));
    let acceptor = Acceptor {
        slots: Arc::new(Semaphore::new(
            limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
        )),
        max_connections: limits.max_connections,
        per_client: PerClient::new(limits.per_client),
        refusals: RefusalLog::new(proxy.server_metrics().clone()),
        phase: phase_rx,
        alive: alive_rx,
        proxy,
        threads,
    };
    tokio::select! {
        _ = shutdown => {}
        _ = acceptor.run(listener) => {}
    }
    // Shutdown begins: the grace in force now applies. The listener is
    // closed: from here on new clients are refused. The other threads see
    // their queues close and keep serving what they have.
    let grace = acceptor.proxy.shutdown_grace();
    drop(acceptor);
    let _ = phase_tx.send(Lifecycle::Draining);
    let open = alive_tx.receiver_count();
    if open > 0 {
        tracing::info!(
            connections = open,
            grace = %humantime::format_duration(grace),
            "waiting for open connections (tunnels included) to finish"
        );
    }
    let cut = match tokio::time::timeout(grace, alive_tx.closed()).await {
        Ok(()) => 0,
        Err(_) => alive_tx.receiver_count(),
    };
    let _ = phase_tx.send(Lifecycle::Cut);
    // The threads drop what is left on them (the cut connections) and end.
    for handle in handles {
        let _ = tokio::task::spawn_blocking(move || handle.join()).await;
    }
    cut
}

/// Accepting and admitting connections, and handing them to threads.
struct Acceptor<H> {
    proxy: Arc<H>,
    slots: Arc<Semaphore>,
    max_connections: usize,
    per_client: PerClient,
    refusals: RefusalLog,
    phase: Stop,
    alive: watch::Receiver<()>,
    /// The serving threads, the calling one first.
    threads: Vec<ServingThread>,
}

/// A connection handed to another serving thread.
struct Accepted {
    stream: std::net::TcpStream,
    peer: SocketAddr,
    hold: Arc<ConnectionHold>,
}

impl<H: Handler> Acceptor<H> {
    /// Accepts until dropped (the caller's `select!` ends it).
    async fn run(&self, listener: TcpListener) {
        let mut warned: Option<Instant> = None;
        let max_connections = self.max_connections;
        loop {
            let slot = match self.slots.clone().try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => {
                    self.proxy.server_metrics().connection_limit_reached();
                    if warned.is_none_or(|t| t.elapsed() >= LIMIT_WARNING_EVERY) {
                        warned = Some(Instant::now());
                        tracing::warn!(
                            max_connections,
                            "connection limit reached: new clients wait until a connection closes"
                        );
                    }
                    match self.slots.clone().acquire_owned().await {
                        Ok(slot) => slot,
                        Err(_) => return,
                    }
                }
            };
            let (stream, peer) = match listener.accept().await {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning
                    // (the client waits in the listen queue meanwhile).
                    warn_accept_failed(&e);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Admission before work: nothing is read from a client that
            // may not use the proxy, and its slot is free again.
            if !self.proxy.admits(peer.ip()) {
                self.refusals.refuse(ConnRefusal::NotAllowed, peer);
                continue;
            }
            let Some(client_slot) = self.per_client.take(peer.ip()) else {
                self.refusals.refuse(ConnRefusal::PerClientLimit, peer);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let thread = self.least_loaded();
            let hold = Arc::new(ConnectionHold {
                _slot: slot,
                _client: client_slot,
                _open: self.proxy.server_metrics().connection_opened(),
                _alive: self.alive.clone(),
                _thread: ThreadLoad::count(&thread.open),
                phase: self.phase.clone(),
            });
            self.dispatch(thread, stream, peer, hold);
        }
    }

    /// The thread with the fewest open connections; of equals the last,
    /// so the calling thread, which also accepts for all and runs the
    /// admin listener and background work, takes the fewest. A thread
    /// found gone is passed over.
    fn least_loaded(&self) -> &ServingThread {
        let mut best = &self.threads[0];
        let mut fewest = best.open.load(Ordering::Relaxed);
        for t in self.threads[1..].iter().rev() {
            if t.gone.load(Ordering::Relaxed) {
                continue;
            }
            let n = t.open.load(Ordering::Relaxed);
            if n <= fewest {
                (best, fewest) = (t, n);
            }
        }
        best
    }

    /// Serves the connection on `thread`: spawned here for the calling
    /// thread, else moved to the thread's event loop (here if it is gone).
    fn dispatch(
        &self,
        thread: &ServingThread,
        stream: TcpStream,
        peer: SocketAddr,
        hold: Arc<ConnectionHold>,
    ) {
        let Some(queue) = &thread.queue else {
            tokio::spawn(serve_connection(stream, peer, self.proxy.clone(), hold));
            return;
        };
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "cannot hand a connection over: dropped");
                return;
            }
        };
        let Err(mpsc::error::SendError(back)) = queue.send(Accepted { stream, peer, hold }) else {
            return;
        };
        thread.gone.store(true, Ordering::Relaxed);
        tracing::warn!("a serving thread has ended: the others serve");
        if let Ok(stream) = TcpStream::from_std(back.stream) {
            tokio::spawn(serve_connection(
                stream,
                peer,
                self.proxy.clone(),
                back.hold,
            ));
        }
    }
}

/// What a client connection holds while it is open: its place under
/// `max_connections` and `max_connections_per_client`, its count in
/// `robots_proxy_open_connections` and among its serving thread's, and the
/// listener's phase. A CONNECT request carries a clone in its extensions,
/// so a tunnel keeps all of it until it closes, long after hyper has
/// handed the socket over, and shutdown waits for it.
pub(crate) struct ConnectionHold {
    _slot: OwnedSemaphorePermit,
    _client: ClientSlot,
    _open: GaugeGuard,
    _alive: watch::Receiver<()>,
    _thread: ThreadLoad,
    phase: Stop,
}

impl ConnectionHold {
    /// The listener's phase, for a tunnel to follow.
    pub(crate) fn stop(&self) -> Stop {
        self.phase.clone()
    }
}

async fn serve_connection<H: Handler>(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    proxy: Arc<H>,
    hold: Arc<ConnectionHold>,
) {
    let stop = hold.stop();
    let policy = ConnectionPolicy {
        header_timeout: proxy.header_timeout(),
    };
    let counts = proxy.clone();
    let conn = conn::serve(stream, peer, proxy, hold, policy);
    let ended = drive(
        conn,
        |c| c.graceful_shutdown(),
        Some(stop),
        None,
        peer,
        "client connection",
    )
    .await;
    if ended.is_some_and(|e| answered_malformed(&e)) {
        counts.count_malformed();
    }
}

/// Logs a failed accept at most once per [`LIMIT_WARNING_EVERY`], with the
/// number left unlogged since: out of descriptors, accept fails 20 times a
/// second until one is freed.
fn warn_accept_failed(e: &std::io::Error) {
    static LAST: parking_lot::Mutex<(Option<Instant>, u64)> = parking_lot::Mutex::new((None, 0));
    let mut last = LAST.lock();
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
