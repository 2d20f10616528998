//! Usage preferences: what a site says its content may be used for, as
//! written in robots.txt groups.
//!
//! * `Content-Usage: [path] statement` (draft-ietf-aipref-attach-04,
//!   extending RFC 9309): the statement is the exemplary format of
//!   draft-ietf-aipref-vocab-08 §6, a Structured Fields Dictionary (RFC
//!   9651 §3.2) whose keys are usage categories (`train-ai`, `search`) and
//!   whose values are the tokens `y` (allowed) and `n` (disallowed).
//! * `Content-Signal: search=yes, ai-train=no, ai-input=yes` (Cloudflare's
//!   managed robots.txt; draft-romm-aipref-contentsignals): mapped onto the
//!   vocabulary as `search` → `search`, `ai-train` → `train-ai`, and
//!   `ai-input` (no category of the vocabulary: using content as input to
//!   an AI answer) kept as its own category `ai-input`; `yes` is `y`, `no`
//!   is `n`.
//!
//! Which rule applies to a path follows the drafts: the rules of the
//! groups selected for the crawler, matched like Allow/Disallow (the
//! longest matching path wins, a rule without a path matches every path
//! with length 0), rules of the same longest path combined most
//! restrictively (vocab §5.1: any `n` is `n`, else any `y` is `y`). The
//! two kinds of line are two statements, combined the same way. A value
//! that does not parse, an unknown category, or a value other than `y` and
//! `n` is kept as written and reported, never an error: it only leaves
//! the category unknown, which allows.
//!
//! Bounded: a statement is read in one pass over its value (at most a
//! robots.txt line, 16 KiB, or a header value), repeated keys are found
//! through a hash index rather than by rescanning, at most
//! [`MAX_CATEGORIES`] distinct categories are kept (later new ones are
//! ignored and reported once; the vocabulary's own `train-ai` and
//! `search`, and `ai-input`, are always kept, so junk keys cannot hide an
//! opt-out) and at most [`MAX_PROBLEMS`] problems are listed.
//!
//! Pure: no I/O.

use std::collections::HashMap;
use std::fmt;

/// Distinct categories one statement keeps; the vocabulary defines a
/// handful, so a statement with more is noise or an attack.
pub const MAX_CATEGORIES: usize = 256;

/// Categories kept whatever the cap: the vocabulary's (draft-ietf-aipref-vocab
/// §4: `train-ai` §4.1, `search` §4.2) and Content-Signal's `ai-input`.
fn always_kept(category: &str) -> bool {
    matches!(category, "train-ai" | "search" | "ai-input")
}

/// Problems one statement lists; past this, one line counts the rest.
pub const MAX_PROBLEMS: usize = 16;

/// The longest statement read (a robots.txt line's cap); a longer one,
/// as a response header can be, leaves every category unknown.
pub const MAX_STATEMENT: usize = 16 * 1024;

/// `n` lower-case letters keys (`a`, …, `z`, `aa`, …): short distinct
/// category labels for tests.
#[cfg(test)]
fn short_key(mut n: usize) -> String {
    let mut key = Vec::new();
    loop {
        key.push(b'a' + (n % 26) as u8);
        n /= 26;
        if n == 0 {
            break;
        }
        n -= 1;
    }
    key.reverse();
    String::from_utf8_lossy(&key).into_owned()
}

/// An explicit preference for one usage category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pref {
    /// `y`: the use is allowed.
    Allowed,
    /// `n`: the use is disallowed.
    Disallowed,
}

/// Which line a statement was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `Content-Usage` (IETF aipref).
    ContentUsage,
    /// `Content-Signal` (Cloudflare).
    ContentSignal,
}

impl Kind {
    /// The line's key as written in robots.txt.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ContentUsage => "Content-Usage",
            Kind::ContentSignal => "Content-Signal",
        }
    }
}

/// A parsed statement of preference: the categories with an explicit
/// preference, and what could not be read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Statement {
    /// Category label → preference, each label once (the last one written
    /// wins, as in a Dictionary).
    prefs: Vec<(Box<str>, Pref)>,
    /// What was not understood, for reports: unparseable input, values
    /// other than `y`/`n`; at most [`MAX_PROBLEMS`] and a count.
    problems: Vec<String>,
    problems_seen: usize,
}

