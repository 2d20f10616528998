//! One origin's robots.txt entry: its state (a file's compiled rules, or
//! why none applies), its lifetimes, and how a fetch becomes one
//! ([`Entry::from_fetch`]): RFC 9309's status policy, stale-on-error and
//! the retry schedule of an unreachable file. Pure: no lock, no I/O.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::RobotsCacheSettings;
use crate::judge::archive::Digest;
use crate::judge::fetch::{Concluded, Fetched};
use crate::robots::{AgentRules, Robots};

/// What a cached origin entry says applies to the origin's requests, with
/// the reason for every state that is not a freshly fetched file.
#[derive(Clone, Debug)]
pub enum State {
    /// 2xx: the file's rules apply.
    Fresh(Compiled),
    /// robots.txt could not be fetched again now (the origin unreachable,
    /// or the proxy short of a local resource), but a copy fetched earlier
    /// is still used; `reason` says why it was not refreshed.
    Stale { rules: Compiled, reason: String },
    /// 4xx or too many redirects: everything allowed.
    AllowAll { reason: String },
    /// 5xx, 429 or network failure, no usable copy: everything disallowed.
    DisallowAll { reason: String },
    /// Not fetched: the destination policy forbids the origin (or a
    /// robots.txt redirect); requests are refused.
    Refused { reason: String },
    /// TLS with the origin failed: requests get 502 (a copy fetched
    /// earlier is not used, as requests could not reach the origin either).
    BadTls { reason: String },
    /// The proxy ran short of file descriptors, memory or local ports and
    /// no copy is usable: everything disallowed for this request only,
    /// never cached (the next request fetches again).
    LocalError { reason: String },
}

impl State {
    /// Short name used in audit lines, headers and `/explain`.
    pub fn name(&self) -> &'static str {
        match self {
            State::Fresh(_) => "ok",
            State::Stale { .. } => "stale",
            State::AllowAll { .. } => "unavailable",
            State::DisallowAll { .. } => "unreachable",
            State::Refused { .. } => "refused",
            State::BadTls { .. } => "bad_tls",
            State::LocalError { .. } => "local_error",
        }
    }

    /// Why the state is not a freshly fetched file (`None` if it is).
    pub(crate) fn reason(&self) -> Option<&str> {
        match self {
            State::Fresh(_) => None,
            State::Stale { reason, .. }
            | State::AllowAll { reason }
            | State::DisallowAll { reason }
            | State::Refused { reason }
            | State::BadTls { reason }
            | State::LocalError { reason } => Some(reason),
        }
    }

    /// The robots.txt rules in use, fresh or stale.
    pub(crate) fn rules(&self) -> Option<&Compiled> {
        match self {
            State::Fresh(rules) | State::Stale { rules, .. } => Some(rules),
            _ => None,
        }
    }
}

/// The compiled rules of one robots.txt file for each agent token the
/// proxy uses. Agents that select the same groups share one
/// [`AgentRules`].
#[derive(Clone, Debug)]
pub struct Compiled(
    Arc<[(Arc<str>, Arc<AgentRules>)]>,
    Option<Digest>,
    /// The file's `License:` lines (RSL 1.0), global: line and URL.
    Arc<[(u32, Box<str>)]>,
);

impl Compiled {
    /// Compiles `robots` for `agents` (product tokens); `digest` is the
    /// SHA-256 of the text it was parsed from, when it was fetched.
    pub(crate) fn new(robots: &Robots, agents: &[Arc<str>], digest: Option<Digest>) -> Compiled {
        let tokens: Vec<&str> = agents.iter().map(|a| &**a).collect();
        let rules = robots.agent_rules_shared(&tokens);
        Compiled(
            agents.iter().cloned().zip(rules).collect(),
            digest,
            robots.licenses().into(),
        )
    }

    /// The file's `License:` lines (RSL 1.0): line number and URL.
    pub(crate) fn licenses(&self) -> &[(u32, Box<str>)] {
        &self.2
    }

    /// The SHA-256 of the text these rules were parsed from (its name in
    /// the archive).
    pub(crate) fn digest(&self) -> Option<Digest> {
        self.1
    }

    /// The rules for `token`, if it was compiled.
    pub(crate) fn get(&self, token: &str) -> Option<&Arc<AgentRules>> {
        self.0.iter().find(|(t, _)| **t == *token).map(|(_, r)| r)
    }

    /// Bytes held, counting shared rules once.
    fn memory_usage(&self) -> usize {
        let mut total = std::mem::size_of_val(&*self.0)
            + 16
            + self.2.iter().map(|(_, u)| 20 + u.len()).sum::<usize>();
        for (i, (_, rules)) in self.0.iter().enumerate() {
            if !self.0[..i].iter().any(|(_, r)| Arc::ptr_eq(r, rules)) {
                total += rules.memory_usage();
            }
        }
        total
    }
}

/// One origin's robots.txt state.
#[derive(Debug)]
pub struct Entry {
    pub state: State,
    /// Final HTTP status of the last fetch, if one arrived.
    pub(crate) status: Option<u16>,
    /// When the rules in use were fetched (for `Stale`: the old copy's time).
    pub(crate) fetched_at: SystemTime,
    pub(super) fetched_instant: Instant,
    pub(crate) expires: Instant,
    /// Fetches in a row that found the origin unreachable (for backoff).
    pub(super) failures: u32,
    /// In a fleet, the node whose fetch this is.
    pub(crate) fetched_by: Option<Arc<str>>,
}

