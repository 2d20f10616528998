//! The robots.txt engine: pure (no I/O, no async), parse once, query fast.
//!
//! ```
//! use robots_engine::Robots;
//! let robots = Robots::parse(b"User-agent: *\nDisallow: /private\n");
//! let rules = robots.agent_rules("ExampleBot/1.0");
//! let verdict = rules.check("/private/x");
//! assert!(!verdict.allowed);
//! assert_eq!(verdict.rule.unwrap().to_string(), "line 2: Disallow: /private");
//! ```
//!
//! [`Robots::parse`] reads the file into groups and rules (RFC 9309 with
//! Google's reading of what the RFC leaves open). [`Robots::agent_rules`]
//! selects and merges the groups for one crawler and compiles them into an
//! [`AgentRules`], whose [`AgentRules::check`] answers a path in time linear in
//! the path, without allocating in the common case.
//!
//! A proxy or crawler that must not reach a disallowed resource through
//! another spelling of its path asks [`AgentRules::check_resolved`]: the
//! path as sent and every [`Reading`] an origin may give it (dot-segments,
//! `%2F`, `;parameters`, backslashes, a segment's trailing dots, decoded
//! reserved characters; see [`canon`]), disallowed if any is. Rules are
//! carried over to other spellings of what they name and never widened:
//!
//! ```
//! use robots_engine::Robots;
//! let robots = Robots::parse(b"User-agent: *\nDisallow: /private\nDisallow: /*.$\n");
//! let rules = robots.agent_rules("ExampleBot");
//! let strict = rules.check_resolved("/public/..%2Fprivate/x");
//! assert!(!strict.verdict.allowed);
//! assert_eq!(strict.judged_as.as_deref(), Some("/private/x"));
//! // `Disallow: /*.$` is about URLs that end in a dot, in every reading.
//! assert!(rules.check_resolved("/a.pdf").verdict.allowed);
//! assert!(!rules.check_resolved("/a.").verdict.allowed);
//! ```
//!
//! Other parts: [`product_token`] (the token a User-Agent header selects
//! groups with), [`usage`] (`Content-Usage` and `Content-Signal` lines),
//! [`normalize`] (percent-encoding normal form), [`pattern`] (one pattern
//! against one path) and [`parse`] (lines as the parser reads them).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub(crate) mod agent;
pub mod canon;
mod index;
pub mod normalize;
pub mod parse;
pub mod pattern;
pub mod usage;

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

pub use agent::{AgentSpec, product_token};
pub use canon::Reading;
use canon::{READINGS, Traits};
use normalize::Side;
use parse::Key;

/// One allow or disallow rule as read from the file (kept only while a
/// parsed file is compiled; compiled rules live in an [`AgentRules`] table).
#[derive(Clone, Debug, PartialEq, Eq)]
struct RawRule {
    /// The normalised pattern (the form that is matched), followed by the
    /// value as written when that differs from it.
    text: Box<str>,
    pattern_len: u32,
    /// Precedence length: octets of the normalised pattern as written, or,
    /// for a rule read by a [`Reading`], of its decoded spelling
    /// ([`Reading::decode_pattern`]).
    rank: u32,
    line: u32,
    allow: bool,
}

impl RawRule {
    /// Precedence length (see [`RawRule::rank`]).
    fn specificity(&self) -> usize {
        self.rank as usize
    }
    fn memory_usage(&self) -> usize {
        std::mem::size_of::<Self>() + self.text.len()
    }
}

/// A rule of an [`AgentRules`]: a view into its table (copying it copies
/// two words).
#[derive(Clone, Copy)]
pub struct Rule<'a> {
    table: &'a Table,
    index: u32,
}

impl<'a> Rule<'a> {
    fn meta(&self) -> Meta {
        self.table.metas[self.index as usize]
    }
    /// True for `Allow`, false for `Disallow`.
    pub fn is_allow(&self) -> bool {
        self.meta().allow()
    }
    /// 1-based line number in the robots.txt file.
    pub fn line(&self) -> u32 {
        self.meta().line()
    }
    /// The normalised pattern that is matched.
    pub fn pattern(&self) -> &'a str {
        self.table.pattern(self.index as usize)
    }
    /// The rule's value as it was written in the file.
    pub fn value(&self) -> &'a str {
        self.table.value(self.index as usize)
    }
    /// Position in precedence order ([`AgentRules::rule`] gives it back).
    pub(crate) fn index(&self) -> usize {
        self.index as usize
    }
    /// The rule as text: `Disallow: /private`.
    pub fn text(&self) -> String {
        format!(
            "{}: {}",
            if self.is_allow() { "Allow" } else { "Disallow" },
            self.value()
        )
    }
}

impl PartialEq for Rule<'_> {
    /// Same line, kind, pattern and value (whichever table holds them).
    fn eq(&self, other: &Self) -> bool {
        self.line() == other.line()
            && self.is_allow() == other.is_allow()
            && self.pattern() == other.pattern()
            && self.value() == other.value()
    }
}

impl Eq for Rule<'_> {}

impl fmt::Debug for Rule<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rule({self})")
    }
}

impl fmt::Display for Rule<'_> {
    /// `line 3: Disallow: /private`. Control characters in the value (a
    /// robots.txt is anyone's text) are escaped (`\u{1b}`), so terminals,
    /// logs and 403 bodies show them instead of obeying them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}: {}: ",
            self.line(),
            if self.is_allow() { "Allow" } else { "Disallow" },
        )?;
        write_escaped(f, self.value())
    }
}

