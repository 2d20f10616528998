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
use std::fmt::Write as _;

use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use hyper::body::Incoming;

use super::admin::{AdminState, ProxyView, query};
use super::html::{
    KIND_NAMES, bar_chart, duration, error_page, escape, page, query_value, response, totals,
};
use crate::http::body::{Body, full_body};
use crate::judge::archive::{self, ArchiveError};
use crate::judge::politeness::Mode;
use crate::ops::activity::{HOURS, KINDS, MINUTES};

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

/// The legend and totals under a chart: `<span id="{id}-allowed">N</span>`….
fn chart_totals(id: &str, series: &[[u64; KINDS]]) -> String {
    let t = totals(series);
    let mut out = String::from("<p class=\"legend\">");
    for (kind, name) in KIND_NAMES.iter().enumerate() {
        let _ = write!(
            out,
            "<span><i class=\"sw k{kind}\"></i>{name}: <b id=\"{id}-{name}\">{}</b></span>",
            t[kind]
        );
    }
    out.push_str("</p>");
    out
}

fn decisions(state: &AdminState, snap: &crate::ops::activity::Snapshot) -> String {
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
    let mut out = String::from("<h2 id=\"decisions\">Decisions</h2>");
    let _ = write!(
        out,
        "<p class=\"note\">Every judged request, by what was decided: <b>allowed</b> \
         (forwarded, answered from the cache, tunnelled), <b>disallowed</b> (a robots.txt \
         rule or usage preference), <b>other</b> (robots.txt unreachable, rate limited, a \
         refused destination, a bad request). Times are UTC. {}</p>",
        replay_note(state, snap)
    );
    let _ = write!(
        out,
        "<h3>The last hour, per minute</h3>{hour_chart}{}\
         <h3>The last 14 days, per hour</h3>{days_chart}{}",
        chart_totals("hour", &snap.minutes),
        chart_totals("days", &snap.hours),
    );
    out
}

fn replay_note(state: &AdminState, snap: &crate::ops::activity::Snapshot) -> String {
    let mut note = if snap.rebuilding {
        format!(
            "Reading the audit log for the time before the start: {} lines so far.",
            snap.replayed
        )
    } else {
        format!(
            "Before the start: {} lines of the audit log (its last 14 days).",
            snap.replayed
        )
    };
    if !state.proxy.audit_log_all() {
        note.push_str(
            " <code>audit.log_all</code> is off, so the log holds no allowed requests: \
             allowed requests from before the start are not shown.",
        );
    }
    note
}

fn top_lists(snap: &crate::ops::activity::Snapshot) -> String {
    let mut out = String::from(
        "<h2 id=\"top\">Blocked most</h2><p class=\"note\">Requests not allowed, since \
         the start and in the audit log's last 14 days. Keys seen rarely may be dropped \
         to keep the lists bounded.</p><div class=\"grid\">",
    );
    out.push_str("<div><h3>Origins</h3><table id=\"top-origins\"><tr><th>origin</th><th class=\"n\">requests</th></tr>");
    for (origin, n) in &snap.origins {
        let explain = query_value(&format!("{origin}/"));
        let _ = write!(
            out,
            "<tr><td class=\"url\"><a href=\"/explain?format=html&amp;url={}\">{}</a></td>\
             <td class=\"n\">{n}</td></tr>",
            escape(&explain),
            escape(origin)
        );
    }
    out.push_str("</table></div>");
    out.push_str("<div><h3>Rules</h3><table id=\"top-rules\"><tr><th>rule</th><th>robots.txt</th><th class=\"n\">requests</th></tr>");
    for (rule, n) in &snap.rules {
        let text = format!("line {}: {}", rule.line, rule.text);
        let shown = match rule.sha256.as_deref().filter(|s| is_digest(s)) {
            Some(sha) => format!(
                "<a href=\"/robots/{sha}?line={}#L{}\"><code>{}</code></a>",
                rule.line,
                rule.line,
                escape(&text)
            ),
            None => format!("<code>{}</code>", escape(&text)),
        };
        let _ = write!(
            out,
            "<tr><td>{shown}</td><td class=\"url\">{}</td><td class=\"n\">{n}</td></tr>",
            escape(&rule.robots_url)
        );
    }
    out.push_str("</table></div>");
    out.push_str("<div><h3>Clients</h3><table id=\"top-clients\"><tr><th>address</th><th>user</th><th class=\"n\">requests</th></tr>");
    for (client, n) in &snap.clients {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{n}</td></tr>",
            escape(&client.ip),
            escape(client.user.as_deref().unwrap_or(""))
        );
    }
    out.push_str("</table></div></div>");
    out
}

