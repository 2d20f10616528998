//! The proxy: accepting clients, judging each request, forwarding the
//! allowed ones.

pub(crate) mod connect;
pub(crate) mod forward;
pub(crate) mod phases;
pub(crate) mod respond;
pub(crate) mod slots;
pub(crate) mod upgrade;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use http::header::{HeaderValue, PROXY_AUTHORIZATION, USER_AGENT, VIA};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::admit::{AuthOutcome, ClientAcl, ProxyAuth};
use crate::http::body::Body;
use crate::http::origin::Origin;
use crate::judge::politeness::Politeness;
use crate::judge::{Decision, Gate, Judgement, Limit};
use crate::ops::audit::AuditLog;
use crate::ops::metrics::{self, Metrics};
use crate::response_cache::{Completed, Lookup};
use crate::robots::product_token;
use crate::tls::Minter;
use crate::upstream::{self, HttpClient};
use phases::{Answer, Caller, Failed, Outcome, Recorded};

/// Settings that a reload may change.
#[derive(Clone)]
pub struct Settings {
    /// Default robots product token (lower-cased).
    pub(crate) agent: String,
    /// Client User-Agent product token → robots token.
    pub(crate) agent_map: HashMap<String, String>,
    pub(crate) response_timeout: Duration,
    /// `upstream.max_informational`: 1xx responses allowed before the
    /// final one; more is a 502.
    pub(crate) max_informational: usize,
    /// Whether forwarded messages get a `Via` header.
    pub(crate) via: bool,
    /// `client_header_timeout`: for new client connections, and inside
    /// intercepted tunnels.
    pub(crate) header_timeout: Duration,
    /// `tunnel_idle_timeout`: for new blind tunnels.
    pub(crate) tunnel_idle_timeout: Duration,
    /// `max_streams_per_tunnel`: concurrent HTTP/2 streams in an
    /// intercepted tunnel, for new tunnels.
    pub(crate) max_streams_per_tunnel: u32,
    /// `shutdown_grace`: read when shutdown begins.
    pub(crate) shutdown_grace: Duration,
    /// Hosts tunnelled without interception.
    pub(crate) no_intercept: Vec<String>,
    /// `upstream.allow_bodies_for`: hosts whose GET, HEAD, DELETE and
    /// OPTIONS requests may carry a body.
    pub(crate) allow_bodies_for: Vec<String>,
    /// Clients allowed to connect.
    pub(crate) acl: ClientAcl,
    /// Proxy authentication, if users are configured.
    pub(crate) auth: Option<Arc<ProxyAuth>>,
    /// `usage.purposes`: usage categories every request is for.
    pub(crate) purposes: Vec<String>,
    /// `[[access.users]] purposes`, by user name.
    pub(crate) user_purposes: HashMap<String, Vec<String>>,
    /// `usage.mode`.
    pub(crate) usage_mode: crate::judge::UsageMode,
    /// Crawl-delay enforcement.
    pub politeness: Arc<Politeness>,
    /// What `politeness` was built from (kept across reloads when unchanged).
    pub(crate) politeness_config: crate::judge::politeness::PolitenessConfig,
}

/// The request header that adds purposes for one request (removed before
/// the request is forwarded).
/// A constant name: looked up on every request, and a `&str` name is parsed
/// on each use.
pub(crate) static PURPOSE_HEADER: http::header::HeaderName =
    http::header::HeaderName::from_static("robots-proxy-purpose");

/// The origin's usage preferences for a response (draft-ietf-aipref-attach).
static CONTENT_USAGE: http::header::HeaderName =
    http::header::HeaderName::from_static("content-usage");

