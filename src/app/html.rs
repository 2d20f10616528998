//! HTML for the admin listener's pages: the page frame with its inline
//! style, the response headers that keep a page from loading anything,
//! and the inline SVG bar charts.
//!
//! Pages are `maud` templates: a value spliced into one is escaped for
//! HTML text or a (double-quoted) attribute value whatever its type, and
//! the only text written unescaped is this file's style sheet. Pages are
//! written on the server, with no script: the `Content-Security-Policy`
//! forbids every script, every load from elsewhere and being framed.
//! Links and form actions are the listener's own paths, built in the
//! templates; a URL from a request or a robots.txt is only ever shown as
//! text, or percent-encoded into a query ([`query_value`]).

use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::http::body::{Body, full_body};
use crate::ops::activity::KINDS;

/// The policy every page is served with: nothing but its own inline style,
/// `data:` images (the empty icon), forms sent to the listener itself,
/// and no framing.
pub(crate) const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; \
                              form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// `value` percent-encoded for a query string (`application/x-www-form-urlencoded`).
pub(crate) fn query_value(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

const STYLE: &str = "
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d1f21;background:#f6f7f9}
header{background:#24292f;color:#fff;padding:.6em 1.2em;display:flex;gap:1.5em;align-items:baseline;flex-wrap:wrap}
header a{color:#cde}
header strong{font-size:1.15em}
main{padding:0 1.2em 2em;max-width:1400px}
h1{font-size:1.4em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #d0d7de}
h3{font-size:1em;margin:1em 0 .3em}
table{border-collapse:collapse;background:#fff;margin:.3em 0}
th,td{border:1px solid #d0d7de;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#eef1f4}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font-family:ui-monospace,monospace;font-size:.95em}
.url{word-break:break-all}
.grid{display:flex;flex-wrap:wrap;gap:1.5em}
.grid>div{flex:1 1 380px;min-width:0}
.chart{background:#fff;border:1px solid #d0d7de;max-width:100%;height:auto;display:block}
.legend span{display:inline-block;margin-right:1em}
.sw{display:inline-block;width:.8em;height:.8em;margin-right:.3em;vertical-align:baseline}
.k0{fill:#2da44e;background:#2da44e}.k1{fill:#cf222e;background:#cf222e}.k2{fill:#bf8700;background:#bf8700}
.axis{fill:#57606a;font-size:10px}
.note{color:#57606a}
.ok{color:#1a7f37}.bad{color:#cf222e}.warn{color:#9a6700}
tr.hit td{background:#fff8c5;font-weight:bold}
table.text td{border:none;padding:0 .6em;white-space:pre-wrap;word-break:break-all}
table.text td.n a{color:#57606a;text-decoration:none}
form label{display:block;margin:.3em 0}
form input[type=text]{width:40em;max-width:100%}
";

/// A whole page: `title` and `body` in the frame every page shares.
pub(crate) fn page(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                link rel="icon" href="data:,";
                title { (title) " · robots-proxy" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    strong { "robots-proxy" } " " span { (env!("CARGO_PKG_VERSION")) } " "
                    a href="/" { "Overview" } " "
                    a href="/ca" { "CA certificate" } " "
                    a href="/metrics" { "Metrics" }
                }
                main { (body) }
            }
        }
        "\n"
    }
}

/// A page as a response, with the headers that keep it to itself.
pub(crate) fn response(status: StatusCode, html: Markup) -> Response<Body> {
    let mut resp = Response::new(full_body(html.into_string()));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        http::header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        http::header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}

/// A page that only says what went wrong.
pub(crate) fn error_page(status: StatusCode, title: &str, message: &str) -> Response<Body> {
    let body = html! { h1 { (title) } p { (message) } };
    response(status, page(title, body))
}

/// How long ago or ahead, shortly: `42 s`, `5 min`, `3 h`, `2 d`.
pub(crate) fn duration(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        7200..172_800 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    }
}

/// What the bars of a chart stand for.
pub(crate) const KIND_NAMES: [&str; KINDS] = ["allowed", "disallowed", "other"];

/// A stacked bar chart of `series` (one bar of `bar` pixels per period,
/// oldest first, the kinds stacked from the bottom). `label(i)` names bar
/// `i` in its tooltip, `tick(i)` gives the axis label under bar `i`, if
/// any.
pub(crate) fn bar_chart(
    id: &str,
    bar: usize,
    series: &[[u64; KINDS]],
    label: impl Fn(usize) -> String,
    tick: impl Fn(usize) -> Option<String>,
) -> Markup {
    let bar = bar.max(2);
    const PLOT: f64 = 120.0;
    const TOP: f64 = 12.0;
    const AXIS: f64 = 16.0;
    // Room on the right for the last tick's label.
    let width = series.len() * bar + 30;
    let max = series
        .iter()
        .map(|b| b.iter().sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1);
    let height = TOP + PLOT + AXIS;
    let base = TOP + PLOT;
    // Each kind's bar in a period: its class, its count, its top and height.
    let stack = |bucket: &[u64; KINDS]| {
        let mut y = base;
        let mut bars = Vec::new();
        for (kind, &n) in bucket.iter().enumerate().filter(|(_, n)| **n > 0) {
            let h = PLOT * n as f64 / max as f64;
            y -= h;
            bars.push((kind, y, h));
        }
        bars
    };
    let counts = |bucket: &[u64; KINDS]| {
        KIND_NAMES
            .iter()
            .zip(bucket)
            .map(|(name, n)| format!("{n} {name}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    html! {
        svg id=(id) class="chart" role="img" width=(width) height=(height)
            viewBox={ "0 0 " (width) " " (height) } xmlns="http://www.w3.org/2000/svg" {
            text class="axis" x="2" y="10" { "max " (max) }
            line x1="0" y1=(base) x2=(width) y2=(base) stroke="#d0d7de" {}
            @for (i, bucket) in series.iter().enumerate() {
                @let x = i * bar;
                @if let Some(t) = tick(i) {
                    line x1=(x) y1=(TOP) x2=(x) y2=(base) stroke="#eaeef2" {}
                    text class="axis" x=(x) y=(height - 3.0) { (t) }
                }
                @if bucket.iter().any(|n| *n > 0) {
                    g {
                        title { (label(i)) ": " (counts(bucket)) }
                        @for (kind, y, h) in stack(bucket) {
                            rect class={ "k" (kind) } x=(x) y=(format!("{y:.2}"))
                                width=(bar - 1) height=(format!("{h:.2}")) {}
                        }
                    }
                }
            }
        }
    }
}

/// The totals of a series per kind.
pub(crate) fn totals(series: &[[u64; KINDS]]) -> [u64; KINDS] {
    let mut out = [0; KINDS];
    for bucket in series {
        for (t, n) in out.iter_mut().zip(bucket) {
            *t += n;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spliced_text_leaves_no_markup_and_no_way_out_of_an_attribute() {
        let hostile = [
            "<script>alert(1)</script>",
            "\"><img src=x onerror=alert(1)>",
            "' onmouseover='alert(1)",
            "</style><script>x</script>",
            "javascript:alert(1)//<b>",
            "&lt;already escaped&gt; & more",
            "<!-- --><![CDATA[x]]>",
            "http://a.example/p?q=<x>&r=\"y\"#'z'",
        ];
        for h in hostile {
            let html = html! { p title=(h) { (h) } }.into_string();
            // Attribute values are always double-quoted: the first `">`
            // ends this one.
            let (attr, text) = html
                .strip_prefix("<p title=\"")
                .and_then(|rest| rest.strip_suffix("</p>"))
                .and_then(|rest| rest.split_once("\">"))
                .unwrap_or_else(|| panic!("{h:?} written as {html:?}"));
            for part in [attr, text] {
                for bad in ['<', '>', '"'] {
                    assert!(!part.contains(bad), "{h:?} written as {html:?}");
                }
                // Every & starts a reference the template wrote.
                for (i, _) in part.match_indices('&') {
                    let rest = &part[i..];
                    assert!(
                        ["&amp;", "&lt;", "&gt;", "&quot;"]
                            .iter()
                            .any(|r| rest.starts_with(r)),
                        "{h:?} written as {html:?}"
                    );
                }
            }
        }
        assert_eq!(
            html! { ("<a href=\"x\">'&'</a>") }.into_string(),
            "&lt;a href=&quot;x&quot;&gt;'&amp;'&lt;/a&gt;"
        );
        assert_eq!(
            html! { ("&amp;") }.into_string(),
            "&amp;amp;",
            "escaped again, not trusted"
        );
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            query_value("http://a.example/p?x=1&y=\"<>\""),
            "http%3A%2F%2Fa.example%2Fp%3Fx%3D1%26y%3D%22%3C%3E%22"
        );
    }

    #[test]
    fn a_page_has_its_title_escaped_and_loads_nothing() {
        let html = page("<b>x</b>", html! { p { "body" } });
        assert!(
            html.0
                .contains("<title>&lt;b&gt;x&lt;/b&gt; · robots-proxy</title>")
        );
        assert!(html.0.contains("<p>body</p>"));
        for external in ["<script", "src=\"http", "href=\"http", "@import", "url("] {
            assert!(!html.0.contains(external), "{external}");
        }
        let resp = response(StatusCode::OK, html);
        let h = resp.headers();
        assert_eq!(h["content-security-policy"], CSP);
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["cache-control"], "no-store");
    }

    #[test]
    fn a_chart_has_a_bar_per_busy_period_scaled_to_the_busiest() {
        let series = [[0, 0, 0], [2, 1, 1], [4, 0, 0]];
        let svg = bar_chart(
            "c",
            6,
            &series,
            |i| format!("t{i}"),
            |i| (i == 0).then(|| "<0>".to_string()),
        )
        .into_string();
        assert!(svg.starts_with("<svg id=\"c\""));
        assert_eq!(svg.matches("<rect").count(), 4, "{svg}");
        assert!(svg.contains("<title>t1: 2 allowed, 1 disallowed, 1 other</title>"));
        assert!(svg.contains("max 4"));
        assert!(svg.contains("&lt;0&gt;"), "tick labels are escaped");
        // The busiest bar is the whole plot's height.
        assert!(svg.contains("height=\"120.00\""), "{svg}");
        assert_eq!(totals(&series), [6, 1, 1]);
    }

    #[test]
    fn durations_read_shortly() {
        use std::time::Duration;
        assert_eq!(duration(Duration::from_secs(42)), "42 s");
        assert_eq!(duration(Duration::from_secs(600)), "10 min");
        assert_eq!(duration(Duration::from_secs(3 * 3600)), "3 h");
        assert_eq!(duration(Duration::from_secs(5 * 86_400)), "5 d");
    }
}