/// Writes `text` (a robots.txt value: anyone's text) with its control
/// characters escaped (`\u{1b}`), so terminals, logs and 403 bodies show
/// them instead of obeying them.
pub(crate) fn write_escaped(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    if !text.chars().any(char::is_control) {
        return f.write_str(text);
    }
    for c in text.chars() {
        if c.is_control() {
            write!(f, "{}", c.escape_default())?;
        } else {
            fmt::Write::write_char(f, c)?;
        }
    }
    Ok(())
}

/// Where a compiled rule's pattern starts in its table, its line and its
/// kind: 8 bytes per rule. The pattern ends where the next one starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Meta {
    start: u32,
    /// Line number shifted left by one, and 1 for `Allow`.
    line_allow: u32,
}

impl Meta {
    fn allow(self) -> bool {
        self.line_allow & 1 == 1
    }
    fn line(self) -> u32 {
        self.line_allow >> 1
    }
}

/// Compiled rules in precedence order: their patterns in one string and 8
/// bytes of [`Meta`] per rule, plus the values as written for the few rules
/// where that differs from the pattern (`/%7efoo` for `/~foo`). A proxy
/// keeps one of these per cached origin, so it is kept small.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Table {
    text: Box<str>,
    metas: Box<[Meta]>,
    /// (rule index, value as written), ascending by rule index.
    written: Box<[(u32, Box<str>)]>,
}

impl Table {
    fn build(rules: &[&RawRule]) -> Table {
        let mut text = String::with_capacity(rules.iter().map(|r| r.pattern_len as usize).sum());
        let mut metas = Vec::with_capacity(rules.len());
        let mut written = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            // Offsets fit: the file is capped at 500 KiB and normalising
            // grows it at most 3× (an octet outside ASCII becomes `%XX`).
            metas.push(Meta {
                start: text.len() as u32,
                line_allow: (r.line.min(u32::MAX >> 1) << 1) | u32::from(r.allow),
            });
            let (pattern, value) = r.text.split_at(r.pattern_len as usize);
            text.push_str(pattern);
            if !value.is_empty() {
                written.push((i as u32, Box::from(value)));
            }
        }
        Table {
            text: text.into_boxed_str(),
            metas: metas.into_boxed_slice(),
            written: written.into_boxed_slice(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.metas.len()
    }

    /// The normalised pattern of rule `i`.
    #[inline]
    pub(crate) fn pattern(&self, i: usize) -> &str {
        let start = self.metas[i].start as usize;
        let end = self
            .metas
            .get(i + 1)
            .map_or(self.text.len(), |m| m.start as usize);
        &self.text[start..end]
    }

    /// All patterns, one after the other.
    #[inline]
    pub(crate) fn text(&self) -> &[u8] {
        self.text.as_bytes()
    }

    /// Where rule `i`'s pattern starts in [`Table::text`].
    pub(crate) fn start(&self, i: usize) -> usize {
        self.metas[i].start as usize
    }

    /// The rule whose pattern starts at `offset` of [`Table::text`].
    pub(crate) fn rule_at(&self, offset: usize) -> usize {
        self.metas
            .partition_point(|m| (m.start as usize) <= offset)
            .saturating_sub(1)
    }

    fn value(&self, i: usize) -> &str {
        match self.written.binary_search_by_key(&(i as u32), |(r, _)| *r) {
            Ok(k) => &self.written[k].1,
            Err(_) => self.pattern(i),
        }
    }

    fn memory_usage(&self) -> usize {
        self.text.len()
            + std::mem::size_of_val(&*self.metas)
            + self
                .written
                .iter()
                .map(|(_, v)| 24 + v.len())
                .sum::<usize>()
    }
}

/// A group: the agents named by consecutive `User-agent` lines and the rules
/// that follow them.
#[derive(Clone, Debug)]
struct Group {
    agents: Vec<AgentSpec>,
    /// Range into [`Robots::rules`].
    start: u32,
    end: u32,
    crawl_delay: Option<f64>,
    /// Indices into [`Robots::usage`] (usage lines are few).
    usage: Vec<u32>,
}

/// A parsed robots.txt file.
#[derive(Clone, Debug, Default)]
pub struct Robots {
    groups: Vec<Group>,
    rules: Vec<RawRule>,
    /// `Content-Usage` and `Content-Signal` lines, in file order.
    usage: Vec<usage::UsageRule>,
    sitemaps: Vec<Box<str>>,
    /// `License:` lines (RSL 1.0): line number and URL, at most
    /// [`MAX_LICENSES`].
    licenses: Vec<(u32, Box<str>)>,
    truncated: bool,
}

/// `License:` lines kept; the rest are ignored.
pub const MAX_LICENSES: usize = 8;

/// Which groups applied to an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selection {
    /// At least one group names the agent; those groups were merged.
    Specific,
    /// No group names the agent; the `*` groups were merged.
    Global,
    /// Neither: no rules apply, everything is allowed.
    None,
}

