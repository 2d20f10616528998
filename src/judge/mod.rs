//! The one place a request is judged: origin + path + agent → decision,
//! with the reason that produced it.

pub(crate) mod archive;
pub mod fetch;
pub(crate) mod fetch_budget;
pub(crate) mod licensing;
pub(crate) mod metrics;
pub mod politeness;
pub mod signals;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

use crate::http::destination;
use crate::http::origin::Origin;
use crate::judge::store::{Compiled, Entry, RobotsCache, State};
use crate::robots::{Rule, RuleRef};

/// What a usage preference that disallows a declared purpose does
/// (`usage.mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsageMode {
    /// 403 with the preference line, before anything is fetched.
    #[default]
    Enforce,
    /// Forward, and add `X-Robots-Proxy-Usage` to the response and the
    /// audit line.
    Annotate,
}

/// Why robots.txt could not be had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The origin: an error status, a network failure, a timeout.
    Origin,
    /// The proxy ran short of file descriptors, memory or local ports: not
    /// the origin's fault, and the next request fetches again.
    LocalShortage,
}

/// What happens to a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Forward it; `rule` is the allow rule that matched, if any.
    Allowed { rule: Option<RuleRef> },
    /// robots.txt disallows it; `judged_as` is the path that was
    /// disallowed when it is another reading of the request path (one the
    /// origin may resolve it to, see [`crate::robots::canon`]).
    Disallowed {
        rule: RuleRef,
        judged_as: Option<Box<str>>,
    },
    /// robots.txt could not be fetched and no copy is usable: all
    /// disallowed; `cause` says whose fault it is.
    Unreachable {
        reason: String,
        retry_after: Duration,
        cause: Cause,
    },
    /// Not yet: the origin's Crawl-delay, or the user's `max_rps` quota.
    RateLimited { retry_after: Duration, limit: Limit },
    /// Refused by policy before robots.txt (private destination, loop, ...).
    Refused { reason: String },
    /// The origin failed TLS verification: 502 with the reason.
    BadGateway { reason: String },
    /// Allowed by robots.txt, but not forwarded as sent (a body on a
    /// method that defines none, which an origin may read as a second
    /// request): 400 with the reason.
    BadRequest { reason: String },
    /// Crawlable, but the site's usage preference for a declared purpose
    /// is `n` (`usage.mode = "enforce"`).
    /// Boxed: rare, and every request's future carries a `Decision`.
    UsageDisallowed(Box<UsageNote>),
}

impl Decision {
    /// Short name used in metrics, audit lines and headers.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Decision::Allowed { .. } => "allowed",
            Decision::Disallowed { .. } => "disallowed",
            Decision::Unreachable { .. } => "unreachable",
            Decision::RateLimited { .. } => "rate_limited",
            Decision::Refused { .. } => "refused",
            Decision::BadGateway { .. } => "bad_gateway",
            Decision::BadRequest { .. } => "bad_request",
            Decision::UsageDisallowed(_) => "usage_disallowed",
        }
    }

    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allowed { .. })
    }

    /// The deciding rule, if a rule decided.
    pub(crate) fn rule(&self) -> Option<Rule<'_>> {
        match self {
            Decision::Allowed { rule } => rule.as_ref().map(RuleRef::get),
            Decision::Disallowed { rule, .. } => Some(rule.get()),
            _ => None,
        }
    }

    /// The path that was disallowed, when it is another reading of the
    /// request path.
    pub(crate) fn judged_as(&self) -> Option<&str> {
        match self {
            Decision::Disallowed { judged_as, .. } => judged_as.as_deref(),
            _ => None,
        }
    }

    /// The reason in one line, for the decision header and logs.
    pub(crate) fn reason(&self) -> String {
        match self {
            Decision::Allowed { rule: Some(r) } => format!("allowed by {r}"),
            Decision::Allowed { rule: None } => "no rule matches".into(),
            Decision::Disallowed {
                rule,
                judged_as: None,
            } => format!("disallowed by {rule}"),
            Decision::Disallowed {
                rule,
                judged_as: Some(path),
            } => format!("disallowed by {rule} (the path resolves to {path})"),
            Decision::Unreachable { reason, .. } => {
                format!("robots.txt unreachable, all disallowed: {reason}")
            }
            Decision::RateLimited {
                retry_after,
                limit: Limit::CrawlDelay,
            } => format!(
                "Crawl-delay: next request allowed in {:.3} s",
                retry_after.as_secs_f64()
            ),
            Decision::RateLimited {
                retry_after,
                limit: Limit::UserQuota,
            } => format!(
                "user request quota (max_rps): next request allowed in {:.3} s",
                retry_after.as_secs_f64()
            ),
            Decision::RateLimited {
                limit: Limit::FleetUnavailable,
                ..
            } => "the fleet's shared Crawl-delay schedule (Redis) is unavailable".into(),
            Decision::RateLimited {
                limit: Limit::OriginPause(signal),
                ..
            } => signal.describe(),
            Decision::RateLimited {
                retry_after,
                limit: Limit::InFlight,
            } => format!(
                "max_in_flight requests to the origin in flight: retry in {:.3} s",
                retry_after.as_secs_f64()
            ),
            Decision::Refused { reason } => reason.clone(),
            Decision::BadGateway { reason } => format!("upstream TLS failed: {reason}"),
            Decision::BadRequest { reason } => reason.clone(),
            Decision::UsageDisallowed(note) => format!(
                "usage preference {}=n for a declared purpose, by {}",
                note.purpose, note.rule
            ),
        }
    }
}

