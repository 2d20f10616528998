//! What the proxy decided, over time, for the admin listener's page:
//! counts per minute for the last hour and per hour for the last 14 days
//! (fixed rings of buckets, so memory does not grow with traffic), and the
//! origins, rules and clients blocked most (bounded top lists).
//!
//! The record phase feeds it with every judged request, whether or not the
//! request gets an audit line. At start it is rebuilt from the kept audit
//! files (the log and its rotations, `.gz` too), read as a stream in a
//! thread of its own: only lines of the last 14 days count, and the log is
//! read only up to its length at start, so a line this process writes is
//! never counted twice. Without `audit.log_all` the audit files hold only
//! the requests that were not forwarded as they were, so allowed requests
//! from before the start are missing from the charts.

use parking_lot::Mutex;
use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::Hash;
use std::io::{self, BufRead, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use crate::ops::audit::Record;

/// What a decision counts as on the charts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Forwarded (or answered from the response cache), a blind tunnel.
    Allowed = 0,
    /// Refused by a robots.txt rule or a usage preference.
    Disallowed = 1,
    /// Every other refusal: robots.txt unreachable, rate limited, a
    /// refused destination, a bad request, a robots.txt failing TLS.
    Other = 2,
}

/// The number of [`Kind`]s.
pub(crate) const KINDS: usize = 3;

impl Kind {
    /// The kind of an audit line's `decision`.
    pub(crate) fn of(decision: &str) -> Kind {
        match decision {
            "allowed" | "tunnelled" => Kind::Allowed,
            "disallowed" | "usage_disallowed" => Kind::Disallowed,
            _ => Kind::Other,
        }
    }
}

/// Buckets of the per-minute chart: the last hour.
pub(crate) const MINUTES: usize = 60;
/// Buckets of the per-hour chart: the last 14 days.
pub(crate) const HOURS: usize = 14 * 24;
/// How far back the rebuild from the audit files reads.
pub(crate) const WINDOW: Duration = Duration::from_secs(HOURS as u64 * 3600);
/// Keys each top list keeps; when full, the less counted half is dropped.
const TOP_KEYS: usize = 1024;
/// Longest key text kept (a rule can be a long line).
const MAX_KEY_BYTES: usize = 512;

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    /// Which period (seconds since the epoch / width) the counts are of.
    period: u64,
    counts: [u64; KINDS],
}

/// Counts per period of `width` seconds, the last `buckets.len()` periods.
struct Ring {
    width: u64,
    buckets: Box<[Bucket]>,
}

impl Ring {
    fn new(width: u64, len: usize) -> Ring {
        Ring {
            width,
            buckets: vec![Bucket::default(); len].into_boxed_slice(),
        }
    }

    fn len(&self) -> u64 {
        self.buckets.len() as u64
    }

    /// Counts `n` of `kind` at `at` (seconds since the epoch), if it lies
    /// within the ring's window ending at `now`. A time after `now` (a
    /// clock stepped back) counts in the current period.
    fn add(&mut self, now: u64, at: u64, kind: Kind, n: u64) {
        let current = now / self.width;
        let period = (at / self.width).min(current);
        if current - period >= self.len() {
            return;
        }
        let len = self.len();
        let bucket = &mut self.buckets[(period % len) as usize];
        if bucket.period != period {
            if bucket.period > period {
                return; // the slot already holds a newer period
            }
            *bucket = Bucket {
                period,
                counts: [0; KINDS],
            };
        }
        bucket.counts[kind as usize] += n;
    }

    /// The counts of the window ending at `now`, oldest period first.
    fn series(&self, now: u64) -> Vec<[u64; KINDS]> {
        let current = now / self.width;
        let len = self.len();
        (0..len)
            .map(|i| {
                let period = (current + i + 1).saturating_sub(len);
                let bucket = &self.buckets[(period % len) as usize];
                if bucket.period == period && current + i + 1 >= len {
                    bucket.counts
                } else {
                    [0; KINDS]
                }
            })
            .collect()
    }
}

