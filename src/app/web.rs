//! The web view of the admin listener: server-written pages with inline
//! style and SVG only (no script, nothing loaded from elsewhere: see
//! [`super::html`]).
//!
//! - `/`: decisions over time (the last hour per minute, the last 14 days
//!   per hour), the origins, rules and clients blocked most, the robots.txt
//!   cache (the first [`ORIGINS_SHOWN`] origins, most recently used
//!   first), the Crawl-delay queues, the response cache's counters and an
//!   `/explain` form;
//! - `/robots/SHA256?line=N`: an archived robots.txt with line N marked;
//! - `/explain?…&format=html`: `/explain`'s answer as a page;
//! - `/ca` and `/ca.pem`: the interception CA's certificate (never its
//!   key) and how each kind of client is told to trust it.
//!
//! Every table is bounded: the top lists at [`TOP`] rows, the origins at
//! [`ORIGINS_SHOWN`] with a count of the rest.

use std::collections::HashMap;

use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use maud::{Markup, html};

use super::html::{
    KIND_NAMES, bar_chart, duration, error_page, page, query_value, response, totals,
};
use super::state::{AdminState, ProxyView, query};
use crate::http::body::{Body, full_body};
use crate::judge::archive::{self, ArchiveError, Meta};
use crate::judge::politeness::Mode;
use crate::ops::activity::{HOURS, KINDS, MINUTES, Snapshot};

/// Rows of each top list.
pub(crate) const TOP: usize = 20;
/// Origins of the robots.txt cache shown.
pub(crate) const ORIGINS_SHOWN: usize = 200;

/// `HH:MM` (UTC) of a time in seconds since the epoch.
fn hh_mm(secs: u64) -> String {
    let day = secs % 86_400;
    format!("{:02}:{:02}", day / 3600, day % 3600 / 60)
}

/// `MM-DD` (UTC) of a time in seconds since the epoch.
fn month_day(secs: u64) -> String {
    let t = i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok());
    match t {
        Some(t) => format!("{:02}-{:02}", u8::from(t.month()), t.day()),
        None => String::new(),
    }
}

/// The legend and totals under a chart: `<b id="{id}-allowed">N</b>`….
fn chart_totals(id: &str, series: &[[u64; KINDS]]) -> Markup {
    let t = totals(series);
    html! {
        p class="legend" {
            @for (kind, name) in KIND_NAMES.iter().enumerate() {
                span {
                    i class={ "sw k" (kind) } {}
                    (name) ": " b id={ (id) "-" (name) } { (t[kind]) }
                }
            }
        }
    }
}

fn decisions(state: &AdminState, snap: &Snapshot) -> Markup {
    let now = snap.now;
    let minute0 = (now / 60 + 1).saturating_sub(MINUTES as u64) * 60;
    let hour0 = (now / 3600 + 1).saturating_sub(HOURS as u64) * 3600;
    let hour_chart = bar_chart(
        "chart-hour",
        12,
        &snap.minutes,
        |i| format!("{} UTC", hh_mm(minute0 + i as u64 * 60)),
        |i| {
            let at = minute0 + i as u64 * 60;
            at.is_multiple_of(600).then(|| hh_mm(at))
        },
    );
    let days_chart = bar_chart(
        "chart-days",
        3,
        &snap.hours,
        |i| {
            let at = hour0 + i as u64 * 3600;
            format!("{} {} UTC", month_day(at), hh_mm(at))
        },
        |i| {
            let at = hour0 + i as u64 * 3600;
            at.is_multiple_of(86_400).then(|| month_day(at))
        },
    );
    html! {
        h2 id="decisions" { "Decisions" }
        p class="note" {
            "Every judged request, by what was decided: " b { "allowed" }
            " (forwarded, answered from the cache, tunnelled), " b { "disallowed" }
            " (a robots.txt rule or usage preference), " b { "other" }
            " (robots.txt unreachable, rate limited, a refused destination, a bad request). \
             Times are UTC. "
            (replay_note(state, snap))
        }
        h3 { "The last hour, per minute" }
        (hour_chart)
        (chart_totals("hour", &snap.minutes))
        h3 { "The last 14 days, per hour" }
        (days_chart)
        (chart_totals("days", &snap.hours))
    }
}

