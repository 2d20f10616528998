//! One error for everything that can fail on the way to an origin,
//! classified once, where it happens, with the reason a client is told.

use std::error::Error as StdError;
use std::fmt;
use std::io;

use crate::http::destination;

/// What failed on the way to an origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The destination policy refused every address: nothing was sent.
    Refused,
    /// The TLS handshake failed (untrusted or mismatched certificate ...).
    Tls,
    /// The name did not resolve.
    Dns,
    /// No connection: refused, reset or unreachable.
    Connect,
    /// Connecting timed out.
    Timeout,
    /// The proxy is short of a local resource (descriptors, memory, local
    /// ports): not the origin's fault.
    Local,
    /// The connection failed while the request was sent or the response
    /// head read.
    Http,
}

/// A failed attempt to reach an origin.
#[derive(Debug)]
pub struct UpstreamError {
    kind: ErrorKind,
    reason: String,
    source: Box<dyn StdError + Send + Sync>,
}

impl UpstreamError {
    /// Classifies `err`, met reaching `host` (as a URL names it).
    pub(crate) fn new(err: impl StdError + Send + Sync + 'static, host: &str) -> UpstreamError {
        UpstreamError::classified(err, host, ErrorKind::Http)
    }

    /// [`UpstreamError::new`], with `kind` for an error that shows none.
    pub(crate) fn classified(
        err: impl StdError + Send + Sync + 'static,
        host: &str,
        kind: ErrorKind,
    ) -> UpstreamError {
        let source: Box<dyn StdError + Send + Sync> = Box::new(err);
        let kind = kind_of(&*source).unwrap_or(kind);
        let mut e = UpstreamError {
            kind,
            reason: String::new(),
            source,
        };
        e.reason = e.describe(host);
        e
    }

    /// The same error with its reason naming `host` as the caller's URL
    /// writes it (the pool knows only the normalised origin).
    pub(crate) fn for_host(mut self, host: &str) -> UpstreamError {
        self.reason = self.describe(host);
        self
    }

    fn describe(&self, host: &str) -> String {
        let err: &(dyn StdError + 'static) = &*self.source;
        match destination::find_private_destination(err) {
            Some(p) => p.to_string(),
            None => crate::upstream::tls::upstream_error_reason(err, host),
        }
    }

    pub(crate) fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The short reason for a client: for [`ErrorKind::Refused`] the
    /// policy's, else [`crate::upstream::tls::upstream_error_reason`]'s
    /// ("connection refused by X", "certificate not trusted: ...").
    pub(crate) fn reason(&self) -> &str {
        &self.reason
    }

    /// For [`ErrorKind::Local`], the resource the proxy is short of.
    pub(crate) fn shortage(&self) -> Option<&'static str> {
        destination::local_shortage(&*self.source)
    }

    /// The whole cause chain on one line, for the log.
    pub(crate) fn chain(&self) -> String {
        error_chain(&*self.source)
    }
}

/// The original error's own text.
impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.source.fmt(f)
    }
}

impl StdError for UpstreamError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source.source()
    }
}

/// The kind an error's causes show, if any.
fn kind_of(err: &(dyn StdError + 'static)) -> Option<ErrorKind> {
    if destination::find_private_destination(err).is_some() {
        return Some(ErrorKind::Refused);
    }
    if destination::local_shortage(err).is_some() {
        return Some(ErrorKind::Local);
    }
    if crate::upstream::tls::is_tls_failure(err) {
        return Some(ErrorKind::Tls);
    }
    if destination::causes(err).any(|e| e.to_string() == "dns error") {
        return Some(ErrorKind::Dns);
    }
    let io_kind =
        destination::causes(err).find_map(|e| e.downcast_ref::<io::Error>().map(io::Error::kind));
    match io_kind {
        Some(io::ErrorKind::TimedOut) => return Some(ErrorKind::Timeout),
        Some(
            io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::HostUnreachable,
        ) => return Some(ErrorKind::Connect),
        _ => {}
    }
    destination::causes(err)
        .filter_map(|e| e.downcast_ref::<hyper_util::client::legacy::Error>())
        .any(|e| e.is_connect())
        .then_some(ErrorKind::Connect)
}

/// An error and its causes on one line: `a: b: c`.
pub fn error_chain(err: &(dyn StdError + 'static)) -> String {
    let mut out = err.to_string();
    for e in destination::causes(err).skip(1) {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_are_classified_with_their_reason() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let e = UpstreamError::new(refused, "a.example");
        assert_eq!(e.kind(), ErrorKind::Connect);
        assert_eq!(e.reason(), "connection refused by a.example");
        assert_eq!(
            e.for_host("A.example").reason(),
            "connection refused by A.example"
        );
        let slow = io::Error::new(io::ErrorKind::TimedOut, "connect timed out");
        let e = UpstreamError::new(slow, "b.example");
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert_eq!(e.reason(), "connection to b.example timed out");
        assert_eq!(e.to_string(), "connect timed out");
        let other = io::Error::other("lookup failed");
        let e = UpstreamError::classified(other, "c.example", ErrorKind::Dns);
        assert_eq!(e.kind(), ErrorKind::Dns);
    }
}
