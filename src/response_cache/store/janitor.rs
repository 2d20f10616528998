//! The janitor: the one thread that deletes the store's files. Whatever
//! removes objects (a purge, an invalidation, an eviction, a replaced or
//! damaged object, a download given up) changes the index in memory and
//! queues the files here, so that no request, and not the thread that
//! accepts every connection and answers the admin listener, waits for
//! thousands of unlinks.
//!
//! The queue is unbounded and counted (`deletions_pending`): it holds at
//! most what the index held (an object is queued once, when it leaves the
//! index: 40 bytes for the 399 its index entry took), plus the unfinished
//! downloads' temporary files.
//!
//! A body's name carries a sequence number never used twice, so a queued
//! body is deleted by name. A meta's name is its key's, which a new object
//! may take again after the old one was queued: a meta is deleted only
//! while its key is not indexed, checked under the commit lock (meta files
//! and the index change together under it, so the meta on disk is then
//! the indexed object's).
//!
//! Purges and the removals the origin asked for are written to the cache's
//! `purges` file (one JSON line each) before their deletions are queued; the
//! janitor empties it whenever it has nothing left to do. The start-up scan
//! applies what is in it to the metas it finds, so that an object purged
//! just before a crash, whose meta the janitor had not deleted yet, is not
//! served again. A graceful stop waits for the queue, for a while at most
//! ([`Janitor::abandon`] leaves the rest to the next start); otherwise
//! dropping the store finishes it ([`Janitor::close`]), so that a cache
//! opened again on the same directory does not meet it.

use parking_lot::Mutex;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Index, MetaHead, ObjKey, Stats, body_name, meta_name, object_file, parse_hex};

/// Files to delete.
pub(super) enum Job {
    /// Objects out of the index: each one's body, and its meta unless its
    /// key was stored again.
    Objects(Vec<(ObjKey, u64)>),
    /// Metas of unindexed keys (found at start): unless stored again.
    Metas(Vec<ObjKey>),
    /// Bodies by name (no meta names them).
    Bodies(Vec<(ObjKey, u64)>),
    /// Files no object names: bodies no meta names, unfinished bodies,
    /// strays.
    Files(Vec<PathBuf>),
    /// Answered when everything queued before it is done.
    Flush(tokio::sync::oneshot::Sender<()>),
    /// Holds the janitor until the sender is dropped (tests that look at
    /// the files while deletions are queued).
    #[cfg(test)]
    Hold(mpsc::Receiver<()>),
}

impl Job {
    /// Deletions it counts for in `pending`.
    fn units(&self) -> u64 {
        match self {
            Job::Objects(v) => v.len() as u64,
            Job::Metas(v) => v.len() as u64,
            Job::Bodies(v) => v.len() as u64,
            Job::Files(v) => v.len() as u64,
            Job::Flush(_) => 0,
            #[cfg(test)]
            Job::Hold(_) => 0,
        }
    }
}

/// What a purge removed, as the `purges` file keeps it.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(tag = "removed", rename_all = "kebab-case")]
pub(super) enum Rule {
    /// The objects of `url` (or of every URL it starts, `prefix`) stored
    /// at or before `before` (seconds since the epoch) whose body number
    /// is below `below` (the store's sequence when the purge began).
    Url {
        url: String,
        prefix: bool,
        before: u64,
        below: u64,
    },
    /// One object.
    Object { key: String, seq: u64 },
}

impl Rule {
    /// Whether the start-up scan must drop this object.
    fn removes(&self, key: &ObjKey, seq: u64, head: &MetaHead) -> bool {
        match self {
            Rule::Url {
                url,
                prefix,
                before,
                below,
            } => {
                let matches = if *prefix {
                    head.url.starts_with(url.as_str())
                } else {
                    head.url == *url
                };
                matches && head.stored_at <= *before && seq < *below
            }
            Rule::Object { key: k, seq: s } => *s == seq && parse_hex(k).as_ref() == Some(key),
        }
    }
}

/// The rules read from the `purges` file at start.
pub(super) struct Rules(Vec<Rule>);

impl Rules {
    pub(super) fn removes(&self, key: &ObjKey, seq: u64, head: &MetaHead) -> bool {
        self.0.iter().any(|r| r.removes(key, seq, head))
    }
}

const PURGES: &str = "purges";

/// The `purges` file, open for appending.
struct Journal {
    file: Option<std::fs::File>,
    /// Lines written since it was last emptied.
    lines: u64,
}

/// Logs a failed deletion (or purge record) at most once a minute, and
/// counts every one.
struct Errors {
    last: Mutex<Option<Instant>>,
    unlogged: AtomicU64,
}

const LOG_EVERY: Duration = Duration::from_secs(60);

