//! Property tests of the robots.txt engine against simple reference
//! implementations written here: a naive percent-encoding normaliser and a
//! dynamic-programming wildcard matcher with the RFC's precedence.
//! Case counts are modest so that a debug `cargo test` stays quick.

use proptest::prelude::*;
use robots_proxy::robots::normalize::{Side, normalize};
use robots_proxy::robots::{AgentRules, INDEX_THRESHOLD, Robots};

// ---------------------------------------------------------------------------
// Reference implementations
// ---------------------------------------------------------------------------

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~".contains(&b)
}

/// The normal form, spelled out octet by octet (see `normalize`'s module
/// documentation for the rules).
fn ref_normalize(s: &[u8], side: Side) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = String::new();
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if b == b'%' {
            if let (Some(h), Some(l)) = (
                s.get(i + 1).copied().and_then(hex),
                s.get(i + 2).copied().and_then(hex),
            ) {
                let v = (h * 16 + l) as u8;
                if is_unreserved(v) {
                    out.push(v as char);
                } else {
                    out.push_str(&format!("%{v:02X}"));
                }
                i += 3;
                continue;
            }
            out.push_str("%25");
            i += 1;
            continue;
        }
        let last = i + 1 == s.len();
        let encode = !(0x21..0x7f).contains(&b)
            || b"\"<>\\^`{|}".contains(&b)
            || (b == b'*' && side == Side::Url)
            || (b == b'$' && (side == Side::Url || !last));
        if encode {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(b as char);
        }
        i += 1;
    }
    out
}

/// Does `path` match `pattern` (`*` any run, final `$` anchors)? Plain DP.
fn ref_matches(pattern: &[u8], path: &[u8]) -> bool {
    let (pat, anchored) = match pattern.split_last() {
        Some((b'$', rest)) => (rest, true),
        _ => (pattern, false),
    };
    let (n, m) = (pat.len(), path.len());
    // dp[i][j]: pat[..i] matches path[..j] exactly.
    let mut dp = vec![vec![false; m + 1]; n + 1];
    dp[0][0] = true;
    for i in 1..=n {
        for j in 0..=m {
            dp[i][j] = if pat[i - 1] == b'*' {
                dp[i - 1][j] || (j > 0 && dp[i][j - 1])
            } else {
                j > 0 && dp[i - 1][j - 1] && pat[i - 1] == path[j - 1]
            };
        }
    }
    if anchored {
        dp[n][m]
    } else {
        dp[n].iter().any(|&x| x)
    }
}

/// The deciding rule by the RFC's precedence: most octets, then allow, then
/// the earliest line. Returns `(allowed, line of the rule)`.
fn ref_decide(rules: &[(bool, String)], path: &str) -> (bool, Option<u32>) {
    let mut best: Option<(usize, bool, u32)> = None;
    for (k, (allow, pattern)) in rules.iter().enumerate() {
        let line = k as u32 + 2; // line 1 is `user-agent: *`
        if !ref_matches(pattern.as_bytes(), path.as_bytes()) {
            continue;
        }
        let better = match best {
            None => true,
            Some((len, a, _)) => pattern.len() > len || (pattern.len() == len && *allow && !a),
        };
        if better {
            best = Some((pattern.len(), *allow, line));
        }
    }
    match best {
        Some((_, allow, line)) => (allow, Some(line)),
        None => (true, None),
    }
}

fn compile(rules: &[(bool, String)]) -> AgentRules {
    let mut txt = String::from("user-agent: *\n");
    for (allow, pattern) in rules {
        txt.push_str(if *allow { "allow: " } else { "disallow: " });
        txt.push_str(pattern);
        txt.push('\n');
    }
    Robots::parse(txt.as_bytes()).agent_rules("anybot")
}

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

/// URL-ish text: unreserved, reserved, wildcards, escapes, a non-ASCII
/// letter and a space.
fn url_text() -> impl Strategy<Value = String> {
    proptest::string::string_regex(r"[/a-zA-Z0-9%?*$#:@.~_\-=&\[\] é]{0,40}")
        .expect("valid regex")
        .prop_map(|s| format!("/{s}"))
}

