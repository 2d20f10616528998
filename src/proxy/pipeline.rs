//! The pipeline of a request for a path: plain HTTP and requests inside an
//! intercepted tunnel alike, from its client's slot to its answer. Each
//! phase is a function of the request's context ([`Ctx`]) that lets the
//! request go on or ends it with an [`Answer`]; [`Proxy::run`] reads as
//! the phases in their order (see [`super::phases`]).

use std::time::Duration;

use http::header::{HeaderValue, USER_AGENT};
use http::{Method, Request, Response, StatusCode};

use super::phases::{Answer, Caller, Forwarded, Judged, Line, Outcome, Recorded};
use super::{PURPOSE_HEADER, Proxy, Settings, forward, respond, upgrade};
use crate::http::body::Body;
use crate::http::headers;
use crate::http::origin::Origin;
use crate::judge::fetch_budget::for_client;
use crate::judge::politeness::NotNow;
use crate::judge::signals::is_tdm_purpose;
use crate::judge::{Decision, Judgement, Limit, UsageMode, UsageNote};
use crate::response_cache::{CacheOutcome, Completed, Lookup, Pending, ResponseCache};

/// One request's state from its judgement to its answer: what the phases
/// after judge read, and what they add to it.
pub(crate) struct Ctx<'a> {
    pub(crate) settings: &'a Settings,
    /// Who sent it (address, user, the user's robots token).
    pub(crate) caller: &'a Caller,
    /// Origin, path and agent as judged, with the judge phase's final
    /// decision; never changed after. A later phase that refuses the
    /// request (Crawl-delay, a destination refused at connect time, the
    /// response's own usage preference) returns its decision, and its line
    /// is written on this judgement overruled with it.
    pub(crate) judgement: Judgement,
    pub(crate) method: Method,
    /// The usage purposes the request is for (empty, unallocated, when
    /// none is declared).
    pub(crate) purposes: Vec<String>,
    /// What the response cache did with it, when it was asked.
    pub(crate) cache: Option<CacheOutcome>,
    /// How long it was held for its origin's Crawl-delay.
    pub(crate) held: Duration,
    /// How long it has waited on the fleet's Redis (its user's quota):
    /// taken from the `fleet.timeout` its Crawl-delay booking may wait.
    pub(crate) fleet_spent: Duration,
    /// Why politeness held or refused it (`crawl_delay`,
    /// `default_interval`, `retry_after`, `backoff`), if it did.
    pub(crate) politeness_cause: Option<&'static str>,
    /// Its place among its origin's requests in flight
    /// (`politeness.max_in_flight`), from the politeness phase until the
    /// forward phase hands it to the response body.
    /// Boxed: a pointer in every request's context, the lease only with
    /// a cap.
    pub(crate) lease: parking_lot::Mutex<Option<Box<crate::judge::politeness::inflight::Lease>>>,
    /// The request's `User-Agent`, for the audit lines written after it
    /// is forwarded (a response's usage preference): kept only when
    /// purposes are declared, as a copy costs an allocation per request.
    pub(crate) client_ua: Option<HeaderValue>,
}

impl Ctx<'_> {
    /// The record phase's line for this request, on `judgement`, with what
    /// the response cache did; `ua`, the request's own `User-Agent`.
    fn line<'b>(&'b self, judgement: &'b Judgement, ua: Option<&'b HeaderValue>) -> Line<'b> {
        let judged = Judged::new(judgement, self.caller, self.method.as_str(), ua)
            .politeness(self.politeness_cause);
        Line::Request(judged, self.cache)
    }

    /// The line of this request recorded again, on `judgement`, with its
    /// final decision.
    pub(super) fn line_again<'b>(&'b self, judgement: &'b Judgement) -> Line<'b> {
        let ua = self.client_ua.as_ref();
        Line::Again(Judged::new(
            judgement,
            self.caller,
            self.method.as_str(),
            ua,
        ))
    }
}

