//! Pay per crawl (402): an origin quoting a price within and above
//! `payments.max_price`, the paid retry signed over its
//! `crawler-exact-price` (verified by Python's `http-message-signatures`),
//! the charge in the audit log, and the day's budget refusing without
//! asking the origin.

use bytes::Bytes;
use http::Request;
use serde_json::json;

use super::identity::{all_ok, directory, headers_json, init_key, signing, verify};
use crate::support::{Origin, Proxy, Reply};

const ROBOTS: &str = "User-agent: *\nAllow: /\n";

/// A page at a price: `402` with `crawler-price: price`, the page (and
/// `crawler-charged`) to a request offering exactly that.
fn priced(price: &str, page: &str) -> Reply {
    priced_with(
        price,
        Reply::ok(page.to_string()).header("crawler-charged", price),
    )
}

/// `402` with `crawler-price: price`, and `paid` to a request offering
/// exactly that.
fn priced_with(price: &str, paid: Reply) -> Reply {
    Reply::status(402)
        .header("crawler-price", price)
        .when_header("crawler-exact-price", price, paid)
}

/// Signing with `key_file`, prices up to USD 0.002, USD 0.003 a day.
fn paying(c: &mut robots_proxy::config::Config, key_file: &std::path::Path) {
    signing(c, key_file);
    c.payments.max_price = "USD 0.002".into();
    c.payments.budget_per_day = "USD 0.003".into();
}

fn get(url: &str, pay: Option<&str>) -> Request<Bytes> {
    let mut r = Request::get(url);
    if let Some(p) = pay {
        r = r.header("robots-proxy-pay", p);
    }
    r.body(Bytes::new()).expect("request")
}

#[tokio::test]
async fn within_the_limit_paid_and_signed_above_it_or_past_the_budget_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key_file, kid) = init_key(dir.path(), "keys.json", &[]);
    let origin = Origin::with_robots(ROBOTS).await;
    origin.route("/paid", priced("USD 0.0015", "paid page"));
    origin.route("/dear", priced("USD 0.01", "dear page"));
    let proxy = Proxy::start_with(|c| {
        paying(c, &key_file);
    })
    .await;

    // Within max_price: paid, the client gets the page.
    let r = proxy.request(get(&origin.url("/paid"), None)).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, "paid page");
    assert_eq!(r.headers["crawler-charged"], "USD 0.0015");
    assert_eq!(origin.hits("/paid"), 2, "the 402, then the paid retry");
    let seen = origin.seen_headers.lock().expect("seen").clone();
    let retry = seen.last().expect("the retry").clone();
    assert_eq!(retry["crawler-exact-price"], "USD 0.0015");
    assert!(retry.get("robots-proxy-pay").is_none());
    let input = retry["signature-input"].to_str().expect("ascii");
    assert!(input.contains("\"crawler-exact-price\""), "{input}");
    let lines = proxy.audit_of_type("payment");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "charged");
    assert_eq!(lines[0]["price"], "USD 0.0015");
    assert_eq!(lines[0]["charged"], "USD 0.0015");
    assert_eq!(lines[0]["url"], origin.url("/paid"));

    // The retry's signature verifies, over its price: a price changed
    // after signing does not.
    let dir_doc = directory(proxy.identity_addr.expect("identity listener")).await;
    let paid =
        json!({"method": "GET", "url": origin.url("/paid"), "headers": headers_json(&retry)});
    let mut changed = paid.clone();
    for h in changed["headers"].as_array_mut().expect("headers") {
        if h[0] == "crawler-exact-price" {
            h[1] = json!("USD 0.0001");
        }
    }
    if let Some(verdicts) = verify(&dir_doc, &[paid], 0) {
        assert_eq!(all_ok(&verdicts, "the paid retry"), [kid]);
        let verdicts = verify(&dir_doc, &[changed], 0).expect("ran before");
        assert_eq!(verdicts["requests"][0]["ok"], false, "{verdicts}");
    }

    // Above max_price: the proxy's own 402, the origin asked once.
    let r = proxy.request(get(&origin.url("/dear"), None)).await;
    assert_eq!(r.status, 402, "{r:?}");
    assert!(
        r.body.contains("USD 0.01") && r.body.contains("max_price USD 0.002"),
        "{}",
        r.body
    );
    assert_eq!(origin.hits("/dear"), 1);
    let lines = proxy.audit_of_type("payment");
    assert_eq!(lines[1]["outcome"], "refused");
    assert_eq!(lines[1]["reason"], "above_max_price");

    // The client says no: the origin's 402 as it came.
    let r = proxy.request(get(&origin.url("/paid"), Some("no"))).await;
    assert_eq!(r.status, 402, "{r:?}");
    assert_eq!(r.headers["crawler-price"], "USD 0.0015");
    assert_eq!(origin.hits("/paid"), 3);

    // USD 0.003 a day: a second payment of 0.0015 fits, a third does not,
    // and the origin (known to charge) is not asked.
    let r = proxy.request(get(&origin.url("/paid"), Some("yes"))).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(origin.hits("/paid"), 5);
    let r = proxy.request(get(&origin.url("/paid"), None)).await;
    let lines = refused_for_the_budget(&proxy, &r);
    assert_eq!(origin.hits("/paid"), 5, "the origin was not asked");
    let charged: Vec<_> = lines.iter().filter(|l| l["outcome"] == "charged").collect();
    assert_eq!(charged.len(), 2);

    // `audit report --payments`: the two charges, summed exactly.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_robots-proxy"))
        .args(["audit", "report", "--payments", "--format", "json"])
        .arg(&proxy.audit_path)
        .output()
        .expect("run audit report");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["total"], json!(["USD 0.003"]), "{report}");
    assert_eq!(report["charges"], 2);
    assert_eq!(report["refused"], 2);
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{report}");
    assert_eq!(rows[0]["origin"], format!("http://{}", origin.addr));
    assert_eq!(rows[0]["user"], "-");
    assert_eq!(rows[0]["amount"], "USD 0.003");
    // The request report counts requests only.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_robots-proxy"))
        .args(["audit", "report", "--format", "json"])
        .arg(&proxy.audit_path)
        .output()
        .expect("run audit report");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_crawler_error_is_forwarded_and_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key_file, _) = init_key(dir.path(), "keys.json", &[]);
    let origin = Origin::with_robots(ROBOTS).await;
    // The paid retry is refused by the origin.
    origin.route(
        "/p",
        priced_with(
            "USD 0.001",
            Reply::status(403).header("crawler-error", "PaymentFailed"),
        ),
    );
    let proxy = Proxy::start_with(|c| {
        paying(c, &key_file);
    })
    .await;
    let r = proxy.request(get(&origin.url("/p"), None)).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(r.headers["crawler-error"], "PaymentFailed");
    let lines = proxy.audit_of_type("payment");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "error");
    assert_eq!(lines[0]["crawler_error"], "PaymentFailed");
    // Nothing charged: the whole budget is left (two payments fit).
    origin.route("/q", priced("USD 0.0015", "q"));
    for _ in 0..2 {
        let r = proxy.request(get(&origin.url("/q"), None)).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
}