/// A small alphabet makes literal occurrences, overlaps and ties frequent.
/// No `?` or `%`: normalisation leaves these patterns and paths unchanged,
/// so the reference matcher sees exactly what the engine matches.
fn pattern() -> impl Strategy<Value = String> {
    (
        proptest::string::string_regex(r"[ab/.*]{0,12}").expect("valid regex"),
        any::<bool>(),
    )
        .prop_map(|(body, anchored)| format!("/{body}{}", if anchored { "$" } else { "" }))
}

/// `/*`, a literal that may be longer than the part the index searches
/// (8 octets), maybe trailing stars and a `$`: the shapes the index decides
/// by where the literal occurs.
fn star_literal_pattern() -> impl Strategy<Value = String> {
    (
        proptest::string::string_regex(r"[ab/.]{2,14}").expect("valid regex"),
        prop_oneof![Just(""), Just("*"), Just("**")],
        any::<bool>(),
    )
        .prop_map(|(lit, stars, anchored)| {
            format!("/*{lit}{stars}{}", if anchored { "$" } else { "" })
        })
}

fn path() -> impl Strategy<Value = String> {
    proptest::string::string_regex(r"[ab/.]{0,24}")
        .expect("valid regex")
        .prop_map(|s| format!("/{s}"))
}

fn rule_list(min: usize, max: usize) -> impl Strategy<Value = Vec<(bool, String)>> {
    proptest::collection::vec((any::<bool>(), pattern()), min..max)
}

// ---------------------------------------------------------------------------
// Normalisation
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn normalisation_matches_the_reference(s in url_text()) {
        for side in [Side::Url, Side::Pattern] {
            prop_assert_eq!(normalize(s.as_bytes(), side), ref_normalize(s.as_bytes(), side));
        }
    }

    #[test]
    fn normalisation_is_idempotent(s in url_text()) {
        for side in [Side::Url, Side::Pattern] {
            let once = normalize(s.as_bytes(), side).into_owned();
            let twice = normalize(once.as_bytes(), side).into_owned();
            prop_assert_eq!(&once, &twice);
            prop_assert!(once.is_ascii());
        }
    }

    /// Writing any unreserved character as `%xx` (either case) changes
    /// nothing: normalising decodes it back.
    #[test]
    fn percent_encoded_unreserved_characters_normalise_away(
        s in proptest::string::string_regex(r"[/a-zA-Z0-9?*$:@.~_\-=&]{0,40}").expect("valid regex"),
        picks in proptest::collection::vec(any::<(bool, bool)>(), 40),
    ) {
        let mut encoded = String::new();
        for (c, (encode, lower)) in s.chars().zip(picks) {
            if encode && c.is_ascii() && is_unreserved(c as u8) {
                let e = format!("%{:02X}", c as u8);
                encoded.push_str(&if lower { e.to_ascii_lowercase() } else { e });
            } else {
                encoded.push(c);
            }
        }
        let s = format!("/{s}");
        let encoded = format!("/{encoded}");
        prop_assert_eq!(
            normalize(s.as_bytes(), Side::Url),
            normalize(encoded.as_bytes(), Side::Url)
        );
        // …and so the same URL is judged the same way.
        let rules = compile(&[(false, s.clone())]);
        prop_assert_eq!(rules.check(&s).allowed, rules.check(&encoded).allowed);
    }
}

