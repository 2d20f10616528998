//! Parses arbitrary bytes as robots.txt, compiles the rules for a few
//! agents (including one named in the input) and checks URLs derived from
//! the input: its own rule values, slices of the input, and fixed ones.
//! Besides "no panic", it asserts the engine's invariants, and that the
//! rule index decides as a scan of every rule would, and that judging every
//! reading of a path (`robots::canon`, against the rules as the reading
//! reads them) is never more permissive than the path as sent, that every
//! reading is idempotent on paths and patterns and keeps normal form, that
//! no reading resolves above `/`, and that readings never widen a rule: on
//! a path no reading changes, the strict answer differs from the path as
//! sent only through a `Disallow` decoded into the path's spelling.
#![no_main]

use libfuzzer_sys::fuzz_target;
use robots_engine::canon;
use robots_engine::normalize::{self, Side};
use robots_engine::{Robots, pattern, product_token};

fuzz_target!(|data: &[u8]| {
    let robots = Robots::parse(data);
    let _ = robots.sitemaps().count();
    let _ = robots.memory_usage();

    let text = String::from_utf8_lossy(data);
    // An agent named by the input: its second word, which is the token of a
    // leading `User-agent: x` line.
    let own_agent = text.split_whitespace().nth(1).unwrap_or("x").to_owned();
    // URLs from the input: each line, and its tail from every 7th octet.
    let mut urls: Vec<String> = text.lines().take(16).map(str::to_owned).collect();
    for (i, _) in text.char_indices().step_by(7).take(16) {
        urls.push(text[i..].chars().take(300).collect());
    }
    urls.extend(
        [
            "/",
            "",
            "/robots.txt",
            "/robots.txt?x",
            "https://h/a*b$c?d=/e#f",
            "http://h?q",
        ]
        .map(str::to_owned),
    );

    for agent in ["Googlebot/2.1", "*", &own_agent] {
        let rules = robots.agent_rules(agent);
        let _ = (rules.crawl_delay(), rules.selection(), rules.memory_usage());
        let values: Vec<String> = rules
            .rules()
            .take(16)
            .map(|r| r.value().to_owned())
            .collect();
        for url in urls.iter().chain(values.iter()) {
            let v = rules.check_url(url);
            // The index must decide as trying every rule in precedence
            // order would.
            let path = normalize::path_and_query(url);
            let rooted = if path.starts_with('/') {
                path.to_owned()
            } else {
                format!("/{path}")
            };
            let norm = normalize::normalize_str(&rooted, Side::Url);
            let own_file = norm
                .strip_prefix("/robots.txt")
                .is_some_and(|r| r.is_empty() || r.starts_with('?'));
            let expected = if own_file {
                None
            } else {
                rules.rules().find(|r| pattern::matches(r.pattern(), &norm))
            };
            assert_eq!(v.rule, expected, "{url}");
            // Every reading of the path is judged: strict is never more
            // permissive than the path as sent, and names a reading that is
            // itself disallowed.
            let strict = rules.check_resolved(&rooted);
            if !v.allowed {
                assert!(!strict.verdict.allowed, "{url}");
            }
            if let Some(reading) = strict.reading {
                assert_eq!(rules.check_reading(reading, &rooted), strict.verdict, "{url}");
            }
            if strict.verdict.allowed != v.allowed && canon::readings(&norm, false).is_empty() {
                let reading = strict.reading.expect("a reading decided");
                let rule = strict.verdict.rule.expect("a rule decided");
                assert!(!rule.is_allow(), "{url}");
                let decoded = reading.decode_pattern(rule.pattern());
                assert!(pattern::matches(&decoded, &norm), "{url}: {reading:?} {rule}");
                assert!(!pattern::matches(rule.pattern(), &norm), "{url}: {rule}");
                assert_eq!(
                    decoded.matches('*').count(),
                    rule.pattern().matches('*').count(),
                    "{url}"
                );
            }
            // Case folding only adds readings: never more permissive.
            let folded = rules.check_resolved_in(&rooted, true);
            if !strict.verdict.allowed {
                assert!(!folded.verdict.allowed, "{url}");
            }
            let path_only = norm.split('?').next().unwrap_or_default();
            let resolved = canon::canonical(path_only);
            assert_eq!(canon::canonical(&resolved), resolved, "{url}");
            assert!(resolved.starts_with('/'), "{url}");
            assert!(
                resolved.split('/').all(|s| s != "." && s != ".."),
                "{url}: {resolved}"
            );
            for (reading, form) in canon::readings(&norm, true) {
                assert!(form.starts_with('/'), "{url}: {form}");
                assert_eq!(reading.apply(&form), form, "{url}: {reading:?} idempotent");
            }
            // Every reading of every rule keeps normal form and is idempotent.
            for rule in rules.rules().take(8) {
                for reading in canon::READINGS {
                    let once = reading.apply_pattern(rule.pattern());
                    assert_eq!(reading.apply_pattern(&once), once, "{reading:?}");
                    assert_eq!(normalize::normalize_str(&once, Side::Pattern), once);
                    let decoded = reading.decode_pattern(rule.pattern());
                    assert_eq!(reading.decode_pattern(&decoded), decoded, "{reading:?}");
                    assert_eq!(normalize::normalize_str(&decoded, Side::Pattern), decoded);
                    assert_eq!(decoded.ends_with('$'), rule.pattern().ends_with('$'));
                }
            }
            match v.rule {
                Some(rule) => {
                    assert_eq!(rule.is_allow(), v.allowed);
                    assert!(rules.rule_index(rule).is_some());
                    let _ = rule.to_string();
                }
                None => assert!(v.allowed),
            }
        }
        assert!(rules.check("/robots.txt").allowed);
    }
    let _ = product_token(&own_agent);
});
