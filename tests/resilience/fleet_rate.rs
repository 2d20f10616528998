//! Fleet-wide rate limits with a real Redis: a user's `max_rps` and an
//! address's `auth_failures_per_minute` hold over every node sharing one
//! Redis, where independent proxies each allow the whole limit. Redis not
//! answering: each node's own limits apply, and no request waits on Redis
//! longer than `fleet.timeout`. Skipped, with a message, without
//! `redis-server`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use robots_proxy::config::{
    AccessConfig, AdminUser, FleetConfig, FleetOnUnavailable, RedisTarget, UserConfig,
};

use crate::support::binary::{Running, Setup, access_with_user};
use crate::support::fleet::{self, on as fleet};
use crate::support::redis::Redis;
use crate::support::{Conn, Origin, Proxy, basic, cheap_hash, get_as as get, metric, need, user};

/// `[access]` with `auth_failures_per_minute` (set in TOML, as operators
/// do) and `users`.
fn access(per_minute: u32, users: Vec<UserConfig>) -> AccessConfig {
    let mut a: AccessConfig =
        toml::from_str(&format!("auth_failures_per_minute = {per_minute}")).expect("access");
    a.users = users;
    a
}

/// `n` in-process proxies with an admin listener, user `crawler`
/// (password `pw`) at `max_rps`, and `fleet`.
async fn nodes(n: usize, max_rps: f64, fleet: Option<FleetConfig>) -> Vec<Proxy> {
    fleet::nodes(n, fleet, |c| {
        c.access = access(
            30,
            vec![UserConfig {
                max_rps: Some(max_rps),
                ..user("crawler", "pw")
            }],
        );
    })
    .await
}

const RPS: f64 = 5.0;
/// `max_rps = 5` allows a burst of 5, then one every 200 ms.
const BURST: usize = 5;
/// How long the requests keep coming.
const RUN: Duration = Duration::from_millis(1500);
/// Clients sending at once, each round-robin over the nodes.
const SENDERS: usize = 6;
/// Admitted beyond what the quota allows over the measured time: the
/// measured time starts before the first request reaches Redis and ends
/// after the last, so only rounding is left.
const SLACK_ABOVE: usize = 1;
/// Admitted below it: a slot freed while every sender waits for an answer
/// is taken by the next request, a round trip late (under 200 ms even on a
/// busy machine), and the last one may fall after the end.
const SLACK_BELOW: usize = 2;

/// Requests by user `crawler`, sent back to back for [`RUN`] by
/// [`SENDERS`] clients, each round-robin over `nodes` (keep-alive), after
/// one request per node that robots.txt blocks (its credentials are then
/// remembered, and a blocked request takes nothing from the quota).
/// Returns the number sent, the number admitted (200; the others 429 for
/// `max_rps`) and the time from the first sent to the last answered.
async fn load(origin: &Origin, nodes: &[Proxy]) -> (usize, usize, Duration) {
    for node in nodes {
        let warm = node.request(get(&origin.url("/private/warm"), "crawler:pw"));
        assert_eq!(warm.await.status, 403);
    }
    let addrs: Vec<_> = nodes.iter().map(|n| n.addr).collect();
    let started = Instant::now();
    let senders = (0..SENDERS).map(|s| {
        let addrs = addrs.clone();
        let base = origin.url(&format!("/p{s}-"));
        tokio::spawn(async move {
            let mut conns = Vec::new();
            for a in &addrs {
                conns.push(Conn::open(*a).await);
            }
            let (mut sent, mut admitted) = (0, 0);
            while started.elapsed() < RUN {
                let c = &mut conns[(sent + s) % addrs.len()];
                let r = c.send(get(&format!("{base}{sent}"), "crawler:pw")).await;
                match r.status {
                    200 => admitted += 1,
                    429 => assert!(r.body.contains("max_rps"), "{}", r.body),
                    other => panic!("{other}: {}", r.body),
                }
                sent += 1;
            }
            (sent, admitted)
        })
    });
    let (mut sent, mut admitted) = (0, 0);
    for r in futures_util::future::join_all(senders).await {
        let (s, a) = r.expect("sender");
        sent += s;
        admitted += a;
    }
    let took = started.elapsed();
    let reached = origin
        .arrivals
        .lock()
        .expect("arrivals")
        .iter()
        .filter(|(path, _)| path.starts_with("/p"))
        .count();
    assert_eq!(reached, admitted, "refused requests reached the origin");
    (sent, admitted, took)
}

