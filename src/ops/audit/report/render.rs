//! A report as text, CSV or JSON (HTML in [`super::html`]): the same
//! tables in each ([`super::sections`]).

use std::io::{self, Write};

use super::Report;
use super::sections::{
    admin_note, folded_note, period, printable, removed_note, robots, rule_parts, sections, summary,
};
use super::tally::Counts;

pub(super) fn text(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "robots-proxy audit report")?;
    for line in summary(r).iter().chain(&period(r)) {
        writeln!(out, "{line}")?;
    }
    let days: Vec<(&str, Counts)> = r.days.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    text_table(out, "Per day", "day", &days, Counts::default(), false)?;
    for s in sections(r) {
        let title = format!("{} (top {})", s.title, r.top);
        let labelled = s.labelled();
        let rows: Vec<(&str, Counts)> = labelled.iter().map(|(k, c)| (k.as_ref(), *c)).collect();
        text_table(out, &title, s.column, &rows, s.rest, s.blocked_only)?;
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
    if !r.removed.is_empty() {
        writeln!(out, "\nEvidence removed from the robots.txt archive")?;
        if let Some(note) = removed_note(r) {
            writeln!(out, "  {note}")?;
        }
        for e in &r.removed {
            let node = if e.node.is_empty() {
                String::new()
            } else {
                format!(" [{}]", printable(&e.node))
            };
            writeln!(
                out,
                "  {}{node} {}: {}",
                printable(&e.time),
                printable(&e.sha256),
                printable(&e.reason)
            )?;
        }
    }
    if !r.admin.is_empty() {
        writeln!(out, "\nAdmin actions")?;
        if let Some(note) = admin_note(r) {
            writeln!(out, "  {note}")?;
        }
        for a in &r.admin {
            let node = if a.node.is_empty() {
                String::new()
            } else {
                format!(" [{}]", printable(&a.node))
            };
            writeln!(
                out,
                "  {}{node} {} by {}: {}",
                printable(&a.time),
                printable(&a.action),
                printable(&a.by),
                printable(&a.detail)
            )?;
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
    let keys: Vec<_> = rows.iter().map(|(k, _)| printable(k)).collect();
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

/// A CSV field, quoted when it must be (RFC 4180). Control characters and
/// bidirectional controls are escaped ([`printable`]), and a field a
/// spreadsheet would run as a formula (`=`, `+`, `-`, `@` first, after any
/// leading whitespace: a user name or URL from the log is the client's own
/// text) gets a `'` in front; a lone `-` (no user) is written as it is.
pub(super) fn field(text: &str) -> String {
    let formula = text != "-"
        && text
            .trim_start_matches(|c: char| c.is_whitespace())
            .starts_with(['=', '+', '-', '@']);
    let text = printable(text);
    let text: std::borrow::Cow<'_, str> = if formula {
        format!("'{text}").into()
    } else {
        text
    };
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.into_owned()
    }
}

pub(super) fn csv(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "section,key,detail,requests,blocked,first,last,origin,line,rule"
    )?;
    let mut row = |section: &str, key: &str, detail: &str, c: Counts, first: &str, last: &str| {
        // A rule's origin, robots.txt line and text, each a column.
        let (origin, line, rule) = if section == "rules" {
            rule_parts(key)
        } else {
            ("", "", "")
        };
        writeln!(
            out,
            "{section},{},{},{},{},{},{},{},{},{}",
            field(&rule_label(section, key)),
            field(detail),
            c.requests,
            c.blocked,
            field(first),
            field(last),
            field(origin),
            field(line),
            field(rule)
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
    for a in &r.admin {
        let key = format!("{} by {}", a.action, a.by);
        let detail = if a.node.is_empty() {
            a.detail.clone()
        } else {
            format!("node {}; {}", a.node, a.detail)
        };
        row("admin", &key, &detail, Counts::default(), &a.time, &a.time)?;
    }
    for e in &r.removed {
        let detail = if e.node.is_empty() {
            e.reason.clone()
        } else {
            format!("node {}; {}", e.node, e.reason)
        };
        row(
            "evidence_removed",
            &e.sha256,
            &detail,
            Counts::default(),
            &e.time,
            &e.time,
        )?;
    }
    Ok(())
}

/// A CSV row's key: a rule as `origin line N: text`.
fn rule_label(section: &str, key: &str) -> String {
    if section != "rules" {
        return key.to_owned();
    }
    match rule_parts(key) {
        (origin, "", rule) => format!("{origin} {rule}"),
        (origin, line, rule) => format!("{origin} line {line}: {rule}"),
    }
}

pub(super) fn json(r: &Report, out: &mut dyn Write) -> io::Result<()> {
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
            .map(|(key, c)| {
                let mut row =
                    json!({"key": s.label(key), "requests": c.requests, "blocked": c.blocked});
                if s.rules {
                    let (origin, line, rule) = rule_parts(key);
                    row["origin"] = json!(origin);
                    row["line"] = json!(line.parse::<u64>().ok());
                    row["rule"] = json!(rule);
                }
                row
            })
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
    doc["admin_actions"] = json!({
        "total": r.admin_total,
        "latest": r.admin.iter().map(|a| json!({
            "time": a.time,
            "node": (!a.node.is_empty()).then_some(&a.node),
            "action": a.action,
            "by": a.by,
            "detail": a.detail,
        })).collect::<Vec<_>>(),
    });
    doc["evidence_removed"] = json!({
        "total": r.removed_total,
        "latest": r.removed.iter().map(|e| json!({
            "time": e.time,
            "node": (!e.node.is_empty()).then_some(&e.node),
            "robots_sha256": e.sha256,
            "reason": e.reason,
        })).collect::<Vec<_>>(),
    });
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
        // After leading whitespace too; the whitespace that is a control
        // character is escaped as well.
        assert_eq!(field(" =1+1"), "' =1+1");
        assert_eq!(field("\u{a0}@SUM(A1)"), "'\u{a0}@SUM(A1)");
        assert_eq!(field("\t=cmd|' /C calc'!A0"), "'\\u{9}=cmd|' /C calc'!A0");
        assert_eq!(field("\r\n-2+3"), "'\\u{d}\\u{a}-2+3");
        // No user is `-`, not `'-`; `-x` is still defused.
        assert_eq!(field("-"), "-");
        assert_eq!(field("-1"), "'-1");
        // Terminal escapes and bidirectional overrides are shown, not run.
        assert_eq!(field("\u{1b}]8;;x\u{7}a"), "\\u{1b}]8;;x\\u{7}a");
        assert_eq!(field("gpj.\u{202e}exe"), "gpj.\\u{202e}exe");
        assert_eq!(field("\u{2066}x\u{2069}"), "\\u{2066}x\\u{2069}");
    }
}