// ---------------------------------------------------------------------------
// Matching
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Groups larger than INDEX_THRESHOLD go through the index (sorted
    /// prefixes, Aho-Corasick); it must decide exactly as trying every rule would.
    #[test]
    fn indexed_matcher_agrees_with_reference(
        rules in rule_list(INDEX_THRESHOLD + 1, 60),
        paths in proptest::collection::vec(path(), 1..12),
    ) {
        let compiled = compile(&rules);
        prop_assert!(compiled.is_indexed());
        for p in &paths {
            let v = compiled.check(p);
            let (allowed, line) = ref_decide(&rules, p);
            prop_assert_eq!(v.allowed, allowed, "path {}", p);
            prop_assert_eq!(v.rule.map(|r| r.line()), line, "path {}", p);
        }
    }

    #[test]
    fn indexed_star_literal_rules_agree_with_reference(
        mut rules in rule_list(INDEX_THRESHOLD + 1, 30),
        extra in proptest::collection::vec((any::<bool>(), star_literal_pattern()), 1..12),
        paths in proptest::collection::vec(
            proptest::string::string_regex(r"[ab/.]{0,40}").expect("valid regex"),
            1..12,
        ),
    ) {
        rules.extend(extra);
        let compiled = compile(&rules);
        prop_assert!(compiled.is_indexed());
        for p in paths.iter().map(|p| format!("/{p}")) {
            let v = compiled.check(&p);
            let (allowed, line) = ref_decide(&rules, &p);
            prop_assert_eq!(v.allowed, allowed, "path {}", p);
            prop_assert_eq!(v.rule.map(|r| r.line()), line, "path {}", p);
        }
    }

    /// Paths that repeat a short piece many times: literals occur often
    /// enough that the index stops scanning and matches each rule instead.
    #[test]
    fn indexed_matcher_on_repetitive_paths_agrees_with_reference(
        mut rules in rule_list(INDEX_THRESHOLD + 1, 30),
        extra in proptest::collection::vec((any::<bool>(), star_literal_pattern()), 1..12),
        pieces in proptest::collection::vec(
            (proptest::string::string_regex(r"[ab/.]{1,4}").expect("valid regex"), 10usize..80),
            1..6,
        ),
    ) {
        rules.extend(extra);
        let compiled = compile(&rules);
        prop_assert!(compiled.is_indexed());
        for (piece, times) in &pieces {
            let p = format!("/{}", piece.repeat(*times));
            let v = compiled.check(&p);
            let (allowed, line) = ref_decide(&rules, &p);
            prop_assert_eq!(v.allowed, allowed, "path {}", p);
            prop_assert_eq!(v.rule.map(|r| r.line()), line, "path {}", p);
        }
    }

    #[test]
    fn linear_matcher_agrees_with_reference(
        rules in rule_list(1, INDEX_THRESHOLD + 1),
        paths in proptest::collection::vec(path(), 1..12),
    ) {
        let compiled = compile(&rules);
        prop_assert!(!compiled.is_indexed());
        for p in &paths {
            let v = compiled.check(p);
            let (allowed, line) = ref_decide(&rules, p);
            prop_assert_eq!(v.allowed, allowed, "path {}", p);
            prop_assert_eq!(v.rule.map(|r| r.line()), line, "path {}", p);
        }
    }

    #[test]
    fn robots_txt_is_always_allowed(
        mut rules in rule_list(0, 40),
        query in proptest::option::of("[a-z=&]{0,8}"),
    ) {
        rules.push((false, "/".into()));
        rules.push((false, "/robots.txt".into()));
        rules.push((false, "/robots.txt$".into()));
        rules.push((false, "*".into()));
        let compiled = compile(&rules);
        let url = match query {
            Some(q) => format!("/robots.txt?{q}"),
            None => "/robots.txt".into(),
        };
        prop_assert!(compiled.check(&url).allowed);
        let absolute = format!("https://example.com{}", url);
        prop_assert!(compiled.check_url(&absolute).allowed);
    }

    /// An allow and a disallow of the same length that both match: the
    /// allow wins, wherever they are in the file and whatever else is there.
    #[test]
    fn allow_wins_ties(
        others in rule_list(0, 30),
        p in path(),
        cut in 1usize..25,
        allow_first in any::<bool>(),
    ) {
        // Two patterns of equal length that both match `p`: its prefix, and
        // the same prefix with its last octet replaced by `*`.
        let prefix: String = p.chars().take(cut.min(p.len()).max(1)).collect();
        let mut starred = prefix.clone();
        if starred.len() > 1 {
            starred.pop();
            starred.push('*');
        }
        let mut rules = others;
        let (a, d) = ((true, prefix), (false, starred));
        if allow_first {
            rules.push(a);
            rules.push(d);
        } else {
            rules.push(d);
            rules.push(a);
        }
        let compiled = compile(&rules);
        let v = compiled.check(&p);
        let (allowed, _) = ref_decide(&rules, &p);
        prop_assert_eq!(v.allowed, allowed);
        if let Some(rule) = v.rule {
            let longest = rules
                .iter()
                .filter(|(_, pat)| ref_matches(pat.as_bytes(), p.as_bytes()))
                .map(|(_, pat)| pat.len())
                .max();
            if longest == Some(rule.pattern().len()) && rules.iter().any(|(allow, pat)| {
                *allow && pat.len() == rule.pattern().len() && ref_matches(pat.as_bytes(), p.as_bytes())
            }) {
                prop_assert!(v.allowed, "an allow of the winning length matched");
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

fn robots_line() -> impl Strategy<Value = String> {
    prop_oneof![
        "[uU]ser-?[aA]gent ?: ?[*a-zA-Z_/0-9. -]{0,12}",
        "(dis)?allow ?:? ?[/*$%a-z0-9?=&.]{0,16}",
        "[cC]rawl-delay: ?[0-9.]{0,5}",
        "[sS]itemap: [a-z:/.]{0,20}",
        "#[ -~]{0,20}",
        "[ -~]{0,30}",
    ]
}

fn judge_a_few(robots: &Robots) {
    for agent in ["Googlebot/2.1", "otherbot"] {
        let rules = robots.agent_rules(agent);
        for url in ["/", "/a/b?c=d", "/robots.txt", "https://h/%E3%83%84*$"] {
            let v = rules.check_url(url);
            assert!(v.rule.is_none_or(|r| r.is_allow() == v.allowed));
        }
        for rule in rules.rules().take(8) {
            let _ = rules.check(rule.value());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parse_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        judge_a_few(&Robots::parse(&bytes));
    }

    #[test]
    fn parse_never_panics_on_robots_like_text(
        lines in proptest::collection::vec(robots_line(), 0..40),
        sep in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        bom in any::<bool>(),
    ) {
        let mut text = if bom { "\u{FEFF}".to_owned() } else { String::new() };
        text.push_str(&lines.join(sep));
        judge_a_few(&Robots::parse(text.as_bytes()));
    }
}

/// Rules `/*` + a literal longer than the part the index searches, on paths
/// where the searched part occurs at every octet (past the misses after
/// which each rule is matched in full): decided as the reference decides.
#[test]
fn cut_literals_in_long_runs_agree_with_reference() {
    let mut rules: Vec<(bool, String)> = (0..INDEX_THRESHOLD + 1)
        .map(|k| (false, format!("/p{k}/")))
        .collect();
    rules.extend([
        (false, "/*aaaaaaaaaab".to_owned()),
        (true, "/*aaaaaaaaaaaa$".to_owned()),
        (false, "/*/aaaaaaaaaaaa/*".to_owned()),
        (
            false,
            "/*aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                .to_owned(),
        ),
    ]);
    let compiled = compile(&rules);
    assert!(compiled.is_indexed());
    for n in [5, 11, 12, 13, 40, 79, 80, 300] {
        for path in [
            format!("/{}", "a".repeat(n)),
            format!("/{}b", "a".repeat(n)),
            format!("/x/{}/", "a".repeat(n)),
            format!("/{}b{}", "a".repeat(n), "a".repeat(n)),
        ] {
            let v = compiled.check(&path);
            let (allowed, line) = ref_decide(&rules, &path);
            assert_eq!(v.allowed, allowed, "path {path}");
            assert_eq!(v.rule.map(|r| r.line()), line, "path {path}");
        }
    }
}
