//! Usage preferences over real sockets: a declared purpose (config, user,
//! or the request's `Robots-Proxy-Purpose` header) whose preference in
//! robots.txt (`Content-Usage`, `Content-Signal`) or in the origin's
//! `Content-Usage` response header is `n` is refused with a 403 naming the
//! line (`enforce`) or forwarded with `X-Robots-Proxy-Usage` (`annotate`),
//! and audited either way.

use robots_proxy::config::{UsageMode, UserConfig};

use crate::support::{Origin, Proxy, Reply, basic, get_with, user};

const ROBOTS: &str = "User-Agent: *\nAllow: /\nDisallow: /never/\nContent-Usage: train-ai=n\nContent-Usage: /ai-ok/ train-ai=y\n";

/// The request header that declares purposes.
const PURPOSE: &str = "Robots-Proxy-Purpose";

#[tokio::test]
async fn enforce_refuses_before_fetching_and_names_the_line() {
    let origin = Origin::with_robots(ROBOTS).await;
    let proxy = Proxy::start_with(|c| c.usage.purposes = vec!["train-ai".into()]).await;

    let resp = proxy.get(&origin.url("/test")).await;
    let rule = "Rule:       line 4: Content-Usage: train-ai=n";
    resp.assert_says("train-ai", 403, &[rule]);
    assert!(
        resp.body.contains("Usage:      train-ai=n"),
        "{}",
        resp.body
    );
    let header = resp
        .header("x-robots-proxy-decision")
        .expect("decision header");
    assert!(header.starts_with("usage_disallowed;"), "{header}");
    assert!(
        header.contains("line 4: Content-Usage: train-ai=n"),
        "{header}"
    );
    assert_eq!(origin.hits("/test"), 0, "nothing fetched");
    let line = proxy.only_audit_line();
    assert_eq!(line["decision"], "usage_disallowed");
    assert_eq!(line["usage"], "train-ai=n");
    assert_eq!(line["rule_line"], 4);
    assert_eq!(line["rule"], "Content-Usage: train-ai=n");

    // A path-scoped `y` and a disallowed path decide as the draft's table.
    assert_eq!(proxy.get(&origin.url("/ai-ok/test")).await.status, 200);
    let never = proxy.get(&origin.url("/never/test")).await;
    assert_eq!(never.status, 403);
    assert!(never.body.contains("Disallow: /never/"), "{}", never.body);
}

#[tokio::test]
async fn annotate_forwards_with_the_preference_in_a_header_and_the_audit_line() {
    let origin = Origin::with_robots(ROBOTS).await;
    let proxy = Proxy::start_with(|c| {
        c.usage.purposes = vec!["train-ai".into()];
        c.usage.mode = UsageMode::Annotate;
    })
    .await;
    let resp = proxy.get(&origin.url("/test")).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    let robots = origin.url("/robots.txt");
    assert_eq!(
        resp.header("x-robots-proxy-usage"),
        Some(format!("train-ai=n; robots=\"{robots}\"; line=4").as_str())
    );
    let audit = proxy.audit();
    assert_eq!(audit.len(), 1, "recorded without log_all: {audit:?}");
    assert_eq!(audit[0]["decision"], "allowed");
    assert_eq!(audit[0]["usage"], "train-ai=n");
    assert!(
        proxy
            .get(&origin.url("/ai-ok/x"))
            .await
            .header("x-robots-proxy-usage")
            .is_none()
    );
}

#[tokio::test]
async fn the_purpose_header_adds_a_purpose_and_never_reaches_the_origin() {
    let origin = Origin::with_robots(
        "User-agent: *\nContent-Signal: search=yes, ai-train=no, ai-input=no\n",
    )
    .await;
    let proxy = Proxy::start().await;
    // No purpose declared: the preferences do not apply.
    assert_eq!(proxy.get(&origin.url("/a")).await.status, 200);
    let resp = proxy
        .request(get_with(
            &origin.url("/b"),
            &[(PURPOSE, "search, ai-input")],
        ))
        .await;
    assert_eq!(resp.status, 403, "{}", resp.body);
    assert!(
        resp.body
            .contains("Content-Signal: search=yes, ai-train=no, ai-input=no")
    );
    assert_eq!(origin.hits("/b"), 0);
    let resp = proxy
        .request(get_with(&origin.url("/c"), &[(PURPOSE, "search")]))
        .await;
    assert_eq!(resp.status, 200);
    let seen = origin.seen_headers.lock().expect("seen").clone();
    assert!(
        seen.iter().all(|h| !h.contains_key("robots-proxy-purpose")),
        "{seen:?}"
    );
}

#[tokio::test]
async fn the_origins_content_usage_header_withholds_the_response_in_enforce() {
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    origin.route(
        "/doc",
        Reply::ok("SECRET body").header("Content-Usage", "train-ai=n"),
    );
    origin.route(
        "/ok",
        Reply::ok("fine").header("Content-Usage", "train-ai=y, search=n"),
    );
    let proxy = Proxy::start_with(|c| c.usage.purposes = vec!["train-ai".into()]).await;
    let resp = proxy.get(&origin.url("/doc")).await;
    assert_eq!(resp.status, 403);
    assert!(!resp.body.contains("SECRET"));
    assert!(resp.body.contains("fetched and withheld"), "{}", resp.body);
    assert_eq!(origin.hits("/doc"), 1);
    let audit = proxy.audit();
    assert_eq!(
        audit.last().expect("a line")["decision"],
        "usage_disallowed"
    );
    assert_eq!(proxy.get(&origin.url("/ok")).await.body, "fine");

    let annotating = Proxy::start_with(|c| {
        c.usage.purposes = vec!["train-ai".into()];
        c.usage.mode = UsageMode::Annotate;
    })
    .await;
    let resp = annotating.get(&origin.url("/doc")).await;
    assert_eq!(resp.body, "SECRET body");
    assert!(
        resp.header("x-robots-proxy-usage")
            .is_some_and(|h| h.starts_with("train-ai=n;") && h.ends_with("line=0")),
        "{:?}",
        resp.header("x-robots-proxy-usage")
    );
}

#[tokio::test]
async fn a_request_cannot_drop_its_users_purpose() {
    let origin = Origin::with_robots(ROBOTS).await;
    let proxy = Proxy::start_with(|c| {
        c.access.users = vec![UserConfig {
            purposes: vec!["train-ai".into()],
            ..user("trainer", "pw")
        }];
    })
    .await;
    let req = get_with(
        &origin.url("/test"),
        &[
            (PURPOSE, "search"),
            ("proxy-authorization", &basic("trainer:pw")),
        ],
    );
    let resp = proxy.request(req).await;
    assert_eq!(resp.status, 403, "{}", resp.body);
    assert!(resp.body.contains("Purpose:    train-ai"), "{}", resp.body);
    assert_eq!(proxy.audit()[0]["user"], "trainer");
}
