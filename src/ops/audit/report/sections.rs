//! What every format of a report shows: its tables in order, the summary
//! and period lines, and the note under a table that folded keys.

use super::tally::{Counts, Tally};
use super::{Report, TABLE_CAP, Versions};

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

/// A key for a terminal: control characters escaped.
pub(super) fn printable(key: &str) -> String {
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

pub(super) fn summary(r: &Report) -> Vec<String> {
    let mut lines = vec![
        format!(
            "files: {}, lines read: {} (checkpoints: {}, unreadable: {}, outside the period: {})",
            r.files, r.lines, r.checkpoints, r.unreadable, r.outside
        ),
        format!(
            "requests: {}, blocked: {}",
            r.total.requests, r.total.blocked
        ),
    ];
    if r.admin_total > 0 {
        lines.push(format!("admin actions: {}", r.admin_total));
    }
    lines
}

/// The note above the admin actions when older ones were left out.
pub(super) fn admin_note(r: &Report) -> Option<String> {
    let listed = r.admin.len() as u64;
    (r.admin_total > listed)
        .then(|| format!("the latest {listed} of {} admin actions", r.admin_total))
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
