//! Serving threads: each an event loop of its own (a current-thread
//! runtime), given the accepted connections with the fewest open first.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::{Accepted, Handler, Lifecycle, Stop, serve_connection};

/// A serving thread as the acceptor sees it: its open connections, and
/// where to send it new ones (`None` for the calling thread, which spawns
/// them itself).
pub(super) struct ServingThread {
    pub(super) open: Arc<AtomicUsize>,
    pub(super) queue: Option<mpsc::UnboundedSender<Accepted>>,
    /// Set once its queue was found closed: it no longer takes connections.
    pub(super) gone: AtomicBool,
}

/// A connection counted among its serving thread's open ones until the
/// connection (or its tunnel) ends.
pub(super) struct ThreadLoad(Arc<AtomicUsize>);

impl ThreadLoad {
    pub(super) fn count(open: &Arc<AtomicUsize>) -> ThreadLoad {
        open.fetch_add(1, Ordering::Relaxed);
        ThreadLoad(open.clone())
    }
}

impl Drop for ThreadLoad {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Starts `extra` serving threads besides the calling one; returns every
/// thread (the calling one first) and the handles to join. One that
/// cannot start is logged and left out: the others serve.
pub(super) fn start_threads<H: Handler>(
    proxy: &Arc<H>,
    phase: &Stop,
    extra: usize,
) -> (Vec<ServingThread>, Vec<std::thread::JoinHandle<()>>) {
    let mut threads = vec![ServingThread {
        open: Arc::default(),
        queue: None,
        gone: AtomicBool::new(false),
    }];
    let mut handles = Vec::with_capacity(extra);
    for i in 1..=extra {
        let (queue, mut incoming) = mpsc::unbounded_channel::<Accepted>();
        let (proxy, mut phase) = (proxy.clone(), phase.clone());
        // The runtime is built on the new thread: one that never started
        // must not be dropped here, on an async thread (Tokio panics).
        let (started_tx, started) = std::sync::mpsc::sync_channel::<std::io::Result<()>>(1);
        let spawned = std::thread::Builder::new()
            .name(format!("robots-proxy-{i}"))
            .spawn(move || {
                crate::upstream::set_serving_thread(i);
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = started_tx.send(Err(e));
                        return;
                    }
                };
                let _ = started_tx.send(Ok(()));
                runtime.block_on(async move {
                    while let Some(a) = incoming.recv().await {
                        match TcpStream::from_std(a.stream) {
                            Ok(stream) => {
                                tokio::spawn(serve_connection(
                                    stream,
                                    a.peer,
                                    proxy.clone(),
                                    a.hold,
                                ));
                            }
                            Err(e) => {
                                tracing::debug!(peer = %a.peer, error = %e,
                                    "cannot take a connection over: dropped");
                            }
                        }
                    }
                    // Accepting is over; the connections here finish (or
                    // are cut).
                    drop(proxy);
                    let _ = phase.wait_for(|p| *p == Lifecycle::Cut).await;
                });
                runtime.shutdown_timeout(Duration::from_secs(1));
            });
        // Waits only for the runtime to be built (at start, once per thread).
        let started = match spawned {
            Ok(handle) => {
                handles.push(handle);
                started
                    .recv()
                    .unwrap_or_else(|_| Err(std::io::Error::other("thread ended")))
            }
            Err(e) => Err(e),
        };
        if let Err(e) = started {
            tracing::warn!(error = %e, "cannot start a serving thread: fewer serve");
            break;
        }
        threads.push(ServingThread {
            open: Arc::default(),
            queue: Some(queue),
            gone: AtomicBool::new(false),
        });
    }
    (threads, handles)
}
