//! The admin listener: health, readiness, Prometheus metrics, decision
//! explanations, cache purge, and the web view (`/`, `/robots/SHA256`,
//! `/ca`, `/ca.pem`: [`super::web`]). Meant for loopback or an operator
//! network; it is off unless `admin.listen` is set. With `[[admin.users]]`
//! every endpoint but `/healthz`, `/readyz`, `/ca` and `/ca.pem` (public
//! by nature) asks for HTTP Basic credentials, and a user's role decides
//! what it may do: a viewer reads (the web view, `/explain`, `/metrics`,
//! the archive), an operator also purges and reloads (`POST /reload`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::state::{AdminState, ProxyView, query};
use crate::admit::AdminRole;
use crate::admit::{AuthOutcome, ClientAcl, ProxyAuth};
use crate::fleet::events::{Event, Purge};
use crate::http::body::{Body, full_body, text};
use crate::http::origin::{Origin, path_of};
use crate::ops::audit::AdminEvent;
use crate::robots::product_token;
use crate::server::listen::{ConnectionPolicy, RefusalLog};
use crate::server::metrics::ConnRefusal;
use crate::server::per_client::PerClient;

/// AdminLimits of the admin listener, applied at accept.
pub(crate) struct AdminLimits {
    /// `admin.allow_clients`: others are closed at accept.
    pub(crate) allow: ClientAcl,
    /// `admin.max_connections`: beyond it new connections are closed at
    /// accept (a probe fails at once rather than wait behind held ones).
    pub(crate) max_connections: usize,
    /// `admin.max_connections_per_client`: so that one address cannot
    /// take every slot.
    pub(crate) max_per_client: usize,
}

/// Serves admin requests until the task is aborted. Connections get the
/// proxy's header timeout (`client_header_timeout`).
pub(crate) async fn serve(listener: TcpListener, state: AdminState, limits: AdminLimits) {
    let slots = Arc::new(Semaphore::new(
        limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let refusals = RefusalLog::new(state.listeners.clone());
    let per_client = PerClient::new(limits.max_per_client);
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
        let Some(client_slot) = per_client.take(peer.ip()) else {
            refusals.refuse(ConnRefusal::AdminPerClientLimit, peer);
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refusals.refuse(ConnRefusal::AdminLimit, peer);
            continue;
        };
        let state = state.clone();
        let policy = ConnectionPolicy {
            header_timeout: state.proxy.admin_settings().header_timeout,
        };
        tokio::spawn(async move {
            let _slots = (slot, client_slot);
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&state, peer, req).await) }
            });
            let _ = policy
                .http1()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
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

/// The realm of the admin listener's Basic authentication.
pub(crate) const ADMIN_REALM: &str = "Basic realm=\"robots-proxy admin\", charset=\"UTF-8\"";

/// With `[[admin.users]]`, the request's `Authorization` checked (as proxy
/// credentials are: verified ones remembered, failures per address
/// limited, in a fleet on the fleet's allowance): `Err` is the 401 or 429
/// to answer.
async fn authenticate(
    proxy: &dyn ProxyView,
    auth: &Arc<ProxyAuth>,
    fleet: Option<&crate::fleet::Fleet>,
    peer: SocketAddr,
    req: &Request<Incoming>,
) -> Result<String, Response<Body>> {
    match auth
        .check_async_in(peer.ip(), req.headers().get(AUTHORIZATION), fleet)
        .await
    {
        AuthOutcome::Ok { user, .. } => Ok(user),
        AuthOutcome::Throttled { retry_after, first } => {
            if first {
                tracing::warn!(client_ip = %peer.ip(),
                    "too many admin authentication attempts: refusing them for now");
                let mut event =
                    AdminEvent::new("login_throttled", format!("admin client {}", peer.ip()));
                event.client = Some(peer.to_string());
                event.outcome = Some(format!("refused for {} s", retry_after.as_secs().max(1)));
                let _ = proxy.record_admin(event);
            }
            let mut resp = text(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many authentication attempts from this address; retry later\n",
            );
            let secs = retry_after.as_secs().max(1).to_string();
            if let Ok(v) = HeaderValue::from_str(&secs) {
                resp.headers_mut().insert(http::header::RETRY_AFTER, v);
            }
            Err(resp)
        }
        outcome => {
            if let AuthOutcome::Invalid { user } = &outcome {
                tracing::warn!(client_ip = %peer.ip(), user = user.as_deref().unwrap_or("-"),
                    "admin authentication failed");
                let by = match user {
                    Some(u) => format!("admin user {u}"),
                    None => format!("admin client {}", peer.ip()),
                };
                let mut event = AdminEvent::new("login_failed", by);
                event.client = Some(peer.to_string());
                let _ = proxy.record_admin(event);
            }
            let mut resp = text(
                StatusCode::UNAUTHORIZED,
                "Authentication required ([[admin.users]])\n",
            );
            resp.headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static(ADMIN_REALM));
            resp.headers_mut()
                .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            Err(resp)
        }
    }
}

