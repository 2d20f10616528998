//! Every example of the two specification documents, as a test:
//! `shared/spec/rfc9309-draft.md` (the RFC) and
//! `shared/spec/google-robots-txt-interpretation.md` (Google's reading).
//! Where they disagree the RFC wins; Google decides what the RFC leaves open.
//! Each test is named after what it proves.

use robots_proxy::robots::normalize::{self, Side};
use robots_proxy::robots::{AgentRules, Robots, Selection, parse::MAX_BYTES, product_token};

fn rules(txt: &str, agent: &str) -> AgentRules {
    Robots::parse(txt.as_bytes()).agent_rules(agent)
}

fn allowed(txt: &str, agent: &str, url: &str) -> bool {
    rules(txt, agent).check_url(url).allowed
}

/// The text of the deciding rule (`Disallow: /x`), or `None`.
fn deciding(txt: &str, agent: &str, url: &str) -> Option<String> {
    rules(txt, agent).check_url(url).rule.map(|r| r.text())
}

/// A one-rule file for the `*` group.
fn one_rule(pattern: &str) -> String {
    format!("user-agent: *\ndisallow: {pattern}\n")
}

fn matches(pattern: &str, path: &str) -> bool {
    !allowed(&one_rule(pattern), "anybot", path)
}

// ---------------------------------------------------------------------------
// RFC: "Simple example"
// ---------------------------------------------------------------------------

const RFC_SIMPLE: &str = "\
User-Agent : foobot
Disallow : /example/page.html
Disallow : /example/disallowed.gif

User-Agent : barbot
User-Agent : bazbot
Allow : /example/page.html
Disallow : /example/disallowed.gif

User-Agent: quxbot

/eof
";

#[test]
fn rfc_simple_foobot_single_agent_group() {
    let r = rules(RFC_SIMPLE, "foobot");
    assert_eq!(r.selection(), Selection::Specific);
    assert!(!r.check("/example/page.html").allowed);
    assert!(!r.check("/example/disallowed.gif").allowed);
    assert!(r.check("/example/other.html").allowed);
    assert_eq!(
        r.check("/example/page.html")
            .rule
            .map(|rule| rule.to_string()),
        Some("line 2: Disallow: /example/page.html".to_owned())
    );
}

#[test]
fn rfc_simple_barbot_and_bazbot_share_one_group() {
    for agent in ["barbot", "bazbot", "BazBot/1.0"] {
        let r = rules(RFC_SIMPLE, agent);
        assert_eq!(r.selection(), Selection::Specific, "{agent}");
        assert!(r.check("/example/page.html").allowed, "{agent}");
        assert!(!r.check("/example/disallowed.gif").allowed, "{agent}");
        assert_eq!(
            r.check("/example/page.html").rule.map(|rule| rule.line()),
            Some(7),
            "{agent}: the allow rule decides"
        );
    }
}

#[test]
fn rfc_simple_quxbot_empty_group_at_eof_allows_everything() {
    let r = rules(RFC_SIMPLE, "quxbot");
    assert_eq!(r.selection(), Selection::Specific);
    assert!(r.is_empty(), "the `/eof` line is not a rule");
    assert!(r.check("/example/page.html").allowed);
    assert!(r.check("/example/disallowed.gif").allowed);
    assert!(r.check("/eof").allowed);
}

#[test]
fn rfc_simple_unnamed_agent_without_star_group_has_no_rules() {
    let r = rules(RFC_SIMPLE, "otherbot");
    assert_eq!(r.selection(), Selection::None);
    assert!(r.check("/example/disallowed.gif").allowed);
}

#[test]
fn rfc_simple_file_has_three_groups() {
    let robots = Robots::parse(RFC_SIMPLE.as_bytes());
    assert_eq!(robots.group_count(), 3);
    assert_eq!(robots.rule_count(), 4);
}

// ---------------------------------------------------------------------------
// RFC: "Longest Match"
// ---------------------------------------------------------------------------

const RFC_LONGEST: &str = "\
User-Agent : foobot
Allow : /example/page/
Disallow : /example/page/disallowed.gif
";

#[test]
fn rfc_longest_match_longer_disallow_beats_shorter_allow() {
    let r = rules(RFC_LONGEST, "foobot");
    let v = r.check_url("http://example.com/example/page/disallowed.gif");
    assert!(!v.allowed);
    assert_eq!(
        v.rule.map(|rule| rule.text()),
        Some("Disallow: /example/page/disallowed.gif".to_owned())
    );
    assert!(r.check("/example/page/other.gif").allowed);
}

/// The RFC's prose names the URI `example.com/example/page/disallow.gif`
/// (no "ed"): read literally, that URI does *not* match the longer rule
/// `/example/page/disallowed.gif` (the rule's path is not a prefix of it), so
/// only `Allow: /example/page/` matches and the URI is allowed. The example
/// means the `disallowed.gif` URI, tested above.
#[test]
fn rfc_longest_match_uri_as_misspelt_in_prose_matches_only_the_allow() {
    let r = rules(RFC_LONGEST, "foobot");
    let v = r.check_url("http://example.com/example/page/disallow.gif");
    assert!(v.allowed);
    assert_eq!(
        v.rule.map(|rule| rule.text()),
        Some("Allow: /example/page/".to_owned())
    );
}

// ---------------------------------------------------------------------------
// RFC: percent-encoding table (all five rows). Each row is checked three
// ways: the normal form itself, a rule written as "Path" matching a URL
// written as "Path to match", and the other way round.
// ---------------------------------------------------------------------------

fn rfc_encoding_row(path: &str, to_match: &str) {
    assert_eq!(normalize::normalize(path.as_bytes(), Side::Url), to_match);
    assert!(matches(path, to_match), "rule {path} vs url {to_match}");
    assert!(matches(to_match, path), "rule {to_match} vs url {path}");
    assert!(matches(&format!("{to_match}$"), path), "exact {to_match}$");
}

