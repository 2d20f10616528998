//! `/.well-known/tdmrep.json` and the `tdm-reservation` value, as the W3C
//! TDM Reservation Protocol (Community Group Final Report, 2024) defines
//! them. Pure: no I/O; at most [`MAX_BYTES`] read and [`MAX_RULES`] rules
//! kept; one pass over the rules per match.
//!
//! * §"TDM File on the Origin Server": the file is a JSON array of rules,
//!   each with a mandatory `location` (a path pattern) and
//!   `tdm-reservation`, and an optional `tdm-policy` (a URL).
//! * The matching is robots.txt's (§"Use of regular expressions": `*` any
//!   characters, `$` the end; percent-encoded unreserved characters
//!   decoded before comparing), case-sensitive; "the most specific match
//!   is the first in sequence": the first rule that matches decides. No
//!   rule matching leaves `tdm-reservation` unset.
//! * §"tdm-reservation": `1` reserves TDM rights, `0` does not; any other
//!   value is a protocol error and leaves the value unset.
//! * A file that is not a JSON array: "failure to provide access to such a
//!   representation implies that the origin server does not implement
//!   this protocol": no reservation, and the reason is kept for reports.

use crate::robots::normalize::{Side, normalize_str};
use crate::robots::pattern;

/// The most of a tdmrep.json read; a longer file is cut here (and so
/// does not parse).
pub const MAX_BYTES: usize = 64 * 1024;

/// Rules kept; the rest are ignored and reported.
pub const MAX_RULES: usize = 1024;

/// A TDM reservation value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reservation {
    /// `1`: TDM rights are reserved.
    Reserved,
    /// `0`: not reserved.
    NotReserved,
}

impl Reservation {
    /// `1` or `0`; anything else is a protocol error (unset).
    pub fn parse(value: &str) -> Option<Reservation> {
        match value.trim() {
            "1" => Some(Reservation::Reserved),
            "0" => Some(Reservation::NotReserved),
            _ => None,
        }
    }

    fn from_json(v: &serde_json::Value) -> Option<Reservation> {
        match v {
            serde_json::Value::Number(n) => match n.as_u64() {
                Some(1) => Some(Reservation::Reserved),
                Some(0) => Some(Reservation::NotReserved),
                _ => None,
            },
            // Written as a string by some publishers; read alike.
            serde_json::Value::String(s) => Reservation::parse(s),
            _ => None,
        }
    }

    /// `1` or `0`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reservation::Reserved => "1",
            Reservation::NotReserved => "0",
        }
    }
}

/// One rule of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TdmRule {
    /// 1-based position in the array.
    pub index: usize,
    /// `location` as written.
    pub location: Box<str>,
    pattern: Box<str>,
    /// `None`: a protocol error (a value other than 0 and 1).
    pub reservation: Option<Reservation>,
    pub policy: Option<Box<str>>,
}

impl TdmRule {
    /// `rule 2 (location "/books/", tdm-reservation 1)`.
    pub fn element(&self) -> String {
        format!(
            "rule {} (location {:?}, tdm-reservation {}{})",
            self.index,
            &*self.location,
            self.reservation.map_or("unset", Reservation::as_str),
            self.policy
                .as_deref()
                .map(|p| format!(", tdm-policy {p:?}"))
                .unwrap_or_default()
        )
    }
}

/// A parsed tdmrep.json.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TdmFile {
    rules: Vec<TdmRule>,
    problems: Vec<String>,
}

impl TdmFile {
    /// Reads a file. `Err` (with why) when it is not a JSON array: the
    /// origin then does not implement the protocol.
    pub fn parse(bytes: &[u8]) -> Result<TdmFile, String> {
        if bytes.len() > MAX_BYTES {
            return Err(format!(
                "{} octets, longer than {MAX_BYTES}: not read",
                bytes.len()
            ));
        }
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
        let serde_json::Value::Array(items) = value else {
            return Err("not a JSON array of rules".into());
        };
        let mut file = TdmFile::default();
        if items.len() > MAX_RULES {
            file.problems.push(format!(
                "{} rules past the first {MAX_RULES} ignored",
                items.len() - MAX_RULES
            ));
        }
        for (i, item) in items.iter().take(MAX_RULES).enumerate() {
            let index = i + 1;
            let Some(location) = item.get("location").and_then(|l| l.as_str()) else {
                file.problems
                    .push(format!("rule {index}: no location: ignored"));
                continue;
            };
            let reservation = item.get("tdm-reservation").and_then(Reservation::from_json);
            if reservation.is_none() && file.problems.len() < 16 {
                file.problems.push(format!(
                    "rule {index}: tdm-reservation missing or neither 0 nor 1: unset"
                ));
            }
            let policy = item
                .get("tdm-policy")
                .and_then(|p| p.as_str())
                .map(Into::into);
            file.rules.push(TdmRule {
                index,
                location: location.into(),
                pattern: normalize_str(location, Side::Pattern).into(),
                reservation,
                policy,
            });
        }
        Ok(file)
    }

    /// The rule for a path (and query) as requested: the first that
    /// matches. `None`: no rule matches, the reservation is unset.
    pub fn decide(&self, path_and_query: &str) -> Option<&TdmRule> {
        let path = normalize_str(path_and_query, Side::Url);
        self.rules
            .iter()
            .find(|r| !r.pattern.is_empty() && pattern::matches(&r.pattern, &path))
    }

    /// Every rule, in order.
    pub fn rules(&self) -> &[TdmRule] {
        &self.rules
    }

