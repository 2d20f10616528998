//! CONNECT: TLS interception under the proxy's CA so every inner request is
//! judged by path; blind tunnels (host-level decision only) for hosts on
//! the no-intercept list; plain HTTP inside a tunnel is judged as http.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use http::header::{CONNECTION, HOST, HeaderValue, USER_AGENT};
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use super::phases::{Answer, Caller, Judged, Line, Outcome, Recorded};
use super::respond;
use super::{Proxy, Settings};
use crate::http::body::{Body, empty_body};
use crate::http::origin::{Origin, Scheme};
use crate::judge::fetch_budget::for_client;
use crate::judge::{Decision, Judgement};
use crate::server::io::Prefixed;
use crate::server::{ConnectionHold, ConnectionPolicy, InFlight, Lifecycle, Stop, drive};
use crate::upstream::{ErrorKind, connect_upstream};

/// How long a client may take to start talking inside a tunnel (and to
/// finish the TLS handshake), at most: `client_header_timeout` if shorter.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);

/// The TLS record type of a handshake: the first byte of a ClientHello.
const TLS_HANDSHAKE: u8 = 0x16;

/// At most this much is read to see a tunnel's first byte: whatever has
/// arrived (a ClientHello, a request head) is read in the same call, so
/// the TLS handshake does not read again for the rest of it.
const SNIFF_BYTES: usize = 4096;

/// Parses a CONNECT target (`host:port`, `[v6]:port`) into the HTTPS origin.
fn connect_target(req: &Request<Body>) -> Result<(String, u16), String> {
    let authority = req
        .uri()
        .authority()
        .ok_or_else(|| "CONNECT needs host:port".to_string())?;
    let port = crate::http::origin::authority_port(authority.as_str())
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "CONNECT needs an explicit port".to_string())?;
    Ok((authority.host().to_string(), port))
}

/// True if `host` is on the no-intercept list (`example.com` or `*.example.com`).
pub(crate) fn no_intercept(list: &[String], host: &str) -> bool {
    crate::http::origin::host_listed(list, host)
}

/// The client connection's hold, for the tunnel to keep until it closes.
fn connection_hold(req: &Request<Body>) -> Option<Arc<ConnectionHold>> {
    req.extensions().get::<Arc<ConnectionHold>>().cloned()
}

/// The phases of a CONNECT request, up to its answer (finished by
/// [`Proxy::handle`], see [`super::phases`]): a bad target, a refusal, a
/// blind tunnel or an intercepted one; the answer to a tunnel whose port
/// may not be TLS is counted once the client speaks in it.
pub(crate) async fn handle(
    proxy: Arc<Proxy>,
    settings: Arc<Settings>,
    caller: Caller,
    req: Request<Body>,
) -> Answer {
    let https = match connect_target(&req).and_then(|(host, port)| {
        Origin::new(Scheme::Https, &host, Some(port)).map_err(|e| e.to_string())
    }) {
        Ok(o) => o,
        Err(e) => return Answer::bad_request(format!("Bad CONNECT: {e}\n")),
    };
    let ours = settings
        .identity
        .as_deref()
        .and_then(|i| i.judged_token(caller.user.as_deref(), req.headers().get(USER_AGENT)));
    let agent = settings
        .agent_for(
            caller.user_agent.as_deref().or(ours),
            req.headers().get(USER_AGENT),
        )
        .to_string();
    if proxy.gate.destination_refusal(&https).is_some() {
        // Judging gives the refusal its audit line before the tunnel opens.
        let judgement =
            for_client(caller.fetch_client(), proxy.gate.judge(&https, "/", &agent)).await;
        let ua = req.headers().get(USER_AGENT);
        let line = Judged::new(&judgement, &caller, "CONNECT", ua);
        return proxy
            .record_durable(Line::Request(line, None))
            .await
            .refusal(&judgement);
    }
    let minter = proxy.minter.clone();
    if no_intercept(&settings.no_intercept, https.host()) {
        return tunnel(proxy, &settings, caller, https, &agent, req).await;
    }
    let hold = connection_hold(&req);
    let task_proxy = proxy.clone();
    tokio::spawn(async move {
        let stop = hold.as_ref().map(|h| h.stop());
        let Some(upgraded) = upgraded(req).await else {
            return;
        };
        let tunnel = Tunnel { caller, stop, hold };
        // Boxed: the tunnel's future (TLS, the inner connection) is large,
        // and inline it would make this task's future as large, copied
        // whole by each move (into the task, and by every stage change).
        Box::pin(intercept(task_proxy, tunnel, https, upgraded, minter)).await;
    });
    Answer::new(Outcome::Intercepted, Response::new(empty_body()))
}