impl Errors {
    fn report(&self, stats: &Stats, what: &str, path: &Path, e: &std::io::Error) {
        stats.delete_errors.fetch_add(1, Ordering::Relaxed);
        let mut last = self.last.lock();
        if last.is_some_and(|t| t.elapsed() < LOG_EVERY) {
            self.unlogged.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(Instant::now());
        drop(last);
        let unlogged = self.unlogged.swap(0, Ordering::Relaxed);
        tracing::warn!(path = %path.display(), error = %e, also_failed_unlogged = unlogged,
            "cache: {what} (logged once a minute; robots_proxy_response_cache_delete_errors_total counts them all)");
    }
}

/// What the janitor's thread and the store share.
struct Shared {
    objects: PathBuf,
    index: Arc<parking_lot::Mutex<Index>>,
    commit_lock: Arc<Mutex<()>>,
    stats: Arc<Stats>,
    /// Deletions queued and not done, plus the purges under way.
    pending: AtomicU64,
    journal: Mutex<Journal>,
    journal_path: PathBuf,
    errors: Errors,
    /// Set when the process stops before the queue is done: the rest is
    /// left to the next start.
    abandoned: AtomicBool,
}

impl Shared {
    fn unlink(&self, path: &Path) {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => self
                .errors
                .report(&self.stats, "could not delete a file", path, &e),
        }
    }

    /// Deletes `key`'s meta unless the key is indexed (stored again).
    fn unlink_meta(&self, key: &ObjKey) {
        let _commit = self.commit_lock.lock();
        if !self.index.lock().disk.contains(key) {
            self.unlink(&object_file(&self.objects, &meta_name(key)));
        }
    }

    fn run(&self, job: Job) {
        if self.abandoned.load(Ordering::Relaxed)
            && matches!(
                job,
                Job::Objects(_) | Job::Metas(_) | Job::Bodies(_) | Job::Files(_)
            )
        {
            return;
        }
        match job {
            Job::Objects(v) => {
                for (key, seq) in v {
                    if self.abandoned.load(Ordering::Relaxed) {
                        return;
                    }
                    self.unlink_meta(&key);
                    self.unlink(&object_file(&self.objects, &body_name(&key, seq)));
                    self.done(1);
                }
            }
            Job::Metas(v) => {
                for key in v {
                    if self.abandoned.load(Ordering::Relaxed) {
                        return;
                    }
                    self.unlink_meta(&key);
                    self.done(1);
                }
            }
            Job::Bodies(v) => {
                for (key, seq) in v {
                    if self.abandoned.load(Ordering::Relaxed) {
                        return;
                    }
                    self.unlink(&object_file(&self.objects, &body_name(&key, seq)));
                    self.done(1);
                }
            }
            Job::Files(v) => {
                for path in v {
                    if self.abandoned.load(Ordering::Relaxed) {
                        return;
                    }
                    self.unlink(&path);
                    self.done(1);
                }
            }
            Job::Flush(tx) => {
                let _ = tx.send(());
            }
            #[cfg(test)]
            Job::Hold(rx) => {
                let _ = rx.recv();
            }
        }
        self.idle();
    }

    fn done(&self, n: u64) {
        self.pending.fetch_sub(n, Ordering::SeqCst);
        self.stats.deletions_pending.fetch_sub(n, Ordering::Relaxed);
    }

    /// Empties the `purges` file once nothing is queued or under way: every
    /// purge it records is then done on disk.
    fn idle(&self) {
        if self.pending.load(Ordering::SeqCst) != 0 {
            return;
        }
        let mut j = self.journal.lock();
        if j.lines == 0 || self.pending.load(Ordering::SeqCst) != 0 {
            return;
        }
        if let Some(f) = &j.file {
            match f.set_len(0) {
                Ok(()) => j.lines = 0,
                Err(e) => self.errors.report(
                    &self.stats,
                    "could not empty the purges file",
                    &self.journal_path,
                    &e,
                ),
            }
        }
    }
}

/// The janitor as the store holds it.
pub(super) struct Janitor {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    shared: Arc<Shared>,
}

/// A purge under way: the `purges` file is not emptied before it ends.
pub(super) struct Purging<'a>(&'a Shared);

impl Drop for Purging<'_> {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Purging<'_> {
    /// Records `rule` in the `purges` file (before its deletions are
    /// queued). A failure is reported and the purge goes on: it only
    /// loses its protection against a crash.
    pub(super) fn record(&self, rule: &Rule) {
        let Ok(mut line) = serde_json::to_vec(rule) else {
            return;
        };
        line.push(b'\n');
        let mut j = self.0.journal.lock();
        let Some(f) = j.file.as_mut() else { return };
        match f.write_all(&line) {
            Ok(()) => j.lines += 1,
            Err(e) => {
                drop(j);
                let path = &self.0.journal_path;
                self.0
                    .errors
                    .report(&self.0.stats, "could not record a purge", path, &e);
            }
        }
    }
}

