//! The proxy: accepting clients, judging each request, forwarding the
//! allowed ones.

pub(crate) mod connect;
mod current;
mod flow;
pub(crate) mod forward;
pub(crate) mod metrics;
pub mod payments;
pub(crate) mod phases;
mod pipeline;
pub(crate) mod respond;
mod signals;
pub(crate) mod slots;
pub(crate) mod upgrade;
mod usage;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{HeaderValue, PROXY_AUTHORIZATION, VIA};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::admit::{AuthOutcome, ClientAcl, ProxyAuth};
use crate::http::body::Body;
use crate::http::origin::Origin;
use crate::judge::Gate;
use crate::judge::politeness::Politeness;
use crate::metrics::Registry;
use crate::ops::activity::Activity;
use crate::ops::audit::AuditLog;
use crate::proxy::metrics::ProxyMetrics;
use crate::robots::product_token;
use crate::server::metrics::ServerMetrics;
use crate::tls::Minter;
use crate::upstream::{self, HttpClient};
use phases::{Answer, Caller, Line, Outcome, Recorded};

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
    /// Admin listener authentication (`[[admin.users]]`), if users are
    /// configured. Its verifications share `auth`'s limits.
    pub(crate) admin_auth: Option<Arc<ProxyAuth>>,
    /// `[[admin.users]] role`, by user name.
    pub(crate) admin_roles: HashMap<String, crate::admit::AdminRole>,
    /// `admin.public_proxy_url` as `host:port`, for the `/ca` page.
    pub(crate) public_proxy: Option<String>,
    /// `usage.purposes`: usage categories every request is for.
    pub(crate) purposes: Vec<String>,
    /// `[[access.users]] purposes`, by user name.
    pub(crate) user_purposes: HashMap<String, Vec<String>>,
    /// `usage.mode`.
    pub(crate) usage_mode: crate::judge::UsageMode,
    /// `usage.tdmrep`.
    pub(crate) usage_tdmrep: bool,
    /// `usage.html_meta`.
    pub(crate) usage_html_meta: bool,
    /// `[[usage.licenses]]`: License Server URL (without a trailing `/`)
    /// and `Authorization: License <token>`.
    pub(crate) usage_licenses: Arc<[(String, HeaderValue)]>,
    /// Crawl-delay enforcement.
    pub politeness: Arc<Politeness>,
    /// What `politeness` was built from (kept across reloads when unchanged).
    pub(crate) politeness_config: crate::judge::politeness::PolitenessSettings,
    /// `politeness.latency_factor` and `politeness.max_in_flight` (kept
    /// across reloads when unchanged).
    pub(crate) flow: crate::judge::politeness::flow::Flow,
    /// `[fleet]`: the shared Crawl-delay schedule, if configured (set at
    /// start, kept by reloads).
    pub(crate) fleet: Option<Arc<crate::fleet::Fleet>>,
    /// `[identity]`: the User-Agent policy and the signer; `None` (nothing
    /// done per request) when not configured.
    pub(crate) identity: Option<Arc<crate::identity::Identity>>,
    /// `[payments]`: pay per crawl within limits; `None` when off.
    pub(crate) payments: Option<Arc<payments::Payments>>,
}

/// The request header that adds purposes for one request (removed before
/// the request is forwarded).
/// A constant name: looked up on every request, and a `&str` name is parsed
/// on each use.
pub(crate) static PURPOSE_HEADER: http::header::HeaderName =
    http::header::HeaderName::from_static("robots-proxy-purpose");

/// The origin's usage preferences for a response (draft-ietf-aipref-attach).
pub(crate) static CONTENT_USAGE: http::header::HeaderName =
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
            all.extend(crate::robots::usage::categories(v));
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
    pub(crate) metrics: ProxyMetrics,
    /// The listeners' series ([`crate::server::Handler`]).
    pub(crate) server_metrics: ServerMetrics,
    /// Decisions over time and the top refusals, for the admin page.
    pub(crate) activity: Arc<Activity>,
    /// Mints leaf certificates for intercepted CONNECTs.
    pub(crate) minter: Arc<Minter>,
    /// Upstream TLS, for the connections of upgraded (WebSocket) requests.
    pub(crate) upstream_tls: Arc<rustls::ClientConfig>,
    /// Read once per request, from the serving thread's copy.
    settings: current::Current<Settings>,
    /// The response cache, when `cache.enabled` (see [`Proxy::with_cache`]).
    cache: Option<crate::response_cache::ResponseCache>,
    /// Requests in flight per client address (`max_requests_per_client`).
    client_slots: Arc<slots::ClientSlots>,
    /// When a request without credentials was last audited, per address.
    challenged: parking_lot::Mutex<lru::LruCache<std::net::IpAddr, Instant>>,
    /// `Via` value, with an instance id used for loop detection.
    via: HeaderValue,
    instance: String,
}

