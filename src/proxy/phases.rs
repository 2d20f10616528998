//! The phases of a request, its one record and its one exit.
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
//!    method that defines none, the usage preferences; the judgement is
//!    built with its final decision, and no phase changes it after;
//! 5. **cache** (when `cache.enabled`): the response cache's lookup, for
//!    an allowed request only (robots.txt is applied before the cache). A
//!    hit (or an offline/only-if-cached 504) skips politeness and forward:
//!    it takes no Crawl-delay slot, and goes to record and finish;
//! 6. **politeness**: a Crawl-delay slot for the origin, for what goes to
//!    it (a miss, a revalidation, a request the cache does not handle), or
//!    the `rate_limited` decision it returns;
//! 7. **record**: the audit line ([`Proxy::record`]), written before
//!    anything is forwarded, so nothing leaves without its record; every
//!    judged request is counted on the admin page's charts here
//!    ([`crate::ops::activity`]);
//! 8. **forward**: to the origin (plain, upgraded, or a blind tunnel);
//! 9. **store**: a cache miss is stored while it streams to the client,
//!    and a successful unsafe request invalidates what the cache holds for
//!    it;
//! 10. **response usage**: the response's own `Content-Usage` for declared
//!     purposes;
//! 11. **finish** ([`Proxy::finish`]): counts the request under exactly one
//!     `robots_proxy_requests_total` label.
//!
//! Admit and frame are [`Proxy::handle`]'s (`mod.rs`), CONNECT's are
//! `connect.rs`'s; slot to response usage are `pipeline.rs`'s, where
//! [`Proxy::run`](super::pipeline) reads as them in order.
//!
//! [`Proxy::record`] is the only writer of audit lines: it takes a
//! [`Line`] (a request for a path, a blind tunnel, a request recorded again
//! with its final decision, an unjudged one) and says what came of it, a
//! [`Recorded`]: passed, blocked with its answer, or the audit log failed
//! (503). A phase that refuses a request after judge (politeness, a
//! destination refused at connect time, the response's usage preference)
//! returns its decision, and the line is written on the judgement overruled
//! with it ([`Judgement::overruled`]). `finish` (or `count`, its form for a
//! CONNECT whose answer went out before its fate was known, and for a
//! request hyper answered itself) is the only place a request is counted:
//! one request is one count, and one audit line per decision.

use std::net::SocketAddr;
use std::sync::Arc;

use http::header::{HeaderValue, USER_AGENT};
use http::{Request, Response, StatusCode};

use super::{Proxy, respond};
use crate::http::body::Body;
use crate::judge::{Decision, Judgement};
use crate::ops::audit::Pending;
use crate::ops::audit::Record;
pub(crate) use crate::proxy::metrics::Outcome;
use crate::response_cache::CacheOutcome;

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

impl Caller {
    /// A caller without a proxy user (authentication off).
    pub(crate) fn anonymous(
        client: SocketAddr,
        queue: std::sync::Arc<super::slots::ClientQueue>,
    ) -> Caller {
        Caller {
            client,
            queue,
            user: None,
            user_agent: None,
        }
    }

