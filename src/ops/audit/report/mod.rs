//! `robots-proxy audit report`: sums audit files up (plain or gzip, one
//! line at a time) into requests and blocks per day, by decision, origin,
//! rule, agent, client address and proxy user, the most blocked URLs, and
//! the robots.txt versions (`robots_sha256`) seen per origin when lines
//! carry them. Every table is a [`Tally`]: bounded memory whatever the
//! number of lines. Checkpoint lines are skipped; a line that is not JSON
//! is counted as unreadable and skipped.

mod html;
pub(crate) mod payments;
mod pipeline;
mod render;
mod scan;
mod sections;
pub(crate) mod tally;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;

use serde::Deserialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::input::Lines;
use tally::{Counts, Tallied, Tally};

/// Keys kept per table before the least counted are folded (see
/// [`tally`]): at most twice this many are held.
pub(crate) const TABLE_CAP: usize = 10_000;

/// Threads reading the lines' fields, at most (the thread that folds is
/// the limit past a few).
const MAX_WORKERS: usize = 4;

/// robots.txt versions kept per origin.
const VERSIONS_PER_ORIGIN: usize = 16;

/// How the report is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Text,
    Csv,
    Json,
    Html,
}

/// Writes `r` in `format`.
pub(crate) fn write(r: &Report, format: Format, out: &mut dyn Write) -> io::Result<()> {
    match format {
        Format::Text => render::text(r, out),
        Format::Csv => render::csv(r, out),
        Format::Json => render::json(r, out),
        Format::Html => html::write(r, out),
    }
}

/// Which lines count, and how many rows each table shows.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// Lines at or after this time.
    pub(crate) since: Option<OffsetDateTime>,
    /// Lines before this time.
    pub(crate) until: Option<OffsetDateTime>,
    /// Rows per table.
    pub(crate) top: usize,
    /// Show the usage table (`--usage`).
    pub(crate) usage: bool,
}

/// A time for `--since` or `--until`: RFC 3339, or a date (`2026-11-22`,
/// UTC), which for `until` means the end of that day.
pub(crate) fn parse_time(text: &str, end_of_day: bool) -> Result<OffsetDateTime, String> {
    if let Ok(t) = OffsetDateTime::parse(text, &Rfc3339) {
        return Ok(t);
    }
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let date = time::Date::parse(text, &format).map_err(|_| {
        format!(
            "{text:?} is neither an RFC 3339 time (2026-11-22T08:00:00Z) nor a date (2026-11-22)"
        )
    })?;
    let date = if end_of_day {
        date.next_day()
            .ok_or_else(|| format!("{text:?} is the last day there is"))?
    } else {
        date
    };
    Ok(date.midnight().assume_utc())
}

/// A robots.txt version seen at an origin.
#[derive(Debug, Default)]
pub(crate) struct Version {
    pub(crate) counts: Counts,
    pub(crate) first: String,
    pub(crate) last: String,
}

impl Tallied for Version {
    fn counts(&self) -> Counts {
        self.counts
    }
}

/// The figures of a report.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) files: usize,
    /// Lines read, of every kind.
    pub(crate) lines: u64,
    pub(crate) checkpoints: u64,
    /// Lines that are not a JSON object.
    pub(crate) unreadable: u64,
    /// Lines left out by `--since`/`--until` (or without a time, when
    /// either is given).
    pub(crate) outside: u64,
    pub(crate) total: Counts,
    /// The earliest and latest `time` counted.
    pub(crate) first: Option<String>,
    pub(crate) last: Option<String>,
    pub(crate) since: Option<String>,
    pub(crate) until: Option<String>,
    pub(crate) top: usize,
    pub(crate) days: BTreeMap<String, Counts>,
    pub(crate) decisions: Tally<Counts>,
    pub(crate) origins: Tally<Counts>,
    pub(crate) rules: Tally<Counts>,
    pub(crate) agents: Tally<Counts>,
    pub(crate) clients: Tally<Counts>,
    pub(crate) users: Tally<Counts>,
    pub(crate) blocked_urls: Tally<Counts>,
    /// Per origin, signal protocol and purpose (`usage_evidence`): lines
    /// refused (blocked) and annotated; shown with `--usage`.
    pub(crate) usage: Tally<Counts>,
    pub(crate) show_usage: bool,
    /// Per fleet node (`node`, `-` for lines without one).
    pub(crate) nodes: Tally<Counts>,
    /// Lines of more than one node (or with and without one): the
    /// per-node table is shown.
    pub(crate) several_nodes: bool,
    /// Per origin: robots.txt SHA-256 → lines judged under it.
    pub(crate) robots: Tally<Versions>,
    /// Admin actions (purges, reloads, failed admin logins), in the order
    /// read; the latest [`ADMIN_CAP`] are kept.
    pub(crate) admin: std::collections::VecDeque<AdminAction>,
    /// Admin action lines read in all.
    pub(crate) admin_total: u64,
    /// Archived robots.txt texts gone (`evidence_removed` lines), in the
    /// order read; the latest [`ADMIN_CAP`] are kept.
    pub(crate) removed: std::collections::VecDeque<RemovedEvidence>,
    /// `evidence_removed` lines read in all.
    pub(crate) removed_total: u64,
    /// The node of the first request line counted.
    first_node: Option<String>,
    /// Room for a rule's key ([`sections::rule_key`]).
    key: String,
}

