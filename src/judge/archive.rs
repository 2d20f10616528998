//! The robots.txt archive: every distinct robots.txt the proxy judged by,
//! kept once under `<state_dir>/robots-archive/`, named by the SHA-256 of
//! its text, so that an audit line (`robots_sha256`) shows what the file
//! said when the request was judged, whatever the origin serves later.
//!
//! - The digest is of the text the parser read: the body after its
//!   content coding is removed. A gzip of the same text may differ byte
//!   for byte between two fetches (compressor, level, timestamp), and it
//!   is the text that decided.
//! - `bodies/<aa>/<digest>.txt` is the text; `<digest>.json` beside it its
//!   metadata: for each origin that served it, the URL fetched, the final
//!   URL after redirects, the status, `Content-Type`, `ETag`,
//!   `Last-Modified`, and the first and last time a fetch found it in
//!   force. Both are written to a temporary file and renamed; the text is
//!   checked against its name when it is read.
//! - A fetch that gave no file (4xx, unreachable, refused, TLS failure)
//!   decides too: it is a line of `outcomes.jsonl` when an origin's
//!   outcome changes.
//! - The archive is bounded by `audit.archive_max` bytes, a hard limit
//!   (see [`Archive::prune`]): a text over [`MAX_TEXT`] (Google's 500 KiB,
//!   the most the parser reads) or over the limit itself is not archived;
//!   over the limit, texts no kept audit file names and no origin is in
//!   force by leave first (the oldest archived first), then the others,
//!   those of the origins that used them least recently first. A text that
//!   a kept audit file names (or that is in force, so the next lines name
//!   it) leaves only through the removal hook, which writes an
//!   `evidence_removed` audit line naming its digest and why.

use parking_lot::Mutex;
use std::collections::HashSet;
use std::fmt;
use std::fs;
use std::io::{self, BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use serde::{Deserialize, Serialize};

use crate::http::files::{create_private_dir, write_atomically};

/// The SHA-256 of a robots.txt text.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    pub fn of(text: &[u8]) -> Digest {
        let d = ring::digest::digest(&ring::digest::SHA256, text);
        let mut out = [0u8; 32];
        out.copy_from_slice(d.as_ref());
        Digest(out)
    }

    /// A digest written as 64 hex digits (either case).
    pub fn parse(hex: &str) -> Option<Digest> {
        let hex = hex.as_bytes();
        if hex.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in hex.chunks(2).enumerate() {
            let s = std::str::from_utf8(pair).ok()?;
            out[i] = u8::from_str_radix(s, 16).ok()?;
        }
        Some(Digest(out))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

/// What a fetch brought back, as the archive keeps it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct Evidence {
    /// The URL fetched first (the origin's `/robots.txt`).
    pub(crate) url: String,
    /// The URL the file came from, after redirects.
    pub(crate) final_url: String,
    pub(crate) content_type: Option<String>,
    pub(crate) etag: Option<String>,
    pub(crate) last_modified: Option<String>,
}

/// One origin's use of an archived text.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Served {
    pub origin: String,
    pub url: String,
    pub final_url: String,
    pub status: Option<u16>,
    pub content_type: Option<String>,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    /// RFC 3339: the first fetch that found this text in force.
    pub first_in_force: String,
    /// RFC 3339: the last fetch that found it in force.
    pub last_in_force: String,
}

/// An archived text's metadata file.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Meta {
    pub sha256: String,
    pub bytes: u64,
    pub served: Vec<Served>,
}

/// An origin's robots.txt entry as kept on disk (`entries/<aa>/<sha256 of
/// the origin>.json`), so that a restarted proxy judges by what it had
/// instead of fetching every robots.txt again (and, with the origin down,
/// replays a recorded crawl). The text itself is the archive's.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct KeptEntry {
    pub(crate) origin: String,
    /// `fresh`, `stale`, `allow_all`, `disallow_all`, `refused`, `bad_tls`.
    pub(crate) state: String,
    pub(crate) reason: Option<String>,
    pub(crate) status: Option<u16>,
    /// Milliseconds since the Unix epoch.
    pub(crate) fetched_at_ms: u64,
    pub(crate) expires_at_ms: u64,
    /// The text in force (`fresh`, `stale`).
    pub(crate) sha256: Option<String>,
    pub(crate) failures: u32,
}

/// A fetch that gave no file, as `outcomes.jsonl` keeps it.
#[derive(Debug, Serialize)]
struct OutcomeLine<'a> {
    time: String,
    origin: &'a str,
    url: &'a str,
    status: Option<u16>,
    outcome: &'a str,
    reason: &'a str,
}

/// What reading an archived text can find.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("{0} is not a SHA-256 (64 hex digits) or a prefix of one (8 or more)")]
    BadDigest(String),
    #[error("{0} is the start of {1} archived digests: give more of it")]
    Ambiguous(String, usize),
    #[error("no archived robots.txt {0} in {1}")]
    Missing(String, PathBuf),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} is corrupt: its text hashes to {found}, not {expected}")]
    Corrupt {
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error("{path}: bad metadata: {reason}")]
    BadMeta { path: PathBuf, reason: String },
}

/// The archive directory and its budget.
pub(crate) struct Archive {
    dir: PathBuf,
    max_bytes: u64,
    /// The audit log: files beside it whose names start with its name are
    /// the kept audit files.
    audit_path: PathBuf,
    state: Mutex<State>,
    /// Bounds on the kept robots store entries (`entries/`).
    entries: EntryLimits,
    /// Told of each text that leaves while audit lines name it (set once,
    /// by the layer that owns the audit log).
    on_removed: OnceLock<RemovalHook>,
    metrics: OnceLock<ArchiveMetrics>,
}

