//! Opt-out signals beyond robots.txt over real sockets, one origin serving
//! every document: `/.well-known/tdmrep.json` (W3C TDMRep) refuses the AI
//! purposes before the fetch, the `tdm-reservation` header and HTML meta
//! withhold a response (meta over header over file), `X-Robots-Tag` and
//! `<meta name="robots">` withhold for the purposes their directives
//! cover; `annotate` forwards with every signal named; the audit line
//! names each signal and the digest of the document it rests on.

use robots_proxy::config::UsageMode;

use crate::support::{Origin, Proxy, Reply, get_with};

const TDMREP: &str = r#"[
  { "location": "/books/free/", "tdm-reservation": 0 },
  { "location": "/books/", "tdm-reservation": 1,
    "tdm-policy": "https://provider.example/policies/policy.json" }
]"#;

const WELL_KNOWN: &str = "/.well-known/tdmrep.json";

async fn origin() -> Origin {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    origin.route(
        WELL_KNOWN,
        Reply::ok(TDMREP).header("Content-Type", "application/json"),
    );
    origin
}

fn html(head: &str, body: &str) -> Reply {
    Reply::ok(format!(
        "<!DOCTYPE html><html><head><title>t</title>{head}</head><body>{body}</body></html>"
    ))
    .header("Content-Type", "text/html; charset=utf-8")
}

fn sha256(text: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, text)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn trainer(mode: UsageMode) -> Proxy {
    Proxy::start_with(|c| {
        c.usage.purposes = vec!["train-ai".into()];
        c.usage.mode = mode;
    })
    .await
}

#[tokio::test]
async fn tdmrep_json_refuses_ai_purposes_before_the_fetch_and_not_search() {
    let origin = origin().await;
    let proxy = trainer(UsageMode::Enforce).await;
    let resp = proxy.get(&origin.url("/books/novel")).await;
    resp.assert_says(
        "a reserved path",
        403,
        &[
            "Purpose:    train-ai",
            "tdmrep.json",
            "rule 2 (location \"/books/\", tdm-reservation 1",
        ],
    );
    assert_eq!(origin.hits("/books/novel"), 0, "refused before the fetch");
    let line = proxy.only_audit_line();
    assert_eq!(line["decision"], "usage_disallowed");
    assert_eq!(line["usage"], "train-ai=n");
    let evidence = line["usage_evidence"][0].as_str().expect("evidence");
    let digest = sha256(TDMREP.as_bytes());
    assert!(
        evidence.starts_with("train-ai=tdmrep.json: ")
            && evidence.contains(&format!("sha256={digest}")),
        "{evidence}"
    );

    // The file is archived by that digest, with where it came from.
    let config = crate::support::binary::TextFile::new(
        "robots-proxy.toml",
        &format!("state_dir = {:?}\n", proxy.state_dir.display().to_string()),
    );
    let config = config.path.to_str().expect("utf-8 path");
    let out = crate::support::binary::run(&["audit", "robots", &digest, "--config", config]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), TDMREP, "{out:?}");
    let out =
        crate::support::binary::run(&["audit", "robots", &digest, "--meta", "--config", config]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&origin.url(WELL_KNOWN)),
        "{out:?}"
    );

    // The first matching rule decides: `/books/free/` is not reserved.
    assert_eq!(proxy.get(&origin.url("/books/free/x")).await.status, 200);
    assert_eq!(proxy.get(&origin.url("/news")).await.status, 200);
    // Not `search`: a reservation is of text and data mining.
    let search = proxy
        .request(get_with(
            &origin.url("/books/other"),
            &[("Robots-Proxy-Purpose", "search")],
        ))
        .await;
    assert_eq!(search.status, 403, "train-ai is still configured");
    let searcher = Proxy::start_with(|c| c.usage.purposes = vec!["search".into()]).await;
    assert_eq!(searcher.get(&origin.url("/books/novel")).await.status, 200);
    assert_eq!(
        origin.hits(WELL_KNOWN),
        1,
        "fetched once, and not for a search-only proxy"
    );
}