fn replay_note(state: &AdminState, snap: &Snapshot) -> Markup {
    html! {
        @if snap.rebuilding {
            "Reading the audit log for the time before the start: " (snap.replayed)
            " lines so far."
        } @else {
            "Before the start: " (snap.replayed) " lines of the audit log (its last 14 days)."
        }
        @if !state.proxy.audit_log_all() {
            " " code { "audit.log_all" } " is off, so the log holds no allowed requests: \
             allowed requests from before the start are not shown."
        }
    }
}

fn top_lists(snap: &Snapshot) -> Markup {
    html! {
        h2 id="top" { "Blocked most" }
        p class="note" {
            "Requests not allowed, since the start and in the audit log's last 14 days. Keys \
             seen rarely may be dropped to keep the lists bounded."
        }
        div class="grid" {
            div {
                h3 { "Origins" }
                table id="top-origins" {
                    tr { th { "origin" } th class="n" { "requests" } }
                    @for (origin, n) in &snap.origins {
                        @let explain = query_value(&format!("{origin}/"));
                        tr {
                            td class="url" {
                                a href={ "/explain?format=html&url=" (explain) } { (origin) }
                            }
                            td class="n" { (n) }
                        }
                    }
                }
            }
            div {
                h3 { "Rules" }
                table id="top-rules" {
                    tr { th { "rule" } th { "robots.txt" } th class="n" { "requests" } }
                    @for (rule, n) in &snap.rules {
                        @let line = rule.line;
                        @let text = format!("line {line}: {}", rule.text);
                        @let archived = rule.sha256.as_deref().filter(|s| is_digest(s));
                        tr {
                            td {
                                @if let Some(sha) = archived {
                                    a href={ "/robots/" (sha) "?line=" (line) "#L" (line) } {
                                        code { (text) }
                                    }
                                } @else {
                                    code { (text) }
                                }
                            }
                            td class="url" { (rule.robots_url) }
                            td class="n" { (n) }
                        }
                    }
                }
            }
            div {
                h3 { "Clients" }
                table id="top-clients" {
                    tr { th { "address" } th { "user" } th class="n" { "requests" } }
                    @for (client, n) in &snap.clients {
                        tr {
                            td { (client.ip) }
                            td { (client.user.as_deref().unwrap_or("")) }
                            td class="n" { (n) }
                        }
                    }
                }
            }
        }
    }
}

/// The latest admin actions (purges, reloads, failed admin logins), as
/// their audit lines say.
fn admin_actions(snap: &Snapshot) -> Markup {
    html! {
        section {
            h2 id="admin-actions" { "Admin actions" }
            @if snap.admin.is_empty() {
                p { "None since the start (and in the audit log's last 14 days)." }
            } @else {
                table id="admin-actions-list" {
                    tr { th { "time" } th { "action" } th { "by" } th { "detail" } }
                    @for a in &snap.admin {
                        tr {
                            td { (a.time) }
                            td { (a.action) }
                            td { (a.by) }
                            td { (a.detail) }
                        }
                    }
                }
            }
        }
    }
}

/// 64 hex digits: safe to put in a path as it is.
fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The class a robots.txt entry's state is shown with.
fn state_class(name: &str) -> &'static str {
    match name {
        "ok" | "unavailable" => "ok",
        "stale" => "warn",
        _ => "bad",
    }
}