/// Counts per key, at most [`TOP_KEYS`] keys: when full, the keys counted
/// least are forgotten (half of them at once, so the cost is amortised).
/// A key that stays among the most counted keeps an exact count.
struct Top<K> {
    counts: HashMap<K, u64>,
}

impl<K: Hash + Eq + Ord + Clone> Top<K> {
    fn new() -> Top<K> {
        Top {
            counts: HashMap::new(),
        }
    }

    fn add(&mut self, key: K) {
        if let Some(n) = self.counts.get_mut(&key) {
            *n += 1;
            return;
        }
        if self.counts.len() >= TOP_KEYS {
            let mut all: Vec<(K, u64)> = self.counts.drain().collect();
            all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            all.truncate(TOP_KEYS / 2);
            self.counts.extend(all);
        }
        self.counts.insert(key, 1);
    }

    /// The `k` most counted keys, most first (ties in key order).
    fn top(&self, k: usize) -> Vec<(K, u64)> {
        let mut all: Vec<(K, u64)> = self.counts.iter().map(|(k, n)| (k.clone(), *n)).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        all.truncate(k);
        all
    }
}

/// A rule that blocked requests: the robots.txt it is in, its line and
/// text, and the digest of the text (its name in the archive), if known.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct RuleKey {
    pub(crate) robots_url: Box<str>,
    pub(crate) line: u32,
    pub(crate) text: Box<str>,
    pub(crate) sha256: Option<Box<str>>,
}

/// A client that was refused: its address and proxy user, if any.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ClientKey {
    pub(crate) ip: Box<str>,
    pub(crate) user: Option<Box<str>>,
}

/// What one request that was not allowed says about who and why.
struct Refusal<'a> {
    robots_url: &'a str,
    client: &'a str,
    user: Option<&'a str>,
    rule_line: Option<u32>,
    rule: Option<&'a str>,
    sha256: Option<&'a str>,
}

struct Inner {
    minutes: Ring,
    hours: Ring,
    origins: Top<Box<str>>,
    rules: Top<RuleKey>,
    clients: Top<ClientKey>,
}

/// The decisions over time and the top refusals. Share one per process.
pub(crate) struct Activity {
    inner: Mutex<Inner>,
    /// Counts of the minute `fast_minute` not yet in `inner`: what
    /// [`Activity::count`] adds, with no lock (it runs for every allowed
    /// request). Moved into `inner` when the minute changes or a page is
    /// drawn.
    fast: [AtomicU64; KINDS],
    /// Minutes since the epoch `fast` counts.
    fast_minute: AtomicU64,
    /// True while the audit files are being read at start.
    rebuilding: AtomicBool,
    /// Audit lines counted from the files at start.
    replayed: AtomicU64,
    /// The latest admin actions, newest last (at most [`ADMIN_KEPT`]).
    admin: Mutex<std::collections::VecDeque<AdminSeen>>,
}

/// Admin actions the web view lists.
pub(crate) const ADMIN_KEPT: usize = 20;

/// An admin action as the web view lists it, from its audit line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AdminSeen {
    /// RFC 3339, as in the line.
    pub(crate) time: Box<str>,
    pub(crate) action: Box<str>,
    pub(crate) by: Box<str>,
    /// The target, count, keys changed or outcome, as one short text.
    pub(crate) detail: Box<str>,
}

impl AdminSeen {
    /// The listing of `event`.
    pub(crate) fn of(event: &crate::ops::audit::AdminEvent) -> AdminSeen {
        AdminSeen::from_parts(&event.time, event.action, &event.by, &event.detail())
    }

    fn from_parts(
        time: &str,
        action: &str,
        by: &str,
        detail: &crate::ops::audit::AdminDetail<'_>,
    ) -> AdminSeen {
        AdminSeen {
            time: bounded(time),
            action: bounded(action),
            by: bounded(by),
            detail: bounded(&detail.text()),
        }
    }
}