impl Settings {
    /// The purposes a request is for: the configured ones, its user's, and
    /// those its `Robots-Proxy-Purpose` header adds (a request can add
    /// purposes, never drop one: fewer purposes would mean fewer blocks).
    /// Empty, without allocating, when none is declared anywhere.
    pub(crate) fn purposes_for(
        &self,
        user: Option<&str>,
        header: Option<&HeaderValue>,
    ) -> Vec<String> {
        let mut all = self.purposes.clone();
        if let Some(own) = user.and_then(|u| self.user_purposes.get(u)) {
            all.extend(own.iter().cloned());
        }
        if let Some(v) = header.and_then(|v| v.to_str().ok()) {
            all.extend(
                v.split(',')
                    .map(|p| p.trim().to_ascii_lowercase())
                    .filter(|p| crate::robots::usage::is_category(p)),
            );
        }
        all.sort();
        all.dedup();
        all
    }

    /// The robots token for a request. Precedence: the authenticated
    /// user's configured token, then a mapping of the client's own
    /// User-Agent product token, then the default agent.
    /// Borrowed, not copied: it is looked up on every request.
    pub(crate) fn agent_for<'a>(
        &'a self,
        user_agent: Option<&'a str>,
        client_ua: Option<&HeaderValue>,
    ) -> &'a str {
        if let Some(token) = user_agent {
            return token;
        }
        if !self.agent_map.is_empty()
            && let Some(ua) = client_ua.and_then(|v| v.to_str().ok())
            && let Some(mapped) = self.agent_map.get(&product_token(ua))
        {
            return mapped;
        }
        &self.agent
    }
}

/// Everything a request needs, shared by all connections.
pub struct Proxy {
    pub(crate) gate: Gate,
    pub(crate) client: HttpClient,
    /// Plain-http upstream connections, driven by the requests that use them.
    pub(crate) upstream: Arc<upstream::Pool>,
    pub audit: AuditLog,
    pub(crate) metrics: Metrics,
    /// Mints leaf certificates for intercepted CONNECTs.
    pub(crate) minter: Arc<Minter>,
    /// Upstream TLS, for the connections of upgraded (WebSocket) requests.
    pub(crate) upstream_tls: Arc<rustls::ClientConfig>,
    settings: RwLock<Arc<Settings>>,
    /// The response cache, when `cache.enabled` (see [`Proxy::with_cache`]).
    cache: Option<crate::response_cache::ResponseCache>,
    /// Requests in flight per client address (`max_requests_per_client`).
    client_slots: Arc<slots::ClientSlots>,
    /// `Via` value, with an instance id used for loop detection.
    via: HeaderValue,
    instance: String,
}

/// The ways to an origin: the pooled client (https, bodies), the plain-http
/// pool, and the upstream TLS settings (for upgraded connections).
pub(crate) struct Upstreams {
    pub(crate) client: HttpClient,
    pub(crate) pool: Arc<upstream::Pool>,
    pub(crate) tls: Arc<rustls::ClientConfig>,
}

impl Proxy {
    pub(crate) fn new(
        gate: Gate,
        upstreams: Upstreams,
        audit: AuditLog,
        metrics: Metrics,
        minter: Arc<Minter>,
        settings: Settings,
    ) -> Proxy {
        let Upstreams {
            client,
            pool: upstream,
            tls: upstream_tls,
        } = upstreams;
        let instance = format!("{:08x}", rand_id());
        let via = respond::header_value(&format!("1.1 robots-proxy ({instance})"));
        Proxy {
            gate,
            client,
            upstream,
            audit,
            metrics,
            minter,
            upstream_tls,
            settings: RwLock::new(Arc::new(settings)),
            cache: None,
            client_slots: slots::ClientSlots::new(usize::MAX),
            via,
            instance,
        }
    }

    /// The proxy with a response cache: the cache phase of [`phases`].
    pub(crate) fn with_cache(
        mut self,
        cache: Option<crate::response_cache::ResponseCache>,
    ) -> Proxy {
        self.cache = cache;
        self
    }