/// A usage preference of `n` for a declared purpose: which purpose, and
/// the robots.txt line, response header, file or meta element that states
/// it. Every signal is combined most restrictively (aipref vocab §5.1:
/// any `n` is `n`): the first is the deciding one, [`UsageNote::more`]
/// the others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageNote {
    pub purpose: Box<str>,
    /// 1-based line in robots.txt; 0 for the origin's `Content-Usage`
    /// response header.
    pub line: u32,
    /// The line without its number (`Content-Usage: train-ai=n`), or the
    /// header (`Content-Usage: train-ai=n (response header)`).
    pub text: Box<str>,
    /// `line 4: Content-Usage: train-ai=n`.
    pub rule: Box<str>,
    /// The signal's protocol ([`signals::Protocol::as_str`]); empty for
    /// robots.txt.
    pub protocol: &'static str,
    /// The document it rests on and its element, for the audit line's
    /// `usage_evidence` (`tdmrep.json sha256=… rule 1 (…)`).
    pub evidence: Option<Box<str>>,
    /// Other signals that say `n` for a declared purpose.
    pub more: Vec<UsageNote>,
}

impl UsageNote {
    /// A note for a signal other than robots.txt: `text` names it.
    pub(crate) fn signal(
        purpose: &str,
        protocol: signals::Protocol,
        text: String,
        evidence: String,
    ) -> UsageNote {
        UsageNote {
            purpose: purpose.into(),
            line: 0,
            rule: text.clone().into(),
            text: text.into(),
            protocol: protocol.as_str(),
            evidence: Some(evidence.into()),
            more: Vec::new(),
        }
    }

    /// This note and the others, in order.
    pub(crate) fn all(&self) -> impl Iterator<Item = &UsageNote> {
        std::iter::once(self).chain(self.more.iter())
    }

    /// `first` with `others` added (any `n` is `n`).
    pub(crate) fn combine(
        first: Option<Box<UsageNote>>,
        others: Vec<UsageNote>,
    ) -> Option<Box<UsageNote>> {
        let mut others = others.into_iter();
        let mut note = match first {
            Some(n) => n,
            None => Box::new(others.next()?),
        };
        note.more.extend(others);
        Some(note)
    }

    /// `protocol [sha256=…] element` for each note: what the audit line's
    /// `usage_evidence` lists.
    pub(crate) fn evidence(&self) -> Vec<String> {
        self.all()
            .map(|n| match (&n.evidence, n.protocol) {
                (Some(e), "") => format!("{}=content-usage-header: {e}", n.purpose),
                (Some(e), protocol) => format!("{}={protocol}: {e}", n.purpose),
                (None, _) => format!("{}=robots.txt: {}", n.purpose, n.rule),
            })
            .collect()
    }
}