    /// What could not be read.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §"TDM File on the Origin Server", first example: every file.
    #[test]
    fn spec_example_reserves_every_file() {
        let f =
            TdmFile::parse(br#"[ { "location": "/", "tdm-reservation": 1 } ]"#).expect("parses");
        for path in ["/", "/index.html", "/a/b?c=d"] {
            let r = f.decide(path).expect("a rule");
            assert_eq!(r.reservation, Some(Reservation::Reserved));
            assert_eq!(r.policy, None);
        }
    }

    /// §"TDM File on the Origin Server", second example: three groups.
    #[test]
    fn spec_example_three_groups() {
        let f = TdmFile::parse(
            br#"[
  { "location": "/directory-a/", "tdm-reservation": 1 },
  { "location": "/directory-b/html/", "tdm-reservation": 1,
    "tdm-policy":"https://provider.com/policies/policy.json" },
  { "location": "/directory-b/images/*.jpg", "tdm-reservation": 0 }
]"#,
        )
        .expect("parses");
        let a = f.decide("/directory-a/report.pdf").expect("a rule");
        assert_eq!((a.index, a.reservation), (1, Some(Reservation::Reserved)));
        let b = f.decide("/directory-b/html/page.html").expect("a rule");
        assert_eq!(b.index, 2);
        assert_eq!(
            b.policy.as_deref(),
            Some("https://provider.com/policies/policy.json")
        );
        let c = f.decide("/directory-b/images/photo.jpg").expect("a rule");
        assert_eq!(c.reservation, Some(Reservation::NotReserved));
        assert_eq!(f.decide("/directory-b/images/photo.png"), None, "unset");
        assert_eq!(f.decide("/elsewhere"), None);
        assert_eq!(
            b.element(),
            "rule 2 (location \"/directory-b/html/\", tdm-reservation 1, tdm-policy \"https://provider.com/policies/policy.json\")"
        );
    }

    /// §"Use of regular expressions": `$` ends the pattern, `*` any
    /// characters, `%24` a literal `$`, case-sensitive.
    #[test]
    fn spec_special_characters() {
        let f = TdmFile::parse(
            br#"[
  { "location": "/this/path/exactly$", "tdm-reservation": 1 },
  { "location": "/this/*/then", "tdm-reservation": 1 },
  { "location": "/path/foo-%24", "tdm-reservation": 1 }
]"#,
        )
        .expect("parses");
        assert_eq!(f.decide("/this/path/exactly").map(|r| r.index), Some(1));
        assert_eq!(f.decide("/this/path/exactly/more"), None);
        assert_eq!(f.decide("/this/x/y/then").map(|r| r.index), Some(2));
        assert_eq!(f.decide("/path/foo-$").map(|r| r.index), Some(3));
        assert_eq!(f.decide("/THIS/x/then"), None, "case-sensitive");
        // Unreserved characters percent-encoded are decoded first.
        assert_eq!(f.decide("/this/%78/then").map(|r| r.index), Some(2));
    }

    /// "The most specific match is the first in sequence".
    #[test]
    fn the_first_matching_rule_wins() {
        let f = TdmFile::parse(
            br#"[ { "location": "/books/free/", "tdm-reservation": 0 },
                 { "location": "/books/", "tdm-reservation": 1 },
                 { "location": "/books/free/x", "tdm-reservation": 1 } ]"#,
        )
        .expect("parses");
        assert_eq!(f.decide("/books/free/x").map(|r| r.index), Some(1));
        assert_eq!(f.decide("/books/other").map(|r| r.index), Some(2));
    }

    /// §"tdm-reservation": other values are protocol errors, unset.
    #[test]
    fn values_other_than_0_and_1_are_unset() {
        let f = TdmFile::parse(
            br#"[ { "location": "/a", "tdm-reservation": 2 },
                 { "location": "/b", "tdm-reservation": "1" },
                 { "tdm-reservation": 1 },
                 { "location": "/c" } ]"#,
        )
        .expect("parses");
        assert_eq!(f.decide("/a").and_then(|r| r.reservation), None);
        assert_eq!(
            f.decide("/b").and_then(|r| r.reservation),
            Some(Reservation::Reserved)
        );
        assert_eq!(f.rules().len(), 3, "the rule without location is dropped");
        assert_eq!(f.problems().len(), 3, "{:?}", f.problems());
        assert_eq!(Reservation::parse(" 1 "), Some(Reservation::Reserved));
        assert_eq!(Reservation::parse("yes"), None);
    }

    #[test]
    fn what_is_not_an_array_does_not_implement_the_protocol() {
        assert!(TdmFile::parse(b"{}").is_err());
        assert!(TdmFile::parse(b"<html>").is_err());
        assert!(TdmFile::parse(&vec![b' '; MAX_BYTES + 1]).is_err());
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(
            TdmFile::parse(deep.as_bytes()).is_err(),
            "no stack overflow"
        );
    }

    #[test]
    fn rules_past_the_cap_are_ignored_and_reported() {
        let many: Vec<String> = (0..MAX_RULES + 10)
            .map(|_| r#"{"location":"/","tdm-reservation":1}"#.to_string())
            .collect();
        let text = format!("[{}]", many.join(","));
        assert!(text.len() < MAX_BYTES);
        let f = TdmFile::parse(text.as_bytes()).expect("parses");
        assert_eq!(f.rules().len(), MAX_RULES);
        assert_eq!(f.problems(), ["10 rules past the first 1024 ignored"]);
    }
}