    /// The proxy with at most `limit` requests in flight per client
    /// address ([`slots`]).
    pub(crate) fn with_requests_per_client(mut self, limit: usize) -> Proxy {
        self.client_slots = slots::ClientSlots::new(limit);
        self
    }

    /// The response cache, if enabled.
    pub fn response_cache(&self) -> Option<&crate::response_cache::ResponseCache> {
        self.cache.as_ref()
    }

    pub fn settings(&self) -> Arc<Settings> {
        match self.settings.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub(crate) fn set_settings(&self, settings: Settings) {
        match self.settings.write() {
            Ok(mut s) => *s = Arc::new(settings),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(settings),
        }
    }

    /// True if the request already passed through this proxy instance.
    fn is_loop(&self, req: &Request<Incoming>) -> bool {
        req.headers()
            .get_all(VIA)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.contains(&self.instance))
    }

    /// The admit phase: client ACL and proxy authentication.
    async fn admit(
        &self,
        settings: &Settings,
        client: SocketAddr,
        queue: Arc<slots::ClientQueue>,
        req: &Request<Incoming>,
    ) -> Result<Caller, Answer> {
        if !settings.acl.allows(client.ip()) {
            tracing::warn!(%client, "client address not in access.allow_clients");
            return Err(Answer::new(
                Outcome::Refused,
                respond::refused(&format!(
                    "client address {} is not allowed to use this proxy",
                    client.ip()
                )),
            ));
        }
        let Some(auth) = &settings.auth else {
            return Ok(Caller {
                client,
                queue,
                user: None,
                user_agent: None,
            });
        };
        match auth
            .check_async(client.ip(), req.headers().get(PROXY_AUTHORIZATION))
            .await
        {
            AuthOutcome::Ok { user, agent } => Ok(Caller {
                client,
                queue,
                user: Some(user.into()),
                user_agent: agent.map(|a| product_token(&a)),
            }),
            AuthOutcome::Throttled { retry_after, first } => {
                if first {
                    // Once per address and window: fail2ban-friendly.
                    tracing::warn!(client_ip = %client.ip(),
                        "too many proxy authentication attempts: refusing them for now");
                }
                Err(Answer::new(
                    Outcome::Refused,
                    respond::too_many(
                        retry_after,
                        "Too many proxy authentication attempts from this address; retry later\n",
                    ),
                ))
            }
            outcome => {
                if let AuthOutcome::Invalid { user } = &outcome {
                    // One line per failure, with the address: fail2ban-friendly.
                    tracing::warn!(client_ip = %client.ip(), user = user.as_deref().unwrap_or("-"),
                        "proxy authentication failed");
                }
                Err(Answer::new(
                    Outcome::Refused,
                    crate::admit::challenge_response(respond::full(
                        "Proxy authentication required\n",
                    )),
                ))
            }
        }
    }

    /// Handles one request from a client connection: the phases of
    /// [`phases`], ended by [`Proxy::finish`].
    pub(crate) async fn handle(
        self: Arc<Self>,
        client: SocketAddr,
        queue: Arc<slots::ClientQueue>,
        req: Request<Incoming>,
    ) -> Response<Body> {
        // One read of the reloadable settings per request.
        let settings = self.settings();
        let caller = match self.admit(&settings, client, queue, &req).await {
            Ok(c) => c,
            Err(answer) => return self.finish(answer),
        };
        if req.method() == Method::CONNECT {
            // Boxed: the tunnel's future is large, and kept inline it would
            // make every plain request's future (moved on each call) as large.
            // A CONNECT is finished where its fate is known.
            return Box::pin(connect::handle(self, settings, caller, req)).await;
        }
        let answer = match self.frame(&req) {
            Ok((origin, path)) => {
                self.serve(&settings, &caller, origin, &path, req.map(|b| b.boxed()))
                    .await
            }
            Err(answer) => answer,
        };
        self.finish(answer)
    }
}