/// What the judge phase's checks after robots.txt make of a request it
/// allowed.
enum Verdict {
    /// Allowed, as robots.txt said.
    Stands,
    /// Allowed, with a usage preference of `n` for a declared purpose
    /// noted (`usage.mode = "annotate"`).
    Annotated(Box<UsageNote>),
    /// Refused after all: the user's quota, a body on a method that
    /// defines none, a usage preference (`usage.mode = "enforce"`).
    Overruled(Decision),
}

/// What the cache phase found.
// Returned once per request, from a boxed future, and taken apart at once.
#[allow(clippy::large_enum_variant)]
enum Cached {
    /// Answered from the cache (a hit, or an offline 504): nothing goes to
    /// the origin.
    Answered(Answer),
    /// On to politeness, record and forward; with what the cache needs to
    /// store the response (a miss or a revalidation).
    Continue(Request<Body>, Option<Pending>),
}

impl Proxy {
    /// The phases from the client's slot to the answer, for a request with
    /// an absolute URI on `origin`. The request holds one of its client's
    /// slots ([`super::slots`]) from here until its response body is sent;
    /// one that waited `response_timeout` for one gets 429.
    pub(crate) async fn serve(
        &self,
        settings: &Settings,
        caller: &Caller,
        origin: Origin,
        path: String,
        req: Request<Body>,
    ) -> Answer {
        let slot = match caller.queue.try_acquire() {
            Some(slot) => Ok(slot),
            None => tokio::time::timeout(settings.response_timeout, caller.queue.acquire()).await,
        };
        let Ok(slot) = slot else {
            return Answer::new(
                Outcome::RateLimited,
                respond::too_many(
                    Duration::from_secs(1),
                    &format!(
                        "Too many requests in flight from this address (max_requests_per_client \
                         = {}); retry when some have finished\n",
                        caller.queue.limit()
                    ),
                ),
            );
        };
        let answer = self.run(settings, caller, origin, path, req).await;
        Answer::new(answer.outcome, slot.hold_until_sent(answer.resp))
    }

    /// The phases in their order: judge, cache, politeness, record,
    /// forward (and store), then the usage preferences of the response.
    async fn run(
        &self,
        settings: &Settings,
        caller: &Caller,
        origin: Origin,
        path: String,
        req: Request<Body>,
    ) -> Answer {
        if let Some(coding) = forward::other_transfer_coding(req.headers()) {
            return Answer::new(
                Outcome::BadRequest,
                respond::text(
                    StatusCode::NOT_IMPLEMENTED,
                    format!(
                        "robots-proxy cannot forward a body sent with Transfer-Encoding {coding:?}: \
                         only chunked is supported\n"
                    ),
                ),
            );
        }
        let (mut ctx, req) = self.judge(settings, caller, origin, path, req).await;
        let answer = self.after_judge(&mut ctx, req).await;
        if ctx.purposes.is_empty() {
            return answer;
        }
        // Boxed: only for requests with declared purposes.
        Box::pin(self.response_usage(&ctx, answer)).await
    }