impl Entry {
    /// Approximate bytes held: the entry and its compiled rules.
    pub(crate) fn memory_usage(&self) -> usize {
        let rules = self.state.rules().map_or(0, Compiled::memory_usage);
        std::mem::size_of::<Self>() + self.state.reason().map_or(0, str::len) + rules
    }

    /// The last 2xx copy and when it was fetched, for stale-on-error: the
    /// rules in use whenever a file applies (fresh or stale), as a 4xx
    /// answer ends a file's life and a failure keeps it.
    fn last_good(&self) -> Option<(Compiled, Instant, SystemTime)> {
        self.state
            .rules()
            .map(|c| (c.clone(), self.fetched_instant, self.fetched_at))
    }

    /// Seconds since the rules in use were fetched.
    pub(crate) fn age(&self) -> Duration {
        self.fetched_instant.elapsed()
    }

    /// False if a robots.txt file applies but was not compiled for `token`.
    pub(crate) fn covers(&self, token: &str) -> bool {
        self.state
            .rules()
            .is_none_or(|compiled| compiled.get(token).is_some())
    }
}

#[cfg(test)]
impl Entry {
    /// An entry in `state`, fetched now and due again in `ttl`, for tests
    /// of what reads entries.
    pub(crate) fn with_state(state: State, ttl: Duration) -> Entry {
        let now = Instant::now();
        Entry {
            state,
            status: None,
            fetched_at: SystemTime::now(),
            fetched_instant: now,
            expires: now + ttl,
            failures: 0,
            fetched_by: None,
        }
    }
}

/// How a lookup was served (for metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreLookup {
    Hit,
    Miss,
    Expired,
}

/// The first wait after robots.txt was found unreachable: short, so a
/// brief outage does not disallow a whole site for long.
const FIRST_RETRY: Duration = Duration::from_secs(30);

/// When to fetch an unreachable robots.txt again: the origin's own
/// `Retry-After` (429, 503) if it gave one, else 30 s doubling with each
/// failure in a row; never more than `cap` (`robots.unreachable_retry`) and
/// never less than a second.
pub(crate) fn retry_delay(cap: Duration, failures: u32, retry_after: Option<Duration>) -> Duration {
    let wait = retry_after.unwrap_or_else(|| {
        let doublings = failures.saturating_sub(1).min(16);
        FIRST_RETRY.saturating_mul(1 << doublings)
    });
    wait.min(cap).max(Duration::from_secs(1).min(cap))
}

impl Entry {
    /// Applies RFC 9309's status policy and the lifetimes of `s` to a
    /// finished fetch, and compiles a parsed file for `agents`.
    /// `previous`: the entry it replaces, for stale-on-error and the count
    /// of failures in a row.
    pub(crate) fn from_fetch(
        s: &RobotsCacheSettings,
        previous: Option<&Entry>,
        fetched: Fetched,
        agents: &[Arc<str>],
    ) -> Entry {
        let now = Instant::now();
        let wall = SystemTime::now();
        let ttl = |max_age: Option<Duration>| match max_age {
            Some(age) => age.clamp(s.min_ttl, s.max_ttl),
            None => s.default_ttl,
        };
        let previous_good = previous.and_then(Entry::last_good);
        // Failed fetches in a row, this one included if it failed; the
        // proxy's own shortage neither counts nor resets.
        let failures = match &fetched.outcome {
            Concluded::Unreachable(_) => previous.map_or(0, |p| p.failures).saturating_add(1),
            Concluded::LocalError(_) => previous.map_or(0, |p| p.failures),
            _ => 0,
        };
        let fresh = |state, expires| (state, expires, wall, now);
        let (state, expires, fetched_at, fetched_instant) = match fetched.outcome {
            Concluded::Parsed(robots, text) => fresh(
                State::Fresh(Compiled::new(&robots, agents, text.map(|t| t.digest))),
                now + ttl(fetched.max_age),
            ),
            Concluded::Unavailable(reason) | Concluded::RedirectLimit(reason) => {
                fresh(State::AllowAll { reason }, now + ttl(fetched.max_age))
            }
            Concluded::Refused(reason) => {
                fresh(State::Refused { reason }, now + s.unreachable_retry)
            }
            Concluded::BadTls(reason) => fresh(State::BadTls { reason }, now + s.unreachable_retry),
            // The proxy's own shortage: a usable copy is used, else all is
            // disallowed, for the requests waiting now only (due at once).
            Concluded::LocalError(reason) => match previous_good {
                Some((rules, at, at_wall)) if now.duration_since(at) <= s.stale_max => {
                    (State::Stale { rules, reason }, now, at_wall, at)
                }
                _ => fresh(State::LocalError { reason }, now),
            },
            Concluded::Unreachable(reason) => {
                let retry = now + retry_delay(s.unreachable_retry, failures, fetched.retry_after);
                match previous_good {
                    Some((rules, at, at_wall)) if now.duration_since(at) <= s.stale_max => {
                        (State::Stale { rules, reason }, retry, at_wall, at)
                    }
                    _ => fresh(State::DisallowAll { reason }, retry),
                }
            }
        };
        Entry {
            state,
            status: fetched.status,
            fetched_at,
            fetched_instant,
            expires,
            failures,
            fetched_by: None,
        }
    }

    /// The entry of a fetch that failed inside the proxy (its task
    /// panicked): everything disallowed for the requests waiting now, the
    /// next request fetches again.
    pub(crate) fn internal_error() -> Entry {
        let now = Instant::now();
        Entry {
            state: State::LocalError {
                reason: "internal error fetching robots.txt".into(),
            },
            status: None,
            fetched_at: SystemTime::now(),
            fetched_instant: now,
            expires: now,
            failures: 0,
            fetched_by: None,
        }
    }
}