impl crate::server::Handler for Proxy {
    type Connection = Arc<slots::ClientQueue>;

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn admits(&self, ip: std::net::IpAddr) -> bool {
        self.settings().acl.allows(ip)
    }

    fn shutdown_grace(&self) -> Duration {
        self.settings().shutdown_grace
    }

    fn header_timeout(&self) -> Duration {
        self.settings().header_timeout
    }

    /// The client address's queue of requests in flight
    /// (`max_requests_per_client`), taken once per connection.
    fn connection(&self, peer: SocketAddr) -> Arc<slots::ClientQueue> {
        self.client_slots.queue(peer.ip())
    }

    fn handle(
        self: Arc<Self>,
        peer: SocketAddr,
        queue: Arc<slots::ClientQueue>,
        req: Request<Incoming>,
    ) -> impl std::future::Future<Output = Response<Body>> + Send {
        Proxy::handle(self, peer, queue, req)
    }

    fn count_malformed(&self) {
        self.count(Outcome::BadRequest);
    }
}

impl Proxy {
    /// The frame phase of a plain request: a method the proxy forwards,
    /// not a loop, an absolute-form target with a usable origin.
    // The Err is the response itself, built once and moved to `finish`.
    #[allow(clippy::result_large_err)]
    fn frame(&self, req: &Request<Incoming>) -> Result<(Origin, String), Answer> {
        if let Some(resp) = refuse_method(req.method()) {
            return Err(Answer::new(Outcome::BadRequest, resp));
        }
        if self.is_loop(req) {
            return Err(Answer::new(
                Outcome::LoopDetected,
                respond::text(
                    StatusCode::LOOP_DETECTED,
                    "Loop detected: this request already passed through this proxy\n",
                ),
            ));
        }
        if req.uri().scheme().is_none() || req.uri().authority().is_none() {
            return Err(Answer::bad_request(
                "robots-proxy is a forward proxy: send absolute-form requests \
                 (GET http://host/path HTTP/1.1), e.g. with curl -x\n",
            ));
        }
        let origin = Origin::from_uri(req.uri())
            .map_err(|e| Answer::bad_request(format!("Bad request URL: {e}\n")))?;
        Ok((origin, path_of(req.uri())))
    }

    /// The phases from judge to forward for a request with an absolute URI
    /// on `origin`; plain HTTP and intercepted requests alike. The request
    /// holds one of its client's slots ([`slots`]) from here until its
    /// response body is sent; one that waited `response_timeout` for one
    /// gets 429.
    pub(crate) async fn serve(
        &self,
        settings: &Settings,
        caller: &Caller,
        origin: Origin,
        path: &str,
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
        let answer = self.serve_judged(settings, caller, origin, path, req).await;
        Answer::new(answer.outcome, slot.hold_until_sent(answer.resp))
    }

