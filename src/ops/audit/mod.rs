//! The audit log: one JSON object per line for every blocked request (and,
//! if configured, every decision). Each line goes out in a single `write`
//! on a file opened for appending, before the response is sent; the file is
//! reopened on SIGHUP for log rotation. When a line cannot be written the
//! log reports it and the proxy stops forwarding (fail closed) until the file
//! is writable again.
//!
//! Lines are hash-chained (`seq` and `chain`, defined in [`chain`]) across
//! rotations: the head (the last line's `seq` and `chain`) is kept in
//! memory and read back from the file's last line at start. At start and
//! after every reopen a checkpoint line records the head, signed when a
//! key is configured ([`checkpoint`]). `robots-proxy audit verify` checks
//! the chain ([`verify`]) and `audit report` sums a log up ([`report`]).

pub(crate) mod chain;
pub(crate) mod checkpoint;
pub(crate) mod evidence;
pub(crate) mod files;
pub(crate) mod input;
pub(crate) mod key;
pub(crate) mod pack;
pub(crate) mod report;
pub(crate) mod sync;
pub(crate) mod tail;
pub(crate) mod verify;
pub(crate) mod witness_command;
#[cfg(test)]
mod writer_tests;

pub(crate) use key::{KeyError, SigningKey};
pub use sync::SyncPolicy;

use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime};

use serde::Serialize;

use prometheus_client::metrics::counter::Counter;

use crate::judge::Judgement;
use crate::metrics::Registry;
use chain::Head;
use checkpoint::Reason;

/// One audit line.
#[derive(Debug, Serialize)]
pub(crate) struct Record<'a> {
    /// RFC 3339, UTC.
    pub(crate) time: String,
    /// The fleet node that wrote the line (`fleet.node`); absent without
    /// a fleet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) node: Option<&'a str>,
    pub(crate) client: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) user: Option<&'a str>,
    pub(crate) method: &'a str,
    pub(crate) url: String,
    /// The client's `User-Agent` header, as sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) user_agent: Option<&'a str>,
    pub(crate) agent: &'a str,
    pub(crate) decision: &'a str,
    pub(crate) reason: String,
    pub(crate) rule_line: Option<u32>,
    pub(crate) rule: Option<String>,
    /// The reading of the path that was disallowed, when it is not the
    /// path as sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) judged_as: Option<&'a str>,
    /// Empty for a request refused before it was judged (a 407).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) robots_url: String,
    pub(crate) fetch_status: Option<u16>,
    pub(crate) fetch_outcome: Option<&'a str>,
    /// Seconds since the robots.txt in use was fetched.
    pub(crate) cache_age_secs: Option<u64>,
    /// When the robots.txt in use was fetched (RFC 3339, UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) robots_fetched_at: Option<String>,
    /// The SHA-256 of the robots.txt text in use: its name in the archive
    /// (`robots-proxy audit robots SHA256`). Absent when no file decided
    /// (`fetch_outcome` says what did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) robots_sha256: Option<String>,
    /// What the response cache did (`hit`, `miss`, `revalidate`,
    /// `unavailable`, `bypass`), when it is enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cache: Option<&'a str>,
    /// A usage preference of `n` for a declared purpose (`train-ai=n`),
    /// whether it refused the request or only annotated it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) usage: Option<String>,
    /// Every signal behind `usage`, each `purpose=protocol: document
    /// [sha256=…] element` (`train-ai=tdmrep.json: https://a/.well-known/tdmrep.json
    /// sha256=… rule 1 (location "/books/", tdm-reservation 1)`); a
    /// digest names the document in the archive.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) usage_evidence: Vec<String>,
    /// Why politeness held or refused the request: `crawl_delay`,
    /// `default_interval`, `retry_after`, `backoff` (the origin's own
    /// 429 or 503).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) politeness: Option<&'a str>,
}

