//! Properties of the readings of a path (`robots::canon`) and of judging
//! every reading: each reading is idempotent on paths and on patterns,
//! never climbs above `/`, keeps normal form; the strict judgement is never
//! more permissive than the path as sent, disallows whenever a reading is
//! disallowed, and never removes an explicit Allow written in the path's
//! own spelling.

use proptest::prelude::*;
use robots_proxy::robots::canon::{
    READINGS, canonical, merge_segments, readings, remove_dot_segments,
};
use robots_proxy::robots::normalize::{Side, normalize_str};
use robots_proxy::robots::{Reading, Robots};

/// Paths built from the pieces that resolve differently.
fn path() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "a",
        "b",
        "private",
        "..",
        ".",
        "",
        "%2F",
        "%2f",
        "%2e",
        "%2E%2E",
        ".%2e",
        "x;y",
        "..;",
        ";",
        "c.d",
        "...",
        "\\",
        "%5c",
        "a.",
        "a%20",
        "%3A",
        "%40x",
        "(1)",
        "%28",
        "P",
        "Private",
        "%25",
        "%2570",
        "%252F",
        "%255C",
        "%3B",
        "%2525",
        "%252e%252e",
        "%26",
    ]);
    (
        prop::collection::vec(piece, 0..10),
        prop::option::of("([a-z/.:@?=&]|%2F|%3A|%3f){0,6}"),
    )
        .prop_map(|(pieces, query)| {
            let mut p = format!("/{}", pieces.join("/"));
            if let Some(q) = query {
                p.push('?');
                p.push_str(&q);
            }
            p
        })
}

/// Rule values: the same pieces, sometimes with wildcards.
fn pattern() -> impl Strategy<Value = String> {
    (
        path(),
        prop::option::of(prop::sample::select(vec!["*", "$", "*x$", "*/"])),
    )
        .prop_map(|(p, tail)| {
            let mut p = p.replace('$', "");
            if let Some(t) = tail {
                p.push_str(t);
            }
            p
        })
}

/// A `user-agent: *` group of `(allow, value)` rules, in order.
pub(crate) fn star_group(rules: &[(bool, String)]) -> String {
    let mut txt = String::from("user-agent: *\n");
    for (allow, v) in rules {
        txt.push_str(if *allow { "allow: " } else { "disallow: " });
        txt.push_str(v);
        txt.push('\n');
    }
    txt
}

fn path_part(p: &str) -> &str {
    p.split('?').next().unwrap_or_default()
}

/// Starts at the root and holds no `.` or `..` segment.
fn stays_below_the_root(p: &str) -> bool {
    p.starts_with('/') && p.split('/').all(|s| s != "." && s != "..")
}

/// True for the readings that resolve dot-segments.
fn resolves(r: Reading) -> bool {
    !matches!(r, Reading::QueryDecoded | Reading::Folded)
}

proptest! {
    #[test]
    fn canonical_is_idempotent_and_never_above_the_root(p in path()) {
        let once = canonical(path_part(&p));
        prop_assert_eq!(canonical(&once), once.clone());
        prop_assert!(stays_below_the_root(&once), "{}", once);
        prop_assert!(!once.contains("//"), "{}", once);
    }

    #[test]
    fn each_reading_is_idempotent_and_never_above_the_root(p in path()) {
        let rfc = remove_dot_segments(path_part(&p));
        prop_assert_eq!(remove_dot_segments(&rfc), rfc.clone());
        prop_assert!(stays_below_the_root(&rfc), "{}", rfc);
        let merged = merge_segments(path_part(&p));
        prop_assert_eq!(merge_segments(&merged), merged.clone());
        prop_assert!(stays_below_the_root(&merged), "{}", merged);
    }

    #[test]
    fn every_reading_is_idempotent_in_normal_form_and_never_above_the_root(p in path()) {
        let norm = normalize_str(&p, Side::Url).into_owned();
        for r in READINGS {
            let once = r.apply(&norm).into_owned();
            prop_assert_eq!(r.apply(&once).into_owned(), once.clone(), "{:?} {}", r, norm);
            prop_assert_eq!(normalize_str(&once, Side::Url).into_owned(), once.clone(), "{:?}", r);
            if resolves(r) {
                prop_assert!(stays_below_the_root(path_part(&once)), "{:?} {}", r, once);
            }
        }
        for (r, form) in readings(&norm, true) {
            prop_assert_ne!(&form, &norm);
            prop_assert_eq!(r.apply(&norm).into_owned(), form);
        }
    }

    #[test]
    fn every_reading_of_a_pattern_is_idempotent_and_keeps_its_wildcards(v in pattern()) {
        let pat = normalize_str(&v, Side::Pattern).into_owned();
        for r in READINGS {
            let once = r.apply_pattern(&pat).into_owned();
            prop_assert_eq!(r.apply_pattern(&once).into_owned(), once.clone(), "{:?} {}", r, pat);
            prop_assert_eq!(once.ends_with('$'), pat.ends_with('$'), "{:?} {}", r, once);
            // `;parameters` are dropped whole, wildcards in them too.
            if !matches!(r, Reading::ParamsDropped | Reading::ParamsDroppedFirst | Reading::ParamsDroppedThenDecoded) {
                prop_assert_eq!(once.matches('*').count(), pat.matches('*').count());
            }
            prop_assert_eq!(normalize_str(&once, Side::Pattern).into_owned(), once.clone());
        }
    }

    #[test]
    fn strict_is_never_more_permissive_and_disallows_if_any_reading_does(
        p in path(),
        rules in prop::collection::vec((any::<bool>(), pattern()), 0..6),
        folded in any::<bool>(),
    ) {
        let txt = star_group(&rules);
        let robots = Robots::parse(txt.as_bytes());
        let rules = robots.agent_rules("x");
        let sent = rules.check(&p);
        let strict = rules.check_resolved_in(&p, folded);
        if !sent.allowed {
            prop_assert!(!strict.verdict.allowed, "{}", p);
            prop_assert_eq!(strict.verdict, sent);
        }
        let any_reading = READINGS
            .iter()
            .filter(|r| folded || !r.folds_case())
            .any(|r| !rules.check_reading(*r, &p).allowed);
        prop_assert_eq!(strict.verdict.allowed, sent.allowed && !any_reading, "{}", p);
        if let Some(r) = strict.reading {
            prop_assert_eq!(rules.check_reading(r, &p), strict.verdict);
        }
    }

    #[test]
    fn an_explicit_allow_in_the_paths_own_spelling_is_never_removed(
        p in path(),
        disallows in prop::collection::vec(path(), 0..6),
        folded in any::<bool>(),
    ) {
        // Literal rules (no wildcard): the Allow's image in any reading is
        // the path's image, so it matches in full and wins every tie.
        let p = p.replace(['*', '$'], "");
        let mut txt = String::from("user-agent: *\ndisallow: /\n");
        for d in &disallows {
            txt.push_str(&format!("disallow: {}\n", d.replace(['*', '$'], "")));
        }
        txt.push_str(&format!("allow: {p}\n"));
        let robots = Robots::parse(txt.as_bytes());
        let rules = robots.agent_rules("x");
        prop_assume!(rules.check(&p).allowed);
        prop_assert!(rules.check_resolved_in(&p, folded).verdict.allowed, "{}", txt);
    }
}

