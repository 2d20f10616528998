//! Fleet nodes for the tests: in-process proxies sharing one Redis (or a
//! cluster), each with its admin listener, and the waits and measures the
//! fleet tests share.

use std::time::{Duration, Instant};

use robots_proxy::config::{Config, FleetConfig, FleetOnUnavailable, RedisTarget};

use super::{Origin, Proxy, admin, until_paced, until_within};

/// A `[fleet]` of name `name` on `redis` (node name: the default).
pub fn config(
    redis: RedisTarget,
    name: &str,
    timeout: Duration,
    on_unavailable: FleetOnUnavailable,
) -> FleetConfig {
    FleetConfig {
        redis,
        name: name.into(),
        timeout,
        on_unavailable,
        unauthenticated: true,
        ..FleetConfig::default()
    }
}

/// `fleet` with node name `node`.
pub fn named(fleet: &FleetConfig, node: &str) -> FleetConfig {
    FleetConfig {
        node: node.into(),
        ..fleet.clone()
    }
}

/// A proxy with its admin listener and `fleet` (none: an independent
/// proxy), `adjust` applied last.
pub async fn node(fleet: Option<FleetConfig>, adjust: impl FnOnce(&mut Config)) -> Proxy {
    Proxy::start_with(move |c| {
        admin(c);
        c.fleet = fleet;
        adjust(c);
    })
    .await
}

/// `n` proxies of [`node`], each with `adjust`.
pub async fn nodes(
    n: usize,
    fleet: Option<FleetConfig>,
    adjust: impl Fn(&mut Config),
) -> Vec<Proxy> {
    let mut all = Vec::new();
    for _ in 0..n {
        all.push(node(fleet.clone(), &adjust).await);
    }
    all
}

/// Polls every node's `/metrics` until `ok` holds on each; fails with the
/// first page it does not hold on after 20 s.
pub async fn until_all(nodes: &[Proxy], what: &str, ok: impl Fn(&str) -> bool) {
    until_within(what, Duration::from_secs(20), || async {
        for n in nodes {
            let text = n.metrics().await;
            if !ok(&text) {
                return Err(text);
            }
        }
        Ok(())
    })
    .await;
}

/// Asks `node` for `url` until it is allowed (200), each answer before
/// that a 403 (the old copy); fails with `what` after 15 s.
pub async fn until_allowed(node: &Proxy, url: &str, what: &str) {
    until_paced(
        what,
        Duration::from_secs(15),
        Duration::from_millis(20),
        || async {
            let r = node.get(url).await;
            if r.status == 200 {
                return Ok(());
            }
            assert_eq!(r.status, 403, "{}", r.body);
            Err(r.body)
        },
    )
    .await;
}

/// Sends `n` page requests `/p<i>` at once, request i through `send(i,
/// url)`; all must be answered 200. Returns the gaps between the pages'
/// arrivals at the origin, in arrival order.
pub async fn gaps<F, Fut>(origin: &Origin, n: usize, send: F) -> Vec<Duration>
where
    F: Fn(usize, String) -> Fut,
    Fut: Future<Output = super::Resp>,
{
    let sent = (0..n).map(|i| send(i, origin.url(&format!("/p{i}"))));
    for r in futures_util::future::join_all(sent).await {
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let at = origin.arrived(&["/p"]);
    assert_eq!(at.len(), n);
    gaps_of(&at)
}

/// The gaps between successive instants.
pub fn gaps_of(at: &[Instant]) -> Vec<Duration> {
    at.windows(2).map(|w| w[1] - w[0]).collect()
}

/// The smallest gap (zero for none).
pub fn min_gap(gaps: &[Duration]) -> Duration {
    gaps.iter().min().copied().unwrap_or_default()
}

/// Fleet "test" on `redis`.
pub fn on(
    redis: &super::redis::Redis,
    timeout: Duration,
    on_unavailable: FleetOnUnavailable,
) -> FleetConfig {
    config(
        RedisTarget::Server(redis.url()),
        "test",
        timeout,
        on_unavailable,
    )
}

/// Books a slot (a 1 s interval) on each of `n` schedules of their own
/// (`http://origin<i>.example:80 bot`) through `fleet`, each granted at
/// once. Returns how long each booking took, sorted.
pub async fn book_many(fleet: &robots_proxy::measure::Fleet, n: usize) -> Vec<Duration> {
    use robots_proxy::measure::Booking;
    let interval = Duration::from_secs(1);
    let mut took = Vec::new();
    for i in 0..n {
        let key = format!("http://origin{i}.example:80 bot");
        let started = Instant::now();
        let booked = fleet
            .book(&key, interval, Duration::from_secs(10), 0)
            .await
            .expect("booked");
        took.push(started.elapsed());
        assert_eq!(booked, Booking::Wait(Duration::ZERO), "{key}");
    }
    took.sort();
    took
}

/// The median and the 99th percentile of `sorted` (not empty).
pub fn p50_p99(sorted: &[Duration]) -> (Duration, Duration) {
    (sorted[sorted.len() / 2], sorted[sorted.len() * 99 / 100])
}
