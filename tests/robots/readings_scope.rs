//! A reading of a rule carries the rule over to other spellings of what it
//! names and never widens it: a `Disallow` is read by decodings alone, so a
//! rule about a spelling (`/*.$`, `/;`, `//folder/`) stays a rule about
//! that spelling, while every path reading still catches the bypass forms.
//!
//! The property: for a path that every reading leaves as it is (its
//! canonical spelling), the strict verdict is RFC 9309's on the path as
//! written, unless a `Disallow` decoded into the path's spelling names it
//! literally (`Disallow: /wiki/Special%3A` for `/wiki/Special:Search`).

use std::path::Path;
use std::sync::OnceLock;

use proptest::prelude::*;
use robots_proxy::robots::canon::readings;
use robots_proxy::robots::pattern::matches;
use robots_proxy::robots::{AgentRules, Robots};

fn rules(txt: &str) -> AgentRules {
    Robots::parse(txt.as_bytes()).agent_rules("ExampleBot")
}

fn strict(rules: &AgentRules, path: &str) -> bool {
    rules.check_resolved(path).verdict.allowed
}

#[test]
fn a_rule_about_a_trailing_dot_blocks_only_paths_that_end_in_one() {
    // msdn.microsoft.com's robots.txt.
    let r = rules("User-agent: *\nDisallow: /*.$\n");
    for path in ["/a.", "/a.pdf.", "/x/y."] {
        assert!(!strict(&r, path), "{path}");
    }
    for path in ["/a.pdf", "/Alexa/b", "/", "/a.b/c"] {
        assert!(strict(&r, path), "{path}");
    }
}

#[test]
fn a_rule_about_parameters_blocks_only_paths_that_have_them() {
    // protego's test_url_parts #5.
    let r = rules("User-agent: *\nDisallow: /;\n");
    assert!(!strict(&r, "/;x"));
    assert!(!strict(&r, "/;"));
    assert!(strict(&r, "/"));
    assert!(strict(&r, "/page"));
    // A real file's session rule: not the whole site.
    let r = rules("User-agent: *\nDisallow: /*;jsessionid=\n");
    assert!(!strict(&r, "/shop;jsessionid=42"));
    assert!(strict(&r, "/shop"));
}

#[test]
fn a_rule_about_a_doubled_slash_blocks_only_that_spelling() {
    // protego's test_leading_double_slash_in_pattern, all six.
    let r = rules("User-agent: *\nDisallow: //folder/*\n");
    for path in ["/", "/folder", "/folder/", "/folder/page", "//folder"] {
        assert!(strict(&r, path), "{path}");
    }
    assert!(!strict(&r, "//folder/page"));
    let r = rules("User-agent: *\nDisallow: //\n");
    assert!(!strict(&r, "//x"));
    assert!(strict(&r, "/x"));
}

#[test]
fn a_rule_about_a_resource_still_holds_for_every_spelling_of_it() {
    let r = rules("User-agent: *\nAllow: /public/\nDisallow: /private\n");
    for path in [
        "/private",
        "/private.",
        "/private./x",
        "/private%20/x",
        "/public/..\\private",
        "/public/../private/x",
        "//private/x",
        "/%70rivate",
        "/public/..%2Fprivate",
        "/public/..;/private",
        "/%2570rivate/x",
        "/%252e%252e/private",
        "/public/%252e%252e/private/x",
    ] {
        assert!(!strict(&r, path), "{path}");
    }
    for path in ["/public/x", "/privacy", "/public/private"] {
        assert!(strict(&r, path), "{path}");
    }
}

#[test]
fn a_rule_written_encoded_is_carried_over_to_the_decoded_spelling() {
    let r = rules("User-agent: *\nDisallow: /wiki/Special%3A\n");
    let verdict = r.check_resolved("/wiki/Special:Search");
    assert!(!verdict.verdict.allowed);
    assert_eq!(verdict.judged_as, None);
    assert!(verdict.reading.is_some());
}

#[test]
fn an_explicit_allow_in_a_spelling_a_reading_removes_still_allows() {
    // Read in full, the Allow keeps allowing its own spelling in the
    // readings that drop `;v=2`, trailing dots or doubled slashes.
    for (allow, path) in [
        ("/a;v=2", "/a;v=2"),
        ("/report.", "/report."),
        ("//feed", "//feed"),
    ] {
        let r = rules(&format!("User-agent: *\nDisallow: /\nAllow: {allow}\n"));
        assert!(strict(&r, path), "{allow}");
    }
}