    /// The cache, politeness, record and forward phases of a judged
    /// request.
    async fn after_judge(&self, ctx: &mut Ctx<'_>, req: Request<Body>) -> Answer {
        // Cache: only what robots.txt allowed; a hit takes no Crawl-delay
        // slot. Boxed: kept inline, the cache's futures would make every
        // request's future larger, and hyper moves it.
        let (req, pending) = match &self.cache {
            Some(cache) if ctx.judgement.decision.is_allowed() => {
                match Box::pin(self.cache_lookup(ctx, cache, req)).await {
                    Cached::Answered(answer) => return answer,
                    Cached::Continue(req, pending) => (req, pending),
                }
            }
            _ => (req, None),
        };
        // Politeness gives the request a Crawl-delay slot, or the decision
        // that refuses it; record writes the line of the judgement as the
        // phases left it, before anything is forwarded.
        let limited;
        let judgement = match self.politeness_and_in_flight(ctx).await {
            Ok(held) => {
                ctx.held = held;
                &ctx.judgement
            }
            Err(decision) => {
                limited = ctx.judgement.clone().overruled(decision);
                &limited
            }
        };
        match self
            .record_durable(ctx.line(judgement, headers::get(req.headers(), &USER_AGENT)))
            .await
        {
            Recorded::Passed => {}
            Recorded::Blocked(answer) | Recorded::AuditFailed(answer) => return answer,
        }
        if !ctx.held.is_zero() {
            self.metrics.observe_hold(ctx.held);
            tracing::info!(url = %ctx.judgement.url(), agent = %ctx.judgement.agent,
                held = %format_args!("{:.2} s", ctx.held.as_secs_f64()), "held for Crawl-delay");
        }
        match (&self.cache, pending) {
            (Some(cache), Some(pending)) => {
                Box::pin(self.forward_and_store(ctx, cache, req, pending)).await
            }
            (Some(cache), None) if ctx.cache == Some(CacheOutcome::Bypass) => {
                let (method, uri) = (req.method().clone(), req.uri().clone());
                let mut answer = self.forward_phase(ctx, req).await;
                if answer.outcome == Outcome::Allowed {
                    cache.invalidate(&method, &uri, answer.resp.status(), answer.resp.headers());
                    ResponseCache::mark_bypass(&mut answer.resp);
                }
                answer
            }
            _ => self.forward_phase(ctx, req).await,
        }
    }