    /// [`Proxy::serve`] once the request holds its client's slot.
    async fn serve_judged(
        &self,
        settings: &Settings,
        caller: &Caller,
        origin: Origin,
        path: &str,
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
        // Judge.
        let agent = settings.agent_for(caller.user_agent.as_deref(), req.headers().get(USER_AGENT));
        let mut judgement = self.gate.judge(&origin, path, agent).await;
        self.count_lookup(&judgement);
        // The user's own quota, after robots.txt (a disallowed request is
        // refused whatever the quota) and before Crawl-delay books a slot.
        if judgement.decision.is_allowed()
            && let (Some(auth), Some(user)) = (&settings.auth, caller.user.as_deref())
            && let Some(retry_after) = auth.quota_wait(user)
        {
            judgement.decision = Decision::RateLimited {
                retry_after,
                limit: Limit::UserQuota,
            };
        }
        // A body on a method that defines none: refused unless the origin
        // is named in `upstream.allow_bodies_for` (forward::undefined_body).
        if judgement.decision.is_allowed()
            && forward::undefined_body(&req)
            && !connect::no_intercept(&settings.allow_bodies_for, origin.host())
        {
            judgement.decision = Decision::BadRequest {
                reason: format!(
                    "a {} request with a body (an origin that ignores it would read it as \
                     another request); upstream.allow_bodies_for does not name {}",
                    req.method(),
                    origin.host()
                ),
            };
        }
        // Usage preferences for the declared purposes, on what robots.txt
        // allowed; the purpose header never reaches the origin.
        let mut req = req;
        let purposes = settings.purposes_for(
            caller.user.as_deref(),
            req.headers_mut().remove(&PURPOSE_HEADER).as_ref(),
        );
        if judgement.decision.is_allowed()
            && !purposes.is_empty()
            && let Some(note) = self.gate.usage(&judgement, &purposes)
        {
            match settings.usage_mode {
                crate::judge::UsageMode::Enforce => {
                    judgement.decision = Decision::UsageDisallowed(note);
                }
                crate::judge::UsageMode::Annotate => judgement.usage = Some(note),
            }
        }
        if purposes.is_empty() {
            return self
                .serve_allowed(settings, caller, &origin, req, judgement)
                .await;
        }
        // Boxed, as the cache path: kept inline, the judgement and purposes
        // this path keeps across its await would make every request's
        // future larger, and hyper moves it.
        Box::pin(self.serve_for_purposes(settings, caller, &origin, req, judgement, purposes)).await
    }

    /// [`Proxy::serve_allowed`] for a request that declares purposes: the
    /// response carries the annotation, and its own `Content-Usage` header
    /// is applied.
    async fn serve_for_purposes(
        &self,
        settings: &Settings,
        caller: &Caller,
        origin: &Origin,
        req: Request<Body>,
        judgement: Judgement,
        purposes: Vec<String>,
    ) -> Answer {
        let judged = judgement.clone();
        let method = req.method().clone();
        let mut answer = self
            .serve_allowed(settings, caller, origin, req, judgement)
            .await;
        if let Some(note) = &judged.usage {
            let line = respond::usage_line(note, &judged.robots_url());
            answer
                .resp
                .headers_mut()
                .insert(respond::USAGE_HEADER, respond::header_value(&line));
        }
        self.apply_content_usage(settings, caller, judged, &method, &purposes, answer)
    }

    /// The origin's `Content-Usage` response header, applied like the
    /// robots.txt lines: a forwarded (or cached) response whose header
    /// says `n` for a declared purpose is withheld with a 403 and an audit
    /// line saying it was fetched and withheld (`enforce`), or annotated
    /// (`annotate`).
    fn apply_content_usage(
        &self,
        settings: &Settings,
        caller: &Caller,
        mut judged: Judgement,
        method: &Method,
        purposes: &[String],
        mut answer: Answer,
    ) -> Answer {
        let Some(value) = answer
            .resp
            .headers()
            .get(&CONTENT_USAGE)
            .and_then(|v| v.to_str().ok())
        else {
            return answer;
        };
        let statement = crate::robots::usage::parse_statement(value);
        let Some(purpose) = purposes
            .iter()
            .find(|p| statement.get(p) == Some(crate::robots::usage::Pref::Disallowed))
        else {
            return answer;
        };
        let mode = settings.usage_mode;
        let text = format!(
            "Content-Usage: {value} (the origin's response header{})",
            if mode == crate::judge::UsageMode::Enforce {
                "; fetched and withheld"
            } else {
                ""
            }
        );
        let note = Box::new(crate::judge::UsageNote {
            purpose: purpose.as_str().into(),
            line: 0,
            rule: text.clone().into(),
            text: text.into(),
        });
        match mode {
            crate::judge::UsageMode::Annotate => {
                let line = respond::usage_line(&note, &judged.robots_url());
                answer
                    .resp
                    .headers_mut()
                    .append(respond::USAGE_HEADER, respond::header_value(&line));
                judged.usage = Some(note);
                // The annotation is evidence: recorded whatever log_all.
                if let Err(refusal) =
                    self.record(caller, &judged, method.as_str(), Recorded::Request)
                {
                    return refusal;
                }
                answer
            }
            crate::judge::UsageMode::Enforce => {
                tracing::info!(url = %judged.url(), purpose = %purpose,
                    "response withheld: its Content-Usage header disallows a declared purpose");
                judged.decision = Decision::UsageDisallowed(note);
                // The response (and its body) is dropped unread.
                match self.record(caller, &judged, method.as_str(), Recorded::Request) {
                    Err(blocked) => blocked,
                    Ok(()) => Answer::new(Outcome::Refused, respond::refused("usage preference")),
                }
            }
        }
    }