/// Admin actions a report lists (the latest).
pub(crate) const ADMIN_CAP: usize = 1000;

/// One `evidence_removed` line: an archived text that lines name is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemovedEvidence {
    pub(crate) time: String,
    pub(crate) node: String,
    pub(crate) sha256: String,
    pub(crate) reason: String,
}

/// One admin action's line, as a report lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AdminAction {
    pub(crate) time: String,
    pub(crate) node: String,
    pub(crate) action: String,
    pub(crate) by: String,
    /// Target, scope, count, keys changed and outcome, as one text.
    pub(crate) detail: String,
}

/// The robots.txt versions of one origin.
#[derive(Debug, Default)]
pub(crate) struct Versions {
    pub(crate) counts: Counts,
    pub(crate) versions: BTreeMap<String, Version>,
    /// Lines under versions past [`VERSIONS_PER_ORIGIN`].
    pub(crate) more: u64,
}

impl Tallied for Versions {
    fn counts(&self) -> Counts {
        self.counts
    }
}

/// The fields of an audit line a report reads.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Entry<'a> {
    #[serde(rename = "type", borrow, default, deserialize_with = "text")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    time: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    client: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    user: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    url: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    agent: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    decision: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    rule: Option<Cow<'a, str>>,
    #[serde(default)]
    rule_line: Option<u64>,
    #[serde(borrow, default, deserialize_with = "text")]
    robots_sha256: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    node: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    action: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    by: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    target: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    scope: Option<Cow<'a, str>>,
    #[serde(default)]
    count: Option<u64>,
    #[serde(default)]
    changed: Option<Vec<String>>,
    #[serde(borrow, default, deserialize_with = "text")]
    outcome: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text")]
    reason: Option<Cow<'a, str>>,
    /// `purpose=protocol: document element`, one per signal.
    #[serde(borrow, default)]
    usage_evidence: Vec<Cow<'a, str>>,
}

/// A string field, borrowed from the line unless it has escapes (serde
/// borrows a `Cow` only when it is not within an `Option`).
fn text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    #[derive(Deserialize)]
    struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(Option::<Text<'de>>::deserialize(d)?.map(|t| t.0))
}

/// A file that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub(crate) struct ReportError {
    pub(crate) path: PathBuf,
    pub(crate) source: io::Error,
}

/// Reads `files` into a report, reading on other threads when the
/// machine has more than one core.
pub(crate) fn report(files: &[PathBuf], opts: &Options) -> Result<Report, ReportError> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // One thread reads, one folds; the cores left read the lines' fields.
    let workers = cores.saturating_sub(2).min(MAX_WORKERS);
    report_with(files, opts, (cores > 1).then_some(workers))
}