impl Robots {
    /// Parses robots.txt bytes. Never fails: unreadable lines are skipped.
    pub fn parse(bytes: &[u8]) -> Robots {
        let (text, truncated) = parse::prepare(bytes);
        let mut robots = Robots {
            truncated,
            ..Robots::default()
        };
        // True once a rule line has followed the current group's agents: the
        // next user-agent line then starts a new group.
        let mut rules_started = true;
        for line in parse::lines(&text) {
            match line.key {
                Key::UserAgent => {
                    if rules_started {
                        let at = robots.rules.len() as u32;
                        robots.groups.push(Group {
                            agents: Vec::new(),
                            start: at,
                            end: at,
                            crawl_delay: None,
                            usage: Vec::new(),
                        });
                        rules_started = false;
                    }
                    if let (Some(spec), Some(group)) =
                        (AgentSpec::parse(line.value), robots.groups.last_mut())
                    {
                        group.agents.push(spec);
                    }
                }
                Key::Allow | Key::Disallow => {
                    // Rules before the first user-agent line belong to no
                    // group and are ignored (RFC 9309 §2.2.2).
                    let Some(group) = robots.groups.last_mut() else {
                        continue;
                    };
                    rules_started = true;
                    // An empty value is no rule (`Disallow:` allows all).
                    if line.value.is_empty() {
                        continue;
                    }
                    robots
                        .rules
                        .push(make_rule(line.key == Key::Allow, line.number, line.value));
                    group.end = robots.rules.len() as u32;
                }
                Key::CrawlDelay => {
                    if let (Some(group), Some(delay)) =
                        (robots.groups.last_mut(), parse_delay(line.value))
                    {
                        group.crawl_delay.get_or_insert(delay);
                    }
                }
                Key::ContentUsage | Key::ContentSignal => {
                    let Some(group) = robots.groups.last_mut() else {
                        continue;
                    };
                    rules_started = true;
                    let kind = if line.key == Key::ContentUsage {
                        usage::Kind::ContentUsage
                    } else {
                        usage::Kind::ContentSignal
                    };
                    group.usage.push(robots.usage.len() as u32);
                    robots
                        .usage
                        .push(usage::UsageRule::parse(kind, line.number, line.value));
                }
                Key::Sitemap => {
                    if !line.value.is_empty() {
                        robots.sitemaps.push(line.value.into());
                    }
                }
                // RSL 1.0 ("Adding RSL to robots.txt"): global, not tied to
                // a group; an absolute URL.
                Key::License => {
                    if !line.value.is_empty() && robots.licenses.len() < MAX_LICENSES {
                        robots.licenses.push((line.number, line.value.into()));
                    }
                }
                Key::Unknown => {}
            }
        }
        robots.rules.shrink_to_fit();
        robots
    }

    /// Every `Sitemap:` URL, in file order.
    pub fn sitemaps(&self) -> impl Iterator<Item = &str> {
        self.sitemaps.iter().map(|s| &**s)
    }

    /// Every `License:` URL (RSL 1.0) with its line number, in file order.
    pub fn licenses(&self) -> &[(u32, Box<str>)] {
        &self.licenses
    }

    /// True if the input was longer than [`parse::MAX_BYTES`] and the rest was ignored.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Number of allow/disallow rules in all groups.
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// Number of groups.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// Approximate bytes of memory held by the parsed file.
    pub fn memory_usage(&self) -> usize {
        let agents = |g: &Group| {
            g.agents.capacity() * std::mem::size_of::<AgentSpec>()
                + g.agents
                    .iter()
                    .map(|a| match a {
                        AgentSpec::Token(t) => t.len(),
                        AgentSpec::Any => 0,
                    })
                    .sum::<usize>()
        };
        std::mem::size_of::<Self>()
            + self.groups.capacity() * std::mem::size_of::<Group>()
            + self.groups.iter().map(agents).sum::<usize>()
            + self.rules.iter().map(RawRule::memory_usage).sum::<usize>()
            + self
                .usage
                .iter()
                .map(usage::UsageRule::memory_usage)
                .sum::<usize>()
            + self.sitemaps.iter().map(|s| 16 + s.len()).sum::<usize>()
            + self
                .licenses
                .iter()
                .map(|(_, s)| 20 + s.len())
                .sum::<usize>()
    }

    fn selected_groups(&self, token: &str) -> (Selection, Vec<&Group>) {
        let specific: Vec<&Group> = self
            .groups
            .iter()
            .filter(|g| {
                g.agents
                    .iter()
                    .any(|a| matches!(a, AgentSpec::Token(t) if **t == *token))
            })
            .collect();
        if !specific.is_empty() {
            return (Selection::Specific, specific);
        }
        let global: Vec<&Group> = self
            .groups
            .iter()
            .filter(|g| g.agents.contains(&AgentSpec::Any))
            .collect();
        if global.is_empty() {
            (Selection::None, global)
        } else {
            (Selection::Global, global)
        }
    }

    /// Selects the groups for `agent` (a product token or a whole User-Agent
    /// string, see [`product_token`]) and compiles their rules for matching.
    pub fn agent_rules(&self, agent: &str) -> AgentRules {
        let token = product_token(agent);
        let (selection, groups) = self.selected_groups(&token);
        self.compile(selection, &groups)
    }

    /// Compiles the rules of several agents at once; agents that select the
    /// same groups share one [`AgentRules`]. In the order of `agents`.
    pub fn agent_rules_shared(&self, agents: &[&str]) -> Vec<Arc<AgentRules>> {
        // The same groups selected the same way (a group naming both an
        // agent and `*` is Specific for one and Global for the other).
        type Key = (Selection, Vec<*const Group>);
        let mut done: Vec<(Key, Arc<AgentRules>)> = Vec::new();
        agents
            .iter()
            .map(|agent| {
                let (selection, groups) = self.selected_groups(&product_token(agent));
                let key: Key = (
                    selection,
                    groups.iter().map(|g| *g as *const Group).collect(),
                );
                if let Some((_, rules)) = done.iter().find(|(k, _)| *k == key) {
                    return rules.clone();
                }
                let rules = Arc::new(self.compile(selection, &groups));
                done.push((key, rules.clone()));
                rules
            })
            .collect()
    }