#[tokio::test]
async fn two_fleet_nodes_share_one_budget_in_redis() {
    use crate::support::fleet::{named, node, on};
    use crate::support::redis::Redis;
    use robots_proxy::config::FleetOnUnavailable;
    let redis = crate::support::need!(Redis::start().await);
    let dir = tempfile::tempdir().expect("tempdir");
    let (key_file, _) = init_key(dir.path(), "keys.json", &[]);
    let origin = Origin::with_robots(ROBOTS).await;
    origin.route("/a", priced("USD 0.002", "a"));
    let fleet = on(
        &redis,
        std::time::Duration::from_secs(5),
        FleetOnUnavailable::Local,
    );
    let adjust = |c: &mut robots_proxy::config::Config| {
        paying(c, &key_file);
    };
    let a = node(Some(named(&fleet, "a")), adjust).await;
    let b = node(Some(named(&fleet, "b")), adjust).await;
    // USD 0.003 a day for the fleet: node a pays USD 0.002.
    let r = a.request(get(&origin.url("/a"), None)).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(origin.hits("/a"), 2);
    let day = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        / 86_400;
    let key = format!("robots-proxy:test:{{spend}}:{day}");
    assert_eq!(redis.text(&["GET", &key]).await, "2000");
    // Node b has spent nothing itself, but the fleet's budget does not
    // hold a second price: the origin's 402 (b did not know it charges),
    // then the proxy's own.
    let r = b.request(get(&origin.url("/a"), None)).await;
    assert_eq!(r.status, 402, "{r:?}");
    assert!(r.body.contains("USD 0.002 spent"), "{}", r.body);
    assert_eq!(origin.hits("/a"), 3);
    // Now it knows: the origin is not asked.
    let r = b.request(get(&origin.url("/a"), None)).await;
    assert_eq!(r.status, 402, "{r:?}");
    assert_eq!(origin.hits("/a"), 3, "the origin was not asked");
    let refused = b.audit_of_type("payment");
    assert!(
        refused.iter().all(|l| l["reason"] == "budget_exhausted"),
        "{refused:?}"
    );
    assert_eq!(redis.text(&["GET", &key]).await, "2000");
}