impl Statement {
    /// The explicit preference for `category`, if any.
    pub fn get(&self, category: &str) -> Option<Pref> {
        self.prefs
            .iter()
            .find(|(c, _)| &**c == category)
            .map(|(_, p)| *p)
    }

    /// Every category with an explicit preference.
    pub fn prefs(&self) -> impl Iterator<Item = (&str, Pref)> {
        self.prefs.iter().map(|(c, p)| (&**c, *p))
    }

    /// What could not be understood (empty for a clean statement).
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    fn problem(&mut self, problem: String) {
        self.problems_seen += 1;
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(problem);
        }
    }

    /// Closes the problem list with a count of those left out.
    fn finish(mut self) -> Statement {
        if self.problems_seen > self.problems.len() {
            let more = self.problems_seen - self.problems.len();
            self.problems
                .push(format!("{more} more problems not listed"));
        }
        self
    }

    fn memory_usage(&self) -> usize {
        self.prefs.iter().map(|(c, _)| 24 + c.len()).sum::<usize>()
            + self.problems.iter().map(|p| 24 + p.len()).sum::<usize>()
    }
}

/// Parses a statement in the vocabulary's exemplary format (an RFC 9651
/// Dictionary). A Dictionary that does not parse leaves every category
/// unknown (vocab §6.5.1), and says why.
pub fn parse_statement(value: &str) -> Statement {
    let mut statement = Statement::default();
    if value.len() > MAX_STATEMENT {
        statement.problem(format!(
            "{} octets, longer than {MAX_STATEMENT}: not read",
            value.len()
        ));
        return statement.finish();
    }
    match parse_dictionary(value.as_bytes()) {
        Ok(Dictionary { members, dropped }) => {
            for (key, item) in members {
                let pref = match item {
                    Item::Token(t) if t == "y" => Pref::Allowed,
                    Item::Token(t) if t == "n" => Pref::Disallowed,
                    other => {
                        statement.problem(format!("{key}: {other} is neither y nor n"));
                        continue;
                    }
                };
                // Keys are distinct: the parser kept the last of each.
                statement.prefs.push((key.into_boxed_str(), pref));
            }
            if dropped > 0 {
                statement.problem(format!(
                    "{dropped} categories past the first {MAX_CATEGORIES} ignored"
                ));
            }
        }
        Err(e) => statement.problem(format!("not a Structured Fields Dictionary: {e}")),
    }
    statement.finish()
}

/// Parses a `Content-Signal` value (`search=yes, ai-train=no`), mapped onto
/// the vocabulary (see the module documentation). Names are read
/// case-insensitively; a member that is not `name=yes` or `name=no` is
/// reported and ignored.
pub fn parse_signal(value: &str) -> Statement {
    let mut statement = Statement::default();
    if value.len() > MAX_STATEMENT {
        statement.problem(format!(
            "{} octets, longer than {MAX_STATEMENT}: not read",
            value.len()
        ));
        return statement.finish();
    }
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut dropped = 0usize;
    for member in value.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            continue;
        }
        let Some((name, v)) = member.split_once('=') else {
            statement.problem(format!("{member}: no value"));
            continue;
        };
        let name = name.trim().to_ascii_lowercase();
        let pref = match v.trim().to_ascii_lowercase().as_str() {
            "yes" => Pref::Allowed,
            "no" => Pref::Disallowed,
            other => {
                statement.problem(format!("{name}: {other:?} is neither yes nor no"));
                continue;
            }
        };
        let category = match name.as_str() {
            "ai-train" => "train-ai",
            other => other,
        };
        if !matches!(category, "train-ai" | "search" | "ai-input") {
            statement.problem(format!("{name}: not a known content signal"));
        }
        // The last value of a name wins, found through the index.
        if let Some(&at) = index.get(category) {
            statement.prefs[at].1 = pref;
        } else if index.len() < MAX_CATEGORIES || always_kept(category) {
            index.insert(category.to_owned(), statement.prefs.len());
            statement.prefs.push((category.into(), pref));
        } else {
            dropped += 1;
        }
    }
    if dropped > 0 {
        statement.problem(format!(
            "{dropped} signals past the first {MAX_CATEGORIES} ignored"
        ));
    }
    statement.finish()
}