    fn compile(&self, selection: Selection, groups: &[&Group]) -> AgentRules {
        let mut rules: Vec<&RawRule> = groups
            .iter()
            .flat_map(|g| self.rules[g.start as usize..g.end as usize].iter())
            .collect();
        // Precedence order: longest pattern first; on a tie allow first
        // (RFC 9309 §2.2.2: "the allow SHOULD be used"); then file order.
        rules.sort_by(|a, b| precedence(a, b));
        // Several groups may give a delay; the most polite one wins.
        let crawl_delay = groups
            .iter()
            .filter_map(|g| g.crawl_delay)
            .fold(None, |acc: Option<f64>, d| {
                Some(acc.map_or(d, |a| a.max(d)))
            });
        let mut compiled = AgentRules::new(Table::build(&rules), selection, crawl_delay);
        compiled.usage = groups
            .iter()
            .flat_map(|g| g.usage.iter())
            .filter_map(|&i| self.usage.get(i as usize).cloned())
            .collect();
        compiled
    }

    /// Every `Content-Usage` and `Content-Signal` line, in file order.
    pub fn usage_rules(&self) -> &[usage::UsageRule] {
        &self.usage
    }
}

/// Precedence order: longest pattern first; on a tie allow first (RFC 9309
/// §2.2.2: "the allow SHOULD be used"); then file order.
fn precedence(a: &RawRule, b: &RawRule) -> std::cmp::Ordering {
    b.specificity()
        .cmp(&a.specificity())
        .then(b.allow.cmp(&a.allow))
        .then(a.line.cmp(&b.line))
}

/// A rule's pattern as `reading` reads it: an `Allow` in full, a
/// `Disallow` by the reading's decodings alone, so that reading a rule
/// never widens what it forbids (see [`canon`]).
fn read_pattern(reading: Reading, pattern: &str, allow: bool) -> Cow<'_, str> {
    if allow {
        reading.apply_pattern(pattern)
    } else {
        reading.decode_pattern(pattern)
    }
}

/// The readings (bits in [`READINGS`] order) that change some pattern of
/// `table`: one scan of the patterns, and a reading applied only to those
/// it may change.
fn changed_readings(table: &Table) -> u16 {
    let mut bits = 0u16;
    for i in 0..table.len() {
        let pattern = table.pattern(i);
        let allow = table.metas[i].allow();
        let traits = Traits::of(pattern);
        // Text after a `*` is read as a query may be, which the traits of a
        // pattern (read as a path up to its first `?`) do not tell.
        let starred = pattern.contains('*');
        for (k, reading) in READINGS.iter().enumerate() {
            if bits & (1 << k) == 0
                && (starred || traits.may_change(*reading))
                && read_pattern(*reading, pattern, allow) != pattern
            {
                bits |= 1 << k;
            }
        }
    }
    bits
}

fn make_rule(allow: bool, line: u32, value: &str) -> RawRule {
    // Postel: a path written without its leading slash (`Disallow: private/`)
    // is read as rooted; `*` may start a pattern as it is.
    let normalized = if value.starts_with('/') || value.starts_with('*') {
        normalize::normalize_str(value, Side::Pattern).into_owned()
    } else {
        let rooted = format!("/{value}");
        normalize::normalize_str(&rooted, Side::Pattern).into_owned()
    };
    let pattern_len = normalized.len() as u32;
    let mut text = normalized;
    if text != value {
        text.push_str(value);
    }
    RawRule {
        text: text.into_boxed_str(),
        pattern_len,
        rank: pattern_len,
        line,
        allow,
    }
}

fn parse_delay(value: &str) -> Option<f64> {
    let v: f64 = value.parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// Groups with more rules than this get an Aho-Corasick prefilter; smaller
/// ones are scanned in precedence order, which is faster for them.
pub const INDEX_THRESHOLD: usize = 12;

/// The merged, compiled rules of one crawler: answers [`AgentRules::check`].
#[derive(Clone, Debug)]
pub struct AgentRules {
    /// In precedence order: the first rule that matches decides.
    table: Table,
    /// Boxed: most groups have none, and the automaton's type is large.
    index: Option<Box<index::Index>>,
    selection: Selection,
    crawl_delay: Option<f64>,
    /// Bit `k` set: reading `READINGS[k]` changes some pattern, so a path
    /// is judged in it against the rules as that reading reads them.
    changed: u16,
    /// Those rules, built the first time a path needs one of them (most
    /// files have no pattern any reading changes, and most paths need no
    /// reading).
    read: OnceLock<Box<[ReadRules]>>,
    /// The selected groups' usage preference lines (most files have none).
    usage: Box<[usage::UsageRule]>,
}

/// The rules of an [`AgentRules`] as one [`Reading`] reads their patterns.
#[derive(Clone, Debug)]
struct ReadRules {
    reading: Reading,
    rules: AgentRules,
    /// For each of `rules`' rules, its index in the rules it was read from.
    base: Box<[u32]>,
    /// The rules whose pattern (or precedence) the reading changed, alone
    /// (indexed when there are many), as the reading reads them and as
    /// written. A path the reading leaves as it is is judged differently
    /// only if one of them matches it in either spelling: every other rule,
    /// and its order, is the same in both.
    changed: AgentRules,
    changed_written: AgentRules,
    /// Position, in the list of read rules, of the first whose rules are
    /// these very rules (itself if none): readings that read every rule
    /// alike (a file whose only read rules are `Disallow`s with `%2F` reads
    /// the same in the five readings that decode `%2F`) answer a path they
    /// all leave as it is alike, so it is judged once.
    same_as: u8,
}

/// The answer for one URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict<'a> {
    /// True if the path may be fetched.
    pub allowed: bool,
    /// The rule that decided, if any rule matched.
    pub rule: Option<Rule<'a>>,
}