/// The paid retry is one more request to the origin: it waits for a
/// Crawl-delay slot of its own, one interval after the 402's.
#[tokio::test]
async fn the_paid_retry_keeps_the_crawl_delay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key_file, _kid) = init_key(dir.path(), "keys.json", &[]);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    origin.route("/paid", priced("USD 0.0015", "paid page"));
    let proxy = Proxy::start_with(|c| {
        paying(c, &key_file);
    })
    .await;
    let r = proxy.request(get(&origin.url("/paid"), None)).await;
    assert_eq!(r.status, 200, "{r:?}");
    let arrived = origin.arrived(&["/paid"]);
    assert_eq!(arrived.len(), 2, "the 402, then the paid retry");
    let gap = arrived[1].duration_since(arrived[0]);
    assert!(
        gap >= std::time::Duration::from_millis(950),
        "the retry came {gap:?} after the 402"
    );
}

/// With `max_in_flight = 1`, a request's place among the origin's
/// requests in flight is kept through its paid retry: another request to
/// the origin, sent while the paid page is being made, reaches the origin
/// only after it.
#[tokio::test]
async fn a_paid_retry_keeps_the_requests_place_in_flight() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key_file, _) = init_key(dir.path(), "keys.json", &[]);
    let origin = Origin::with_robots(ROBOTS).await;
    origin.route(
        "/paid",
        priced_with(
            "USD 0.001",
            Reply::ok("paid page")
                .header("crawler-charged", "USD 0.001")
                .delay(std::time::Duration::from_millis(500)),
        ),
    );
    origin.route("/free", Reply::ok("free page"));
    let proxy = Proxy::start_with(|c| {
        paying(c, &key_file);
        c.politeness.max_in_flight = 1;
    })
    .await;

    let paid = proxy.request(get(&origin.url("/paid"), None));
    let free = async {
        crate::support::until("the paid retry to reach the origin", || async {
            (origin.hits("/paid") == 2).then_some(())
        })
        .await;
        proxy.request(get(&origin.url("/free"), None)).await
    };
    tokio::pin!(paid, free);
    tokio::select! {
        biased;
        r = &mut paid => {
            assert_eq!(r.status, 200, "{r:?}");
            let r = free.await;
            assert_eq!(r.status, 200, "{r:?}");
        }
        r = &mut free => panic!(
            "a request reached the origin beside the paid retry (max_in_flight 1): {r:?}"
        ),
    }
}

/// Today's charges are read back from the audit log at start: a restart
/// does not give the day's budget back.
#[tokio::test]
async fn a_restart_does_not_give_the_days_budget_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key_file, _) = init_key(dir.path(), "keys.json", &[]);
    let audit = dir.path().join("audit.jsonl");
    let origin = Origin::with_robots(ROBOTS).await;
    origin.route("/paid", priced("USD 0.0015", "paid page"));
    let configure = |c: &mut robots_proxy::config::Config| {
        paying(c, &key_file);
        c.audit.path = Some(audit.clone());
    };
    let mut proxy = Proxy::start_with(configure).await;
    for _ in 0..2 {
        let r = proxy.request(get(&origin.url("/paid"), None)).await;
        assert_eq!(r.status, 200, "{r:?}");
    }
    proxy.stop();
    proxy.finished().await;

    let proxy = Proxy::start_with(configure).await;
    let r = proxy.request(get(&origin.url("/paid"), None)).await;
    refused_for_the_budget(&proxy, &r);
    assert_eq!(origin.hits("/paid"), 5, "asked, not paid");
}

/// `r` is the proxy's 402 for a spent USD 0.003 budget, and the last
/// `payment` line says so; returns the `payment` lines.
fn refused_for_the_budget(proxy: &Proxy, r: &crate::support::Resp) -> Vec<serde_json::Value> {
    assert_eq!(r.status, 402, "{r:?}");
    assert!(
        r.body.contains("budget_per_day USD 0.003, USD 0.003 spent"),
        "{}",
        r.body
    );
    let lines = proxy.audit_of_type("payment");
    let last = lines.last().expect("a payment line");
    assert_eq!(last["outcome"], "refused");
    assert_eq!(last["reason"], "budget_exhausted");
    lines
}