fn origins(proxy: &dyn ProxyView) -> Markup {
    let (listed, total) = proxy.gate().cache().list(ORIGINS_SHOWN);
    let now = tokio::time::Instant::now();
    let archived = proxy.gate().cache().archive().is_some();
    html! {
        h2 id="robots" { "robots.txt cache" }
        p class="note" {
            "Origins cached: " b id="origins-total" { (total) } ", the most recently used first."
        }
        table id="origins" {
            tr {
                th { "origin" } th { "state" } th class="n" { "HTTP" } th class="n" { "age" }
                th class="n" { "next fetch in" } th { "SHA-256 (archived text)" }
            }
            @for (origin, entry) in &listed {
                tr {
                    td class="url" { (origin) }
                    @if let Some(e) = entry {
                        td {
                            span class=(state_class(e.state.name())) { (e.state.name()) }
                            @if let Some(reason) = e.state.reason() {
                                " " span class="note" { (reason) }
                            }
                        }
                        td class="n" { @if let Some(status) = e.status { (status) } }
                        td class="n" { (duration(e.age())) }
                        td class="n" { (duration(e.expires.saturating_duration_since(now))) }
                        td {
                            @if let Some(d) = e.state.rules().and_then(|c| c.digest()) {
                                @let short = &d.to_string()[..16];
                                @if archived {
                                    a href={ "/robots/" (d) } { code { (short) "…" } }
                                } @else {
                                    code { (short) "…" }
                                }
                            }
                        }
                    } @else {
                        td { "fetching" } td {} td {} td {} td {}
                    }
                }
            }
        }
        @if total > listed.len() {
            p class="note" id="origins-more" { "and " (total - listed.len()) " more not shown." }
        }
    }
}

fn politeness(state: &AdminState) -> Markup {
    let settings = state.proxy.admin_settings();
    let p = &settings.politeness;
    let mode = match settings.politeness_settings.mode {
        Mode::Delay {
            max_wait,
            max_queue,
        } => format!(
            "delay (held up to {}, at most {max_queue} per origin and agent)",
            duration(max_wait)
        ),
        Mode::Reject => "reject (429 at once)".to_string(),
    };
    let default = settings.politeness_settings.default_interval.map_or_else(
        || "none".to_string(),
        |d| format!("{:.3} s", d.as_secs_f64()),
    );
    let busy = p.busiest(TOP);
    let fleet = settings.fleet.as_deref();
    let mut paused = match fleet {
        Some(f) => f.known_pauses().all(),
        None => p.paused(),
    };
    paused.sort_by_key(|(_, s)| std::cmp::Reverse(s.until));
    paused.truncate(TOP);
    let schedules = if fleet.is_some() {
        "the fleet's, on Redis (as this node last booked them; /explain reads Redis)"
    } else {
        "this process's"
    };
    html! {
        h2 id="politeness" { "Crawl-delay queues" }
        table {
            tr { th { "schedules" } td { (schedules) } }
            tr { th { "mode" } td { (mode) } }
            tr { th { "default interval" } td { (default) } }
            tr {
                th { "requests held now" }
                td id="held-now" { (state.proxy.politeness_waiting()) }
            }
            tr { th { "schedules tracked" } td { (p.tracked()) " of " (p.capacity()) } }
            tr { th { "evicted while active" } td { (p.evicted_active()) } }
        }
        @if busy.is_empty() {
            p class="note" { "No origin has a slot booked ahead." }
        } @else {
            h3 { "Booked furthest ahead" }
            table id="queues" {
                tr {
                    th { "origin and agent" } th class="n" { "interval" }
                    th class="n" { "next free slot in" } th class="n" { "requests booked" }
                }
                @for (key, interval, wait) in &busy {
                    @let booked = if interval.is_zero() {
                        0
                    } else {
                        wait.as_nanos().div_ceil(interval.as_nanos())
                    };
                    tr {
                        td class="url" { (key) }
                        td class="n" { (format!("{:.3} s", interval.as_secs_f64())) }
                        td class="n" { (format!("{:.3} s", wait.as_secs_f64())) }
                        td class="n" { (booked) }
                    }
                }
            }
        }
        @if !paused.is_empty() {
            h3 { "Paused by the origin (429, 503)" }
            table id="paused" {
                tr { th { "origin" } th { "signal" } }
                @for (origin, signal) in &paused {
                    tr {
                        td class="url" { (origin) }
                        td { (signal.describe()) }
                    }
                }
            }
        }
    }
}