    /// The cache, politeness, record and forward phases of a judged
    /// request.
    async fn serve_allowed(
        &self,
        settings: &Settings,
        caller: &Caller,
        origin: &Origin,
        req: Request<Body>,
        mut judgement: Judgement,
    ) -> Answer {
        // Cache: only what robots.txt allowed; a hit takes no Crawl-delay
        // slot. Boxed: kept inline, the cache's futures would make every
        // request's future larger, and hyper moves it (measured: +20%
        // instructions per request with the cache off).
        if judgement.decision.is_allowed()
            && let Some(cache) = &self.cache
        {
            return Box::pin(self.serve_cached(settings, caller, origin, req, judgement, cache))
                .await;
        }
        let held = match self
            .hold_and_record(
                settings,
                caller,
                &mut judgement,
                req.method().as_str(),
                None,
            )
            .await
        {
            Ok(held) => held,
            Err(answer) => return answer,
        };
        self.forward_judged(settings, caller, origin, req, held, &mut judgement)
            .await
    }

    /// The politeness and record phases: waits for a Crawl-delay slot (or
    /// makes the decision `rate_limited`), then writes the audit line, with
    /// the cache's outcome when the cache was asked. `Err` ends the request.
    async fn hold_and_record(
        &self,
        settings: &Settings,
        caller: &Caller,
        judgement: &mut Judgement,
        method: &str,
        cache_label: Option<&str>,
    ) -> Result<Duration, Answer> {
        let held = self.politeness(settings, judgement).await;
        self.record_cached(caller, judgement, method, Recorded::Request, cache_label)?;
        if !held.is_zero() {
            self.metrics.observe_hold(held);
            tracing::info!(url = %judgement.url(), agent = %judgement.agent,
                held_secs = held.as_secs_f64(), "held for Crawl-delay");
        }
        Ok(held)
    }