/// What GCRA admits from a fresh allowance under demand that never stops,
/// over `took`: the burst and one per interval.
fn quota(took: Duration) -> usize {
    BURST + (RPS * took.as_secs_f64()).floor() as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_rps_holds_across_the_fleet_independent_proxies_admit_each_their_own() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    // A timeout no busy machine reaches: every answer is Redis's.
    let shared = nodes(
        3,
        RPS,
        Some(fleet(
            &redis,
            Duration::from_secs(2),
            FleetOnUnavailable::Local,
        )),
    )
    .await;
    let (sent_fleet, in_fleet, took_fleet) = load(&origin, &shared).await;
    for node in &shared {
        node.assert_metric(
            "robots_proxy_fleet_unavailable_total",
            0.0,
            "Redis answered",
        )
        .await;
    }
    // The allowance's key, gone once idle (it expires at its TAT).
    let key = "robots-proxy:test:{user:crawler}:max_rps";
    match redis.command(&["PTTL", key]).await {
        Ok(redis::Value::Int(ms)) => assert!((1..=20_000).contains(&ms), "{key}: PTTL {ms}"),
        other => panic!("{key}: {other:?}"),
    }

    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let alone = nodes(3, RPS, None).await;
    let (sent_alone, independent, took_alone) = load(&origin, &alone).await;
    eprintln!(
        "max_rps {RPS} over 3 nodes: fleet admitted {in_fleet} of {sent_fleet} in \
         {took_fleet:?} (quota {}), independent admitted {independent} of {sent_alone} in \
         {took_alone:?} (quota per node {})",
        quota(took_fleet),
        quota(took_alone)
    );
    let q = quota(took_fleet);
    assert!(
        (q.saturating_sub(SLACK_BELOW)..=q + SLACK_ABOVE).contains(&in_fleet),
        "fleet admitted {in_fleet} in {took_fleet:?}: the quota is {q}"
    );
    // Each independent node allows the whole quota.
    let q = quota(took_alone);
    assert!(
        independent >= 3 * q.saturating_sub(SLACK_BELOW),
        "independent proxies admitted {independent} in {took_alone:?}: 3 × {q} expected"
    );
}

/// A binary with user alice (password `right`), `per_minute` password
/// verifications per address, and `[fleet]` when `redis` is given.
async fn alice_node(per_minute: u32, redis: Option<&Redis>) -> (Setup, Running) {
    let fleet = match redis {
        Some(r) => format!(
            "[fleet]\nunauthenticated = true\nredis = \"{}\"\nname = \"test\"\ntimeout = \"2s\"\n",
            r.url()
        ),
        None => String::new(),
    };
    let access = access_with_user(per_minute, "alice", &cheap_hash("right"), &fleet);
    Setup::running("floodbot", &access).await
}