fn response_cache(proxy: &dyn ProxyView) -> Markup {
    let Some(cache) = proxy.response_cache() else {
        return html! {
            h2 id="cache" { "Response cache" }
            p class="note" { "Off (" code { "cache.enabled" } ")." }
        };
    };
    let c = cache.counters();
    let looked_up = c.hits + c.misses + c.revalidations;
    let ratio = if looked_up == 0 {
        "–".to_string()
    } else {
        format!("{:.1} %", 100.0 * c.hits as f64 / looked_up as f64)
    };
    let rows: [(&str, String); 12] = [
        ("hits", c.hits.to_string()),
        ("misses", c.misses.to_string()),
        ("revalidations", c.revalidations.to_string()),
        ("hit ratio", ratio),
        ("stored", c.stored.to_string()),
        ("too large to store", c.too_large.to_string()),
        ("waited for another request", c.collapsed_waits.to_string()),
        ("invalidated", c.invalidations.to_string()),
        ("corrupt files", c.corrupt.to_string()),
        ("offline misses (504)", c.unavailable.to_string()),
        (
            "memory",
            format!(
                "{} responses, {} KiB",
                c.memory_objects,
                c.memory_bytes / 1024
            ),
        ),
        (
            "disk",
            format!("{} responses, {} KiB", c.disk_objects, c.disk_bytes / 1024),
        ),
    ];
    html! {
        h2 id="cache" { "Response cache" }
        table id="cache-counters" {
            @for (name, value) in rows {
                tr { th { (name) } td class="n" { (value) } }
            }
        }
    }
}

/// The `/explain` form: a GET to `/explain` answered as a page.
fn explain_form(url: &str, agent: &str) -> Markup {
    html! {
        form id="explain" method="get" action="/explain" {
            input type="hidden" name="format" value="html";
            label {
                "URL "
                input type="text" id="explain-url" name="url" value=(url)
                    placeholder="https://example.com/path" required;
            }
            label {
                "Agent "
                input type="text" id="explain-agent" name="agent" value=(agent)
                    placeholder="the configured agent";
            }
            button type="submit" id="explain-submit" { "Explain" }
        }
    }
}

/// `GET /`: the overview.
pub(crate) fn overview(state: &AdminState) -> Response<Body> {
    let proxy = &*state.proxy;
    let snap = proxy.activity().snapshot(TOP);
    let settings = proxy.admin_settings();
    let body = html! {
        h1 { "Overview" }
        p class="note" {
            "This page shows every client's URLs, "
            @if settings.auth.is_some() {
                "only to the " code { "[[admin.users]]" } " configured"
            } @else {
                "to anyone who reaches the admin listener: set " code { "[[admin.users]]" }
                " when more than one person can"
            }
            ". Proxy: " code { (state.listen) } ", agent " code { (settings.agent) } "."
        }
        (decisions(state, &snap))
        (top_lists(&snap))
        (origins(proxy))
        (politeness(state))
        (response_cache(proxy))
        (admin_actions(&snap))
        h2 id="explain-form" { "Explain a decision" }
        p class="note" {
            "What the proxy decides for a URL and why (it fetches robots.txt if needed); the \
             agent defaults to the configured one. The same as JSON: "
            code { "/explain?url=…&agent=…" } "."
        }
        (explain_form("", ""))
    };
    response(StatusCode::OK, page("Overview", body))
}

/// `/explain?…&format=html`: the answer (or what was wrong with the
/// question) as a page, with the form filled in again.
pub(crate) fn explain_page(
    q: &HashMap<String, String>,
    answer: Result<&serde_json::Value, &str>,
) -> Response<Body> {
    let url = q.get("url").map_or("", String::as_str);
    let agent = q.get("agent").map_or("", String::as_str);
    let body = html! {
        h1 { "Explain a decision" }
        (explain_form(url, agent))
        @match answer {
            Err(message) => {
                p class="bad" id="explain-error" { (message) }
            }
            Ok(value) => {
                (explain_answer(value))
            }
        }
    };
    response(StatusCode::OK, page("Explain", body))
}