/// A `politeness` line: a signal an origin gave (a 429 or 503) and the
/// pause it made for every agent.
#[derive(Debug, Serialize)]
pub(crate) struct SignalRecord<'a> {
    /// `politeness`.
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) node: Option<&'a str>,
    /// The origin paused (`scheme://host:port`).
    pub(crate) origin: &'a str,
    /// The request whose response carried the signal.
    pub(crate) url: &'a str,
    pub(crate) status: u16,
    /// `Retry-After` as asked, in seconds (none: the back-off).
    pub(crate) retry_after: Option<u64>,
    /// `retry_after` or `backoff`.
    pub(crate) cause: &'static str,
    /// The back-off level (0 for a `Retry-After`).
    pub(crate) level: u32,
    /// When the signal was given and when the pause ends (RFC 3339).
    pub(crate) given: String,
    pub(crate) until: String,
}

impl<'a> SignalRecord<'a> {
    pub(crate) fn new(
        origin: &'a str,
        url: &'a str,
        signal: &crate::http::signal::Signal,
    ) -> SignalRecord<'a> {
        let at = |ms: u64| {
            humantime::format_rfc3339_millis(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
            )
            .to_string()
        };
        SignalRecord {
            kind: "politeness",
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            node: None,
            origin,
            url,
            status: signal.status,
            retry_after: signal.retry_after,
            cause: signal.cause(),
            level: signal.level,
            given: at(signal.given),
            until: at(signal.until),
        }
    }
}

impl<'a> Record<'a> {
    /// The record for a judged request, under a decision name (e.g. `tunnelled`).
    pub(crate) fn with_decision(
        judgement: &'a Judgement,
        client: SocketAddr,
        user: Option<&'a str>,
        method: &'a str,
        decision: &'a str,
    ) -> Record<'a> {
        let rule = judgement.decision.rule();
        let usage = match &judgement.decision {
            crate::judge::Decision::UsageDisallowed(note) => Some(note),
            _ => judgement.usage.as_ref(),
        };
        let refused_by_usage = matches!(
            judgement.decision,
            crate::judge::Decision::UsageDisallowed(_)
        );
        Record {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            node: None,
            client: client.to_string(),
            user,
            method,
            url: judgement.url(),
            user_agent: None,
            agent: &judgement.agent,
            decision,
            reason: judgement.decision.reason(),
            rule_line: match usage {
                Some(n) if refused_by_usage => Some(n.line),
                _ => rule.map(|r| r.line()),
            },
            rule: match usage {
                Some(n) if refused_by_usage => Some(n.text.to_string()),
                _ => rule.map(|r| r.text()),
            },
            judged_as: judgement.decision.judged_as(),
            robots_url: judgement.robots_url(),
            fetch_status: judgement.entry.as_ref().and_then(|e| e.status),
            fetch_outcome: judgement.entry_state().map(|s| s.name()),
            cache_age_secs: judgement.entry.as_ref().map(|e| e.age().as_secs()),
            robots_fetched_at: judgement
                .entry
                .as_ref()
                .map(|e| humantime::format_rfc3339_seconds(e.fetched_at).to_string()),
            robots_sha256: judgement
                .entry_state()
                .and_then(|s| s.rules())
                .and_then(|c| c.digest())
                .map(|d| d.to_string()),
            cache: None,
            usage: usage.map(|n| format!("{}=n", n.purpose)),
            usage_evidence: usage.map(|n| n.evidence()).unwrap_or_default(),
            politeness: None,
        }
    }
}

impl<'a> Record<'a> {
    /// The record for a request refused before anything was judged (proxy
    /// authentication): no robots.txt, no rule.
    pub(crate) fn unjudged(
        client: SocketAddr,
        user: Option<&'a str>,
        method: &'a str,
        url: String,
        user_agent: Option<&'a str>,
        decision: &'a str,
        reason: &str,
    ) -> Record<'a> {
        Record {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            node: None,
            client: client.to_string(),
            user,
            method,
            url,
            user_agent,
            agent: "",
            decision,
            reason: reason.to_string(),
            rule_line: None,
            rule: None,
            judged_as: None,
            robots_url: String::new(),
            fetch_status: None,
            fetch_outcome: None,
            cache_age_secs: None,
            robots_fetched_at: None,
            robots_sha256: None,
            cache: None,
            usage: None,
            usage_evidence: Vec::new(),
            politeness: None,
        }
    }
}