/// The most of one text the archive keeps: Google's 500 KiB, the most the
/// parser reads (a longer body is cut before it is parsed and hashed).
pub(crate) const MAX_TEXT: u64 = 500 * 1024;

/// Evidence leaving the archive: a text that kept audit lines name (or
/// that is in force, so that the next lines name it).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Removal {
    pub(crate) digest: Digest,
    /// The text's length.
    pub(crate) bytes: u64,
    /// Why, as the `evidence_removed` line says it.
    pub(crate) reason: String,
}

/// Writes the `evidence_removed` line for a [`Removal`]; `Err` keeps the
/// text (it is not removed without its line).
pub(crate) type RemovalHook = Box<dyn Fn(&Removal) -> io::Result<()> + Send + Sync>;

/// The archive's series.
struct ArchiveMetrics {
    bytes: Gauge,
    removed: Family<[(&'static str, &'static str); 1], Counter>,
}

/// How many robots store entries are kept on disk, and for how long: an
/// entry is one small file per origin (a 4 KiB block each), and origins
/// come and go, so without a bound the directory grows with every origin
/// ever seen.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EntryLimits {
    /// At most this many (the robots store's capacity: a restart cannot
    /// use more); the least recently saved go first.
    pub(crate) max_entries: usize,
    /// An entry saved longer ago than this is of no use
    /// (`robots.stale_max`: not even as a stale copy).
    pub(crate) max_age: Duration,
}

impl Default for EntryLimits {
    fn default() -> Self {
        EntryLimits {
            max_entries: 100_000,
            max_age: Duration::from_secs(30 * 86_400),
        }
    }
}

struct State {
    /// Bytes of texts and metadata files.
    bytes: u64,
    /// No pruning below this many bytes (see [`Archive::prune`]).
    prune_again_at: u64,
    /// The digest or outcome last recorded per origin (bounded): what is in
    /// force now, kept from removal, and what `outcomes.jsonl` compares to.
    last: lru::LruCache<String, Last>,
    /// Entries saved since `entries/` was last swept (the first save
    /// sweeps).
    entry_saves: Option<usize>,
}

#[derive(Clone, PartialEq)]
enum Last {
    Text(Digest),
    Outcome(String),
}

/// Origins listed in one text's metadata at most (the most recent).
const MAX_SERVED: usize = 256;

/// Origins whose last record is remembered.
const REMEMBERED: usize = 100_000;

impl Archive {
    /// Opens (creating) the archive in `dir`, bounded by `max_bytes`.
    pub(crate) fn open(dir: &Path, max_bytes: u64, audit_path: &Path) -> io::Result<Archive> {
        create_private_dir(&dir.join("bodies"))?;
        let bytes = walk_bodies(dir)?.iter().map(|b| b.bytes).sum();
        let remembered =
            std::num::NonZeroUsize::new(REMEMBERED).unwrap_or(std::num::NonZeroUsize::MIN);
        Ok(Archive {
            dir: dir.to_path_buf(),
            max_bytes,
            audit_path: audit_path.to_path_buf(),
            state: Mutex::new(State {
                bytes,
                prune_again_at: 0,
                last: lru::LruCache::new(remembered),
                entry_saves: None,
            }),
            entries: EntryLimits::default(),
            on_removed: OnceLock::new(),
            metrics: OnceLock::new(),
        })
    }

    /// Sets what writes the `evidence_removed` line when a text audit lines
    /// name leaves. Without it such a text is never removed (the archive
    /// may then stay over its limit, with a warning).
    pub(crate) fn set_removal_hook(&self, hook: RemovalHook) {
        let _ = self.on_removed.set(hook);
    }

    /// Registers `robots_proxy_archive_bytes` and
    /// `robots_proxy_archive_removed{reason}`.
    pub(crate) fn register_metrics(&self, registry: &crate::metrics::Registry) {
        let m = ArchiveMetrics {
            bytes: Gauge::default(),
            removed: Family::default(),
        };
        m.bytes
            .set(i64::try_from(self.state.lock().bytes).unwrap_or(i64::MAX));
        registry.register(
            "robots_proxy_archive_bytes",
            "bytes of archived robots.txt texts and their metadata",
            m.bytes.clone(),
        );
        registry.register(
            "robots_proxy_archive_removed",
            "archived robots.txt texts removed or not archived, by reason: unnamed (no kept audit line names it), evidence (an evidence_removed line was written), over_cap (too large to archive)",
            m.removed.clone(),
        );
        let _ = self.metrics.set(m);
    }

    fn count_removed(&self, reason: &'static str) {
        if let Some(m) = self.metrics.get() {
            m.removed.get_or_create(&[("reason", reason)]).inc();
        }
    }

