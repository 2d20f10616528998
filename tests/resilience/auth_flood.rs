//! A wrong-password flood against the real binary: Argon2 work is bounded
//! (one verification per CPU at a time; a per-address allowance), so memory
//! stays near idle, and a user whose credentials verified is still served.

use robots_proxy::config::{UserConfig, hash_password};

use crate::support::binary::{Running, Setup, access_with_user};
use crate::support::{Conn, Origin, Proxy, status_kib, user};

/// An origin, and the binary with user alice (password `right`, Argon2
/// at its default cost: 19 MiB per verification) and `per_minute`
/// verifications per address; a client connection to it.
async fn alice_running(per_minute: u32) -> (Origin, Setup, Running, Conn) {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let hash = hash_password("right").expect("hash");
    let access = access_with_user(per_minute, "alice", &hash, "");
    let (setup, running) = Setup::running("floodbot", &access).await;
    let conn = Conn::open(running.addr).await;
    (origin, setup, running, conn)
}

/// Alice's request for `path`, with her right password, is served.
async fn alice_served(alice: &mut Conn, origin: &Origin, path: &str) {
    let r = alice.get_as(&origin.url(path), "alice:right").await;
    assert_eq!(r.status, 200, "{path}: {}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wrong_password_flood_keeps_memory_near_idle_and_users_served() {
    // No per-address allowance here: the concurrency bound alone must hold.
    let (origin, _setup, running, mut alice) = alice_running(0).await;
    let pid = running.child.id();
    let proxy = running.addr;
    alice_served(&mut alice, &origin, "/page").await;
    let idle = status_kib(Some(pid), "VmRSS");

    let clients = 48;
    let flood: Vec<_> = (0..clients)
        .map(|i| {
            let url = origin.url("/page");
            tokio::spawn(async move {
                let mut c = Conn::open(proxy).await;
                c.get_as(&url, &format!("alice:wrong{i}")).await.status
            })
        })
        .collect();
    // Served while the flood is under way (its credentials are remembered).
    alice_served(&mut alice, &origin, "/during").await;
    for f in flood {
        assert_eq!(f.await.expect("client"), 407);
    }
    let peak = status_kib(Some(pid), "VmHWM");
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
    let (origin, _setup, mut running, mut alice) = alice_running(3).await;
    let proxy = running.addr;
    // A first use counts against the allowance too (1 of 3).
    alice_served(&mut alice, &origin, "/page").await;
    let mut c = Conn::open(proxy).await;
    for _ in 0..2 {
        let wrong = c.get_as(&origin.url("/x"), "alice:wrong").await;
        assert_eq!(wrong.status, 407);
        // The proxy's own answers are not for a scraper's HTTP cache.
        assert_eq!(wrong.header("cache-control"), Some("no-store"));
    }
    let throttled = c.get_as(&origin.url("/x"), "alice:wrong").await;
    assert_eq!(throttled.status, 429, "{}", throttled.body);
    assert_eq!(throttled.header("cache-control"), Some("no-store"));
    let retry: u64 = throttled.parsed("retry-after").expect("Retry-After");
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(c.get_as(&origin.url("/x"), "alice:wrong").await.status, 429);
    // Logged once for the window, not per refusal.
    running
        .wait_for("too many proxy authentication attempts")
        .await;
    // Remembered credentials still pass from the same address.
    alice_served(&mut alice, &origin, "/page2").await;
}

#[tokio::test]
async fn a_user_over_max_rps_gets_429_with_retry_after_and_an_audit_line() {
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let proxy = Proxy::start_with(move |c| {
        c.access.users = vec![UserConfig {
            // One request per 100 s: the second one is over.
            max_rps: Some(0.01),
            ..user("slow", "pw")
        }];
    })
    .await;
    let mut conn = Conn::open(proxy.addr).await;
    assert_eq!(conn.get_as(&origin.url("/a"), "slow:pw").await.status, 200);
    let over = conn.get_as(&origin.url("/b"), "slow:pw").await;
    assert_eq!(over.status, 429, "{}", over.body);
    assert!(over.body.contains("max_rps"), "{}", over.body);
    let retry: u64 = over.parsed("retry-after").expect("Retry-After");
    assert!((90..=100).contains(&retry), "{retry}");
    assert_eq!(origin.hits("/b"), 0);
    // A disallowed path is a 403 whatever the quota.
    assert_eq!(
        conn.get_as(&origin.url("/private/x"), "slow:pw")
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