impl AgentRules {
    fn new(table: Table, selection: Selection, crawl_delay: Option<f64>) -> AgentRules {
        let mut rules = AgentRules::unread(table, selection, crawl_delay);
        rules.changed = changed_readings(&rules.table);
        rules
    }

    /// Rules with no reading of their own (a reading's rules: readings are
    /// idempotent, so reading them again changes nothing).
    fn unread(table: Table, selection: Selection, crawl_delay: Option<f64>) -> AgentRules {
        let index = if table.len() > INDEX_THRESHOLD {
            index::Index::build(&table).map(Box::new)
        } else {
            None
        };
        AgentRules {
            table,
            index,
            selection,
            crawl_delay,
            changed: 0,
            read: OnceLock::new(),
            usage: Box::default(),
        }
    }

    /// The usage preference for `category` (`train-ai`, `search`, …) that
    /// the selected groups state for `path_and_query`, with the rule that
    /// states it; `None` when no line states one (unknown, which allows).
    /// Usage preferences apply only to what may be crawled: callers judge
    /// the path with [`AgentRules::check`] first.
    pub fn usage(&self, path_and_query: &str, category: &str) -> Option<usage::UsageVerdict<'_>> {
        if self.usage.is_empty() {
            return None;
        }
        let rooted: Cow<'_, str> = if path_and_query.starts_with('/') {
            Cow::Borrowed(path_and_query)
        } else {
            Cow::Owned(format!("/{path_and_query}"))
        };
        let path = normalize::normalize_str(&rooted, Side::Url);
        usage::decide(&self.usage, &path, category)
    }

    /// The selected groups' usage preference lines.
    pub fn usage_rules(&self) -> &[usage::UsageRule] {
        &self.usage
    }

    /// True if readings `a` and `b` read every rule alike: neither reads
    /// any, or both read them into the same rules.
    fn same_rules(&self, a: Reading, b: Reading) -> bool {
        match (self.read_rules(a), self.read_rules(b)) {
            (None, None) => true,
            (Some(x), Some(y)) => x.same_as == y.same_as,
            _ => false,
        }
    }

    /// The rules as `reading` reads them, if it changes any pattern.
    fn read_rules(&self, reading: Reading) -> Option<&ReadRules> {
        let k = READINGS.iter().position(|r| *r == reading)?;
        if self.changed & (1 << k) == 0 {
            return None;
        }
        let all = self.read.get_or_init(|| {
            let mut all: Vec<ReadRules> = READINGS
                .iter()
                .enumerate()
                .filter(|(k, _)| self.changed & (1 << k) != 0)
                .map(|(_, r)| self.build_reading(*r))
                .collect();
            for i in 0..all.len() {
                let same = (0..i)
                    .find(|&j| {
                        all[j].rules.table == all[i].rules.table && all[j].base == all[i].base
                    })
                    .unwrap_or(i);
                all[i].same_as = same as u8;
            }
            all.into_boxed_slice()
        });
        all.iter().find(|r| r.reading == reading)
    }

    fn build_reading(&self, reading: Reading) -> ReadRules {
        let mut rows: Vec<(RawRule, u32)> = (0..self.table.len())
            .map(|i| {
                let meta = self.table.metas[i];
                let written = self.table.pattern(i);
                let pattern = read_pattern(reading, written, meta.allow()).into_owned();
                let rank = if meta.allow() {
                    reading.decode_pattern(written).len()
                } else {
                    pattern.len()
                } as u32;
                let value = self.table.value(i);
                let pattern_len = pattern.len() as u32;
                let mut text = pattern;
                if text != value {
                    text.push_str(value);
                }
                let rule = RawRule {
                    text: text.into_boxed_str(),
                    pattern_len,
                    rank,
                    line: meta.line(),
                    allow: meta.allow(),
                };
                (rule, i as u32)
            })
            .collect();
        rows.sort_by(|(a, _), (b, _)| precedence(a, b));
        let refs: Vec<&RawRule> = rows.iter().map(|(r, _)| r).collect();
        let rules = AgentRules::unread(Table::build(&refs), self.selection, self.crawl_delay);
        let changed_rows: Vec<(&RawRule, u32)> = rows
            .iter()
            .enumerate()
            .filter(|(k, (rule, i))| {
                let written = self.table.pattern(*i as usize);
                rules.table.pattern(*k) != written || rule.specificity() != written.len()
            })
            .map(|(_, (rule, i))| (rule, *i))
            .collect();
        let read: Vec<&RawRule> = changed_rows.iter().map(|(rule, _)| *rule).collect();
        let changed = AgentRules::unread(Table::build(&read), self.selection, None);
        let written: Vec<RawRule> = changed_rows
            .iter()
            .map(|(_, i)| {
                let i = *i as usize;
                let pattern = self.table.pattern(i);
                RawRule {
                    text: pattern.into(),
                    pattern_len: pattern.len() as u32,
                    rank: pattern.len() as u32,
                    line: self.table.metas[i].line(),
                    allow: self.table.metas[i].allow(),
                }
            })
            .collect();
        let written: Vec<&RawRule> = written.iter().collect();
        let changed_written = AgentRules::unread(Table::build(&written), self.selection, None);
        ReadRules {
            reading,
            rules,
            base: rows.iter().map(|(_, i)| *i).collect(),
            changed,
            changed_written,
            same_as: 0,
        }
    }

    /// Which groups were selected.
    pub fn selection(&self) -> Selection {
        self.selection
    }

    /// The `Crawl-delay` of the selected groups, in seconds.
    pub fn crawl_delay(&self) -> Option<f64> {
        self.crawl_delay
    }

    /// The rules in precedence order.
    pub fn rules(&self) -> impl ExactSizeIterator<Item = Rule<'_>> + '_ {
        (0..self.table.len() as u32).map(|index| Rule {
            table: &self.table,
            index,
        })
    }

    /// The rule at `index` in precedence order (see [`Rule::index`]).
    pub fn rule(&self, index: usize) -> Option<Rule<'_>> {
        (index < self.table.len()).then_some(Rule {
            table: &self.table,
            index: index as u32,
        })
    }

    /// True if no rule applies (everything is allowed).
    pub fn is_empty(&self) -> bool {
        self.table.len() == 0
    }

    /// True if a prefilter index serves [`AgentRules::check`] (groups of more
    /// than [`INDEX_THRESHOLD`] rules); smaller groups are scanned in order.
    pub fn is_indexed(&self) -> bool {
        self.index.is_some()
    }

    /// Approximate bytes of memory held: the struct, the rules' table and
    /// the index.
    pub fn memory_usage(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.table.memory_usage()
            + self.index.as_ref().map_or(0, |i| i.memory_usage())
            + self
                .usage
                .iter()
                .map(usage::UsageRule::memory_usage)
                .sum::<usize>()
            + self.read.get().map_or(0, |read| {
                read.iter()
                    .map(|r| {
                        r.rules.memory_usage()
                            + r.changed.memory_usage()
                            + r.changed_written.memory_usage()
                            + 4 * r.base.len()
                    })
                    .sum()
            })
    }

    /// Bytes of the prefilter index alone (0 for a group scanned in order).
    pub fn index_memory_usage(&self) -> usize {
        self.index.as_ref().map_or(0, |i| i.memory_usage())
    }

    /// The position in [`AgentRules::rules`] of a rule that a [`Verdict`] of
    /// these rules returned (so callers can keep per-rule data, such as the
    /// rule pre-rendered as text, in a table). `None` for a rule of other
    /// rules.
    pub fn rule_index(&self, rule: Rule<'_>) -> Option<usize> {
        std::ptr::eq(rule.table, &self.table).then_some(rule.index())
    }

    /// Judges a URL: absolute (`https://host/a?b`), a path (`/a?b`), or empty
    /// (`/`). The fragment is ignored.
    pub fn check_url(&self, url: &str) -> Verdict<'_> {
        self.check(normalize::path_and_query(url))
    }

    /// Judges a path with optional query (as in a request line). A path that
    /// does not start with `/` (`a/b`, `?q`, empty) is read from the root.
    pub fn check(&self, path_and_query: &str) -> Verdict<'_> {
        if !path_and_query.starts_with('/') {
            return self.check(&format!("/{path_and_query}"));
        }
        self.check_normalized(&normalize::normalize_str(path_and_query, Side::Url))
    }

    /// Judges a request path as strictly as any origin could read it: the
    /// path as sent and every [`Reading`] of it (see [`canon`]), each
    /// against the rules as that reading reads them. Disallowed if any of
    /// them is; [`Resolved::judged_as`] then names the reading's path when
    /// it is not the path as sent. Case-folding readings are left out: see
    /// [`AgentRules::check_resolved_in`].
    pub fn check_resolved(&self, path_and_query: &str) -> Resolved<'_> {
        self.check_resolved_in(path_and_query, false)
    }

    /// [`AgentRules::check_resolved`], with the case-folding readings too
    /// when the origin is known to be case-insensitive.
    pub fn check_resolved_in(&self, path_and_query: &str, case_insensitive: bool) -> Resolved<'_> {
        if !path_and_query.starts_with('/') {
            return self.check_resolved_in(&format!("/{path_and_query}"), case_insensitive);
        }
        let path = normalize::normalize_str(path_and_query, Side::Url);
        let verdict = self.check_normalized(&path);
        if !verdict.allowed {
            return Resolved {
                verdict,
                judged_as: None,
                reading: None,
            };
        }
        let traits = Traits::of(&path);
        // The last form judged against the rules as written: readings that
        // differ only where this path has nothing to read (Decoded and
        // QueryDecoded for a path with an encoded query alone) give the same
        // form, judged once.
        let mut last: Option<Cow<'_, str>> = None;
        // Bits by `ReadRules::same_as`: read rules already judged on the
        // path as sent (which those readings leave as it is).
        let mut unchanged_judged = 0u32;
        let mut decoded: Option<Cow<'_, str>> = None;
        // The readings to judge, in order: those that may change the path
        // or read some rule; the case-folding ones only for a
        // case-insensitive origin; the double-decoding one only for a path
        // with an escaped escape (otherwise it is the decoded one).
        let mut todo = self.changed | traits.readings();
        if !case_insensitive {
            todo &= !canon::FOLDING_READINGS;
        }
        if !traits.double_escaped() {
            todo &= !canon::DOUBLE_DECODED;
        }
        while todo != 0 {
            let k = todo.trailing_zeros() as usize;
            todo &= todo - 1;
            let reading = &READINGS[k];
            let rules_read = self.changed & (1 << k) != 0;
            // Combined reads a path with no reserved escape, parameter,
            // backslash or trailing dot as Decoded does: with the same
            // rules, its answer is Decoded's, already given.
            if *reading == Reading::Combined
                && decoded.is_some()
                && traits.combined_as_decoded()
                && self.same_rules(Reading::Decoded, Reading::Combined)
            {
                continue;
            }
            // Decoded and QueryDecoded read most paths alike: the query's
            // decoding is done once.
            let form = match (&decoded, reading) {
                (Some(form), Reading::QueryDecoded) if traits.decoded_as_query_decoded() => {
                    form.clone()
                }
                _ => reading.apply(&path),
            };
            if *reading == Reading::Decoded {
                decoded = Some(form.clone());
            }
            if !rules_read && (form == path || last.as_ref() == Some(&form)) {
                continue;
            }
            if rules_read
                && form == path
                && let Some(read) = self.read_rules(*reading)
            {
                // Judged already in a reading that reads every rule alike,
                // or no rule this reading changed matches the path: the
                // answer is the path's as sent.
                let bit = 1u32 << read.same_as;
                if unchanged_judged & bit != 0 {
                    continue;
                }
                unchanged_judged |= bit;
                if read.changed.check_normalized(&form).rule.is_none()
                    && read.changed_written.check_normalized(&form).rule.is_none()
                {
                    continue;
                }
            }
            let other = self.check_read(*reading, &form);
            if !other.allowed {
                return Resolved {
                    verdict: other,
                    judged_as: (form != path).then(|| form.into_owned()),
                    reading: Some(*reading),
                };
            }
            if !rules_read {
                last = Some(form);
            }
        }
        Resolved {
            verdict,
            judged_as: None,
            reading: None,
        }
    }

    /// Judges `path_and_query` in one reading: the reading of the path
    /// against the rules as the reading reads them. The verdict's rule is
    /// one of these rules (as written).
    pub fn check_reading(&self, reading: Reading, path_and_query: &str) -> Verdict<'_> {
        let rooted: Cow<'_, str> = if path_and_query.starts_with('/') {
            Cow::Borrowed(path_and_query)
        } else {
            Cow::Owned(format!("/{path_and_query}"))
        };
        let path = normalize::normalize_str(&rooted, Side::Url);
        self.check_read(reading, &reading.apply(&path))
    }

    /// A normalised path already read by `reading`, against the rules as it
    /// reads them.
    fn check_read(&self, reading: Reading, form: &str) -> Verdict<'_> {
        let Some(read) = self.read_rules(reading) else {
            return self.check_normalized(form);
        };
        let verdict = read.rules.check_normalized(form);
        Verdict {
            allowed: verdict.allowed,
            rule: verdict
                .rule
                .and_then(|r| self.rule(read.base[r.index()] as usize)),
        }
    }

    /// [`AgentRules::check`] for a path already normalised and rooted.
    fn check_normalized(&self, path: &str) -> Verdict<'_> {
        // `/robots.txt` itself is always allowed (RFC 9309 §2.2.2).
        if let Some(rest) = path.strip_prefix("/robots.txt")
            && (rest.is_empty() || rest.starts_with('?'))
        {
            return Verdict {
                allowed: true,
                rule: None,
            };
        }
        let table = &self.table;
        let found = match &self.index {
            None => (0..table.len()).find(|&i| pattern::matches(table.pattern(i), path)),
            Some(index) => index.first_match(table, path),
        };
        match found.and_then(|i| self.rule(i)) {
            Some(rule) => Verdict {
                allowed: rule.is_allow(),
                rule: Some(rule),
            },
            None => Verdict {
                allowed: true,
                rule: None,
            },
        }
    }
}