    fn show_bytes(&self, bytes: u64) {
        if let Some(m) = self.metrics.get() {
            m.bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }

    /// Tells the hook that `digest` leaves (or is not archived). `false`
    /// when no line could be written: then it must stay.
    fn evidence_removed(&self, digest: Digest, bytes: u64, reason: String) -> bool {
        let Some(hook) = self.on_removed.get() else {
            return false;
        };
        let removal = Removal {
            digest,
            bytes,
            reason,
        };
        match hook(&removal) {
            Ok(()) => {
                self.count_removed("evidence");
                true
            }
            Err(e) => {
                tracing::warn!(sha256 = %digest, error = %e,
                    "cannot write the evidence_removed audit line: the archived robots.txt is kept");
                false
            }
        }
    }

    /// Bounds the kept robots store entries.
    pub(crate) fn with_entry_limits(mut self, limits: EntryLimits) -> Archive {
        self.entries = limits;
        self
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Keeps a text `origin` served (status `status`), found in force at
    /// `now`. Errors are logged: the archive never holds a fetch up.
    pub(crate) fn keep_text(
        &self,
        origin: &str,
        status: Option<u16>,
        evidence: &Evidence,
        text: &[u8],
        digest: Digest,
        now: SystemTime,
    ) {
        if let Err(e) = self.try_keep_text(origin, status, evidence, text, digest, now) {
            tracing::warn!(dir = %self.dir.display(), error = %e,
                "cannot archive a robots.txt: its audit lines name a text the archive lacks");
        }
    }

    fn try_keep_text(
        &self,
        origin: &str,
        status: Option<u16>,
        evidence: &Evidence,
        text: &[u8],
        digest: Digest,
        now: SystemTime,
    ) -> io::Result<()> {
        let mut state = self.state.lock();
        let cap = MAX_TEXT.min(self.max_bytes);
        if text.len() as u64 > cap {
            // Not archived: the lines that name it will be told why.
            if state.last.get(origin) != Some(&Last::Text(digest)) {
                state.last.put(origin.to_string(), Last::Text(digest));
                self.count_removed("over_cap");
                let reason = format!(
                    "not archived: {} bytes, over the {cap}-byte cap on one text (500 KiB, or audit.archive_max when smaller); served by {origin}",
                    text.len()
                );
                if !self.evidence_removed(digest, text.len() as u64, reason) {
                    tracing::warn!(%origin, sha256 = %digest, bytes = text.len(),
                        "a robots.txt over the archive's per-text cap is not archived");
                }
            }
            return Ok(());
        }
        let (text_path, meta_path) = paths(&self.dir, digest);
        let mut added = 0;
        let mut meta = match read_meta(&meta_path) {
            Ok(m) => m,
            Err(_) => {
                // New (or its metadata was lost): the text first, checked
                // against its name when read back.
                create_private_dir(text_path.parent().unwrap_or(&self.dir))?;
                write_atomically(&text_path, text, 0o600)?;
                added += text.len() as u64;
                Meta {
                    sha256: digest.to_string(),
                    bytes: text.len() as u64,
                    served: Vec::new(),
                }
            }
        };
        let time = humantime::format_rfc3339_seconds(now).to_string();
        let before = state.last.get(origin).cloned();
        match meta.served.iter_mut().find(|s| s.origin == origin) {
            Some(s) => {
                s.last_in_force = time;
                s.status = status;
                s.url.clone_from(&evidence.url);
                s.final_url.clone_from(&evidence.final_url);
                s.content_type.clone_from(&evidence.content_type);
                s.etag.clone_from(&evidence.etag);
                s.last_modified.clone_from(&evidence.last_modified);
            }
            None => meta.served.push(Served {
                origin: origin.to_string(),
                url: evidence.url.clone(),
                final_url: evidence.final_url.clone(),
                status,
                content_type: evidence.content_type.clone(),
                etag: evidence.etag.clone(),
                last_modified: evidence.last_modified.clone(),
                first_in_force: time.clone(),
                last_in_force: time,
            }),
        }
        // Many sites serve the same text (an empty file, `Disallow:`): the
        // origins that served it most recently are kept, not all.
        if meta.served.len() > MAX_SERVED {
            meta.served
                .sort_by(|a, b| b.last_in_force.cmp(&a.last_in_force));
            meta.served.truncate(MAX_SERVED);
        }
        let old_len = fs::metadata(&meta_path).map_or(0, |m| m.len());
        let json = serde_json::to_vec_pretty(&meta).map_err(io::Error::other)?;
        write_atomically(&meta_path, &json, 0o600)?;
        added += json.len() as u64;
        state.bytes = state.bytes.saturating_add(added).saturating_sub(old_len);
        state.last.put(origin.to_string(), Last::Text(digest));
        match before {
            Some(Last::Text(old)) if old == digest => {}
            Some(Last::Text(old)) => {
                // The old text may no longer be in force anywhere: worth a
                // prune again.
                state.prune_again_at = 0;
                let old_text = fs::read(paths(&self.dir, old).0).unwrap_or_default();
                tracing::info!(%origin, status = status.unwrap_or(0), sha256 = %digest,
                    previous = %old, changed_lines = changed_lines(&old_text, text),
                    "robots.txt changed");
            }
            _ => tracing::info!(%origin, status = status.unwrap_or(0), sha256 = %digest,
                bytes = text.len(), "robots.txt fetched (first time since start)"),
        }
        if state.bytes > self.max_bytes {
            self.prune(&mut state);
        }
        self.show_bytes(state.bytes);
        Ok(())
    }

    /// Keeps `origin`'s entry (replacing the one kept before). Errors are
    /// logged.
    pub(crate) fn save_entry(&self, kept: &KeptEntry) {
        let path = entry_path(&self.dir, &kept.origin);
        let saved = serde_json::to_vec(kept)
            .map_err(io::Error::other)
            .and_then(|json| {
                create_private_dir(path.parent().unwrap_or(&self.dir))?;
                write_atomically(&path, &json, 0o600)
            });
        if let Err(e) = saved {
            tracing::warn!(path = %path.display(), error = %e,
                "cannot keep a robots.txt entry: a restart fetches it again");
        }
        // Swept on the first save and then every tenth of the bound, so
        // the directory holds at most 1.1 times it, and a sweep's cost (a
        // stat per entry) is spread over as many saves as it checks.
        let sweep = {
            let mut state = self.state.lock();
            let every = (self.entries.max_entries / 10).max(1);
            match state.entry_saves {
                Some(n) if n + 1 < every => {
                    state.entry_saves = Some(n + 1);
                    false
                }
                _ => {
                    state.entry_saves = Some(0);
                    true
                }
            }
        };
        if sweep {
            self.sweep_entries(SystemTime::now());
        }
    }

    /// Removes the kept entries older than the age bound, then the least
    /// recently saved beyond the count bound. Returns how many are left.
    pub(crate) fn sweep_entries(&self, now: SystemTime) -> usize {
        let mut found: Vec<(SystemTime, PathBuf)> = Vec::new();
        let Ok(subs) = fs::read_dir(self.dir.join("entries")) else {
            return 0;
        };
        for sub in subs.flatten() {
            let Ok(files) = fs::read_dir(sub.path()) else {
                continue;
            };
            for file in files.flatten() {
                let saved = file
                    .metadata()
                    .and_then(|m| m.modified())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                found.push((saved, file.path()));
            }
        }
        let oldest = now
            .checked_sub(self.entries.max_age)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        found.sort_unstable();
        let excess = found.len().saturating_sub(self.entries.max_entries);
        let mut removed = 0;
        for (i, (saved, path)) in found.iter().enumerate() {
            if i >= excess && *saved >= oldest {
                break;
            }
            if fs::remove_file(path).is_ok() {
                removed += 1;
            }
        }
        if removed > 0 {
            tracing::debug!(removed, "removed kept robots.txt entries past their use");
        }
        found.len() - removed
    }

    /// Forgets `origin`'s kept entry (a purge): the next request fetches.
    pub(crate) fn forget_entry(&self, origin: &str) {
        let path = entry_path(&self.dir, origin);
        if let Err(e) = fs::remove_file(&path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot forget a kept robots.txt entry");
        }
    }

    /// `origin`'s kept entry and, for one with a file in force, its text
    /// (checked against its digest). `None` when none is kept, or it is
    /// unreadable, or its text is gone.
    pub(crate) fn load_entry(&self, origin: &str) -> Option<(KeptEntry, Option<Vec<u8>>)> {
        let bytes = fs::read(entry_path(&self.dir, origin)).ok()?;
        let kept: KeptEntry = serde_json::from_slice(&bytes).ok()?;
        if kept.origin != origin {
            return None;
        }
        let text = match &kept.sha256 {
            Some(sha) => Some(read(&self.dir, sha).ok()?.0),
            None => None,
        };
        Some((kept, text))
    }

    /// Records a fetch that gave no file, when the origin's outcome
    /// changed.
    pub(crate) fn keep_outcome(
        &self,
        origin: &str,
        url: &str,
        status: Option<u16>,
        outcome: &str,
        reason: &str,
        now: SystemTime,
    ) {
        let mut state = self.state.lock();
        let last = Last::Outcome(format!("{outcome} {}", status.unwrap_or(0)));
        if state.last.get(origin) == Some(&last) {
            return;
        }
        let line = OutcomeLine {
            time: humantime::format_rfc3339_seconds(now).to_string(),
            origin,
            url,
            status,
            outcome,
            reason,
        };
        let written = serde_json::to_vec(&line)
            .map_err(io::Error::other)
            .and_then(|mut l| {
                l.push(b'\n');
                append(&self.dir.join("outcomes.jsonl"), &l)?;
                Ok(l.len() as u64)
            });
        match written {
            Ok(_) => {
                state.last.put(origin.to_string(), last);
                self.rotate_outcomes();
            }
            Err(e) => tracing::warn!(dir = %self.dir.display(), error = %e,
                "cannot archive a robots.txt fetch outcome"),
        }
    }

    /// Keeps `outcomes.jsonl` within a sixteenth of the budget: past it,
    /// the file becomes `outcomes.jsonl.1` (replacing the one before).
    fn rotate_outcomes(&self) {
        let path = self.dir.join("outcomes.jsonl");
        if fs::metadata(&path).is_ok_and(|m| m.len() > self.max_bytes / 16) {
            let _ = fs::rename(&path, self.dir.join("outcomes.jsonl.1"));
        }
    }

    /// Brings the archive back under nine tenths of `audit.archive_max`
    /// (a hard limit):
    ///
    /// 1. texts no kept audit file names and no origin is in force by, the
    ///    oldest archived first;
    /// 2. then texts named or in force, those last used (found in force by
    ///    a fetch) longest ago first, each only once the removal hook wrote
    ///    its `evidence_removed` line.
    ///
    /// An audit file that cannot be read whole may name any text: every
    /// text is then taken as named. Only when the hook is missing or fails
    /// can the archive stay over its limit; the next try then waits until
    /// a tenth of the limit more was added.
    fn prune(&self, state: &mut State) {
        if state.bytes < state.prune_again_at {
            return;
        }
        let mut bodies = match walk_bodies(&self.dir) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot list the archive");
                return;
            }
        };
        let mut in_force: HashSet<Digest> = state
            .last
            .iter()
            .filter_map(|(_, l)| match l {
                Last::Text(d) => Some(*d),
                Last::Outcome(_) => None,
            })
            .collect();
        let known: HashSet<Digest> = bodies.iter().map(|b| b.digest).collect();
        // The texts of the entries kept for a restart are in force too.
        in_force.extend(kept_entry_digests(&self.dir));
        let named = match referenced_by_audit_files(&self.audit_path, &known) {
            Ok(named) => named,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e,
                    "cannot read every kept audit file: every archived robots.txt is taken as named");
                known.clone()
            }
        };
        let goal = self.max_bytes / 10 * 9;
        let mut unnamed = 0;
        bodies.sort_by_key(|b| b.archived);
        let mut rest = Vec::new();
        for body in bodies {
            if named.contains(&body.digest) || in_force.contains(&body.digest) {
                rest.push(body);
                continue;
            }
            if state.bytes <= goal {
                continue;
            }
            if self.remove_body(state, &body) {
                unnamed += 1;
                self.count_removed("unnamed");
            }
        }
        rest.sort_by_key(|b| b.used);
        let mut evidence = 0;
        for body in rest {
            if state.bytes <= goal {
                break;
            }
            let why = if named.contains(&body.digest) {
                "named by kept audit lines"
            } else {
                "in force"
            };
            let used = humantime::format_rfc3339_seconds(body.used);
            let reason = format!(
                "audit.archive_max ({} bytes) reached: the least recently used text ({why}, last found in force {used})",
                self.max_bytes
            );
            if !self.evidence_removed(body.digest, body.text_bytes, reason) {
                break;
            }
            if self.remove_body(state, &body) {
                evidence += 1;
            }
        }
        state.prune_again_at = if state.bytes > self.max_bytes {
            state.bytes.saturating_add(self.max_bytes / 10)
        } else {
            0
        };
        if state.bytes > self.max_bytes {
            tracing::warn!(dir = %self.dir.display(), bytes = state.bytes, max = self.max_bytes,
                unnamed, evidence,
                "the robots.txt archive is over audit.archive_max: the texts left are named by audit lines, and no evidence_removed line could be written");
        } else if unnamed + evidence > 0 {
            tracing::info!(dir = %self.dir.display(), unnamed, evidence,
                "removed archived robots.txt files (evidence: with an evidence_removed audit line)");
        }
    }

    /// Removes one text and its metadata; `true` if the text went.
    fn remove_body(&self, state: &mut State, body: &Body) -> bool {
        let (text, meta) = paths(&self.dir, body.digest);
        if fs::remove_file(&text).is_ok() {
            let _ = fs::remove_file(&meta);
            state.bytes = state.bytes.saturating_sub(body.bytes);
            true
        } else {
            false
        }
    }
}

