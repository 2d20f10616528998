//! The proxy's own responses: plain text, one decision header.

use http::header::{ALLOW, HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};

use crate::http::body::{Body, full_body};
use crate::judge::{Cause, Decision, Judgement, Limit};

/// Header carrying a decision's reason in one line.
pub(crate) const DECISION_HEADER: &str = "x-robots-proxy-decision";
/// Added to a forwarded response by `usage.mode = "annotate"`.
pub(crate) const USAGE_HEADER: &str = "x-robots-proxy-usage";

/// Header on a forwarded response saying how long the request was held for
/// Crawl-delay, in seconds (`1.980`).
pub(crate) const DELAY_HEADER: &str = "x-robots-proxy-delay";

/// A body from text.
pub(crate) fn full(text: &str) -> Body {
    full_body(text.to_string())
}

pub(crate) use crate::http::body::text;

/// A header value from arbitrary text: non-visible-ASCII characters become `?`.
pub(crate) fn header_value(s: &str) -> HeaderValue {
    let clean: String = s
        .chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .collect();
    HeaderValue::from_str(&clean).unwrap_or_else(|_| HeaderValue::from_static("?"))
}

/// 429 with `Retry-After` (whole seconds, at least 1).
pub(crate) fn too_many(retry_after: std::time::Duration, body: &str) -> Response<Body> {
    let mut resp = text(StatusCode::TOO_MANY_REQUESTS, body);
    resp.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(retry_secs(retry_after)));
    resp
}

/// Seconds for a `Retry-After` header: rounded up, at least 1.
fn retry_secs(retry: std::time::Duration) -> u64 {
    retry.as_secs_f64().ceil().max(1.0) as u64
}

/// The methods a 405 names in `Allow`: the common ones the proxy forwards
/// (it forwards any method but CONNECT inside a tunnel and TRACE).
pub(crate) const ALLOWED_METHODS: &str = "GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH";

/// 405 for a method the proxy does not forward, saying why.
pub(crate) fn method_not_allowed(why: &str) -> Response<Body> {
    let mut resp = text(StatusCode::METHOD_NOT_ALLOWED, format!("{why}\n"));
    resp.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(ALLOWED_METHODS));
    resp
}

/// 403 for a destination refused by policy.
pub(crate) fn refused(reason: &str) -> Response<Body> {
    let mut resp = text(
        StatusCode::FORBIDDEN,
        format!("Refused by robots-proxy: {reason}\n"),
    );
    resp.headers_mut().insert(
        DECISION_HEADER,
        header_value(&params_line("refused".into(), &[("reason", reason)])),
    );
    resp
}

/// The longest decision header value: a robots.txt line can be as long
/// as the file (500 KiB), and servers and clients refuse headers far
/// shorter than that (nginx: 4 or 8 KiB for the whole response head).
const DECISION_MAX: usize = 1024;

/// Marks a decision header whose strings were cut to [`DECISION_MAX`].
const TRUNCATED: &str = "; truncated";

/// `text` as the content of an RFC 8941 sf-string (without its quotes):
/// `\` and `"` backslash-escaped, so text from a robots.txt file cannot
/// close the string and add parameters of its own; octets an sf-string
/// cannot hold (controls, non-ASCII) percent-encoded as in a URL, which
/// is what rule paths are (a `%` already in the text is left as it is).
fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'\\' | b'"' => {
                out.push('\\');
                out.push(char::from(b));
            }
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The longest prefix of escaped sf-string content `s` within `max`
/// octets that does not cut an escape (`\x`, `%XX`) in two.
fn cut_escaped(s: &str, max: usize) -> &str {
    let bytes = s.as_bytes();
    let mut end = 0;
    while end < bytes.len() {
        let step = match bytes[end] {
            b'\\' => 2,
            b'%' => 3,
            _ => 1,
        };
        if end + step > max {
            break;
        }
        end += step;
    }
    &s[..end.min(s.len())]
}

/// `head` followed by `; key="value"` for each param, the values as
/// sf-strings; beyond [`DECISION_MAX`] the values are cut (each to an equal
/// share of what is left, ending in `...`) and `; truncated` added.
fn params_line(mut head: String, params: &[(&str, &str)]) -> String {
    let escaped: Vec<String> = params.iter().map(|(_, v)| sf_string(v)).collect();
    let overhead: usize = params.iter().map(|(k, _)| k.len() + 5).sum();
    let full: usize = escaped.iter().map(String::len).sum();
    let fits = head.len() + overhead + full <= DECISION_MAX;
    let share = DECISION_MAX
        .saturating_sub(head.len() + overhead + TRUNCATED.len())
        .checked_div(params.len())
        .unwrap_or(0);
    for ((key, _), value) in params.iter().zip(&escaped) {
        let value = if fits || value.len() <= share {
            value.clone()
        } else {
            format!("{}...", cut_escaped(value, share.saturating_sub(3)))
        };
        head.push_str(&format!("; {key}=\"{value}\""));
    }
    if !fits {
        head.push_str(TRUNCATED);
    }
    head
}

/// The one-line form of a judgement for the decision header: RFC 8941
/// parameters, their strings escaped, at most [`DECISION_MAX`] octets.
pub(crate) fn decision_line(j: &Judgement) -> String {
    let head = format!(
        "{}; agent={}; robots={}",
        j.decision.name(),
        j.agent,
        j.robots_url()
    );
    let rule = match &j.decision {
        Decision::UsageDisallowed(note) => Some(note.rule.to_string()),
        d => d.rule().map(|r| r.to_string()),
    };
    let reason;
    let mut params: Vec<(&str, &str)> = Vec::with_capacity(2);
    if let Some(path) = j.decision.judged_as() {
        params.push(("judged_as", path));
    }
    match &rule {
        Some(rule) => params.push(("rule", rule)),
        None => {
            reason = j.decision.reason();
            params.push(("reason", &reason));
        }
    }
    params_line(head, &params)
}

