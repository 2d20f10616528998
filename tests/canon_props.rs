//! Properties of path resolution (`robots::canon`) and of judging every
//! reading of a path: resolving is idempotent, never climbs above `/`, and
//! the strict judgement disallows whenever any reading is disallowed.

use proptest::prelude::*;
use robots_proxy::robots::Robots;
use robots_proxy::robots::canon::{canonical, merge_segments, remove_dot_segments, resolved_forms};
use robots_proxy::robots::normalize::{Side, normalize_str};

/// Paths built from the pieces that resolve differently.
fn path() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "a", "b", "private", "..", ".", "", "%2F", "%2f", "%2e", "%2E%2E", ".%2e", "x;y", "..;",
        ";", "c.d", "...",
    ]);
    (
        prop::collection::vec(piece, 0..10),
        prop::option::of("[a-z/.]{0,6}"),
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

fn path_part(p: &str) -> &str {
    p.split('?').next().unwrap_or_default()
}

/// Starts at the root and holds no `.` or `..` segment.
fn stays_below_the_root(p: &str) -> bool {
    p.starts_with('/') && p.split('/').all(|s| s != "." && s != "..")
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
    fn resolved_forms_resolve_the_path_or_recode_the_query(p in path()) {
        let norm = normalize_str(&p, Side::Url).into_owned();
        let query = norm.find('?').map(|i| &norm[i..]).unwrap_or("");
        for form in resolved_forms(&norm) {
            prop_assert_ne!(&form, &norm);
            if form.ends_with(query) && path_part(&form) != path_part(&norm) {
                // A path reading: resolved, the query as sent.
                prop_assert!(stays_below_the_root(path_part(&form)), "{}", form);
            } else {
                // A query reading: the path as sent, the query re-coded.
                prop_assert_eq!(path_part(&form), path_part(&norm), "{}", form);
            }
        }
    }

    #[test]
    fn a_path_is_disallowed_if_any_reading_of_it_is(p in path()) {
        let robots = Robots::parse(b"user-agent: *\nallow: /a/\ndisallow: /private\ndisallow: /b$\n");
        let rules = robots.agent_rules("x");
        let strict = rules.check_resolved(&p);
        let norm = normalize_str(&p, Side::Url).into_owned();
        let any_disallowed = !rules.check(&p).allowed
            || resolved_forms(&norm).iter().any(|f| !rules.check(f).allowed);
        prop_assert_eq!(strict.verdict.allowed, !any_disallowed, "{}", p);
        if let Some(form) = &strict.judged_as {
            prop_assert!(!rules.check(form).allowed);
        }
        // The canonical reading is always among those judged.
        let query = norm.find('?').map(|i| &norm[i..]).unwrap_or("");
        let canon = canonical(path_part(&norm)) + query;
        if !rules.check(&canon).allowed {
            prop_assert!(!strict.verdict.allowed, "{}", p);
        }
    }
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
