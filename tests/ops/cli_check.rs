//! The `check` command as a user runs it.

use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};

use crate::support::binary::{TextFile, command, run};

fn robots_file(text: &str) -> TextFile {
    TextFile::new("robots.txt", text)
}

/// `check --robots <robots> args…`, run to its end.
fn check_args(robots: &Path, args: &[&str]) -> Output {
    command()
        .args(["check", "--robots"])
        .arg(robots)
        .args(args)
        .output()
        .expect("run")
}

fn check(
    robots: &std::path::Path,
    agent: &str,
    urls: &[&str],
    stdin: Option<&str>,
) -> (Option<i32>, String, String) {
    let mut child = command()
        .args(["check", "--robots"])
        .arg(robots)
        .args(["--agent", agent])
        .args(urls)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("stdin write");
    }
    drop(input);
    let out = child.wait_with_output().expect("output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const ROBOTS: &str = "User-agent: *\nDisallow: /private\nAllow: /private/ok\n";

#[test]
fn urls_as_arguments_print_one_line_each_with_the_deciding_rule() {
    let f = robots_file(ROBOTS);
    let (code, out, _) = check(
        &f.path,
        "ExampleBot",
        &["/public", "https://example.com/private/x?y", "/private/ok"],
        None,
    );
    assert_eq!(code, Some(1));
    assert_eq!(
        out,
        "ALLOWED /public\n\
         DISALLOWED https://example.com/private/x?y\tline 2: Disallow: /private\n\
         ALLOWED /private/ok\tline 3: Allow: /private/ok\n"
    );
}

#[test]
fn all_allowed_exits_zero() {
    let f = robots_file(ROBOTS);
    let (code, out, _) = check(&f.path, "ExampleBot", &["/a", ""], None);
    assert_eq!(code, Some(0));
    assert_eq!(out, "ALLOWED /a\nALLOWED /\n");
}

#[test]
fn urls_from_stdin_crlf_and_empty_lines() {
    let f = robots_file(ROBOTS);
    let (code, out, _) = check(&f.path, "ExampleBot", &[], Some("/a\r\n/private\n\n"));
    assert_eq!(code, Some(1));
    assert_eq!(
        out,
        "ALLOWED /a\nDISALLOWED /private\tline 2: Disallow: /private\nALLOWED /\n"
    );
}

#[test]
fn full_user_agent_string_uses_its_product_token() {
    let f = robots_file("User-agent: examplebot\nDisallow: /\n");
    let (code, _, _) = check(
        &f.path,
        "Mozilla/5.0 (compatible; ExampleBot/0.1; https://www.example.com/bot.html)",
        &["/x"],
        None,
    );
    assert_eq!(code, Some(1));
    let (code, _, _) = check(&f.path, "ExampleBot/0.1", &["/x"], None);
    assert_eq!(code, Some(1));
}

#[test]
fn missing_file_and_bad_usage_exit_two_with_a_message() {
    let (code, _, err) = check(
        std::path::Path::new("/nonexistent/robots.txt"),
        "x",
        &["/"],
        None,
    );
    assert_eq!(code, Some(2));
    assert!(err.contains("/nonexistent/robots.txt"), "{err}");
    let f = robots_file(ROBOTS);
    let (code, _, err) = check(&f.path, "/// ", &["/"], None);
    assert_eq!(code, Some(2));
    assert!(err.contains("product token"), "{err}");
    // No --robots.
    let out = run(&["check", "--agent", "x"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn lines_that_are_not_urls_are_invalid_and_exit_two_after_the_rest() {
    let f = robots_file(ROBOTS);
    let (code, out, err) = check(
        &f.path,
        "ExampleBot",
        &[],
        Some("not a url\nmailto:x@example.com\nx.com/private\n/private\nhttps://example.com/a\n"),
    );
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        out,
        "INVALID not a url\tneither a path (/...) nor an absolute http(s) URL\n\
         INVALID mailto:x@example.com\tnot an http or https URL\n\
         INVALID x.com/private\tneither a path (/...) nor an absolute http(s) URL\n\
         DISALLOWED /private\tline 2: Disallow: /private\n\
         ALLOWED https://example.com/a\n"
    );
    assert!(err.contains("3 line(s)"), "{err}");
}

#[test]
fn a_path_is_judged_as_origins_resolve_it_as_the_proxy_does() {
    let f = robots_file(ROBOTS);
    let (code, out, _) = check(&f.path, "ExampleBot", &["/public/../private/x"], None);
    assert_eq!(code, Some(1));
    assert_eq!(
        out,
        "DISALLOWED /public/../private/x\tline 2: Disallow: /private\tjudged as /private/x\n"
    );
}

#[test]
fn the_agent_defaults_to_the_configured_one() {
    let f = robots_file(
        "User-agent: robots-proxy\nDisallow: /own\n\nUser-agent: cfgbot\nDisallow: /cfg\n",
    );
    let run = |args: &[&str]| check_args(&f.path, args);
    // Built-in default: robots-proxy's own group.
    assert_eq!(run(&["/own"]).status.code(), Some(1));
    assert_eq!(run(&["/cfg"]).status.code(), Some(0));
    // From the config file.
    let config = TextFile::new("robots-proxy.toml", "agent = \"cfgbot\"\n");
    let path = config.path.to_str().expect("utf-8 path");
    assert_eq!(run(&["--config", path, "/cfg"]).status.code(), Some(1));
    assert_eq!(run(&["--config", path, "/own"]).status.code(), Some(0));
}

#[test]
fn every_reading_is_judged_and_case_folds_only_when_asked() {
    let f = robots_file("User-agent: *\nDisallow: /private/\nDisallow: /wiki/Special:\n");
    let (code, out, _) = check(
        &f.path,
        "ExampleBot",
        &[
            "/public\\..\\private/x",
            "/private./x",
            "/wiki/Special%3ASearch",
            "/PRIVATE/x",
        ],
        None,
    );
    assert_eq!(code, Some(1));
    assert_eq!(
        out,
        "DISALLOWED /public\\..\\private/x\tline 2: Disallow: /private/\tjudged as /private/x\n\
         DISALLOWED /private./x\tline 2: Disallow: /private/\tjudged as /private/x\n\
         DISALLOWED /wiki/Special%3ASearch\tline 3: Disallow: /wiki/Special:\tjudged as /wiki/Special:Search\n\
         ALLOWED /PRIVATE/x\n"
    );
    let out = command()
        .args(["check", "--case-insensitive", "--robots"])
        .arg(&f.path)
        .args(["--agent", "ExampleBot", "/PRIVATE/x"])
        .output()
        .expect("run");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "DISALLOWED /PRIVATE/x\tline 2: Disallow: /private/\tjudged as /private/x\n"
    );
}

#[test]
fn a_declared_purpose_disallows_what_the_site_prefers_not_used_for_it() {
    let f = robots_file(
        "User-Agent: *\nAllow: /\nDisallow: /never/\nContent-Usage: train-ai=n\nContent-Usage: /ai-ok/ train-ai=y\n",
    );
    let run = |purpose: &[&str]| {
        let args = [
            purpose,
            &[
                "--agent",
                "ExampleBot",
                "/test",
                "/never/test",
                "/ai-ok/test",
            ],
        ];
        let out = check_args(&f.path, &args.concat());
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = run(&["--purpose", "train-ai"]);
    assert_eq!(code, Some(1));
    assert_eq!(
        out,
        "DISALLOWED /test\tline 4: Content-Usage: train-ai=n\tusage train-ai=n\n\
         DISALLOWED /never/test\tline 3: Disallow: /never/\n\
         ALLOWED /ai-ok/test\tline 2: Allow: /\n"
    );
    // Without the purpose, only the crawl rules decide.
    let (_, out) = run(&["--purpose", "search"]);
    assert!(
        out.starts_with("ALLOWED /test\tline 2: Allow: /\n"),
        "{out}"
    );
}

/// The reproduction: `Disallow: /*.$` (msdn.microsoft.com's) blocks
/// URLs that end in a dot and nothing else; a rule decoded into the path's
/// spelling says which reading read it.
#[test]
fn a_rule_about_a_spelling_is_not_widened_by_a_reading() {
    let robots = robots_file("User-agent: *\nDisallow: /*.$\nDisallow: /;\nDisallow: //folder/*\n");
    let (code, out, _) = check(
        &robots.path,
        "ExampleBot",
        &[],
        Some(
            "http://x/a.pdf\nhttp://x/Alexa/b\nhttp://x/a.\nhttp://x/a.pdf.\nhttp://x/\nhttp://x/;x\nhttp://x/folder/page\nhttp://x//folder/page\n",
        ),
    );
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(
        out,
        "ALLOWED http://x/a.pdf\nALLOWED http://x/Alexa/b\n\
         DISALLOWED http://x/a.\tline 2: Disallow: /*.$\n\
         DISALLOWED http://x/a.pdf.\tline 2: Disallow: /*.$\n\
         ALLOWED http://x/\n\
         DISALLOWED http://x/;x\tline 3: Disallow: /;\n\
         ALLOWED http://x/folder/page\n\
         DISALLOWED http://x//folder/page\tline 4: Disallow: //folder/*\n"
    );
    let robots = robots_file("User-agent: *\nDisallow: /wiki/Special%3A\n");
    let (_, out, _) = check(&robots.path, "ExampleBot", &["/wiki/Special:Search"], None);
    assert_eq!(
        out,
        "DISALLOWED /wiki/Special:Search\tline 2: Disallow: /wiki/Special%3A\tread as decoded\n"
    );
}