/// Who asked for an admin action, as its audit line names them.
struct Asker {
    /// `admin user NAME`, or `admin client ADDRESS` without admin users.
    by: String,
    /// The client's address and port.
    client: String,
}

impl Asker {
    fn new(user: Option<&str>, peer: SocketAddr) -> Asker {
        Asker {
            by: user.map_or_else(
                || format!("admin client {}", peer.ip()),
                |u| format!("admin user {u}"),
            ),
            client: peer.to_string(),
        }
    }
}

/// Refuses an admin action that could not be recorded.
fn unrecorded() -> Response<Body> {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "the audit log cannot be written: no admin action is taken without its audit line",
    )
}

/// What an endpoint asks of the admin user: nothing (public by nature),
/// the viewer role, or the operator role.
fn needed_role(method: &Method, path: &str) -> Option<AdminRole> {
    match (method, path) {
        (_, "/healthz" | "/readyz" | "/ca" | "/ca.pem") => None,
        (&Method::POST, "/purge" | "/reload") => Some(AdminRole::Operator),
        _ => Some(AdminRole::Viewer),
    }
}

/// Handles one admin request from `peer`.
pub(crate) async fn handle(
    state: &AdminState,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Response<Body> {
    let proxy = &*state.proxy;
    let settings = proxy.admin_settings();
    // The identity's documents are public: sites fetch them.
    if let Some(resp) = super::identity::route(
        settings.identity.as_deref(),
        req.method(),
        req.uri().path(),
        req.headers().get(http::header::HOST),
    ) {
        return resp;
    }
    // Probes and the CA stay open: a health check carries no credentials,
    // and every client of the proxy needs the CA certificate.
    let mut user = None;
    if let Some(needed) = needed_role(req.method(), req.uri().path())
        && let Some(auth) = &settings.auth
    {
        match authenticate(proxy, auth, settings.fleet.as_deref(), peer, &req).await {
            Err(resp) => return resp,
            Ok(name) => {
                let role = settings.roles.get(&name).copied().unwrap_or_default();
                if needed == AdminRole::Operator && role != AdminRole::Operator {
                    tracing::warn!(client_ip = %peer.ip(), user = %name,
                        path = req.uri().path(), "admin request refused: the operator role is needed");
                    return error(
                        StatusCode::FORBIDDEN,
                        &format!(
                            "user {name:?} has the {} role; this needs the operator role",
                            role.name()
                        ),
                    );
                }
                user = Some(name);
            }
        }
    }
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
            let mut resp = Response::new(full_body(state.metrics.encode()));
            resp.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
            );
            resp
        }
        (&Method::GET, "/explain") if from_another_site(req.headers()) => json_response(
            StatusCode::FORBIDDEN,
            json!({ "error": "an explanation asked by a page of another site is refused (it would make the proxy fetch robots.txt)" }),
        ),
        (&Method::GET, "/explain") => explain(proxy, req.uri()).await,
        (&Method::POST, "/reload") if from_another_site(req.headers()) => json_response(
            StatusCode::FORBIDDEN,
            json!({ "error": "a reload sent by a page of another site is refused" }),
        ),
        (&Method::POST, "/reload") => reload(state, &Asker::new(user.as_deref(), peer)).await,
        (&Method::POST, "/purge") if from_another_site(req.headers()) => json_response(
            StatusCode::FORBIDDEN,
            json!({ "error": "a purge sent by a page of another site is refused" }),
        ),
        (&Method::POST, "/purge") => {
            purge(proxy, req.uri(), &Asker::new(user.as_deref(), peer)).await
        }
        (&Method::GET, "/") => super::web::overview(state),
        (&Method::GET, "/ca") => super::web::ca_page(state, &req),
        (&Method::GET, "/ca.pem") => super::web::ca_pem(proxy),
        (&Method::GET, p) if p.starts_with("/robots/") => super::web::robots_page(proxy, req.uri()),
        (
            _,
            "/healthz" | "/readyz" | "/metrics" | "/explain" | "/purge" | "/reload" | "/" | "/ca"
            | "/ca.pem",
        ) => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        _ => error(
            StatusCode::NOT_FOUND,
            "unknown endpoint: /healthz, /readyz, /metrics, /explain?url=&agent=, POST /purge?origin=|url=|prefix=, POST /reload, / (the web view), /robots/SHA256, /ca, /ca.pem",
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
/// JSON, or with `format=html` a page of the web view.
async fn explain(proxy: &dyn ProxyView, uri: &Uri) -> Response<Body> {
    let q = query(uri);
    let html = q.get("format").is_some_and(|f| f == "html");
    match explain_value(proxy, &q).await {
        Ok(value) if html => super::web::explain_page(&q, Ok(&value)),
        Ok(value) => json_response(StatusCode::OK, value),
        Err((status, message)) if html => {
            let mut resp = super::web::explain_page(&q, Err(&message));
            *resp.status_mut() = status;
            resp
        }
        Err((status, message)) => error(status, &message),
    }
}

/// What `/explain` answers for the query `q`, or the status and message
/// of a bad question.
async fn explain_value(
    proxy: &dyn ProxyView,
    q: &HashMap<String, String>,
) -> Result<serde_json::Value, (StatusCode, String)> {
    let bad = |m: String| (StatusCode::BAD_REQUEST, m);
    let Some(url) = q.get("url") else {
        return Err(bad("missing url parameter".into()));
    };
    let (origin, path) = parse_url(url).map_err(bad)?;
    let settings = proxy.admin_settings();
    let agent = match q.get("agent").filter(|a| !a.is_empty()) {
        Some(a) => product_token(a),
        None => settings.agent.clone(),
    };
    if agent.is_empty() {
        return Err(bad("agent has no product token".into()));
    }
    let j = proxy.gate().judge(&origin, &path, &agent).await;
    let mut purposes = settings.purposes.clone();
    if let Some(p) = q.get("purpose") {
        purposes.extend(crate::robots::usage::categories(p));
    }
    let mut usage = if j.decision.is_allowed() {
        proxy.gate().usage(&j, &purposes)
    } else {
        None
    };
    // The origin's tdmrep.json, for the purposes a reservation speaks for.
    let tdmrep = if j.decision.is_allowed()
        && purposes
            .iter()
            .any(|p| crate::judge::signals::is_tdm_purpose(p))
    {
        let state = proxy.gate().tdmrep(&origin).await;
        let (reservation, notes) = crate::judge::Gate::tdm_file_notes(&state, &path, &purposes);
        usage = crate::judge::UsageNote::combine(usage, notes);
        Some(json!({
            "url": state.url,
            "outcome": state.outcome.name(),
            "reason": state.outcome.reason(),
            "sha256": state.digest.map(|d| d.to_string()),
            "reservation": reservation.map(|r| r.as_str()),
        }))
    } else {
        None
    };
    // RSL 1.0 documents of the robots.txt `License:` lines.
    let documents = if j.decision.is_allowed() && !purposes.is_empty() {
        crate::judge::Gate::licenses(&j)
    } else {
        Vec::new()
    };
    if !documents.is_empty() {
        let mut licensed = crate::judge::licensing::Licensed::default();
        let url = j.url();
        for (line, doc) in &documents {
            let state = proxy.gate().rsl(doc).await;
            let source = format!("robots.txt line {line} License");
            let tokens = &settings.usage_licenses;
            licensed.add(&state, &source, (&url, &path), &purposes, tokens);
        }
        usage = crate::judge::UsageNote::combine(usage, licensed.notes);
    }
    // Every signal known before the fetch, one per purpose it disallows.
    let signals: Vec<serde_json::Value> = usage
        .iter()
        .flat_map(|n| n.all())
        .map(|n| {
            json!({
                "purpose": n.purpose,
                "preference": "n",
                "protocol": if n.protocol.is_empty() { "robots.txt" } else { n.protocol },
                "signal": n.text,
                "evidence": n.evidence,
                "rule_line": (n.line > 0).then_some(n.line),
            })
        })
        .collect();
    let rule = j.decision.rule();
    // This origin's politeness schedule for the agent, if anything holds
    // its requests back.
    let politeness =
        super::schedule::politeness(&settings, &j.politeness_key(), j.crawl_delay).await;
    Ok(json!({
        "url": j.url(),
        "agent": j.agent,
        "decision": j.decision.name(),
        "reason": j.decision.reason(),
        "rule_line": rule.map(|r| r.line()),
        "rule": rule.map(|r| r.text()),
        "judged_as": j.decision.judged_as(),
        "robots_url": j.robots_url(),
        "robots_sha256": j
            .entry_state()
            .and_then(|s| s.rules())
            .and_then(|c| c.digest())
            .map(|d| d.to_string()),
        "fetch_status": j.entry.as_ref().and_then(|e| e.status),
        "fetch_outcome": j.entry_state().map(|s| s.name()),
        "fetch_reason": j.entry_state().and_then(|s| s.reason()),
        "cache_age_secs": j.entry.as_ref().map(|e| e.age().as_secs()),
        "fetched_at": j.entry.as_ref()
            .map(|e| humantime::format_rfc3339_seconds(e.fetched_at).to_string()),
        "fetched_by": j.entry.as_ref().and_then(|e| e.fetched_by.as_deref()),
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
        "signals": signals,
        "tdmrep": tdmrep,
        "politeness": politeness,
        "response_cache": proxy.response_cache().map(|c| c.describe(url)),
    }))
}

/// True for a request a browser sent on behalf of a page of another site
/// (`Sec-Fetch-Site`, else an `Origin` naming another host): the web view
/// shows the admin listener to a browser, whose cached credentials would
/// otherwise go with a forged purge. Clients such as curl send neither.
fn from_another_site(headers: &http::HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return !matches!(site, "same-origin" | "none");
    }
    match (
        headers
            .get(http::header::ORIGIN)
            .and_then(|v| v.to_str().ok()),
        headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok()),
    ) {
        (Some(origin), Some(host)) => origin.split_once("://").map(|(_, h)| h) != Some(host),
        (Some(_), None) => true,
        _ => false,
    }
}

