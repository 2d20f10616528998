//! The admin listener's web view in a real headless Chromium (through
//! chromedriver): the page loads with nothing in the console and no
//! request beyond itself, its charts and tables show the decisions this
//! test made, the archived robots.txt opens with the deciding line marked,
//! the `/explain` form answers, and the CA page names the certificate
//! served at `/ca.pem`. Without credentials every page but the probes is a
//! 401. Markup in a robots.txt, an origin's headers, a request or the audit
//! log shows on the pages as text. Screenshots:
//! `target/test-output/web-view*.png`. Skips when Chromium or chromedriver
//! is missing (`.ci/run` installs both).

use bytes::Bytes;
use http::Request;
use robots_proxy::config::AdminUser;
use serde_json::Value;

use crate::support::webdriver::{Browser, output_dir, tools};
use crate::support::{Conn, Origin, Proxy, Reply, Resp, admin, basic, cheap_hash, percent, until};

const ALLOWED: usize = 5;
const BLOCKED: usize = 3;
const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";
const USER: &str = "ops";
const PASSWORD: &str = "correct horse";

/// `GET path` on the admin listener with `authorization`, if any.
async fn admin_get(proxy: &Proxy, path: &str, authorization: Option<&str>) -> Resp {
    let addr = proxy.admin_addr.expect("admin listener");
    let mut req = Request::get(path).header(http::header::HOST, addr.to_string());
    if let Some(a) = authorization {
        req = req.header(http::header::AUTHORIZATION, a);
    }
    Conn::open(addr)
        .await
        .send(req.body(Bytes::new()).expect("request"))
        .await
}

/// The text of the element with `id`.
async fn text(browser: &Browser, id: &str) -> String {
    let v = browser
        .script(&format!(
            "const e = document.getElementById('{id}'); return e ? e.textContent : null;"
        ))
        .await;
    v.as_str()
        .unwrap_or_else(|| panic!("no element #{id}"))
        .to_string()
}

/// The rows of a table as their cells' text.
async fn rows(browser: &Browser, id: &str) -> Vec<Vec<String>> {
    let v = browser
        .script(&format!(
            "return Array.from(document.querySelectorAll('#{id} tr')).slice(1)\
             .map(r => Array.from(r.cells).map(c => c.textContent.trim()));"
        ))
        .await;
    serde_json::from_value(v).expect("rows of cells")
}

/// What the page loaded beyond itself (resource timing entries).
async fn resources(browser: &Browser) -> Vec<Value> {
    let v = browser
        .script("return performance.getEntriesByType('resource').map(e => e.name);")
        .await;
    v.as_array().cloned().unwrap_or_default()
}

/// Checks a loaded page: complete, nothing loaded besides it, nothing in
/// the console (a CSP violation, a failed load or a script error would be).
/// Clicks the element `selector` finds, waits until `page` (a script's
/// condition) holds of the page loaded whole, and checks it is clean.
async fn click_to(browser: &Browser, selector: &str, page: &str, what: &str) {
    let element = browser.find(selector).await;
    browser.click(&element).await;
    browser
        .wait_for(&format!(
            "return {page} && document.readyState === 'complete';"
        ))
        .await;
    assert_clean(browser, what).await;
}

async fn assert_clean(browser: &Browser, what: &str) {
    assert_eq!(
        browser.script("return document.readyState;").await,
        "complete",
        "{what}"
    );
    let loaded = resources(browser).await;
    let console = browser.console().await;
    assert!(
        loaded.is_empty() && console.is_empty(),
        "{what}: loaded {loaded:#?}, console messages {console:#?}"
    );
}