/// The answer for a request path judged in all its readings
/// ([`AgentRules::check_resolved`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved<'a> {
    /// The answer: disallowed if the path as sent or any reading of it is.
    pub verdict: Verdict<'a>,
    /// The normalised reading that was disallowed, when it is not the path
    /// as sent (`/private/x` for `/public/../private/x`).
    pub judged_as: Option<String>,
    /// The reading that was disallowed, when the path as sent was not.
    pub reading: Option<Reading>,
}

/// An owned handle on one rule of shared compiled rules, for answers that
/// outlive the borrow of a [`Verdict`] (a decision, an audit line).
#[derive(Clone)]
pub struct RuleRef {
    rules: Arc<AgentRules>,
    index: u32,
}

impl RuleRef {
    /// The handle of `rule`, which `rules` returned; `None` for a rule of
    /// other rules.
    pub fn new(rules: &Arc<AgentRules>, rule: Rule<'_>) -> Option<RuleRef> {
        let index = rules.rule_index(rule)?;
        Some(RuleRef {
            rules: rules.clone(),
            index: index as u32,
        })
    }

    /// The rule.
    pub fn get(&self) -> Rule<'_> {
        Rule {
            table: &self.rules.table,
            index: self.index,
        }
    }
}

impl PartialEq for RuleRef {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl fmt::Debug for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.get(), f)
    }
}