/// The client's side of an accepted CONNECT, once hyper hands it over.
async fn upgraded(req: Request<Body>) -> Option<TokioIo<hyper::upgrade::Upgraded>> {
    match hyper::upgrade::on(req).await {
        Ok(u) => Some(TokioIo::new(u)),
        Err(e) => {
            tracing::debug!(error = %e, "CONNECT upgrade failed");
            None
        }
    }
}

/// Who an intercepted tunnel serves, and its listener's phase.
struct Tunnel {
    caller: Caller,
    stop: Option<Stop>,
    /// The client connection's hold: kept while the tunnel is open, and
    /// lent to a WebSocket upgraded inside it, which may outlive it.
    hold: Option<Arc<ConnectionHold>>,
}

/// Waits until the listener stops taking new work (draining or cut);
/// never without a listener.
async fn stopping(stop: Option<&Stop>) {
    match stop {
        Some(stop) => {
            let mut stop = stop.clone();
            let _ = stop.wait_for(|p| *p != Lifecycle::Serving).await;
        }
        None => std::future::pending().await,
    }
}

/// Reads the first byte and serves the tunnel as TLS (intercepted) or as
/// plain HTTP. A tunnel that has not started its first request when
/// shutdown begins is closed.
async fn intercept<IO>(
    proxy: Arc<Proxy>,
    tunnel: Tunnel,
    https: Origin,
    io: IO,
    minter: Arc<crate::tls::Minter>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let client = tunnel.caller.client;
    let handshake = proxy.settings().header_timeout.min(HANDSHAKE_TIMEOUT);
    let Some((io, tls)) = sniff(io, handshake, tunnel.stop.as_ref()).await else {
        return;
    };
    if !tls {
        // Plain HTTP inside the tunnel (e.g. CONNECT host:80): judged as http.
        let Ok(http) = Origin::new(Scheme::Http, https.host(), Some(https.port())) else {
            return;
        };
        serve_inner(proxy, tunnel, http, io).await;
        return;
    }
    let host = https.host().to_string();
    let accepted = tokio::select! {
        accepted = tokio::time::timeout(handshake, minter.accept(io, &host)) => accepted,
        _ = stopping(tunnel.stop.as_ref()) => return,
    };
    match accepted {
        Ok(Ok((tls, _served))) => serve_inner(proxy, tunnel, https, tls).await,
        Ok(Err(e)) if e.client_distrusts_ca() => tracing::warn!(%client, host = %host,
            "client does not trust the proxy CA (install ca.pem, see README): {e}"),
        Ok(Err(e)) => tracing::debug!(%client, host = %host, "TLS interception failed: {e}"),
        Err(_) => tracing::debug!(%client, host = %host, "TLS handshake timed out"),
    }
}

/// Waits for the client's first byte in a tunnel (within `handshake`, and
/// not past the start of shutdown) and tells whether it opens a TLS
/// handshake; what was read with it is kept in front of the stream.
async fn sniff<IO>(
    mut io: IO,
    handshake: Duration,
    stop: Option<&Stop>,
) -> Option<(Prefixed<IO>, bool)>
where
    IO: AsyncRead + Unpin,
{
    let mut first = BytesMut::with_capacity(SNIFF_BYTES);
    tokio::select! {
        read = tokio::time::timeout(handshake, io.read_buf(&mut first)) => match read {
            Ok(Ok(n)) if n > 0 => {}
            _ => return None,
        },
        _ = stopping(stop) => return None,
    };
    let tls = first[0] == TLS_HANDSHAKE;
    Some((Prefixed::new(first.freeze(), io), tls))
}