impl Janitor {
    /// A janitor for the store in `dir` (objects under `objects`), its
    /// thread not started yet (jobs queued meanwhile wait for it); with the
    /// rules the `purges` file holds, for the start-up scan.
    pub(super) fn new(
        dir: &Path,
        objects: &Path,
        index: Arc<parking_lot::Mutex<Index>>,
        commit_lock: Arc<Mutex<()>>,
        stats: Arc<Stats>,
    ) -> (Janitor, mpsc::Receiver<Job>, Rules) {
        let path = dir.join(PURGES);
        let rules = read_rules(&path);
        // Emptied once the scan's deletions are done.
        let lines = std::fs::metadata(&path).map_or(0, |m| u64::from(m.len() > 0));
        let file = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .mode(super::FILE_MODE)
                .open(&path)
        };
        let errors = Errors {
            last: Mutex::new(None),
            unlogged: AtomicU64::new(0),
        };
        let file = match file {
            Ok(f) => Some(f),
            Err(e) => {
                errors.report(&stats, "could not open the purges file", &path, &e);
                None
            }
        };
        let (tx, rx) = mpsc::channel();
        let janitor = Janitor {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(None),
            shared: Arc::new(Shared {
                objects: objects.to_path_buf(),
                index,
                commit_lock,
                stats,
                pending: AtomicU64::new(0),
                journal: Mutex::new(Journal { file, lines }),
                journal_path: path,
                errors,
                abandoned: AtomicBool::new(false),
            }),
        };
        (janitor, rx, rules)
    }

    /// Starts the thread (the cache does not open without it: a caller
    /// holding the commit lock could not delete a meta itself).
    pub(super) fn start(&self, rx: mpsc::Receiver<Job>) -> std::io::Result<()> {
        let shared = self.shared.clone();
        let handle = std::thread::Builder::new()
            .name("cache-janitor".into())
            .spawn(move || {
                shared.idle();
                while let Ok(job) = rx.recv() {
                    shared.run(job);
                }
            })?;
        *self.thread.lock() = Some(handle);
        Ok(())
    }

    /// Queues `job`, or does it here once the janitor is closed (when the
    /// store is dropped: no one holds the commit lock then).
    pub(super) fn queue(&self, job: Job) {
        let units = job.units();
        if units == 0
            && matches!(
                job,
                Job::Objects(_) | Job::Metas(_) | Job::Bodies(_) | Job::Files(_)
            )
        {
            return;
        }
        self.shared.pending.fetch_add(units, Ordering::SeqCst);
        self.shared
            .stats
            .deletions_pending
            .fetch_add(units, Ordering::Relaxed);
        let job = match self.tx.lock().as_ref() {
            Some(tx) => match tx.send(job) {
                Ok(()) => return,
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        self.shared.run(job);
    }

    /// Marks a purge under way until the value is dropped.
    pub(super) fn purging(&self) -> Purging<'_> {
        self.shared.pending.fetch_add(1, Ordering::SeqCst);
        Purging(&self.shared)
    }

    /// Resolves once everything queued so far is done.
    pub(super) fn settled(&self) -> impl Future<Output = ()> + use<> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.queue(Job::Flush(tx));
        async move {
            let _ = rx.await;
        }
    }

    /// Stops deleting: what is queued is left to the next start (which
    /// deletes it: the purges are recorded, and the other files are not
    /// indexed again or are evicted again). The `purges` file is kept.
    pub(super) fn abandon(&self) {
        self.shared.abandoned.store(true, Ordering::Relaxed);
    }

    /// Holds the janitor until the returned sender is dropped.
    #[cfg(test)]
    pub(super) fn hold(&self) -> mpsc::Sender<()> {
        let (tx, rx) = mpsc::channel();
        self.queue(Job::Hold(rx));
        tx
    }

    /// Stops taking jobs, finishes those queued and waits for the thread
    /// to end. Later jobs are done by their callers.
    pub(super) fn close(&self) {
        drop(self.tx.lock().take());
        let handle = self.thread.lock().take();
        if let Some(h) = handle
            && h.join().is_err()
        {
            tracing::warn!("cache: the janitor thread ended with a panic");
        }
    }
}

/// The rules in the `purges` file; a line that does not parse (the last
/// one, cut short by a crash) is skipped.
fn read_rules(path: &Path) -> Rules {
    let Ok(f) = std::fs::File::open(path) else {
        return Rules(Vec::new());
    };
    Rules(
        std::io::BufReader::new(f)
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| serde_json::from_str(&l).ok())
            .collect(),
    )
}