#[test]
fn rfc_encoding_row1_plain_path_and_query_unchanged() {
    rfc_encoding_row("/foo/bar?baz=quz", "/foo/bar?baz=quz");
}

/// The RFC's row 2 shows `/foo/bar?baz=http://foo.bar` → `…http%3A%2F%2Ffoo.bar`.
/// The table is illustrative; the project follows Google's matcher and the
/// other peers (texting_robots, Protego): a query's general delimiters are
/// matched as written, and an encoded one (`%2F`) is not the delimiter.
#[test]
fn query_delimiters_are_matched_as_written_like_googles_matcher() {
    rfc_encoding_row("/foo/bar?baz=http://foo.bar", "/foo/bar?baz=http://foo.bar");
    // A rule with a `/` after the `?` matches a URL with a `/` there.
    assert!(matches("/*/print", "/a?next=/b/print"));
    assert!(matches("/*?url=http://", "/go?url=http://example.com/"));
    assert!(matches("/a?b=c:d@e", "/a?b=c:d@e"));
    // `%2F` is not `/`, in the query as in the path.
    assert!(!matches("/*/print", "/a?next=%2Fb%2Fprint"));
    assert!(!matches("/a?b=/c", "/a?b=%2Fc"));
    assert!(!matches("/a?b=%2Fc", "/a?b=/c"));
    assert!(matches("/a?b=%2fc", "/a?b=%2Fc"));
}

#[test]
fn rfc_encoding_row3_utf8_octets_are_percent_encoded() {
    // U+30C4 (KATAKANA LETTER TU) is the UTF-8 octets E3 83 84.
    rfc_encoding_row("/foo/bar/\u{30c4}", "/foo/bar/%E3%83%84");
}

#[test]
fn rfc_encoding_row4_encoded_utf8_stays_encoded() {
    rfc_encoding_row("/foo/bar/%E3%83%84", "/foo/bar/%E3%83%84");
    // Lower-case hex digits are the same octets.
    assert!(matches("/foo/bar/%e3%83%84", "/foo/bar/%E3%83%84"));
}

#[test]
fn rfc_encoding_row5_encoded_unreserved_characters_are_decoded() {
    rfc_encoding_row("/foo/bar/%62%61%7A", "/foo/bar/baz");
}

// ---------------------------------------------------------------------------
// RFC: special characters
// ---------------------------------------------------------------------------

#[test]
fn rfc_special_hash_starts_a_comment() {
    let txt = "user-agent: *\ndisallow: /\nallow: / # comment in line\n# comment at the end\n";
    let r = rules(txt, "x");
    assert_eq!(r.rules().len(), 2);
    // Allow `/` and disallow `/` tie: the allow wins.
    assert!(r.check("/anything").allowed);
}

#[test]
fn rfc_special_dollar_ends_the_pattern() {
    let txt = "user-agent: *\ndisallow: /this\nallow: /this/path/exactly$\n";
    assert!(allowed(txt, "x", "/this/path/exactly"));
    assert!(!allowed(txt, "x", "/this/path/exactly/not"));
    assert!(!allowed(txt, "x", "/this/path/exactly?q"));
}

#[test]
fn rfc_special_star_matches_any_run() {
    let txt = "user-agent: *\ndisallow: /this\nallow: /this/*/exactly\n";
    assert!(allowed(txt, "x", "/this/a/exactly"));
    assert!(allowed(txt, "x", "/this/a/b/c/exactly"));
    assert!(allowed(txt, "x", "/this//exactly"));
    assert!(!allowed(txt, "x", "/this/exactly"));
}

#[test]
fn rfc_special_percent_2a_is_a_literal_star() {
    let p = "/path/file-with-a-%2A.html";
    assert!(matches(
        p,
        "https://www.example.com/path/file-with-a-*.html"
    ));
    assert!(matches(p, "/path/file-with-a-%2A.html"));
    assert!(matches(p, "/path/file-with-a-%2a.html"));
    // Not a wildcard: other characters in its place do not match.
    assert!(!matches(p, "/path/file-with-a-x.html"));
    assert!(!matches(p, "/path/file-with-a-.html"));
}

#[test]
fn rfc_special_percent_24_is_a_literal_dollar() {
    let p = "/path/foo-%24";
    assert!(matches(p, "https://www.example.com/path/foo-$"));
    assert!(matches(p, "/path/foo-$and-more"));
    // Not an anchor.
    assert!(!matches(p, "/path/foo-"));
}

#[test]
fn url_wildcard_characters_never_act_as_wildcards() {
    // A `*` or `$` in the URL is an ordinary character.
    assert!(!matches("/a*", "/b"));
    assert!(!matches("/a%2A", "/ab"));
    assert!(matches("/a%2A", "/a*"));
}

// ---------------------------------------------------------------------------
// RFC: other rules of §2.2
// ---------------------------------------------------------------------------

#[test]
fn rfc_rules_outside_any_group_are_ignored() {
    let txt = "disallow: /before\nallow: /x\n\nuser-agent: *\ndisallow: /inside\n";
    let r = rules(txt, "x");
    assert!(r.check("/before").allowed);
    assert!(!r.check("/inside").allowed);
    assert_eq!(Robots::parse(txt.as_bytes()).rule_count(), 1);
}

#[test]
fn rfc_robots_txt_is_implicitly_allowed() {
    let txt = "user-agent: *\ndisallow: /\ndisallow: /robots.txt$\n";
    let r = rules(txt, "x");
    assert!(r.check("/robots.txt").allowed);
    assert!(r.check_url("https://example.com/robots.txt").allowed);
    assert!(r.check("/robots.txt?x=1").allowed);
    assert!(r.check("/robots.txt").rule.is_none());
    // Only that exact path: other files are not.
    assert!(!r.check("/robots.txt/x").allowed);
    assert!(!r.check("/a/robots.txt").allowed);
    assert!(!r.check("/ROBOTS.TXT").allowed);
}