/// `/explain`'s answer: the decision, a link to the deciding rule in the
/// archive, and every field.
fn explain_answer(value: &serde_json::Value) -> Markup {
    let decision = value["decision"].as_str().unwrap_or("");
    let class = if decision == "allowed" { "ok" } else { "bad" };
    let rule = (value["robots_sha256"].as_str(), value["rule_line"].as_u64());
    let fields = value
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(key, v)| {
            let shown = match v {
                serde_json::Value::Null => return None,
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            Some((key, shown))
        });
    html! {
        h2 { "Decision: " span class=(class) id="explain-decision" { (decision) } }
        @if let (Some(sha), Some(line)) = rule && is_digest(sha) {
            p {
                a id="explain-rule" href={ "/robots/" (sha) "?line=" (line) "#L" (line) } {
                    "The rule in the archived robots.txt"
                }
            }
        }
        table id="explain-answer" {
            @for (key, shown) in fields {
                tr { th { (key) } td class="url" { code { (shown) } } }
            }
        }
    }
}

/// `GET /robots/SHA256?line=N`: an archived robots.txt, checked against
/// its digest, with line N marked, and where it was served from.
pub(crate) fn robots_page(proxy: &dyn ProxyView, uri: &Uri) -> Response<Body> {
    let sha = uri.path().trim_start_matches("/robots/");
    let q = query(uri);
    let marked: Option<u32> = q.get("line").and_then(|l| l.parse().ok());
    let Some(archive) = proxy.gate().cache().archive() else {
        return error_page(
            StatusCode::NOT_FOUND,
            "No archive",
            "The robots.txt archive is off (audit.archive_max = 0).",
        );
    };
    let (text, meta) = match archive::read(archive.dir(), sha) {
        Ok(found) => found,
        Err(e) => {
            let status = match e {
                ArchiveError::BadDigest(_) => StatusCode::BAD_REQUEST,
                ArchiveError::Missing(..) => StatusCode::NOT_FOUND,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            // The message names the digest, never a path.
            let message = match e {
                ArchiveError::BadDigest(_) => "not a SHA-256 (64 hex digits)".to_string(),
                ArchiveError::Missing(..) => "no archived robots.txt has this digest".to_string(),
                ArchiveError::Corrupt { .. } => {
                    "the archived file does not match its digest".to_string()
                }
                _ => "the archived file cannot be read".to_string(),
            };
            return error_page(status, "robots.txt not found", &message);
        }
    };
    response(
        StatusCode::OK,
        page("Archived robots.txt", archived(&text, &meta, marked)),
    )
}

/// An archived robots.txt `text` with line `marked`, and where it was
/// served from (`meta`).
fn archived(text: &[u8], meta: &Meta, marked: Option<u32>) -> Markup {
    // The text as the parser read it, so line numbers match the rules'.
    let (prepared, cut) = crate::robots::parse::prepare(text);
    html! {
        h1 { "Archived robots.txt" }
        p {
            "SHA-256 " code id="robots-sha" { (meta.sha256) } ", " (meta.bytes) " bytes."
            @if let Some(n) = marked {
                " " a href={ "#L" (n) } { "Line " (n) } " is marked."
            }
            @if cut {
                " Only the first 500 KiB were read as rules."
            }
        }
        h2 { "Served by" }
        table id="served" {
            tr {
                th { "origin" } th { "URL" } th class="n" { "HTTP" } th { "Content-Type" }
                th { "first in force" } th { "last in force" }
            }
            @for s in meta.served.iter().take(ORIGINS_SHOWN) {
                tr {
                    td class="url" { (s.origin) }
                    td class="url" {
                        (s.url)
                        @if s.final_url != s.url && !s.final_url.is_empty() {
                            " → " (s.final_url)
                        }
                    }
                    td class="n" { @if let Some(status) = s.status { (status) } }
                    td { (s.content_type.as_deref().unwrap_or("")) }
                    td { (s.first_in_force) }
                    td { (s.last_in_force) }
                }
            }
        }
        h2 { "Text" }
        table class="text" id="robots-text" {
            @for (n, line) in crate::robots::parse::raw_lines(&prepared) {
                tr id={ "L" (n) } class=[(marked == Some(n)).then_some("hit")] {
                    td class="n" { a href={ "#L" (n) } { (n) } }
                    td { (line) }
                }
            }
        }
    }
}

/// `GET /ca.pem`: the CA certificate in use (never its key).
pub(crate) fn ca_pem(proxy: &dyn ProxyView) -> Response<Body> {
    let mut resp = Response::new(full_body(proxy.ca().cert_pem()));
    let h = resp.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-pem-file"),
    );
    h.insert(
        http::header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=\"robots-proxy-ca.pem\""),
    );
    h.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// The host (and port) a request was sent to, if it names one sensibly:
