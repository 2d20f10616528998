//! `robots-proxy audit report` on a log made by the test with known
//! counts: the text and JSON forms checked whole, the CSV header and a
//! row, the HTML form self-contained (inline SVG, no script, no reference
//! out of the file), and the period filter.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::json;

use crate::support::binary::command;

const SHA_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const SHA_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

/// One audit line as the proxy writes it (the fields a report reads),
/// from `spec`: time, client, user, URL, agent, decision, rule (its line
/// number, a space, its text) and robots.txt digest, separated by `|`,
/// an empty field for none (user, rule, digest).
fn line(spec: &str) -> String {
    let f: Vec<&str> = spec.split('|').collect();
    assert_eq!(f.len(), 8, "{spec}");
    let some = |field: &str| (!field.is_empty()).then(|| field.to_owned());
    let rule = some(f[6]).map(|r| {
        let (n, text) = r.split_once(' ').expect("a rule's line and text");
        (n.parse::<u32>().expect("a line number"), text.to_owned())
    });
    let mut v = json!({
        "seq": 1,
        "time": f[0],
        "client": f[1],
        "method": "GET",
        "url": f[3],
        "agent": f[4],
        "decision": f[5],
        "reason": "test",
        "rule_line": rule.as_ref().map(|r| r.0),
        "rule": rule.as_ref().map(|r| r.1.clone()),
        "robots_url": "x",
        "chain": "0".repeat(64),
    });
    if let Some(user) = some(f[2]) {
        v["user"] = json!(user);
    }
    if let Some(sha) = some(f[7]) {
        v["robots_sha256"] = json!(sha);
    }
    v.to_string()
}

/// Two files, the second gzip: 8 requests over three days, 5 blocked, a
/// checkpoint and an unreadable line.
fn log(dir: &Path) -> Vec<PathBuf> {
    let private = "2 Disallow: /private";
    let day1 = [
        format!("2026-03-01T08:00:00.000Z|10.0.0.1:1000|ann|http://a.example/private/1|alphabot|disallowed|{private}|"),
        format!("2026-03-01T09:00:00.000Z|10.0.0.1:1001|ann|http://a.example/private/1|alphabot|disallowed|{private}|"),
        format!("2026-03-01T10:00:00.000Z|10.0.0.1:1002|ann|http://a.example/private/2?<script>|alphabot|disallowed|{private}|"),
        "2026-03-01T11:00:00.000Z|10.0.0.2:5||http://a.example/p|alphabot|allowed||".to_owned(),
        "2026-03-01T12:00:00.000Z|10.0.0.2:5||http://a.example/p|alphabot|allowed||".to_owned(),
    ]
    .map(|spec| line(&spec));
    let first = dir.join("audit.jsonl.1.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&first).expect("create"),
        flate2::Compression::default(),
    );
    let checkpoint = r#"{"seq":1,"type":"checkpoint","time":"2026-03-01T00:00:00.000Z","reason":"start","file_start":true,"head":"00","chain":"00"}"#;
    gz.write_all(format!("{checkpoint}\n{}\n", day1.join("\n")).as_bytes())
        .expect("gzip");
    gz.finish().expect("gzip");
    let rest = [
        line(&format!(
            "2026-03-02T08:00:00.000Z|10.0.0.2:6||http://b.example:8080/x|betabot|disallowed|3 Disallow: /x|{SHA_A}"
        )),
        line(&format!(
            "2026-03-02T09:00:00.000Z|10.0.0.2:7||http://b.example:8080/y|betabot|unreachable||{SHA_B}"
        )),
        "not json".to_owned(),
        line("2026-03-03T08:00:00.000Z|10.0.0.3:9||https://c.example/|alphabot|tunnelled||"),
    ];
    let second = dir.join("audit.jsonl");
    std::fs::write(&second, format!("{}\n", rest.join("\n"))).expect("write");
    vec![first, second]
}