#[tokio::test]
async fn the_web_view_in_chromium_shows_the_decisions_loads_nothing_else_and_asks_for_credentials()
{
    let Some(tools) = tools() else {
        crate::support::component::missing(
            "chromium",
            "Chromium or chromedriver is not installed (apt-get install chromium chromium-driver)",
        );
        return;
    };
    crate::support::component::used("chromium");
    let origin = Origin::with_robots(ROBOTS).await;
    let proxy = Proxy::start_with(|c| {
        admin(c);
        c.audit.log_all = true;
        c.admin.users = vec![AdminUser {
            name: USER.into(),
            password_hash: cheap_hash(PASSWORD),
            role: Default::default(),
        }];
    })
    .await;
    for i in 0..ALLOWED {
        let r = proxy.get(&origin.url(&format!("/public/{i}"))).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    for i in 0..BLOCKED {
        let r = proxy.get(&origin.url(&format!("/private/{i}"))).await;
        assert_eq!(r.status, 403, "{r:?}");
    }
    let addr = proxy.admin_addr.expect("admin listener");

    // Without credentials: 401 with the challenge, everywhere but the
    // probes and the CA (which every client of the proxy needs).
    let credentials = basic(&format!("{USER}:{PASSWORD}"));
    for path in ["/", "/metrics", "/explain?url=http://a.test/"] {
        let r = admin_get(&proxy, path, None).await;
        assert_eq!(r.status, 401, "{path}: {r:?}");
        assert_eq!(
            r.header("www-authenticate"),
            Some("Basic realm=\"robots-proxy admin\", charset=\"UTF-8\""),
            "{path}"
        );
    }
    let wrong = basic(&format!("{USER}:wrong"));
    assert_eq!(admin_get(&proxy, "/", Some(&wrong)).await.status, 401);
    for public in ["/healthz", "/readyz", "/ca", "/ca.pem"] {
        assert_eq!(
            admin_get(&proxy, public, None).await.status,
            200,
            "{public}"
        );
    }
    let page = admin_get(&proxy, "/", Some(&credentials)).await;
    assert_eq!(page.status, 200, "{page:?}");
    // With users set, the page does not ask to set them.
    assert!(
        page.body
            .contains("only to the <code>[[admin.users]]</code> configured"),
        "{}",
        page.body
    );
    assert!(
        page.header("content-security-policy")
            .is_some_and(|p| p.starts_with("default-src 'none'")),
        "{page:?}"
    );
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("cache-control"), Some("no-store"));

    // The CA certificate, never its key.
    let pem = admin_get(&proxy, "/ca.pem", None).await;
    assert_eq!(pem.status, 200);
    assert_eq!(pem.header("content-type"), Some("application/x-pem-file"));
    let on_disk = std::fs::read_to_string(proxy.state_dir.join("ca/ca.pem")).expect("ca.pem");
    assert_eq!(pem.body, on_disk);
    assert!(!pem.body.contains("PRIVATE KEY"));
    let der = pem::parse(&pem.body).expect("PEM").into_contents();
    let fingerprint = ring::digest::digest(&ring::digest::SHA256, &der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":");

    // The overview in Chromium, with the credentials in the URL.
    let out = output_dir();
    let browser = Browser::start(&tools).await;
    let base = format!("http://{USER}:{}@{addr}", PASSWORD.replace(' ', "%20"));
    browser.goto(&format!("{base}/")).await;
    assert_clean(&browser, "the overview").await;
    browser.screenshot(&out.join("web-view.png")).await;
    for chart in ["hour", "days"] {
        assert_eq!(
            text(&browser, &format!("{chart}-allowed")).await,
            ALLOWED.to_string()
        );
        assert_eq!(
            text(&browser, &format!("{chart}-disallowed")).await,
            BLOCKED.to_string()
        );
        assert_eq!(text(&browser, &format!("{chart}-other")).await, "0");
    }
    // The current minute's bar: allowed and disallowed stacked.
    let bars = browser
        .script(
            "return ['k0', 'k1', 'k2'].map(k => \
             document.querySelectorAll('#chart-hour rect.' + k).length);",
        )
        .await;
    assert_eq!(
        bars,
        serde_json::json!([1, 1, 0]),
        "one minute holds them all"
    );
    let origin_name = format!("http://{}", origin.addr);
    assert_eq!(
        rows(&browser, "top-origins").await,
        [[origin_name.clone(), BLOCKED.to_string()]]
    );
    assert_eq!(
        rows(&browser, "top-rules").await,
        [[
            "line 2: Disallow: /private".to_string(),
            origin.url("/robots.txt"),
            BLOCKED.to_string()
        ]]
    );
    assert_eq!(
        rows(&browser, "top-clients").await,
        [["127.0.0.1".to_string(), String::new(), BLOCKED.to_string()]]
    );
    let cached = rows(&browser, "origins").await;
    assert_eq!(cached.len(), 1, "{cached:?}");
    assert_eq!(cached[0][0], origin_name);
    assert_eq!(
        (cached[0][1].as_str(), cached[0][2].as_str()),
        ("ok", "200")
    );
    assert_eq!(text(&browser, "origins-total").await, "1");

    // The rule's link: the archived robots.txt with its line marked.
    let robots_page = "location.pathname.startsWith('/robots/')";
    click_to(
        &browser,
        "#top-rules a",
        robots_page,
        "the archived robots.txt",
    )
    .await;
    browser.screenshot(&out.join("web-view-robots.png")).await;
    let marked = browser
        .script(
            "return Array.from(document.querySelectorAll('tr.hit'))\
             .map(r => [r.id, r.cells[1].textContent]);",
        )
        .await;
    assert_eq!(marked, serde_json::json!([["L2", "Disallow: /private"]]));
    let audit = proxy.audit();
    let sha = audit
        .iter()
        .find(|l| l["decision"] == "disallowed")
        .and_then(|l| l["robots_sha256"].as_str())
        .expect("a disallowed line names its robots.txt");
    assert_eq!(text(&browser, "robots-sha").await, sha);
    let shown = browser
        .script("return Array.from(document.querySelectorAll('#robots-text tr')).map(r => r.cells[1].textContent).join('\\n') + '\\n';")
        .await;
    assert_eq!(shown, ROBOTS);

    // The explain form, typed into and sent.
    browser.goto(&format!("{base}/")).await;
    browser.console().await;
    let url_field = browser.find("#explain-url").await;
    browser
        .type_into(&url_field, &origin.url("/private/typed"))
        .await;
    let explain_page = "location.pathname === '/explain'";
    click_to(
        &browser,
        "#explain-submit",
        explain_page,
        "the explain answer",
    )
    .await;
    assert_eq!(text(&browser, "explain-decision").await, "disallowed");
    browser.screenshot(&out.join("web-view-explain.png")).await;

    // The CA page names the certificate /ca.pem serves.
    browser.goto(&format!("{base}/ca")).await;
    assert_clean(&browser, "the CA page").await;
    assert_eq!(text(&browser, "ca-fingerprint").await, fingerprint);
    browser.screenshot(&out.join("web-view-ca.png")).await;
    eprintln!("screenshots: {}", out.join("web-view.png").display());
}