/// Reads `files` into a report: on this thread, or if `workers` is given
/// on a reading thread with that many threads reading the lines' fields
/// (see [`pipeline`]); the same report either way.
fn report_with(
    files: &[PathBuf],
    opts: &Options,
    workers: Option<usize>,
) -> Result<Report, ReportError> {
    let rfc3339 = |t: OffsetDateTime| t.format(&Rfc3339).unwrap_or_else(|_| t.to_string());
    let mut r = Report {
        files: 0,
        lines: 0,
        checkpoints: 0,
        unreadable: 0,
        outside: 0,
        total: Counts::default(),
        first: None,
        last: None,
        since: opts.since.map(rfc3339),
        until: opts.until.map(rfc3339),
        top: opts.top,
        days: BTreeMap::new(),
        decisions: Tally::new(TABLE_CAP),
        origins: Tally::new(TABLE_CAP),
        rules: Tally::new(TABLE_CAP),
        agents: Tally::new(TABLE_CAP),
        clients: Tally::new(TABLE_CAP),
        users: Tally::new(TABLE_CAP),
        blocked_urls: Tally::new(TABLE_CAP),
        usage: Tally::new(TABLE_CAP),
        show_usage: opts.usage,
        nodes: Tally::new(TABLE_CAP),
        several_nodes: false,
        robots: Tally::new(TABLE_CAP),
        admin: std::collections::VecDeque::new(),
        admin_total: 0,
        removed: std::collections::VecDeque::new(),
        removed_total: 0,
        first_node: None,
        key: String::new(),
    };
    if let Some(workers) = workers {
        let read = pipeline::read(files, workers, |got| match got {
            pipeline::Got::Block(block) => {
                for line in block.lines() {
                    match line {
                        Ok(entry) => {
                            r.lines += 1;
                            r.count(&entry, opts);
                        }
                        Err(bytes) => r.parsed(bytes, opts),
                    }
                }
            }
            pipeline::Got::FileDone => r.files += 1,
        });
        return match read {
            Ok(()) => Ok(r),
            Err((path, source)) => Err(ReportError { path, source }),
        };
    }
    for path in files {
        let io = |source| ReportError {
            path: path.clone(),
            source,
        };
        let mut lines = Lines::open(path).map_err(io)?;
        while let Some(line) = lines.next_line().map_err(io)? {
            r.line(line.bytes, opts);
        }
        r.files += 1;
    }
    Ok(r)
}

impl Report {
    /// Counts one line.
    fn line(&mut self, bytes: &[u8], opts: &Options) {
        let text = std::str::from_utf8(bytes).ok();
        match text.and_then(|t| scan::Fields::of(t).and_then(|f| f.entry(t))) {
            Some(entry) => {
                self.lines += 1;
                self.count(&entry, opts);
            }
            None => self.parsed(bytes, opts),
        }
    }

    /// Counts one line the scanner left to the parser.
    fn parsed(&mut self, bytes: &[u8], opts: &Options) {
        self.lines += 1;
        match serde_json::from_slice::<Entry<'_>>(bytes) {
            Ok(entry) => self.count(&entry, opts),
            Err(_) => self.unreadable += 1,
        }
    }

    /// Lists an admin action's line.
    fn admin_action(&mut self, e: &Entry<'_>, time: &str) {
        self.admin_total += 1;
        let detail = super::AdminDetail {
            target: e.target.as_deref(),
            scope: e.scope.as_deref(),
            count: e.count,
            changed: e.changed.as_deref(),
            outcome: e.outcome.as_deref(),
        }
        .text();
        if self.admin.len() == ADMIN_CAP {
            self.admin.pop_front();
        }
        self.admin.push_back(AdminAction {
            time: time.to_owned(),
            node: e.node.as_deref().unwrap_or("").to_owned(),
            action: e.action.as_deref().unwrap_or("-").to_owned(),
            by: e.by.as_deref().unwrap_or("-").to_owned(),
            detail,
        });
    }

    fn count(&mut self, e: &Entry<'_>, opts: &Options) {
        if e.kind.as_deref() == Some("checkpoint") {
            self.checkpoints += 1;
            return;
        }
        // An origin's signal (429, 503), not a request.
        if e.kind.as_deref() == Some("politeness") {
            return;
        }
        let time = e.time.as_deref().unwrap_or("");
        if (opts.since.is_some() || opts.until.is_some()) && !within(time, opts) {
            self.outside += 1;
            return;
        }
        if e.kind.as_deref() == Some("admin") {
            self.admin_action(e, time);
            return;
        }
        if e.kind.as_deref() == Some("evidence_removed") {
            self.removed_total += 1;
            if self.removed.len() == ADMIN_CAP {
                self.removed.pop_front();
            }
            self.removed.push_back(RemovedEvidence {
                time: time.to_owned(),
                node: e.node.as_deref().unwrap_or("").to_owned(),
                sha256: e.robots_sha256.as_deref().unwrap_or("-").to_owned(),
                reason: e.reason.as_deref().unwrap_or("-").to_owned(),
            });
            return;
        }
        let decision = e.decision.as_deref().unwrap_or("-");
        let blocked = !matches!(decision, "allowed" | "tunnelled");
        let url = e.url.as_deref().unwrap_or("-");
        let origin = origin(url);
        self.total.add(blocked);
        if !time.is_empty() {
            if self.first.as_deref().is_none_or(|f| time < f) {
                self.first = Some(time.to_owned());
            }
            if self.last.as_deref().is_none_or(|l| time > l) {
                self.last = Some(time.to_owned());
            }
        }
        let add = |c: &mut Counts| c.add(blocked);
        match self.days.get_mut(day(time)) {
            Some(c) => c.add(blocked),
            None => {
                let mut c = Counts::default();
                c.add(blocked);
                self.days.insert(day(time).to_owned(), c);
            }
        }
        self.decisions.add(decision, add);
        self.origins.add(origin, add);
        if let Some(rule) = &e.rule {
            sections::rule_key(&mut self.key, origin, e.rule_line, rule);
            self.rules.add(&self.key, add);
        }
        let node = e.node.as_deref().unwrap_or("-");
        if !self.several_nodes {
            match &self.first_node {
                None => self.first_node = Some(node.to_owned()),
                Some(first) => self.several_nodes = first != node,
            }
        }
        self.nodes.add(node, add);
        self.agents.add(e.agent.as_deref().unwrap_or("-"), add);
        self.clients
            .add(address(e.client.as_deref().unwrap_or("-")), add);
        self.users.add(e.user.as_deref().unwrap_or("-"), add);
        if blocked {
            self.blocked_urls.add(url, add);
        }
        for evidence in &e.usage_evidence {
            // `train-ai=tdmrep.json: …` → `origin tdmrep.json train-ai`.
            let head = evidence
                .split_once(": ")
                .map_or(evidence.as_ref(), |(h, _)| h);
            let (purpose, protocol) = head.split_once('=').unwrap_or((head, "-"));
            self.usage
                .add(&format!("{origin} {protocol} {purpose}"), add);
        }
        if let Some(sha) = &e.robots_sha256 {
            self.robots.add(origin, |o| {
                o.counts.add(blocked);
                if let Some(v) = o.versions.get_mut(sha.as_ref()) {
                    v.counts.add(blocked);
                    v.last.clear();
                    v.last.push_str(time);
                } else if o.versions.len() < VERSIONS_PER_ORIGIN {
                    let mut v = Version {
                        first: time.to_owned(),
                        last: time.to_owned(),
                        ..Version::default()
                    };
                    v.counts.add(blocked);
                    o.versions.insert(sha.to_string(), v);
                } else {
                    o.more += 1;
                }
            });
        }
    }
}