/// 64 hex digits: safe to put in a path as it is.
fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn origins(proxy: &dyn ProxyView) -> String {
    let (listed, total) = proxy.gate().cache().list(ORIGINS_SHOWN);
    let now = tokio::time::Instant::now();
    let mut out = format!(
        "<h2 id=\"robots\">robots.txt cache</h2><p class=\"note\">Origins cached: \
         <b id=\"origins-total\">{total}</b>, the most recently used first.</p><table id=\"origins\"><tr><th>origin</th>\
         <th>state</th><th class=\"n\">HTTP</th><th class=\"n\">age</th>\
         <th class=\"n\">next fetch in</th><th>SHA-256 (archived text)</th></tr>"
    );
    for (origin, entry) in &listed {
        let _ = write!(
            out,
            "<tr><td class=\"url\">{}</td>",
            escape(&origin.to_string())
        );
        let Some(e) = entry else {
            out.push_str("<td>fetching</td><td></td><td></td><td></td><td></td></tr>");
            continue;
        };
        let class = match e.state.name() {
            "ok" | "unavailable" => "ok",
            "stale" => "warn",
            _ => "bad",
        };
        let reason = e
            .state
            .reason()
            .map(|r| format!(" <span class=\"note\">{}</span>", escape(r)))
            .unwrap_or_default();
        let digest = e.state.rules().and_then(|c| c.digest());
        let digest = match digest {
            Some(d) if proxy.gate().cache().archive().is_some() => {
                format!(
                    "<a href=\"/robots/{d}\"><code>{}…</code></a>",
                    &d.to_string()[..16]
                )
            }
            Some(d) => format!("<code>{}…</code>", &d.to_string()[..16]),
            None => String::new(),
        };
        let _ = write!(
            out,
            "<td><span class=\"{class}\">{}</span>{reason}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td>{digest}</td></tr>",
            e.state.name(),
            e.status.map(|s| s.to_string()).unwrap_or_default(),
            duration(e.age()),
            duration(e.expires.saturating_duration_since(now)),
        );
    }
    out.push_str("</table>");
    if total > listed.len() {
        let _ = write!(
            out,
            "<p class=\"note\" id=\"origins-more\">and {} more not shown.</p>",
            total - listed.len()
        );
    }
    out
}

fn politeness(state: &AdminState) -> String {
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
    let mut out = format!(
        "<h2 id=\"politeness\">Crawl-delay queues</h2><table><tr><th>mode</th><td>{mode}</td></tr>\
         <tr><th>default interval</th><td>{default}</td></tr>\
         <tr><th>requests held now</th><td id=\"held-now\">{}</td></tr>\
         <tr><th>schedules tracked</th><td>{} of {}</td></tr>\
         <tr><th>evicted while active</th><td>{}</td></tr></table>",
        state.proxy.politeness_waiting(),
        p.tracked(),
        p.capacity(),
        p.evicted_active(),
    );
    let busy = p.busiest(TOP);
    if busy.is_empty() {
        out.push_str("<p class=\"note\">No origin has a slot booked ahead.</p>");
        return out;
    }
    out.push_str(
        "<h3>Booked furthest ahead</h3><table id=\"queues\"><tr><th>origin and agent</th>\
         <th class=\"n\">interval</th><th class=\"n\">next free slot in</th>\
         <th class=\"n\">requests booked</th></tr>",
    );
    for (key, interval, wait) in busy {
        let booked = if interval.is_zero() {
            0
        } else {
            wait.as_nanos().div_ceil(interval.as_nanos())
        };
        let _ = write!(
            out,
            "<tr><td class=\"url\">{}</td><td class=\"n\">{:.3} s</td>\
             <td class=\"n\">{:.3} s</td><td class=\"n\">{booked}</td></tr>",
            escape(&key),
            interval.as_secs_f64(),
            wait.as_secs_f64(),
        );
    }
    out.push_str("</table>");
    out
}

