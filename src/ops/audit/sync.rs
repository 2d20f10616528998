//! `audit.sync`: when written audit lines are forced to the disk with
//! `fdatasync`, so that a power loss or kernel crash cannot lose lines the
//! proxy acted on. A process crash loses nothing in any mode: every line is
//! in the kernel's page cache before the response is sent.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

#[cfg(test)]
use parking_lot::MutexGuard;
use parking_lot::{Condvar, Mutex};
use prometheus_client::metrics::counter::Counter;
use serde::{Deserialize, Deserializer};

/// `audit.sync`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Never: the kernel writes lines out when it will (about 30 s).
    None,
    /// At most once a second, from a thread of its own, when lines were
    /// written: a power loss loses at most the last second.
    #[default]
    Interval,
    /// Before every line counts as written (and before the response):
    /// nothing acted on is lost. A thread of its own syncs every line
    /// written since its last sync at once (group commit).
    Every,
}

const EXPECTED: &str = "\"none\", \"interval\" (at most once a second) or \"every\" (each line)";

impl<'de> Deserialize<'de> for SyncPolicy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SyncPolicy, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = SyncPolicy;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<SyncPolicy, E> {
                match text {
                    "none" => Ok(SyncPolicy::None),
                    "interval" => Ok(SyncPolicy::Interval),
                    "every" => Ok(SyncPolicy::Every),
                    other => Err(E::custom(format!(
                        "audit.sync is {other:?}: it must be {EXPECTED}"
                    ))),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// How often `interval` syncs.
pub(crate) const INTERVAL: Duration = Duration::from_secs(1);

/// What the interval thread shares with the writer: a handle on the open
/// file (a duplicate of the writer's descriptor) and whether lines were
/// written since the last sync.
#[derive(Default)]
pub(crate) struct Shared {
    file: Mutex<Option<File>>,
    dirty: AtomicBool,
    /// `robots_proxy_audit_syncs_total`.
    pub(crate) syncs: Counter,
    /// `every`: lines written so far (each line's ticket is its count).
    written: AtomicU64,
    /// `every`: what the syncs have covered.
    group: Mutex<Group>,
    /// Woken when a line is written and when a sync ends.
    changed: Condvar,
    /// What the syncs have covered, for requests that wait without
    /// blocking their thread.
    durable: tokio::sync::watch::Sender<Group>,
}

/// Group commit's state: the lines known on the disk and the lines a
/// failed sync left unsure.
#[derive(Clone, Debug, Default)]
pub(crate) struct Group {
    durable: u64,
    /// Tickets after the first and up to the second: their sync failed.
    failed: Option<(u64, u64, String)>,
}

impl Group {
    /// Whether the line of `ticket` is on the disk (`Ok`), lost to a
    /// failed sync (`Err`), or not known yet (`None`).
    fn covers(&self, ticket: u64) -> Option<io::Result<()>> {
        if let Some((after, upto, error)) = &self.failed
            && ticket > *after
            && ticket <= *upto
        {
            return Some(Err(io::Error::other(error.clone())));
        }
        (self.durable >= ticket).then_some(Ok(()))
    }
}

impl Shared {
    /// Lines were written to the file.
    pub(crate) fn mark(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    /// Syncs the file if lines were written since the last sync. Called by
    /// the interval thread, and before the file is replaced at a reopen.
    pub(crate) fn sync_if_dirty(&self) -> io::Result<()> {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let file = self.file.lock();
        match file.as_ref() {
            Some(f) => self.sync(f).inspect_err(|_| self.mark()),
            None => Ok(()),
        }
    }

    /// `fdatasync` on `file`, counted.
    pub(crate) fn sync(&self, file: &File) -> io::Result<()> {
        file.sync_data()?;
        self.syncs.inc();
        Ok(())
    }

    /// The file lines now go to (a duplicate of `file`'s descriptor).
    pub(crate) fn set_file(&self, file: &File) -> io::Result<()> {
        *self.file.lock() = Some(file.try_clone()?);
        Ok(())
    }

    /// `every`: a line was written (called under the writer's lock, after
    /// the write): its ticket for [`Shared::wait_durable`].
    pub(crate) fn written(&self) -> u64 {
        let ticket = self.written.fetch_add(1, Ordering::AcqRel) + 1;
        let _group = self.group.lock();
        self.changed.notify_all();
        ticket
    }

    /// Holds the file syncs go through: no sync can run meanwhile.
    #[cfg(test)]
    pub(crate) fn hold_file(&self) -> MutexGuard<'_, Option<File>> {
        self.file.lock()
    }

    /// `every`: lines written so far.
    #[cfg(test)]
    pub(crate) fn written_count(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// `every`: every line written so far on the disk, before the file
    /// is replaced (called under the writer's lock).
    pub(crate) fn all_durable(&self) -> io::Result<()> {
        self.wait_durable(self.written.load(Ordering::Acquire))
    }

    /// `every`: returns once a sync begun after the line of `ticket` was
    /// written has ended; `Err` when that sync failed. Blocks the thread.
    pub(crate) fn wait_durable(&self, ticket: u64) -> io::Result<()> {
        let mut group = self.group.lock();
        loop {
            if let Some(result) = group.covers(ticket) {
                return result;
            }
            self.changed.wait(&mut group);
        }
    }

    /// [`Shared::wait_durable`] without blocking the thread: the task
    /// waits, the thread serves others meanwhile.
    pub(crate) async fn durable(&self, ticket: u64) -> io::Result<()> {
        let mut rx = self.durable.subscribe();
        match rx.wait_for(|g| g.covers(ticket).is_some()).await {
            Ok(group) => group.covers(ticket).unwrap_or(Ok(())),
            Err(_) => Err(io::Error::other("the audit log's sync thread is gone")),
        }
    }

    /// One round of the sync thread: waits for lines written and not yet
    /// synced (at most `patience`), then syncs every line written until
    /// then with one `fdatasync` (group commit). False when nothing came.
    fn sync_round(&self, patience: Duration) -> bool {
        let target = {
            let mut group = self.group.lock();
            let pending = |g: &Group| {
                let attempted = g.failed.as_ref().map_or(0, |f| f.1).max(g.durable);
                self.written.load(Ordering::Acquire) > attempted
            };
            if !pending(&group) {
                let _ = self.changed.wait_for(&mut group, patience);
                if !pending(&group) {
                    return false;
                }
            }
            self.written.load(Ordering::Acquire)
        };
        let result = match self.file.lock().as_ref() {
            Some(f) => self.sync(f),
            None => Ok(()),
        };
        let mut group = self.group.lock();
        match result {
            Ok(()) => group.durable = group.durable.max(target),
            Err(e) => {
                tracing::error!(error = %e, "cannot sync the audit log to disk");
                group.failed = Some((group.durable, target, e.to_string()));
            }
        }
        self.changed.notify_all();
        self.durable.send_replace(group.clone());
        true
    }
}

/// Starts the thread that syncs lines for `every` (group commit); it
/// ends when the log is dropped.
pub(crate) fn start_every(shared: &Arc<Shared>) -> io::Result<()> {
    let weak: Weak<Shared> = Arc::downgrade(shared);
    std::thread::Builder::new()
        .name("audit-sync".into())
        .spawn(move || {
            loop {
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                shared.sync_round(INTERVAL);
            }
        })
        .map(drop)
}

/// Starts the thread that syncs `shared` once a second while lines come;
/// it ends when the log is dropped.
pub(crate) fn start_interval(shared: &Arc<Shared>, path: &Path) -> io::Result<()> {
    let weak: Weak<Shared> = Arc::downgrade(shared);
    let path = path.to_owned();
    std::thread::Builder::new()
        .name("audit-sync".into())
        .spawn(move || {
            loop {
                std::thread::sleep(INTERVAL);
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                if let Err(e) = shared.sync_if_dirty() {
                    tracing::error!(path = %path.display(), error = %e,
                        "cannot sync the audit log to disk");
                }
            }
        })
        .map(drop)
}

/// Syncs the directory holding `path`, so a file just created in it (at
/// start, or after a rotation) is found after a power loss.
pub(crate) fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}