/// A line of an action taken on the proxy itself, not a request: an
/// admin's purge or reload (or one asked by a signal or another node),
/// a failed admin login. `"type":"admin"` tells it apart; it is chained
/// and verified like every line.
#[derive(Debug, Serialize)]
pub(crate) struct AdminEvent {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    /// RFC 3339, UTC.
    pub(crate) time: String,
    /// The fleet node that wrote the line; absent without a fleet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) node: Option<String>,
    /// `purge`, `reload`, `login_failed` or `login_throttled`.
    pub(crate) action: &'static str,
    /// Who asked: `admin user NAME`, `admin client ADDRESS` (no admin
    /// users configured), `SIGHUP`, or `fleet node NAME`.
    pub(crate) by: String,
    /// The admin client's address, when one asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) client: Option<String>,
    /// What a purge named (`origin=URL`, `url=URL`, `prefix=URL`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) target: Option<String>,
    /// `node` (this node only) or `fleet` (every node was asked to).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) scope: Option<&'static str>,
    /// Entries a purge dropped on this node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) count: Option<u64>,
    /// The configuration keys a reload changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) changed: Option<Vec<String>>,
    /// `applied`, or why not (`rejected: …`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) outcome: Option<String>,
}

impl AdminEvent {
    /// An event of `action` asked by `by`, now; the rest unset.
    pub(crate) fn new(action: &'static str, by: String) -> AdminEvent {
        AdminEvent {
            kind: "admin",
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            node: None,
            action,
            by,
            client: None,
            target: None,
            scope: None,
            count: None,
            changed: None,
            outcome: None,
        }
    }
}

/// What an admin action's line says besides who did what, as one short
/// text (target, scope, count, keys changed, outcome): the web view's list
/// and `audit report` show it alike.
#[derive(Default)]
pub(crate) struct AdminDetail<'a> {
    pub(crate) target: Option<&'a str>,
    pub(crate) scope: Option<&'a str>,
    pub(crate) count: Option<u64>,
    pub(crate) changed: Option<&'a [String]>,
    pub(crate) outcome: Option<&'a str>,
}

impl AdminDetail<'_> {
    pub(crate) fn text(&self) -> String {
        let mut parts = Vec::new();
        if let Some(t) = self.target {
            parts.push(t.to_string());
        }
        if let Some(s) = self.scope {
            parts.push(format!("scope {s}"));
        }
        if let Some(n) = self.count {
            parts.push(format!("{n} dropped"));
        }
        if let Some(keys) = self.changed {
            parts.push(if keys.is_empty() {
                "nothing changed".to_string()
            } else {
                format!("changed {}", keys.join(", "))
            });
        }
        if let Some(o) = self.outcome {
            parts.push(o.to_string());
        }
        parts.join("; ")
    }
}

impl AdminEvent {
    /// Its detail, as [`AdminDetail::text`] shows it.
    pub(crate) fn detail(&self) -> AdminDetail<'_> {
        AdminDetail {
            target: self.target.as_deref(),
            scope: self.scope,
            count: self.count,
            changed: self.changed.as_deref(),
            outcome: self.outcome.as_deref(),
        }
    }
}

