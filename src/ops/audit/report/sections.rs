//! What every format of a report shows: its tables in order, the summary
//! and period lines, and the note under a table that folded keys.

use std::borrow::Cow;

use super::tally::{Counts, Tally};
use super::{Report, TABLE_CAP, Versions};

/// Separates a rule key's origin, robots.txt line number and rule text.
const RULE_SEP: char = '\0';

/// The key a rule is counted under: its origin, line number (empty when
/// unknown) and text, kept apart so each can be its own column.
/// Written into `key`, which is cleared first.
pub(super) fn rule_key(key: &mut String, origin: &str, line: Option<u64>, rule: &str) {
    use std::fmt::Write as _;
    let push = |key: &mut String, s: &str| {
        if s.contains(RULE_SEP) {
            key.push_str(&s.replace(RULE_SEP, "\u{fffd}"));
        } else {
            key.push_str(s);
        }
    };
    key.clear();
    push(key, origin);
    key.push(RULE_SEP);
    if let Some(n) = line {
        let _ = write!(key, "{n}");
    }
    key.push(RULE_SEP);
    push(key, rule);
}

/// A rule key's origin, line number (empty when unknown) and text.
pub(super) fn rule_parts(key: &str) -> (&str, &str, &str) {
    let mut parts = key.splitn(3, RULE_SEP);
    let origin = parts.next().unwrap_or("");
    let line = parts.next().unwrap_or("");
    let rule = parts.next().unwrap_or("");
    (origin, line, rule)
}

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
    /// Its keys are rule keys ([`rule_key`]).
    pub(super) rules: bool,
}

impl Section<'_> {
    /// A key as one string: a rule as `origin line N: text`.
    pub(super) fn label<'k>(&self, key: &'k str) -> Cow<'k, str> {
        if !self.rules {
            return key.into();
        }
        match rule_parts(key) {
            (origin, "", rule) => format!("{origin} {rule}").into(),
            (origin, line, rule) => format!("{origin} line {line}: {rule}").into(),
        }
    }

    /// The rows with their keys as [`Section::label`] gives them.
    pub(super) fn labelled(&self) -> Vec<(Cow<'_, str>, Counts)> {
        self.rows.iter().map(|(k, c)| (self.label(k), *c)).collect()
    }
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
        rules: false,
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
    let mut rules = section(&r.rules, top, ("rules", "Rules", "rule"));
    rules.rules = true;
    let mut all = vec![section(
        &r.decisions,
        top,
        ("decisions", "Decisions", "decision"),
    )];
    if r.several_nodes {
        all.push(section(&r.nodes, top, ("nodes", "Nodes", "node")));
    }
    all.extend([
        section(&r.origins, top, ("origins", "Origins", "origin")),
        rules,
        section(&r.agents, top, ("agents", "Agents", "agent")),
        section(&r.clients, top, ("clients", "Clients", "client address")),
        section(&r.users, top, ("users", "Proxy users", "user")),
        urls,
    ]);
    if r.show_usage {
        // Requests: refused and annotated; blocked: refused.
        all.push(section(
            &r.usage,
            top,
            (
                "usage",
                "Usage signals (requests refused or annotated; blocked = refused)",
                "origin protocol purpose",
            ),
        ));
    }
    all
}

/// The origins whose lines carry `robots_sha256`, most lines first.
pub(super) fn robots(r: &Report) -> Vec<(&str, &Versions)> {
    r.robots.top(r.top).0
}

/// Text from the log for a terminal, a spreadsheet or a page: control
/// characters (ESC, BEL, CR, …) and the bidirectional controls that make
/// text read in another order than it is stored (U+202A–U+202E,
/// U+2066–U+2069, U+200E, U+200F, U+061C) written as `\u{…}`.
pub(super) fn printable(key: &str) -> Cow<'_, str> {
    if !key.chars().any(hidden) {
        return key.into();
    }
    key.chars()
        .map(|c| {
            if hidden(c) {
                format!("\\u{{{:x}}}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

/// A character [`printable`] escapes.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
        )
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
    if r.removed_total > 0 {
        lines.push(format!(
            "archived robots.txt texts removed (evidence_removed lines): {}",
            r.removed_total
        ));
    }
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

/// The note above the removed evidence when older lines were left out.
pub(super) fn removed_note(r: &Report) -> Option<String> {
    let listed = r.removed.len() as u64;
    (r.removed_total > listed).then(|| {
        format!(
            "the latest {listed} of {} evidence_removed lines",
            r.removed_total
        )
    })
}
