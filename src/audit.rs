//! The audit log: one JSON object per line for every blocked request (and,
//! if configured, every decision). Each line goes out in a single `write`
//! on a file opened for appending, before the response is sent; the file is
//! reopened on SIGHUP for log rotation. When a line cannot be written the
//! log reports it and the proxy stops forwarding (fail closed) until the file
//! is writable again.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime};

use serde::Serialize;

use crate::gate::Judgement;

/// One audit line.
#[derive(Debug, Serialize)]
pub struct Record<'a> {
    /// RFC 3339, UTC.
    pub time: String,
    pub client: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<&'a str>,
    pub method: &'a str,
    pub url: String,
    pub agent: &'a str,
    pub decision: &'a str,
    pub reason: String,
    pub rule_line: Option<u32>,
    pub rule: Option<String>,
    /// The reading of the path that was disallowed, when it is not the
    /// path as sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judged_as: Option<&'a str>,
    pub robots_url: String,
    pub fetch_status: Option<u16>,
    pub fetch_outcome: Option<&'a str>,
    /// Seconds since the robots.txt in use was fetched.
    pub cache_age_secs: Option<u64>,
}

impl<'a> Record<'a> {
    /// The record for a judged request.
    pub fn new(
        judgement: &'a Judgement,
        client: SocketAddr,
        user: Option<&'a str>,
        method: &'a str,
    ) -> Record<'a> {
        Record::with_decision(judgement, client, user, method, judgement.decision.name())
    }

    /// Like [`Record::new`] with another decision name (e.g. `tunnelled`).
    pub fn with_decision(
        judgement: &'a Judgement,
        client: SocketAddr,
        user: Option<&'a str>,
        method: &'a str,
        decision: &'a str,
    ) -> Record<'a> {
        let rule = judgement.decision.rule();
        Record {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            client: client.to_string(),
            user,
            method,
            url: judgement.url(),
            agent: &judgement.agent,
            decision,
            reason: judgement.decision.reason(),
            rule_line: rule.map(|r| r.line()),
            rule: rule.map(|r| r.text()),
            judged_as: judgement.decision.judged_as(),
            robots_url: judgement.robots_url(),
            fetch_status: judgement.entry.as_ref().and_then(|e| e.status),
            fetch_outcome: judgement.fetch_kind().map(|k| k.as_str()),
            cache_age_secs: judgement.entry.as_ref().map(|e| e.age().as_secs()),
        }
    }
}

/// The audit log file.
pub struct AuditLog {
    path: PathBuf,
    file: Mutex<Option<File>>,
    healthy: AtomicBool,
    last_retry: Mutex<Option<Instant>>,
    log_all: AtomicBool,
}

fn open(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new().create(true).append(true).open(path)
}

impl AuditLog {
    /// Opens (creating) the log at `path`.
    pub fn open(path: &Path, log_all: bool) -> io::Result<AuditLog> {
        let file = open(path)?;
        Ok(AuditLog {
            path: path.to_path_buf(),
            file: Mutex::new(Some(file)),
            healthy: AtomicBool::new(true),
            last_retry: Mutex::new(None),
            log_all: AtomicBool::new(log_all),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether allowed requests are logged too.
    pub fn log_all(&self) -> bool {
        self.log_all.load(Ordering::Relaxed)
    }

    pub fn set_log_all(&self, on: bool) {
        self.log_all.store(on, Ordering::Relaxed);
    }

    /// Reopens the file (after log rotation).
    pub fn reopen(&self) -> io::Result<()> {
        let file = open(&self.path);
        let mut guard = self
            .file
            .lock()
            .map_err(|_| io::Error::other("audit log lock poisoned"))?;
        match file {
            Ok(f) => {
                *guard = Some(f);
                self.healthy.store(true, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                *guard = None;
                self.healthy.store(false, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// True if lines can be written. After a failure, retries opening the
    /// file at most once a second.
    pub fn is_writable(&self) -> bool {
        if self.healthy.load(Ordering::Relaxed) {
            return true;
        }
        let due = match self.last_retry.lock() {
            Ok(mut last) => {
                let due = last.is_none_or(|t| t.elapsed().as_secs() >= 1);
                if due {
                    *last = Some(Instant::now());
                }
                due
            }
            Err(_) => false,
        };
        due && self.reopen().is_ok()
    }

    /// Writes one record as one line.
    pub fn write(&self, record: &Record<'_>) -> io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        line.push(b'\n');
        let result = match self.file.lock() {
            Ok(mut guard) => match guard.as_mut() {
                Some(file) => file.write_all(&line).and_then(|()| file.flush()),
                None => Err(io::Error::other("audit log is not open")),
            },
            Err(_) => Err(io::Error::other("audit log lock poisoned")),
        };
        if let Err(e) = &result {
            self.healthy.store(false, Ordering::Relaxed);
            tracing::error!(path = %self.path.display(), error = %e,
                "cannot write the audit log: refusing to forward until it is writable");
        }
        result
    }
}
