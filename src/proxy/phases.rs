//! The phases of a request, and its one exit.
//!
//! Every request a client sends (plain, inside an intercepted tunnel, or a
//! CONNECT) goes through the same phases, each of which either passes it
//! on or ends it with an [`Answer`]:
//!
//! 1. **admit**: client ACL and proxy authentication ([`Proxy::admit`]);
//! 2. **frame**: a target the proxy can judge (absolute form, a real port,
//!    not a loop, a method it forwards);
//! 3. **slot**: one of the client address's requests in flight
//!    ([`super::slots`]), held until the response body is sent;
//! 4. **judge**: origin, path and agent against robots.txt and the
//!    destination policy, then the user's `max_rps` quota, a body on a
//!    method that defines none, the usage preferences;
//! 5. **cache** (when `cache.enabled`): the response cache's lookup, for
//!    an allowed request only (robots.txt is applied before the cache). A
//!    hit (or an offline/only-if-cached 504) skips politeness and forward:
//!    it takes no Crawl-delay slot, and goes to record and finish;
//! 6. **politeness**: a Crawl-delay slot for the origin, for what goes to
//!    it (a miss, a revalidation, a request the cache does not handle);
//! 7. **record**: the audit line ([`Proxy::record`]), written before
//!    anything is forwarded, so nothing leaves without its record; every
//!    judged request is counted on the admin page's charts here
//!    ([`crate::ops::activity`]);
//! 8. **forward**: to the origin (plain, upgraded, or a blind tunnel);
//! 9. **store**: a cache miss is stored while it streams to the client,
//!    and a successful unsafe request invalidates what the cache holds for
//!    it; then the response's own `Content-Usage` for declared purposes;
//! 10. **finish** ([`Proxy::finish`]): counts the request under exactly one
//!     `robots_proxy_requests_total` label.
//!
//! Admit and frame are [`Proxy::handle`]'s (`mod.rs`), CONNECT's are
//! `connect.rs`'s; slot to store are `pipeline.rs`'s, where
//! [`Proxy::run`](super::pipeline) reads as them in order.
//!
//! `record` is the only writer of audit lines, and `finish` (or `count`,
//! its form for a CONNECT whose answer went out before its fate was known,
//! and for a request hyper answered itself) the only place a request is
//! counted: one request is one count, and one audit line per decision.

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Response, StatusCode};

use super::{Proxy, respond};
use crate::http::body::Body;
use crate::judge::{Decision, Judgement};
use crate::ops::audit::Record;
pub(crate) use crate::proxy::metrics::Outcome;

/// Who sent a request: the client's address, the authenticated user and
/// the robots token configured for that user.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    pub(crate) client: SocketAddr,
    /// The client address's requests in flight ([`super::slots`]).
    pub(crate) queue: std::sync::Arc<super::slots::ClientQueue>,
    pub(crate) user: Option<Arc<str>>,
    /// Token configured for the user, overriding the others.
    pub(crate) user_agent: Option<String>,
}

/// How a request ended: the response to send and the label it is counted
/// under.
pub(crate) struct Answer {
    pub(crate) outcome: Outcome,
    pub(crate) resp: Response<Body>,
    /// A CONNECT answered before its fate is known (a tunnel whose port
    /// may not be TLS): counted once the client speaks in it, not by
    /// [`Proxy::finish`].
    counted_later: bool,
}

impl Answer {
    pub(crate) fn new(outcome: Outcome, resp: Response<Body>) -> Answer {
        Answer {
            outcome,
            resp,
            counted_later: false,
        }
    }

    /// The answer to a CONNECT whose outcome is counted when it is known.
    pub(crate) fn counted_later(resp: Response<Body>) -> Answer {
        Answer {
            outcome: Outcome::Intercepted,
            resp,
            counted_later: true,
        }
    }

    /// A 400 of the proxy's own with `text` as its body.
    pub(crate) fn bad_request(text: impl Into<String>) -> Answer {
        Answer::new(
            Outcome::BadRequest,
            respond::text(StatusCode::BAD_REQUEST, text),
        )
    }

    /// The answer to a judgement that does not forward.
    fn blocked(judgement: &Judgement) -> Answer {
        Answer::new(outcome_of(&judgement.decision), respond::blocked(judgement))
    }

