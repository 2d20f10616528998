//! The admin listener: health, readiness, Prometheus metrics, decision
//! explanations and cache purge. Meant for loopback or an operator network;
//! it is off unless `admin.listen` is set.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::admit::ClientAcl;
use crate::http::body::{Body, full_body, text};
use crate::http::origin::{Origin, path_of};
use crate::judge::Gate;
use crate::judge::politeness::Politeness;
use crate::ops::metrics::{ConnRefusal, Metrics};
use crate::robots::product_token;
use crate::server::listen::{ConnectionPolicy, RefusalLog};

/// What the admin endpoints see of the running proxy.
pub(crate) trait ProxyView: Send + Sync {
    /// The proxy's gate: /explain judges with it, /purge empties its cache.
    fn gate(&self) -> &Gate;
    /// Whether the audit log can be written (the proxy forwards nothing
    /// until it can).
    fn audit_writable(&self) -> bool;
    /// The reloadable settings the admin endpoints read, as they are now.
    fn admin_settings(&self) -> AdminSettings;
    /// The response cache, if enabled: /explain describes, /purge empties it.
    fn response_cache(&self) -> Option<&crate::response_cache::ResponseCache> {
        None
    }
}

/// The reloadable settings the admin endpoints read.
pub(crate) struct AdminSettings {
    /// Default robots product token, for /explain without `agent`.
    pub(crate) agent: String,
    /// Crawl-delay state, for /explain's politeness field.
    pub(crate) politeness: Arc<Politeness>,
    /// `client_header_timeout`, for new admin connections.
    pub(crate) header_timeout: Duration,
    /// `usage.purposes` and `usage.mode`, for /explain's usage field.
    pub(crate) purposes: Vec<String>,
    pub(crate) usage_mode: crate::judge::UsageMode,
}

/// Everything the admin listener needs.
#[derive(Clone)]
pub(crate) struct AdminState {
    pub(crate) proxy: Arc<dyn ProxyView>,
    pub(crate) metrics: Metrics,
    /// False once shutdown begins: /readyz answers 503.
    pub(crate) ready: Arc<AtomicBool>,
}

/// AdminLimits of the admin listener, applied at accept.
pub(crate) struct AdminLimits {
    /// `admin.allow_clients`: others are closed at accept.
    pub(crate) allow: ClientAcl,
    /// `admin.max_connections`: beyond it new connections are closed at
    /// accept (a probe fails at once rather than wait behind held ones).
    pub(crate) max_connections: usize,
}

/// Serves admin requests until the task is aborted. Connections get the
/// proxy's header timeout (`client_header_timeout`).
pub(crate) async fn serve(listener: TcpListener, state: AdminState, limits: AdminLimits) {
    let slots = Arc::new(Semaphore::new(
        limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let refusals = RefusalLog::new(state.metrics.clone());
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            // EMFILE and friends: back off instead of spinning.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        if !limits.allow.allows(peer.ip()) {
            refusals.refuse(ConnRefusal::AdminNotAllowed, peer);
            continue;
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refusals.refuse(ConnRefusal::AdminLimit, peer);
            continue;
        };
        let state = state.clone();
        let policy = ConnectionPolicy {
            header_timeout: state.proxy.admin_settings().header_timeout,
        };
        tokio::spawn(async move {
            let _slot = slot;
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&state, req).await) }
            });
            let _ = policy
                .http1()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn query(uri: &Uri) -> HashMap<String, String> {
    form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

fn json_response(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    let mut resp = Response::new(full_body(format!("{value:#}\n")));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    json_response(status, json!({ "error": message }))
}

/// Handles one admin request.
pub(crate) async fn handle(state: &AdminState, req: Request<Incoming>) -> Response<Body> {
    let proxy = &*state.proxy;
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n"),
        (&Method::GET, "/readyz") => {
            if state.ready.load(Ordering::Relaxed) && proxy.audit_writable() {
                text(StatusCode::OK, "ready\n")
            } else {
                text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
            }
        }
        (&Method::GET, "/metrics") => {
            let metrics = &state.metrics;
            metrics.set_cache_entries(proxy.gate().cache().len());
            let mut resp = Response::new(full_body(metrics.encode()));
            resp.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(crate::ops::metrics::CONTENT_TYPE),
            );
            resp
        }
        (&Method::GET, "/explain") => explain(proxy, req.uri()).await,
        (&Method::POST, "/purge") => purge(proxy, req.uri()),
        (_, "/healthz" | "/readyz" | "/metrics" | "/explain" | "/purge") => {
            error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        }
        _ => error(
            StatusCode::NOT_FOUND,
            "unknown endpoint: /healthz, /readyz, /metrics, /explain?url=&agent=, POST /purge?origin=|url=|prefix=",
        ),
    }
}