fn report(args: &[&str], files: &[PathBuf]) -> Output {
    command()
        .args(["audit", "report"])
        .args(args)
        .args(files)
        .output()
        .expect("run robots-proxy")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const TEXT: &str = "\
robots-proxy audit report
files: 2, lines read: 10 (checkpoints: 1, unreadable: 1, outside the period: 0)
requests: 8, blocked: 5
period: 2026-03-01T08:00:00.000Z to 2026-03-03T08:00:00.000Z

Per day
  day          requests    blocked
  2026-03-01          5          3
  2026-03-02          2          2
  2026-03-03          1          0

Decisions (top 20)
  decision      requests    blocked
  disallowed           4          4
  allowed              2          0
  unreachable          1          1
  tunnelled            1          0

Origins (top 20)
  origin                  requests    blocked
  http://a.example               5          3
  http://b.example:8080          2          2
  https://c.example              1          0

Rules (top 20)
  rule                                          requests    blocked
  http://a.example line 2: Disallow: /private          3          3
  http://b.example:8080 line 3: Disallow: /x           1          1

Agents (top 20)
  agent      requests    blocked
  alphabot          6          3
  betabot           2          2

Clients (top 20)
  client address   requests    blocked
  10.0.0.2                4          2
  10.0.0.1                3          3
  10.0.0.3                1          0

Proxy users (top 20)
  user       requests    blocked
  -                 5          2
  ann               3          3

Most blocked URLs (top 20)
  url                                    blocked
  http://a.example/private/1                   2
  http://a.example/private/2?<script>          1
  http://b.example:8080/x                      1
  http://b.example:8080/y                      1

robots.txt versions (robots_sha256) per origin
  http://b.example:8080 (2 requests, 2 blocked)
    aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 1 requests, 1 blocked, 2026-03-02T08:00:00.000Z to 2026-03-02T08:00:00.000Z
    bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb 1 requests, 1 blocked, 2026-03-02T09:00:00.000Z to 2026-03-02T09:00:00.000Z
";

#[test]
fn the_text_report_gives_the_known_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = log(dir.path());
    assert_eq!(stdout(&report(&[], &files)), TEXT);
}

#[test]
fn the_json_report_gives_the_known_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = log(dir.path());
    let text = stdout(&report(&["--format", "json", "--top", "2"], &files));
    let got: serde_json::Value = serde_json::from_str(&text).expect("json");
    let row = |key: &str, requests: u64, blocked: u64| json!({"key": key, "requests": requests, "blocked": blocked});
    let rule_row = |origin: &str, line: u64, rule: &str, requests: u64, blocked: u64| {
        json!({"key": format!("{origin} line {line}: {rule}"), "origin": origin, "line": line,
               "rule": rule, "requests": requests, "blocked": blocked})
    };
    let none = json!({"requests": 0, "blocked": 0});
    let table = |rows: Vec<serde_json::Value>, others: serde_json::Value| json!({"rows": rows, "others": others, "short_by": 0});
    let expected = json!({
        "files": 2, "lines": 10, "checkpoints": 1, "unreadable": 1, "outside": 0,
        "since": null, "until": null,
        "first": "2026-03-01T08:00:00.000Z", "last": "2026-03-03T08:00:00.000Z",
        "requests": 8, "blocked": 5,
        "days": [
            {"day": "2026-03-01", "requests": 5, "blocked": 3},
            {"day": "2026-03-02", "requests": 2, "blocked": 2},
            {"day": "2026-03-03", "requests": 1, "blocked": 0},
        ],
        "decisions": table(
            vec![row("disallowed", 4, 4), row("allowed", 2, 0)],
            json!({"requests": 2, "blocked": 1}),
        ),
        "origins": table(
            vec![row("http://a.example", 5, 3), row("http://b.example:8080", 2, 2)],
            json!({"requests": 1, "blocked": 0}),
        ),
        "rules": table(
            vec![
                rule_row("http://a.example", 2, "Disallow: /private", 3, 3),
                rule_row("http://b.example:8080", 3, "Disallow: /x", 1, 1),
            ],
            none.clone(),
        ),
        "agents": table(vec![row("alphabot", 6, 3), row("betabot", 2, 2)], none.clone()),
        "clients": table(
            vec![row("10.0.0.2", 4, 2), row("10.0.0.1", 3, 3)],
            json!({"requests": 1, "blocked": 0}),
        ),
        "users": table(vec![row("-", 5, 2), row("ann", 3, 3)], none.clone()),
        "blocked_urls": table(
            vec![
                row("http://a.example/private/1", 2, 2),
                row("http://a.example/private/2?<script>", 1, 1),
            ],
            json!({"requests": 2, "blocked": 2}),
        ),
        "robots_versions": [{
            "origin": "http://b.example:8080", "requests": 2, "blocked": 2, "more": 0,
            "versions": [
                {"sha256": SHA_A, "requests": 1, "blocked": 1,
                 "first": "2026-03-02T08:00:00.000Z", "last": "2026-03-02T08:00:00.000Z"},
                {"sha256": SHA_B, "requests": 1, "blocked": 1,
                 "first": "2026-03-02T09:00:00.000Z", "last": "2026-03-02T09:00:00.000Z"},
            ],
        }],
        "admin_actions": {"total": 0, "latest": []},
        "evidence_removed": {"total": 0, "latest": []},
    });
    assert_eq!(got, expected, "{text}");
}

