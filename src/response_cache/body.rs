//! Bodies fed by a task through a bounded channel: a cached file read in
//! chunks, or an upstream response teed to disk. The channel gives
//! back-pressure both ways, so neither side is ever held whole in memory.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, SizeHint};
use tokio::sync::mpsc;

use crate::http::body::{Body, BodyError};

/// Frames in flight between the producing task and the client.
pub(crate) const CHANNEL_FRAMES: usize = 4;

/// Chunk size for reading cached bodies.
pub(crate) const READ_CHUNK: usize = 64 * 1024;

pub(crate) type FrameTx = mpsc::Sender<Result<Frame<Bytes>, BodyError>>;

/// A body whose frames come from a channel; its end is the sender's drop.
pub(crate) struct ChannelBody {
    rx: mpsc::Receiver<Result<Frame<Bytes>, BodyError>>,
    exact: Option<u64>,
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.rx.poll_recv(cx)
    }

    fn size_hint(&self) -> SizeHint {
        match self.exact {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

/// A channel and the body reading it; `exact` is the body's length when
/// known (a cached body), so hyper frames it with Content-Length.
pub(crate) fn channel(exact: Option<u64>) -> (FrameTx, Body) {
    let (tx, rx) = mpsc::channel(CHANNEL_FRAMES);
    (tx, ChannelBody { rx, exact }.boxed())
}