impl fmt::Display for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.get(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexed_and_linear_matching_agree() {
        let mut txt = String::from("user-agent: *\n");
        for i in 0..40 {
            txt.push_str(&format!("disallow: /*/w{i}\nallow: /*/w{i}/ok\n"));
            txt.push_str(&format!(
                "disallow: /p{i}/\nallow: /p{i}/*.css$\nallow: /p{i}/x$\n"
            ));
        }
        // Prefixes longer than an index entry's length field holds.
        let long = "L".repeat(600);
        txt.push_str(&format!("allow: /{long}\ndisallow: /{long}*x$\n"));
        txt.push_str("disallow: /*.pdf$\nallow: /$\ndisallow: /\n");
        let robots = Robots::parse(txt.as_bytes());
        let indexed = robots.agent_rules("x");
        assert!(indexed.index.is_some());
        let linear = AgentRules {
            index: None,
            ..indexed.clone()
        };
        for path in [
            "/",
            "/a",
            "/a/w3",
            "/a/w3/ok",
            "/a/w39x",
            "/x.pdf",
            "/x.pdf?",
            "/robots.txt",
            "/p1",
            "/p1/",
            "/p1/x",
            "/p1/xy",
            "/p12/a.css",
            "/p12/a.css?",
            "/p3/w3/ok",
        ] {
            assert_eq!(indexed.check(path), linear.check(path), "{path}");
        }
        for path in [
            format!("/{long}"),
            format!("/{long}ax"),
            format!("/{long}a"),
        ] {
            assert_eq!(indexed.check(&path), linear.check(&path), "{path}");
        }
        assert!(!indexed.check(&format!("/{long}ax")).allowed);
        assert!(indexed.check(&format!("/{long}a")).allowed);
    }

    #[test]
    fn a_file_that_grows_threefold_when_normalised_stays_indexed() {
        // Each octet that is not UTF-8 is percent-encoded: `%FF`.
        let mut txt = b"user-agent: *\n".to_vec();
        for i in 0..80 {
            txt.extend_from_slice(format!("disallow: /zz{i}").as_bytes());
            txt.extend(std::iter::repeat_n(0xff_u8, 5450));
            txt.push(b'\n');
        }
        let mut i = 0;
        while txt.len() < parse::MAX_BYTES - 64 {
            txt.extend_from_slice(format!("disallow: /p{i}/*.x\n").as_bytes());
            i += 1;
        }
        let robots = Robots::parse(&txt);
        let indexed = robots.agent_rules("x");
        assert!(
            indexed.table.text.len() > 1 << 20,
            "{}",
            indexed.table.text.len()
        );
        assert!(indexed.is_indexed());
        let linear = AgentRules {
            index: None,
            ..indexed.clone()
        };
        let zz = format!("/zz3{}", "%FF".repeat(5450));
        for path in [
            "/index/page.html",
            "/p7/a.x",
            "/p7/a.y",
            "/zz3",
            zz.as_str(),
        ] {
            assert_eq!(indexed.check(path), linear.check(path), "{path}");
        }
        assert!(!indexed.check(&zz).allowed);
        assert!(!indexed.check("/p7/a.x").allowed);
    }

    #[test]
    fn agents_that_select_the_same_groups_share_their_compiled_rules() {
        let robots = Robots::parse(
            b"user-agent: a\nuser-agent: b\ndisallow: /ab\n\nuser-agent: *\ndisallow: /all\n",
        );
        let shared = robots.agent_rules_shared(&["a", "x", "B", "y"]);
        assert!(Arc::ptr_eq(&shared[0], &shared[2]), "a and b: one group");
        assert!(Arc::ptr_eq(&shared[1], &shared[3]), "x and y: the * group");
        assert!(!Arc::ptr_eq(&shared[0], &shared[1]));
        assert!(!shared[0].check("/ab").allowed);
        assert!(!shared[1].check("/all").allowed);
        // One group naming an agent and `*`: same rules, other selection.
        let both = Robots::parse(b"user-agent: a\nuser-agent: *\ndisallow: /x\n");
        let shared = both.agent_rules_shared(&["a", "b"]);
        assert_eq!(shared[0].selection(), Selection::Specific);
        assert_eq!(shared[1].selection(), Selection::Global);
    }

    #[test]
    fn control_characters_in_a_rule_are_shown_escaped() {
        let robots = Robots::parse(b"user-agent: *\ndisallow: /a\x1b[2J\x08b\n");
        let rules = robots.agent_rules("x");
        let rule = rules.rule(0).expect("a rule");
        assert_eq!(rule.to_string(), "line 2: Disallow: /a\\u{1b}[2J\\u{8}b");
        assert_eq!(rule.value(), "/a\x1b[2J\x08b");
    }

    #[test]
    fn values_written_differently_from_their_pattern_are_kept_for_display() {
        let robots =
            Robots::parse("user-agent: *\ndisallow: /caf\u{e9}\nallow: /plain\n".as_bytes());
        let rules = robots.agent_rules("x");
        let v = rules.check("/caf%C3%A9/menu");
        let rule = v.rule.expect("a rule");
        assert_eq!(rule.pattern(), "/caf%C3%A9");
        assert_eq!(rule.value(), "/caf\u{e9}");
        assert_eq!(rule.to_string(), "line 2: Disallow: /caf\u{e9}");
        assert_eq!(
            rules.check("/plain").rule.map(|r| r.value()),
            Some("/plain")
        );
    }
}