#[test]
fn rfc_matching_is_case_sensitive() {
    assert!(matches("/Fish", "/Fish"));
    assert!(!matches("/Fish", "/fish"));
}

#[test]
fn rfc_group_without_match_and_no_rules_means_allowed() {
    let r = rules("user-agent: *\ndisallow: /a\n", "x");
    assert!(r.check("/b").allowed);
    assert!(r.check("/b").rule.is_none());
    let r = rules("", "x");
    assert_eq!(r.selection(), Selection::None);
    assert!(r.check("/").allowed);
}

#[test]
fn rfc_agent_matching_is_case_insensitive() {
    let txt = "user-agent: FooBot\ndisallow: /\n";
    for agent in ["foobot", "FOOBOT", "FooBot", "fOObOT/3.0"] {
        assert!(!allowed(txt, agent, "/x"), "{agent}");
    }
}

#[test]
fn rfc_browser_style_header_names_the_crawler_after_compatible() {
    let header = "Mozilla/5.0 (compatible; ExampleBot/0.1; https://www.example.com/bot.html)";
    assert_eq!(product_token(header), "examplebot");
    let txt = "user-agent: *\nallow: /\n\nuser-agent: ExampleBot\ndisallow: /\n";
    assert!(!allowed(txt, header, "/page"));
}

/// The draft says a crawler with no group of its own "MUST obey the first
/// group" with `*`. RFC 9309 as published says "the group" with `*` and
/// that groups matching the crawler are combined; Google's reference parser
/// combines every `*` group. Obeying only the first would drop rules a site
/// owner wrote, so robots-proxy combines them.
#[test]
fn several_star_groups_are_combined_not_first_only() {
    let txt = "user-agent: *\ndisallow: /a\n\nuser-agent: other\ndisallow: /o\n\nuser-agent: *\ndisallow: /b\n";
    let r = rules(txt, "x");
    assert_eq!(r.selection(), Selection::Global);
    assert!(!r.check("/a").allowed);
    assert!(!r.check("/b").allowed);
    assert!(r.check("/o").allowed);
}

// ---------------------------------------------------------------------------
// Google: the example.com file at the top of the page
// ---------------------------------------------------------------------------

const GOOGLE_EXAMPLE_COM: &str = "\
# This robots.txt file controls crawling of URLs under https://example.com.
# All crawlers are disallowed to crawl files in the \"includes\" directory, such
# as .css, .js, but Google needs them for rendering, so Googlebot is allowed
# to crawl them.
User-agent: *
Disallow: /includes/

User-agent: Googlebot
Allow: /includes/

Sitemap: https://example.com/sitemap.xml
";

#[test]
fn google_example_com_other_crawlers_may_not_fetch_includes() {
    let r = rules(GOOGLE_EXAMPLE_COM, "Otherbot");
    assert_eq!(r.selection(), Selection::Global);
    assert!(!r.check_url("https://example.com/includes/app.js").allowed);
    assert!(r.check_url("https://example.com/").allowed);
    assert_eq!(
        r.check("/includes/x.css").rule.map(|rule| rule.to_string()),
        Some("line 6: Disallow: /includes/".to_owned())
    );
}

#[test]
fn google_example_com_googlebot_may_fetch_includes() {
    let r = rules(GOOGLE_EXAMPLE_COM, "Googlebot/2.1");
    assert_eq!(r.selection(), Selection::Specific);
    assert!(r.check_url("https://example.com/includes/app.js").allowed);
}

#[test]
fn google_example_com_sitemap_is_read() {
    let robots = Robots::parse(GOOGLE_EXAMPLE_COM.as_bytes());
    assert_eq!(
        robots.sitemaps().collect::<Vec<_>>(),
        ["https://example.com/sitemap.xml"]
    );
}

// ---------------------------------------------------------------------------
// Google: URL matching based on path values (every listed match and
// non-match of the table)
// ---------------------------------------------------------------------------

fn table_row(pattern: &str, yes: &[&str], no: &[&str]) {
    for path in yes {
        assert!(matches(pattern, path), "{pattern} should match {path}");
    }
    for path in no {
        assert!(!matches(pattern, path), "{pattern} should not match {path}");
    }
}

const FISH_YES: &[&str] = &[
    "/fish",
    "/fish.html",
    "/fish/salmon.html",
    "/fishheads",
    "/fishheads/yummy.html",
    "/fish.php?id=anything",
];
const FISH_NO: &[&str] = &["/Fish.asp", "/catfish", "/?id=fish", "/desert/fish"];

#[test]
fn google_table_slash_matches_root_and_everything_below() {
    table_row("/", &["/", "/a", "/a/b?c", "/fish/"], &[]);
}

#[test]
fn google_table_slash_star_is_equivalent_to_slash() {
    table_row("/*", &["/", "/a", "/a/b?c", "/fish/"], &[]);
}

#[test]
fn google_table_slash_dollar_matches_only_the_root() {
    table_row("/$", &["/", "https://example.com/"], &["/a", "/?q", "//"]);
    // "Any lower level URL is allowed for crawling": as an allow rule.
    let txt = "user-agent: *\ndisallow: /a\nallow: /$\n";
    assert!(allowed(txt, "x", "/"));
}

#[test]
fn google_table_fish_prefix() {
    table_row("/fish", FISH_YES, FISH_NO);
}

#[test]
fn google_table_fish_star_is_equivalent_to_fish() {
    table_row("/fish*", FISH_YES, FISH_NO);
}

#[test]
fn google_table_fish_slash_matches_the_folder_only() {
    table_row(
        "/fish/",
        &["/fish/", "/fish/?id=anything", "/fish/salmon.htm"],
        &["/fish", "/fish.html", "/animals/fish/", "/Fish/Salmon.asp"],
    );
}

#[test]
fn google_table_star_dot_php_matches_anywhere_in_the_path() {
    table_row(
        "/*.php",
        &[
            "/index.php",
            "/filename.php",
            "/folder/filename.php",
            "/folder/filename.php?parameters",
            "/folder/any.php.file.html",
            "/filename.php/",
        ],
        &["/", "/windows.PHP"],
    );
}