    /// The judge phase: robots.txt and the destination policy for origin,
    /// path and agent, then, for what they allow, the checks of
    /// [`Proxy::beyond_robots`]. The judgement is built with its final
    /// decision. The purpose header never reaches the origin.
    async fn judge<'a>(
        &self,
        settings: &'a Settings,
        caller: &'a Caller,
        origin: Origin,
        path: String,
        mut req: Request<Body>,
    ) -> (Ctx<'a>, Request<Body>) {
        // The User-Agent policy first: the request is judged, recorded
        // and sent with the User-Agent it goes out with.
        let ours = match &settings.identity {
            Some(identity) => identity.apply_user_agent(caller.user.as_deref(), req.headers_mut()),
            None => None,
        };
        // The client's User-Agent matters only to a mapping of tokens.
        let client_ua = if settings.agent_map.is_empty() {
            None
        } else {
            req.headers().get(USER_AGENT)
        };
        let agent = settings.agent_for(caller.user_agent.as_deref().or(ours), client_ua);
        let judged = for_client(
            caller.fetch_client(),
            self.gate.judge_owned(origin, path, agent),
        )
        .await;
        let purpose_header = headers::has(req.headers(), &PURPOSE_HEADER)
            .then(|| req.headers_mut().remove(&PURPOSE_HEADER))
            .flatten();
        let purposes = settings.purposes_for(caller.user.as_deref(), purpose_header.as_ref());
        let mut license = None;
        let (verdict, fleet_spent) = if judged.decision.is_allowed() {
            self.beyond_robots(settings, caller, &judged, &req, (&purposes, &mut license))
                .await
        } else {
            (Verdict::Stands, Duration::ZERO)
        };
        if let Some(value) = license {
            // The licence token the content's RSL License Server asks for.
            req.headers_mut().insert(http::header::AUTHORIZATION, value);
        }
        let judgement = match verdict {
            Verdict::Stands => judged,
            Verdict::Annotated(note) => Judgement {
                usage: Some(note),
                ..judged
            },
            Verdict::Overruled(decision) => judged.overruled(decision),
        };
        let client_ua = if purposes.is_empty() {
            None
        } else {
            headers::get(req.headers(), &USER_AGENT).cloned()
        };
        let ctx = Ctx {
            settings,
            caller,
            judgement,
            method: req.method().clone(),
            purposes,
            cache: None,
            held: Duration::ZERO,
            fleet_spent,
            politeness_cause: None,
            lease: parking_lot::Mutex::new(None),
            client_ua,
        };
        (ctx, req)
    }

    /// The judge phase's checks of a request robots.txt allowed, in this
    /// order, the first that refuses deciding: the user's quota (a
    /// disallowed request is refused whatever the quota, and the quota is
    /// spent before Crawl-delay books a slot; in a fleet, the fleet's
    /// allowance on Redis), a body on a method that defines none, the usage
    /// preferences for the declared purposes. With how long the quota
    /// waited on the fleet's Redis.
    async fn beyond_robots(
        &self,
        settings: &Settings,
        caller: &Caller,
        judged: &Judgement,
        req: &Request<Body>,
        (purposes, license): (&[String], &mut Option<HeaderValue>),
    ) -> (Verdict, Duration) {
        let mut fleet_spent = Duration::ZERO;
        if let (Some(auth), Some(user)) = (&settings.auth, caller.user.as_deref())
            && let Some(retry_after) = match &settings.fleet {
                None => auth.quota_wait(user),
                // Boxed: kept out of the request's future without a fleet.
                Some(fleet) => {
                    let started = tokio::time::Instant::now();
                    let wait = Box::pin(auth.quota_wait_in_fleet(user, fleet)).await;
                    fleet_spent = started.elapsed();
                    wait
                }
            }
        {
            let limit = Limit::UserQuota;
            let quota = Decision::RateLimited { retry_after, limit };
            return (Verdict::Overruled(quota), fleet_spent);
        }
        // A body on a method that defines none: refused unless the origin
        // is named in `upstream.allow_bodies_for` (forward::undefined_body).
        let origin = &judged.origin;
        if forward::undefined_body(req)
            && !crate::http::origin::host_listed(&settings.allow_bodies_for, origin.host())
        {
            let reason = format!(
                "a {} request with a body (an origin that ignores it would read it as \
                 another request); upstream.allow_bodies_for does not name {}",
                req.method(),
                origin.host()
            );
            let body = Decision::BadRequest { reason };
            return (Verdict::Overruled(body), fleet_spent);
        }
        if purposes.is_empty() {
            return (Verdict::Stands, fleet_spent);
        }
        // Boxed: only for requests with declared purposes, and its
        // lookups (tdmrep.json, RSL licences) may fetch.
        let verdict = Box::pin(self.usage_verdict(settings, judged, purposes, license)).await;
        (verdict, fleet_spent)
    }

    /// The usage preferences of `judged`'s origin for the declared
    /// `purposes` (robots.txt, tdmrep.json, RSL licences): the verdict, and
    /// the licence token to send, if any.
    async fn usage_verdict(
        &self,
        settings: &Settings,
        judged: &Judgement,
        purposes: &[String],
        license: &mut Option<HeaderValue>,
    ) -> Verdict {
        let mut note = self.gate.usage(judged, purposes);
        if settings.usage_tdmrep && purposes.iter().any(|p| is_tdm_purpose(p)) {
            // Known before the fetch: the origin's tdmrep.json (one
            // cached lookup per request).
            let state = self.gate.tdmrep(&judged.origin).await;
            let (_, notes) = crate::judge::Gate::tdm_file_notes(&state, &judged.path, purposes);
            note = UsageNote::combine(note, notes);
        }
        // RSL 1.0: the robots.txt `License:` documents, global.
        let documents = crate::judge::Gate::licenses(judged);
        if !documents.is_empty() {
            let mut licensed = crate::judge::licensing::Licensed::default();
            let url = judged.url();
            for (line, doc) in &documents {
                let state = self.gate.rsl(doc).await;
                let source = format!("robots.txt line {line} License");
                let tokens = &settings.usage_licenses;
                licensed.add(&state, &source, (&url, &judged.path), purposes, tokens);
            }
            note = UsageNote::combine(note, licensed.notes);
            *license = licensed.authorization;
        }
        match note {
            None => Verdict::Stands,
            Some(note) => match settings.usage_mode {
                UsageMode::Enforce => Verdict::Overruled(Decision::UsageDisallowed(note)),
                UsageMode::Annotate => Verdict::Annotated(note),
            },
        }
    }

    /// The cache phase: a hit (or an offline/only-if-cached 504) is
    /// recorded like any request and answered here; a miss or revalidation
    /// goes on with what the cache needs to store the response.
    async fn cache_lookup(
        &self,
        ctx: &mut Ctx<'_>,
        cache: &ResponseCache,
        req: Request<Body>,
    ) -> Cached {
        let (parts, body) = req.into_parts();
        let found = cache.lookup(&parts, ctx.caller.user.as_deref()).await;
        let req = Request::from_parts(parts, body);
        let (outcome, pending) = match found {
            Lookup::Hit(mut resp) => {
                if ctx.settings.via {
                    forward::add_via(resp.headers_mut(), &self.via);
                }
                ctx.cache = Some(CacheOutcome::Hit);
                return Cached::Answered(self.answer_cached(ctx, &req, resp));
            }
            Lookup::Unavailable(resp) => {
                ctx.cache = Some(CacheOutcome::Unavailable);
                return Cached::Answered(self.answer_cached(ctx, &req, resp));
            }
            Lookup::Miss(pending) => (CacheOutcome::Miss, Some(pending)),
            Lookup::Revalidate(pending) => (CacheOutcome::Revalidate, Some(pending)),
            Lookup::Bypass => (CacheOutcome::Bypass, None),
        };
        ctx.cache = Some(outcome);
        Cached::Continue(req, pending)
    }

    /// A request the cache answered: recorded like any, never forwarded.
    fn answer_cached(&self, ctx: &Ctx<'_>, req: &Request<Body>, resp: Response<Body>) -> Answer {
        match self.record(ctx.line(&ctx.judgement, headers::get(req.headers(), &USER_AGENT))) {
            Recorded::Passed => Answer::new(Outcome::Allowed, resp),
            Recorded::Blocked(answer) | Recorded::AuditFailed(answer) => answer,
        }
    }

    /// The politeness phase: waits for the origin's Crawl-delay slot (no
    /// earlier than the end of a pause its own 429 or 503 made; its
    /// interval at least the origin's response-time floor); how long the
    /// request was held, or the `rate_limited` decision that refuses it;
    /// with the cause when it was held or refused. Most origins have no
    /// Crawl-delay and no pause: no key is built then (an atomic read says
    /// no origin is paused, or the origin is looked up).
    pub(super) async fn politeness(
        &self,
        ctx: &Ctx<'_>,
    ) -> (Result<Duration, Decision>, Option<&'static str>) {
        let politeness = &ctx.settings.politeness;
        let judgement = &ctx.judgement;
        let fleet = ctx.settings.fleet.as_deref();
        // Raised to the origin's response-time floor, if any.
        let crawl_delay = Self::crawl_delay_with_latency(ctx);
        let interval = politeness.effective_interval(crawl_delay);
        let any_paused = politeness.any_paused(fleet);
        if !judgement.decision.is_allowed() || (interval.is_none() && !any_paused) {
            return (Ok(Duration::ZERO), None);
        }
        let key = judgement.politeness_key();
        let pause = if any_paused {
            politeness.known_pause(crate::judge::politeness::origin_of(&key), fleet)
        } else {
            None
        };
        if interval.is_none() && pause.is_none() {
            return (Ok(Duration::ZERO), None);
        }
        let cause = match pause {
            Some(signal) => signal.cause(),
            // The response-time floor set the interval.
            None if crawl_delay != judgement.crawl_delay => "latency",
            None => politeness.interval_cause(crawl_delay),
        };
        let _waiting = self.metrics.politeness_waiting();
        let acquired = match &ctx.settings.fleet {
            Some(fleet) => {
                politeness
                    .acquire_in_fleet(fleet, &key, crawl_delay, ctx.fleet_spent)
                    .await
            }
            None => politeness.acquire_signalled(&key, crawl_delay).await,
        };
        match acquired {
            Ok(held) if held.is_zero() => (Ok(held), None),
            Ok(held) => {
                self.metrics.politeness(cause, false);
                (Ok(held), Some(cause))
            }
            Err(not_now) => {
                let (decision, cause) = match not_now {
                    NotNow::Limited(limited) => (
                        Decision::RateLimited {
                            retry_after: limited.retry_after,
                            limit: Limit::CrawlDelay,
                        },
                        cause,
                    ),
                    NotNow::FleetUnavailable => (
                        Decision::RateLimited {
                            retry_after: Duration::from_secs(1),
                            limit: Limit::FleetUnavailable,
                        },
                        cause,
                    ),
                    NotNow::Paused(limited, signal) => (
                        Decision::RateLimited {
                            retry_after: limited.retry_after,
                            limit: Limit::OriginPause(signal),
                        },
                        signal.cause(),
                    ),
                };
                self.metrics.politeness(cause, true);
                (Err(decision), Some(cause))
            }
        }
    }

    /// The forward phase: the request goes to the origin. A response the
    /// proxy had to make itself is counted as the failure it is; a
    /// destination refused at connect time (a name that resolved to a
    /// refused address after robots.txt was judged) is a refusal like any
    /// other, with its audit line.
    async fn forward_phase(&self, ctx: &Ctx<'_>, req: Request<Body>) -> Answer {
        match self.forward(ctx, req).await {
            Forwarded::Response(resp) => Answer::new(Outcome::Allowed, resp),
            Forwarded::Failed(outcome, resp) => Answer::new(outcome, resp),
            Forwarded::Refused(reason) => {
                let refusal = Decision::Refused { reason };
                let refused = ctx.judgement.clone().overruled(refusal);
                self.record_durable(ctx.line_again(&refused))
                    .await
                    .refusal(&refused)
            }
        }
    }

    /// Sends the request to its origin (upgraded connections relayed).
    async fn forward(&self, ctx: &Ctx<'_>, mut req: Request<Body>) -> Forwarded {
        let (settings, origin) = (ctx.settings, &ctx.judgement.origin);
        forward::drop_trailing_dot(&mut req, origin);
        // Payments, the origin's signals and the paid retry are boxed:
        // kept inline, their futures (the retry holds a whole send) would
        // make every request's future larger, and it is moved at each level.
        let payable = if settings.payments.is_some() {
            match Box::pin(self.payable(ctx, &mut req)).await {
                Ok(p) => p,
                Err(unpaid) => return Forwarded::Response(unpaid.response(&origin.to_string())),
            }
        } else {
            super::payments::take_choice(req.headers_mut());
            None
        };
        // Signed last, over the request as it goes out.
        if let Some(signer) = settings.identity.as_deref().and_then(|i| i.signer()) {
            crate::identity::sign_for_origin(signer, origin, &mut req);
        }
        let timeout = settings.response_timeout;
        if crate::http::headers::is_upgrade(req.headers()) {
            let upgrade = upgrade::UpgradeSettings {
                policy: self.gate.policy(),
                connect_timeout: self.upstream.settings().connect_timeout,
                response_timeout: timeout,
                tunnel_idle_timeout: settings.tunnel_idle_timeout,
                max_informational: settings.max_informational,
                tls: &self.upstream_tls,
                via: settings.via.then_some(&self.via),
                peer: ctx.caller.client,
            };
            // Boxed: the upgrade's future (its own TLS connection) is
            // several times the size of a plain forward's, and kept inline
            // it would be part of, and moved with, every request's future.
            return Box::pin(upgrade::forward(origin, req, upgrade)).await;
        }
        // One send to the origin, timed (one clock read for the metric and
        // the record); a paid retry is sent the same way.
        let send = async |req| {
            let start = crate::http::clock::now();
            let forwarded = forward::forward(
                &self.client,
                &self.upstream,
                origin,
                req,
                settings.via.then_some(&self.via),
                forward::ResponseTimeout {
                    started: start,
                    after: timeout,
                },
                settings.max_informational,
            )
            .await;
            let took = crate::http::clock::now().saturating_duration_since(start);
            self.metrics.observe_upstream(took);
            (forwarded, took)
        };
        let (mut forwarded, took) = send(req).await;
        match payable {
            None => self.after_response(ctx, &mut forwarded, took),
            // The request's place among the origin's requests in flight is
            // kept through a paid retry: given to the body of the answer
            // the client gets, not to the 402's.
            Some(payable) => {
                self.observe_response_time(ctx, &forwarded, took);
                let resend = async |req: Request<Body>| {
                    let (paid, took) = send(req).await;
                    self.observe_response_time(ctx, &paid, took);
                    paid
                };
                forwarded = Box::pin(self.pay(ctx, payable, forwarded, resend)).await;
                Self::hand_lease_to_body(ctx, &mut forwarded);
            }
        }
        if let Forwarded::Response(resp) = &forwarded
            && crate::http::signal::is_signal(resp.status().as_u16())
        {
            Box::pin(self.origin_signal(ctx, resp.status().as_u16(), resp.headers())).await;
        }
        if !ctx.held.is_zero()
            && let Forwarded::Response(resp) | Forwarded::Failed(_, resp) = &mut forwarded
        {
            resp.headers_mut().insert(
                respond::DELAY_HEADER,
                respond::header_value(&format!("{:.3}", ctx.held.as_secs_f64())),
            );
        }
        forwarded
    }

    /// The forward phase of a cache miss or revalidation, and the store
    /// phase: sent with the cache's conditional headers, stored while it
    /// streams to the client. A revalidation may have to be sent again
    /// without its conditionals (a 304 that selects nothing stored): its
    /// head is kept for that (a GET or HEAD has no body to keep), and the
    /// second origin request takes a Crawl-delay slot of its own.
    async fn forward_and_store(
        &self,
        ctx: &mut Ctx<'_>,
        cache: &ResponseCache,
        mut req: Request<Body>,
        pending: Pending,
    ) -> Answer {
        let mut refetch = pending.is_revalidation().then(|| {
            let mut head = Request::new(crate::http::body::empty_body());
            *head.method_mut() = req.method().clone();
            *head.uri_mut() = req.uri().clone();
            *head.version_mut() = req.version();
            *head.headers_mut() = req.headers().clone();
            pending.remove_conditional_headers(head.headers_mut());
            head
        });
        pending.add_conditional_headers(req.headers_mut());
        let mut pending = pending;
        loop {
            let answer = self.forward_phase(ctx, req).await;
            if answer.outcome != Outcome::Allowed {
                // The proxy's own 502/504: nothing to store.
                return answer;
            }
            match self.store(cache, pending, answer.resp).await {
                Ok(resp) => return Answer::new(answer.outcome, resp),
                Err((again, resp)) => match refetch.take() {
                    Some(r) => {
                        // A 304 has no body: its place in flight (if it
                        // holds one) is given back before the refetch
                        // takes another.
                        let resp = resp.map(|_| crate::http::body::empty_body());
                        // A second origin request: a Crawl-delay slot of its
                        // own, or the 304 as it came when none is left.
                        match self.politeness_and_in_flight(ctx).await {
                            Ok(held) => ctx.held = held,
                            Err(_) => return Answer::new(answer.outcome, resp),
                        }
                        (req, pending) = (r, again);
                    }
                    // Only a revalidation is refetched: not reached.
                    None => return Answer::new(answer.outcome, resp),
                },
            }
        }
    }

    /// The store phase: hands an origin response to the cache. The hold
    /// and this proxy's Via are this response's, not the stored one's (a
    /// hit gets the Via of its own time): taken off before, put back after.
    /// `Err` when the cache asks for a refetch, with the origin's response
    /// as it came.
    async fn store(
        &self,
        cache: &ResponseCache,
        pending: Pending,
        mut resp: Response<Body>,
    ) -> Result<Response<Body>, (Pending, Response<Body>)> {
        let delay = resp.headers_mut().remove(respond::DELAY_HEADER);
        let via = self.remove_own_via(resp.headers_mut());
        let mut resp = match cache.complete(pending, resp).await {
            Completed::Response(resp) => resp,
            Completed::Refetch(p, resp) => return Err((*p, resp)),
        };
        if let Some(d) = delay {
            resp.headers_mut().insert(respond::DELAY_HEADER, d);
        }
        if via {
            forward::add_via(resp.headers_mut(), &self.via);
        }
        Ok(resp)
    }
}
