//! A report as one self-contained HTML file that can be mailed: inline
//! CSS, an inline SVG bar chart per day, no script and no reference to
//! anything outside the file. It is a `maud` template: every value from
//! the log is spliced in as text and escaped there; the style sheet is the
//! only text written as it is. Lines end after each block, so no line of
//! the file grows with the number of rows.

use std::io::{self, Write};

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::Report;
use super::sections::{
    admin_note, folded_note, period, printable, removed_note, robots, sections, summary,
};
use super::tally::Counts;

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}\
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:2em}\
table{border-collapse:collapse;margin:.5em 0}\
th,td{padding:.2em .6em;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}\
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}\
td.k{word-break:break-all;max-width:48em}\
.bar{height:.7em;background:#c0392b;min-width:1px}\
.note{color:#666;font-size:.9em}\
svg text{font-size:10px;fill:#444}";

pub(super) fn write(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    let days: Vec<(&str, Counts)> = r.days.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let robots = robots(r);
    let body = html! {
                "\n" h1 { "robots-proxy audit report" } "\n"
                @for line in summary(r).iter().chain(&period(r)) {
                    p { (printable(line)) } "\n"
                }
                h2 { "Per day" } "\n"
                (day_chart(r))
                (table("day", &days, Counts::default(), false))
                @for s in sections(r) {
                    h2 { (s.title) " (top " (r.top) ")" } "\n"
                    (table(s.column, &s.labelled().iter().map(|(k, c)| (k.as_ref(), *c)).collect::<Vec<_>>(), s.rest, s.blocked_only))
                    @if let Some(note) = folded_note(s.short_by) {
                        p class="note" { (note) } "\n"
                    }
                }
                @if !robots.is_empty() {
                    h2 { "robots.txt versions (robots_sha256) per origin" } "\n"
                    table {
                        tr {
                            th { "origin" } th { "robots_sha256" } th class="n" { "requests" }
                            th class="n" { "blocked" } th { "first" } th { "last" }
                        } "\n"
                        @for (origin, v) in &robots {
                            @for (sha, version) in &v.versions {
                                tr {
                                    td class="k" { (printable(origin)) }
                                    td class="k" { (printable(sha)) }
                                    td class="n" { (version.counts.requests) }
                                    td class="n" { (version.counts.blocked) }
                                    td { (printable(&version.first)) }
                                    td { (printable(&version.last)) }
                                } "\n"
                            }
                        }
                    } "\n"
                }
                @if !r.removed.is_empty() {
                    h2 { "Evidence removed from the robots.txt archive" } "\n"
                    @if let Some(note) = removed_note(r) {
                        p class="note" { (note) } "\n"
                    }
                    table {
                        tr { th { "time" } th { "node" } th { "robots_sha256" } th { "reason" } } "\n"
                        @for e in &r.removed {
                            tr {
                                td { (printable(&e.time)) } td { (printable(&e.node)) }
                                td class="k" { (printable(&e.sha256)) } td class="k" { (printable(&e.reason)) }
                            } "\n"
                        }
                    } "\n"
                }
                @if !r.admin.is_empty() {
                    h2 { "Admin actions" } "\n"
                    @if let Some(note) = admin_note(r) {
                        p class="note" { (note) } "\n"
                    }
                    table {
                        tr { th { "time" } th { "node" } th { "action" } th { "by" } th { "detail" } } "\n"
                        @for a in &r.admin {
                            tr {
                                td { (printable(&a.time)) } td { (printable(&a.node)) }
                                td { (printable(&a.action)) }
                                td class="k" { (printable(&a.by)) } td class="k" { (printable(&a.detail)) }
                            } "\n"
                        }
                    } "\n"
                }
    };
    out.write_all(
        page("robots-proxy audit report", body)
            .into_string()
            .as_bytes(),
    )
}

/// A whole page: `body` under `title`, with the report's style sheet.
pub(super) fn page(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body { (body) }
        }
        "\n"
    }
}

/// A table with a bar for each row's blocked count.
fn table(column: &str, rows: &[(&str, Counts)], rest: Counts, blocked_only: bool) -> Markup {
    let max = rows
        .iter()
        .map(|(_, c)| c.blocked)
        .max()
        .unwrap_or(0)
        .max(1);
    let row = |key: &str, c: Counts| {
        html! {
            tr {
                td class="k" { (printable(key)) }
                @if !blocked_only {
                    td class="n" { (c.requests) }
                }
                td class="n" { (c.blocked) }
                td style="width:12em" {
                    div class="bar" style={ "width:" (c.blocked * 100 / max) "%" } {}
                }
            } "\n"
        }
    };
    html! {
        table {
            tr {
                th { (column) }
                @if !blocked_only {
                    th class="n" { "requests" }
                }
                th class="n" { "blocked" }
                th {}
            } "\n"
            @for (key, c) in rows {
                (row(key, *c))
            }
            @if rest != Counts::default() {
                (row("(others)", rest))
            }
            @if rows.is_empty() {
                tr { td { "(none)" } } "\n"
            }
        } "\n"
    }
}

/// Requests (grey) and blocked (red) per day as an SVG bar chart.
fn day_chart(r: &Report) -> Markup {
    const HEIGHT: u64 = 160;
    const LEFT: u64 = 48;
    const STEP: u64 = 16;
    if r.days.is_empty() {
        return html! {};
    }
    let max = r
        .days
        .values()
        .map(|c| c.requests)
        .max()
        .unwrap_or(0)
        .max(1);
    let n = r.days.len() as u64;
    let width = LEFT + n * STEP + 8;
    let label_every = n.div_ceil(15).max(1);
    let bar = |v: u64| v * (HEIGHT - 8) / max;
    html! {
        svg width=(width) height=(HEIGHT + 40) role="img"
            aria-label="requests and blocked requests per day" {
            "\n"
            text x="0" y="12" { (max) }
            text x="0" y=(HEIGHT) { "0" }
            line x1=(LEFT) y1=(HEIGHT) x2=(width) y2=(HEIGHT) stroke="#999" {} "\n"
            @for (i, (day, c)) in r.days.iter().enumerate() {
                @let x = LEFT + i as u64 * STEP;
                @let (req, blk) = (bar(c.requests), bar(c.blocked));
                g {
                    title { (day) ": " (c.requests) " requests, " (c.blocked) " blocked" }
                    rect x=(x) y=(HEIGHT - req) width="7" height=(req) fill="#95a5a6" {}
                    rect x=(x + 7) y=(HEIGHT - blk) width="7" height=(blk) fill="#c0392b" {}
                } "\n"
                @if (i as u64).is_multiple_of(label_every) {
                    @let y = HEIGHT + 12;
                    text x=(x) y=(y) transform={ "rotate(30 " (x) " " (y) ")" } { (day) } "\n"
                }
            }
        } "\n"
    }
}