/// One `Content-Usage` or `Content-Signal` line of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageRule {
    /// Normalised path pattern; empty when the line has no path (it then
    /// applies to every path, with precedence length 0).
    pub(crate) pattern: Box<str>,
    pub(crate) line: u32,
    pub(crate) kind: Kind,
    /// The line's value as written.
    pub(crate) value: Box<str>,
    pub(crate) statement: Statement,
}

impl UsageRule {
    /// Reads the value of a line of `kind`: an optional path (it starts
    /// with `/` and ends at the first space or tab), then the statement.
    pub(crate) fn parse(kind: Kind, line: u32, value: &str) -> UsageRule {
        let (path, rest) = if value.starts_with('/') {
            match value.find([' ', '\t']) {
                Some(i) => (&value[..i], value[i..].trim_start_matches([' ', '\t'])),
                None => (value, ""),
            }
        } else {
            ("", value)
        };
        let pattern = if path.is_empty() {
            String::new()
        } else {
            super::normalize::normalize_str(path, super::normalize::Side::Pattern).into_owned()
        };
        let statement = match kind {
            Kind::ContentUsage => parse_statement(rest),
            Kind::ContentSignal => parse_signal(rest),
        };
        UsageRule {
            pattern: pattern.into_boxed_str(),
            line,
            kind,
            value: value.into(),
            statement,
        }
    }

    /// 1-based line number.
    pub fn line(&self) -> u32 {
        self.line
    }

    /// Which kind of line.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The statement read from the line.
    pub fn statement(&self) -> &Statement {
        &self.statement
    }

    fn matches(&self, path: &str) -> bool {
        self.pattern.is_empty() || super::pattern::matches(&self.pattern, path)
    }

    pub(crate) fn memory_usage(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.pattern.len()
            + self.value.len()
            + self.statement.memory_usage()
    }
}

impl fmt::Display for UsageRule {
    /// `line 5: Content-Usage: /ai-ok/ train-ai=y`, control characters
    /// escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}: ", self.line, self.kind.as_str())?;
        super::write_escaped(f, &self.value)
    }
}

/// The preference that applies to a path for one category, and the rule
/// that says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageVerdict<'a> {
    /// The preference stated for the category.
    pub pref: Pref,
    /// The deciding rule: for a `n`, a rule that says `n`.
    pub rule: &'a UsageRule,
}

/// The preference of `rules` (one crawler's) for `category` on the
/// normalised `path`, if any rule states one.
pub(crate) fn decide<'a>(
    rules: &'a [UsageRule],
    path: &str,
    category: &str,
) -> Option<UsageVerdict<'a>> {
    let mut best: Option<UsageVerdict<'a>> = None;
    for kind in [Kind::ContentUsage, Kind::ContentSignal] {
        let matching = || {
            rules
                .iter()
                .filter(move |r| r.kind == kind && r.matches(path))
        };
        let Some(longest) = matching().map(|r| r.pattern.len()).max() else {
            continue;
        };
        // Rules of the longest path combine most restrictively.
        for rule in matching().filter(|r| r.pattern.len() == longest) {
            if let Some(pref) = rule.statement.get(category) {
                let stricter = match &best {
                    None => true,
                    Some(b) => pref > b.pref,
                };
                if stricter {
                    best = Some(UsageVerdict { pref, rule });
                }
            }
        }
    }
    best
}

// --- A Structured Fields Dictionary (RFC 9651 §4.2.2), enough to read
// --- statements: members, bare items, inner lists, parameters.

/// A member's value; parameters are read and dropped (vocab §6.5.2).
#[derive(Clone, Debug, PartialEq)]
enum Item {
    Token(String),
    Other(&'static str),
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Item::Token(t) => write!(f, "token {t:?}"),
            Item::Other(kind) => f.write_str(kind),
        }
    }
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

/// A parsed Dictionary: its members, each key once with its last value
/// (RFC 9651 §4.2.2: a repeated key overwrites the value, in place), and
/// how many distinct keys past [`MAX_CATEGORIES`] were dropped.
struct Dictionary {
    members: Vec<(String, Item)>,
    dropped: usize,
}