/// The ways to an origin: the pooled client (bodies, HTTP/2 origins), the
/// in-task pool (http and https), and the upstream TLS settings (for
/// upgraded connections).
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
        metrics: &Registry,
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
            audit: audit.with_metrics(metrics),
            metrics: ProxyMetrics::new(metrics),
            server_metrics: ServerMetrics::new(metrics),
            activity: Arc::new(Activity::new()),
            minter,
            upstream_tls,
            settings: current::Current::new(settings),
            cache: None,
            client_slots: slots::ClientSlots::new(usize::MAX),
            challenged: parking_lot::Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(4096).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
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
        self.settings.get()
    }

    pub(crate) fn set_settings(&self, settings: Settings) {
        self.settings.set(settings);
    }

    /// True unless a request without credentials from `ip` was audited in
    /// the last minute (the addresses remembered are bounded).
    fn first_challenge_in_a_while(&self, ip: std::net::IpAddr) -> bool {
        let mut seen = self.challenged.lock();
        let now = Instant::now();
        if seen
            .get(&ip)
            .is_some_and(|at| now.duration_since(*at) < Duration::from_secs(60))
        {
            return false;
        }
        seen.put(ip, now);
        true
    }

    /// True if the request already passed through this proxy instance.
    fn is_loop<B>(&self, req: &Request<B>) -> bool {
        crate::http::headers::has(req.headers(), &VIA)
            && req
                .headers()
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
        req: &Request<Body>,
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
            return Ok(Caller::anonymous(client, queue));
        };
        match auth
            .check_async_in(
                client.ip(),
                req.headers().get(PROXY_AUTHORIZATION),
                settings.fleet.as_deref(),
            )
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
                let (user, reason) = match &outcome {
                    AuthOutcome::Invalid { user } => {
                        // One line per failure, with the address: fail2ban-friendly.
                        tracing::warn!(client_ip = %client.ip(), user = user.as_deref().unwrap_or("-"),
                            "proxy authentication failed");
                        (user.as_deref(), "proxy authentication failed")
                    }
                    _ => (None, "no proxy credentials"),
                };
                // The 407 is audited like any refusal (fail closed). A
                // request without credentials (the first step of Basic
                // authentication, and not throttled) at most once a minute
                // per address, so it cannot fill the disk.
                let missing = matches!(outcome, AuthOutcome::Missing);
                if !missing || self.first_challenge_in_a_while(client.ip()) {
                    let line = Line::Unjudged {
                        client,
                        user,
                        req,
                        decision: "auth_required",
                        reason,
                    };
                    match self.record_durable(line).await {
                        Recorded::Passed => {}
                        Recorded::Blocked(answer) | Recorded::AuditFailed(answer) => {
                            return Err(answer);
                        }
                    }
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
    /// [`phases`], ended by [`Proxy::finish`], the one exit of every
    /// request.
    pub(crate) async fn handle(
        self: Arc<Self>,
        client: SocketAddr,
        queue: Arc<slots::ClientQueue>,
        req: Request<Body>,
    ) -> Response<Body> {
        // One read of the reloadable settings per request.
        let settings = self.settings();
        // Without proxy authentication admission is a look at the ACL;
        // with it, boxed: its future (a verification, an audit line) kept
        // inline would enlarge every request's.
        let admitted = if settings.auth.is_none() && settings.acl.allows(client.ip()) {
            Ok(Caller::anonymous(client, queue))
        } else {
            Box::pin(self.admit(&settings, client, queue, &req)).await
        };
        let answer = match admitted {
            Err(answer) => answer,
            // Boxed: the tunnel's future is large, and kept inline it would
            // make every plain request's future (moved on each call) as
            // large.
            Ok(caller) if req.method() == Method::CONNECT => {
                Box::pin(connect::handle(self.clone(), settings, caller, req)).await
            }
            Ok(caller) => match self.frame(&req) {
                Ok((origin, path)) => self.serve(&settings, &caller, origin, path, req).await,
                Err(answer) => answer,
            },
        };
        self.finish(answer)
    }

    /// Handles one request inside an intercepted tunnel for `origin`: the
    /// phases from frame on, ended by [`Proxy::finish`].
    pub(crate) async fn handle_in_tunnel(
        &self,
        caller: &Caller,
        origin: &Origin,
        req: Request<Incoming>,
    ) -> Response<Body> {
        self.finish(connect::inner_request(self, caller, origin, req).await)
    }
}

impl crate::server::Handler for Proxy {
    type Connection = Arc<slots::ClientQueue>;

    fn server_metrics(&self) -> &ServerMetrics {
        &self.server_metrics
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
        req: Request<Body>,
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
    fn frame(&self, req: &Request<Body>) -> Result<(Origin, String), Answer> {
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

pub(crate) use crate::http::origin::path_of;

/// A random instance id, from the system's generator through ring; should
/// that fail, the std's randomly keyed hasher over the process id and the
/// time.
fn rand_id() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    if let Ok(bytes) = ring::rand::generate::<[u8; 4]>(&ring::rand::SystemRandom::new()) {
        return u32::from_be_bytes(bytes.expose());
    }
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