fn response_cache(proxy: &dyn ProxyView) -> String {
    let Some(cache) = proxy.response_cache() else {
        return "<h2 id=\"cache\">Response cache</h2><p class=\"note\">Off \
                (<code>cache.enabled</code>).</p>"
            .to_string();
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
    let mut out = String::from("<h2 id=\"cache\">Response cache</h2><table id=\"cache-counters\">");
    for (name, value) in rows {
        let _ = write!(out, "<tr><th>{name}</th><td class=\"n\">{value}</td></tr>");
    }
    out.push_str("</table>");
    out
}

/// The `/explain` form: a GET to `/explain` answered as a page.
fn explain_form(url: &str, agent: &str) -> String {
    format!(
        "<form id=\"explain\" method=\"get\" action=\"/explain\">\
         <input type=\"hidden\" name=\"format\" value=\"html\">\
         <label>URL <input type=\"text\" id=\"explain-url\" name=\"url\" value=\"{}\" \
         placeholder=\"https://example.com/path\" required></label>\
         <label>Agent <input type=\"text\" id=\"explain-agent\" name=\"agent\" value=\"{}\" \
         placeholder=\"the configured agent\"></label>\
         <button type=\"submit\" id=\"explain-submit\">Explain</button></form>",
        escape(url),
        escape(agent)
    )
}

/// `GET /`: the overview.
pub(crate) fn overview(state: &AdminState) -> Response<Body> {
    let proxy = &*state.proxy;
    let snap = proxy.activity().snapshot(TOP);
    let mut body = String::from("<h1>Overview</h1>");
    let settings = proxy.admin_settings();
    let who = if settings.auth.is_some() {
        "only to the <code>[[admin.users]]</code> configured"
    } else {
        "to anyone who reaches the admin listener: set <code>[[admin.users]]</code> \
         when more than one person can"
    };
    let _ = write!(
        body,
        "<p class=\"note\">This page shows every client's URLs, {who}. Proxy: <code>{}</code>, \
         agent <code>{}</code>.</p>",
        escape(&state.listen.to_string()),
        escape(&settings.agent),
    );
    body.push_str(&decisions(state, &snap));
    body.push_str(&top_lists(&snap));
    body.push_str(&origins(proxy));
    body.push_str(&politeness(state));
    body.push_str(&response_cache(proxy));
    body.push_str(
        "<h2 id=\"explain-form\">Explain a decision</h2><p class=\"note\">What the proxy \
         decides for a URL and why (it fetches robots.txt if needed); the agent defaults to \
         the configured one. The same as JSON: <code>/explain?url=…&amp;agent=…</code>.</p>",
    );
    body.push_str(&explain_form("", ""));
    response(StatusCode::OK, page("Overview", &body))
}

/// `/explain?…&format=html`: the answer (or what was wrong with the
/// question) as a page, with the form filled in again.
pub(crate) fn explain_page(
    q: &HashMap<String, String>,
    answer: Result<&serde_json::Value, &str>,
) -> Response<Body> {
    let url = q.get("url").map_or("", String::as_str);
    let agent = q.get("agent").map_or("", String::as_str);
    let mut body = String::from("<h1>Explain a decision</h1>");
    body.push_str(&explain_form(url, agent));
    match answer {
        Err(message) => {
            let _ = write!(
                body,
                "<p class=\"bad\" id=\"explain-error\">{}</p>",
                escape(message)
            );
        }
        Ok(value) => {
            let decision = value["decision"].as_str().unwrap_or("");
            let class = if decision == "allowed" { "ok" } else { "bad" };
            let _ = write!(
                body,
                "<h2>Decision: <span class=\"{class}\" id=\"explain-decision\">{}</span></h2>",
                escape(decision)
            );
            if let (Some(sha), Some(line)) =
                (value["robots_sha256"].as_str(), value["rule_line"].as_u64())
                && is_digest(sha)
            {
                let _ = write!(
                    body,
                    "<p><a id=\"explain-rule\" href=\"/robots/{sha}?line={line}#L{line}\">\
                     The rule in the archived robots.txt</a></p>"
                );
            }
            body.push_str("<table id=\"explain-answer\">");
            if let Some(fields) = value.as_object() {
                for (key, v) in fields {
                    let shown = match v {
                        serde_json::Value::Null => continue,
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    let _ = write!(
                        body,
                        "<tr><th>{}</th><td class=\"url\"><code>{}</code></td></tr>",
                        escape(key),
                        escape(&shown)
                    );
                }
            }
            body.push_str("</table>");
        }
    }
    response(StatusCode::OK, page("Explain", &body))
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
    // The text as the parser read it, so line numbers match the rules'.
    let (prepared, cut) = crate::robots::parse::prepare(&text);
    let mut body = format!(
        "<h1>Archived robots.txt</h1><p>SHA-256 <code id=\"robots-sha\">{}</code>, {} bytes.",
        escape(&meta.sha256),
        meta.bytes
    );
    if let Some(n) = marked {
        let _ = write!(body, " <a href=\"#L{n}\">Line {n}</a> is marked.");
    }
    if cut {
        body.push_str(" Only the first 500 KiB were read as rules.");
    }
    body.push_str(
        "</p><h2>Served by</h2><table id=\"served\"><tr><th>origin</th><th>URL</th>\
                   <th class=\"n\">HTTP</th><th>Content-Type</th><th>first in force</th>\
                   <th>last in force</th></tr>",
    );
    for s in meta.served.iter().take(ORIGINS_SHOWN) {
        let url = if s.final_url != s.url && !s.final_url.is_empty() {
            format!("{} → {}", s.url, s.final_url)
        } else {
            s.url.clone()
        };
        let _ = write!(
            body,
            "<tr><td class=\"url\">{}</td><td class=\"url\">{}</td><td class=\"n\">{}</td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&s.origin),
            escape(&url),
            s.status.map(|x| x.to_string()).unwrap_or_default(),
            escape(s.content_type.as_deref().unwrap_or("")),
            escape(&s.first_in_force),
            escape(&s.last_in_force),
        );
    }
    body.push_str("</table><h2>Text</h2><table class=\"text\" id=\"robots-text\">");
    for (n, line) in crate::robots::parse::raw_lines(&prepared) {
        let hit = if marked == Some(n) {
            " class=\"hit\""
        } else {
            ""
        };
        let _ = write!(
            body,
            "<tr id=\"L{n}\"{hit}><td class=\"n\"><a href=\"#L{n}\">{n}</a></td><td>{}</td></tr>",
            escape(line)
        );
    }
    body.push_str("</table>");
    response(StatusCode::OK, page("Archived robots.txt", &body))
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
    let proxy = if state.listen.ip().is_unspecified() {
        let host = admin
            .rsplit_once(':')
            .map_or(admin.as_str(), |(h, _)| h)
            .to_string();
        format!("{host}:{}", state.listen.port())
    } else {
        state.listen.to_string()
    };
    let user = if state.proxy.admin_settings().auth.is_some() {
        " -u USER"
    } else {
        ""
    };
    let e = |s: &str| escape(s).into_owned();
    let (admin, proxy) = (e(&admin), e(&proxy));
    let not_after = crate::tls::ca::rfc3339(ca.not_after());
    let mut body = format!(
        "<h1>Trusting the proxy's CA</h1>\
         <p>robots-proxy reads HTTPS requests by answering them with certificates of its own \
         certificate authority. A client trusts them once it trusts this certificate: \
         <b>{cn}</b>, valid until {not_after}.</p>\
         <p><a id=\"ca-download\" href=\"/ca.pem\" download=\"robots-proxy-ca.pem\">Download \
         robots-proxy-ca.pem</a>, or from a shell:</p>\
         <pre>curl -fsS{user} -o robots-proxy-ca.pem http://{admin}/ca.pem</pre>\
         <p>Check that it is this one before trusting it: its SHA-256 fingerprint is</p>\
         <pre id=\"ca-fingerprint\">{fp}</pre>\
         <pre>openssl x509 -in robots-proxy-ca.pem -noout -fingerprint -sha256</pre>\
         <p class=\"note\">Only the certificate is served here; the key stays in the CA \
         directory, readable by the proxy alone. Anyone who holds the key can impersonate any \
         site to the clients that trust this certificate.</p>",
        cn = e(ca.common_name()),
        fp = e(&ca.fingerprint_sha256()),
    );
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
                 echo \"const u = require('undici'); u.setGlobalDispatcher(new u.EnvHttpProxyAgent());\" &gt; use-proxy.cjs\n\
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
                port = state.listen.port(),
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
            "Settings → Privacy &amp; Security → Certificates → View Certificates → \
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
    for (name, how) in clients {
        let _ = write!(body, "<h2>{name}</h2>");
        if name == "Firefox" {
            let _ = write!(body, "<p>{how}</p>");
        } else {
            let _ = write!(body, "<pre>{how}</pre>");
        }
    }
    let _ = write!(
        body,
        "<p class=\"note\">The proxy checks each site's own certificate itself, so a client \
         that trusts this CA is as safe as the proxy's own verification. Remove the \
         certificate again with the same tools (<code>certutil -D -n robots-proxy</code>, \
         <code>keytool -delete -alias robots-proxy</code>, deleting the file and running \
         <code>update-ca-certificates --fresh</code> or <code>update-ca-trust</code>).</p>"
    );
    response(StatusCode::OK, page("CA certificate", &body))
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
        assert!(html.contains("value=\"&#39;onfocus=&#39;x\""));
        assert!(html.contains(&format!("/robots/{}?line=2#L2", "ab".repeat(32))));
        let html = body_text(explain_page(&q, Err("bad url \"<b>\"")));
        assert!(html.contains("bad url &quot;&lt;b&gt;&quot;"), "{html}");
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