/// The audit log file.
pub struct AuditLog {
    path: PathBuf,
    state: Mutex<State>,
    healthy: AtomicBool,
    log_all: AtomicBool,
    /// Signs checkpoints, when configured.
    key: Option<SigningKey>,
    /// This node's name in a fleet, for every record's `node`.
    node: Option<Box<str>>,
    /// `robots_proxy_audit_write_failures_total`.
    write_failures: Counter,
    /// `audit.sync`.
    sync: SyncPolicy,
    /// What the `interval` thread syncs.
    synced: std::sync::Arc<sync::Shared>,
    /// `audit.witness_file`: every checkpoint line is appended there too.
    witness: Option<PathBuf>,
    /// Every checkpoint line is given to this too (a fleet's witness in
    /// Redis, `fleet::witness`).
    witness_hook: Option<WitnessHook>,
    /// `audit.witness_command`: run for every checkpoint line.
    witness_command: Option<witness_command::WitnessCommand>,
    /// `robots_proxy_audit_witness_command_failures_total`.
    witness_command_failures: Counter,
}

/// What is given every checkpoint line besides the witness file.
pub(crate) type WitnessHook = std::sync::Arc<dyn Fn(&[u8]) + Send + Sync>;

/// The open file, the chain's head, and when the file was last checked
/// or retried.
struct State {
    file: Option<File>,
    /// The last line written: the next one links to it.
    head: Head,
    /// Why a new chain begins, until the checkpoint that says so is
    /// written.
    chain_start: Option<&'static str>,
    /// Last reopen attempt after a failure.
    last_retry: Option<Instant>,
    /// Last check that the path still names the open file.
    last_identity_check: Instant,
    /// Lines written since the last checkpoint.
    since_checkpoint: u64,
    /// The last checkpoint line written, for the witness.
    last_checkpoint: Option<Vec<u8>>,
}

/// A line written, and with `audit.sync = "every"` its ticket: it counts
/// as written once a sync covers it.
#[must_use]
pub(crate) struct Pending(Option<u64>);

/// Room left before a record's JSON for the `{"seq":N,` that starts its line.
const SEQ_ROOM: usize = 32;

/// A record serialised outside the lock, with room before it for its `seq`.
struct Line {
    buf: Vec<u8>,
}

impl Line {
    fn new(record: &impl Serialize) -> io::Result<Line> {
        let mut buf = Vec::with_capacity(512);
        buf.resize(SEQ_ROOM, b' ');
        serde_json::to_writer(&mut buf, record).map_err(io::Error::other)?;
        // The chain field and the newline, so sealing never reallocates.
        buf.reserve(80);
        Ok(Line { buf })
    }

    /// The line numbered after `prev`, as written (newline included), and
    /// the head it makes. `{"seq":N,` takes the place of the record's `{`.
    fn seal(&mut self, prev: &Head) -> io::Result<(&[u8], Head)> {
        let seq = prev.seq + 1;
        let mut prefix = [0u8; SEQ_ROOM];
        let mut cursor = &mut prefix[..];
        write!(cursor, "{{\"seq\":{seq},")?;
        let n = SEQ_ROOM - cursor.len();
        let start = SEQ_ROOM + 1 - n;
        self.buf[start..=SEQ_ROOM].copy_from_slice(&prefix[..n]);
        let chain = chain::seal(&mut self.buf, start, &prev.chain);
        Ok((&self.buf[start..], Head { seq, chain }))
    }
}

/// How often a write checks that the file was not deleted or replaced.
const IDENTITY_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Opens the log for appending, creating it (and its directory) if needed:
/// mode 0640, since it holds every client's URLs. Readable too, so a torn
/// line can be found and cut off.
fn open(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o640)
        .open(path)
}

/// True if `path` still names `file` (same device and inode).
fn still_named(path: &Path, file: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(p), Ok(f)) => p.dev() == f.dev() && p.ino() == f.ino(),
        _ => false,
    }
}

/// After a failed append of `line_len` bytes, cuts the file back to its
/// last complete line: a short write (full disk) must not leave a torn
/// line that the next record would be glued to. Only the tail a partial
/// write can have produced is read.
fn cut_torn_line(file: &File, line_len: usize) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let window = len.min(line_len as u64);
    let mut tail = vec![0u8; window as usize];
    file.read_exact_at(&mut tail, len - window)?;
    if tail.last() == Some(&b'\n') {
        return Ok(()); // nothing torn
    }
    let keep = match memchr::memrchr(b'\n', &tail) {
        Some(i) => len - window + i as u64 + 1,
        // The whole file is the torn bytes.
        None if window == len => 0,
        None => return Err(io::Error::other("no line end found before the torn line")),
    };
    file.set_len(keep)
}

