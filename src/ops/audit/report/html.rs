//! A report as one self-contained HTML file that can be mailed: inline
//! CSS, an inline SVG bar chart per day, no script and no reference to
//! anything outside the file. Every value from the log is escaped text.

use std::fmt::Write as _;
use std::io::{self, Write};

use super::Report;
use super::render::{folded_note, period, robots, sections, summary};
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

/// `text` escaped for HTML text and attribute values.
fn esc(text: &str) -> String {
    crate::http::text::html_escape(text).into_owned()
}

pub(super) fn write(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    let mut h = String::with_capacity(64 << 10);
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    h.push_str("<title>robots-proxy audit report</title><style>");
    h.push_str(STYLE);
    h.push_str("</style></head><body>\n<h1>robots-proxy audit report</h1>\n");
    for line in summary(r).iter().chain(&period(r)) {
        let _ = writeln!(h, "<p>{}</p>", esc(line));
    }
    h.push_str("<h2>Per day</h2>\n");
    day_chart(&mut h, r);
    let days: Vec<(&str, Counts)> = r.days.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    table(&mut h, "day", &days, Counts::default(), false);
    for s in sections(r) {
        let _ = writeln!(h, "<h2>{} (top {})</h2>", esc(s.title), r.top);
        table(&mut h, s.column, &s.rows, s.rest, s.blocked_only);
        if let Some(note) = folded_note(s.short_by) {
            let _ = writeln!(h, "<p class=\"note\">{}</p>", esc(&note));
        }
    }
    let robots = robots(r);
    if !robots.is_empty() {
        h.push_str("<h2>robots.txt versions (robots_sha256) per origin</h2>\n<table>");
        h.push_str("<tr><th>origin</th><th>robots_sha256</th><th class=\"n\">requests</th>");
        h.push_str("<th class=\"n\">blocked</th><th>first</th><th>last</th></tr>\n");
        for (origin, v) in robots {
            for (sha, version) in &v.versions {
                let _ = writeln!(
                    h,
                    "<tr><td class=\"k\">{}</td><td class=\"k\">{}</td><td class=\"n\">{}</td>\
                     <td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>",
                    esc(origin),
                    esc(sha),
                    version.counts.requests,
                    version.counts.blocked,
                    esc(&version.first),
                    esc(&version.last)
                );
            }
        }
        h.push_str("</table>\n");
    }
    h.push_str("</body></html>\n");
    out.write_all(h.as_bytes())
}

/// A table with a bar for each row's blocked count.
fn table(h: &mut String, column: &str, rows: &[(&str, Counts)], rest: Counts, blocked_only: bool) {
    let max = rows
        .iter()
        .map(|(_, c)| c.blocked)
        .max()
        .unwrap_or(0)
        .max(1);
    let _ = write!(h, "<table><tr><th>{}</th>", esc(column));
    if !blocked_only {
        h.push_str("<th class=\"n\">requests</th>");
    }
    h.push_str("<th class=\"n\">blocked</th><th></th></tr>\n");
    let mut row = |key: &str, c: Counts| {
        let _ = write!(h, "<tr><td class=\"k\">{}</td>", esc(key));
        if !blocked_only {
            let _ = write!(h, "<td class=\"n\">{}</td>", c.requests);
        }
        let width = c.blocked * 100 / max;
        let _ = writeln!(
            h,
            "<td class=\"n\">{}</td><td style=\"width:12em\"><div class=\"bar\" \
             style=\"width:{width}%\"></div></td></tr>",
            c.blocked
        );
    };
    for (key, c) in rows {
        row(key, *c);
    }
    if rest != Counts::default() {
        row("(others)", rest);
    }
    if rows.is_empty() {
        h.push_str("<tr><td>(none)</td></tr>\n");
    }
    h.push_str("</table>\n");
}

/// Requests (grey) and blocked (red) per day as an SVG bar chart.
fn day_chart(h: &mut String, r: &Report) {
    const HEIGHT: u64 = 160;
    const LEFT: u64 = 48;
    const STEP: u64 = 16;
    if r.days.is_empty() {
        return;
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
    let _ = writeln!(
        h,
        "<svg width=\"{width}\" height=\"{}\" role=\"img\" \
         aria-label=\"requests and blocked requests per day\">",
        HEIGHT + 40
    );
    let _ = writeln!(
        h,
        "<text x=\"0\" y=\"12\">{max}</text><text x=\"0\" y=\"{HEIGHT}\">0</text>\
         <line x1=\"{LEFT}\" y1=\"{HEIGHT}\" x2=\"{width}\" y2=\"{HEIGHT}\" stroke=\"#999\"/>"
    );
    for (i, (day, c)) in r.days.iter().enumerate() {
        let x = LEFT + i as u64 * STEP;
        let bar = |v: u64| v * (HEIGHT - 8) / max;
        let (req, blk) = (bar(c.requests), bar(c.blocked));
        let _ = writeln!(
            h,
            "<g><title>{}: {} requests, {} blocked</title>\
             <rect x=\"{x}\" y=\"{}\" width=\"7\" height=\"{req}\" fill=\"#95a5a6\"/>\
             <rect x=\"{}\" y=\"{}\" width=\"7\" height=\"{blk}\" fill=\"#c0392b\"/></g>",
            esc(day),
            c.requests,
            c.blocked,
            HEIGHT - req,
            x + 7,
            HEIGHT - blk
        );
        if (i as u64).is_multiple_of(label_every) {
            let _ = writeln!(
                h,
                "<text x=\"{x}\" y=\"{}\" transform=\"rotate(30 {x} {})\">{}</text>",
                HEIGHT + 12,
                HEIGHT + 12,
                esc(day)
            );
        }
    }
    h.push_str("</svg>\n");
}