/// Whether a line's `time` is within `--since` and `--until`.
fn within(time: &str, opts: &Options) -> bool {
    let Ok(t) = OffsetDateTime::parse(time, &Rfc3339) else {
        return false;
    };
    opts.since.is_none_or(|s| t >= s) && opts.until.is_none_or(|u| t < u)
}

/// The UTC day of an RFC 3339 time the proxy wrote (`…Z`), else `unknown`.
fn day(time: &str) -> &str {
    let b = time.as_bytes();
    let date = b.len() >= 10
        && b[..10].iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        });
    if date && time.ends_with('Z') {
        &time[..10]
    } else {
        "unknown"
    }
}

/// `scheme://host[:port]` of a URL.
fn origin(url: &str) -> &str {
    let Some(scheme_end) = url.find("://") else {
        return url;
    };
    let rest = &url[scheme_end + 3..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    &url[..scheme_end + 3 + end]
}

/// A client address without its port (`127.0.0.1:4711` → `127.0.0.1`,
/// `[::1]:4711` → `[::1]`).
fn address(client: &str) -> &str {
    match client.rsplit_once(':') {
        Some((ip, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            if ip.starts_with('[') || !ip.contains(':') {
                ip
            } else {
                client
            }
        }
        _ => client,
    }
}

/// `text` with control characters and bidi overrides escaped, as every
/// report output shows client-chosen text.
pub(crate) fn printable_text(text: &str) -> std::borrow::Cow<'_, str> {
    sections::printable(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_days_and_addresses_are_cut_from_their_fields() {
        assert_eq!(origin("http://a.example:8080/x?y"), "http://a.example:8080");
        assert_eq!(origin("https://b.example?q"), "https://b.example");
        assert_eq!(origin("odd"), "odd");
        assert_eq!(day("2026-11-22T01:13:45.336Z"), "2026-11-22");
        assert_eq!(day("2026-11-22T01:13:45+02:00"), "unknown");
        assert_eq!(day(""), "unknown");
        assert_eq!(address("127.0.0.1:47052"), "127.0.0.1");
        assert_eq!(address("[::1]:47052"), "[::1]");
        assert_eq!(address("::1"), "::1");
    }

    /// Lines of every kind, with more distinct URLs and origins than a
    /// table keeps, so its tables fold.
    fn varied_log(from: usize, to: usize) -> String {
        let mut text = String::new();
        for i in from..to {
            let line = match i % 997 {
                0 => "{\"type\":\"checkpoint\",\"lines\":1}".to_owned(),
                1 => "not json".to_owned(),
                2 => format!(
                    "{{\"type\":\"admin\",\"time\":\"2026-11-2{}T00:00:{:02}Z\",\"action\":\"purge\",\"by\":\"u{i}\",\"count\":{i}}}",
                    i % 7,
                    i % 60
                ),
                3 => format!(
                    "{{\"time\":\"2026-11-0{}T00:00:00Z\",\"url\":\"https://o{i}.example/\",\"agent\":\"a\\u00e9{i}\",\"decision\":\"blocked\",\"usage_evidence\":[\"train-ai=tdmrep.json: x\"]}}",
                    1 + i % 9
                ),
                4 => format!(
                    "{{\"time\":\"2026-11-02T00:00:00Z\",\"url\":\"https://o{i}.example/\",\"agent\":\"a\\u00e9\",\"decision\":\"blocked\",\"node\":\"n\\\"\"}}"
                ),
                _ => format!(
                    "{{\"time\":\"2026-11-{:02}T{:02}:00:00Z\",\"client\":\"10.0.{}.{}:{i}\",\"user\":\"u{}\",\"url\":\"https://o{}.example/p/{i}\",\"agent\":\"a{}\",\"decision\":\"{}\",\"rule\":\"Disallow: /p\",\"rule_line\":{},\"robots_sha256\":\"{:064x}\",\"node\":\"n{}\"}}",
                    1 + (i * 7) % 28,
                    i % 24,
                    i % 13,
                    i % 251,
                    i % 25,
                    (i * 31) % 12_000,
                    i % 40,
                    if i % 5 == 0 { "allowed" } else { "blocked" },
                    i % 9,
                    i % 23,
                    i % 3
                ),
            };
            text.push_str(&line);
            text.push('\n');
        }
        text
    }

    #[test]
    fn a_report_read_on_a_second_thread_is_the_same_byte_for_byte() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let rotated = dir.path().join("audit.jsonl.1");
        let mut gz = flate2::write::GzEncoder::new(
            std::fs::File::create(&rotated).expect("create"),
            flate2::Compression::fast(),
        );
        gz.write_all(varied_log(0, 40_000).as_bytes())
            .expect("compress");
        gz.finish().expect("finish");
        let current = dir.path().join("audit.jsonl");
        let mut text = varied_log(40_000, 75_000);
        text.push_str("{\"time\":\"2026-11-30T00:00:00Z\",\"url\":\"torn");
        std::fs::write(&current, text).expect("write");
        let files = [rotated, current];
        let opts = Options {
            since: None,
            until: None,
            top: 50,
            usage: true,
        };
        let render = |workers| {
            let r = report_with(&files, &opts, workers).expect("report");
            assert!(r.blocked_urls.short_by > 0, "tables fold");
            let mut out = Vec::new();
            for format in [Format::Text, Format::Csv, Format::Json, Format::Html] {
                write(&r, format, &mut out).expect("render");
            }
            (r.lines, r.files, r.unreadable, out)
        };
        let (lines, files_read, unreadable, one) = render(None);
        assert_eq!((lines, files_read), (75_001, 2));
        assert!(unreadable > 70);
        for workers in [0, 1, 3] {
            assert_eq!(
                render(Some(workers)),
                (lines, files_read, unreadable, one.clone()),
                "{workers} workers"
            );
        }

        let missing = dir.path().join("gone.jsonl");
        let with_missing = [files[0].clone(), missing.clone()];
        for workers in [None, Some(0), Some(2)] {
            let e = report_with(&with_missing, &opts, workers).expect_err("a file is missing");
            assert_eq!(e.path, missing);
        }
    }

    #[test]
    fn times_are_rfc3339_or_dates() {
        let t = |s, end| parse_time(s, end).map(|t| t.format(&Rfc3339).expect("format"));
        assert_eq!(
            t("2026-11-22", false).as_deref(),
            Ok("2026-11-22T00:00:00Z")
        );
        assert_eq!(t("2026-11-22", true).as_deref(), Ok("2026-11-23T00:00:00Z"));
        assert_eq!(
            t("2026-11-22T08:00:00+02:00", false).as_deref(),
            Ok("2026-11-22T08:00:00+02:00")
        );
        assert!(t("yesterday", false).is_err());
    }
}