fn parse_dictionary(b: &[u8]) -> Result<Dictionary, String> {
    let mut p = Parser { b, i: 0 };
    let mut members: Vec<(String, Item)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut dropped = 0usize;
    let done = |members, dropped| Ok(Dictionary { members, dropped });
    p.skip(b" ");
    while p.i < p.b.len() {
        let key = p.key()?;
        let item = if p.peek() == Some(b'=') {
            p.i += 1;
            p.member_value()?
        } else {
            p.parameters()?;
            Item::Other("boolean")
        };
        if let Some(&at) = index.get(&key) {
            members[at].1 = item;
        } else if index.len() < MAX_CATEGORIES || always_kept(&key) {
            index.insert(key.clone(), members.len());
            members.push((key, item));
        } else {
            dropped += 1;
        }
        p.skip(b" \t");
        if p.i == p.b.len() {
            return done(members, dropped);
        }
        if p.peek() != Some(b',') {
            return Err(format!("expected ',' at octet {}", p.i + 1));
        }
        p.i += 1;
        p.skip(b" \t");
        if p.i == p.b.len() {
            return Err("trailing ','".into());
        }
    }
    done(members, dropped)
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn skip(&mut self, what: &[u8]) {
        while self.peek().is_some_and(|c| what.contains(&c)) {
            self.i += 1;
        }
    }

    fn key(&mut self) -> Result<String, String> {
        let start = self.i;
        match self.peek() {
            Some(c) if c.is_ascii_lowercase() || c == b'*' => self.i += 1,
            _ => return Err(format!("expected a key at octet {}", start + 1)),
        }
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-.*".contains(&c))
        {
            self.i += 1;
        }
        Ok(String::from_utf8_lossy(&self.b[start..self.i]).into_owned())
    }

    fn member_value(&mut self) -> Result<Item, String> {
        if self.peek() == Some(b'(') {
            self.i += 1;
            loop {
                self.skip(b" ");
                if self.peek() == Some(b')') {
                    self.i += 1;
                    break;
                }
                self.bare_item()?;
                self.parameters()?;
                match self.peek() {
                    Some(b' ' | b')') => {}
                    _ => return Err(format!("bad inner list at octet {}", self.i + 1)),
                }
            }
            self.parameters()?;
            return Ok(Item::Other("an inner list"));
        }
        let item = self.bare_item()?;
        self.parameters()?;
        Ok(item)
    }

    fn parameters(&mut self) -> Result<(), String> {
        while self.peek() == Some(b';') {
            self.i += 1;
            self.skip(b" ");
            self.key()?;
            if self.peek() == Some(b'=') {
                self.i += 1;
                self.bare_item()?;
            }
        }
        Ok(())
    }

    fn bare_item(&mut self) -> Result<Item, String> {
        let at = self.i + 1;
        match self.peek() {
            Some(c) if c.is_ascii_alphabetic() || c == b'*' => {
                let start = self.i;
                self.i += 1;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&c))
                {
                    self.i += 1;
                }
                Ok(Item::Token(
                    String::from_utf8_lossy(&self.b[start..self.i]).into_owned(),
                ))
            }
            Some(b'"') => {
                self.i += 1;
                loop {
                    match self.peek() {
                        Some(b'\\') => match self.b.get(self.i + 1) {
                            Some(b'"' | b'\\') => self.i += 2,
                            _ => return Err(format!("bad escape in string at octet {at}")),
                        },
                        Some(b'"') => {
                            self.i += 1;
                            return Ok(Item::Other("a string"));
                        }
                        Some(0x20..=0x7e) => self.i += 1,
                        _ => return Err(format!("unterminated string at octet {at}")),
                    }
                }
            }
            Some(b'-' | b'0'..=b'9') => {
                self.i += 1;
                while self.peek().is_some_and(|c| c.is_ascii_digit() || c == b'.') {
                    self.i += 1;
                }
                Ok(Item::Other("a number"))
            }
            Some(b'?') => match self.b.get(self.i + 1) {
                Some(b'0' | b'1') => {
                    self.i += 2;
                    Ok(Item::Other("a boolean"))
                }
                _ => Err(format!("bad boolean at octet {at}")),
            },
            Some(b':') => {
                self.i += 1;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || b"+/=".contains(&c))
                {
                    self.i += 1;
                }
                if self.peek() != Some(b':') {
                    return Err(format!("unterminated byte sequence at octet {at}"));
                }
                self.i += 1;
                Ok(Item::Other("a byte sequence"))
            }
            _ => Err(format!("expected a value at octet {at}")),
        }
    }
}