/// A copy of what [`Activity`] holds, for one page.
pub(crate) struct Snapshot {
    /// Seconds since the epoch the series end at.
    pub(crate) now: u64,
    /// The last [`MINUTES`] minutes, oldest first (the last is the current
    /// minute).
    pub(crate) minutes: Vec<[u64; KINDS]>,
    /// The last [`HOURS`] hours, oldest first.
    pub(crate) hours: Vec<[u64; KINDS]>,
    pub(crate) origins: Vec<(Box<str>, u64)>,
    pub(crate) rules: Vec<(RuleKey, u64)>,
    pub(crate) clients: Vec<(ClientKey, u64)>,
    pub(crate) rebuilding: bool,
    pub(crate) replayed: u64,
    /// The latest admin actions, newest first.
    pub(crate) admin: Vec<AdminSeen>,
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `s` cut to at most [`MAX_KEY_BYTES`], at a character boundary.
fn bounded(s: &str) -> Box<str> {
    if s.len() <= MAX_KEY_BYTES {
        return s.into();
    }
    let mut end = MAX_KEY_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].into()
}

/// The address of `ip:port` or `[v6]:port`, else the text as it is.
fn client_ip(client: &str) -> &str {
    match client.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => {
            host.trim_start_matches('[').trim_end_matches(']')
        }
        _ => client,
    }
}

impl Default for Activity {
    fn default() -> Self {
        Activity::new()
    }
}

impl Activity {
    pub(crate) fn new() -> Activity {
        Activity {
            inner: Mutex::new(Inner {
                minutes: Ring::new(60, MINUTES),
                hours: Ring::new(3600, HOURS),
                origins: Top::new(),
                rules: Top::new(),
                clients: Top::new(),
            }),
            fast: [const { AtomicU64::new(0) }; KINDS],
            fast_minute: AtomicU64::new(0),
            rebuilding: AtomicBool::new(false),
            replayed: AtomicU64::new(0),
            admin: Mutex::new(std::collections::VecDeque::with_capacity(ADMIN_KEPT)),
        }
    }

    /// Lists an admin action (its audit line was written).
    pub(crate) fn admin(&self, seen: AdminSeen) {
        let mut admin = self.admin.lock();
        if admin.len() == ADMIN_KEPT {
            admin.pop_front();
        }
        admin.push_back(seen);
    }