/// Serves HTTP/1.1 or HTTP/2 requests inside a tunnel; every request is
/// judged against `origin`, the host the CONNECT named (where the proxy
/// actually connects), whatever Host or SNI the client sends. The
/// connection is built and driven like the proxy listener's: header and
/// idle timeout, graceful shutdown when the listener drains.
async fn serve_inner<IO>(proxy: Arc<Proxy>, tunnel: Tunnel, origin: Origin, io: IO)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Tunnel { caller, stop, hold } = tunnel;
    let client = caller.client;
    let origin = Arc::new(origin);
    let settings = proxy.settings();
    let policy = ConnectionPolicy {
        header_timeout: settings.header_timeout,
    };
    let max_streams = settings.max_streams_per_tunnel;
    let in_flight = InFlight::default();
    let counter = in_flight.clone();
    let counts = proxy.clone();
    let service = service_fn(move |mut req: Request<Incoming>| {
        let (proxy, origin, caller) = (proxy.clone(), origin.clone(), caller.clone());
        if let Some(hold) = hold
            .as_ref()
            .filter(|_| crate::http::headers::is_upgrade(req.headers()))
        {
            req.extensions_mut().insert(hold.clone());
        }
        let guard = counter.start();
        // Boxed: hyper moves the request's future into its connection
        // state, and this one, inline, is several kilobytes.
        Box::pin(async move {
            let resp = proxy.handle_in_tunnel(&caller, &origin, req).await;
            Ok::<_, std::convert::Infallible>(InFlight::track(guard, resp))
        })
    });
    let builder = policy.auto(max_streams);
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    let ended = drive(
        conn,
        |c| c.graceful_shutdown(),
        stop,
        Some((policy.header_timeout, &in_flight)),
        client,
        "tunnel connection",
    )
    .await;
    if ended
        .as_ref()
        .and_then(|e| e.downcast_ref::<hyper::Error>())
        .is_some_and(crate::server::answered_malformed)
    {
        counts.count(Outcome::BadRequest);
    }
}

/// The phases of a request inside a tunnel, up to its answer (finished by
/// [`Proxy::handle_in_tunnel`]).
pub(super) async fn inner_request(
    proxy: &Proxy,
    caller: &Caller,
    origin: &Origin,
    mut req: Request<Incoming>,
) -> Answer {
    if let Some(refusal) = refuse_inner(&req) {
        return Answer::new(Outcome::BadRequest, refusal);
    }
    let path = super::path_of(req.uri());
    let uri: Uri = match origin.url(&path).parse() {
        Ok(u) => u,
        Err(e) => return Answer::bad_request(format!("Bad request: {e}\n")),
    };
    *req.uri_mut() = uri;
    proxy
        .serve(
            &proxy.settings(),
            caller,
            origin.clone(),
            path,
            req.map(crate::http::body::incoming),
        )
        .await
}

/// The answer to a request inside a tunnel that must not be judged and
/// forwarded: one that is not for a resource on the tunnel's origin (a
/// CONNECT, an `*` or authority-form target), TRACE, or one naming a port
/// that is no port. Every such request still gets an answer.
fn refuse_inner(req: &Request<Incoming>) -> Option<Response<Body>> {
    if req.method() == Method::CONNECT {
        // The bytes after it may be meant for a tunnel: the connection ends.
        let mut resp = respond::method_not_allowed(
            "CONNECT is not allowed inside a tunnel: send requests for paths on the tunnel's host",
        );
        resp.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        return Some(resp);
    }
    if let Some(resp) = super::refuse_method(req.method()) {
        return Some(resp);
    }
    let uri = req.uri();
    let bad = |text: String| Some(respond::text(StatusCode::BAD_REQUEST, text));
    match uri.path_and_query().map(|pq| pq.as_str()) {
        Some("*") => {
            // Asks about the server as a whole: there is no path to judge,
            // and an answer made up here would not be the origin's.
            return bad(format!(
                "{} * asks about the server as a whole; robots-proxy judges and forwards \
                 requests for paths only\n",
                req.method()
            ));
        }
        // Authority form (`host:port`), meant for CONNECT only.
        None if uri.scheme().is_none() => {
            return bad("Bad request target: send a path\n".to_string());
        }
        _ => {}
    }
    if let Some(authority) = uri.authority()
        && let Err(e) = crate::http::origin::authority_port(authority.as_str())
    {
        return bad(format!("Bad request URL: {e}\n"));
    }
    let mut hosts = req.headers().get_all(HOST).iter();
    if let (Some(_), Some(_)) = (hosts.next(), hosts.next()) {
        return bad("Bad request: more than one Host header\n".to_string());
    }
    if let Some(host) = req.headers().get(HOST).filter(|h| !h.is_empty()) {
        let port = http::uri::Authority::try_from(host.as_bytes())
            .map_err(|e| e.to_string())
            .and_then(|a| {
                crate::http::origin::authority_port(a.as_str()).map_err(|e| e.to_string())
            });
        if let Err(e) = port {
            return bad(format!("Bad Host header: {e}\n"));
        }
    }
    None
}