#[test]
fn an_allow_read_shorter_keeps_its_precedence_as_written() {
    // `/x.` and `/x*` are equally specific as written, and the Allow wins
    // the tie; in the Windows reading the Allow is `/x`, but it keeps the
    // length it was written with, so `/x.y` stays allowed.
    let r = rules("User-agent: *\nDisallow: /x*\nAllow: /x.\n");
    assert!(r.check("/x.y").allowed);
    assert!(strict(&r, "/x.y"));
}

// --- the property ---------------------------------------------------------

/// Rule values of the corpus (`../shared/bench-data/corpus`), when it is
/// beside the repository; none otherwise (the generated shapes still run).
fn corpus_rules() -> &'static [String] {
    static RULES: OnceLock<Vec<String>> = OnceLock::new();
    RULES.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/bench-data/corpus");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            eprintln!(
                "note: {} not found: the property runs on generated rules only",
                dir.display()
            );
            return Vec::new();
        };
        let mut names: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            let Ok(bytes) = std::fs::read(&name) else {
                continue;
            };
            for line in String::from_utf8_lossy(&bytes).lines() {
                let line = line.split('#').next().unwrap_or_default().trim();
                let Some((key, value)) = line.split_once(':') else {
                    continue;
                };
                let key = key.trim().to_ascii_lowercase();
                let value = value.trim();
                if (key == "disallow" || key == "allow") && !value.is_empty() && value.len() < 80 {
                    out.push(value.to_string());
                }
            }
        }
        out.sort();
        out.dedup();
        out
    })
}

/// Rule values built from the pieces readings remove, decode or fold.
fn adversarial_rule() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "a",
        "b",
        "x.y",
        "pdf",
        ".",
        "..",
        "",
        ";",
        ";jsessionid=",
        "%2F",
        "%3A",
        "%5C",
        "\\",
        "a.",
        "a%20",
        "*",
        "*.",
        ".*",
        "P",
        ":",
        "%40",
        "%2570",
        "?",
        "?q=%2F",
    ]);
    (
        prop::collection::vec(piece, 0..6),
        prop::option::of(prop::sample::select(vec!["$", "*", "*$", ".$", ";$", "/"])),
    )
        .prop_map(|(pieces, tail)| {
            let mut v = format!("/{}", pieces.join("/"));
            if let Some(t) = tail {
                v.push_str(t);
            }
            v
        })
}

/// A rule from the corpus (by index) or a generated one.
fn rule() -> impl Strategy<Value = String> {
    let corpus = corpus_rules();
    if corpus.is_empty() {
        adversarial_rule().boxed()
    } else {
        prop_oneof![
            adversarial_rule(),
            (0..corpus.len()).prop_map(move |i| corpus[i].clone()),
        ]
        .boxed()
    }
}