impl AuditLog {
    /// Opens (creating) the log at `path`, goes on with the chain of its
    /// last complete line (cutting a torn one) and writes the start
    /// checkpoint, signed with `key` if given. A checkpoint that cannot be
    /// written leaves the log failed, as a record that cannot be.
    /// Registers the log's series in `registry`.
    pub(crate) fn with_metrics(self, registry: &Registry) -> AuditLog {
        registry.register(
            "robots_proxy_audit_write_failures",
            "Audit log records that could not be written",
            self.write_failures.clone(),
        );
        registry.register(
            "robots_proxy_audit_syncs",
            "fdatasync calls that forced audit lines to the disk (audit.sync)",
            self.synced.syncs.clone(),
        );
        registry.register(
            "robots_proxy_audit_witness_command_failures",
            "Checkpoints audit.witness_command failed for (or was too busy to take)",
            self.witness_command_failures.clone(),
        );
        self
    }

    pub(crate) fn open(
        path: &Path,
        log_all: bool,
        key: Option<SigningKey>,
    ) -> io::Result<AuditLog> {
        let file = open(path)?;
        let resume = tail::resume(&file)?;
        if resume.cut > 0 {
            tracing::warn!(path = %path.display(), bytes = resume.cut,
                "cut a torn last line from the audit log (a write cut short by a crash)");
        }
        match resume.chain_start {
            Some("empty") | None => {}
            Some(why) => tracing::warn!(path = %path.display(), last_line = why,
                "the audit log's last line carries no chain: a new chain begins"),
        }
        let log = AuditLog {
            path: path.to_path_buf(),
            state: Mutex::new(State {
                file: Some(file),
                head: resume.head,
                chain_start: resume.chain_start,
                last_retry: None,
                last_identity_check: Instant::now(),
                since_checkpoint: 0,
                last_checkpoint: None,
            }),
            healthy: AtomicBool::new(true),
            log_all: AtomicBool::new(log_all),
            key,
            node: None,
            write_failures: Counter::default(),
            sync: SyncPolicy::None,
            synced: std::sync::Arc::default(),
            witness: None,
            witness_hook: None,
            witness_command: None,
            witness_command_failures: Counter::default(),
        };
        {
            let mut state = log.state.lock();
            if let Err(e) = log.checkpoint_locked(&mut state, Reason::Start) {
                log.healthy.store(false, Ordering::Relaxed);
                tracing::error!(path = %path.display(), error = %e,
                    "cannot write the audit log: refusing to forward until it is writable");
            }
        }
        Ok(log)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Forces lines to the disk as `policy` says (`audit.sync`); the log
    /// opens with `none`. `interval` starts a thread of its own.
    pub(crate) fn with_sync(mut self, policy: SyncPolicy) -> io::Result<AuditLog> {
        // A pipe or a device (`/dev/stdout` under a container runtime) has
        // nothing to sync: lines are in it once written.
        let regular = self
            .state
            .lock()
            .file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .is_none_or(|m| m.file_type().is_file());
        if !regular && policy != SyncPolicy::None {
            tracing::info!(path = %self.path.display(),
                "the audit log is not a regular file: audit.sync does not apply");
            return Ok(self);
        }
        self.sync = policy;
        if policy == SyncPolicy::None {
            return Ok(self);
        }
        // A file that cannot be synced at start fails the log (no line is
        // counted as written until it can be), as a failed write does; the
        // proxy starts, and refuses to forward.
        let synced = {
            let state = self.state.lock();
            match &state.file {
                // Lines written before: the start checkpoint, at least.
                Some(file) => self
                    .synced
                    .sync(file)
                    .and_then(|()| self.synced.set_file(file)),
                None => Ok(()),
            }
        }
        .and_then(|()| sync::sync_dir(&self.path));
        if let Err(e) = synced {
            self.healthy.store(false, Ordering::Relaxed);
            tracing::error!(path = %self.path.display(), error = %e,
                "cannot sync the audit log to disk: refusing to forward until it is writable");
        }
        match policy {
            SyncPolicy::Interval => sync::start_interval(&self.synced, &self.path)?,
            SyncPolicy::Every => sync::start_every(&self.synced)?,
            SyncPolicy::None => {}
        }
        Ok(self)
    }

    /// Appends every checkpoint line to `path` as well (`audit.witness_file`,
    /// on another disk or host mount), beginning with the one written at
    /// start.
    pub(crate) fn with_witness(mut self, path: Option<PathBuf>) -> AuditLog {
        self.witness = path;
        let last = self.state.lock().last_checkpoint.clone();
        if let Some(line) = last {
            self.witness_line(&line);
        }
        self
    }

    /// Gives every checkpoint line to `hook` as well, beginning with the
    /// last one written.
    pub(crate) fn with_witness_hook(mut self, hook: Option<WitnessHook>) -> AuditLog {
        self.witness_hook = hook;
        let last = self.state.lock().last_checkpoint.clone();
        if let (Some(hook), Some(line)) = (&self.witness_hook, last) {
            hook(&line);
        }
        self
    }

    /// Runs `argv` for every checkpoint line (`audit.witness_command`),
    /// beginning with the one written at start; a run taking longer than
    /// `timeout` is killed.
    pub(crate) fn with_witness_command(
        mut self,
        argv: &[String],
        timeout: std::time::Duration,
    ) -> io::Result<AuditLog> {
        if argv.is_empty() {
            return Ok(self);
        }
        let command = witness_command::WitnessCommand::start(
            argv,
            timeout,
            self.witness_command_failures.clone(),
        )?;
        if let Some(line) = &self.state.lock().last_checkpoint {
            command.send(line);
        }
        self.witness_command = Some(command);
        Ok(self)
    }

    /// Writes a checkpoint if lines were written since the last one
    /// (`audit.checkpoint_every`); true when it did.
    pub(crate) fn periodic_checkpoint(&self) -> io::Result<bool> {
        let mut state = self.state.lock();
        if state.since_checkpoint == 0 || state.file.is_none() {
            return Ok(false);
        }
        self.checkpoint_locked(&mut state, Reason::Interval)
            .inspect_err(|e| {
                self.healthy.store(false, Ordering::Relaxed);
                tracing::error!(path = %self.path.display(), error = %e,
                    "cannot write the audit log: refusing to forward until it is writable");
            })
            .map(|()| true)
    }

    /// Appends a checkpoint line to the witness file: a failure is logged,
    /// the audit line stands.
    fn witness_line(&self, line: &[u8]) {
        if let Some(hook) = &self.witness_hook {
            hook(line);
        }
        let Some(path) = &self.witness else {
            return;
        };
        let written = open(path).and_then(|mut f| {
            f.write_all(line)?;
            if self.sync != SyncPolicy::None {
                f.sync_data()?;
            }
            Ok(())
        });
        if let Err(e) = written {
            tracing::error!(witness = %path.display(), error = %e,
                "cannot append the checkpoint to the audit witness file");
        }
    }

    /// Names this node (a fleet's `fleet.node`) in the records written.
    pub(crate) fn with_node(mut self, node: Option<&str>) -> AuditLog {
        self.node = node.map(Box::from);
        self
    }

    /// This node's name in a fleet, for a record's `node`.
    pub(crate) fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    /// Whether allowed requests are logged too.
    pub(crate) fn log_all(&self) -> bool {
        self.log_all.load(Ordering::Relaxed)
    }

    pub(crate) fn set_log_all(&self, on: bool) {
        self.log_all.store(on, Ordering::Relaxed);
    }

    /// Reopens the file (after log rotation) and writes a checkpoint in it.
    pub(crate) fn reopen(&self) -> io::Result<()> {
        let mut state = self.state.lock();
        self.reopen_locked(&mut state)
    }

    fn reopen_locked(&self, state: &mut State) -> io::Result<()> {
        state.last_identity_check = Instant::now();
        let synced = match self.sync {
            SyncPolicy::None => Ok(()),
            SyncPolicy::Interval => self.synced.sync_if_dirty(),
            SyncPolicy::Every => self.synced.all_durable(),
        };
        if let Err(e) = synced {
            tracing::error!(path = %self.path.display(), error = %e,
                "cannot sync the audit log to disk before reopening it");
        }
        let result = match open(&self.path) {
            Ok(f) => {
                let synced = match self.sync {
                    SyncPolicy::None => Ok(()),
                    _ => self
                        .synced
                        .set_file(&f)
                        .and_then(|()| sync::sync_dir(&self.path)),
                };
                state.file = Some(f);
                synced.and_then(|()| self.checkpoint_locked(state, Reason::Reopen))
            }
            Err(e) => {
                state.file = None;
                Err(e)
            }
        };
        self.healthy.store(result.is_ok(), Ordering::Relaxed);
        result
    }

    /// Writes a checkpoint line: the head so far, signed if there is a key.
    fn checkpoint_locked(&self, state: &mut State, reason: Reason) -> io::Result<()> {
        let Some(file) = state.file.as_mut() else {
            return Err(io::Error::other("audit log is not open"));
        };
        let file_start = file.metadata()?.len() == 0;
        let (line, head) = checkpoint::line(
            &state.head,
            reason,
            file_start,
            state.chain_start,
            self.key.as_ref(),
        )?;
        append(file, &line, &self.path)?;
        self.sync_line(file)?;
        state.head = head;
        state.chain_start = None;
        state.since_checkpoint = 0;
        self.witness_line(&line);
        if let Some(command) = &self.witness_command {
            command.send(&line);
        }
        state.last_checkpoint = Some(line);
        Ok(())
    }

    /// True unless the last write failed. After a failure, retries opening
    /// the file at most once a second; the next write then proves it.
    pub(crate) fn is_writable(&self) -> bool {
        if self.healthy.load(Ordering::Relaxed) {
            return true;
        }
        let mut state = self.state.lock();
        let due = state.last_retry.is_none_or(|t| t.elapsed().as_secs() >= 1);
        if !due {
            return false;
        }
        state.last_retry = Some(Instant::now());
        self.reopen_locked(&mut state).is_ok()
    }

    /// Writes one record as one line, whole or not at all: `Ok` only when
    /// the line is in the file. A deleted or replaced file (checked at most
    /// once a second) is reopened at its path first.
    /// A failure is counted (`robots_proxy_audit_write_failures_total`).
    pub(crate) fn write(&self, record: &impl Serialize) -> io::Result<()> {
        self.write_line(record)
    }

    /// Writes an admin event as the next line, with this node's name, as
    /// [`AuditLog::write`] writes a record.
    pub(crate) fn write_event(&self, mut event: AdminEvent) -> io::Result<()> {
        event.node = self.node().map(String::from);
        event.time = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        self.write_line(&event)
    }

    fn write_line(&self, record: &impl Serialize) -> io::Result<()> {
        let pending = self.write_pending(record)?;
        self.wait_blocking(pending)
    }

    /// Writes one record as [`AuditLog::write`] does, but with `audit.sync
    /// = "every"` does not wait for it to be on the disk: the caller
    /// waits ([`AuditLog::durable`]) before it acts on the line.
    pub(crate) fn write_pending(&self, record: &impl Serialize) -> io::Result<Pending> {
        let written = Line::new(record).and_then(|mut line| {
            let mut state = self.state.lock();
            self.write_locked(&mut state, &mut line)
        });
        written.map(Pending).inspect_err(|e| self.failed(e))
    }

    /// Waits, blocking the thread, until the line of `pending` is on the
    /// disk (at once unless `audit.sync = "every"`).
    pub(crate) fn wait_blocking(&self, pending: Pending) -> io::Result<()> {
        match pending.0 {
            Some(ticket) => self
                .synced
                .wait_durable(ticket)
                .inspect_err(|e| self.failed(e)),
            None => Ok(()),
        }
    }

    /// Waits, without blocking the thread, until the line of `pending`
    /// is on the disk: lines written meanwhile share its sync.
    pub(crate) async fn durable(&self, pending: Pending) -> io::Result<()> {
        match pending.0 {
            Some(ticket) => self
                .synced
                .durable(ticket)
                .await
                .inspect_err(|e| self.failed(e)),
            None => Ok(()),
        }
    }

    /// A line that could not be written (or synced): counted, and the
    /// proxy refuses to forward until the log is writable again.
    fn failed(&self, e: &io::Error) {
        self.healthy.store(false, Ordering::Relaxed);
        self.write_failures.inc();
        tracing::error!(path = %self.path.display(), error = %e,
            "cannot write the audit log: refusing to forward until it is writable");
    }

    /// Appends `line` as the next link of the chain: the head moves only
    /// when the whole line is in the file. With `audit.sync = "every"`,
    /// the ticket to wait for it to be on the disk.
    fn write_locked(&self, state: &mut State, line: &mut Line) -> io::Result<Option<u64>> {
        if state.last_identity_check.elapsed() >= IDENTITY_CHECK_EVERY {
            state.last_identity_check = Instant::now();
            let gone = state
                .file
                .as_ref()
                .is_some_and(|f| !still_named(&self.path, f));
            if gone {
                tracing::warn!(path = %self.path.display(),
                    "the audit log file was deleted or replaced: reopening it at its path");
                self.reopen_locked(state)?;
            }
        }
        if state.chain_start.is_some() {
            // The start checkpoint was not written: it comes first.
            self.checkpoint_locked(state, Reason::Start)?;
        }
        let Some(file) = state.file.as_mut() else {
            return Err(io::Error::other("audit log is not open"));
        };
        let (bytes, head) = line.seal(&state.head)?;
        append(file, bytes, &self.path)?;
        state.head = head;
        state.since_checkpoint += 1;
        let ticket = match self.sync {
            SyncPolicy::Every => Some(self.synced.written()),
            _ => {
                self.sync_line(file)?;
                None
            }
        };
        self.healthy.store(true, Ordering::Relaxed);
        Ok(ticket)
    }
}

/// Starts the thread that writes a checkpoint every `every` while lines
/// come (`audit.checkpoint_every`), on the log `log` finds in `owner`; it
/// ends when the owner is dropped.
pub(crate) fn start_checkpoints<T: Send + Sync + 'static>(
    owner: std::sync::Weak<T>,
    every: std::time::Duration,
    log: fn(&T) -> &AuditLog,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("audit-checkpoint".into())
        .spawn(move || {
            loop {
                std::thread::sleep(every);
                let Some(owner) = owner.upgrade() else {
                    return;
                };
                // A failure is logged and fails the next request's line.
                let _ = log(&owner).periodic_checkpoint();
            }
        })
        .map(drop)
}

impl AuditLog {
    /// After a line is appended: `every` syncs it now (a failure fails the
    /// line), `interval` leaves it to the thread.
    fn sync_line(&self, file: &File) -> io::Result<()> {
        match self.sync {
            SyncPolicy::None => Ok(()),
            SyncPolicy::Interval => {
                self.synced.mark();
                Ok(())
            }
            SyncPolicy::Every => self.synced.sync(file),
        }
    }
}

/// Appends `line` whole or not at all: a failed write is cut back to the
/// last complete line.
fn append(file: &mut File, line: &[u8], path: &Path) -> io::Result<()> {
    file.write_all(line).inspect_err(|_| {
        if let Err(cut) = cut_torn_line(file, line.len()) {
            tracing::error!(path = %path.display(), error = %cut,
                "cannot cut a partly written audit line");
        }
    })
}