/// `POST /reload`: reloads the configuration as SIGHUP does (fleet-wide
/// in a fleet) and answers once it is applied or refused: 200 with the
/// keys changed and those that need a restart, 422 with the error.
async fn reload(state: &AdminState, asker: &Asker) -> Response<Body> {
    let Some(asks) = &state.reload else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "this process does not reload (only `robots-proxy run` does)",
        );
    };
    if !state.proxy.audit_writable() {
        return unrecorded();
    }
    let (reply, answer) = tokio::sync::oneshot::channel();
    let ask = super::ReloadAsk {
        by: asker.by.clone(),
        client: Some(asker.client.clone()),
        reply,
    };
    if asks.send(ask).await.is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the reloader has stopped");
    }
    match answer.await {
        Ok(super::ReloadDone::Applied {
            changed,
            needs_restart,
            fleet,
        }) => json_response(
            StatusCode::OK,
            json!({
                "reloaded": true,
                "changed": changed,
                "needs_restart": needs_restart,
                "fleet": fleet.map(|told| if told { "told" } else { "unavailable" }),
            }),
        ),
        Ok(super::ReloadDone::Rejected(e)) => json_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({ "reloaded": false, "error": e }),
        ),
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the reloader has stopped"),
    }
}

/// `POST /purge?origin=URL`: drops the origin's cached robots.txt.
/// `POST /purge?url=URL` and `POST /purge?prefix=URL`: drop what the
/// response cache holds for that URL, or under that prefix. In a fleet,
/// every node drops it too (the answer's `fleet` says whether the other
/// nodes were told).
async fn purge(proxy: &dyn ProxyView, uri: &Uri, asker: &Asker) -> Response<Body> {
    if !proxy.audit_writable() {
        return unrecorded();
    }
    let q = query(uri);
    // The audit line of a purge done: who, what, where, how many.
    let record = |target: String, count: usize, fleet: bool, status: StatusCode| {
        let mut event = AdminEvent::new("purge", asker.by.clone());
        event.client = Some(asker.client.clone());
        event.target = Some(target);
        event.count = Some(count as u64);
        event.scope = Some(if fleet { "fleet" } else { "node" });
        if status != StatusCode::OK {
            event.outcome = Some("this node only: the fleet's Redis is unavailable".into());
        }
        proxy.record_admin(event)
    };
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
        if !is_absolute_http(value) {
            return error(
                StatusCode::BAD_REQUEST,
                "the url or prefix must be an absolute http(s) URL",
            );
        }
        let purged = purge_response_cache(cache, value, prefix).await;
        let what = if prefix {
            Purge::Prefix(value.as_str().into())
        } else {
            Purge::Url(value.as_str().into())
        };
        let (fleet, status) = tell_fleet(proxy, what).await;
        let key = if prefix { "prefix" } else { "url" };
        if record(format!("{key}={value}"), purged, fleet.is_some(), status).is_err() {
            return unrecorded();
        }
        return json_response(
            status,
            json!({ key: value, "purged": purged, "fleet": fleet }),
        );
    }
    let Some(url) = q.get("origin") else {
        return error(
            StatusCode::BAD_REQUEST,
            "missing origin, url or prefix parameter",
        );
    };
    match parse_url(url) {
        Ok((origin, _)) => {
            // Redis first: a miss here in between would otherwise adopt
            // the shared entry being purged.
            let (fleet, status) = tell_fleet(proxy, Purge::Robots(origin.to_string().into())).await;
            let purged = proxy.gate().cache().purge(&origin);
            if record(
                format!("origin={origin}"),
                usize::from(purged),
                fleet.is_some(),
                status,
            )
            .is_err()
            {
                return unrecorded();
            }
            json_response(
                status,
                json!({ "origin": origin.to_string(), "purged": purged, "fleet": fleet }),
            )
        }
        Err(e) => error(StatusCode::BAD_REQUEST, &e),
    }
}