    /// The cache, politeness, record and forward phases of an allowed
    /// request when the response cache is on: a hit (or an offline 504)
    /// is answered here; a miss or revalidation is held for Crawl-delay,
    /// recorded, forwarded with the conditional headers and stored while
    /// it streams; a successful unsafe request invalidates what it names.
    async fn serve_cached(
        &self,
        settings: &Settings,
        caller: &Caller,
        origin: &Origin,
        req: Request<Body>,
        mut judgement: Judgement,
        cache: &crate::response_cache::ResponseCache,
    ) -> Answer {
        let (parts, body) = req.into_parts();
        let found = cache.lookup(&parts, caller.user.as_deref()).await;
        let mut req = Request::from_parts(parts, body);
        let pending = match found {
            Lookup::Hit(mut resp) => {
                if settings.via {
                    forward::add_via(resp.headers_mut(), &self.via);
                }
                return self.answer_cached(caller, &judgement, req.method(), "hit", resp);
            }
            Lookup::Unavailable(resp) => {
                return self.answer_cached(caller, &judgement, req.method(), "unavailable", resp);
            }
            Lookup::Miss(pending) => Some(("miss", pending)),
            Lookup::Revalidate(pending) => Some(("revalidate", pending)),
            Lookup::Bypass => None,
        };
        let label = pending.as_ref().map_or("bypass", |(label, _)| *label);
        let held = match self
            .hold_and_record(
                settings,
                caller,
                &mut judgement,
                req.method().as_str(),
                Some(label),
            )
            .await
        {
            Ok(held) => held,
            Err(answer) => return answer,
        };
        let Some((_, pending)) = pending else {
            let (method, uri) = (req.method().clone(), req.uri().clone());
            let mut answer = self
                .forward_judged(settings, caller, origin, req, held, &mut judgement)
                .await;
            if answer.outcome == Outcome::Allowed {
                cache.invalidate(&method, &uri, answer.resp.status(), answer.resp.headers());
                crate::response_cache::ResponseCache::mark_bypass(&mut answer.resp);
            }
            return answer;
        };
        // A revalidation may have to be sent again without its
        // conditionals (a 304 that selects nothing stored): its head is
        // kept for that. A GET or HEAD has no body to keep.
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
        let mut held = held;
        let mut pending = pending;
        loop {
            let answer = self
                .forward_judged(settings, caller, origin, req, held, &mut judgement)
                .await;
            if answer.outcome != Outcome::Allowed {
                // The proxy's own 502/504: nothing to store.
                return answer;
            }
            match self.complete_cached(cache, pending, answer.resp).await {
                Ok(resp) => return Answer::new(answer.outcome, resp),
                Err((again, resp)) => match refetch.take() {
                    Some(r) => {
                        // A second origin request: a Crawl-delay slot of its
                        // own, or the 304 as it came when none is left.
                        held = self.politeness(settings, &mut judgement).await;
                        if !judgement.decision.is_allowed() {
                            return Answer::new(answer.outcome, resp);
                        }
                        (req, pending) = (r, again);
                    }
                    // Only a revalidation is refetched: not reached.
                    None => return Answer::new(answer.outcome, resp),
                },
            }
        }
    }