/// The charts after a restart: the audit log's lines of the last 14 days
/// are read back at start (older ones are not), plain HTTP, no browser.
#[tokio::test]
async fn the_charts_are_rebuilt_from_the_audit_log_at_start() {
    let now = std::time::SystemTime::now();
    let line = |ago_secs: u64, decision: &str| {
        let time = humantime::format_rfc3339_millis(now - std::time::Duration::from_secs(ago_secs));
        serde_json::json!({
            "time": time.to_string(), "client": "10.1.2.3:5000", "method": "GET",
            "url": "http://old.example/private/a", "agent": "robots-proxy",
            "decision": decision, "reason": "disallowed by line 4: Disallow: /private",
            "rule_line": 4, "rule": "Disallow: /private",
            "robots_url": "http://old.example/robots.txt",
        })
        .to_string()
    };
    let lines = [
        line(15 * 24 * 3600, "disallowed"),
        line(3 * 24 * 3600, "disallowed"),
        line(2 * 3600, "disallowed"),
        line(3 * 3600, "allowed"),
        line(90, "refused"),
    ];
    let proxy = Proxy::start_with(|c| {
        admin(c);
        let path = c.audit_path();
        std::fs::write(&path, lines.join("\n") + "\n").expect("an audit log from before");
    })
    .await;
    let body = until("the audit log read back", || async {
        let page = proxy.admin_get("/").await;
        assert_eq!(page.status, 200, "{page:?}");
        (!page.body.contains("Reading the audit log")).then_some(page.body)
    })
    .await;
    assert!(
        body.contains("set <code>[[admin.users]]</code> when more than one person can"),
        "{body}"
    );
    for (id, n) in [
        ("days-allowed", 1),
        ("days-disallowed", 2),
        ("days-other", 1),
        ("hour-allowed", 0),
        ("hour-disallowed", 0),
        ("hour-other", 1),
    ] {
        assert!(
            body.contains(&format!("id=\"{id}\">{n}<")),
            "{id} should be {n}"
        );
    }
    assert!(body.contains(">http://old.example</a>"), "top origin");
    assert!(
        body.contains("<td>10.1.2.3</td><td></td><td class=\"n\">3</td>"),
        "top client"
    );
    assert!(
        body.contains("Before the start: 4 lines"),
        "15-day-old line left out"
    );
}

