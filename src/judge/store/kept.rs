//! Entries kept on disk for a restart and shared by the fleet: an entry
//! as the archive keeps it, and back ([`from_kept`]); every fetch's text
//! or outcome archived ([`archive_fetch`]).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::RobotsCacheSettings;
use super::entry::{Compiled, Entry, State};
use parking_lot::Mutex;

use crate::http::origin::Origin;
use crate::judge::archive::{Archive, Digest, KeptEntry};
use crate::judge::fetch::{Concluded, Fetched};
use crate::robots::Robots;

/// `entry` as the archive keeps it; `None` for the proxy's own shortage
/// (never kept).
pub(crate) fn kept_from(origin: &str, entry: &Entry) -> Option<KeptEntry> {
    let (state, sha256) = match &entry.state {
        State::Fresh(rules) => ("fresh", rules.digest()),
        State::Stale { rules, .. } => ("stale", rules.digest()),
        State::AllowAll { .. } => ("allow_all", None),
        State::DisallowAll { .. } => ("disallow_all", None),
        State::Refused { .. } => ("refused", None),
        State::BadTls { .. } => ("bad_tls", None),
        State::LocalError { .. } => return None,
    };
    if matches!(state, "fresh" | "stale") && sha256.is_none() {
        // Rules not from a fetch (inserted): nothing to restore them from.
        return None;
    }
    let now_i = Instant::now();
    let now_w = SystemTime::now();
    let wall_ms = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    };
    let expires = now_w + entry.expires.saturating_duration_since(now_i);
    Some(KeptEntry {
        origin: origin.to_string(),
        state: state.to_string(),
        reason: entry.state.reason().map(str::to_string),
        status: entry.status,
        fetched_at_ms: wall_ms(entry.fetched_at),
        expires_at_ms: wall_ms(expires),
        sha256: sha256.map(|d| d.to_string()),
        failures: entry.failures,
    })
}

/// `origin`'s entry as the archive kept it, compiled for `agents`, with
/// its times carried over to this process's clock. `None` when none is
/// kept or it cannot be read back whole.
/// The time left is never more than the settings in force now allow (a
/// lowered `robots.max_ttl` applies to kept entries too, and a clock that
/// was ahead when an entry was kept gives it no more time), and a stale
/// copy older than `robots.stale_max` is not restored.
pub(super) fn restore(
    archive: &Archive,
    origin: &str,
    agents: &[Arc<str>],
    settings: &RobotsCacheSettings,
) -> Option<Entry> {
    let (kept, text) = archive.load_entry(origin)?;
    from_kept(&kept, text.as_deref(), agents, settings, None)
}

/// An entry kept on disk or shared by the fleet, compiled for `agents`.
/// `left`: the time left as the fleet's Redis counts it; `None`: from
/// the kept expiry and this host's clock.
pub(crate) fn from_kept(
    kept: &KeptEntry,
    text: Option<&[u8]>,
    agents: &[Arc<str>],
    settings: &RobotsCacheSettings,
    shared_left: Option<Duration>,
) -> Option<Entry> {
    let reason = || kept.reason.clone().unwrap_or_default();
    let compiled = || {
        let text = text?;
        let digest = kept.sha256.as_deref().and_then(Digest::parse)?;
        Some(Compiled::new(&Robots::parse(text), agents, Some(digest)))
    };
    let state = match kept.state.as_str() {
        "fresh" => State::Fresh(compiled()?),
        "stale" => State::Stale {
            rules: compiled()?,
            reason: reason(),
        },
        "allow_all" => State::AllowAll { reason: reason() },
        "disallow_all" => State::DisallowAll { reason: reason() },
        // Not kept across a restart: `refused` and `bad_tls` (a destination
        // refused by policy, a certificate not trusted) depend on the
        // configuration (`allow_private_destinations`, `upstream.ca_files`),
        // which only a restart changes, so a restarted proxy fetches again
        // rather than keep a failure its new configuration may cure; and
        // any state it does not know.
        _ => return None,
    };
    let now_i = Instant::now();
    let now_w = SystemTime::now();
    let at = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
    let fetched_at = at(kept.fetched_at_ms);
    let age = now_w.duration_since(fetched_at).unwrap_or_default();
    if matches!(state, State::Stale { .. }) && age > settings.stale_max {
        return None;
    }
    let stored = shared_left.unwrap_or_else(|| {
        at(kept.expires_at_ms)
            .duration_since(now_w)
            .unwrap_or_default()
    });
    let left = match state {
        // A file's life since it was fetched stays within max_ttl.
        State::Fresh(_) | State::AllowAll { .. } => {
            stored.min(settings.max_ttl.saturating_sub(age))
        }
        _ => stored.min(settings.unreachable_retry),
    };
    Some(Entry {
        state,
        status: kept.status,
        fetched_at,
        fetched_instant: now_i.checked_sub(age).unwrap_or(now_i),
        expires: now_i + left,
        failures: kept.failures,
        fetched_by: None,
    })
}

/// The archive entries are kept in, and the order of their saves with
/// purges: a purge's forget never comes before the save of a fetch it
/// overtook.
pub(super) struct Kept {
    archive: Option<Arc<Archive>>,
    order: Mutex<()>,
}

impl Kept {
    pub(super) fn new(archive: Option<Arc<Archive>>) -> Kept {
        Kept {
            archive,
            order: Mutex::new(()),
        }
    }

    pub(super) fn archive(&self) -> Option<&Arc<Archive>> {
        self.archive.as_ref()
    }

    /// Saves `kept` for a restart unless `purged()` says a purge came
    /// after its fetch started.
    pub(super) fn save_unless(&self, kept: &KeptEntry, purged: impl FnOnce() -> bool) {
        let Some(archive) = &self.archive else { return };
        let _order = self.order.lock();
        if !purged() {
            archive.save_entry(kept);
        }
    }

    /// Forgets `origin`'s kept entry, then runs `purge` (which counts the
    /// purge), both before any save can come between.
    pub(super) fn forget<R>(&self, origin: &Origin, purge: impl FnOnce() -> R) -> R {
        let _order = self.order.lock();
        if let Some(archive) = &self.archive {
            archive.forget_entry(&origin.to_string());
        }
        purge()
    }

    /// Keeps what a fetch of `origin` brought back, if there is an
    /// archive.
    pub(super) fn archive_fetch(&self, origin: &str, fetched: &Fetched) {
        if let Some(archive) = &self.archive {
            archive_fetch(archive, origin, fetched);
        }
    }
}

/// Keeps what a fetch brought back in the archive: the text, or the
/// outcome of a fetch that gave none.
fn archive_fetch(archive: &Archive, origin: &str, fetched: &Fetched) {
    let now = SystemTime::now();
    let (outcome, reason) = match &fetched.outcome {
        Concluded::Parsed(_, Some(t)) => {
            archive.keep_text(origin, fetched.status, &t.evidence, &t.text, t.digest, now);
            return;
        }
        Concluded::Parsed(_, None) => return,
        Concluded::Unavailable(r) => ("allow_all", r),
        Concluded::RedirectLimit(r) => ("redirect_limit", r),
        Concluded::Unreachable(r) => ("unreachable", r),
        Concluded::Refused(r) => ("refused", r),
        Concluded::BadTls(r) => ("bad_tls", r),
        // The proxy's own shortage says nothing about the origin.
        Concluded::LocalError(_) => return,
    };
    let url = format!("{origin}/robots.txt");
    archive.keep_outcome(origin, &url, fetched.status, outcome, reason, now);
}
