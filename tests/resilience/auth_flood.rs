//! A wrong-password flood against the real binary: Argon2 work is bounded
//! (one verification per CPU at a time; a per-address allowance), so memory
//! stays near idle, and a user whose credentials verified is still served.

use base64::Engine as _;
use bytes::Bytes;
use http::Request;

use crate::support;
use crate::support::Origin;
use crate::support::binary::Setup;

fn basic(credentials: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(credentials)
    )
}

/// `VmHWM` or `VmRSS` of `pid`, in KiB.
fn kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

/// A config with user alice (password `right`, Argon2 at its default
/// cost: 19 MiB per verification) and `per_minute` verifications per
/// address.
fn alice_config(setup: &Setup, per_minute: u32) {
    let hash = robots_proxy::config::hash_password("right").expect("hash");
    setup.write_config(
        "floodbot",
        &format!(
            "[access]\nauth_failures_per_minute = {per_minute}\n\
             [[access.users]]\nname = \"alice\"\npassword_hash = \"{hash}\"\n"
        ),
    );
}

fn get(url: &str, credentials: &str) -> Request<Bytes> {
    Request::get(url)
        .header("proxy-authorization", basic(credentials))
        .body(Bytes::new())
        .expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wrong_password_flood_keeps_memory_near_idle_and_users_served() {
    let origin = Origin::start().await;
    origin.robots("User-agent: *\nDisallow: /private\n");
    let setup = Setup::new();
    // No per-address allowance here: the concurrency bound alone must hold.
    alice_config(&setup, 0);
    let running = setup.start().await;
    let pid = running.child.id();
    let proxy = running.addr;

    let mut alice = support::Conn::open(proxy).await;
    assert_eq!(
        alice
            .send(get(&origin.url("/page"), "alice:right"))
            .await
            .status,
        200
    );
    let idle = kib(pid, "VmRSS:");

    let clients = 48;
    let flood: Vec<_> = (0..clients)
        .map(|i| {
            let url = origin.url("/page");
            tokio::spawn(async move {
                let mut c = support::Conn::open(proxy).await;
                c.send(get(&url, &format!("alice:wrong{i}"))).await.status
            })
        })
        .collect();
    // Served while the flood is under way (its credentials are remembered).
    assert_eq!(
        alice
            .send(get(&origin.url("/during"), "alice:right"))
            .await
            .status,
        200
    );
    for f in flood {
        assert_eq!(f.await.expect("client"), 407);
    }
    let peak = kib(pid, "VmHWM:");
    let cpus = std::thread::available_parallelism().map_or(1, usize::from) as u64;
    // One 19 MiB verification per CPU at a time, plus slack for threads and
    // allocator arenas. Unbounded, 48 at once took about 900 MiB.
    let budget = (cpus * 20 + 48) * 1024;
    eprintln!("{clients} wrong passwords at once: idle {idle} KiB, peak {peak} KiB");
    assert!(
        peak.saturating_sub(idle) < budget,
        "peak {peak} KiB against idle {idle} KiB (budget {budget} KiB over idle)"
    );
}

#[tokio::test]
async fn an_address_over_its_allowance_gets_429_without_verifying() {
    let origin = Origin::start().await;
    origin.robots("User-agent: *\nDisallow: /private\n");
    let setup = Setup::new();
    alice_config(&setup, 3);
    let mut running = setup.start().await;
    let proxy = running.addr;
    let mut alice = support::Conn::open(proxy).await;
    // A first use counts against the allowance too (1 of 3).
    assert_eq!(
        alice
            .send(get(&origin.url("/page"), "alice:right"))
            .await
            .status,
        200
    );
    let mut c = support::Conn::open(proxy).await;
    for _ in 0..2 {
        let wrong = c.send(get(&origin.url("/x"), "alice:wrong")).await;
        assert_eq!(wrong.status, 407);
        // The proxy's own answers are not for a scraper's HTTP cache.
        assert_eq!(wrong.header("cache-control"), Some("no-store"));
    }
    let throttled = c.send(get(&origin.url("/x"), "alice:wrong")).await;
    assert_eq!(throttled.status, 429, "{}", throttled.body);
    assert_eq!(throttled.header("cache-control"), Some("no-store"));
    let retry: u64 = throttled
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(
        c.send(get(&origin.url("/x"), "alice:wrong")).await.status,
        429
    );
    // Logged once for the window, not per refusal.
    running
        .wait_for("too many proxy authentication attempts")
        .await;
    // Remembered credentials still pass from the same address.
    assert_eq!(
        alice
            .send(get(&origin.url("/page2"), "alice:right"))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn a_user_over_max_rps_gets_429_with_retry_after_and_an_audit_line() {
    let origin = Origin::start().await;
    origin.robots("User-agent: *\nDisallow: /private\n");
    let cheap = robots_proxy::config::hash_password_with(
        "pw",
        robots_proxy::config::PasswordParams::new(8, 1, 1, None).expect("params"),
    )
    .expect("hash");
    let proxy = support::Proxy::start_with(move |c| {
        c.access.users = vec![robots_proxy::config::UserConfig {
            name: "slow".into(),
            password_hash: cheap,
            agent: None,
            // One request per 100 s: the second one is over.
            max_rps: Some(0.01),
            purposes: Vec::new(),
        }];
    })
    .await;
    let mut conn = support::Conn::open(proxy.addr).await;
    assert_eq!(
        conn.send(get(&origin.url("/a"), "slow:pw")).await.status,
        200
    );
    let over = conn.send(get(&origin.url("/b"), "slow:pw")).await;
    assert_eq!(over.status, 429, "{}", over.body);
    assert!(over.body.contains("max_rps"), "{}", over.body);
    let retry: u64 = over
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((90..=100).contains(&retry), "{retry}");
    assert_eq!(origin.hits("/b"), 0);
    // A disallowed path is a 403 whatever the quota.
    assert_eq!(
        conn.send(get(&origin.url("/private/x"), "slow:pw"))
            .await
            .status,
        403
    );
    let audit = proxy.audit();
    assert_eq!(audit.len(), 2, "{audit:?}");
    assert_eq!(audit[0]["decision"], "rate_limited");
    assert_eq!(audit[0]["user"], "slow");
    assert_eq!(audit[1]["decision"], "disallowed");
}