fn parse_url(s: &str) -> Result<(Origin, String), String> {
    let uri: Uri = s.parse().map_err(|e| format!("bad url {s:?}: {e}"))?;
    let origin = Origin::from_uri(&uri).map_err(|e| format!("bad url {s:?}: {e}"))?;
    Ok((origin, path_of(&uri)))
}

/// `GET /explain?url=URL&agent=TOKEN&purpose=CATEGORY`: the decision and
/// why, fetching robots.txt if needed; with `purpose` (comma-separated, added
/// to `usage.purposes`), the usage preference that disallows one of them.
async fn explain(proxy: &dyn ProxyView, uri: &Uri) -> Response<Body> {
    let q = query(uri);
    let Some(url) = q.get("url") else {
        return error(StatusCode::BAD_REQUEST, "missing url parameter");
    };
    let (origin, path) = match parse_url(url) {
        Ok(x) => x,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e),
    };
    let settings = proxy.admin_settings();
    let agent = match q.get("agent") {
        Some(a) => product_token(a),
        None => settings.agent.clone(),
    };
    if agent.is_empty() {
        return error(StatusCode::BAD_REQUEST, "agent has no product token");
    }
    let j = proxy.gate().judge(&origin, &path, &agent).await;
    let mut purposes = settings.purposes.clone();
    if let Some(p) = q.get("purpose") {
        purposes.extend(
            p.split(',')
                .map(|p| p.trim().to_ascii_lowercase())
                .filter(|p| crate::robots::usage::is_category(p)),
        );
    }
    let usage = if j.decision.is_allowed() {
        proxy.gate().usage(&j, &purposes)
    } else {
        None
    };
    let rule = j.decision.rule();
    // This origin's politeness state for the agent, if it has any.
    let politeness = settings
        .politeness
        .next_slot(&j.politeness_key())
        .map(|(interval, next)| {
            json!({
                "interval_secs": interval.as_secs_f64(),
                "next_slot_in_secs": next.as_secs_f64(),
            })
        });
    json_response(
        StatusCode::OK,
        json!({
            "url": j.url(),
            "agent": j.agent,
            "decision": j.decision.name(),
            "reason": j.decision.reason(),
            "rule_line": rule.map(|r| r.line()),
            "rule": rule.map(|r| r.text()),
            "judged_as": j.decision.judged_as(),
            "robots_url": j.robots_url(),
            "fetch_status": j.entry.as_ref().and_then(|e| e.status),
            "fetch_outcome": j.entry_state().map(|s| s.name()),
            "fetch_reason": j.entry_state().and_then(|s| s.reason()),
            "cache_age_secs": j.entry.as_ref().map(|e| e.age().as_secs()),
            "crawl_delay": j.crawl_delay,
            "purposes": purposes,
            "usage": usage.as_ref().map(|n| json!({
                "purpose": n.purpose,
                "preference": "n",
                "rule_line": n.line,
                "rule": n.text,
                "mode": match settings.usage_mode {
                    crate::judge::UsageMode::Enforce => "enforce",
                    crate::judge::UsageMode::Annotate => "annotate",
                },
            })),
            "politeness": politeness,
            "response_cache": proxy.response_cache().map(|c| c.describe(url)),
        }),
    )
}

/// `POST /purge?origin=URL`: drops the origin's cached robots.txt.
/// `POST /purge?url=URL` and `POST /purge?prefix=URL`: drop what the
/// response cache holds for that URL, or under that prefix.
fn purge(proxy: &dyn ProxyView, uri: &Uri) -> Response<Body> {
    let q = query(uri);
    if let Some(target) = q.get("prefix").map(|p| (p, true)).or_else(|| {
        q.get("url")
            .filter(|_| !q.contains_key("origin"))
            .map(|u| (u, false))
    }) {
        let (value, prefix) = target;
        let Some(cache) = proxy.response_cache() else {
            return error(
                StatusCode::CONFLICT,
                "the response cache is not enabled (cache.enabled); purge robots.txt with ?origin=",
            );
        };
        if value
            .parse::<Uri>()
            .ok()
            .and_then(|u| u.scheme().cloned())
            .is_none()
        {
            return error(
                StatusCode::BAD_REQUEST,
                "the url or prefix must be an absolute http(s) URL",
            );
        }
        let purged = if prefix {
            cache.purge_prefix(value)
        } else {
            cache.purge_url(value)
        };
        let key = if prefix { "prefix" } else { "url" };
        return json_response(StatusCode::OK, json!({ key: value, "purged": purged }));
    }
    let Some(url) = q.get("origin") else {
        return error(
            StatusCode::BAD_REQUEST,
            "missing origin, url or prefix parameter",
        );
    };
    match parse_url(url) {
        Ok((origin, _)) => {
            let purged = proxy.gate().cache().purge(&origin);
            json_response(
                StatusCode::OK,
                json!({ "origin": origin.to_string(), "purged": purged }),
            )
        }
        Err(e) => error(StatusCode::BAD_REQUEST, &e),
    }
}
