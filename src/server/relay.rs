//! Relaying bytes both ways between a client and an origin, for blind
//! tunnels and upgraded (WebSocket) connections: until either side closes,
//! the connection is idle too long, or the shutdown grace is over.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::{Lifecycle, Stop};

/// Copies bytes both ways until either side closes, no byte has passed in
/// either direction for `idle`, or the shutdown grace is over.
pub(crate) async fn relay<A, B>(
    client_io: A,
    upstream: B,
    idle: Duration,
    stop: Option<Stop>,
    peer: SocketAddr,
) where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let activity = Activity::new();
    let mut client_io = Touching::new(client_io, &activity);
    let mut upstream = Touching::new(upstream, &activity);
    let cut = async {
        match stop {
            Some(mut stop) => {
                let _ = stop.wait_for(|p| *p == Lifecycle::Cut).await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client_io, &mut upstream) => {}
        _ = activity.quiet_for(idle) => {
            tracing::debug!(client = %peer, "blind tunnel idle: closing");
        }
        _ = cut => tracing::debug!(client = %peer, "blind tunnel closed: shutdown grace period over"),
    }
}

/// When bytes last moved through a tunnel.
struct Activity {
    start: Instant,
    /// Milliseconds from `start` to the last byte.
    last: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.fetch_max(ms, Ordering::Relaxed);
    }

    /// Completes once no byte has moved for `idle`.
    async fn quiet_for(&self, idle: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last.load(Ordering::Relaxed));
            let deadline = last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// An IO object that records in an [`Activity`] every byte read or written.
struct Touching<'a, IO> {
    io: IO,
    activity: &'a Activity,
}

impl<'a, IO> Touching<'a, IO> {
    fn new(io: IO, activity: &'a Activity) -> Self {
        Touching { io, activity }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Touching<'_, IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Touching<'_, IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