/// A blind tunnel: only a host-level decision (is `/` allowed?) is possible.
async fn tunnel(
    proxy: Arc<Proxy>,
    settings: &Settings,
    caller: Caller,
    origin: Origin,
    agent: &str,
    req: Request<Body>,
) -> Answer {
    let judgement = for_client(caller.fetch_client(), proxy.gate.judge(&origin, "/", agent)).await;
    if matches!(judgement.decision, Decision::BadGateway { .. }) {
        // robots.txt over TLS failed: perhaps a plain-HTTP port (CONNECT
        // host:8080). The client's first byte tells.
        let handshake = settings.header_timeout.min(HANDSHAKE_TIMEOUT);
        return sniffed_tunnel(proxy, caller, origin, judgement, handshake, req);
    }
    // Allowed at host level, it is recorded as `tunnelled`: paths go unchecked.
    let ua = req.headers().get(USER_AGENT);
    let line = Judged::new(&judgement, &caller, "CONNECT", ua);
    match proxy.record_durable(Line::Tunnel(line)).await {
        Recorded::Passed => {}
        Recorded::Blocked(answer) | Recorded::AuditFailed(answer) => return answer,
    }
    let timeout = proxy.upstream.settings().connect_timeout;
    let upstream = match connect_upstream(&origin, proxy.gate.policy(), timeout).await {
        Ok(s) => s,
        Err(e) if e.kind() == ErrorKind::Refused => {
            // A name that resolved to a refused address: recorded as the
            // refusal it is (the line above said the tunnel would open).
            let reason = e.reason().to_string();
            let refused = judgement.overruled(Decision::Refused { reason });
            let line = Judged::new(&refused, &caller, "CONNECT", ua);
            return proxy
                .record_durable(Line::Again(line))
                .await
                .refusal(&refused);
        }
        Err(e) => {
            return Answer::new(
                Outcome::UpstreamError,
                respond::text(
                    StatusCode::BAD_GATEWAY,
                    format!("Cannot connect to {}: {e}\n", origin.authority()),
                ),
            );
        }
    };
    let hold = connection_hold(&req);
    let idle = settings.tunnel_idle_timeout;
    let client = caller.client;
    tokio::spawn(async move {
        let stop = hold.as_ref().map(|h| h.stop());
        let _hold = hold;
        if let Some(client_io) = upgraded(req).await {
            crate::server::relay::relay(client_io, upstream, idle, stop, client).await;
        }
    });
    Answer::new(Outcome::Tunnelled, Response::new(empty_body()))
}

/// A tunnel whose https robots.txt could not be fetched over TLS: opened,
/// then served by what the client speaks. Plain HTTP is served like plain
/// HTTP inside an intercepted tunnel (each request judged against the http
/// origin); TLS keeps the failed judgement, which is recorded, and the
/// tunnel is closed (no answer can be given inside the client's TLS). The
/// CONNECT is counted once that is known.
fn sniffed_tunnel(
    proxy: Arc<Proxy>,
    caller: Caller,
    origin: Origin,
    judgement: Judgement,
    handshake: Duration,
    req: Request<Body>,
) -> Answer {
    let hold = connection_hold(&req);
    let ua = req.headers().get(USER_AGENT).cloned();
    tokio::spawn(async move {
        let stop = hold.as_ref().map(|h| h.stop());
        let sniffed = match upgraded(req).await {
            Some(upgraded) => sniff(upgraded, handshake, stop.as_ref()).await,
            None => None,
        };
        let http = Origin::new(Scheme::Http, origin.host(), Some(origin.port()));
        match (sniffed, http) {
            (Some((_, true)), _) => {
                let line = Judged::new(&judgement, &caller, "CONNECT", ua.as_ref());
                let answer = proxy.record(Line::Request(line, None)).refusal(&judgement);
                proxy.count(answer.outcome);
            }
            (Some((io, false)), Ok(http)) => {
                proxy.count(Outcome::Intercepted);
                let tunnel = Tunnel { caller, stop, hold };
                Box::pin(serve_inner(proxy, tunnel, http, io)).await;
            }
            // The client left without a byte: nothing was judged or sent.
            _ => proxy.count(Outcome::Intercepted),
        }
    });
    Answer::counted_later(Response::new(empty_body()))
}

#[cfg(test)]
mod tests {
    use super::no_intercept;

    #[test]
    fn no_intercept_matches_exact_and_suffix_entries() {
        let list = vec!["bank.example".to_string(), "*.pinned.example".to_string()];
        assert!(no_intercept(&list, "bank.example"));
        assert!(!no_intercept(&list, "www.bank.example"));
        assert!(no_intercept(&list, "api.pinned.example"));
        assert!(!no_intercept(&list, "pinned.example"));
        assert!(!no_intercept(&list, "evilpinned.example"));
    }
}