/// What a [`Decision::RateLimited`] request waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The origin's Crawl-delay (or `politeness.default_interval`).
    CrawlDelay,
    /// The proxy user's `max_rps`.
    UserQuota,
    /// The fleet's shared Crawl-delay schedule (Redis) is unavailable and
    /// `fleet.on_unavailable = "refuse"`: 503.
    FleetUnavailable,
    /// The origin's own 429 or 503 paused it, past `max_wait`.
    OriginPause(politeness::Signal),
    /// `politeness.max_in_flight` requests to the origin are in flight.
    InFlight,
}

/// A decision with everything needed to explain it.
#[derive(Clone, Debug)]
pub struct Judgement {
    pub decision: Decision,
    pub(crate) origin: Origin,
    /// The path and query judged (starting with `/`).
    pub(crate) path: String,
    /// The robots product token used.
    pub(crate) agent: String,
    /// The robots.txt entry consulted (none for policy refusals).
    pub entry: Option<Arc<Entry>>,
    /// Crawl-delay of the selected group, for politeness.
    pub(crate) crawl_delay: Option<f64>,
    /// A usage preference of `n` for a declared purpose, noted and
    /// forwarded (`usage.mode = "annotate"`).
    pub(crate) usage: Option<Box<UsageNote>>,
}

impl Judgement {
    /// The judgement with a later decision in place of this one (the
    /// user's quota, Crawl-delay, a usage preference, a destination refused
    /// at connect time): what was judged, and the robots.txt entry
    /// consulted, stay.
    pub(crate) fn overruled(self, decision: Decision) -> Judgement {
        Judgement { decision, ..self }
    }

    /// The full URL judged. Built on demand: only blocked, audited or
    /// explained requests need it, not the forwarding hot path.
    pub(crate) fn url(&self) -> String {
        self.origin.url(&self.path)
    }

    /// The robots.txt URL consulted.
    pub(crate) fn robots_url(&self) -> String {
        self.origin.robots_url()
    }

    /// What the robots.txt entry consulted says (none for policy refusals
    /// made before robots.txt).
    pub(crate) fn entry_state(&self) -> Option<&State> {
        self.entry.as_ref().map(|e| &e.state)
    }

    /// The Crawl-delay schedule this request books a slot of.
    pub(crate) fn politeness_key(&self) -> politeness::Key {
        politeness::Key::new(&self.origin, &self.agent)
    }
}

/// Judges requests against robots.txt and the destination policy.
pub struct Gate {
    cache: Arc<RobotsCache>,
    policy: destination::Policy,
    /// `robots.case_insensitive_hosts`: paths there are also judged
    /// lower-cased.
    case_insensitive: Vec<String>,
}

impl Gate {
    pub fn new(cache: Arc<RobotsCache>, policy: destination::Policy) -> Gate {
        Gate {
            cache,
            policy,
            case_insensitive: Vec::new(),
        }
    }

    /// Origins whose paths are case-insensitive (`host` or `*.suffix`).
    pub fn with_case_insensitive_hosts(mut self, hosts: Vec<String>) -> Gate {
        self.case_insensitive = hosts;
        self
    }

    /// The destination policy, the same the upstream connections apply.
    pub(crate) fn policy(&self) -> &destination::Policy {
        &self.policy
    }

    pub(crate) fn cache(&self) -> &Arc<RobotsCache> {
        &self.cache
    }

    /// Refuses IP-literal destinations the policy forbids before
    /// robots.txt is fetched. Names are checked where they are resolved,
    /// at connect time (see [`crate::upstream::guarded::GuardedConnector`]).
    pub(crate) fn destination_refusal(&self, origin: &Origin) -> Option<String> {
        let ip = origin.ip()?;
        let addr = std::net::SocketAddr::new(ip, origin.port());
        self.policy
            .check(origin.host(), addr)
            .err()
            .map(|e| e.to_string())
    }