#[test]
fn google_table_star_dot_php_dollar_matches_only_at_the_end() {
    table_row(
        "/*.php$",
        &["/filename.php", "/folder/filename.php"],
        &[
            "/filename.php?parameters",
            "/filename.php/",
            "/filename.php5",
            "/windows.PHP",
        ],
    );
}

#[test]
fn google_table_fish_star_dot_php_matches_both_in_order() {
    table_row(
        "/fish*.php",
        &["/fish.php", "/fishheads/catfish.php?parameters"],
        &["/Fish.PHP", "/php.fish", "/fish"],
    );
}

// ---------------------------------------------------------------------------
// Google: order of precedence for rules, situations 1 to 6
// ---------------------------------------------------------------------------

fn situation(rules_txt: &str, url: &str) -> String {
    let txt = format!("user-agent: *\n{rules_txt}");
    deciding(&txt, "x", url).unwrap_or_default()
}

#[test]
fn google_precedence_1_longer_allow_wins() {
    assert_eq!(
        situation("allow: /p\ndisallow: /\n", "https://example.com/page"),
        "Allow: /p"
    );
}

#[test]
fn google_precedence_2_equal_rules_least_restrictive_wins() {
    assert_eq!(
        situation(
            "allow: /folder\ndisallow: /folder\n",
            "https://example.com/folder/page"
        ),
        "Allow: /folder"
    );
    // Order in the file does not matter.
    assert_eq!(
        situation(
            "disallow: /folder\nallow: /folder\n",
            "https://example.com/folder/page"
        ),
        "Allow: /folder"
    );
}

#[test]
fn google_precedence_3_longer_wildcard_disallow_wins() {
    assert_eq!(
        situation(
            "allow: /page\ndisallow: /*.htm\n",
            "https://example.com/page.htm"
        ),
        "Disallow: /*.htm"
    );
}

#[test]
fn google_precedence_4_equal_length_wildcard_tie_goes_to_allow() {
    assert_eq!(
        situation(
            "allow: /page\ndisallow: /*.ph\n",
            "https://example.com/page.php5"
        ),
        "Allow: /page"
    );
}

#[test]
fn google_precedence_5_root_anchor_allow_beats_disallow_all_on_root() {
    assert_eq!(
        situation("allow: /$\ndisallow: /\n", "https://example.com/"),
        "Allow: /$"
    );
}

#[test]
fn google_precedence_6_root_anchor_allow_does_not_apply_below_root() {
    assert_eq!(
        situation("allow: /$\ndisallow: /\n", "https://example.com/page.htm"),
        "Disallow: /"
    );
}

// ---------------------------------------------------------------------------
// Google: grouping of lines and rules
// ---------------------------------------------------------------------------

const GOOGLE_GROUPING: &str = "\
user-agent: a
disallow: /c

user-agent: b
disallow: /d

user-agent: e
user-agent: f
disallow: /g

user-agent: h
";

#[test]
fn google_grouping_four_distinct_groups() {
    assert_eq!(Robots::parse(GOOGLE_GROUPING.as_bytes()).group_count(), 4);
}

#[test]
fn google_grouping_a_and_b_have_their_own_rules() {
    assert!(!allowed(GOOGLE_GROUPING, "a", "/c"));
    assert!(allowed(GOOGLE_GROUPING, "a", "/d"));
    assert!(!allowed(GOOGLE_GROUPING, "b", "/d"));
    assert!(allowed(GOOGLE_GROUPING, "b", "/c"));
}

#[test]
fn google_grouping_e_and_f_share_a_group() {
    for agent in ["e", "f"] {
        assert!(!allowed(GOOGLE_GROUPING, agent, "/g"), "{agent}");
        assert!(allowed(GOOGLE_GROUPING, agent, "/c"), "{agent}");
    }
}

#[test]
fn google_grouping_h_has_an_empty_group() {
    let r = rules(GOOGLE_GROUPING, "h");
    assert_eq!(r.selection(), Selection::Specific);
    assert!(r.is_empty());
    assert!(r.check("/c").allowed && r.check("/g").allowed);
}

// ---------------------------------------------------------------------------
// Google: order of precedence for user agents
// ---------------------------------------------------------------------------

const GOOGLE_AGENTS: &str = "\
user-agent: googlebot-news
disallow: /group1

user-agent: *
disallow: /group2

user-agent: googlebot
disallow: /group3
";

/// Which of the three groups an agent follows.
fn group_followed(agent: &str) -> u32 {
    let r = rules(GOOGLE_AGENTS, agent);
    let found: Vec<u32> = (1..=3)
        .filter(|g| !r.check(&format!("/group{g}")).allowed)
        .collect();
    assert_eq!(found.len(), 1, "{agent} follows exactly one group");
    found[0]
}

#[test]
fn google_agents_googlebot_news_follows_its_own_group() {
    assert_eq!(group_followed("googlebot-news"), 1);
    assert_eq!(group_followed("Googlebot-News/1.0"), 1);
}

#[test]
fn google_agents_googlebot_web_follows_googlebot_group() {
    assert_eq!(group_followed("Googlebot"), 3);
}

#[test]
fn google_agents_storebot_follows_star_group() {
    assert_eq!(group_followed("Storebot-Google"), 2);
}

#[test]
fn google_agents_otherbot_follows_star_group() {
    assert_eq!(group_followed("Otherbot"), 2);
}

/// "Even if there is an entry for a related crawler, it is only valid if
/// it's specifically matching": no prefix or family matching.
#[test]
fn google_agents_related_crawler_names_do_not_match() {
    assert_eq!(group_followed("googlebot-image"), 2);
    assert_eq!(group_followed("googlebot-newsbot"), 2);
    assert_eq!(group_followed("google"), 2);
}

