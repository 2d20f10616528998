//! A report as text, CSV or JSON (HTML in [`super::html`]): the same
//! tables in each.

use std::io::{self, Write};

use super::tally::{Counts, Tally};
use super::{Format, Report, TABLE_CAP, Versions};

/// One table of a report: its top rows and the rest.
pub(super) struct Section<'a> {
    /// Its name in CSV and JSON.
    pub(super) name: &'static str,
    /// Its title in text and HTML.
    pub(super) title: &'static str,
    /// The heading of its key column.
    pub(super) column: &'static str,
    pub(super) rows: Vec<(&'a str, Counts)>,
    /// Everything not in `rows`.
    pub(super) rest: Counts,
    /// How short a count may be after folding (0: exact).
    pub(super) short_by: u64,
    /// Only blocked lines are counted: one column.
    pub(super) blocked_only: bool,
}

fn section<'a>(
    tally: &'a Tally<Counts>,
    top: usize,
    (name, title, column): (&'static str, &'static str, &'static str),
) -> Section<'a> {
    let (rows, rest) = tally.top(top);
    Section {
        name,
        title,
        column,
        rows: rows.into_iter().map(|(k, v)| (k, *v)).collect(),
        rest,
        short_by: tally.short_by,
        blocked_only: false,
    }
}

/// The tables of `r`, in the order they are shown.
pub(super) fn sections(r: &Report) -> Vec<Section<'_>> {
    let top = r.top;
    let mut urls = section(
        &r.blocked_urls,
        top,
        ("blocked_urls", "Most blocked URLs", "url"),
    );
    urls.blocked_only = true;
    vec![
        section(&r.decisions, top, ("decisions", "Decisions", "decision")),
        section(&r.origins, top, ("origins", "Origins", "origin")),
        section(&r.rules, top, ("rules", "Rules", "rule")),
        section(&r.agents, top, ("agents", "Agents", "agent")),
        section(&r.clients, top, ("clients", "Clients", "client address")),
        section(&r.users, top, ("users", "Proxy users", "user")),
        urls,
    ]
}

/// The origins whose lines carry `robots_sha256`, most lines first.
pub(super) fn robots(r: &Report) -> Vec<(&str, &Versions)> {
    r.robots.top(r.top).0
}

/// Writes `r` in `format`.
pub(crate) fn write(r: &Report, format: Format, out: &mut dyn Write) -> io::Result<()> {
    match format {
        Format::Text => text(r, out),
        Format::Csv => csv(r, out),
        Format::Json => json(r, out),
        Format::Html => super::html::write(r, out),
    }
}

/// A key for a terminal: control characters escaped.
fn printable(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_control() {
                format!("\\u{{{:x}}}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The period counted, and the filter, as one line each.
pub(super) fn period(r: &Report) -> Vec<String> {
    let mut lines = Vec::new();
    if let (Some(first), Some(last)) = (&r.first, &r.last) {
        lines.push(format!(
            "period: {} to {}",
            printable(first),
            printable(last)
        ));
    }
    match (&r.since, &r.until) {
        (None, None) => {}
        (since, until) => lines.push(format!(
            "filter: since {}, until {} (excluded)",
            since.as_deref().unwrap_or("the start"),
            until.as_deref().unwrap_or("the end")
        )),
    }
    lines
}

pub(super) fn summary(r: &Report) -> [String; 2] {
    [
        format!(
            "files: {}, lines read: {} (checkpoints: {}, unreadable: {}, outside the period: {})",
            r.files, r.lines, r.checkpoints, r.unreadable, r.outside
        ),
        format!(
            "requests: {}, blocked: {}",
            r.total.requests, r.total.blocked
        ),
    ]
}

/// The note under a table that folded keys.
pub(super) fn folded_note(short_by: u64) -> Option<String> {
    (short_by > 0).then(|| {
        format!(
            "more than {TABLE_CAP} distinct values: the least counted were folded into \
             (others), and a count may be short by up to {short_by}"
        )
    })
}

fn text(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "robots-proxy audit report")?;
    for line in summary(r).iter().chain(&period(r)) {
        writeln!(out, "{line}")?;
    }
    let days: Vec<(&str, Counts)> = r.days.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    text_table(out, "Per day", "day", &days, Counts::default(), false)?;
    for s in sections(r) {
        let title = format!("{} (top {})", s.title, r.top);
        text_table(out, &title, s.column, &s.rows, s.rest, s.blocked_only)?;
        if let Some(note) = folded_note(s.short_by) {
            writeln!(out, "  {note}")?;
        }
    }
    let robots = robots(r);
    if !robots.is_empty() {
        writeln!(out, "\nrobots.txt versions (robots_sha256) per origin")?;
        for (origin, v) in robots {
            writeln!(
                out,
                "  {} ({} requests, {} blocked)",
                printable(origin),
                v.counts.requests,
                v.counts.blocked
            )?;
            for (sha, version) in &v.versions {
                writeln!(
                    out,
                    "    {} {} requests, {} blocked, {} to {}",
                    printable(sha),
                    version.counts.requests,
                    version.counts.blocked,
                    printable(&version.first),
                    printable(&version.last)
                )?;
            }
            if v.more > 0 {
                writeln!(out, "    and {} lines under more versions", v.more)?;
            }
        }
    }
    Ok(())
}

fn text_table(
    out: &mut dyn Write,
    title: &str,
    column: &str,
    rows: &[(&str, Counts)],
    rest: Counts,
    blocked_only: bool,
) -> io::Result<()> {
    let others = "(others)";
    let keys: Vec<String> = rows.iter().map(|(k, _)| printable(k)).collect();
    let width = keys
        .iter()
        .map(|k| k.chars().count())
        .chain([column.len(), others.len()])
        .max()
        .unwrap_or(0);
    writeln!(out, "\n{title}")?;
    let line = |out: &mut dyn Write, key: &str, a: &str, b: &str| {
        let pad = width.saturating_sub(key.chars().count());
        if blocked_only {
            writeln!(out, "  {key}{:pad$} {b:>10}", "")
        } else {
            writeln!(out, "  {key}{:pad$} {a:>10} {b:>10}", "")
        }
    };
    line(out, column, "requests", "blocked")?;
    if rows.is_empty() {
        writeln!(out, "  (none)")?;
    }
    for (key, (_, c)) in keys.iter().zip(rows) {
        line(out, key, &c.requests.to_string(), &c.blocked.to_string())?;
    }
    if rest != Counts::default() {
        line(
            out,
            others,
            &rest.requests.to_string(),
            &rest.blocked.to_string(),
        )?;
    }
    Ok(())
}

/// A CSV field, quoted when it must be (RFC 4180). A field a spreadsheet
/// would run as a formula (`=`, `+`, `-`, `@` first: a user name or URL
/// from the log is the client's own text) gets a `'` in front.
fn field(text: &str) -> String {
    let text: std::borrow::Cow<'_, str> = if text.starts_with(['=', '+', '-', '@']) {
        format!("'{text}").into()
    } else {
        text.into()
    };
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.into_owned()
    }
}