/// Lines added or removed between two texts (as multisets of lines: a
/// line moved is no change).
fn changed_lines(old: &[u8], new: &[u8]) -> usize {
    let mut count: std::collections::HashMap<&[u8], isize> = std::collections::HashMap::new();
    for line in old.split(|&b| b == b'\n') {
        *count.entry(line.trim_ascii_end()).or_default() += 1;
    }
    for line in new.split(|&b| b == b'\n') {
        *count.entry(line.trim_ascii_end()).or_default() -= 1;
    }
    count.values().map(|n| n.unsigned_abs()).sum()
}

/// Reads an archived text and its metadata, checking the text against its
/// digest.
pub fn read(dir: &Path, sha256: &str) -> Result<(Vec<u8>, Meta), ArchiveError> {
    let full = complete(dir, sha256)?;
    let digest = Digest::parse(&full).ok_or_else(|| ArchiveError::BadDigest(sha256.into()))?;
    let (text_path, meta_path) = paths(dir, digest);
    let text = match fs::read(&text_path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ArchiveError::Missing(digest.to_string(), dir.to_path_buf()));
        }
        Err(source) => {
            return Err(ArchiveError::Io {
                path: text_path,
                source,
            });
        }
    };
    let found = Digest::of(&text);
    if found != digest {
        return Err(ArchiveError::Corrupt {
            path: text_path,
            expected: digest.to_string(),
            found: found.to_string(),
        });
    }
    let meta = read_meta(&meta_path).map_err(|e| match e {
        MetaError::Io(source) => ArchiveError::Io {
            path: meta_path.clone(),
            source,
        },
        MetaError::Bad(reason) => ArchiveError::BadMeta {
            path: meta_path.clone(),
            reason,
        },
    })?;
    Ok((text, meta))
}