#[test]
fn google_agents_group_order_in_file_is_irrelevant() {
    let reordered =
        "user-agent: googlebot\ndisallow: /group3\n\nuser-agent: *\ndisallow: /group2\n";
    assert!(!allowed(reordered, "googlebot", "/group3"));
    assert!(allowed(reordered, "googlebot", "/group2"));
}

// ---------------------------------------------------------------------------
// Google: grouping of rules (merge) and non-group lines
// ---------------------------------------------------------------------------

const GOOGLE_MERGE: &str = "\
user-agent: googlebot-news
disallow: /fish

user-agent: *
disallow: /carrots

user-agent: googlebot-news
disallow: /shrimp
";

#[test]
fn google_merge_specific_groups_are_combined() {
    let r = rules(GOOGLE_MERGE, "googlebot-news");
    assert!(!r.check("/fish").allowed);
    assert!(!r.check("/shrimp").allowed);
    assert_eq!(r.rules().len(), 2);
}

#[test]
fn google_merge_specific_and_star_groups_are_not_combined() {
    assert!(allowed(GOOGLE_MERGE, "googlebot-news", "/carrots"));
    let r = rules(GOOGLE_MERGE, "otherbot");
    assert!(!r.check("/carrots").allowed);
    assert!(r.check("/fish").allowed && r.check("/shrimp").allowed);
}

const GOOGLE_SITEMAP_IN_GROUP: &str = "\
user-agent: a
sitemap: https://example.com/sitemap.xml

user-agent: b
disallow: /
";

#[test]
fn google_sitemap_line_does_not_end_a_group() {
    let robots = Robots::parse(GOOGLE_SITEMAP_IN_GROUP.as_bytes());
    assert_eq!(robots.group_count(), 1);
    assert!(!allowed(GOOGLE_SITEMAP_IN_GROUP, "a", "/x"));
    assert!(!allowed(GOOGLE_SITEMAP_IN_GROUP, "b", "/x"));
    assert_eq!(
        robots.sitemaps().collect::<Vec<_>>(),
        ["https://example.com/sitemap.xml"]
    );
}

#[test]
fn unknown_lines_do_not_end_a_group_either() {
    let txt = "user-agent: a\nnoindex: /x\nhost: example.com\nuser-agent: b\ndisallow: /\n";
    assert!(!allowed(txt, "a", "/x"));
    assert!(!allowed(txt, "b", "/x"));
}

#[test]
fn google_sitemaps_all_listed_in_file_order() {
    let txt = "\
user-agent: otherbot
disallow: /kale

sitemap: https://example.com/sitemap.xml
sitemap: https://cdn.example.org/other-sitemap.xml
sitemap: https://ja.example.org/テスト-サイトマップ.xml
";
    let robots = Robots::parse(txt.as_bytes());
    assert_eq!(
        robots.sitemaps().collect::<Vec<_>>(),
        [
            "https://example.com/sitemap.xml",
            "https://cdn.example.org/other-sitemap.xml",
            "https://ja.example.org/テスト-サイトマップ.xml",
        ]
    );
    // The sitemap lines are not tied to the group before them.
    assert!(!allowed(txt, "otherbot", "/kale"));
    assert_eq!(robots.rule_count(), 1);
}

// ---------------------------------------------------------------------------
// Google: file format
// ---------------------------------------------------------------------------

#[test]
fn google_format_leading_bom_is_ignored() {
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend_from_slice(b"user-agent: *\ndisallow: /x\n");
    let r = Robots::parse(&bytes).agent_rules("a");
    assert_eq!(r.selection(), Selection::Global);
    assert!(!r.check("/x").allowed);
}

#[test]
fn google_format_cr_lf_and_crlf_all_separate_lines() {
    for sep in ["\r", "\n", "\r\n"] {
        let txt = [
            "user-agent: a",
            "disallow: /x",
            "allow: /x/y",
            "disallow: /z",
        ]
        .join(sep);
        let r = rules(&txt, "a");
        assert!(!r.check("/x").allowed, "{sep:?}");
        assert!(r.check("/x/y").allowed, "{sep:?}");
        assert!(!r.check("/z").allowed, "{sep:?}");
        assert_eq!(
            r.check("/z").rule.map(|rule| rule.line()),
            Some(4),
            "{sep:?}"
        );
    }
    // Mixed in one file.
    let r = rules(
        "user-agent: a\r\ndisallow: /x\rdisallow: /y\ndisallow: /z",
        "a",
    );
    assert!(!r.check("/x").allowed && !r.check("/y").allowed && !r.check("/z").allowed);
}

#[test]
fn google_format_html_content_yields_only_its_valid_lines() {
    let html = "<!DOCTYPE html>\n<html><head><title>404: Not Found</title>\n\
<meta http-equiv=\"refresh\" content=\"0; url=/\"></head>\n<body>\n\
<p>Disallow: /everything</p>\n</body></html>\n";
    let r = rules(html, "x");
    assert_eq!(r.selection(), Selection::None);
    assert!(r.check("/everything").allowed);

    let with_rules = "<html><body><pre>\nUser-agent: *\nDisallow: /private\n</pre></body></html>\n";
    let r = rules(with_rules, "x");
    assert!(!r.check("/private").allowed);
    assert!(r.check("/public").allowed);
}

#[test]
fn google_format_invalid_utf8_is_tolerated() {
    let bytes = b"user-agent: *\n\xFF\xFE garbage \x80\ndisallow: /x\xC3\n";
    let r = Robots::parse(bytes).agent_rules("a");
    assert!(r.check("/y").allowed);
    // The bad octet is percent-encoded, as Google's matcher reads it.
    assert!(!r.check("/x%C3").allowed);
    assert!(r.check("/x%EF%BF%BD").allowed);
}

