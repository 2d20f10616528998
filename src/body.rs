//! The body type used on both sides of the proxy, and small constructors.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};

/// Body type used on both sides of the proxy: streams, never buffered whole.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// An empty body.
pub fn empty_body() -> Body {
    Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed()
}

/// A body holding `bytes`.
pub fn full_body(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}
