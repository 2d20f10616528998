//! The body type used on both sides of the proxy, and small constructors.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Frame, SizeHint};

/// Body type used on both sides of the proxy: streams, never buffered whole.
pub(crate) type Body = BoxBody<Bytes, BodyError>;

/// The error a [`Body`] ends with: hyper's, or the in-task upstream
/// connection's own (an origin's framing error, a failed read). A type of
/// its own rather than a boxed trait object: an alias would leave the
/// object's lifetime to inference in the closures that take bodies.
#[derive(Debug)]
pub struct BodyError(Box<dyn std::error::Error + Send + Sync>);

impl BodyError {
    pub(crate) fn new(e: impl std::error::Error + Send + Sync + 'static) -> BodyError {
        BodyError(Box::new(e))
    }

    /// The wrapped error.
    pub(crate) fn get_ref(&self) -> &(dyn std::error::Error + 'static) {
        &*self.0
    }
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Transparent: the wrapped error's own message and source.
impl std::error::Error for BodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl From<hyper::Error> for BodyError {
    fn from(e: hyper::Error) -> BodyError {
        BodyError::new(e)
    }
}

/// A body hyper read (a client's request, a pooled client's response).
pub(crate) fn incoming(body: hyper::body::Incoming) -> Body {
    body.map_err(BodyError::from).boxed()
}

/// An empty body.
pub(crate) fn empty_body() -> Body {
    Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed()
}

/// A body holding `bytes`.
pub(crate) fn full_body(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A plain-text response of the proxy's own, marked `no-store`: a
/// scraper's HTTP cache (Scrapy's, say) must not keep a 403 or a 429 and
/// replay it as the page on later runs.
pub(crate) fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut resp = Response::new(full_body(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// `resp` with a body that keeps `guard` until hyper drops the body (sent,
/// or abandoned with its connection): what a request holds, such as its
/// client's slot or its place in the in-flight count, is held while its
/// response streams.
pub(crate) fn hold_until_dropped<G: Send + Sync + Unpin + 'static>(
    resp: Response<Body>,
    guard: G,
) -> Response<Body> {
    resp.map(|body| {
        Holding {
            body,
            _guard: guard,
        }
        .boxed()
    })
}

/// A body that keeps a guard until it is dropped.
struct Holding<G> {
    body: Body,
    _guard: G,
}

impl<G: Unpin> hyper::body::Body for Holding<G> {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