    /// Counts a decision that got no audit line (an allowed request
    /// without `audit.log_all`).
    pub(crate) fn count(&self, decision: &str) {
        let kind = Kind::of(decision);
        let now = secs(SystemTime::now());
        let minute = now / 60;
        if self.fast_minute.load(Ordering::Relaxed) == minute {
            // A count racing a minute's change may land in the next
            // minute; none is lost.
            self.fast[kind as usize].fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut inner = self.inner.lock();
        self.flush(&mut inner, now);
        self.fast_minute.store(minute, Ordering::Relaxed);
        inner.minutes.add(now, now, kind, 1);
        inner.hours.add(now, now, kind, 1);
    }

    /// Moves the lock-free counts into the rings.
    fn flush(&self, inner: &mut Inner, now: u64) {
        let at = self.fast_minute.load(Ordering::Relaxed) * 60;
        for (i, kind) in [Kind::Allowed, Kind::Disallowed, Kind::Other]
            .into_iter()
            .enumerate()
        {
            let n = self.fast[i].swap(0, Ordering::Relaxed);
            if n > 0 {
                inner.minutes.add(now, at, kind, n);
                inner.hours.add(now, at, kind, n);
            }
        }
    }

    /// Counts a decision from its audit line, written now.
    pub(crate) fn record(&self, record: &Record<'_>) {
        let now = secs(SystemTime::now());
        let refusal = Refusal {
            robots_url: &record.robots_url,
            client: &record.client,
            user: record.user,
            rule_line: record.rule_line,
            rule: record.rule.as_deref(),
            sha256: record.robots_sha256.as_deref(),
        };
        self.add(now, now, record.decision, Some(refusal));
    }

    fn add(&self, now: u64, at: u64, decision: &str, refusal: Option<Refusal<'_>>) {
        let kind = Kind::of(decision);
        let mut inner = self.inner.lock();
        inner.minutes.add(now, at, kind, 1);
        inner.hours.add(now, at, kind, 1);
        let Some(r) = refusal.filter(|_| kind != Kind::Allowed) else {
            return;
        };
        let origin = r
            .robots_url
            .strip_suffix("/robots.txt")
            .unwrap_or(r.robots_url);
        inner.origins.add(bounded(origin));
        inner.clients.add(ClientKey {
            ip: bounded(client_ip(r.client)),
            user: r.user.map(bounded),
        });
        if let (Some(line), Some(text)) = (r.rule_line, r.rule) {
            inner.rules.add(RuleKey {
                robots_url: bounded(r.robots_url),
                line,
                text: bounded(text),
                sha256: r.sha256.map(bounded),
            });
        }
    }

    /// What the page shows: the series ending now and the top `k` of each
    /// list.
    pub(crate) fn snapshot(&self, k: usize) -> Snapshot {
        let now = secs(SystemTime::now());
        let mut inner = self.inner.lock();
        self.flush(&mut inner, now);
        Snapshot {
            now,
            minutes: inner.minutes.series(now),
            hours: inner.hours.series(now),
            origins: inner.origins.top(k),
            rules: inner.rules.top(k),
            clients: inner.clients.top(k),
            rebuilding: self.rebuilding.load(Ordering::Relaxed),
            replayed: self.replayed.load(Ordering::Relaxed),
            admin: self.admin.lock().iter().rev().cloned().collect(),
        }
    }

    /// Reads the kept audit files beside `audit_path` in a thread of its
    /// own (see the module's doc). Call before the proxy writes its first
    /// line: the log is read up to its length now.
    pub(crate) fn rebuild_from_audit(self: &Arc<Self>, audit_path: &Path) {
        let files = AuditFiles::now(audit_path);
        self.rebuilding.store(true, Ordering::Relaxed);
        let this = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("audit-replay".into())
            .spawn(move || {
                let now = secs(SystemTime::now());
                let lines = this.replay(&files, now);
                this.rebuilding.store(false, Ordering::Relaxed);
                tracing::debug!(lines, "decision charts rebuilt from the audit log");
            });
        if let Err(e) = spawned {
            self.rebuilding.store(false, Ordering::Relaxed);
            tracing::warn!(error = %e, "cannot read the audit log for the decision charts");
        }
    }

    /// Counts the lines of the last [`WINDOW`] before `now` in `files`;
    /// returns how many were counted.
    fn replay(&self, files: &AuditFiles, now: u64) -> u64 {
        let oldest = now.saturating_sub(WINDOW.as_secs());
        let mut counted = 0;
        files.read_each(oldest, |reader| {
            counted += self.replay_lines(reader, oldest, now);
        });
        counted
    }

    fn replay_lines(&self, reader: impl BufRead, oldest: u64, now: u64) -> u64 {
        let mut counted = 0;
        for line in reader.split(b'\n').map_while(Result::ok) {
            // The time comes first: most lines out of the window are
            // skipped without parsing the rest.
            if let Some(at) = line_time(&line)
                && at < oldest
            {
                continue;
            }
            let Ok(l) = serde_json::from_slice::<AuditLine<'_>>(&line) else {
                if let Ok(a) = serde_json::from_slice::<AdminLine<'_>>(&line)
                    && a.kind == "admin"
                    && parse_time(&a.time).is_some_and(|at| at >= oldest)
                {
                    self.admin(AdminSeen::from_parts(
                        &a.time,
                        &a.action,
                        &a.by,
                        &crate::ops::audit::AdminDetail {
                            target: a.target.as_deref(),
                            scope: a.scope.as_deref(),
                            count: a.count,
                            changed: a.changed.as_deref(),
                            outcome: a.outcome.as_deref(),
                        },
                    ));
                }
                continue;
            };
            let Some(at) = parse_time(&l.time) else {
                continue;
            };
            // A 407 is audited but was never judged: not a decision here,
            // as it is not counted live either.
            if at < oldest || l.decision == "auth_required" {
                continue;
            }
            let refusal = Refusal {
                robots_url: l.robots_url.as_deref().unwrap_or(""),
                client: l.client.as_deref().unwrap_or(""),
                user: l.user.as_deref(),
                rule_line: l.rule_line,
                rule: l.rule.as_deref(),
                sha256: l.robots_sha256.as_deref(),
            };
            self.add(now, at, &l.decision, Some(refusal));
            counted += 1;
            self.replayed.fetch_add(1, Ordering::Relaxed);
        }
        counted
    }
}