    /// 503: the audit log cannot be written, so nothing is forwarded.
    fn audit_unavailable() -> Answer {
        Answer::new(
            Outcome::Error,
            respond::text(
                StatusCode::SERVICE_UNAVAILABLE,
                "robots-proxy cannot write its audit log, so it does not forward requests until it can\n",
            ),
        )
    }
}

/// What the forward phase brought back: the origin's response, a
/// response the proxy made itself because the origin gave none (refused
/// upgrade target, connect or TLS failure, timeout, a response that cannot
/// be relayed) with the label it is counted under instead of `allowed`, or
/// a destination the policy refused at connect time (a name that resolved
/// to a private address), which the pipeline records like any refusal.
pub(crate) enum Forwarded {
    Response(Response<Body>),
    Failed(Outcome, Response<Body>),
    Refused(String),
}

impl Forwarded {
    /// A 502/504 of the proxy's own for an allowed request the origin gave
    /// no usable response to: counted as `upstream_error`.
    pub(crate) fn upstream_failed(resp: Response<Body>) -> Forwarded {
        Forwarded::Failed(Outcome::UpstreamError, resp)
    }
}

/// A request's URL for an audit line when nothing was judged: without
/// any `user:password@` it may carry, at most 2 KiB.
fn unjudged_url(uri: &http::Uri) -> String {
    let mut url = String::new();
    if let Some(scheme) = uri.scheme_str() {
        url.push_str(scheme);
        url.push_str("://");
    }
    if let Some(authority) = uri.authority() {
        let host = authority.as_str();
        url.push_str(host.rsplit_once('@').map_or(host, |(_, h)| h));
    }
    if let Some(pq) = uri.path_and_query()
        && uri.scheme().is_some()
    {
        url.push_str(pq.as_str());
    } else if uri.authority().is_none() {
        url.push_str(uri.path());
    }
    if url.len() > 2048 {
        let mut end = 2048;
        while !url.is_char_boundary(end) {
            end -= 1;
        }
        url.truncate(end);
    }
    url
}

/// How a request with this decision is counted.
pub(crate) fn outcome_of(decision: &Decision) -> Outcome {
    match decision {
        Decision::Allowed { .. } => Outcome::Allowed,
        Decision::Disallowed { .. } => Outcome::Disallowed,
        Decision::Unreachable { .. } => Outcome::Unreachable,
        Decision::RateLimited { .. } => Outcome::RateLimited,
        Decision::Refused { .. } => Outcome::Refused,
        Decision::BadGateway { .. } => Outcome::UpstreamError,
        Decision::BadRequest { .. } => Outcome::BadRequest,
        Decision::UsageDisallowed(_) => Outcome::Disallowed,
    }
}

/// What the audit line of a judged request stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recorded {
    /// A request for a path (plain, or inside an intercepted tunnel).
    Request,
    /// A blind tunnel: recorded even when allowed, as its paths go unchecked.
    Tunnel,
    /// A request recorded once already, now with its final decision (a
    /// refusal at connect time, the response's own usage preference):
    /// counted once on the charts, under its first decision.
    Again,
}

impl Proxy {
    /// The record phase: writes the audit line a judgement needs (a
    /// blocked request, a blind tunnel, or any request under
    /// `audit.log_all`). `Err` ends the request: blocked, or the audit log
    /// failed (fail closed: no answer that needs a line goes out without it,
    /// not the forwarded response and not the 403 either).
    // The Err is the response itself, built once and moved to `finish`.
    #[allow(clippy::result_large_err)]
    pub(crate) fn record(
        &self,
        caller: &Caller,
        ua: Option<&http::HeaderValue>,
        judgement: &Judgement,
        method: &str,
        what: Recorded,
    ) -> Result<(), Answer> {
        self.record_cached(caller, ua, judgement, method, what, None)
    }

    /// The record phase for a judgement that blocks (a refusal, a robots.txt
    /// that failed TLS): its audit line, and its answer. Were it allowed
    /// after all, the request is refused still (fail closed).
    pub(crate) fn record_blocked(
        &self,
        caller: &Caller,
        ua: Option<&http::HeaderValue>,
        judgement: &Judgement,
        method: &str,
    ) -> Answer {
        match self.record(caller, ua, judgement, method, Recorded::Request) {
            Err(answer) => answer,
            Ok(()) => Answer::new(
                Outcome::Refused,
                respond::refused(&judgement.decision.reason()),
            ),
        }
    }