/// Removes what the response cache holds for `target` (or under it,
/// `prefix`), on the blocking pool: with many objects stored, going
/// through the index takes tens of milliseconds, which the thread that
/// accepts every connection (and runs this listener) must not spend. The
/// files are deleted afterwards by the cache's janitor. Returns how many
/// objects were removed.
async fn purge_response_cache(
    cache: &crate::response_cache::ResponseCache,
    target: &str,
    prefix: bool,
) -> usize {
    let (cache, target) = (cache.clone(), target.to_string());
    tokio::task::spawn_blocking(move || {
        if prefix {
            cache.purge_prefix(&target)
        } else {
            cache.purge_url(&target)
        }
    })
    .await
    .unwrap_or(0)
}

/// Tells the fleet's other nodes to purge `what` too (a robots.txt purge
/// also drops the shared entry): `"every node"` with how many nodes'
/// subscriptions heard it (on a cluster, through one master), or why only
/// this one; with the answer's status: 503 when the fleet could not be
/// told (this node purged, the others and Redis did not: repeat it).
async fn tell_fleet(proxy: &dyn ProxyView, what: Purge) -> (Option<serde_json::Value>, StatusCode) {
    let Some(fleet) = proxy.admin_settings().fleet else {
        return (None, StatusCode::OK);
    };
    let told = match &what {
        Purge::Robots(origin) => fleet.purge_robots(origin).await,
        _ => fleet.publish_purge(what).await,
    };
    match told {
        Ok(heard) => (
            Some(json!({ "told": "every node", "heard_by": heard })),
            StatusCode::OK,
        ),
        Err(_) => (
            Some(json!({
                "told": "this node only: the fleet's Redis is unavailable, so no other node and not Redis (\"purged\" says whether this node held a copy); repeat the purge when Redis is back"
            })),
            StatusCode::SERVICE_UNAVAILABLE,
        ),
    }
}