    /// Hands an origin response to the cache. The hold and this proxy's
    /// Via are this response's, not the stored one's (a hit gets the Via
    /// of its own time): taken off before, put back after. `Err` when the
    /// cache asks for a refetch, with the origin's response as it came.
    async fn complete_cached(
        &self,
        cache: &crate::response_cache::ResponseCache,
        pending: crate::response_cache::Pending,
        mut resp: Response<Body>,
    ) -> Result<Response<Body>, (crate::response_cache::Pending, Response<Body>)> {
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

    /// The forward phase for a judged request: a name that resolved to a
    /// refused address at connect time is a refusal like any other, with
    /// its audit line.
    async fn forward_judged(
        &self,
        settings: &Settings,
        caller: &Caller,
        origin: &Origin,
        req: Request<Body>,
        held: Duration,
        judgement: &mut Judgement,
    ) -> Answer {
        let method = req.method().clone();
        let (answer, refusal) = self
            .forward(settings, caller.client, origin, req, held)
            .await;
        match refusal {
            Some(reason) => self.refuse(caller, judgement, method.as_str(), reason),
            None => answer,
        }
    }

    /// Takes this proxy's own `Via` entry out of response headers; whether
    /// there was one.
    fn remove_own_via(&self, headers: &mut http::HeaderMap) -> bool {
        let all: Vec<HeaderValue> = headers.get_all(VIA).iter().cloned().collect();
        if !all.contains(&self.via) {
            return false;
        }
        headers.remove(VIA);
        for v in all.into_iter().filter(|v| *v != self.via) {
            headers.append(VIA, v);
        }
        true
    }

    /// A request the cache answered (a hit, or an offline/only-if-cached
    /// 504): recorded like any, never forwarded.
    fn answer_cached(
        &self,
        caller: &Caller,
        judgement: &Judgement,
        method: &Method,
        label: &str,
        resp: Response<Body>,
    ) -> Answer {
        if let Err(answer) = self.record_cached(
            caller,
            judgement,
            method.as_str(),
            Recorded::Request,
            Some(label),
        ) {
            return answer;
        }
        Answer::new(Outcome::Allowed, resp)
    }

    /// The politeness phase: waits for the origin's Crawl-delay slot, or
    /// turns the decision into `rate_limited`. Returns how long the request
    /// was held. Most origins have no Crawl-delay: no key is built then.
    async fn politeness(&self, settings: &Settings, judgement: &mut Judgement) -> Duration {
        if !judgement.decision.is_allowed()
            || settings
                .politeness
                .effective_interval(judgement.crawl_delay)
                .is_none()
        {
            return Duration::ZERO;
        }
        let key = politeness_key(judgement);
        let _waiting = self.metrics.politeness_waiting();
        match settings
            .politeness
            .acquire(&key, judgement.crawl_delay)
            .await
        {
            Ok(waited) => waited,
            Err(limited) => {
                judgement.decision = Decision::RateLimited {
                    retry_after: limited.retry_after,
                    limit: Limit::CrawlDelay,
                };
                Duration::ZERO
            }
        }
    }

    /// The forward phase: the request goes to the origin (upgraded
    /// connections relayed); a response the proxy had to make itself is
    /// counted as the failure it is, and a destination refused at connect
    /// time comes back with its reason.
    async fn forward(
        &self,
        settings: &Settings,
        client: SocketAddr,
        origin: &Origin,
        mut req: Request<Body>,
        held: Duration,
    ) -> (Answer, Option<String>) {
        forward::drop_trailing_dot(&mut req, origin);
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
                peer: client,
            };
            // Boxed: the upgrade's future (its own TLS connection) is
            // several times the size of a plain forward's, and kept inline
            // it would be part of, and moved with, every request's future.
            return Failed::answer(Box::pin(upgrade::forward(origin, req, upgrade)).await);
        }
        let start = Instant::now();
        let mut resp = forward::forward(
            &self.client,
            &self.upstream,
            origin,
            req,
            settings.via.then_some(&self.via),
            timeout,
            settings.max_informational,
        )
        .await;
        self.metrics.observe_upstream(start.elapsed());
        if !held.is_zero() {
            resp.headers_mut().insert(
                respond::DELAY_HEADER,
                respond::header_value(&format!("{:.3}", held.as_secs_f64())),
            );
        }
        Failed::answer(resp)
    }

    fn count_lookup(&self, judgement: &Judgement) {
        use crate::judge::store::{Lookup, State};
        let event = match (judgement.lookup, judgement.entry_state()) {
            (Some(Lookup::Hit), Some(State::Stale { .. })) => metrics::CacheEvent::Stale,
            (Some(Lookup::Hit), _) => metrics::CacheEvent::Hit,
            (Some(Lookup::Miss), _) => metrics::CacheEvent::Miss,
            (Some(Lookup::Expired), _) => metrics::CacheEvent::Expired,
            (None, _) => return,
        };
        self.metrics.cache_event(event);
    }
}

/// The answer to a method the proxy never forwards: TRACE makes the final
/// recipient echo the request it received, the client's credentials and
/// cookies and what the proxy added included, into a response body; a
/// crawler has no use for it.
pub(crate) fn refuse_method(method: &Method) -> Option<Response<Body>> {
    (method == Method::TRACE).then(|| {
        respond::method_not_allowed(
            "robots-proxy does not forward TRACE: it would echo the request, \
             headers included, back in a response",
        )
    })
}

/// The politeness key of a judged request: its origin and robots agent.
pub(crate) fn politeness_key(judgement: &Judgement) -> String {
    crate::judge::politeness::key(&judgement.origin, &judgement.agent)
}

pub(crate) use crate::http::origin::path_of;

/// A random-enough instance id without another dependency: the std's
/// randomly keyed hasher over the process id and the time.
fn rand_id() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish() as u32
}
