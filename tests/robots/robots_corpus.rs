//! Robustness over ~2,500 real robots.txt files (CRLF, BOMs, HTML error
//! pages, files over 500 KiB): each one parses, compiles for a few agents and
//! answers a handful of URLs without panicking, and every answer is
//! consistent with the rule that decided it.
//!
//! The corpus lives outside the repository: `../shared/bench-data/corpus`
//! (2,489 files; fewer than [`MIN_FILES`] there fails the test, as a
//! corpus cut short would test little), or any directory of robots.txt
//! files named by `$ROBOTS_CORPUS` (at least one file; one named and
//! missing fails). Where neither is present (a fresh clone), the test runs
//! on [`fixtures`], files of the corpus's shapes that it writes itself,
//! and says so; `ROBOTS_CORPUS_SKIP=1` skips it.

use std::path::PathBuf;

use robots_proxy::robots::{AgentRules, Robots};

/// Files the default corpus must hold at least (it holds 2,489).
const MIN_FILES: usize = 2_400;

/// The corpus directory and the fewest files it must hold.
fn corpus_dir() -> (PathBuf, usize) {
    match std::env::var_os("ROBOTS_CORPUS") {
        Some(d) => (PathBuf::from(d), 1),
        None => (
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../shared/bench-data/corpus"
            )),
            MIN_FILES,
        ),
    }
}

const AGENTS: &[&str] = &[
    "Googlebot/2.1",
    "bingbot",
    "Mozilla/5.0 (compatible; ExampleBot/1.0; +https://example.com/bot)",
];

const URLS: &[&str] = &[
    "/",
    "",
    "/robots.txt",
    "https://example.com/search?q=rust+robots&page=2",
    "/wp-admin/admin-ajax.php",
    "/a/b/c/d.html?x=1#frag",
    "/caf\u{e9}/%E3%83%84/%7euser/%zz",
    "/*$%24%2A",
    "http://example.com?only=query",
];

fn check_consistent(rules: &AgentRules, url: &str, file: &str) {
    let v = rules.check_url(url);
    if let Some(rule) = v.rule {
        assert_eq!(rule.is_allow(), v.allowed, "{file}: {url}");
        assert!(
            rules.rule_index(rule).and_then(|i| rules.rule(i)) == Some(rule),
            "{file}: deciding rule belongs to the agent's rules"
        );
        let shown = rule.to_string();
        assert!(shown.starts_with("line "), "{file}: {shown}");
    } else {
        assert!(v.allowed, "{file}: no rule means allowed ({url})");
    }
}

#[test]
fn every_corpus_file_parses_and_answers() {
    if std::env::var_os("ROBOTS_CORPUS_SKIP").is_some_and(|v| v == "1") {
        eprintln!("SKIPPED robots_corpus: ROBOTS_CORPUS_SKIP=1");
        return;
    }
    let (dir, min_files) = corpus_dir();
    let corpus: Vec<(String, Vec<u8>)> =
        if std::env::var_os("ROBOTS_CORPUS").is_none() && !dir.exists() {
            let fixtures = fixtures();
            eprintln!(
                "robots_corpus: no corpus at {}: running on {} generated files of its shapes",
                dir.display(),
                fixtures.len()
            );
            fixtures
        } else {
            assert!(
                dir.is_dir(),
                "no robots.txt corpus at {}: set ROBOTS_CORPUS to a directory of \
             robots.txt files, or ROBOTS_CORPUS_SKIP=1 to skip this test",
                dir.display()
            );
            let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
                .expect("corpus directory is readable")
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect();
            entries.sort();
            assert!(
                entries.len() >= min_files,
                "{} files in the corpus at {}, expected at least {min_files}",
                entries.len(),
                dir.display()
            );
            entries
                .iter()
                .map(|path| {
                    let bytes = std::fs::read(path).expect("corpus file is readable");
                    (path.display().to_string(), bytes)
                })
                .collect()
        };
    let (mut files, mut rules_total, mut truncated) = (0usize, 0usize, 0usize);
    // Memory of the parsed files, and of the rules compiled for the first
    // agent, with how many rules that compiled form holds.
    let (mut parsed_bytes, mut compiled_bytes, mut compiled_rules) = (0usize, 0usize, 0usize);
    for (name, bytes) in &corpus {
        let name = name.as_str();
        let robots = Robots::parse(bytes);
        files += 1;
        rules_total += robots.rule_count();
        truncated += usize::from(robots.truncated());
        parsed_bytes += robots.memory_usage();
        let _ = robots.sitemaps().count();
        // Compiling a group of thousands of rules is slow in a debug build;
        // the few such files are compiled for one agent only.
        let agents = if robots.rule_count() > 2_000 {
            &AGENTS[..1]
        } else {
            AGENTS
        };
        for (k, agent) in agents.iter().enumerate() {
            let rules = robots.agent_rules(agent);
            if k == 0 {
                compiled_bytes += rules.memory_usage();
                compiled_rules += rules.rules().len();
            }
            let _ = (rules.crawl_delay(), rules.selection());
            assert!(rules.check("/robots.txt").allowed, "{name}");
            for url in URLS {
                check_consistent(&rules, url, name);
            }
            // Each rule's own value, read as a URL, exercises the wildcards
            // and anchors actually written; a few per file keep this fast.
            for rule in rules.rules().take(8) {
                check_consistent(&rules, rule.value(), name);
                check_consistent(&rules, &format!("{}/x?y", rule.value()), name);
            }
        }
    }
    eprintln!(
        "robots_corpus: {files} files, {rules_total} rules, {truncated} over 500 KiB; \
         parsed {:.1} bytes/rule; compiled for {}: {compiled_rules} rules, {:.1} bytes/rule",
        parsed_bytes as f64 / rules_total.max(1) as f64,
        AGENTS[0],
        compiled_bytes as f64 / compiled_rules.max(1) as f64,
    );
}