/// Paths, most of them canonical: segments of letters, digits, dots inside
/// a name, encoded non-ASCII, a query of literal delimiters.
fn path() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "a",
        "b",
        "x.y",
        "a.pdf",
        "private",
        "wiki",
        "Special:Search",
        "%C3%A9",
        "folder",
        "page",
        "-",
        "_x",
        "1",
        "index.html",
        "Alexa",
    ]);
    (
        prop::collection::vec(piece, 0..5),
        any::<bool>(),
        prop::option::of(prop::sample::select(vec![
            "q=1",
            "u=http://x/y",
            "a=b&c=d",
            "",
        ])),
    )
        .prop_map(|(pieces, slash, query)| {
            let mut p = format!("/{}", pieces.join("/"));
            if slash && !pieces.is_empty() {
                p.push('/');
            }
            if let Some(q) = query {
                p.push('?');
                p.push_str(q);
            }
            p
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn on_a_canonical_path_only_a_decoded_rule_naming_it_changes_rfc_9309s_verdict(
        p in path(),
        rules in prop::collection::vec((any::<bool>(), rule()), 1..8),
    ) {
        // Canonical: no reading changes it (the default configuration
        // folds no case).
        prop_assume!(readings(&p, false).is_empty());
        let txt = crate::canon_props::star_group(&rules);
        let robots = Robots::parse(txt.as_bytes());
        let compiled = robots.agent_rules("ExampleBot");
        let rfc = compiled.check(&p);
        let resolved = compiled.check_resolved(&p);
        if resolved.verdict.allowed == rfc.allowed {
            return Ok(());
        }
        // Only ever stricter, never through another spelling of the path.
        prop_assert!(rfc.allowed && !resolved.verdict.allowed, "{}\n{}", p, txt);
        prop_assert_eq!(resolved.judged_as.as_deref(), None);
        let reading = resolved.reading.expect("a reading decided");
        let rule = resolved.verdict.rule.expect("a rule decided");
        prop_assert!(!rule.is_allow());
        let decoded = reading.decode_pattern(rule.pattern());
        // The rule read into the path's spelling names it; as written it
        // does not; and the reading touched no wildcard.
        prop_assert!(matches(&decoded, &p), "{} {:?} {}", p, reading, decoded);
        prop_assert!(!matches(rule.pattern(), &p), "{} {}", p, rule);
        prop_assert_eq!(decoded.matches('*').count(), rule.pattern().matches('*').count());
        prop_assert_eq!(decoded.ends_with('$'), rule.pattern().ends_with('$'));
    }
}

// --- rules after a `*`, and readings that stack -------------------------

/// Strict is disallowed exactly when the path as sent or some reading is.
fn consistent(r: &AgentRules, path: &str, folded: bool) {
    let strict = r.check_resolved_in(path, folded);
    let any = robots_proxy::robots::canon::READINGS
        .iter()
        .filter(|k| folded || !k.folds_case())
        .any(|k| !r.check_reading(*k, path).allowed);
    assert_eq!(
        strict.verdict.allowed,
        r.check(path).allowed && !any,
        "{path}: {strict:?}"
    );
}

#[test]
fn a_rule_after_a_star_is_not_decoded_where_a_query_keeps_the_escape() {
    // msdn.microsoft.com's `Disallow: /*%26`: the decoded reading leaves a
    // query's `%26` and `&` as they are, so the rule stays about `%26`.
    let r = rules("User-agent: *\nDisallow: /*%26\nDisallow: /*%3D\n");
    for path in [
        "/x?a=1&b=2",
        "/search?a=1",
        "/subscriptions/downloads/?a=1&b=2",
    ] {
        assert!(strict(&r, path), "{path}");
        consistent(&r, path, false);
    }
    assert!(!strict(&r, "/x?a=1%26b"));
    assert!(!strict(&r, "/x%26y"));
}

#[test]
fn an_allow_after_a_star_allows_its_own_spelling_in_every_reading() {
    let r = rules(
        "User-agent: *\nDisallow: /redirect\nAllow: /redirect*url=https%3A%2F%2Fexample.com\n",
    );
    let path = "/redirect?url=https%3A%2F%2Fexample.com%2Fpage";
    assert!(r.check(path).allowed);
    assert!(strict(&r, path));
    consistent(&r, path, false);
    let r = rules("User-agent: *\nDisallow: /\nAllow: /*%3A\n");
    assert!(strict(&r, "/x?y=%3A"));
    consistent(&r, "/x?y=%3A", false);
}

#[test]
fn strict_answers_as_every_reading_does_for_rules_spanning_the_query() {
    for (txt, path, folded) in [
        (
            "User-agent: *\nDisallow: /\nAllow: /*%3B\n",
            "/x?y=%3B",
            false,
        ),
        (
            "User-agent: *\nDisallow: /a\nAllow: /a/*/../b\n",
            "/a/x?/../b",
            false,
        ),
        (
            "User-agent: *\nDisallow: /a\nAllow: /a/*/../b\n",
            "/a/./x?/../b",
            false,
        ),
        ("User-agent: *\nDisallow: /\nAllow: /*A\n", "/x?A", true),
        ("User-agent: *\nDisallow: /\nAllow: /*A\n", "/x%3A", true),
    ] {
        consistent(&rules(txt), path, folded);
    }
}

#[test]
fn spellings_that_stack_two_readings_are_blocked() {
    let r = rules("User-agent: *\nAllow: /public/\nDisallow: /private\n");
    for path in [
        "/public/..;/%2570rivate/x",
        "/public/../;/%2570rivate/x",
        "/public/%252e%252e;/private/x",
        "/public/..%252F;/private/x",
        "/public/..%255Cprivate/x",
        "/public%5C../%2570rivate/x",
        "/public/..%3B/private/x",
        "/public%5C..;/private/x",
    ] {
        assert!(!strict(&r, path), "{path}");
    }
    for path in ["/public/..;/PRIVATE/x", "/%2550RIVATE/x"] {
        assert!(r.check_resolved_in(path, false).verdict.allowed, "{path}");
        assert!(!r.check_resolved_in(path, true).verdict.allowed, "{path}");
    }
}
