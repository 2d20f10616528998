//! The robots.txt engine: pure (no I/O, no async), parse once, query fast.
//!
//! ```
//! use robots_proxy::robots::Robots;
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

pub mod agent;
mod index;
pub mod normalize;
pub mod parse;
pub mod pattern;

use std::fmt;

pub use agent::{AgentSpec, product_token};
use normalize::Side;
use parse::Key;

/// One allow or disallow rule, as read from the file.
///
/// Kept compact (32 bytes and one allocation): a proxy caches the rules of
/// many origins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The normalised pattern (the form that is matched), followed by the
    /// value as written when that differs from it.
    text: Box<str>,
    pattern_len: u32,
    line: u32,
    allow: bool,
}

impl Rule {
    /// True for `Allow`, false for `Disallow`.
    pub fn is_allow(&self) -> bool {
        self.allow
    }
    /// 1-based line number in the robots.txt file.
    pub fn line(&self) -> u32 {
        self.line
    }
    /// The normalised pattern that is matched.
    pub fn pattern(&self) -> &str {
        &self.text[..self.pattern_len as usize]
    }
    /// The rule's value as it was written in the file.
    pub fn value(&self) -> &str {
        if self.text.len() > self.pattern_len as usize {
            &self.text[self.pattern_len as usize..]
        } else {
            &self.text
        }
    }
    /// The rule as text: `Disallow: /private`.
    pub fn text(&self) -> String {
        format!(
            "{}: {}",
            if self.allow { "Allow" } else { "Disallow" },
            self.value()
        )
    }
    /// Bytes held by this rule: the struct and its text.
    pub fn memory_usage(&self) -> usize {
        std::mem::size_of::<Self>() + self.text.len()
    }
    /// Precedence length: octets of the normalised pattern.
    fn specificity(&self) -> usize {
        self.pattern_len as usize
    }
}

impl fmt::Display for Rule {
    /// `line 3: Disallow: /private`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}: {}: {}",
            self.line,
            if self.allow { "Allow" } else { "Disallow" },
            self.value()
        )
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
}

/// A parsed robots.txt file.
#[derive(Clone, Debug, Default)]
pub struct Robots {
    groups: Vec<Group>,
    rules: Vec<Rule>,
    sitemaps: Vec<Box<str>>,
    truncated: bool,
}

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
                Key::Sitemap => {
                    if !line.value.is_empty() {
                        robots.sitemaps.push(line.value.into());
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
            + self.rules.iter().map(Rule::memory_usage).sum::<usize>()
            + self.sitemaps.iter().map(|s| 16 + s.len()).sum::<usize>()
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
        let mut rules: Vec<Rule> = groups
            .iter()
            .flat_map(|g| self.rules[g.start as usize..g.end as usize].iter().cloned())
            .collect();
        // Precedence order: longest pattern first; on a tie allow first
        // (RFC 9309 §2.2.2: "the allow SHOULD be used"); then file order.
        rules.sort_by(|a, b| {
            b.specificity()
                .cmp(&a.specificity())
                .then(b.allow.cmp(&a.allow))
                .then(a.line.cmp(&b.line))
        });
        // Several groups may give a delay; the most polite one wins.
        let crawl_delay = groups
            .iter()
            .filter_map(|g| g.crawl_delay)
            .fold(None, |acc: Option<f64>, d| {
                Some(acc.map_or(d, |a| a.max(d)))
            });
        AgentRules::new(rules.into_boxed_slice(), selection, crawl_delay)
    }
}

fn make_rule(allow: bool, line: u32, value: &str) -> Rule {
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
    Rule {
        text: text.into_boxed_str(),
        pattern_len,
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
    rules: Box<[Rule]>,
    index: Option<index::Index>,
    selection: Selection,
    crawl_delay: Option<f64>,
}

/// The answer for one URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict<'a> {
    pub allowed: bool,
    /// The rule that decided, if any rule matched.
    pub rule: Option<&'a Rule>,
}

impl AgentRules {
    fn new(rules: Box<[Rule]>, selection: Selection, crawl_delay: Option<f64>) -> AgentRules {
        let index = if rules.len() > INDEX_THRESHOLD {
            index::Index::build(&rules)
        } else {
            None
        };
        AgentRules {
            rules,
            index,
            selection,
            crawl_delay,
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
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// True if a prefilter index serves [`AgentRules::check`] (groups of more
    /// than [`INDEX_THRESHOLD`] rules); smaller groups are scanned in order.
    pub fn is_indexed(&self) -> bool {
        self.index.is_some()
    }

    /// Approximate bytes of memory held: the struct, its rules and their
    /// text, and the index.
    pub fn memory_usage(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.rules.iter().map(Rule::memory_usage).sum::<usize>()
            + self.index.as_ref().map_or(0, index::Index::memory_usage)
    }

    /// The position in [`AgentRules::rules`] of a rule that a [`Verdict`] of
    /// these rules returned (so callers can keep per-rule data, such as the
    /// rule pre-rendered as text, in a table). `None` for any other rule.
    pub fn rule_index(&self, rule: &Rule) -> Option<usize> {
        let size = std::mem::size_of::<Rule>();
        let offset = (rule as *const Rule as usize).wrapping_sub(self.rules.as_ptr() as usize);
        let i = offset / size;
        (offset.is_multiple_of(size) && self.rules.get(i).is_some_and(|r| std::ptr::eq(r, rule)))
            .then_some(i)
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
        let path = normalize::normalize_str(path_and_query, Side::Url);
        // `/robots.txt` itself is always allowed (RFC 9309 §2.2.2).
        if let Some(rest) = path.strip_prefix("/robots.txt")
            && (rest.is_empty() || rest.starts_with('?'))
        {
            return Verdict {
                allowed: true,
                rule: None,
            };
        }
        let found = match &self.index {
            None => self
                .rules
                .iter()
                .position(|r| pattern::matches(r.pattern(), &path)),
            Some(index) => index.first_match(&self.rules, &path),
        };
        match found {
            Some(i) => {
                let rule = &self.rules[i];
                Verdict {
                    allowed: rule.allow,
                    rule: Some(rule),
                }
            }
            None => Verdict {
                allowed: true,
                rule: None,
            },
        }
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
        }
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
        ] {
            assert_eq!(indexed.check(path), linear.check(path), "{path}");
        }
    }
}