/// `X-Robots-Proxy-Usage: train-ai=n; robots=<url>; line=4`: what
/// `usage.mode = "annotate"` adds to a forwarded response (line 0: the
/// origin's own `Content-Usage` header).
pub(crate) fn usage_line(note: &crate::judge::UsageNote, robots_url: &str) -> String {
    if !note.protocol.is_empty() {
        // `train-ai=n; signal="tdmrep.json"; element="…"`.
        return format!(
            "{}=n; signal=\"{}\"; element=\"{}\"",
            note.purpose,
            note.protocol,
            sf_string(&note.text)
        );
    }
    format!(
        "{}=n; robots=\"{}\"; line={}",
        note.purpose,
        sf_string(robots_url),
        note.line
    )
}

/// The response for a judgement that does not forward.
pub(crate) fn blocked(j: &Judgement) -> Response<Body> {
    let fetch = match &j.entry {
        Some(e) => format!(
            "{}{}, fetched {} s ago",
            e.state.name(),
            e.status.map(|s| format!(" (HTTP {s})")).unwrap_or_default(),
            e.age().as_secs()
        ),
        None => "not consulted".into(),
    };
    let (status, title, retry) = match &j.decision {
        Decision::Disallowed { .. } => (StatusCode::FORBIDDEN, "Blocked by robots.txt", None),
        Decision::Unreachable {
            retry_after,
            cause: Cause::LocalShortage,
            ..
        } => (
            StatusCode::SERVICE_UNAVAILABLE,
            "robots.txt not fetched, for a cause of the proxy's own (not the origin's fault: see Reason); retry shortly",
            Some(*retry_after),
        ),
        Decision::Unreachable { retry_after, .. } => (
            StatusCode::SERVICE_UNAVAILABLE,
            "robots.txt unreachable: all paths disallowed until it can be fetched",
            Some(*retry_after),
        ),
        Decision::RateLimited {
            retry_after,
            limit: Limit::FleetUnavailable,
        } => (
            StatusCode::SERVICE_UNAVAILABLE,
            "Not forwarded: the fleet's shared Crawl-delay schedule (Redis) is unavailable; retry shortly",
            Some(*retry_after),
        ),
        Decision::RateLimited { retry_after, limit } => (
            StatusCode::TOO_MANY_REQUESTS,
            match limit {
                Limit::CrawlDelay => "Held back by Crawl-delay",
                Limit::UserQuota => "Over this user's request quota (max_rps)",
                Limit::FleetUnavailable => "Fleet schedule unavailable",
                Limit::OriginPause(_) => {
                    "Held back: the origin itself asked clients to slow down (429 or 503), and its pause lasts longer than this proxy holds a request"
                }
                Limit::InFlight => {
                    "Held back: as many requests to this origin as politeness.max_in_flight allows are in flight"
                }
            },
            Some(*retry_after),
        ),
        Decision::Refused { reason } => return refused(reason),
        Decision::BadGateway { .. } => (StatusCode::BAD_GATEWAY, "Upstream error", None),
        Decision::BadRequest { .. } => (
            StatusCode::BAD_REQUEST,
            "Request not forwarded: its body could reach the origin as another request",
            None,
        ),
        Decision::UsageDisallowed(_) => (
            StatusCode::FORBIDDEN,
            "Blocked by a usage preference in robots.txt: the site prefers its content not be used for a purpose this request declares",
            None,
        ),
        Decision::Allowed { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "Allowed", None),
    };
    let mut body = format!(
        "{title}\n\nURL:        {}\nAgent:      {}\nrobots.txt: {} ({fetch})\n",
        j.url(),
        j.agent,
        j.robots_url()
    );
    if let Some(path) = j.decision.judged_as() {
        body.push_str(&format!(
            "Judged as:  {path} (the path the origin may resolve it to)\n"
        ));
    }
    match (&j.decision, j.decision.rule()) {
        (Decision::UsageDisallowed(note), _) => body.push_str(&format!(
            "Purpose:    {} (declared)\nUsage:      {}=n\nRule:       {}\n",
            note.purpose, note.purpose, note.rule
        )),
        (_, Some(rule)) => body.push_str(&format!("Rule:       {rule}\n")),
        (_, None) => body.push_str(&format!("Reason:     {}\n", j.decision.reason())),
    }
    if let Decision::Unreachable { retry_after, .. } = &j.decision {
        body.push_str(&format!(
            "Next try:   robots.txt is fetched again in {} s\n",
            retry_secs(*retry_after)
        ));
    }
    let mut resp = text(status, body);
    resp.headers_mut()
        .insert(DECISION_HEADER, header_value(&decision_line(j)));
    if let Some(retry) = retry {
        resp.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(retry_secs(retry)));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_and_cut_whole() {
        assert_eq!(sf_string(r#"/x"; a=\"#), r#"/x\"; a=\\"#);
        assert_eq!(sf_string("/caf\u{e9}\t"), "/caf%C3%A9%09");
        assert_eq!(cut_escaped(r#"ab\"c"#, 3), "ab");
        assert_eq!(cut_escaped("a%C3%A9", 5), "a%C3");
        let long = "x".repeat(5000);
        let line = params_line("disallowed".into(), &[("judged_as", "/p"), ("rule", &long)]);
        assert!(line.len() <= DECISION_MAX, "{}", line.len());
        assert!(line.ends_with(r#"..."; truncated"#), "{line}");
        assert!(line.contains(r#"; judged_as="/p";"#), "{line}");
    }
}