/// The fields of an admin action's audit line the list reads.
#[derive(Deserialize)]
struct AdminLine<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    time: Cow<'a, str>,
    #[serde(borrow)]
    action: Cow<'a, str>,
    #[serde(borrow)]
    by: Cow<'a, str>,
    #[serde(borrow, default)]
    target: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    scope: Option<Cow<'a, str>>,
    #[serde(default)]
    count: Option<u64>,
    #[serde(default)]
    changed: Option<Vec<String>>,
    #[serde(borrow, default)]
    outcome: Option<Cow<'a, str>>,
}

/// The fields of an audit line the charts and lists read.
#[derive(Deserialize)]
struct AuditLine<'a> {
    #[serde(borrow)]
    time: Cow<'a, str>,
    #[serde(borrow)]
    decision: Cow<'a, str>,
    #[serde(borrow, default)]
    client: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    user: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    robots_url: Option<Cow<'a, str>>,
    #[serde(default)]
    rule_line: Option<u32>,
    #[serde(borrow, default)]
    rule: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    robots_sha256: Option<Cow<'a, str>>,
}

pub(crate) fn parse_time(text: &str) -> Option<u64> {
    humantime::parse_rfc3339(text).ok().map(secs)
}

/// The time of a line as the audit log writes it (`{"time":"…",`),
/// without parsing the rest.
fn line_time(line: &[u8]) -> Option<u64> {
    // A chained line starts with its `seq`.
    let line = match line.strip_prefix(b"{\"seq\":") {
        Some(rest) => {
            let comma = memchr::memchr(b',', rest)?;
            &rest[comma..]
        }
        None => line,
    };
    let rest = line
        .strip_prefix(b"{\"time\":\"")
        .or_else(|| line.strip_prefix(b",\"time\":\""))?;
    let end = memchr::memchr(b'"', rest)?;
    parse_time(std::str::from_utf8(&rest[..end]).ok()?)
}

/// Calls `each` with every line of the audit log at `audit_path` and of
/// its rotations, from the files written at or after `oldest` (seconds
/// since the epoch), the log read up to its length now. Unreadable files
/// are skipped.
pub(crate) fn each_line_since(audit_path: &Path, oldest: u64, mut each: impl FnMut(&[u8])) {
    AuditFiles::now(audit_path).read_each(oldest, |reader| {
        for line in reader.split(b'\n').map_while(Result::ok) {
            each(&line);
        }
    });
}

/// The audit files as they were at start: the log with its length then
/// (read no further), and its rotations.
struct AuditFiles {
    files: Vec<PathBuf>,
    /// Device, inode and length of the log at start.
    log: Option<(u64, u64, u64)>,
}