/// The whole digest an unambiguous prefix of 8 or more hex digits names
/// among the archived texts (a digest shown cut, `38ee13a8…`, is one); a
/// whole digest as it is.
fn complete(dir: &Path, given: &str) -> Result<String, ArchiveError> {
    let hex = given
        .trim()
        .trim_end_matches('…')
        .trim_end_matches("...")
        .to_ascii_lowercase();
    if hex.len() == 64
        || !(8..64).contains(&hex.len())
        || !hex.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Ok(hex);
    }
    let sub = dir.join("bodies").join(&hex[..2]);
    let names = match fs::read_dir(&sub) {
        Ok(names) => names,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ArchiveError::Missing(hex, dir.to_path_buf()));
        }
        Err(source) => return Err(ArchiveError::Io { path: sub, source }),
    };
    let mut found: Vec<String> = names
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let digest = name.strip_suffix(".txt")?;
            (digest.len() == 64 && digest.starts_with(&hex)).then(|| digest.to_owned())
        })
        .collect();
    match found.len() {
        0 => Err(ArchiveError::Missing(hex, dir.to_path_buf())),
        1 => Ok(found.remove(0)),
        n => Err(ArchiveError::Ambiguous(hex, n)),
    }
}

fn entry_path(dir: &Path, origin: &str) -> PathBuf {
    let hex = Digest::of(origin.as_bytes()).to_string();
    dir.join("entries")
        .join(&hex[..2])
        .join(format!("{hex}.json"))
}

fn paths(dir: &Path, digest: Digest) -> (PathBuf, PathBuf) {
    let hex = digest.to_string();
    let sub = dir.join("bodies").join(&hex[..2]);
    (
        sub.join(format!("{hex}.txt")),
        sub.join(format!("{hex}.json")),
    )
}

enum MetaError {
    Io(io::Error),
    Bad(String),
}

fn read_meta(path: &Path) -> Result<Meta, MetaError> {
    let bytes = fs::read(path).map_err(MetaError::Io)?;
    serde_json::from_slice(&bytes).map_err(|e| MetaError::Bad(e.to_string()))
}

/// One archived text found on disk.
struct Body {
    digest: Digest,
    /// Its text and metadata files.
    bytes: u64,
    /// Its text.
    text_bytes: u64,
    archived: SystemTime,
    /// The last fetch that found it in force (its metadata's write).
    used: SystemTime,
}