#[test]
fn google_format_content_past_500_kib_is_ignored() {
    let mut txt = String::from("user-agent: *\ndisallow: /before\n");
    while txt.len() < MAX_BYTES + 1024 {
        txt.push_str("# filler filler filler filler filler filler filler\n");
    }
    txt.push_str("disallow: /after\n");
    let robots = Robots::parse(txt.as_bytes());
    assert!(robots.truncated());
    let r = robots.agent_rules("x");
    assert!(!r.check("/before").allowed);
    assert!(r.check("/after").allowed);
}

/// A rule that straddles the 500 KiB limit is dropped whole rather than read
/// as a shorter (more restrictive, or wrong) prefix of itself.
#[test]
fn google_format_rule_cut_by_the_limit_is_dropped_not_shortened() {
    let mut txt = String::from("user-agent: *\n");
    while txt.len() < MAX_BYTES - 8 {
        txt.push_str("#\n");
    }
    txt.truncate(MAX_BYTES - 8);
    txt.push_str("\ndisallow: /abcdefghij\n");
    let r = rules(&txt, "x");
    assert!(r.is_empty());
    assert!(r.check("/a").allowed);
}

#[test]
fn google_format_exactly_500_kib_is_read_whole() {
    let tail = "disallow: /last\n";
    let mut txt = String::from("user-agent: *\n");
    while txt.len() < MAX_BYTES - tail.len() {
        txt.push('\n');
    }
    txt.push_str(tail);
    assert_eq!(txt.len(), MAX_BYTES);
    let robots = Robots::parse(txt.as_bytes());
    assert!(!robots.truncated());
    assert!(!robots.agent_rules("x").check("/last").allowed);
}

// ---------------------------------------------------------------------------
// Google: syntax
// ---------------------------------------------------------------------------

#[test]
fn google_syntax_spaces_are_optional_and_trimmed() {
    let txt = "  user-agent:x  \n\tdisallow:/a\t\n disallow :  /b  # note\n";
    let r = rules(txt, "x");
    assert!(!r.check("/a").allowed);
    assert!(!r.check("/b").allowed);
    assert!(r.check("/c").allowed);
}

#[test]
fn google_syntax_keys_are_case_insensitive() {
    let txt = "USER-AGENT: x\nDISALLOW: /a\nAllow: /a/b\nSiteMap: https://e.com/s.xml\n";
    let robots = Robots::parse(txt.as_bytes());
    let r = robots.agent_rules("x");
    assert!(!r.check("/a").allowed);
    assert!(r.check("/a/b").allowed);
    assert_eq!(robots.sitemaps().count(), 1);
}

#[test]
fn google_syntax_values_are_case_sensitive() {
    let txt = "user-agent: *\ndisallow: /Private\n";
    assert!(!allowed(txt, "x", "/Private"));
    assert!(allowed(txt, "x", "/private"));
}

#[test]
fn google_syntax_rule_without_path_is_ignored() {
    let txt = "user-agent: *\ndisallow:\nallow:\n";
    let r = rules(txt, "x");
    assert!(r.is_empty());
    assert!(r.check("/anything").allowed);
    // …and yet it ends the agent list: a following user-agent starts a group.
    let txt = "user-agent: a\ndisallow:\nuser-agent: b\ndisallow: /\n";
    assert!(allowed(txt, "a", "/x"));
    assert!(!allowed(txt, "b", "/x"));
}

#[test]
fn google_syntax_common_typos_are_accepted() {
    let txt = "useragent: a\ndissallow: /1\ndissalow: /2\ndisalow: /3\ndiasllow: /4\ndisallaw: /5\n\
               user agent: b\ndisallow: /6\n";
    for p in ["/1", "/2", "/3", "/4", "/5"] {
        assert!(!allowed(txt, "a", p), "{p}");
    }
    assert!(!allowed(txt, "b", "/6"));
}

#[test]
fn google_syntax_missing_colon_is_accepted() {
    let txt = "user-agent a\ndisallow /x\nallow /x/y\n";
    let r = rules(txt, "a");
    assert!(!r.check("/x").allowed);
    assert!(r.check("/x/y").allowed);
}

#[test]
fn missing_colon_with_more_than_two_words_is_not_a_rule() {
    let txt = "user-agent: a\ndisallow /x /y\n";
    assert!(allowed(txt, "a", "/x"));
}

// ---------------------------------------------------------------------------
// Crawl-delay: not used by Google (its page says so), but read by
// robots-proxy for politeness; fractional values are accepted.
// ---------------------------------------------------------------------------

#[test]
fn crawl_delay_fractional_is_read() {
    let r = rules("user-agent: *\ncrawl-delay: 0.5\ndisallow: /x\n", "a");
    assert_eq!(r.crawl_delay(), Some(0.5));
    let r = rules("user-agent: *\nCrawl-delay: 2\n", "a");
    assert_eq!(r.crawl_delay(), Some(2.0));
}

#[test]
fn crawl_delay_invalid_values_are_ignored() {
    for v in ["abc", "-1", "NaN", "inf", ""] {
        let r = rules(&format!("user-agent: *\ncrawl-delay: {v}\n"), "a");
        assert_eq!(r.crawl_delay(), None, "{v:?}");
    }
}

#[test]
fn crawl_delay_of_merged_groups_is_the_largest() {
    let txt = "user-agent: a\ncrawl-delay: 1.5\ndisallow: /a1\n\nuser-agent: b\ncrawl-delay: 9\ndisallow: /b\n\n\
               user-agent: a\ncrawl-delay: 2.5\ndisallow: /a2\n";
    assert_eq!(rules(txt, "a").crawl_delay(), Some(2.5));
    assert_eq!(rules(txt, "b").crawl_delay(), Some(9.0));
    assert_eq!(rules(txt, "c").crawl_delay(), None);
}

#[test]
fn crawl_delay_does_not_end_a_group() {
    let txt = "user-agent: a\ncrawl-delay: 1\nuser-agent: b\ndisallow: /\n";
    assert!(!allowed(txt, "a", "/x"));
    assert_eq!(rules(txt, "b").crawl_delay(), Some(1.0));
}

// ---------------------------------------------------------------------------
// Product tokens
// ---------------------------------------------------------------------------