const SCRIPT: &str = "<script>alert(1)</script>";
const IMG: &str = "\"><img src=x onerror=alert(1)>";

/// No markup of `html` comes from [`SCRIPT`] or [`IMG`], and both are
/// there as text.
fn assert_inert(html: &str, what: &str) {
    assert!(!html.contains("<script"), "{what}: {html}");
    assert!(!html.contains("<img"), "{what}: {html}");
    for shown in [
        "&lt;script&gt;alert(1)&lt;/script&gt;",
        "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;",
    ] {
        assert!(html.contains(shown), "{what}: {shown} in {html}");
    }
}

/// Text from a robots.txt, its origin's headers, a request's URL and an
/// audit log from before the start reaches the pages only as text.
#[tokio::test]
async fn hostile_text_reaches_the_pages_only_as_text() {
    let robots = format!("User-agent: *\n# {SCRIPT}\nDisallow: /x/{SCRIPT}\nDisallow: /y/{IMG}\n");
    let origin = Origin::start().await;
    origin.route(
        "/robots.txt",
        Reply::ok(robots).header("content-type", &format!("text/plain; x={IMG}")),
    );
    let time = humantime::format_rfc3339_millis(std::time::SystemTime::now());
    let before = serde_json::json!({
        "time": time.to_string(), "client": format!("{SCRIPT}:5000"), "user": IMG,
        "method": "GET", "url": format!("http://old.example/{SCRIPT}"), "agent": IMG,
        "decision": "disallowed", "reason": SCRIPT, "rule_line": 4,
        "rule": format!("Disallow: /{IMG}"),
        "robots_url": format!("http://old.example/{SCRIPT}/robots.txt"),
        "robots_sha256": IMG,
    });
    let proxy = Proxy::start_with(|c| {
        admin(c);
        std::fs::write(c.audit_path(), format!("{before}\n")).expect("an audit log from before");
    })
    .await;
    let blocked = [
        "/x/%3Cscript%3Ealert(1)%3C/script%3E",
        "/y/%22%3E%3Cimg%20src=x%20onerror=alert(1)%3E",
    ];
    for path in blocked {
        let r = proxy.get(&origin.url(path)).await;
        assert_eq!(r.status, 403, "{path}: {r:?}");
    }

    let overview = async {
        loop {
            let page = proxy.admin_get("/").await;
            assert_eq!(page.status, 200, "{page:?}");
            if !page.body.contains("Reading the audit log") {
                return page.body;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    let overview = tokio::time::timeout(crate::support::NO_HANG, overview)
        .await
        .expect("the audit log read back");
    assert_inert(&overview, "the overview");

    let sha = proxy
        .audit()
        .iter()
        .filter(|l| {
            l["url"]
                .as_str()
                .is_some_and(|u| u.starts_with(&origin.url("/")))
        })
        .find_map(|l| l["robots_sha256"].as_str().map(str::to_string))
        .expect("a blocked line names its robots.txt");
    let archived = proxy.admin_get(&format!("/robots/{sha}?line=4")).await;
    assert_eq!(archived.status, 200, "{archived:?}");
    assert_inert(&archived.body, "the archived robots.txt");
    assert!(
        archived
            .body
            .contains("<td>text/plain; x=&quot;&gt;&lt;img src=x onerror=alert(1)&gt;</td>"),
        "{}",
        archived.body
    );

    // The rule in the answer; the agent, not a product token, in the
    // form filled in again under the error.
    for (path, rule) in blocked.into_iter().zip([
        "Disallow: /x/&lt;script&gt;alert(1)&lt;/script&gt;",
        "Disallow: /y/&quot;&gt;&lt;img src=x onerror=alert(1)&gt;",
    ]) {
        let url = percent(&origin.url(path));
        let answer = proxy
            .admin_get(&format!("/explain?format=html&url={url}"))
            .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(answer.body.contains(rule), "{rule} in {}", answer.body);
        assert!(!answer.body.contains("<script") && !answer.body.contains("<img"));
        let refused = proxy
            .admin_get(&format!(
                "/explain?format=html&url={url}&agent={}",
                percent(&format!("{SCRIPT}{IMG}"))
            ))
            .await;
        assert_eq!(refused.status, 400, "{refused:?}");
        assert_inert(&refused.body, "the explain page");
    }
}