    /// A destination the policy refused at connect time (a name resolving
    /// to a refused address after robots.txt was judged): the judgement
    /// becomes that refusal and is recorded like any.
    pub(crate) fn refuse(
        &self,
        caller: &Caller,
        ua: Option<&http::HeaderValue>,
        judgement: &mut Judgement,
        method: &str,
        reason: String,
    ) -> Answer {
        judgement.decision = Decision::Refused { reason };
        match self.record(caller, ua, judgement, method, Recorded::Again) {
            Err(answer) => answer,
            Ok(()) => Answer::new(
                Outcome::Refused,
                respond::refused(&judgement.decision.reason()),
            ),
        }
    }

    /// [`Proxy::record`] with what the response cache did, for the line.
    #[allow(clippy::result_large_err)]
    /// `ua`: the request's own `User-Agent`, for the line.
    pub(crate) fn record_cached(
        &self,
        caller: &Caller,
        ua: Option<&http::HeaderValue>,
        judgement: &Judgement,
        method: &str,
        what: Recorded,
        cache: Option<&str>,
    ) -> Result<(), Answer> {
        let blocked = !judgement.decision.is_allowed();
        let tunnel = what == Recorded::Tunnel;
        if !self.audit.is_writable() {
            return Err(Answer::audit_unavailable());
        }
        // An annotated usage preference is evidence: recorded whatever
        // log_all says.
        if blocked || tunnel || self.audit.log_all() || judgement.usage.is_some() {
            let name = if tunnel && !blocked {
                "tunnelled"
            } else {
                judgement.decision.name()
            };
            let mut record = Record::with_decision(
                judgement,
                caller.client,
                caller.user.as_deref(),
                method,
                name,
            );
            record.user_agent = ua.and_then(|v| v.to_str().ok());
            record.cache = cache;
            record.node = self.audit.node();
            if self.audit.write(&record).is_err() {
                return Err(Answer::audit_unavailable());
            }
            if what != Recorded::Again {
                self.activity.record(&record);
            }
        } else if what != Recorded::Again {
            self.activity.count(judgement.decision.name());
        }
        if blocked {
            let d = &judgement.decision;
            tracing::info!(url = %judgement.url(), agent = %judgement.agent,
                decision = d.name(), reason = %d.reason(), "blocked");
            return Err(Answer::blocked(judgement));
        }
        Ok(())
    }

    /// The audit line of a request refused before it was judged (a 407):
    /// no robots.txt was consulted. `Err` when the line cannot be written.
    #[allow(clippy::result_large_err)]
    pub(crate) fn record_unjudged(
        &self,
        client: SocketAddr,
        user: Option<&str>,
        req: &http::Request<hyper::body::Incoming>,
        decision: &str,
        reason: &str,
    ) -> Result<(), Answer> {
        let url = unjudged_url(req.uri());
        let mut record = Record::unjudged(
            client,
            user,
            req.method().as_str(),
            url,
            req.headers()
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok()),
            decision,
            reason,
        );
        record.node = self.audit.node();
        if !self.audit.is_writable() {
            return Err(Answer::audit_unavailable());
        }
        if self.audit.write(&record).is_err() {
            return Err(Answer::audit_unavailable());
        }
        Ok(())
    }

    /// The finish phase: counts the request under its one label and
    /// returns the response to send.
    pub(crate) fn finish(&self, answer: Answer) -> Response<Body> {
        if !answer.counted_later {
            self.count(answer.outcome);
        }
        answer.resp
    }

    /// [`Proxy::finish`] for a request whose answer already went out: a
    /// CONNECT whose fate is known only once the client speaks in it, or a
    /// request hyper could not parse and answered itself.
    pub(super) fn count(&self, outcome: Outcome) {
        self.metrics.request(outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::unjudged_url;

    #[test]
    fn an_unjudged_url_drops_credentials_and_is_bounded() {
        let url = |s: &str| unjudged_url(&s.parse().expect("uri"));
        assert_eq!(
            url("http://user:pw@a.example:8080/p?q=1"),
            "http://a.example:8080/p?q=1"
        );
        assert_eq!(url("a.example:443"), "a.example:443");
        assert_eq!(url("/origin-form"), "/origin-form");
        let long = format!("http://a.example/{}", "x".repeat(5000));
        assert_eq!(url(&long).len(), 2048);
    }
}
