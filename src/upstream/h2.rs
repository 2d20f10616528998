//! `https` origins that chose HTTP/2: the one request the in-task pool
//! sends over the connection it opened to find out, and the origins it
//! remembers so that later requests go to the pooled client, which keeps
//! one multiplexed connection per origin.

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use http::header;
use http::{Request, Response, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use lru::LruCache;
use parking_lot::Mutex;

use super::dial::url_host;
use super::error::UpstreamError;
use super::stream::Stream;
use crate::http::body::{Body, empty_body, incoming};
use crate::http::origin::Origin;

/// Origins remembered at most: beyond, the least recently learnt go.
const REMEMBERED: NonZeroUsize = NonZeroUsize::new(4096).expect("nonzero");

/// The `https` origins seen choosing HTTP/2, each for a while.
pub(super) struct H2Origins {
    seen: Mutex<LruCache<Origin, Instant, lru::DefaultHasher>>,
    /// How long an origin stays known: after it, the next request asks the
    /// origin again (one TLS handshake), should it have changed.
    ttl: Duration,
}

impl H2Origins {
    pub(super) fn new(ttl: Duration) -> H2Origins {
        H2Origins {
            seen: Mutex::new(LruCache::with_hasher(
                REMEMBERED,
                lru::DefaultHasher::default(),
            )),
            ttl,
        }
    }

    /// True if `origin` chose HTTP/2 within the last `ttl`.
    pub(super) fn knows(&self, origin: &Origin) -> bool {
        let mut seen = self.seen.lock();
        match seen.peek(origin) {
            Some(since) if since.elapsed() < self.ttl => true,
            Some(_) => {
                seen.pop(origin);
                false
            }
            None => false,
        }
    }

    pub(super) fn learn(&self, origin: &Origin) {
        self.seen.lock().put(origin.clone(), Instant::now());
    }
}

/// Sends the request `parts` (no body) over `stream`, a TLS connection on
/// which the origin chose HTTP/2: hyper's HTTP/2 client, its connection
/// driven by a task of its own, which ends once the response has been
/// read (nothing else holds the connection).
pub(super) async fn send(
    origin: &Origin,
    mut parts: http::request::Parts,
    stream: Stream,
) -> Result<Response<Body>, UpstreamError> {
    let host = url_host(origin);
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .handshake::<_, Body>(TokioIo::new(stream))
        .await
        .map_err(|e| UpstreamError::new(e, &host))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "upstream HTTP/2 connection ended");
        }
    });
    // HTTP/2 carries the target in :scheme, :authority and :path, from an
    // absolute URI; no Host.
    if parts.uri.scheme().is_none() {
        let path = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
        parts.uri = origin
            .url(path)
            .parse::<Uri>()
            .map_err(|e| UpstreamError::new(e, &host))?;
    }
    parts.headers.remove(header::HOST);
    let resp = sender
        .send_request(Request::from_parts(parts, empty_body()))
        .await
        .map_err(|e| UpstreamError::new(e, &host))?;
    Ok(resp.map(incoming))
}