#[test]
fn the_csv_report_has_a_header_and_a_row_per_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = log(dir.path());
    let text = stdout(&report(&["--format", "csv"], &files));
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("section,key,detail,requests,blocked,first,last,origin,line,rule")
    );
    for row in [
        "origins,http://b.example:8080,,2,2,,,,,",
        "rules,http://a.example line 2: Disallow: /private,,3,3,,,http://a.example,2,Disallow: /private",
        "users,-,,5,2,,,,,",
        &format!(
            "robots_sha256,http://b.example:8080,{SHA_A},1,1,2026-03-02T08:00:00.000Z,2026-03-02T08:00:00.000Z,,,"
        ),
    ] {
        assert!(text.lines().any(|l| l == row), "{row}: {text}");
    }
}

#[test]
fn the_html_report_is_one_self_contained_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = log(dir.path());
    let html = stdout(&report(&["--format", "html"], &files));
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    assert!(html.contains("<svg"), "{html}");
    assert!(html.contains("<style>"), "{html}");
    assert!(!html.to_lowercase().contains("<script"), "{html}");
    assert!(html.contains("http://a.example/private/2?&lt;script&gt;"));
    // No reference out of the file: no tag, attribute or style names
    // one; the log's own URLs are text between tags.
    for piece in html.split('<').skip(1) {
        let (tag, _text) = piece.split_once('>').expect("a closed tag");
        for needle in [
            "http:", "https:", "src=", "href=", "url(", "@import", "xmlns",
        ] {
            assert!(!tag.contains(needle), "{needle} in <{tag}>");
        }
    }
    let style = html
        .split_once("<style>")
        .and_then(|(_, rest)| rest.split_once("</style>"))
        .expect("style")
        .0;
    assert!(
        !style.contains("url(") && !style.contains("@import"),
        "{style}"
    );
    assert_eq!(
        html.matches("http://").count(),
        10,
        "the log's URLs only: {html}"
    );
}

#[test]
fn hostile_text_in_the_log_is_only_text_in_the_html_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = "<script>alert(1)</script>";
    let img = "\"><img src=x onerror=alert(1)>";
    let lines = [
        line(&format!(
            "2026-03-01T08:00:00.000Z|{script}:1|{img}|http://a.example/{script}{img}|{img}|disallowed|2 Disallow: /{script}|{img}"
        )),
        line(&format!(
            "2026-03-01T09:00:00.000Z|10.0.0.1:1|{script}|http://a.example/p|{script}|{img}|3 Disallow: /{img}|{script}"
        )),
    ];
    let file = dir.path().join("audit.jsonl");
    std::fs::write(&file, format!("{}\n", lines.join("\n"))).expect("write");
    let html = stdout(&report(&["--format", "html"], &[file]));
    assert!(!html.to_lowercase().contains("<script"), "{html}");
    assert!(!html.contains("<img"), "{html}");
    assert!(!html.contains("onerror=alert(1)\""), "{html}");
    for shown in [
        "&lt;script&gt;alert(1)&lt;/script&gt;",
        "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;",
    ] {
        // In the tables of URLs, agents, users, rules, decisions, clients
        // and robots.txt versions.
        assert!(html.matches(shown).count() >= 6, "{shown}: {html}");
    }
    for piece in html.split('<').skip(1) {
        let (tag, _text) = piece.split_once('>').expect("a closed tag");
        assert!(!tag.contains("onerror"), "<{tag}>");
    }
}