#[tokio::test]
async fn an_origin_without_any_signal_costs_one_lookup() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    origin.route(WELL_KNOWN, Reply::status(404));
    let proxy = trainer(UsageMode::Enforce).await;
    // Ten at once: one fetch, the others wait for it (single flight).
    let urls: Vec<String> = (0..10).map(|i| origin.url(&format!("/q{i}"))).collect();
    let all = futures_util::future::join_all(urls.iter().map(|u| proxy.get(u))).await;
    assert!(all.iter().all(|r| r.status == 200));
    assert_eq!(origin.hits(WELL_KNOWN), 1);
    for i in 0..5 {
        let resp = proxy.get(&origin.url(&format!("/p{i}"))).await;
        assert_eq!(resp.status, 200);
        assert!(resp.header("x-robots-proxy-usage").is_none());
    }
    assert_eq!(origin.hits(WELL_KNOWN), 1);
    // A proxy that declares no purpose never asks.
    let plain = Proxy::start().await;
    let other = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    assert_eq!(plain.get(&other.url("/x")).await.status, 200);
    assert_eq!(other.hits(WELL_KNOWN), 0);
}

#[tokio::test]
async fn tdm_header_and_meta_withhold_with_meta_over_header_over_file() {
    let origin = origin().await;
    origin.route(
        "/hdr",
        Reply::ok("SECRET").header("tdm-reservation", "1").header(
            "tdm-policy",
            "https://provider.example/policies/policy.json",
        ),
    );
    // The meta's 0 supersedes the header's 1.
    origin.route(
        "/meta-zero",
        html(r#"<meta name="tdm-reservation" content="0">"#, "fine").header("tdm-reservation", "1"),
    );
    // The meta's 1 with no header.
    origin.route(
        "/meta-one",
        html(
            r#"<meta name="tdm-reservation" content="1"><meta name="tdm-policy" content="https://provider.example/p.json">"#,
            "SECRET",
        ),
    );
    // The header's 0 supersedes the file's reservation (annotate sees it).
    origin.route(
        "/books/zero",
        Reply::ok("fine").header("tdm-reservation", "0"),
    );
    let proxy = trainer(UsageMode::Enforce).await;
    let resp = proxy.get(&origin.url("/hdr")).await;
    resp.assert_says(
        "header",
        403,
        &["tdm-header: header tdm-reservation: 1, tdm-policy: https://provider.example/policies/policy.json"],
    );
    assert!(!resp.body.contains("SECRET"));
    assert_eq!(origin.hits("/hdr"), 1, "known only from the response");
    let resp = proxy.get(&origin.url("/meta-zero")).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert!(resp.body.contains("fine"));
    let resp = proxy.get(&origin.url("/meta-one")).await;
    resp.assert_says(
        "meta",
        403,
        &["tdm-meta: <meta name=\"tdm-reservation\" content=\"1\"> <meta name=\"tdm-policy\" content=\"https://provider.example/p.json\">"],
    );
    assert!(!resp.body.contains("SECRET"));

    let annotating = trainer(UsageMode::Annotate).await;
    let resp = annotating.get(&origin.url("/books/zero")).await;
    assert_eq!(resp.body, "fine");
    assert!(
        resp.header("x-robots-proxy-usage").is_none(),
        "the header's 0 supersedes the file: {:?}",
        resp.headers
    );
    let resp = annotating.get(&origin.url("/books/novel")).await;
    assert_eq!(resp.status, 200);
    let usage = resp.header("x-robots-proxy-usage").expect("annotated");
    assert!(
        usage.starts_with("train-ai=n; signal=\"tdmrep.json\""),
        "{usage}"
    );
}

#[tokio::test]
async fn x_robots_tag_and_meta_robots_withhold_the_purposes_they_cover() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    origin.route(WELL_KNOWN, Reply::status(404));
    origin.route("/noai", Reply::ok("SECRET").header("X-Robots-Tag", "noai"));
    origin.route(
        "/other-agent",
        Reply::ok("fine").header("X-Robots-Tag", "otherbot: noai, noindex"),
    );
    origin.route(
        "/noimageai-page",
        html("", "fine").header("X-Robots-Tag", "noimageai"),
    );
    origin.route(
        "/noimageai-image",
        Reply::ok("PNG")
            .header("Content-Type", "image/png")
            .header("X-Robots-Tag", "noimageai"),
    );
    origin.route(
        "/meta-noai",
        html(
            r#"<meta name="robots" content="noai, noimageai">"#,
            "SECRET",
        ),
    );
    origin.route(
        "/noindex",
        Reply::ok("indexed?").header("X-Robots-Tag", "noindex"),
    );
    let proxy = trainer(UsageMode::Enforce).await;
    let resp = proxy.get(&origin.url("/noai")).await;
    resp.assert_says("noai", 403, &["x-robots-tag: header X-Robots-Tag: noai"]);
    assert!(!resp.body.contains("SECRET"));
    let line = proxy.audit().last().cloned().expect("a line");
    assert_eq!(line["decision"], "usage_disallowed");
    assert!(
        line["usage_evidence"][0]
            .as_str()
            .is_some_and(|e| e.starts_with("train-ai=x-robots-tag: ") && e.contains("/noai")),
        "{line}"
    );
    assert_eq!(
        proxy.get(&origin.url("/other-agent")).await.status,
        200,
        "another agent's"
    );
    assert_eq!(
        proxy.get(&origin.url("/noimageai-page")).await.status,
        200,
        "not an image"
    );
    assert_eq!(proxy.get(&origin.url("/noimageai-image")).await.status, 403);
    let resp = proxy.get(&origin.url("/meta-noai")).await;
    resp.assert_says("meta", 403, &["meta-robots: <meta content=\"noai\">"]);
    // noindex is not about training, but withholds for `search`.
    assert_eq!(proxy.get(&origin.url("/noindex")).await.status, 200);
    let search = proxy
        .request(get_with(
            &origin.url("/noindex"),
            &[("Robots-Proxy-Purpose", "search")],
        ))
        .await;
    search.assert_says(
        "noindex",
        403,
        &["Purpose:    search", "X-Robots-Tag: noindex"],
    );

    // The proxy's own agent token scopes a directive to it.
    let agent = proxy.audit()[0]["agent"]
        .as_str()
        .expect("agent")
        .to_string();
    origin.route(
        "/mine",
        Reply::ok("SECRET").header("X-Robots-Tag", &format!("{agent}: noai")),
    );
    assert_eq!(proxy.get(&origin.url("/mine")).await.status, 403);
    origin.route(
        "/mine-meta",
        html(
            &format!(r#"<meta name="{agent}" content="noai">"#),
            "SECRET",
        ),
    );
    assert_eq!(proxy.get(&origin.url("/mine-meta")).await.status, 403);
}

#[tokio::test]
async fn annotate_names_every_signal_and_streams_the_whole_body() {
    let origin = Origin::with_robots("User-agent: *\nContent-Usage: train-ai=n\n").await;
    origin.route(WELL_KNOWN, Reply::status(404));
    let big = "x".repeat(300 * 1024);
    origin.route(
        "/page",
        html(r#"<meta name="robots" content="noai">"#, &big)
            .header("X-Robots-Tag", "noai")
            .header("tdm-reservation", "1"),
    );
    let proxy = trainer(UsageMode::Annotate).await;
    let resp = proxy.get(&origin.url("/page")).await;
    assert_eq!(resp.status, 200);
    assert!(
        resp.body.ends_with(&format!("{big}</body></html>")),
        "the whole body"
    );
    let usage: Vec<&str> = resp
        .headers
        .get_all("x-robots-proxy-usage")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    assert_eq!(usage.len(), 4, "{usage:?}");
    assert!(usage[0].contains("line=2"), "robots.txt first: {usage:?}");
    for signal in ["tdm-header", "x-robots-tag", "meta-robots"] {
        assert!(
            usage.iter().any(|u| u.contains(signal)),
            "{signal}: {usage:?}"
        );
    }
    let line = proxy.audit().last().cloned().expect("a line");
    assert_eq!(line["decision"], "allowed");
    assert_eq!(
        line["usage_evidence"].as_array().map(Vec::len),
        Some(4),
        "{line}"
    );
}

#[tokio::test]
async fn explain_names_each_signal_known_before_the_fetch() {
    let origin = Origin::with_robots("User-agent: *\nContent-Usage: /books/ train-ai=n\n").await;
    origin.route(
        WELL_KNOWN,
        Reply::ok(TDMREP).header("Content-Type", "application/json"),
    );
    let proxy = Proxy::with_admin().await;
    let url = crate::support::percent(&origin.url("/books/novel"));
    let v: serde_json::Value = proxy
        .admin_get(&format!("/explain?url={url}&purpose=train-ai,search"))
        .await
        .json();
    let signals = v["signals"].as_array().expect("signals");
    assert_eq!(signals.len(), 2, "{v:#}");
    assert_eq!(signals[0]["protocol"], "robots.txt");
    assert_eq!(signals[0]["rule_line"], 2);
    assert_eq!(signals[1]["protocol"], "tdmrep.json");
    assert_eq!(signals[1]["purpose"], "train-ai");
    assert!(
        signals[1]["evidence"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("sha256={}", sha256(TDMREP.as_bytes())))),
        "{v:#}"
    );
    assert_eq!(v["tdmrep"]["outcome"], "file");
    assert_eq!(v["tdmrep"]["reservation"], "1");
    // `search` only: the file is not consulted.
    let v: serde_json::Value = proxy
        .admin_get(&format!("/explain?url={url}&purpose=search"))
        .await
        .json();
    assert_eq!(v["signals"].as_array().map(Vec::len), Some(0), "{v:#}");
    assert!(v["tdmrep"].is_null());
}

#[test]
fn check_with_a_tdmrep_file_names_the_rule() {
    use crate::support::binary::{TextFile, run};
    let robots = TextFile::new("robots.txt", "User-agent: *\nAllow: /\n");
    let tdmrep = TextFile::new("tdmrep.json", TDMREP);
    let (robots, tdmrep) = (
        robots.path.to_str().expect("utf-8"),
        tdmrep.path.to_str().expect("utf-8"),
    );
    let args = [
        "check", "--robots", robots, "--tdmrep", tdmrep, "--agent", "x",
    ];
    let urls = ["/books/novel", "/books/free/a", "/news"];
    let out = run(&[&args[..], &["--purpose", "train-ai"], &urls[..]].concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "DISALLOWED /books/novel\ttdmrep.json rule 2 (location \"/books/\", tdm-reservation 1, \
             tdm-policy \"https://provider.example/policies/policy.json\")\tusage train-ai=n"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("ALLOWED /books/free/a"), "{stdout}");
    assert!(stdout.contains("ALLOWED /news"), "{stdout}");
    // Not for `search`.
    let out = run(&[&args[..], &["--purpose", "search"], &urls[..]].concat());
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // A file that is not tdmrep.json is an error, not a silent pass.
    let bad = TextFile::new("bad.json", "{}");
    let bad_path = bad.path.to_str().expect("utf-8");
    let out = run(&["check", "--robots", robots, "--tdmrep", bad_path, "/x"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a JSON array"));
}

#[tokio::test]
async fn the_usage_report_counts_refusals_and_annotations_per_origin_and_protocol() {
    let origin = origin().await;
    origin.route("/tagged", Reply::ok("x").header("X-Robots-Tag", "noai"));
    let enforcing = trainer(UsageMode::Enforce).await;
    assert_eq!(enforcing.get(&origin.url("/books/a")).await.status, 403);
    assert_eq!(enforcing.get(&origin.url("/books/b")).await.status, 403);
    assert_eq!(enforcing.get(&origin.url("/tagged")).await.status, 403);
    let annotating = trainer(UsageMode::Annotate).await;
    assert_eq!(annotating.get(&origin.url("/books/c")).await.status, 200);
    let logs: Vec<String> = [&enforcing, &annotating]
        .iter()
        .map(|p| p.state_dir.join("audit.jsonl").display().to_string())
        .collect();
    let mut args = vec!["audit", "report", "--usage", "--format", "csv"];
    args.extend(logs.iter().map(String::as_str));
    let out = crate::support::binary::run(&args);
    let csv = String::from_utf8_lossy(&out.stdout);
    let host = origin.url("/");
    let host = host.trim_end_matches('/');
    assert!(
        csv.contains(&format!("usage,{host} tdmrep.json train-ai,,3,2,")),
        "two refused, one annotated: {csv}"
    );
    assert!(
        csv.contains(&format!("usage,{host} x-robots-tag train-ai,,1,1,")),
        "{csv}"
    );
    let without = crate::support::binary::run(&["audit", "report", "--format", "csv", &logs[0]]);
    assert!(!String::from_utf8_lossy(&without.stdout).contains("usage,"));
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("gzip");
    e.finish().expect("gzip")
}

#[tokio::test]
async fn a_compressed_html_head_is_read_and_the_body_sent_as_it_came() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    origin.route(WELL_KNOWN, Reply::status(404));
    // A head past the first frames: the meta comes after 20 KiB of
    // incompressible-enough text.
    let filler: String = (0..4000).map(|i| format!("{i:x}")).collect();
    let page = format!(
        "<!DOCTYPE html><html><head><title>{filler}</title>\
         <meta name=\"robots\" content=\"noai\"></head><body>{}</body></html>",
        "y".repeat(200 * 1024)
    );
    let gz = gzip(page.as_bytes());
    let reply = || {
        Reply::ok(gz.clone())
            .header("Content-Type", "text/html")
            .header("Content-Encoding", "gzip")
    };
    origin.route("/gz", reply());
    let proxy = trainer(UsageMode::Enforce).await;
    let resp = proxy.get(&origin.url("/gz")).await;
    resp.assert_says("gzip", 403, &["meta-robots: <meta content=\"noai\">"]);
    let annotating = trainer(UsageMode::Annotate).await;
    let resp = annotating.get(&origin.url("/gz")).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, String::from_utf8_lossy(&gz), "sent as it came");
    assert!(resp.header("x-robots-proxy-usage").is_some());
}