#[test]
fn product_token_versioned_agent_names_the_token() {
    assert_eq!(product_token("Googlebot/2.1"), "googlebot");
    let txt = "user-agent: googlebot\ndisallow: /g\n";
    assert!(!allowed(txt, "Googlebot/2.1", "/g"));
}

#[test]
fn product_token_is_the_first_word() {
    assert_eq!(product_token("foo bar"), "foo");
    let txt = "user-agent: foo\ndisallow: /f\n\nuser-agent: bar\ndisallow: /b\n";
    assert!(!allowed(txt, "foo bar", "/f"));
    assert!(allowed(txt, "foo bar", "/b"));
}

#[test]
fn product_token_in_user_agent_line_ignores_version_and_trailing_text() {
    // "both googlebot/1.2 and googlebot* are equivalent to googlebot"
    for line in [
        "googlebot/1.2",
        "googlebot*",
        "Googlebot",
        "GOOGLEBOT extra words",
    ] {
        let txt = format!("user-agent: {line}\ndisallow: /g\n");
        assert!(!allowed(&txt, "googlebot", "/g"), "{line}");
    }
}

#[test]
fn product_token_matching_is_case_insensitive_both_ways() {
    let txt = "user-agent: GoogleBot\ndisallow: /g\n";
    for agent in ["googlebot", "GOOGLEBOT", "Googlebot/2.1"] {
        assert!(!allowed(txt, agent, "/g"), "{agent}");
    }
}

/// Google reads `*` as the global group only when it stands alone (or is
/// followed by a space). A glob such as `*WordPress*` names some crawler, not
/// every crawler: reading it as `*` would turn a ban on one bot into a ban on
/// all of them (a real file in the corpus does exactly this).
#[test]
fn star_glob_user_agent_is_not_the_global_group() {
    let txt = "user-agent: *\ndisallow: /private\n\nuser-agent: *WordPress*\ndisallow: /\n";
    let r = rules(txt, "examplebot");
    assert_eq!(r.selection(), Selection::Global);
    assert!(r.check("/public").allowed);
    assert!(!r.check("/private").allowed);
    // `* # comment` and `*  ` are still the global group.
    let txt = "user-agent: *    # applies to all robots\ndisallow: /x\n";
    assert!(!allowed(txt, "examplebot", "/x"));
}

// ---------------------------------------------------------------------------
// URL forms accepted by check_url
// ---------------------------------------------------------------------------

#[test]
fn check_url_accepts_absolute_urls_paths_and_drops_fragments() {
    let txt = "user-agent: *\ndisallow: /a$\ndisallow: /*?q\n";
    let r = rules(txt, "x");
    assert!(!r.check_url("https://example.com/a").allowed);
    assert!(!r.check_url("https://example.com/a#frag").allowed);
    assert!(!r.check_url("/a").allowed);
    assert!(!r.check_url("http://example.com?q=1").allowed);
    assert!(r.check_url("https://example.com/a/b").allowed);
    assert!(r.check_url("").allowed);
}

/// A bare `a/b` given to `check_url` is read relative to the root, as `/a/b`.
#[test]
fn check_url_reads_a_relative_path_from_the_root() {
    let r = rules("user-agent: *\ndisallow: /private\n", "x");
    assert!(!r.check_url("private/x").allowed);
    assert!(!r.check("private/x").allowed);
}

#[test]
fn rule_display_names_line_and_value_as_written() {
    let r = rules("user-agent: *\n\ndisallow: /a%62c\nallow: x\n", "x");
    let v = r.check("/abc");
    let rule = v.rule.expect("a rule matched");
    assert_eq!(rule.to_string(), "line 3: Disallow: /a%62c");
    assert_eq!(rule.value(), "/a%62c");
    assert_eq!(rule.pattern(), "/abc");
    assert!(!rule.is_allow());
    // A value written without its leading slash is read as rooted.
    let v = r.check("/x");
    assert_eq!(
        v.rule.map(|rule| rule.to_string()),
        Some("line 4: Allow: x".to_owned())
    );
}

// --- Usage preferences (draft-ietf-aipref-attach-04, draft-ietf-aipref-vocab-08).

use robots_proxy::robots::usage::{Kind, Pref};

/// The usage preference for `category` at `path`, after the path is
/// judged crawlable (preferences apply only to what may be crawled).
fn usage(text: &str, agent: &str, path: &str, category: &str) -> Option<(Pref, u32)> {
    let r = Robots::parse(text.as_bytes()).agent_rules(agent);
    if !r.check(path).allowed {
        return None;
    }
    r.usage(path, category).map(|v| (v.pref, v.rule.line()))
}

#[test]
fn attach_example_header_form_in_robots_txt() {
    // §1.2: the same statement as the header, for a whole group.
    let txt = "User-Agent: *\nAllow: /\nContent-Usage: train-ai=n\n";
    assert_eq!(
        usage(txt, "bot", "/any", "train-ai"),
        Some((Pref::Disallowed, 3))
    );
    assert_eq!(usage(txt, "bot", "/any", "search"), None);
}

const ATTACH_EXAMPLE: &str = "User-Agent: *\nAllow: /\nDisallow: /never/\nContent-Usage: train-ai=n\nContent-Usage: /ai-ok/ train-ai=y\n\nUser-Agent: ExampleBot\nAllow: /\nContent-Usage: train-ai=y\n";

#[test]
fn attach_example_table_of_paths() {
    // §3.4, the table: /test yes train-ai=n; /never/test no N/A;
    // /ai-ok/test yes train-ai=y.
    assert_eq!(
        usage(ATTACH_EXAMPLE, "other", "/test", "train-ai"),
        Some((Pref::Disallowed, 4))
    );
    assert_eq!(
        usage(ATTACH_EXAMPLE, "other", "/never/test", "train-ai"),
        None
    );
    assert!(
        !Robots::parse(ATTACH_EXAMPLE.as_bytes())
            .agent_rules("other")
            .check("/never/test")
            .allowed
    );
    assert_eq!(
        usage(ATTACH_EXAMPLE, "other", "/ai-ok/test", "train-ai"),
        Some((Pref::Allowed, 5))
    );
}