    /// Judges `path_and_query` (starting with `/`) on `origin` for the
    /// robots product token `agent`.
    pub async fn judge(&self, origin: &Origin, path_and_query: &str, agent: &str) -> Judgement {
        self.judge_owned(origin.clone(), path_and_query.to_string(), agent)
            .await
    }

    /// [`Gate::judge`] of an origin and path the judgement keeps as they
    /// are (a request's own: no copy of either).
    pub(crate) async fn judge_owned(
        &self,
        origin: Origin,
        path_and_query: String,
        agent: &str,
    ) -> Judgement {
        if let Some(reason) = self.destination_refusal(&origin) {
            return Judgement {
                decision: Decision::Refused { reason },
                origin,
                path: path_and_query,
                agent: agent.to_string(),
                entry: None,
                crawl_delay: None,
                usage: None,
            };
        }
        let entry = self.cache.get(&origin, agent).await;
        let folds = !self.case_insensitive.is_empty()
            && crate::http::origin::host_listed(&self.case_insensitive, origin.host());
        let (decision, crawl_delay) = decide(&entry, &path_and_query, agent, folds);
        Judgement {
            decision,
            origin,
            path: path_and_query,
            agent: agent.to_string(),
            entry: Some(entry),
            crawl_delay,
            usage: None,
        }
    }
}

impl Gate {
    /// The first declared purpose whose usage preference in the robots.txt
    /// that allowed `judgement` is `n`, with its line. `None` when no
    /// purpose is disallowed (or the decision did not come from a file).
    pub(crate) fn usage(
        &self,
        judgement: &Judgement,
        purposes: &[String],
    ) -> Option<Box<UsageNote>> {
        let entry = judgement.entry.as_ref()?;
        let compiled = match &entry.state {
            State::Fresh(rules) | State::Stale { rules, .. } => rules,
            _ => return None,
        };
        let rules = compiled.get(&judgement.agent)?;
        purposes.iter().find_map(|purpose| {
            let v = rules.usage(&judgement.path, purpose)?;
            (v.pref == crate::robots::usage::Pref::Disallowed).then(|| {
                let rule = v.rule.to_string();
                let text = rule
                    .split_once(": ")
                    .map_or(rule.as_str(), |(_, t)| t)
                    .into();
                Box::new(UsageNote {
                    purpose: purpose.as_str().into(),
                    line: v.rule.line(),
                    text,
                    rule: rule.into(),
                    ..UsageNote::default()
                })
            })
        })
    }
}

impl Gate {
    /// The licence document at `url` (RSL 1.0), fetched once and kept.
    pub(crate) async fn rsl(&self, url: &str) -> Arc<store::rsl::RslState> {
        self.cache.rsl(url).await
    }

    /// The `License:` lines of the robots.txt that judged `judgement`.
    pub(crate) fn licenses(judgement: &Judgement) -> Vec<(u32, Box<str>)> {
        match judgement.entry.as_ref().map(|e| &e.state) {
            Some(State::Fresh(rules) | State::Stale { rules, .. }) => rules.licenses().to_vec(),
            _ => Vec::new(),
        }
    }

    /// The origin's `/.well-known/tdmrep.json`, fetched once and kept.
    pub(crate) async fn tdmrep(&self, origin: &Origin) -> Arc<store::tdm::TdmState> {
        self.cache.tdmrep(origin).await
    }

