//! The proxy: accepting clients, judging each request, forwarding the
//! allowed ones.

pub mod client;
pub mod connect;
pub mod forward;
pub mod respond;
pub mod server;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http::header::{HeaderValue, USER_AGENT, VIA};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::audit::{AuditLog, Record};
use crate::gate::{Decision, Gate, Judgement};
use crate::origin::{Origin, Scheme};
use crate::robots::product_token;
use client::{Body, HttpClient};

/// Settings that a reload may change.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Default robots product token (lower-cased).
    pub agent: String,
    /// Client User-Agent product token → robots token.
    pub agent_map: HashMap<String, String>,
    pub response_timeout: Duration,
}

impl Settings {
    /// The robots token for a request: a mapping of the client's own
    /// User-Agent product token if there is one, else the default agent.
    pub fn agent_for(&self, client_user_agent: Option<&HeaderValue>) -> String {
        if !self.agent_map.is_empty()
            && let Some(ua) = client_user_agent.and_then(|v| v.to_str().ok())
            && let Some(mapped) = self.agent_map.get(&product_token(ua))
        {
            return mapped.clone();
        }
        self.agent.clone()
    }
}

/// Everything a request needs, shared by all connections.
pub struct Proxy {
    pub gate: Gate,
    pub client: HttpClient,
    pub audit: AuditLog,
    settings: RwLock<Arc<Settings>>,
    /// `Via` value, with an instance id used for loop detection.
    via: HeaderValue,
    instance: String,
}

impl Proxy {
    pub fn new(gate: Gate, client: HttpClient, audit: AuditLog, settings: Settings) -> Proxy {
        let instance = format!("{:08x}", rand_id());
        let via = header_value_static(&format!("1.1 robots-proxy ({instance})"));
        Proxy {
            gate,
            client,
            audit,
            settings: RwLock::new(Arc::new(settings)),
            via,
            instance,
        }
    }

    pub fn settings(&self) -> Arc<Settings> {
        match self.settings.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn set_settings(&self, settings: Settings) {
        match self.settings.write() {
            Ok(mut s) => *s = Arc::new(settings),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(settings),
        }
    }

    pub fn via(&self) -> &HeaderValue {
        &self.via
    }

    /// True if the request already passed through this proxy instance.
    fn is_loop(&self, req: &Request<Incoming>) -> bool {
        req.headers()
            .get_all(VIA)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.contains(&self.instance))
    }

    /// Handles one request from a client connection.
    pub async fn handle(
        self: Arc<Self>,
        client: SocketAddr,
        req: Request<Incoming>,
    ) -> Response<Body> {
        if req.method() == Method::CONNECT {
            return connect::handle(self, client, req).await;
        }
        if self.is_loop(&req) {
            return respond::text(
                StatusCode::LOOP_DETECTED,
                "Loop detected: this request already passed through this proxy\n",
            );
        }
        if req.uri().scheme().is_none() || req.uri().authority().is_none() {
            return respond::text(
                StatusCode::BAD_REQUEST,
                "robots-proxy is a forward proxy: send absolute-form requests \
                 (GET http://host/path HTTP/1.1), e.g. with curl -x\n",
            );
        }
        let origin = match Origin::from_uri(req.uri()) {
            Ok(o) => o,
            Err(e) => {
                return respond::text(StatusCode::BAD_REQUEST, format!("Bad request URL: {e}\n"));
            }
        };
        let path = req
            .uri()
            .path_and_query()
            .map(|pq| pq.as_str())
            .unwrap_or("/")
            .to_string();
        let agent = self.settings().agent_for(req.headers().get(USER_AGENT));
        self.judge_and_forward(client, origin, &path, &agent, req.map(|b| b.boxed()))
            .await
    }

    /// Judges a request with an absolute URI and forwards it if allowed.
    /// Shared by plain HTTP and intercepted HTTPS.
    pub async fn judge_and_forward(
        &self,
        client: SocketAddr,
        origin: Origin,
        path: &str,
        agent: &str,
        req: Request<Body>,
    ) -> Response<Body> {
        let judgement = self.gate.judge(&origin, path, agent).await;
        if let Some(resp) = self.audit_and_block(&judgement, client, req.method().as_str()) {
            return resp;
        }
        let timeout = self.settings().response_timeout;
        forward::forward(&self.client, req, &self.via, timeout).await
    }

    /// Writes the audit line a judgement needs and returns the response if
    /// the request must not be forwarded (blocked, or the audit log failed).
    pub fn audit_and_block(
        &self,
        judgement: &Judgement,
        client: SocketAddr,
        method: &str,
    ) -> Option<Response<Body>> {
        let blocked = !judgement.decision.is_allowed();
        if !self.audit.is_writable() {
            return Some(audit_unavailable());
        }
        if blocked || self.audit.log_all() {
            let record = Record::new(judgement, client, None, method);
            if self.audit.write(&record).is_err() && !blocked {
                return Some(audit_unavailable());
            }
        }
        match &judgement.decision {
            Decision::Allowed { .. } => {
                tracing::debug!(url = %judgement.url, agent = %judgement.agent, "allowed");
                None
            }
            d => {
                tracing::info!(url = %judgement.url, agent = %judgement.agent,
                    decision = d.name(), reason = %d.reason(), "blocked");
                Some(respond::blocked(judgement))
            }
        }
    }
}

fn audit_unavailable() -> Response<Body> {
    respond::text(
        StatusCode::SERVICE_UNAVAILABLE,
        "robots-proxy cannot write its audit log, so it does not forward requests until it can\n",
    )
}

/// The scheme of an origin-form request inside an intercepted tunnel.
pub fn scheme_for_tunnel(tls: bool) -> Scheme {
    if tls { Scheme::Https } else { Scheme::Http }
}

fn header_value_static(s: &str) -> HeaderValue {
    respond::header_value(s)
}

/// A random-enough instance id without another dependency: the hash of the
/// process id, the time and an address, via the std's randomly keyed hasher.
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