    /// Who the robots.txt fetches this request starts are for
    /// ([`crate::judge::fetch_budget`]): its user, else its address.
    pub(crate) fn fetch_client(&self) -> crate::judge::fetch_budget::Client {
        use crate::judge::fetch_budget::Client;
        match &self.user {
            Some(user) => Client::User(user.clone()),
            None => Client::Address(crate::http::destination::client_key(self.client.ip())),
        }
    }
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

/// An audit line for [`Proxy::record`]: what it is written for, and who
/// and what it names.
#[derive(Clone, Copy)]
pub(crate) enum Line<'a> {
    /// A request for a path (plain, or inside an intercepted tunnel), with
    /// what the response cache did with it when it was asked; a refused
    /// CONNECT.
    Request(Judged<'a>, Option<CacheOutcome>),
    /// A blind tunnel: written even when allowed (as `tunnelled`), as its
    /// paths go unchecked.
    Tunnel(Judged<'a>),
    /// A request recorded once already, now with its final decision (a
    /// refusal at connect time, the response's own usage preference):
    /// counted once on the charts, under its first decision.
    Again(Judged<'a>),
    /// A request refused before it was judged (a 407): no robots.txt was
    /// consulted.
    Unjudged {
        client: SocketAddr,
        user: Option<&'a str>,
        req: &'a Request<crate::http::body::Body>,
        decision: &'a str,
        reason: &'a str,
    },
}

/// A judged request, as its audit line names it.
#[derive(Clone, Copy)]
pub(crate) struct Judged<'a> {
    /// The judgement with the decision the line records.
    judgement: &'a Judgement,
    caller: &'a Caller,
    method: &'a str,
    /// The request's own `User-Agent`.
    ua: Option<&'a HeaderValue>,
    /// Why politeness held or refused it, if it did.
    politeness: Option<&'static str>,
}

impl<'a> Judged<'a> {
    pub(crate) fn new(
        judgement: &'a Judgement,
        caller: &'a Caller,
        method: &'a str,
        ua: Option<&'a HeaderValue>,
    ) -> Judged<'a> {
        Judged {
            judgement,
            caller,
            method,
            ua,
            politeness: None,
        }
    }

    /// With why politeness held or refused it.
    pub(crate) fn politeness(self, cause: Option<&'static str>) -> Judged<'a> {
        Judged {
            politeness: cause,
            ..self
        }
    }
}

/// What [`Proxy::record`] made of a line: the request goes on, or it ends
/// with the answer given, and which of the two ways it ends.
#[must_use]
pub(crate) enum Recorded {
    /// Its line is written (or, allowed and not logged, counted on the
    /// charts): an allowed request goes on to be forwarded, an unjudged one
    /// to the answer its phase gives.
    Passed,
    /// Its decision does not forward: the line is written and this is its
    /// answer (403, 429, 400, 502, 503, by the decision).
    Blocked(Answer),
    /// The audit log cannot be written: the request ends with a 503
    /// (`error`), whatever its decision (fail closed: nothing that needs a
    /// line goes out without it, not the forwarded response and not the 403
    /// either).
    AuditFailed(Answer),
}

impl Recorded {
    /// The answer to a request whose line refuses it (a destination
    /// refused, a robots.txt that failed TLS): its blocked answer, or the
    /// 503 of an audit log that cannot be written. Were `judgement`
    /// allowed after all, it is refused still (fail closed).
    pub(crate) fn refusal(self, judgement: &Judgement) -> Answer {
        match self {
            Recorded::Passed => Answer::new(
                Outcome::Refused,
                respond::refused(&judgement.decision.reason()),
            ),
            Recorded::Blocked(answer) | Recorded::AuditFailed(answer) => answer,
        }
    }
}

impl Proxy {
    /// The record phase, and the only writer of audit lines: writes the
    /// line a request needs (a blocked or unjudged request, a blind tunnel,
    /// an annotated usage preference, any request under `audit.log_all`)
    /// and counts every judged request on the admin page's charts
    /// ([`crate::ops::activity`]), once.
    pub(crate) fn record(&self, line: Line<'_>) -> Recorded {
        let (recorded, pending) = self.record_line(line);
        match pending.map(|p| self.audit.wait_blocking(p)) {
            Some(Err(_)) => Recorded::AuditFailed(Answer::audit_unavailable()),
            _ => recorded,
        }
    }

    /// [`Proxy::record`], waiting for the line's sync (`audit.sync =
    /// "every"`) without blocking the serving thread: its other requests
    /// go on meanwhile, and their lines share the sync.
    pub(crate) fn record_durable<'s>(
        &'s self,
        line: Line<'_>,
    ) -> impl Future<Output = Recorded> + 's {
        let (recorded, pending) = self.record_line(line);
        async move {
            let synced = match pending {
                Some(p) => self.audit.durable(p).await,
                None => Ok(()),
            };
            match synced {
                Ok(()) => recorded,
                Err(_) => Recorded::AuditFailed(Answer::audit_unavailable()),
            }
        }
    }

    /// The record phase up to the line's sync: what to answer, and the
    /// line written.
    fn record_line(&self, line: Line<'_>) -> (Recorded, Option<Pending>) {
        if !self.audit.is_writable() {
            return (Recorded::AuditFailed(Answer::audit_unavailable()), None);
        }
        let mut record = match line {
            Line::Unjudged {
                client,
                user,
                req,
                decision,
                reason,
            } => Record::unjudged(
                client,
                user,
                req.method().as_str(),
                unjudged_url(req.uri()),
                req.headers().get(USER_AGENT).and_then(|v| v.to_str().ok()),
                decision,
                reason,
            ),
            Line::Request(judged, _) | Line::Tunnel(judged) | Line::Again(judged) => {
                let Judged {
                    judgement,
                    caller,
                    method,
                    ua,
                    politeness,
                } = judged;
                let allowed = judgement.decision.is_allowed();
                let tunnel = matches!(line, Line::Tunnel(_));
                // An annotated usage preference is evidence: recorded
                // whatever log_all says.
                if allowed && !tunnel && !self.audit.log_all() && judgement.usage.is_none() {
                    if !matches!(line, Line::Again(_)) {
                        self.activity.count(judgement.decision.name());
                    }
                    return (Recorded::Passed, None);
                }
                let name = if tunnel && allowed {
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
                record.politeness = politeness;
                if let Line::Request(_, cache) = line {
                    record.cache = cache.map(CacheOutcome::as_str);
                }
                record
            }
        };
        record.node = self.audit.node();
        let Ok(pending) = self.audit.write_pending(&record) else {
            return (Recorded::AuditFailed(Answer::audit_unavailable()), None);
        };
        let pending = Some(pending);
        let judgement = match line {
            Line::Unjudged { .. } => return (Recorded::Passed, pending),
            Line::Again(judged) => judged.judgement,
            Line::Request(judged, _) | Line::Tunnel(judged) => {
                self.activity.record(&record);
                judged.judgement
            }
        };
        let d = &judgement.decision;
        if d.is_allowed() {
            return (Recorded::Passed, pending);
        }
        tracing::info!(url = %judgement.url(), agent = %judgement.agent,
            decision = d.name(), reason = %d.reason(), "blocked");
        (Recorded::Blocked(Answer::blocked(judgement)), pending)
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