fn identity(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

impl AuditFiles {
    fn now(audit_path: &Path) -> AuditFiles {
        let log = std::fs::metadata(audit_path).ok().map(|m| {
            let (dev, ino) = identity(&m);
            (dev, ino, m.len())
        });
        AuditFiles {
            files: crate::judge::archive::kept_audit_files(audit_path),
            log,
        }
    }

    /// Calls `read` with a reader of each file [`AuditFiles::to_read`]
    /// gives (inflated when compressed, the log cut at its length then).
    fn read_each(&self, oldest: u64, mut read: impl FnMut(io::BufReader<Box<dyn Read>>)) {
        for (path, limit) in self.to_read(oldest) {
            let Ok(file) = std::fs::File::open(&path) else {
                continue;
            };
            let reader = crate::judge::archive::read_audit_file(file, &path);
            let reader: Box<dyn Read> = match limit {
                Some(len) => Box::new(reader.take(len)),
                None => reader,
            };
            read(io::BufReader::new(reader));
        }
    }

    /// Each file to read, once (by inode), with the length to read up to
    /// for the log: files last written before `oldest` are left out.
    fn to_read(&self, oldest: u64) -> Vec<(PathBuf, Option<u64>)> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for path in &self.files {
            let Ok(meta) = std::fs::metadata(path) else {
                continue;
            };
            if !meta.is_file() || !seen.insert(identity(&meta)) {
                continue;
            }
            if meta.modified().map(secs).is_ok_and(|m| m < oldest) {
                continue;
            }
            let limit = match self.log {
                Some((dev, ino, len)) if identity(&meta) == (dev, ino) => Some(len),
                _ => None,
            };
            out.push((path.clone(), limit));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(time: &str, decision: &str, rule: Option<(u32, &str)>) -> String {
        serde_json::json!({
            "time": time,
            "client": "10.0.0.7:4242",
            "method": "GET",
            "url": "http://a.example/private/x",
            "agent": "robots-proxy",
            "decision": decision,
            "reason": "r",
            "rule_line": rule.map(|r| r.0),
            "rule": rule.map(|r| r.1),
            "robots_url": "http://a.example/robots.txt",
            "robots_sha256": "ab".repeat(32),
        })
        .to_string()
    }

    fn rfc3339(at: u64) -> String {
        humantime::format_rfc3339_millis(SystemTime::UNIX_EPOCH + Duration::from_secs(at))
            .to_string()
    }

    #[test]
    fn counts_without_the_lock_all_reach_the_charts() {
        let activity = Arc::new(Activity::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let a = activity.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        a.count(if i % 10 == 0 {
                            "rate_limited"
                        } else {
                            "allowed"
                        });
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        let snapshot = activity.snapshot(1);
        let total = |series: &[[u64; KINDS]], kind: Kind| -> u64 {
            series.iter().map(|c| c[kind as usize]).sum()
        };
        assert_eq!(total(&snapshot.minutes, Kind::Allowed), 3600);
        assert_eq!(total(&snapshot.minutes, Kind::Other), 400);
        assert_eq!(total(&snapshot.hours, Kind::Allowed), 3600);
    }

    #[test]
    fn kinds_of_decisions() {
        assert_eq!(Kind::of("allowed"), Kind::Allowed);
        assert_eq!(Kind::of("tunnelled"), Kind::Allowed);
        assert_eq!(Kind::of("disallowed"), Kind::Disallowed);
        assert_eq!(Kind::of("usage_disallowed"), Kind::Disallowed);
        for other in ["unreachable", "rate_limited", "refused", "bad_request", "x"] {
            assert_eq!(Kind::of(other), Kind::Other);
        }
    }

    #[test]
    fn a_ring_keeps_its_window_and_reuses_its_buckets() {
        let mut ring = Ring::new(60, 3);
        let now = 1_000_000 * 60;
        ring.add(now, now, Kind::Allowed, 2);
        ring.add(now, now - 60, Kind::Disallowed, 1);
        ring.add(now, now - 180, Kind::Other, 5); // out of the window
        ring.add(now, now + 30, Kind::Other, 1); // the future counts now
        assert_eq!(
            ring.series(now),
            vec![[0, 0, 0], [0, 1, 0], [2, 0, 1]],
            "oldest first"
        );
        // Three minutes on, the old buckets read as empty, and are reset
        // before they are used again.
        let later = now + 180;
        assert_eq!(ring.series(later), vec![[0; KINDS]; 3]);
        ring.add(later, later, Kind::Allowed, 1);
        assert_eq!(ring.series(later)[2], [1, 0, 0]);
        // An event counted with an older idea of now (the rebuild at
        // start) whose slot holds a newer period is dropped.
        ring.add(now, now, Kind::Allowed, 9);
        assert_eq!(ring.series(later)[2], [1, 0, 0]);
    }

    #[test]
    fn the_top_lists_stay_bounded_and_keep_the_most_counted() {
        let mut top = Top::new();
        for _ in 0..5 {
            top.add(Box::<str>::from("heavy"));
        }
        for i in 0..10 * TOP_KEYS {
            top.add(format!("rare{i}").into_boxed_str());
        }
        assert!(top.counts.len() <= TOP_KEYS);
        let first = &top.top(3)[0];
        assert_eq!((&*first.0, first.1), ("heavy", 5));
        assert_eq!(top.top(3).len(), 3);
    }

    #[test]
    fn keys_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_KEY_BYTES);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_KEY_BYTES && cut.chars().all(|c| c == 'é'));
        assert_eq!(client_ip("10.0.0.7:4242"), "10.0.0.7");
        assert_eq!(client_ip("[::1]:80"), "::1");
        assert_eq!(client_ip("odd"), "odd");
    }

    #[test]
    fn replay_counts_the_last_fourteen_days_of_lines_and_their_refusals() {
        let now = secs(SystemTime::now());
        let text = [
            line(
                &rfc3339(now - 15 * 24 * 3600),
                "disallowed",
                Some((3, "Disallow: /old")),
            ),
            line(
                &rfc3339(now - 2 * 3600),
                "disallowed",
                Some((3, "Disallow: /private")),
            ),
            line(
                &rfc3339(now - 30),
                "disallowed",
                Some((3, "Disallow: /private")),
            ),
            line(&rfc3339(now - 30), "allowed", None),
            line(&rfc3339(now - 30), "unreachable", None),
            "{\"torn".to_string(),
            String::new(),
        ]
        .join("\n");
        let activity = Activity::new();
        let counted = activity.replay_lines(io::Cursor::new(text), now - WINDOW.as_secs(), now);
        assert_eq!(counted, 4);
        let snap = activity.snapshot(20);
        let total = |series: &[[u64; KINDS]]| {
            series.iter().fold([0; KINDS], |mut acc, b| {
                for k in 0..KINDS {
                    acc[k] += b[k];
                }
                acc
            })
        };
        assert_eq!(total(&snap.minutes), [1, 1, 1]);
        assert_eq!(total(&snap.hours), [1, 2, 1]);
        assert_eq!(&*snap.origins[0].0, "http://a.example");
        assert_eq!(snap.origins[0].1, 3);
        assert_eq!(snap.rules.len(), 1, "the 15-day-old rule is not counted");
        assert_eq!(&*snap.rules[0].0.text, "Disallow: /private");
        assert_eq!(snap.rules[0].1, 2);
        assert_eq!(&*snap.clients[0].0.ip, "10.0.0.7");
    }

    #[test]
    fn replay_reads_the_log_only_up_to_its_length_at_start_and_its_rotations() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("audit.jsonl");
        let now = secs(SystemTime::now());
        let at = rfc3339(now - 60);
        std::fs::write(&log, format!("{}\n", line(&at, "disallowed", None))).expect("log");
        // A rotation, compressed.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(
            &mut gz,
            format!("{}\n", line(&at, "refused", None)).as_bytes(),
        )
        .expect("gzip");
        std::fs::write(
            dir.path().join("audit.jsonl.2.gz"),
            gz.finish().expect("gzip"),
        )
        .expect("rotation");
        std::fs::write(dir.path().join("other.jsonl"), line(&at, "refused", None))
            .expect("unrelated file");
        let files = AuditFiles::now(&log);
        // Written after the start: not read.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .expect("append");
        io::Write::write_all(
            &mut f,
            format!("{}\n", line(&at, "disallowed", None)).as_bytes(),
        )
        .expect("write");
        let activity = Activity::new();
        assert_eq!(activity.replay(&files, now), 2);
        let snap = activity.snapshot(20);
        let minutes: u64 = snap.minutes.iter().flatten().sum();
        assert_eq!(minutes, 2);
    }
}