fn walk_bodies(dir: &Path) -> io::Result<Vec<Body>> {
    let mut out = Vec::new();
    let root = dir.join("bodies");
    let subs = match fs::read_dir(&root) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for sub in subs.flatten() {
        let Ok(files) = fs::read_dir(sub.path()) else {
            continue;
        };
        for file in files.flatten() {
            let name = file.file_name();
            let Some(hex) = name.to_str().and_then(|n| n.strip_suffix(".txt")) else {
                continue;
            };
            let Some(digest) = Digest::parse(hex) else {
                continue;
            };
            let Ok(meta) = file.metadata() else {
                continue;
            };
            let archived = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let json = fs::metadata(file.path().with_extension("json")).ok();
            out.push(Body {
                digest,
                bytes: meta.len() + json.as_ref().map_or(0, |m| m.len()),
                text_bytes: meta.len(),
                archived,
                used: json
                    .and_then(|m| m.modified().ok())
                    .map_or(archived, |u| u.max(archived)),
            });
        }
    }
    Ok(out)
}

/// The kept audit files: the log at `audit_path` and the files beside it
/// whose names start with its name (its rotations, compressed or not).
pub(crate) fn kept_audit_files(audit_path: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (audit_path.parent(), audit_path.file_name()) else {
        return Vec::new();
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let Some(name) = name.to_str() else {
        return Vec::new();
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(name)))
        .map(|e| e.path())
        .collect()
}

/// An audit file's text: a gzip one (by its magic bytes, whatever its
/// name) decompressed as it is read.
pub(crate) fn read_audit_file(mut file: fs::File, _path: &Path) -> Box<dyn Read + Send> {
    use std::io::Seek;
    let mut magic = [0u8; 2];
    let gzip = file.read_exact(&mut magic).is_ok() && magic == [0x1f, 0x8b];
    let _ = file.rewind();
    if gzip {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    }
}

/// The digests among `known` that the kept audit files name, read as text
/// line by line. `Err` if a file cannot be read whole (then any text may
/// be named).
fn referenced_by_audit_files(
    audit_path: &Path,
    known: &HashSet<Digest>,
) -> io::Result<HashSet<Digest>> {
    let mut found = HashSet::new();
    for path in kept_audit_files(audit_path) {
        let file = fs::File::open(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        for line in io::BufReader::new(read_audit_file(file, &path)).split(b'\n') {
            let line =
                line.map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            for d in digests_named(&line) {
                if known.contains(&d) {
                    found.insert(d);
                }
            }
        }
    }
    Ok(found)
}

/// The digests of the texts the kept robots store entries are in force by.
fn kept_entry_digests(dir: &Path) -> HashSet<Digest> {
    let mut found = HashSet::new();
    let Ok(subs) = fs::read_dir(dir.join("entries")) else {
        return found;
    };
    for sub in subs.flatten() {
        let Ok(files) = fs::read_dir(sub.path()) else {
            continue;
        };
        for file in files.flatten() {
            let kept = fs::read(file.path())
                .ok()
                .and_then(|b| serde_json::from_slice::<KeptEntry>(&b).ok());
            if let Some(d) = kept.and_then(|k| k.sha256).and_then(|s| Digest::parse(&s)) {
                found.insert(d);
            }
        }
    }
    found
}

/// The `robots_sha256` values a line names.
fn digests_named(line: &[u8]) -> impl Iterator<Item = Digest> + '_ {
    const KEY: &[u8] = b"\"robots_sha256\":\"";
    memchr::memmem::find_iter(line, KEY).filter_map(move |at| {
        let start = at + KEY.len();
        let hex = line.get(start..start + 64)?;
        Digest::parse(std::str::from_utf8(hex).ok()?)
    })
}