fn csv(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "section,key,detail,requests,blocked,first,last")?;
    let mut row = |section: &str, key: &str, detail: &str, c: Counts, first: &str, last: &str| {
        writeln!(
            out,
            "{section},{},{},{},{},{},{}",
            field(key),
            field(detail),
            c.requests,
            c.blocked,
            field(first),
            field(last)
        )
    };
    let (first, last) = (
        r.first.as_deref().unwrap_or(""),
        r.last.as_deref().unwrap_or(""),
    );
    row("total", "", "", r.total, first, last)?;
    for (day, c) in &r.days {
        row("day", day, "", *c, "", "")?;
    }
    for s in sections(r) {
        for (key, c) in &s.rows {
            row(s.name, key, "", *c, "", "")?;
        }
        if s.rest != Counts::default() {
            row(s.name, "(others)", "", s.rest, "", "")?;
        }
    }
    for (origin, v) in robots(r) {
        for (sha, version) in &v.versions {
            row(
                "robots_sha256",
                origin,
                sha,
                version.counts,
                &version.first,
                &version.last,
            )?;
        }
    }
    Ok(())
}

fn json(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    use serde_json::{Value, json};
    let counts = |c: Counts| json!({"requests": c.requests, "blocked": c.blocked});
    let mut doc = json!({
        "files": r.files,
        "lines": r.lines,
        "checkpoints": r.checkpoints,
        "unreadable": r.unreadable,
        "outside": r.outside,
        "since": r.since,
        "until": r.until,
        "first": r.first,
        "last": r.last,
        "requests": r.total.requests,
        "blocked": r.total.blocked,
        "days": r.days.iter().map(|(day, c)| {
            json!({"day": day, "requests": c.requests, "blocked": c.blocked})
        }).collect::<Vec<_>>(),
    });
    for s in sections(r) {
        let rows: Vec<Value> = s
            .rows
            .iter()
            .map(|(key, c)| json!({"key": key, "requests": c.requests, "blocked": c.blocked}))
            .collect();
        doc[s.name] = json!({"rows": rows, "others": counts(s.rest), "short_by": s.short_by});
    }
    doc["robots_versions"] = robots(r)
        .into_iter()
        .map(|(origin, v)| {
            json!({
                "origin": origin,
                "requests": v.counts.requests,
                "blocked": v.counts.blocked,
                "versions": v.versions.iter().map(|(sha, version)| json!({
                    "sha256": sha,
                    "requests": version.counts.requests,
                    "blocked": version.counts.blocked,
                    "first": version.first,
                    "last": version.last,
                })).collect::<Vec<_>>(),
                "more": v.more,
            })
        })
        .collect();
    serde_json::to_writer_pretty(&mut *out, &doc).map_err(io::Error::other)?;
    writeln!(out)
}

#[cfg(test)]
mod csv_tests {
    use super::field;

    #[test]
    fn fields_a_spreadsheet_would_run_are_defused() {
        assert_eq!(field("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(field("@user"), "'@user");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("plain"), "plain");
    }
}