/// Files of the shapes the real corpus holds, written here: a BOM and
/// CRLF, CR-only lines, an HTML error page served as robots.txt, bytes that
/// are not UTF-8 and a NUL, a file over 500 KiB, a group of thousands of
/// rules, wildcards and anchors, encoded and spelling-specific rules
/// (`%3A`, `//`, `;jsessionid`, `/*.$`), one-line `* Disallow: /`, unknown
/// directives, an empty file and a 20 KB value.
fn fixtures() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = vec![
        (
            "bom-crlf".into(),
            b"\xEF\xBB\xBFUser-agent: *\r\nDisallow: /private\r\nAllow: /private/ok\r\n".to_vec(),
        ),
        ("cr-only".into(), b"User-agent: *\rDisallow: /x\rCrawl-delay: 3\r".to_vec()),
        (
            "html-error-page".into(),
            b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n<body><h1>Not Found</h1>\n<p>User-agent: * Disallow: /</p></body></html>\n".to_vec(),
        ),
        (
            "not-utf8-and-nul".into(),
            b"User-agent: *\nDisallow: /caf\xE9\nDisallow: /a\0b\nAllow: /\xFF\xFE\n".to_vec(),
        ),
        (
            "groups-wildcards".into(),
            b"# comment\nSitemap: https://example.com/sitemap.xml\n\nUser-agent: Googlebot\nUser-agent: bingbot\nDisallow: /*.pdf$\nAllow: /*?lang=\nDisallow: /search\nCrawl-delay: 5\n\nUser-agent: *\nDisallow: /\nAllow: /$\nAllow: /public/\nNoindex: /x\nHost: example.com\nClean-param: utm_source /\n".to_vec(),
        ),
        (
            "spellings".into(),
            b"User-agent: *\nDisallow: /wiki/Special%3A\nDisallow: //\nDisallow: /*;jsessionid=\nDisallow: /*.$\nDisallow: /%20/\nAllow: /a;v=2\nDisallow: /calendar//monthly.html\n".to_vec(),
        ),
        ("one-line".into(), b"User-agent: * Disallow: /\n".to_vec()),
        ("empty".into(), Vec::new()),
        (
            "no-colons".into(),
            b"User-agent *\nDisallow /x\nuseragent: foo\ndisalow: /typo\n".to_vec(),
        ),
    ];
    let mut long = b"User-agent: *\nDisallow: /".to_vec();
    long.extend(std::iter::repeat_n(b'a', 20_000));
    long.push(b'\n');
    out.push(("long-value".into(), long));
    let mut many = String::from("User-agent: *\n");
    for i in 0..3_000 {
        many.push_str(&format!("Disallow: /d{i}/*x{i}$\nAllow: /d{i}/ok\n"));
    }
    out.push(("many-rules".into(), many.into_bytes()));
    let mut big = String::from("User-agent: *\n");
    let mut i = 0;
    while big.len() <= 520 * 1024 {
        big.push_str(&format!("Disallow: /section-{i}/page-{i}.html\n"));
        i += 1;
    }
    out.push(("over-500-kib".into(), big.into_bytes()));
    out
}