/// for the examples' URLs only, always shown escaped.
fn request_host(req: &Request<Incoming>) -> Option<String> {
    let host = req.headers().get(http::header::HOST)?.to_str().ok()?;
    let ok = !host.is_empty()
        && host.len() <= 255
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b));
    ok.then(|| host.to_string())
}

/// `GET /ca`: the CA's fingerprint, where to get it, and how each kind of
/// client is told to trust it.
pub(crate) fn ca_page(state: &AdminState, req: &Request<Incoming>) -> Response<Body> {
    let ca = state.proxy.ca();
    let admin = request_host(req).unwrap_or_else(|| "ADMIN-ADDRESS".to_string());
    // The proxy's address as clients reach it: a listener on all addresses
    // is reached by the name this page was.
    let configured = state.proxy.admin_settings().public_proxy;
    let proxy = if let Some(public) = configured {
        public
    } else if state.listen.ip().is_unspecified() {
        let host = admin
            .rsplit_once(':')
            .map_or(admin.as_str(), |(h, _)| h)
            .to_string();
        format!("{host}:{}", state.listen.port())
    } else {
        state.listen.to_string()
    };
    let not_after = crate::tls::ca::rfc3339(ca.not_after());
    let clients: [(&str, String); 8] = [
        (
            "curl",
            format!("curl --cacert robots-proxy-ca.pem -x http://{proxy} https://example.com/"),
        ),
        (
            "Python requests (and Scrapy, which verifies nothing by default)",
            format!(
                "export REQUESTS_CA_BUNDLE=$PWD/robots-proxy-ca.pem\n\
                 export HTTP_PROXY=http://{proxy} HTTPS_PROXY=http://{proxy}\n\
                 python scraper.py"
            ),
        ),
        (
            "Node.js (its fetch ignores HTTP_PROXY before Node 24: undici's agent sends it)",
            format!(
                "npm install undici@6\n\
                 echo \"const u = require('undici'); u.setGlobalDispatcher(new u.EnvHttpProxyAgent());\" > use-proxy.cjs\n\
                 export NODE_EXTRA_CA_CERTS=$PWD/robots-proxy-ca.pem\n\
                 export HTTP_PROXY=http://{proxy} HTTPS_PROXY=http://{proxy}\n\
                 node --require ./use-proxy.cjs crawler.js\n\
                 # Node 24 and later: NODE_USE_ENV_PROXY=1 node crawler.js"
            ),
        ),
        (
            "Java",
            format!(
                "keytool -importcert -noprompt -alias robots-proxy -file robots-proxy-ca.pem \\\n  \
                 -keystore robots-proxy.jks -storepass changeit\n\
                 java -Djavax.net.ssl.trustStore=robots-proxy.jks -Djavax.net.ssl.trustStorePassword=changeit \\\n  \
                 -Dhttps.proxyHost={host} -Dhttps.proxyPort={port} -jar crawler.jar\n\
                 # or into the JDK's own store: sudo keytool -importcert -cacerts -alias robots-proxy -file robots-proxy-ca.pem",
                host = proxy.rsplit_once(':').map_or(proxy.as_str(), |(h, _)| h),
                port = proxy.rsplit_once(':').map_or("3128", |(_, p)| p),
            ),
        ),
        (
            "Chromium and Chrome on Linux (NSS, package libnss3-tools)",
            format!(
                "certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n robots-proxy -i robots-proxy-ca.pem\n\
                 chromium --proxy-server=http://{proxy}"
            ),
        ),
        (
            "Firefox",
            "Settings → Privacy & Security → Certificates → View Certificates → \
             Authorities → Import robots-proxy-ca.pem, and trust it to identify websites."
                .to_string(),
        ),
        (
            "Debian and Ubuntu, system-wide",
            "sudo cp robots-proxy-ca.pem /usr/local/share/ca-certificates/robots-proxy.crt\n\
             sudo update-ca-certificates"
                .to_string(),
        ),
        (
            "Fedora and RHEL, system-wide",
            "sudo cp robots-proxy-ca.pem /etc/pki/ca-trust/source/anchors/robots-proxy.pem\n\
             sudo update-ca-trust"
                .to_string(),
        ),
    ];
    let body = html! {
        h1 { "Trusting the proxy's CA" }
        p {
            "robots-proxy reads HTTPS requests by answering them with certificates of its own \
             certificate authority. A client trusts them once it trusts this certificate: "
            b { (ca.common_name()) } ", valid until " (not_after) "."
        }
        p {
            a id="ca-download" href="/ca.pem" download="robots-proxy-ca.pem" {
                "Download robots-proxy-ca.pem"
            }
            ", or from a shell:"
        }
        pre { "curl -fsS -o robots-proxy-ca.pem http://" (admin) "/ca.pem" }
        p { "Check that it is this one before trusting it: its SHA-256 fingerprint is" }
        pre id="ca-fingerprint" { (ca.fingerprint_sha256()) }
        pre { "openssl x509 -in robots-proxy-ca.pem -noout -fingerprint -sha256" }
        p class="note" {
            "Only the certificate is served here; the key stays in the CA directory, readable \
             by the proxy alone. Anyone who holds the key can impersonate any site to the \
             clients that trust this certificate."
        }
        @for (name, how) in clients {
            h2 { (name) }
            @if name == "Firefox" {
                p { (how) }
            } @else {
                pre { (how) }
            }
        }
        p class="note" {
            "The proxy checks each site's own certificate itself, so a client that trusts this \
             CA is as safe as the proxy's own verification. Remove the certificate again with \
             the same tools (" code { "certutil -D -n robots-proxy" } ", "
            code { "keytool -delete -alias robots-proxy" } ", deleting the file and running "
            code { "update-ca-certificates --fresh" } " or " code { "update-ca-trust" } ")."
        }
    };
    response(StatusCode::OK, page("CA certificate", body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_in_utc() {
        assert_eq!(hh_mm(0), "00:00");
        assert_eq!(hh_mm(86_400 + 3600 * 13 + 60 * 7 + 5), "13:07");
        assert_eq!(month_day(0), "01-01");
        assert_eq!(month_day(31 * 86_400), "02-01");
    }

    #[test]
    fn digests_are_checked_before_they_become_paths() {
        assert!(is_digest(&"ab".repeat(32)));
        assert!(!is_digest(&"ab".repeat(31)));
        assert!(!is_digest(&format!("{}\"", "a".repeat(63))));
        assert!(!is_digest("../../etc/passwd"));
    }

    #[test]
    fn the_explain_page_escapes_the_question_and_the_answer() {
        let q: HashMap<String, String> = [
            (
                "url".to_string(),
                "http://a.example/\"><script>x</script>".to_string(),
            ),
            ("agent".to_string(), "'onfocus='x".to_string()),
        ]
        .into_iter()
        .collect();
        let answer = serde_json::json!({
            "decision": "disallowed",
            "rule": "Disallow: /<img src=x onerror=alert(1)>",
            "rule_line": 2,
            "robots_sha256": "ab".repeat(32),
        });
        let resp = explain_page(&q, Ok(&answer));
        assert_eq!(
            resp.headers()["content-security-policy"],
            crate::app::html::CSP
        );
        let html = body_text(resp);
        assert!(!html.contains("<script>x"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("value=\"http://a.example/&quot;&gt;&lt;script&gt;"));
        // Attribute values are double-quoted: a ' stays inside.
        assert!(html.contains("value=\"'onfocus='x\""));
        assert!(html.contains(&format!("/robots/{}?line=2#L2", "ab".repeat(32))));
        let html = body_text(explain_page(&q, Err("bad url \"<b>\"")));
        assert!(html.contains("bad url &quot;&lt;b&gt;&quot;"), "{html}");
    }

    const HOSTILE: [&str; 2] = [
        "<script>alert(1)</script>",
        "\"><img src=x onerror=alert(1)>",
    ];

    /// No markup of `html` comes from `HOSTILE`, and both are there as
    /// text.
    fn assert_inert(html: &str) {
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(
            html.contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"),
            "{html}"
        );
    }

    #[test]
    fn the_top_lists_escape_what_the_audit_log_says() {
        use crate::ops::activity::{ClientKey, RuleKey};
        let [script, img] = HOSTILE;
        let snap = Snapshot {
            admin: Vec::new(),
            now: 0,
            minutes: Vec::new(),
            hours: Vec::new(),
            origins: vec![(format!("http://a.example/{script}{img}").into(), 3)],
            rules: vec![
                (
                    RuleKey {
                        robots_url: format!("http://a.example/{img}").into(),
                        line: 2,
                        text: format!("Disallow: /{script}").into(),
                        sha256: Some(format!("{img}{}", "a".repeat(64)).into()),
                    },
                    2,
                ),
                (
                    RuleKey {
                        robots_url: "http://a.example/robots.txt".into(),
                        line: 3,
                        text: format!("Disallow: /{img}").into(),
                        sha256: Some("ab".repeat(32).into()),
                    },
                    1,
                ),
            ],
            clients: vec![(
                ClientKey {
                    ip: script.into(),
                    user: Some(img.into()),
                },
                1,
            )],
            rebuilding: false,
            replayed: 0,
        };
        let html = top_lists(&snap).into_string();
        assert_inert(&html);
        // The origin's link carries it percent-encoded, the rule's link only
        // a digest that is one.
        assert!(
            html.contains(
                "href=\"/explain?format=html&amp;url=http%3A%2F%2Fa.example%2F%3Cscript%3E"
            )
        );
        assert_eq!(html.matches("href=\"/robots/").count(), 1, "{html}");
        assert!(html.contains(&format!("href=\"/robots/{}?line=3#L3\"", "ab".repeat(32))));
    }

    #[test]
    fn an_archived_robots_txt_is_shown_as_text() {
        let [script, img] = HOSTILE;
        let text = format!("User-agent: *\n# {script}\nDisallow: /{img}\r\nAllow: /\n");
        let meta = Meta {
            sha256: "ab".repeat(32),
            bytes: text.len() as u64,
            served: vec![archive::Served {
                origin: format!("http://a.example/{script}"),
                url: "http://a.example/robots.txt".into(),
                final_url: format!("http://b.example/{img}"),
                status: Some(200),
                content_type: Some(format!("text/plain; x={img}")),
                first_in_force: script.into(),
                last_in_force: img.into(),
                ..Default::default()
            }],
        };
        let html = archived(text.as_bytes(), &meta, Some(3)).into_string();
        assert_inert(&html);
        assert!(
            html.contains(
                "<tr id=\"L3\" class=\"hit\"><td class=\"n\"><a href=\"#L3\">3</a></td>\
                 <td>Disallow: /&quot;&gt;&lt;img src=x onerror=alert(1)&gt;</td></tr>"
            ),
            "{html}"
        );
        assert!(html.contains("<tr id=\"L4\"><td"), "{html}");
        assert!(
            html.contains(" → http://b.example/&quot;&gt;&lt;img"),
            "{html}"
        );
    }

    fn body_text(resp: Response<Body>) -> String {
        use http_body_util::BodyExt;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let bytes = rt
            .block_on(resp.into_body().collect())
            .expect("body")
            .to_bytes();
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }
}
