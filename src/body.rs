//! The body type used on both sides of the proxy, and small constructors.

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};

/// Body type used on both sides of the proxy: streams, never buffered whole.
pub(crate) type Body = BoxBody<Bytes, hyper::Error>;

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