/// google/robotstxt's `ID_Encoding`: an Allow written with the query's
/// delimiters as they are allows that very URL, under `Disallow: /`.
#[test]
fn an_allow_with_literal_query_delimiters_allows_its_url() {
    let robots = Robots::parse(
        b"user-agent: FooBot\ndisallow: /\nallow: /foo/bar?qux=taz&baz=http://foo.bar?tar&par\n",
    );
    let rules = robots.agent_rules("FooBot");
    let url = "/foo/bar?qux=taz&baz=http://foo.bar?tar&par";
    assert!(rules.check(url).allowed);
    assert!(rules.check_resolved(url).verdict.allowed);
    // Its encoded spelling is another URL, disallowed as sent (as Google's
    // matcher says), and no reading makes it more permissive.
    let encoded = "/foo/bar?qux=taz&baz=http%3A%2F%2Ffoo.bar%3Ftar&par";
    assert!(!rules.check(encoded).allowed);
    assert!(!rules.check_resolved(encoded).verdict.allowed);
}

#[test]
fn a_rule_written_encoded_or_decoded_blocks_both_spellings() {
    for rule in ["/wiki/Special:", "/wiki/Special%3A", "/wiki/Special%3a"] {
        let txt = format!("user-agent: *\ndisallow: {rule}\n");
        let robots = Robots::parse(txt.as_bytes());
        let rules = robots.agent_rules("x");
        for url in [
            "/wiki/Special:Search",
            "/wiki/Special%3ASearch",
            "/wiki/Special%3aSearch",
        ] {
            assert!(!rules.check_resolved(url).verdict.allowed, "{rule} {url}");
        }
        assert!(rules.check_resolved("/wiki/Main").verdict.allowed);
    }
    let robots = Robots::parse(b"user-agent: *\ndisallow: /n?next=%2Fadmin\n");
    let rules = robots.agent_rules("x");
    let strict = rules.check_resolved("/n?next=/admin");
    assert!(!strict.verdict.allowed);
    // The path as sent was judged, against the rule as the reading reads it.
    assert_eq!(strict.judged_as, None);
    assert!(matches!(
        strict.reading,
        Some(Reading::Decoded | Reading::QueryDecoded)
    ));
}

#[test]
fn backslash_and_windows_spellings_reach_the_disallowed_path() {
    let robots = Robots::parse(b"user-agent: *\nallow: /public/\ndisallow: /private/\n");
    let rules = robots.agent_rules("x");
    for url in [
        "/public\\..\\private/x",
        "/public/..\\private/x",
        "/public/.%2e\\private/x",
        "/public/..%5cprivate/x",
        "/private./x",
        "/private%20/x",
    ] {
        let strict = rules.check_resolved(url);
        assert!(!strict.verdict.allowed, "{url}");
        assert_eq!(strict.judged_as.as_deref(), Some("/private/x"), "{url}");
    }
    // Case folds only for an origin known to be case-insensitive.
    assert!(rules.check_resolved("/PRIVATE/x").verdict.allowed);
    assert!(!rules.check_resolved_in("/PRIVATE/x", true).verdict.allowed);
    assert!(!rules.check_resolved_in("/Private./x", true).verdict.allowed);
}

#[test]
fn an_allow_for_the_path_as_sent_does_not_cover_the_path_it_resolves_to() {
    let robots = Robots::parse(b"user-agent: *\nallow: /public/\ndisallow: /private\n");
    let rules = robots.agent_rules("x");
    assert!(rules.check("/public/../private/x").allowed);
    let strict = rules.check_resolved("/public/../private/x");
    assert!(!strict.verdict.allowed);
    assert_eq!(strict.judged_as.as_deref(), Some("/private/x"));
    assert_eq!(
        strict.verdict.rule.map(|r| r.to_string()).as_deref(),
        Some("line 3: Disallow: /private")
    );
    // Disallowed as sent: the path as sent is named (no other reading).
    let sent = rules.check_resolved("/private/../public/");
    assert!(!sent.verdict.allowed);
    assert_eq!(sent.judged_as, None);
}
