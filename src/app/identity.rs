//! What sites look for about the crawler, served without credentials on
//! the identity listener (`identity.listen`) and on the admin listener:
//! the Web Bot Auth key directory, the crawler page and its client ranges
//! (see [`crate::identity`]). Read-only: GET and HEAD.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::header::{CACHE_CONTROL, CONTENT_TYPE, HOST, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use maud::{DOCTYPE, html};

use crate::http::body::{Body, full_body, text};
use crate::identity::{Identity, SIGNATURE, SIGNATURE_INPUT, directory};
use crate::proxy::Proxy;
use crate::server::listen::ConnectionPolicy;

/// How long the directory's own signatures are valid: verifiers that keep
/// a copy may check it after the fetch, and the draft advises long
/// lifetimes for them.
pub(crate) const DIRECTORY_VALID: Duration = Duration::from_secs(7 * 24 * 3600);

/// Connections the identity listener serves at once.
const MAX_CONNECTIONS: usize = 256;

/// The `Content-Digest` header.
static CONTENT_DIGEST: http::header::HeaderName =
    http::header::HeaderName::from_static("content-digest");

/// The answer to a request for one of the identity's documents, or `None`
/// when `path` is not one of them.
pub(crate) fn route(
    identity: Option<&Identity>,
    method: &Method,
    path: &str,
    host: Option<&HeaderValue>,
) -> Option<Response<Body>> {
    if path != directory::PATH && path != CRAWLER_PAGE && path != CLIENT_RANGES {
        return None;
    }
    if method != Method::GET && method != Method::HEAD {
        return Some(text(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD only\n"));
    }
    let resp = match path {
        CRAWLER_PAGE => crawler_page(identity),
        CLIENT_RANGES => client_ranges(identity, SystemTime::now()),
        _ => key_directory(identity, host),
    };
    Some(if method == Method::HEAD {
        resp.map(|_| crate::http::body::empty_body())
    } else {
        resp
    })
}

/// The key directory, signed for the authority it was asked at.
fn key_directory(identity: Option<&Identity>, host: Option<&HeaderValue>) -> Response<Body> {
    let Some(signer) = identity.and_then(|i| i.signer()) else {
        return text(
            StatusCode::NOT_FOUND,
            "no signing key: identity.signing.key_file is not set\n",
        );
    };
    let authority = host
        .and_then(|h| h.to_str().ok())
        .map(|h| h.to_ascii_lowercase())
        .unwrap_or_default();
    let authority = authority.strip_suffix(":80").unwrap_or(&authority);
    let dir = directory::directory(signer, authority, SystemTime::now(), DIRECTORY_VALID);
    let mut resp = Response::new(full_body(dir.body));
    let h = resp.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(directory::MEDIA_TYPE),
    );
    h.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=3600"));
    h.insert(
        http::header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    for (name, value) in [
        (&CONTENT_DIGEST, Some(dir.content_digest)),
        (&SIGNATURE_INPUT, dir.signature_input),
        (&SIGNATURE, dir.signature),
    ] {
        if let Some(v) = value.and_then(|v| HeaderValue::from_str(&v).ok()) {
            h.insert(name.clone(), v);
        }
    }
    resp
}

/// The crawler page's path.
pub(crate) const CRAWLER_PAGE: &str = "/crawler";
/// The client ranges' path.
pub(crate) const CLIENT_RANGES: &str = "/client-ranges.json";
/// The client ranges' media type (draft-illyes-webbotauth-jafar).
const JAFAR_TYPE: &str = "application/jafar+json; version=1.0";

/// The addresses the crawler's requests leave from
/// (draft-illyes-webbotauth-jafar): `identity.egress_ranges`, each for
/// every product the crawler sends.
fn client_ranges(identity: Option<&Identity>, now: SystemTime) -> Response<Body> {
    let Some(identity) = identity else {
        return text(StatusCode::NOT_FOUND, "no [identity] is configured\n");
    };
    let page = &identity.page;
    let prefixes: Vec<serde_json::Value> = page
        .egress_ranges
        .iter()
        .map(|net| {
            let family = match net {
                ipnet::IpNet::V4(_) => "ipv4Prefix",
                ipnet::IpNet::V6(_) => "ipv6Prefix",
            };
            let mut prefix = serde_json::Map::new();
            prefix.insert(family.into(), net.trunc().to_string().into());
            if !page.names.is_empty() {
                prefix.insert("services".into(), page.names.clone().into());
            }
            prefix.into()
        })
        .collect();
    let created = iso8601(now);
    let doc = serde_json::json!({ "creationTime": created, "prefixes": prefixes });
    let mut resp = Response::new(full_body(format!("{doc:#}\n")));
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(JAFAR_TYPE));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=3600"));
    resp
}

/// `now` in ISO 8601, UTC (`2025-08-15T14:30:00Z`).
fn iso8601(now: SystemTime) -> String {
    let secs = i64::try_from(crate::identity::unix(now)).unwrap_or(0);
    let t =
        time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// The page that says who the crawler is (draft-illyes-webbotauth-cbcp
/// §2.6): its products and robots tokens, what it fetches for, who to
/// contact, the robots.txt lines that block it or limit its use of
/// content, and how to verify it. Every configured string is escaped.
fn crawler_page(identity: Option<&Identity>) -> Response<Body> {
    let Some(identity) = identity else {
        return text(StatusCode::NOT_FOUND, "no [identity] is configured\n");
    };
    let page = &identity.page;
    let title = page.names.first().map_or("This crawler", String::as_str);
    let first = page.names.first().map_or("*", String::as_str);
    let block = format!("User-agent: {first}\nDisallow: /\n");
    let limit = format!("User-agent: {first}\nContent-Usage: train-ai=n\nAllow: /\n");
    let signer = identity.signer();
    let directory_url = signer.map(|s| directory_url(s.agent_url()));
    let kids: Vec<String> = signer
        .map(|s| {
            s.keys()
                .listed(crate::identity::unix(SystemTime::now()))
                .map(|k| k.kid().to_string())
                .collect()
        })
        .unwrap_or_default();
    let body = html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                link rel="client-ranges" href=(CLIENT_RANGES);
                title { (title) }
            }
            body {
                h1 { (title) }
                h2 { "User-Agent" }
                @if page.user_agent.is_empty() {
                    p { "Its requests carry the User-Agent of the program that made them." }
                } @else {
                    p { "Its requests carry " code { (page.user_agent) } "." }
                }
                p { "robots.txt tokens it obeys: "
                    @for (i, t) in page.tokens.iter().enumerate() {
                        @if i > 0 { ", " } code { (t) }
                    }
                    ". Every request is checked against robots.txt before it is sent, and \
                     Crawl-delay is kept." }
                h2 { "What it fetches for" }
                @if page.purposes.is_empty() {
                    p { "No usage purpose is declared." }
                } @else {
                    ul { @for p in &page.purposes { li { code { (p) } } } }
                    p { "A site's Content-Usage or Content-Signal preference of " code { "n" }
                        " for one of these purposes stops the request." }
                }
                h2 { "Contact" }
                @if page.contact.is_empty() { p { "Not given." } } @else { p { (page.contact) } }
                h2 { "Blocking it" }
                p { "In robots.txt:" }
                pre { (block) }
                h2 { "Limiting its use of your content" }
                p { "In robots.txt (or a " code { "Content-Usage: train-ai=n" } " response header):" }
                pre { (limit) }
                h2 { "Verifying it" }
                @if let Some(url) = &directory_url {
                    p { "Its requests are signed (Web Bot Auth, HTTP Message Signatures): "
                        code { "Signature-Agent" } " names its key directory, "
                        a href=(url) { (url) } "; key ids: "
                        @for (i, k) in kids.iter().enumerate() { @if i > 0 { ", " } code { (k) } } "." }
                }
                p { "It sends from the addresses listed in "
                    a href=(CLIENT_RANGES) { "client-ranges" } "." }
            }
        }
    };
    let mut resp = super::html::response(StatusCode::OK, body);
    resp.headers_mut().insert(
        http::header::LINK,
        HeaderValue::from_static("</client-ranges.json>; rel=\"client-ranges\""),
    );
    resp
}

/// The directory's URL for a `Signature-Agent` value: the value itself
/// when it names a path, else its well-known path.
fn directory_url(agent: &str) -> String {
    let bare = agent
        .parse::<http::Uri>()
        .is_ok_and(|u| matches!(u.path(), "" | "/"));
    if bare {
        format!("{}{}", agent.trim_end_matches('/'), directory::PATH)
    } else {
        agent.to_string()
    }
}

/// Serves the identity listener until the task is aborted: the
/// identity's documents, a 404 for anything else.
pub(crate) async fn serve(listener: TcpListener, proxy: Arc<Proxy>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((stream, _peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let proxy = proxy.clone();
        let policy = ConnectionPolicy {
            header_timeout: proxy.settings().header_timeout,
        };
        tokio::spawn(async move {
            let _slot = slot;
            let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                let settings = proxy.settings();
                let resp = route(
                    settings.identity.as_deref(),
                    req.method(),
                    req.uri().path(),
                    req.headers().get(HOST),
                )
                .unwrap_or_else(|| text(StatusCode::NOT_FOUND, "not found\n"));
                async move { Ok::<_, std::convert::Infallible>(resp) }
            });
            let _ = policy
                .http1()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