#[test]
fn attach_example_examplebot_uses_its_own_group() {
    assert_eq!(
        usage(ATTACH_EXAMPLE, "ExampleBot", "/test", "train-ai"),
        Some((Pref::Allowed, 9))
    );
    assert_eq!(
        usage(ATTACH_EXAMPLE, "ExampleBot/2.0", "/never/test", "train-ai"),
        Some((Pref::Allowed, 9))
    );
}

#[test]
fn content_usage_lines_may_be_interleaved_and_do_not_end_a_group() {
    let txt = "user-agent: a\ncontent-usage: search=n\nuser-agent: b\ndisallow: /x\n";
    // The usage line is a rule: `b` starts a new group.
    assert_eq!(usage(txt, "a", "/x", "search"), Some((Pref::Disallowed, 2)));
    assert_eq!(usage(txt, "b", "/y", "search"), None);
    // Before any user-agent line: no group, ignored.
    assert_eq!(
        usage(
            "content-usage: train-ai=n\nuser-agent: *\nallow: /\n",
            "x",
            "/",
            "train-ai"
        ),
        None
    );
}

#[test]
fn content_signal_as_cloudflare_publishes_it() {
    let txt = "# As a condition of accessing this website, you agree to abide by the following\n# content signals: ...\nUser-Agent: *\nContent-Signal: search=yes, ai-train=no\nAllow: /\n";
    assert_eq!(
        usage(txt, "bot", "/page", "train-ai"),
        Some((Pref::Disallowed, 4))
    );
    assert_eq!(
        usage(txt, "bot", "/page", "search"),
        Some((Pref::Allowed, 4))
    );
    assert_eq!(usage(txt, "bot", "/page", "ai-input"), None);
    let r = Robots::parse(txt.as_bytes());
    assert_eq!(r.usage_rules()[0].kind(), Kind::ContentSignal);
}

#[test]
fn malformed_usage_lines_are_kept_and_reported_never_a_parse_failure() {
    let txt = "user-agent: *\ncontent-usage: train-ai=maybe\ncontent-usage: /a TRAIN-AI=n\ndisallow: /private\n";
    let r = Robots::parse(txt.as_bytes());
    assert_eq!(r.usage_rules().len(), 2);
    assert!(
        r.usage_rules()
            .iter()
            .all(|u| !u.statement().problems().is_empty())
    );
    let rules = r.agent_rules("x");
    assert!(!rules.check("/private").allowed);
    assert_eq!(rules.usage("/a", "train-ai"), None);
}

// --- Where the project differs from public suites, decided by RFC 9309's
// --- grammar (docs/design.md: "Reading robots.txt where the public test suites differ").

/// A NUL is a control character, which `UTF8-char-noctl` excludes: such a
/// value does not conform, and is read leniently (Postel) like any other
/// octet outside printable ASCII, percent-encoded. It neither ends the line
/// nor the group.
#[test]
fn a_nul_inside_a_value_is_read_as_an_encoded_octet() {
    let r = rules("user-agent: *\ndisallow: /a\0b\ndisallow: /c\n", "x");
    assert!(!r.check("/a%00b").allowed);
    assert!(r.check("/a").allowed);
    assert!(r.check("/ab").allowed);
    assert!(!r.check("/c").allowed);
    let r = rules("user-agent: foo\0bar\ndisallow: /x\n", "foo");
    assert!(!r.check("/x").allowed);
}

/// `identifier = 1*(%x2d / %x41-5a / %x5f / %x61-7a)`: no digits. A
/// `User-agent` line is read up to its first other character, so the
/// file's `AB42bot` is `ab`; the crawler's own token is matched as
/// configured, so a crawler `AB42bot` has no group there and falls under
/// `*`, while a crawler `AB` is the file's `ab`. google/robotstxt-spec-test
/// `CTC/stress/369883`, all ten vectors (#6 asks for `/robots.txt`, which
/// RFC 9309 §2.2.2 always allows: the one choice that differs).
#[test]
fn googles_stress_369883_product_tokens() {
    let txt = "User-agent: *\n<br />\nAllow: /\n<br />\nUser-agent: BarBot\n<br />\nDisallow: /\n\
               <br />\nUser-agent: AB42bot\n<br />\nDisallow: /\n<br />\n\
               sitemap: http://example.com/sitemap.xml\n";
    for (url, agent, allowed) in [
        ("http://example.com/", "foobot", true),
        ("http://example.com/foo/bar", "foo-bot", true),
        ("http://example.com/robots.txt", "foo_bot", true),
        ("http://example.com/", "BarBot", false),
        ("http://example.com/foo/bar/baz", "BarBot", false),
        ("http://example.com/robots.txt", "BarBot", true),
        ("http://example.com/foo/bar", "AB42bot", true),
        ("http://example.com/", "AB42bot", true),
        ("http://example.com/", "AB", false),
        ("http://example.com/robots.txt", "AB", true),
    ] {
        assert_eq!(
            rules(txt, agent).check_url(url).allowed,
            allowed,
            "{agent} {url}"
        );
    }
    assert_eq!(product_token("AB42bot/1.0"), "ab42bot");
}

/// Matching is defined on the path as written (RFC 9309 §2.2.2), so
/// `Allow: /dir/index.html` allows that file, not `/dir/` (google/robotstxt
/// adds `/dir/$` for `index.htm*`; its documented behaviour does not).
#[test]
fn an_allowed_index_file_does_not_allow_its_directory() {
    let txt = "user-agent: *\ndisallow: /dir/\nallow: /dir/index.html\n";
    assert!(rules(txt, "x").check("/dir/index.html").allowed);
    assert!(!rules(txt, "x").check("/dir/").allowed);
}