    /// The notes of the tdmrep.json rule for the judged path, one per
    /// declared purpose a reservation speaks for; with the rule's
    /// reservation (`None`: no rule, or the file is absent).
    pub(crate) fn tdm_file_notes(
        state: &store::tdm::TdmState,
        path: &str,
        purposes: &[String],
    ) -> (Option<signals::tdmrep::Reservation>, Vec<UsageNote>) {
        let store::tdm::TdmOutcome::File(file) = &state.outcome else {
            return (None, Vec::new());
        };
        let Some(rule) = file.decide(path) else {
            return (None, Vec::new());
        };
        let notes = if rule.reservation == Some(signals::tdmrep::Reservation::Reserved) {
            let digest = state.digest.map(|d| d.to_string()).unwrap_or_default();
            purposes
                .iter()
                .filter(|p| signals::is_tdm_purpose(p))
                .map(|p| {
                    UsageNote::signal(
                        p,
                        signals::Protocol::TdmFile,
                        format!("{}: {}", state.url, rule.element()),
                        format!("{} sha256={digest} {}", state.url, rule.element()),
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        (rule.reservation, notes)
    }
}

/// All disallowed because robots.txt cannot be fetched: retry when the
/// entry is due to be fetched again.
fn unreachable(entry: &Entry, reason: &str) -> Decision {
    let cause = match entry.state {
        State::LocalError { .. } => Cause::LocalShortage,
        _ => Cause::Origin,
    };
    Decision::Unreachable {
        cause,
        reason: reason.to_string(),
        retry_after: entry
            .expires
            .saturating_duration_since(tokio::time::Instant::now())
            .max(Duration::from_secs(1)),
    }
}

/// The pure part: an entry's state applied to a path. Every state decides,
/// and every state that is not a robots.txt file in force refuses unless
/// robots.txt itself says nothing applies (4xx).
fn decide(
    entry: &Entry,
    path_and_query: &str,
    agent: &str,
    case_insensitive: bool,
) -> (Decision, Option<f64>) {
    match &entry.state {
        State::Fresh(rules) => apply(entry, rules, None, path_and_query, agent, case_insensitive),
        State::Stale { rules, reason } => apply(
            entry,
            rules,
            Some(reason),
            path_and_query,
            agent,
            case_insensitive,
        ),
        State::AllowAll { .. } => (Decision::Allowed { rule: None }, None),
        State::BadTls { reason } => (
            Decision::BadGateway {
                reason: reason.clone(),
            },
            None,
        ),
        State::Refused { reason } => (
            Decision::Refused {
                reason: reason.clone(),
            },
            None,
        ),
        State::DisallowAll { reason } | State::LocalError { reason } => {
            // `/robots.txt` stays reachable even now (RFC 9309 §2.2.2).
            let path = path_and_query.split('?').next().unwrap_or_default();
            if path == "/robots.txt" {
                return (Decision::Allowed { rule: None }, None);
            }
            (unreachable(entry, reason), None)
        }
    }
}

/// A robots.txt file's rules applied to a path; `stale` is why a copy
/// fetched earlier is used, if it is one.
#[allow(clippy::too_many_arguments)]
fn apply(
    entry: &Entry,
    compiled: &Compiled,
    stale: Option<&String>,
    path_and_query: &str,
    agent: &str,
    case_insensitive: bool,
) -> (Decision, Option<f64>) {
    let Some(rules) = compiled.get(agent) else {
        // The file was compiled without the agent's rules: a stale copy
        // compiled before the agent was configured (the origin is
        // unreachable now), or a fetch that raced a reload (the next
        // request fetches again). Fail closed either way.
        let reason = match stale {
            Some(reason) => {
                format!("{reason}; the stale copy has no rules compiled for agent {agent:?}")
            }
            None => format!("robots.txt has no rules compiled for agent {agent:?} yet"),
        };
        let decision = match stale {
            Some(_) => unreachable(entry, &reason),
            None => Decision::Unreachable {
                reason,
                retry_after: Duration::from_secs(1),
                cause: Cause::Origin,
            },
        };
        return (decision, None);
    };
    let resolved = rules.check_resolved_in(path_and_query, case_insensitive);
    let verdict = resolved.verdict;
    let rule = verdict.rule.and_then(|r| RuleRef::new(rules, r));
    let decision = match (verdict.allowed, rule) {
        (true, rule) => Decision::Allowed { rule },
        (false, Some(rule)) => Decision::Disallowed {
            rule,
            judged_as: resolved.judged_as.map(String::into_boxed_str),
        },
        // A disallow always has a rule; if one ever came without
        // it, refuse (fail closed) rather than forward.
        (false, None) => Decision::Refused {
            reason: "disallowed by robots.txt (rule not available)".into(),
        },
    };
    (decision, rules.crawl_delay())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::robots::Robots;

    const SECS_30: Duration = Duration::from_secs(30);

    fn compiled(agent: &str) -> Compiled {
        let robots = Robots::parse(b"User-agent: *\nDisallow: /private\nCrawl-delay: 2\n");
        Compiled::new(&robots, &[Arc::from(agent)], None)
    }

    fn decide_in(state: State, path: &str) -> (Decision, Option<f64>) {
        decide(&Entry::with_state(state, SECS_30), path, "bot", false)
    }

    fn text(text: &str) -> String {
        text.to_string()
    }

    /// Every state decides, with its own reason; only a file's rules, a
    /// 4xx and the robots.txt path itself ever allow.
    #[tokio::test(start_paused = true)]
    async fn every_entry_state_decides_and_only_rules_or_a_4xx_allow() {
        for state in [
            State::Fresh(compiled("bot")),
            State::Stale {
                rules: compiled("bot"),
                reason: text("503 from origin"),
            },
        ] {
            let (d, delay) = decide_in(state.clone(), "/private/x");
            assert_eq!(d.name(), "disallowed", "{state:?}");
            assert_eq!(delay, Some(2.0));
            let (d, _) = decide_in(state, "/public");
            assert_eq!(d, Decision::Allowed { rule: None });
        }
        let allow = State::AllowAll {
            reason: text("404 from origin"),
        };
        assert_eq!(
            decide_in(allow, "/private/x").0,
            Decision::Allowed { rule: None }
        );
        let down = Decision::Unreachable {
            reason: text("503 from origin"),
            retry_after: SECS_30,
            cause: Cause::Origin,
        };
        let disallow = || State::DisallowAll {
            reason: text("503 from origin"),
        };
        assert_eq!(decide_in(disallow(), "/public").0, down);
        assert_eq!(
            decide_in(disallow(), "/robots.txt?x").0,
            Decision::Allowed { rule: None },
            "robots.txt stays reachable"
        );
        let local = State::LocalError {
            reason: text("out of file descriptors"),
        };
        assert_eq!(
            decide(
                &Entry::with_state(local, Duration::ZERO),
                "/public",
                "bot",
                false
            )
            .0,
            Decision::Unreachable {
                reason: text("out of file descriptors"),
                retry_after: Duration::from_secs(1),
                cause: Cause::LocalShortage,
            }
        );
        for path in ["/public", "/robots.txt"] {
            let refused = State::Refused {
                reason: text("refused by destination policy: 10.0.0.1"),
            };
            assert_eq!(
                decide_in(refused, path).0,
                Decision::Refused {
                    reason: text("refused by destination policy: 10.0.0.1"),
                }
            );
            let tls = State::BadTls {
                reason: text("certificate not trusted"),
            };
            assert_eq!(
                decide_in(tls, path).0,
                Decision::BadGateway {
                    reason: text("certificate not trusted"),
                }
            );
        }
    }

    /// A file without the agent's rules never allows.
    #[tokio::test(start_paused = true)]
    async fn rules_without_the_agent_fail_closed() {
        let (d, delay) = decide_in(State::Fresh(compiled("other")), "/public");
        assert_eq!(delay, None);
        let Decision::Unreachable {
            reason,
            retry_after,
            ..
        } = d
        else {
            panic!("{d:?}");
        };
        assert!(reason.contains("\"bot\""), "{reason}");
        assert_eq!(retry_after, Duration::from_secs(1), "fetched again at once");
        let stale = State::Stale {
            rules: compiled("other"),
            reason: text("503 from origin"),
        };
        let Decision::Unreachable {
            reason,
            retry_after,
            ..
        } = decide_in(stale, "/public").0
        else {
            panic!("a stale copy without the agent");
        };
        assert!(
            reason.starts_with("503 from origin; the stale copy"),
            "{reason}"
        );
        assert_eq!(retry_after, SECS_30, "when the entry is due");
    }
}