/// Sends `n` wrong passwords from this address, round-robin over `nodes`,
/// one after another; returns the answers' statuses.
async fn wrong_passwords(origin: &Origin, nodes: &[(Setup, Running)], n: usize) -> Vec<u16> {
    let mut conns = Vec::new();
    for (_, running) in nodes {
        conns.push(Conn::open(running.addr).await);
    }
    let mut statuses = Vec::new();
    for i in 0..n {
        let c = &mut conns[i % nodes.len()];
        statuses.push(c.send(get(&origin.url("/x"), "alice:wrong")).await.status);
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_failures_per_minute_hold_across_the_fleet() {
    let redis = need!(Redis::start().await);
    let per_minute = 4;
    let n = 3 * per_minute as usize + 3;
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;

    let mut shared = Vec::new();
    for _ in 0..3 {
        shared.push(alice_node(per_minute, Some(&redis)).await);
    }
    let started = Instant::now();
    let in_fleet = wrong_passwords(&origin, &shared, n).await;
    let took = started.elapsed();
    let verified = in_fleet.iter().filter(|s| **s == 407).count();
    // One verification every 60 s / per_minute after the burst.
    let most = per_minute as usize + (took.as_secs_f64() * f64::from(per_minute) / 60.0) as usize;
    assert!(
        in_fleet.iter().all(|s| *s == 407 || *s == 429),
        "{in_fleet:?}"
    );
    assert!(
        (per_minute as usize..=most).contains(&verified),
        "fleet: {verified} verified in {took:?}, at most {most}: {in_fleet:?}"
    );
    // Refused on every node once the shared allowance is spent.
    assert!(
        in_fleet[verified..].iter().all(|s| *s == 429),
        "{in_fleet:?}"
    );
    // Each node logs its first refusal once, for fail2ban.
    for (_, running) in &mut shared {
        running
            .wait_for("too many proxy authentication attempts")
            .await;
    }
    let key = "robots-proxy:test:{client:127.0.0.1}:auth";
    assert_eq!(
        redis.command(&["EXISTS", key]).await.ok(),
        Some(redis::Value::Int(1)),
        "{key}"
    );

    let mut alone = Vec::new();
    for _ in 0..3 {
        alone.push(alice_node(per_minute, None).await);
    }
    let independent = wrong_passwords(&origin, &alone, n).await;
    let verified_alone = independent.iter().filter(|s| **s == 407).count();
    eprintln!(
        "auth_failures_per_minute {per_minute}, {n} wrong passwords over 3 nodes: \
         fleet verified {verified}, independent {verified_alone}"
    );
    assert_eq!(
        verified_alone,
        3 * per_minute as usize,
        "independent: {independent:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_not_answering_the_local_limits_apply_within_the_timeout() {
    let redis = need!(Redis::start().await);
    let timeout = Duration::from_millis(300);
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    // `refuse` is for origins' shared state: rate limits fall back to the
    // node's own all the same.
    let fleet = fleet(&redis, timeout, FleetOnUnavailable::Refuse);
    let node = fleet::node(Some(fleet), |c| {
        c.access = access(
            3,
            vec![UserConfig {
                // One request a second, a burst of one.
                max_rps: Some(1.0),
                ..user("crawler", "pw")
            }],
        );
    })
    .await;
    let mut conn = Conn::open(node.addr).await;
    // Credentials verified (one of the address's 3 on Redis) and
    // remembered; robots.txt cached.
    let warm = conn
        .send(get(&origin.url("/private/a"), "crawler:pw"))
        .await;
    assert_eq!(warm.status, 403);

    redis.hang().await;
    // No request waits on Redis past the timeout, plus its own work.
    let bound = timeout + Duration::from_millis(700);
    let mut timed = async |url: &str, credentials: &str| {
        let started = Instant::now();
        let r = conn.send(get(url, credentials)).await;
        let took = started.elapsed();
        assert!(took <= bound, "{url}: {} after {took:?}", r.status);
        r
    };
    // The node's own max_rps: one, then 429 with Retry-After.
    let first = timed(&origin.url("/a"), "crawler:pw").await;
    assert_eq!(first.status, 200, "{}", first.body);
    let over = timed(&origin.url("/b"), "crawler:pw").await;
    assert_eq!(over.status, 429, "{}", over.body);
    assert!(over.body.contains("max_rps"), "{}", over.body);
    assert!(
        over.parsed::<u64>("retry-after").is_some(),
        "{:?}",
        over.headers
    );
    assert_eq!(origin.hits("/b"), 0);
    // The node's own per-address allowance: 3 verifications (the one on
    // Redis before is not this node's), then 429.
    for _ in 0..3 {
        let wrong = timed(&origin.url("/x"), "crawler:wrong").await;
        assert_eq!(wrong.status, 407, "{}", wrong.body);
    }
    let throttled = timed(&origin.url("/x"), "crawler:wrong").await;
    assert_eq!(throttled.status, 429, "{}", throttled.body);
    node.assert_metric("robots_proxy_fleet_unavailable_total", 6.0, "each request")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_and_proxy_passwords_share_the_address_allowance_across_the_fleet() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nAllow: /\n").await;
    let fleet = fleet(&redis, Duration::from_secs(2), FleetOnUnavailable::Local);
    let nodes = fleet::nodes(2, Some(fleet), |c| {
        c.admin.users = vec![AdminUser {
            name: "ops".into(),
            password_hash: cheap_hash("secret"),
            role: Default::default(),
        }];
        c.access = access(3, vec![user("crawler", "pw")]);
    })
    .await;
    let admin_with = async |node: &Proxy, credentials: &str| {
        let addr = node.admin_addr.expect("admin listener");
        let req = Request::get("/metrics")
            .header(http::header::HOST, addr.to_string())
            .header(http::header::AUTHORIZATION, basic(credentials))
            .body(Bytes::new())
            .expect("request");
        Conn::open(addr).await.send(req).await.status
    };
    let proxy_with = async |node: &Proxy, credentials: &str| {
        node.request(get(&origin.url("/x"), credentials))
            .await
            .status
    };
    // Three verifications from this address, on either listener of
    // either node, then none.
    assert_eq!(proxy_with(&nodes[0], "crawler:wrong").await, 407);
    assert_eq!(admin_with(&nodes[1], "ops:wrong").await, 401);
    assert_eq!(admin_with(&nodes[0], "ops:wrong").await, 401);
    assert_eq!(proxy_with(&nodes[1], "crawler:wrong").await, 429);
    assert_eq!(admin_with(&nodes[0], "ops:secret").await, 429);
    assert_eq!(admin_with(&nodes[1], "ops:wrong").await, 429);
}

/// The script's arithmetic on a real Redis: a burst, then one per
/// interval with the wait to the next; a refusal stores nothing; the key
/// expires at its TAT; names are escaped in the hash tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_script_is_governors_gcra_on_redis_time() {
    use robots_proxy::measure::{Fleet, FleetSettings, OnUnavailable, Rated};
    let redis = need!(Redis::start().await);
    let fleet = Fleet::new(&FleetSettings {
        redis: RedisTarget::Server(redis.url()),
        name: "gcra".into(),
        node: "gcra-test".into(),
        timeout: Duration::from_secs(2),
        on_unavailable: OnUnavailable::Local,
        keys: None,
    })
    .expect("fleet");
    let interval = Duration::from_secs(10);
    let rated = Rated::User("a}:x:{b");
    for _ in 0..3 {
        assert_eq!(fleet.admit_rate(rated, interval, 3).await, Ok(Ok(())));
    }
    let key = "robots-proxy:gcra:{user:a%7D:x:%7Bb}:max_rps";
    assert_eq!(fleet.rate_key(rated), key);
    let stored = redis.command(&["GET", key]).await.expect("GET");
    // Three at once: TAT three intervals on; the next is one interval
    // away (tau is two intervals).
    let wait = match fleet.admit_rate(rated, interval, 3).await {
        Ok(Err(w)) => w,
        other => panic!("{other:?}"),
    };
    assert!(
        wait > interval - Duration::from_secs(1) && wait <= interval,
        "{wait:?}"
    );
    assert_eq!(redis.command(&["GET", key]).await.expect("GET"), stored);
    match redis.command(&["PTTL", key]).await {
        Ok(redis::Value::Int(ms)) => assert!((29_000..=30_000).contains(&ms), "PTTL {ms}"),
        other => panic!("{other:?}"),
    }
    // Another user's allowance is its own.
    assert_eq!(
        fleet.admit_rate(Rated::User("a"), interval, 1).await,
        Ok(Ok(()))
    );
    // A burst of one: the second waits a whole interval.
    match fleet.admit_rate(Rated::User("a"), interval, 1).await {
        Ok(Err(w)) => assert!(w > interval - Duration::from_secs(1) && w <= interval),
        other => panic!("{other:?}"),
    }
    // A short interval: admitted again once it has passed, on Redis's clock.
    let short = Duration::from_millis(50);
    let client = Rated::Client("2001:db8:1:2::7".parse().expect("ip"));
    assert_eq!(fleet.admit_rate(client, short, 1).await, Ok(Ok(())));
    let Ok(Err(wait)) = fleet.admit_rate(client, short, 1).await else {
        panic!("not refused");
    };
    // Its wait over on Redis's clock, counted from after the refusal (from
    // the script's own time it is over no later).
    let refused = redis.time_us().await;
    let wait_us = u64::try_from(wait.as_micros()).expect("µs");
    redis.until_clock_past(refused + wait_us).await;
    assert_eq!(
        fleet
            .admit_rate(
                Rated::Client("2001:db8:1:2::8".parse().expect("ip")),
                short,
                1
            )
            .await,
        Ok(Ok(())),
        "the same /64 after its wait"
    );
    // A value no script wrote (a corrupted or hostile Redis) is read as
    // none: for a node that took nothing from the allowance, it starts
    // afresh (it neither admits for ever nor refuses for ever); the node
    // whose own requests left it full stays refused (`fleet::rate`).
    for junk in ["inf", "nan", "-inf", "1e30", "junk"] {
        redis.command(&["SET", key, junk]).await.expect("SET");
        assert!(
            matches!(fleet.admit_rate(rated, interval, 3).await, Ok(Err(_))),
            "{junk}: this node's own burst is spent"
        );
        redis.command(&["SET", key, junk]).await.expect("SET");
        let fresh = Fleet::new(&FleetSettings {
            redis: RedisTarget::Server(redis.url()),
            name: "gcra".into(),
            node: format!("gcra-{junk}"),
            timeout: Duration::from_secs(2),
            on_unavailable: OnUnavailable::Local,
            keys: None,
        })
        .expect("fleet");
        for _ in 0..3 {
            assert_eq!(
                fresh.admit_rate(rated, interval, 3).await,
                Ok(Ok(())),
                "{junk}"
            );
        }
        assert!(
            matches!(fresh.admit_rate(rated, interval, 3).await, Ok(Err(_))),
            "{junk}: the fourth of a burst of three"
        );
    }
    // The same on the Crawl-delay schedule (one per value: the node
    // books no earlier than its own last booking, `fleet::floor`).
    for junk in ["inf", "nan", "1e30"] {
        let key = format!("http://{junk}.example robots-proxy");
        let schedule = fleet.schedule_key(&key);
        redis.command(&["SET", &schedule, junk]).await.expect("SET");
        let booked = fleet.book(&key, interval, interval, 0).await;
        assert_eq!(
            booked,
            Ok(robots_proxy::measure::Booking::Wait(Duration::ZERO)),
            "{junk}"
        );
    }
    // What a check adds to a request of a user with max_rps: printed
    // (`--nocapture`), each answered within the fleet's timeout.
    let mut took = Vec::new();
    for i in 0..500 {
        let started = Instant::now();
        let admitted = fleet
            .admit_rate(Rated::User(&format!("u{i}")), interval, 5)
            .await;
        took.push(started.elapsed());
        assert_eq!(admitted, Ok(Ok(())));
    }
    took.sort();
    let (p50, p99) = fleet::p50_p99(&took);
    eprintln!("fleet rate check on loopback Redis: p50 {p50:?}, p99 {p99:?}");
}

/// A Redis that answers every call just within the timeout: a request that
/// needs two calls (its user's `max_rps`, then its Crawl-delay booking)
/// waits on Redis for the timeout in all, not twice. The booking cut short
/// is refused (a slot of this node's own would be one the fleet does not
/// know), and does not make Redis unavailable for the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waits_on_redis_for_the_timeout_in_all() {
    use crate::support::redis::SlowRelay;
    let redis = need!(Redis::start().await);
    let relay = SlowRelay::start(&redis).await;
    let timeout = Duration::from_millis(1500);
    let config = FleetConfig {
        redis: RedisTarget::Server(relay.url()),
        name: "allowance".into(),
        timeout,
        on_unavailable: FleetOnUnavailable::Local,
        unauthenticated: true,
        ..FleetConfig::default()
    };
    let node = nodes(1, 1000.0, Some(config)).await.remove(0);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let mut conn = Conn::open(node.addr).await;
    // robots.txt and the first slot, at Redis's own speed.
    let r = conn.send(get(&origin.url("/warm"), "crawler:pw")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let answer = 1000;
    relay.set_delay(Duration::from_millis(answer));
    let started = Instant::now();
    let r = conn.send(get(&origin.url("/slow"), "crawler:pw")).await;
    let took = started.elapsed();
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.header("retry-after").is_some(), "{}", r.body);
    assert_eq!(origin.hits("/slow"), 0, "no slot the fleet does not know");
    eprintln!("each answer {answer} ms late, timeout {timeout:?}: answered in {took:?}");
    // Two calls of 1 s each would be 2 s; the allowance is 1.5 s, and the
    // request's own work is small.
    assert!(
        took < timeout + Duration::from_millis(400),
        "waited {took:?} on Redis"
    );
    let why = "a call cut by the request's allowance says nothing of Redis";
    node.assert_metric("robots_proxy_fleet_reachable", 1.0, why)
        .await;
}

/// Redis stops answering under `local`: a request of a user with
/// `max_rps` spends the whole timeout on its quota's call, so its
/// Crawl-delay booking has no time left. That is the outage's doing: the
/// booking falls back to the node's own slots (the request is served), it
/// is not refused as a booking Redis would not make.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_booking_left_no_time_by_an_outage_falls_back() {
    let redis = need!(Redis::start().await);
    let config = fleet(
        &redis,
        Duration::from_millis(300),
        FleetOnUnavailable::Local,
    );
    let node = nodes(1, 1000.0, Some(config)).await.remove(0);
    let origin = Origin::with_robots("User-agent: *\nCrawl-delay: 1\n").await;
    let mut conn = Conn::open(node.addr).await;
    let r = conn.send(get(&origin.url("/warm"), "crawler:pw")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    redis.hang().await;
    let r = conn.send(get(&origin.url("/during"), "crawler:pw")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(origin.hits("/during"), 1);
    node.assert_metric("robots_proxy_fleet_reachable", 0.0, "Redis hung")
        .await;
}

/// A writer to Redis deletes a user's allowance before each request: the
/// node still holds `max_rps` for its own requests (it admits from the
/// allowance its own last request left, and writes it back), and counts
/// each lowering (`robots_proxy_fleet_rejected_total{kind="rate"}`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowance_deleted_in_redis_still_holds_a_nodes_own_requests() {
    let redis = need!(Redis::start().await);
    let origin = Origin::with_robots("User-agent: *\nDisallow: /private\n").await;
    let config = fleet(&redis, Duration::from_secs(2), FleetOnUnavailable::Local);
    let node = nodes(1, RPS, Some(config)).await.remove(0);
    let warm = node.request(get(&origin.url("/private/warm"), "crawler:pw"));
    assert_eq!(warm.await.status, 403);
    let key = "robots-proxy:test:{user:crawler}:max_rps";
    let mut conn = Conn::open(node.addr).await;
    let started = Instant::now();
    let (mut sent, mut admitted) = (0, 0);
    while sent < 40 {
        redis.command(&["DEL", key]).await.expect("del");
        let r = conn
            .send(get(&origin.url(&format!("/p{sent}")), "crawler:pw"))
            .await;
        match r.status {
            200 => admitted += 1,
            429 => assert!(r.body.contains("max_rps"), "{}", r.body),
            other => panic!("{other}: {}", r.body),
        }
        sent += 1;
    }
    let took = started.elapsed();
    let rejected = metric(
        &node.metrics().await,
        "robots_proxy_fleet_rejected_total{kind=\"rate\"}",
    )
    .unwrap_or(0.0);
    eprintln!(
        "allowance deleted before each of {sent} requests in {took:?}: {admitted} admitted, {rejected} lowerings counted"
    );
    assert!(
        admitted <= quota(took) + SLACK_ABOVE,
        "{admitted} admitted in {took:?} at max_rps {RPS}"
    );
    assert!(rejected >= 1.0, "no lowering counted");
}