/// True for a usage category label as the vocabulary writes them:
/// lower-case letters, digits, `_ - . *`, starting with a letter or `*`.
pub fn is_category(s: &str) -> bool {
    let b = s.as_bytes();
    b.first()
        .is_some_and(|c| c.is_ascii_lowercase() || *c == b'*')
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-.*".contains(c))
}

/// The usage categories of a comma-separated list (a purpose header or
/// query), lower-cased; what is not a category is left out.
pub fn categories(list: &str) -> impl Iterator<Item = String> + '_ {
    list.split(',')
        .map(|p| p.trim().to_ascii_lowercase())
        .filter(|p| is_category(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocab_example_allows_training_and_disallows_search() {
        // draft-ietf-aipref-vocab §6.
        let s = parse_statement("train-ai=y, search=n");
        assert_eq!(s.get("train-ai"), Some(Pref::Allowed));
        assert_eq!(s.get("search"), Some(Pref::Disallowed));
        assert_eq!(s.get("ai-input"), None);
        assert!(s.problems().is_empty());
    }

    #[test]
    fn vocab_example_duplicated_keys_take_the_last_value_and_leave_all_unknown() {
        // §6.5.1: the last values are a boolean and a string, not tokens.
        let s = parse_statement(r#"train-ai=y, train-ai, search=n, search="n""#);
        assert_eq!(s.get("train-ai"), None);
        assert_eq!(s.get("search"), None);
        assert_eq!(s.problems().len(), 2, "{:?}", s.problems());
    }

    #[test]
    fn vocab_example_parameters_are_ignored() {
        // §6.5.2.
        let s = parse_statement("train-ai;allow=n, train-ai=y");
        assert_eq!(s.get("train-ai"), Some(Pref::Allowed));
        let s = parse_statement(r#"train-ai;has;parameters="?";"#);
        assert_eq!(s.get("train-ai"), None);
    }

    #[test]
    fn uppercase_keys_fail_the_whole_dictionary() {
        let s = parse_statement("Train-AI=n, search=n");
        assert_eq!(s.get("search"), None);
        assert_eq!(s.problems().len(), 1);
    }

    #[test]
    fn values_other_than_y_and_n_are_unknown_and_reported() {
        let s = parse_statement("train-ai=no, search=?1, x=(a b), y=:aGk=:, z=1.5");
        assert_eq!(s.get("train-ai"), None);
        assert_eq!(s.prefs().count(), 0);
        assert_eq!(s.problems().len(), 5, "{:?}", s.problems());
    }

    #[test]
    fn content_signal_maps_onto_the_vocabulary() {
        // As Cloudflare's managed robots.txt writes it.
        let s = parse_signal("search=yes, ai-train=no, ai-input=yes");
        assert_eq!(s.get("search"), Some(Pref::Allowed));
        assert_eq!(s.get("train-ai"), Some(Pref::Disallowed));
        assert_eq!(s.get("ai-input"), Some(Pref::Allowed));
        assert!(s.problems().is_empty());
        let s = parse_signal("Search=YES,ai-train = no, foo=maybe, bar");
        assert_eq!(s.get("search"), Some(Pref::Allowed));
        assert_eq!(s.get("train-ai"), Some(Pref::Disallowed));
        assert_eq!(s.problems().len(), 2);
    }

    #[test]
    fn a_rule_reads_its_optional_path() {
        let r = UsageRule::parse(Kind::ContentUsage, 5, "/ai-ok/ train-ai=y");
        assert_eq!(&*r.pattern, "/ai-ok/");
        assert_eq!(r.statement.get("train-ai"), Some(Pref::Allowed));
        let r = UsageRule::parse(Kind::ContentUsage, 4, "train-ai=n");
        assert_eq!(&*r.pattern, "");
        assert_eq!(r.to_string(), "line 4: Content-Usage: train-ai=n");
        let r = UsageRule::parse(Kind::ContentUsage, 4, "/caf\u{e9}\ttrain-ai=n");
        assert_eq!(&*r.pattern, "/caf%C3%A9");
    }

    #[test]
    fn identical_paths_combine_most_restrictively() {
        let rules = [
            UsageRule::parse(Kind::ContentUsage, 1, "/a train-ai=y"),
            UsageRule::parse(Kind::ContentUsage, 2, "/a train-ai=n"),
            UsageRule::parse(Kind::ContentSignal, 3, "ai-train=yes"),
        ];
        let v = decide(&rules, "/a/x", "train-ai").expect("a preference");
        assert_eq!((v.pref, v.rule.line), (Pref::Disallowed, 2));
        // The two kinds are two statements: the stricter wins.
        let rules = [
            UsageRule::parse(Kind::ContentUsage, 1, "train-ai=y"),
            UsageRule::parse(Kind::ContentSignal, 2, "ai-train=no"),
        ];
        let v = decide(&rules, "/", "train-ai").expect("a preference");
        assert_eq!((v.pref, v.rule.line), (Pref::Disallowed, 2));
        assert_eq!(decide(&rules, "/", "search"), None);
    }

    /// A line as long as robots.txt allows (16 KiB) with 2,726 keys: read
    /// in one pass, the last value of a repeated key kept, new keys past
    /// the cap ignored and reported once, problems listed up to the cap.
    #[test]
    fn a_huge_statement_is_read_whole_within_its_caps() {
        let keys: Vec<String> = (0..2_723).map(short_key).collect();
        assert_eq!(keys[2], "c");
        assert_eq!(keys[26], "aa");
        let mut line = String::from("search=y");
        for k in &keys {
            line.push_str(&format!(",{k}=n"));
        }
        line.push_str(",train-ai=n");
        assert!(line.len() <= MAX_STATEMENT, "{}", line.len());
        let s = parse_statement(&line);
        assert_eq!(s.get("train-ai"), Some(Pref::Disallowed), "last value wins");
        assert_eq!(s.get("search"), Some(Pref::Allowed));
        assert_eq!(s.get(&keys[0]), Some(Pref::Disallowed));
        assert_eq!(s.get(&keys[254]), Some(Pref::Disallowed));
        assert_eq!(s.get(&keys[255]), None, "past the cap");
        assert_eq!(s.prefs().count(), MAX_CATEGORIES + 1);
        assert_eq!(s.problems(), ["2468 categories past the first 256 ignored"]);

        // Every member a problem: listed up to the cap, then counted.
        let bad = keys
            .iter()
            .map(|k| format!("{k}=1"))
            .collect::<Vec<_>>()
            .join(",");
        let s = parse_statement(&bad);
        assert_eq!(s.problems().len(), MAX_PROBLEMS + 1);
        assert_eq!(
            s.problems().last().map(String::as_str),
            Some("241 more problems not listed")
        );

        let mut signal = String::new();
        for k in &keys[..2_000] {
            signal.push_str(&format!(",{k}=no"));
        }
        signal.push_str(",ai-train=no");
        let s = parse_signal(&signal);
        assert_eq!(s.get("train-ai"), Some(Pref::Disallowed));
        assert_eq!(s.prefs().count(), MAX_CATEGORIES + 1);
        assert!(s.problems().len() <= MAX_PROBLEMS + 1);

        // Longer than the cap: not read at all.
        let s = parse_statement(&format!("train-ai=n,{}", "a=y,".repeat(5000)));
        assert_eq!(s.get("train-ai"), None);
        assert_eq!(s.problems().len(), 1);
    }

    /// The same line in a robots.txt file: one rule, read through the
    /// file's line cap.
    #[test]
    fn a_huge_content_usage_line_in_robots_txt_decides() {
        let mut line = String::from("User-agent: *\nContent-Usage: /");
        line.push_str(" search=y");
        for k in (0..2_726).map(short_key) {
            line.push_str(&format!(",{k}=y"));
        }
        line.push_str(",train-ai=n\n");
        let robots = crate::Robots::parse(line.as_bytes());
        let rules = robots.agent_rules("ExampleBot");
        let v = rules.usage("/x", "train-ai").expect("a preference");
        assert_eq!(v.pref, Pref::Disallowed);
    }
}