#[cfg(test)]
mod license_tests {
    use super::*;

    /// RSL 1.0's robots.txt examples ("Adding RSL to robots.txt", "RSL
    /// and AI Preferences"): `License:` is global, before or inside a
    /// group, and leaves the groups as they are.
    #[test]
    fn license_lines_are_global() {
        let r = Robots::parse(
            b"License: https://your-website.com/license.xml\n\nUser-agent: Googlebot\nAllow: /\n",
        );
        assert_eq!(
            r.licenses(),
            [(1, "https://your-website.com/license.xml".into())]
        );
        assert!(r.agent_rules("Googlebot").check("/x").allowed);
        let r = Robots::parse(
            b"User-Agent: *\nAllow: /\n\nContent-Usage: train-ai=n\nLicense: https://your-website.com/license.xml\nDisallow: /private\n",
        );
        assert_eq!(r.licenses().len(), 1);
        assert_eq!(r.licenses()[0].0, 5);
        let rules = r.agent_rules("x");
        assert!(!rules.check("/private").allowed, "the group goes on");
        assert!(rules.usage("/", "train-ai").is_some());
        let many = "License: https://a.example/l.xml\n".repeat(100);
        assert_eq!(
            Robots::parse(many.as_bytes()).licenses().len(),
            MAX_LICENSES
        );
    }
}