/// Client-chosen text (user names, URLs, agents) and robots.txt lines
/// that a spreadsheet would run or a terminal would act on.
#[test]
fn hostile_user_names_and_robots_lines_are_inert_in_csv_text_and_html() {
    let dir = tempfile::tempdir().expect("tempdir");
    let users = [
        "\t=HYPERLINK(\"http://evil/\")",
        "\r+cmd",
        " -1+1",
        "\u{a0}@SUM(A1)",
        "ann\u{202e}gpj.exe",
    ];
    let osc = "\u{1b}]8;;http://evil/\u{7}click\u{1b}]8;;\u{7}";
    let mut lines: Vec<String> = users
        .iter()
        .enumerate()
        .map(|(i, user)| {
            let mut v: serde_json::Value = serde_json::from_str(&line(&format!(
                "2026-03-01T08:00:0{i}.000Z|10.0.0.1:1|x|http://a.example/p/{i}|alphabot|disallowed|2 Disallow: /p|"
            )))
            .expect("json");
            v["user"] = json!(user);
            v.to_string()
        })
        .collect();
    let mut v: serde_json::Value = serde_json::from_str(&line(
        "2026-03-01T09:00:00.000Z|10.0.0.1:1|bob|http://b.example/q|alphabot|disallowed|3 Disallow: /q|",
    ))
    .expect("json");
    v["rule"] = json!(format!("Disallow: /q{osc}\u{1b}[2J\u{2066}"));
    v["agent"] = json!("=1+2");
    lines.push(v.to_string());
    let file = dir.path().join("audit.jsonl");
    std::fs::write(&file, format!("{}\n", lines.join("\n"))).expect("write");
    let hidden = |c: char| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };

    let csv = stdout(&report(&["--format", "csv"], std::slice::from_ref(&file)));
    assert!(!csv.chars().any(hidden), "{csv:?}");
    for row in [
        "users,\"'\\u{9}=HYPERLINK(\"\"http://evil/\"\")\",,1,1,,,,,",
        "users,'\\u{d}+cmd,,1,1,,,,,",
        "users,' -1+1,,1,1,,,,,",
        "users,'\u{a0}@SUM(A1),,1,1,,,,,",
        "users,ann\\u{202e}gpj.exe,,1,1,,,,,",
        "agents,'=1+2,,1,1,,,,,",
    ] {
        assert!(csv.lines().any(|l| l == row), "{row:?}: {csv}");
    }
    // A rule in columns, its control characters escaped.
    let rule = csv
        .lines()
        .find(|l| l.starts_with("rules,http://b.example"))
        .expect("the rule's row");
    assert!(
        rule.ends_with(",http://b.example,3,Disallow: /q\\u{1b}]8;;http://evil/\\u{7}click\\u{1b}]8;;\\u{7}\\u{1b}[2J\\u{2066}"),
        "{rule}"
    );
    // No field begins a formula, whatever whitespace comes first.
    for l in csv.lines().skip(1) {
        for f in l.split(',') {
            let f = f.trim_start_matches('"');
            assert!(
                f == "-" || !f.trim_start().starts_with(['=', '+', '-', '@']),
                "{f:?} in {l}"
            );
        }
    }

    let text = stdout(&report(&[], std::slice::from_ref(&file)));
    assert!(!text.chars().any(hidden), "{text:?}");
    assert!(text.contains("ann\\u{202e}gpj.exe"), "{text}");
    assert!(
        text.contains("Disallow: /q\\u{1b}]8;;http://evil/\\u{7}click"),
        "{text}"
    );
    let html = stdout(&report(&["--format", "html"], &[file]));
    assert!(!html.chars().any(hidden), "{html:?}");
    assert!(html.contains("ann\\u{202e}gpj.exe"), "{html}");
}

/// Lines of several fleet nodes: a table per node.
#[test]
fn a_report_over_several_nodes_has_a_table_per_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut lines = Vec::new();
    for (i, node) in ["node-a", "node-a", "node-b"].iter().enumerate() {
        let mut v: serde_json::Value = serde_json::from_str(&line(&format!(
            "2026-03-01T08:00:0{i}.000Z|10.0.0.1:1||http://a.example/p/{i}|alphabot|disallowed||"
        )))
        .expect("json");
        v["node"] = json!(node);
        lines.push(v.to_string());
    }
    let file = dir.path().join("audit.jsonl");
    std::fs::write(&file, format!("{}\n", lines.join("\n"))).expect("write");
    let text = stdout(&report(&[], std::slice::from_ref(&file)));
    assert!(
        text.contains("\nNodes (top 20)\n  node       requests    blocked\n  node-a            2          2\n  node-b            1          1\n"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&stdout(&report(
        &["--format", "json"],
        std::slice::from_ref(&file),
    )))
    .expect("json");
    assert_eq!(
        json["nodes"]["rows"][1],
        json!({"key": "node-b", "requests": 1, "blocked": 1})
    );
    let csv = stdout(&report(&["--format", "csv"], std::slice::from_ref(&file)));
    assert!(csv.lines().any(|l| l == "nodes,node-a,,2,2,,,,,"), "{csv}");
    // One node only: no such table.
    std::fs::write(&file, format!("{}\n", lines[..2].join("\n"))).expect("write");
    assert!(!stdout(&report(&[], &[file])).contains("Nodes"));
}

#[test]
fn since_and_until_keep_the_lines_of_the_period() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = log(dir.path());
    let text = stdout(&report(
        &[
            "--format",
            "json",
            "--since",
            "2026-03-02",
            "--until",
            "2026-03-02",
        ],
        &files,
    ));
    let got: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(got["requests"], 2);
    assert_eq!(got["blocked"], 2);
    assert_eq!(got["outside"], 6);
    assert_eq!(got["since"], "2026-03-02T00:00:00Z");
    assert_eq!(got["until"], "2026-03-03T00:00:00Z");
    let text = stdout(&report(
        &["--format", "json", "--since", "2026-03-01T10:00:00Z"],
        &files,
    ));
    let got: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(got["requests"], 6);
    let bad = report(&["--since", "last week"], &files);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--since: \"last week\" is neither"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}