fn append(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence() -> Evidence {
        Evidence {
            url: "http://a.example/robots.txt".into(),
            final_url: "http://a.example/robots.txt".into(),
            content_type: Some("text/plain".into()),
            ..Evidence::default()
        }
    }

    #[test]
    fn kept_entries_are_bounded_in_number_and_age() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut archive = Archive::open(dir.path(), 1 << 20, &dir.path().join("audit.jsonl"))
            .expect("open")
            .with_entry_limits(EntryLimits {
                max_entries: 1000,
                max_age: Duration::from_secs(3600),
            });
        let kept = |i: usize| KeptEntry {
            origin: format!("https://o{i}.example"),
            state: "allow_all".into(),
            reason: None,
            status: Some(404),
            fetched_at_ms: 0,
            expires_at_ms: 0,
            sha256: None,
            failures: 0,
        };
        // Saved a second apart, the last one now.
        let now = SystemTime::now();
        for i in 0..100 {
            archive.save_entry(&kept(i));
            let saved = now - Duration::from_secs(99 - i as u64);
            fs::File::options()
                .write(true)
                .open(entry_path(dir.path(), &kept(i).origin))
                .and_then(|f| f.set_modified(saved))
                .expect("set mtime");
        }
        archive.entries.max_entries = 20;
        assert_eq!(archive.sweep_entries(now), 20);
        assert!(
            archive.load_entry("https://o99.example").is_some(),
            "the newest stay"
        );
        assert!(archive.load_entry("https://o80.example").is_some());
        assert!(
            archive.load_entry("https://o79.example").is_none(),
            "the oldest go"
        );
        // Two hours on, every entry is past its use.
        assert_eq!(archive.sweep_entries(now + Duration::from_secs(7200)), 0);
        // Saves sweep as they go: never more than 1.1 times the bound.
        let files = || -> usize {
            fs::read_dir(dir.path().join("entries"))
                .expect("entries")
                .flatten()
                .map(|sub| fs::read_dir(sub.path()).map_or(0, |f| f.count()))
                .sum()
        };
        for i in 100..200 {
            archive.save_entry(&kept(i));
            assert!(files() <= 22, "{} entries kept", files());
        }
    }

    #[test]
    fn changed_lines_count_additions_and_removals() {
        let old = b"User-agent: *\nDisallow: /a\nDisallow: /b\n";
        let new = b"User-agent: *\nDisallow: /b\nDisallow: /c\nDisallow: /d\r\n";
        assert_eq!(changed_lines(old, new), 3);
        assert_eq!(changed_lines(old, old), 0);
        assert_eq!(changed_lines(b"a\nb\n", b"b\na\n"), 0);
    }

    #[test]
    fn digests_print_and_parse_as_hex() {
        let d = Digest::of(b"User-agent: *\nDisallow: /private\n");
        let hex = d.to_string();
        assert_eq!(hex.len(), 64);
        assert_eq!(Digest::parse(&hex), Some(d));
        assert_eq!(Digest::parse(&hex.to_uppercase()), Some(d));
        assert_eq!(Digest::parse("abc"), None);
        assert_eq!(Digest::parse(&"g".repeat(64)), None);
    }

    #[test]
    fn a_text_is_kept_once_with_each_origin_that_served_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = dir.path().join("audit.jsonl");
        let archive =
            Archive::open(&dir.path().join("robots-archive"), 1 << 20, &audit).expect("open");
        let text = b"User-agent: *\nDisallow: /private\n";
        let d = Digest::of(text);
        let t0 = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let t1 = t0 + std::time::Duration::from_secs(3600);
        archive.keep_text("http://a.example", Some(200), &evidence(), text, d, t0);
        archive.keep_text("http://a.example", Some(200), &evidence(), text, d, t1);
        archive.keep_text("http://b.example", Some(200), &evidence(), text, d, t1);
        let (read_text, meta) = read(archive.dir(), &d.to_string()).expect("read");
        assert_eq!(read_text, text);
        assert_eq!(meta.served.len(), 2);
        assert_eq!(meta.served[0].first_in_force, "2023-11-14T22:13:20Z");
        assert_eq!(meta.served[0].last_in_force, "2023-11-14T23:13:20Z");
        assert_eq!(meta.served[0].content_type.as_deref(), Some("text/plain"));
        // A prefix names it too, as the docs show it (cut, with an ellipsis).
        let hex = d.to_string();
        for prefix in [
            &hex[..8],
            &hex[..16],
            &format!("{}…", &hex[..16]),
            &hex.to_uppercase()[..12],
        ] {
            let (again, _) = read(archive.dir(), prefix).expect("read by prefix");
            assert_eq!(again, text, "{prefix}");
        }
        assert!(matches!(
            read(archive.dir(), &hex[..7]),
            Err(ArchiveError::BadDigest(_))
        ));
        let other = if hex.starts_with("00000000") {
            "11111111"
        } else {
            "00000000"
        };
        assert!(matches!(
            read(archive.dir(), other),
            Err(ArchiveError::Missing(..))
        ));
    }

    #[test]
    fn a_prefix_of_two_archived_digests_is_ambiguous() {
        let dir = tempfile::tempdir().expect("tempdir");
        let archive =
            Archive::open(dir.path(), 1 << 20, &dir.path().join("audit.jsonl")).expect("open");
        // Two texts whose digests share their first 8 hex digits are not to
        // be found by chance: the second is written under a name that does.
        let text = b"User-agent: *\nDisallow: /a\n";
        let d = Digest::of(text);
        archive.keep_text(
            "http://a.example",
            Some(200),
            &evidence(),
            text,
            d,
            SystemTime::now(),
        );
        let hex = d.to_string();
        let twin = format!("{}{}", &hex[..8], "f".repeat(56));
        let (path, _) = paths(dir.path(), d);
        fs::copy(&path, path.with_file_name(format!("{twin}.txt"))).expect("copy");
        assert!(matches!(
            read(dir.path(), &hex[..8]),
            Err(ArchiveError::Ambiguous(_, 2))
        ));
        assert!(read(dir.path(), &hex[..20]).is_ok() || hex[8..20] == twin[8..20]);
    }

    #[test]
    fn a_corrupted_text_is_detected_when_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let archive =
            Archive::open(dir.path(), 1 << 20, &dir.path().join("audit.jsonl")).expect("open");
        let text = b"User-agent: *\nDisallow: /\n";
        let d = Digest::of(text);
        archive.keep_text(
            "http://a.example",
            Some(200),
            &evidence(),
            text,
            d,
            SystemTime::now(),
        );
        let (path, _) = paths(dir.path(), d);
        fs::write(&path, b"User-agent: *\nDisallow:\n").expect("tamper");
        match read(dir.path(), &d.to_string()) {
            Err(ArchiveError::Corrupt { .. }) => {}
            other => panic!("expected Corrupt, got {other:?}"),
        }
        assert!(matches!(
            read(dir.path(), &Digest::of(b"other").to_string()),
            Err(ArchiveError::Missing(..))
        ));
        assert!(matches!(
            read(dir.path(), "nothex"),
            Err(ArchiveError::BadDigest(_))
        ));
    }

    #[test]
    fn over_budget_the_oldest_text_nobody_names_goes_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = dir.path().join("audit.jsonl");
        let root = dir.path().join("robots-archive");
        let texts: Vec<Vec<u8>> = (0..4)
            .map(|i| format!("User-agent: *\nDisallow: /{i}\n{}", "#".repeat(900)).into_bytes())
            .collect();
        let digests: Vec<Digest> = texts.iter().map(|t| Digest::of(t)).collect();
        // The first text is named by a kept (rotated, compressed) audit file.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        writeln!(
            gz,
            "{{\"url\":\"http://o0.example/0\",\"robots_sha256\":\"{}\"}}",
            digests[0]
        )
        .expect("gz");
        fs::write(
            dir.path().join("audit.jsonl.1.gz"),
            gz.finish().expect("gz"),
        )
        .expect("write");
        // Room for about three texts and their metadata.
        let archive = Archive::open(&root, 3 * 1400, &audit).expect("open");
        let start = SystemTime::now() - std::time::Duration::from_secs(60);
        for (i, (text, d)) in texts.iter().zip(&digests).enumerate() {
            archive.keep_text(
                &format!("http://o{i}.example"),
                Some(200),
                &evidence(),
                text,
                *d,
                SystemTime::now(),
            );
            // Distinct archive times (the text file's), oldest first.
            let (path, _) = paths(&root, *d);
            fs::File::options()
                .write(true)
                .open(path)
                .and_then(|f| f.set_modified(start + std::time::Duration::from_secs(i as u64)))
                .expect("set mtime");
        }
        // o1 moved on to a fourth file: its old text is no longer in force.
        archive.keep_text(
            "http://o1.example",
            Some(200),
            &evidence(),
            &texts[3],
            digests[3],
            SystemTime::now(),
        );
        let (_, _) = read(&root, &digests[0].to_string()).expect("named by an audit file: kept");
        assert!(matches!(
            read(&root, &digests[1].to_string()),
            Err(ArchiveError::Missing(..))
        ));
        read(&root, &digests[2].to_string()).expect("in force: kept");
        read(&root, &digests[3].to_string()).expect("in force: kept");
    }

    #[test]
    fn a_flood_of_large_texts_stays_within_the_limit_and_every_named_removal_is_said() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = dir.path().join("audit.jsonl");
        let root = dir.path().join("robots-archive");
        let max = 2_000_000;
        let archive = std::sync::Arc::new(Archive::open(&root, max, &audit).expect("open"));
        // The hook writes its line to the audit file, as the proxy's does.
        let removed: std::sync::Arc<Mutex<Vec<Removal>>> = Default::default();
        let (log, hook_audit) = (removed.clone(), audit.clone());
        archive.set_removal_hook(Box::new(move |r| {
            log.lock().push(r.clone());
            append(
                &hook_audit,
                format!(
                    "{{\"type\":\"evidence_removed\",\"robots_sha256\":\"{}\",\"reason\":\"{}\"}}\n",
                    r.digest, r.reason
                )
                .as_bytes(),
            )
        }));
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut named = Vec::new();
        for i in 0..40 {
            let text: Vec<u8> = (0..400_000)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    b' ' + (seed % 94) as u8
                })
                .collect();
            let d = Digest::of(&text);
            let origin = format!("http://o{i}.example");
            archive.keep_text(&origin, Some(200), &evidence(), &text, d, SystemTime::now());
            // A request judged by it: an audit line names it.
            append(
                &audit,
                format!("{{\"url\":\"{origin}/x\",\"robots_sha256\":\"{d}\"}}\n").as_bytes(),
            )
            .expect("audit line");
            named.push(d);
            let on_disk: u64 = walk_bodies(&root)
                .expect("walk")
                .iter()
                .map(|b| b.bytes)
                .sum();
            assert!(
                on_disk <= max,
                "{on_disk} bytes archived after {} texts",
                i + 1
            );
            assert_eq!(on_disk, archive.state.lock().bytes);
        }
        let removals = removed.lock().len();
        assert!(removals >= 35, "{removals} removals");
        let lines = fs::read_to_string(&audit).expect("audit");
        for d in &named {
            if read(&root, &d.to_string()).is_err() {
                assert!(
                    lines.contains(&format!("\"evidence_removed\",\"robots_sha256\":\"{d}\"")),
                    "{d} left without its evidence_removed line"
                );
            }
        }
        // The most recent text stays.
        read(&root, &named[39].to_string()).expect("the newest text is kept");
        // A text over the per-text cap is not archived, and said so.
        let big = vec![b'#'; MAX_TEXT as usize + 1];
        let d = Digest::of(&big);
        archive.keep_text(
            "http://big.example",
            Some(200),
            &evidence(),
            &big,
            d,
            SystemTime::now(),
        );
        assert!(read(&root, &d.to_string()).is_err());
        let lines = fs::read_to_string(&audit).expect("audit");
        assert!(
            lines.contains(&format!(
                "\"robots_sha256\":\"{d}\",\"reason\":\"not archived"
            )),
            "{}",
            &lines[lines.len().saturating_sub(400)..]
        );
    }

    #[test]
    fn without_a_hook_named_texts_stay() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = dir.path().join("audit.jsonl");
        let archive = Archive::open(dir.path(), 3000, &audit).expect("open");
        for i in 0..4 {
            let text = format!("User-agent: *\nDisallow: /{i}\n{}", "#".repeat(900)).into_bytes();
            let d = Digest::of(&text);
            let origin = format!("http://o{i}.example");
            archive.keep_text(&origin, Some(200), &evidence(), &text, d, SystemTime::now());
            read(dir.path(), &d.to_string()).expect("in force, no hook: kept");
        }
    }

    #[test]
    fn outcomes_are_recorded_when_they_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let archive =
            Archive::open(dir.path(), 1 << 20, &dir.path().join("audit.jsonl")).expect("open");
        let now = SystemTime::now();
        let url = "http://a.example/robots.txt";
        archive.keep_outcome("http://a.example", url, Some(404), "allow_all", "404", now);
        archive.keep_outcome("http://a.example", url, Some(404), "allow_all", "404", now);
        archive.keep_outcome(
            "http://a.example",
            url,
            Some(503),
            "disallow_all",
            "503",
            now,
        );
        let lines = fs::read_to_string(dir.path().join("outcomes.jsonl")).expect("read");
        assert_eq!(lines.lines().count(), 2, "{lines}");
        assert!(lines.contains("\"status\":503"));
    }
}