/// An absolute `http://` or `https://` URL with a host.
fn is_absolute_http(value: &str) -> bool {
    value.parse::<Uri>().ok().is_some_and(|u| {
        matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some_and(|h| !h.is_empty())
    })
}

/// Writes the Crawl-delay slots this node held while Redis was unavailable
/// into the shared schedule, in a task of its own.
fn write_back(proxy: &dyn ProxyView, fleet: &Arc<crate::fleet::Fleet>) {
    let politeness = proxy.admin_settings().politeness;
    let fleet = fleet.clone();
    tokio::spawn(async move {
        let written = politeness.write_back(&fleet).await;
        if written > 0 {
            tracing::info!(
                written,
                "fleet: Crawl-delay slots held while Redis was unavailable written into the shared schedule"
            );
        }
    });
}

/// Applies the purges other nodes of the fleet tell of, until the fleet
/// is gone. When this node may have missed some (it subscribed again, or
/// fell behind the events) it drops its robots.txt copies and writes the
/// Crawl-delay slots it held alone into the shared schedule; when Redis
/// answers again after an outage, only what it decided alone. At its
/// start and whenever it subscribes it applies the response-cache purges
/// kept in Redis to what it stored before each was said ([`Replays`]).
pub(crate) async fn follow_fleet_purges(
    proxy: Arc<dyn ProxyView>,
    fleet: Arc<crate::fleet::Fleet>,
) {
    use tokio::sync::broadcast::error::RecvError;
    let mut events = fleet.events();
    let replays = Replays::new(proxy.clone(), fleet.clone());
    // What was said before this node started (its first subscription may
    // have been told before this receiver existed).
    replays.start(None);
    // When the last event came: a lag lost events since.
    let mut received = tokio::time::Instant::now();
    loop {
        let event = events.recv().await;
        let last_received = std::mem::replace(&mut received, tokio::time::Instant::now());
        let (what, from) = match event {
            Ok(Event::Purged { what, from }) => (what, from),
            // Redis is back: the Crawl-delay slots held alone are written
            // into the shared schedule, the robots.txt entries decided
            // alone are read from Redis again.
            Ok(Event::Recovered) => {
                write_back(&*proxy, &fleet);
                let dropped = proxy.gate().cache().forget_alone();
                if dropped > 0 {
                    tracing::info!(
                        dropped,
                        "fleet: robots.txt entries decided while Redis was unavailable dropped, read from Redis again"
                    );
                }
                continue;
            }
            // The first subscription: what was said before this node
            // started is in Redis.
            Ok(Event::Subscribed { heard: None }) => {
                replays.start(None);
                continue;
            }
            // Purges may have been said while this node was not listening:
            // its robots.txt copies are dropped (read from Redis again as
            // needed), and the response-cache purges kept are applied.
            missed @ (Ok(Event::Subscribed { heard: Some(_) }) | Err(RecvError::Lagged(_))) => {
                // A `Recovered` among the messages lost.
                if fleet.settling() {
                    write_back(&*proxy, &fleet);
                }
                let dropped = proxy.gate().cache().forget_all();
                tracing::info!(
                    dropped,
                    "fleet messages may have been missed: robots.txt copies dropped, read again from Redis"
                );
                replays.start(match missed {
                    Ok(Event::Subscribed { heard }) => heard,
                    _ => Some(last_received),
                });
                continue;
            }
            // Another node saw an origin's 429 or 503: this one holds its
            // requests to it too ([`crate::fleet::pauses`]).
            Ok(Event::Paused(p)) => {
                fleet.known_pauses().learn(&p.origin, p.left, p.signal);
                continue;
            }
            Ok(
                Event::Fetched(_)
                | Event::Reload { .. }
                | Event::Moved(_)
                | Event::Lost { .. }
                | Event::LeaseFree(_),
            ) => {
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        if fleet.is_me(&from) {
            continue;
        }
        if let Some(count) = apply_purge(&*proxy, &what).await {
            tracing::info!(from = %from, what = ?what, "purged as another node of the fleet asked");
            let mut event = AdminEvent::new("purge", format!("fleet node {}", from.node));
            event.target = Some(match &what {
                Purge::Robots(origin) => format!("origin={origin}"),
                Purge::Url(url) => format!("url={url}"),
                Purge::Prefix(prefix) => format!("prefix={prefix}"),
            });
            event.count = Some(count as u64);
            event.scope = Some("fleet");
            if let Err(e) = proxy.record_admin(event) {
                tracing::error!(error = %e, "cannot write the audit line of a fleet purge");
            }
        }
    }
}

/// Applies a purge another node said: how many entries it dropped here,
/// `None` when it is not one to apply.
async fn apply_purge(proxy: &dyn ProxyView, what: &Purge) -> Option<usize> {
    Some(match what {
        Purge::Robots(origin) => {
            let (origin, _) = parse_url(origin).ok()?;
            usize::from(proxy.gate().cache().purge(&origin))
        }
        // As the admin endpoint checks them: a message from a broken or
        // hostile Redis cannot empty the cache with a prefix "h".
        Purge::Url(url) if is_absolute_http(url) => match proxy.response_cache() {
            Some(cache) => purge_response_cache(cache, url, false).await,
            None => 0,
        },
        Purge::Prefix(prefix) if is_absolute_http(prefix) => match proxy.response_cache() {
            Some(cache) => purge_response_cache(cache, prefix, true).await,
            None => 0,
        },
        Purge::Url(_) | Purge::Prefix(_) => return None,
    })
}

/// How often, and a retry period apart, a node tries to read the purges
/// kept when Redis does not answer at once (it may subscribe before its
/// calls see Redis back).
const REPLAY_TRIES: u32 = 10;

/// Replays of the response-cache purges kept in Redis: each kept purge
/// said by another node is applied to what this node stored before it was
/// said (both on this node's clock: [`crate::fleet::events::Kept`]). One
/// runs at a time; those asked for meanwhile are
/// merged into one; purges a replay applied are not applied again.
struct Replays {
    proxy: Arc<dyn ProxyView>,
    fleet: Arc<crate::fleet::Fleet>,
    /// A replay asked for and not started yet: since when this node may
    /// have missed purges (`None`: unknown, or since before its start).
    pending: parking_lot::Mutex<Option<Option<tokio::time::Instant>>>,
    running: tokio::sync::Mutex<()>,
    /// Purges said before this (seconds, this node's clock) were applied.
    applied_to: std::sync::atomic::AtomicU64,
}

impl Replays {
    fn new(proxy: Arc<dyn ProxyView>, fleet: Arc<crate::fleet::Fleet>) -> Arc<Replays> {
        Arc::new(Replays {
            proxy,
            fleet,
            pending: parking_lot::Mutex::new(None),
            running: tokio::sync::Mutex::new(()),
            applied_to: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Asks for a replay for purges missed since `heard` (`None`:
    /// unknown).
    fn start(self: &Arc<Self>, heard: Option<tokio::time::Instant>) {
        if self.proxy.response_cache().is_none() {
            return;
        }
        {
            let mut pending = self.pending.lock();
            match &mut *pending {
                // Merged into the one asked for: the earlier of the two.
                Some(since) => {
                    *since = match (*since, heard) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        _ => None,
                    };
                    return;
                }
                None => *pending = Some(heard),
            }
        }
        let replays = self.clone();
        tokio::spawn(async move {
            let _one_at_a_time = replays.running.lock().await;
            let heard = replays.pending.lock().take().flatten();
            replays.run(heard).await;
        });
    }

    async fn run(self: &Arc<Self>, heard: Option<tokio::time::Instant>) {
        let mut kept = None;
        for _ in 0..REPLAY_TRIES {
            if let Ok(k) = self.fleet.purges_kept().await {
                kept = Some(k);
                break;
            }
            tokio::time::sleep(crate::fleet::RETRY_EVERY).await;
        }
        let Some(kept) = kept else {
            tracing::warn!(
                "fleet: the purges said while this node was not listening could not be read from Redis: a URL purged meanwhile may be served from this node's cache until it expires"
            );
            return;
        };
        // Purges older than the oldest kept were dropped: if this node may
        // have missed some of them, what it stored before is dropped too.
        let lost = kept.lost_before.filter(|&oldest| match heard {
            None => true,
            Some(h) => kept.now.saturating_sub(h.elapsed().as_secs() + 1) < oldest,
        });
        let applied_to = self.applied_to.load(std::sync::atomic::Ordering::Relaxed);
        let newest = kept
            .purges
            .last()
            .map_or(applied_to, |k| k.said.max(applied_to));
        let me = self.fleet.author();
        let proxy = self.proxy.clone();
        let work = move || {
            let cache = proxy.response_cache()?;
            let mut applied = 0;
            for k in kept
                .purges
                .iter()
                .filter(|k| k.said >= applied_to && k.from != me)
            {
                applied += match &k.what {
                    Purge::Url(url) if is_absolute_http(url) => {
                        cache.purge_said_at(Some(url), false, k.said)
                    }
                    Purge::Prefix(prefix) if is_absolute_http(prefix) => {
                        cache.purge_said_at(Some(prefix), true, k.said)
                    }
                    _ => 0,
                };
            }
            let dropped = lost.map_or(0, |oldest| cache.purge_said_at(None, false, oldest));
            Some((applied, dropped))
        };
        let done = tokio::task::spawn_blocking(work).await;
        if let Ok(Some((applied, dropped))) = done {
            self.applied_to
                .fetch_max(newest, std::sync::atomic::Ordering::Relaxed);
            if applied + dropped > 0 {
                tracing::info!(
                    applied,
                    dropped,
                    "fleet: response-cache purges said while this node was not listening applied"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::from_another_site;

    fn headers(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, http::HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn purges_sent_by_another_sites_page_are_told_apart() {
        assert!(!from_another_site(&headers(&[])), "curl sends neither");
        assert!(!from_another_site(&headers(&[(
            "sec-fetch-site",
            "same-origin"
        )])));
        assert!(from_another_site(&headers(&[(
            "sec-fetch-site",
            "cross-site"
        )])));
        assert!(from_another_site(&headers(&[(
            "sec-fetch-site",
            "same-site"
        )])));
        let same = [
            ("origin", "http://127.0.0.1:9128"),
            ("host", "127.0.0.1:9128"),
        ];
        assert!(!from_another_site(&headers(&same)));
        let other = [
            ("origin", "https://evil.example"),
            ("host", "127.0.0.1:9128"),
        ];
        assert!(from_another_site(&headers(&other)));
    }
}
