//! `politeness.max_in_flight` and `politeness.latency_factor`, on one
//! proxy and across a fleet on a real Redis: an origin that counts the
//! requests it has open at once never has more than the cap, whatever
//! node they come through; a node killed while holding a lease frees it
//! within the lease time; an origin whose responses slow down is asked
//! at most once per factor × its new response time. Skipped, with a
//! message, without `redis-server`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use robots_proxy::config::{FleetOnUnavailable, RedisTarget};

use super::fleet::TOLERANCE;
use crate::support::binary::Setup;
use crate::support::fleet::{self, gaps_of, on};
use crate::support::redis::{Redis, bare_fleet};
use crate::support::{Proxy, metric, need, serve_tcp, until, until_within};

/// An origin that counts the requests it has open (from their arrival
/// until their response is handed to the connection, or the connection
/// is dropped), keeps the most seen at once and when each arrived, and
/// answers after a delay that can be changed (`/stuck…`: a minute;
/// `/trickle…`: its head at once, then its body over 300 ms). robots.txt
/// allows everything, at once, uncounted.
struct Counting {
    addr: SocketAddr,
    open: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    arrivals: Arc<Mutex<Vec<Instant>>>,
    delay_ms: Arc<AtomicU64>,
}

/// One open request: counted until dropped.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Counting {
    async fn start(delay: Duration) -> Counting {
        Counting::with_robots("User-agent: *\nAllow: /\n", delay).await
    }

    /// [`Counting::start`] with `robots` as its robots.txt.
    async fn with_robots(robots: &'static str, delay: Duration) -> Counting {
        let open = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let arrivals: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let delay_ms = Arc::new(AtomicU64::new(delay.as_millis() as u64));
        let (o, m, a, d) = (
            open.clone(),
            most.clone(),
            arrivals.clone(),
            delay_ms.clone(),
        );
        let addr = serve_tcp(move |stream| {
            let (o, m, a, d) = (o.clone(), m.clone(), a.clone(), d.clone());
            async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (o, m, a, d) = (o.clone(), m.clone(), a.clone(), d.clone());
                    async move {
                        let path = req.uri().path().to_string();
                        if path == "/robots.txt" {
                            let robots = Bytes::from_static(robots.as_bytes());
                            return Ok::<_, std::convert::Infallible>(Response::new(
                                Full::new(robots).boxed(),
                            ));
                        }
                        if path.starts_with("/trickle") {
                            a.lock().expect("arrivals").push(Instant::now());
                            let chunks = futures_util::stream::unfold(0, |i| async move {
                                if i == 3 {
                                    return None;
                                }
                                tokio::time::sleep(Duration::from_millis(100)).await;
                                let frame = hyper::body::Frame::data(Bytes::from_static(b"chunk "));
                                Some((Ok::<_, std::convert::Infallible>(frame), i + 1))
                            });
                            return Ok(Response::new(StreamBody::new(chunks).boxed()));
                        }
                        let now = o.fetch_add(1, Ordering::SeqCst) + 1;
                        let _open = Open(o.clone());
                        m.fetch_max(now, Ordering::SeqCst);
                        a.lock().expect("arrivals").push(Instant::now());
                        let wait = if path.starts_with("/stuck") {
                            Duration::from_secs(60)
                        } else {
                            Duration::from_millis(d.load(Ordering::SeqCst))
                        };
                        tokio::time::sleep(wait).await;
                        let page = Bytes::from(format!("page {path}"));
                        Ok(Response::new(Full::new(page).boxed()))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            }
        })
        .await;
        Counting {
            addr,
            open,
            most,
            arrivals,
            delay_ms,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }

    fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Arrival times from the `skip`-th on, in order.
    fn arrived_from(&self, skip: usize) -> Vec<Instant> {
        let mut at = self.arrivals.lock().expect("arrivals").clone();
        at.sort();
        at.split_off(skip.min(at.len()))
    }

    fn arrived(&self) -> usize {
        self.arrivals.lock().expect("arrivals").len()
    }

    /// The key of this origin's leases in a fleet named `test`.
    fn lease_key(&self) -> String {
        format!("robots-proxy:test:{{http://{}}}:inflight", self.addr)
    }
}

/// Sends `n` requests for `/p<i>` at once, round-robin over `nodes`; each
/// must be answered 200.
async fn all_at_once(origin: &Counting, nodes: &[Proxy], prefix: &str, n: usize) {
    let sent = (0..n).map(|i| {
        let url = origin.url(&format!("{prefix}{i}"));
        let node = &nodes[i % nodes.len()];
        async move {
            let r = node.get(&url).await;
            assert_eq!(r.status, 200, "{url}: {}", r.body);
        }
    });
    futures_util::future::join_all(sent).await;
}

/// The sum over `nodes` of the series `name` of `/metrics`.
async fn summed(nodes: &[Proxy], name: &str) -> f64 {
    let mut sum = 0.0;
    for n in nodes {
        sum += metric(&n.metrics().await, name).unwrap_or(0.0);
    }
    sum
}

/// A proxy alone with `max_in_flight = 2`: ten requests at once reach a
/// slow origin two at a time, the others waiting their turn; in reject
/// mode the ones over the cap get 429 with `Retry-After`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alone_at_most_max_in_flight_requests_reach_an_origin_at_once() {
    let origin = Counting::start(Duration::from_millis(150)).await;
    let node = fleet::node(None, |c| c.politeness.max_in_flight = 2).await;
    let started = Instant::now();
    all_at_once(&origin, std::slice::from_ref(&node), "/p", 10).await;
    assert_eq!(
        origin.most(),
        2,
        "never more than two open, and two at once"
    );
    // Five rounds of two.
    assert!(started.elapsed() >= Duration::from_millis(5 * 150));
    let text = node.metrics().await;
    assert!(
        metric(&text, "robots_proxy_in_flight_waited_total").unwrap_or(0.0) >= 1.0,
        "{text}"
    );
    assert_eq!(metric(&text, "robots_proxy_in_flight_leases"), Some(0.0));

    let reject = fleet::node(None, |c| {
        c.politeness.max_in_flight = 1;
        c.politeness.mode = robots_proxy::config::PolitenessMode::Reject;
    })
    .await;
    let held = {
        let url = origin.url("/stuck-held");
        let reject = &reject;
        async move { reject.get(&url).await }
    };
    let refused = async {
        until("the slow request to reach the origin", || async {
            (origin.open() == 1).then_some(())
        })
        .await;
        let r = reject.get(&origin.url("/refused")).await;
        assert_eq!(r.status, 429, "{}", r.body);
        assert!(r.header("retry-after").is_some(), "{:?}", r.headers);
        assert!(r.body.contains("max_in_flight"), "{}", r.body);
    };
    tokio::select! {
        _ = held => panic!("the slow request was answered"),
        () = refused => {}
    }
}

/// A lease is held until the response body has been read to its end, not
/// just to its head: with `max_in_flight = 1`, the second of two requests
/// for a body that trickles in over 300 ms reaches the origin once the
/// first's body is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_held_until_the_response_body_ends() {
    let origin = Counting::start(Duration::ZERO).await;
    let node = fleet::node(None, |c| c.politeness.max_in_flight = 1).await;
    let (url_a, url_b) = (origin.url("/trickle-a"), origin.url("/trickle-b"));
    let (a, b) = tokio::join!(node.get(&url_a), node.get(&url_b));
    assert_eq!((a.status, b.status), (200, 200));
    assert_eq!(a.body, "chunk chunk chunk ");
    let gaps = gaps_of(&origin.arrived_from(0));
    eprintln!("two requests for a 300 ms body, max_in_flight 1: gap {gaps:?}");
    assert!(gaps[0] >= Duration::from_millis(295), "{gaps:?}");
    let text = node.metrics().await;
    assert_eq!(metric(&text, "robots_proxy_in_flight_leases"), Some(0.0));
    // /explain shows the cap and what is in flight now.
    let explained = node.explain(&url_a).await;
    assert_eq!(
        explained["politeness"]["in_flight"],
        serde_json::json!({"now": 0, "max": 1, "fleet_wide": false}),
        "{explained}"
    );
}

/// `max_in_flight = 2` and a Crawl-delay of 0.5 s together, on an origin
/// answering in 1.3 s: six requests at once are sent never more than two
/// open and never closer than the interval, though some wait for a place
/// and then for a slot (sent at 0, 0.5, 1.3, 1.8, 2.6 and 3.1 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_and_the_crawl_delay_hold_together() {
    let origin = Counting::with_robots(
        "User-agent: *\nCrawl-delay: 0.5\n",
        Duration::from_millis(1300),
    )
    .await;
    let node = fleet::node(None, |c| c.politeness.max_in_flight = 2).await;
    all_at_once(&origin, std::slice::from_ref(&node), "/p", 6).await;
    let gaps = gaps_of(&origin.arrived_from(0));
    eprintln!("Crawl-delay 0.5 s and max_in_flight 2, 1.3 s answers: gaps {gaps:?}");
    assert_eq!(origin.most(), 2);
    let interval = Duration::from_millis(500);
    assert!(gaps.iter().all(|g| *g >= interval - TOLERANCE), "{gaps:?}");
    let span: Duration = gaps.iter().sum();
    // The third waits for the first to end, the fifth for the third.
    assert!(
        span >= Duration::from_millis(2 * 1300 + 500) - TOLERANCE,
        "{gaps:?}"
    );
}

/// Redis unavailable with `max_in_flight = 2` over three live nodes: with
/// `on_unavailable = "local"` each node keeps to its share (1, 1 and 0:
/// the third answers 503), so the origin still never has more than two
/// open; with `"refuse"`, 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_redis_is_unavailable_each_node_keeps_to_its_share_of_the_cap() {
    let mut redis = need!(Redis::start().await);
    let origin = Counting::start(Duration::from_millis(150)).await;
    let local = on(
        &redis,
        Duration::from_millis(300),
        FleetOnUnavailable::Local,
    );
    let nodes = fleet::nodes(3, Some(local), |c| {
        c.politeness.max_in_flight = 2;
        c.politeness.max_wait = Duration::from_secs(30);
    })
    .await;
    fleet::until_all(&nodes, "three live nodes", |t| {
        metric(t, "robots_proxy_fleet_live_nodes") == Some(3.0)
    })
    .await;
    // Of a fleet of its own: the three above keep counting three.
    let refusing = fleet::config(
        RedisTarget::Server(redis.url()),
        "refusing",
        Duration::from_millis(300),
        FleetOnUnavailable::Refuse,
    );
    let refuse = fleet::node(Some(refusing), |c| c.politeness.max_in_flight = 2).await;
    redis.stop();
    let sent = (0..9).map(|i| {
        let url = origin.url(&format!("/p{i}"));
        let node = &nodes[i % 3];
        async move { (i % 3, node.get(&url).await.status) }
    });
    let answered = futures_util::future::join_all(sent).await;
    let mut per_node = [Vec::new(), Vec::new(), Vec::new()];
    for (n, status) in answered {
        per_node[n].push(status);
    }
    eprintln!(
        "Redis down, max_in_flight 2 over 3 nodes: {per_node:?}, most open {}",
        origin.most()
    );
    assert!(origin.most() <= 2, "{}", origin.most());
    let refused: Vec<_> = per_node
        .iter()
        .filter(|s| s.iter().all(|&s| s == 503))
        .collect();
    let served: Vec<_> = per_node
        .iter()
        .filter(|s| s.iter().all(|&s| s == 200))
        .collect();
    assert_eq!((refused.len(), served.len()), (1, 2), "{per_node:?}");
    let r = refuse.get(&origin.url("/refused")).await;
    assert_eq!(r.status, 503, "{}", r.body);
}

/// Three nodes of one fleet with `max_in_flight = 2`: twenty requests at
/// once, spread over the nodes, reach a slow origin never more than two
/// at a time; every lease is given back after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_a_fleet_at_most_max_in_flight_requests_reach_an_origin_at_once() {
    let redis = need!(Redis::start().await);
    let origin = Counting::start(Duration::from_millis(200)).await;
    let config = on(&redis, Duration::from_secs(1), FleetOnUnavailable::Refuse);
    let nodes = fleet::nodes(3, Some(config), |c| {
        c.politeness.max_in_flight = 2;
        c.politeness.max_wait = Duration::from_secs(30);
    })
    .await;
    let started = Instant::now();
    all_at_once(&origin, &nodes, "/p", 20).await;
    let took = started.elapsed();
    let waited = summed(&nodes, "robots_proxy_in_flight_waited_total").await;
    eprintln!(
        "20 requests over 3 nodes, max_in_flight 2, 200 ms each: {took:?}, most open {}, {waited} waited",
        origin.most()
    );
    assert_eq!(
        origin.most(),
        2,
        "never more than two open, and two at once"
    );
    assert!(took >= Duration::from_millis(10 * 200), "{took:?}");
    assert!(waited >= 1.0);
    until("every lease given back", || async {
        (redis.int(&["ZCARD", &origin.lease_key()]).await == 0).then_some(())
    })
    .await;
    let stats = redis.commandstats().await;
    assert!(stats.contains("cmdstat_zcard:"), "{stats}");
}

/// A node killed (SIGKILL) while a request holds its origin's only lease
/// (`max_in_flight = 1`): the lease is no longer renewed, and another
/// node's request goes once it expires, within the lease time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_frees_its_lease_within_the_lease_time() {
    use robots_proxy::measure::{LEASE_FOR, RENEW_EVERY};
    let redis = need!(Redis::start().await);
    let origin = Counting::start(Duration::ZERO).await;
    let extra = format!(
        "[politeness]\nmax_in_flight = 1\n[fleet]\nunauthenticated = true\nredis = {:?}\nname = \"test\"\nnode = \"doomed\"\n",
        redis.url()
    );
    let (_setup, doomed) = Setup::running("test-bot", &extra).await;
    // A request written on a connection of its own and left open: its
    // answer never comes (the node is killed first).
    let mut held = tokio::net::TcpStream::connect(doomed.addr)
        .await
        .expect("connect");
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\n\r\n",
        origin.url("/stuck"),
        origin.addr
    );
    tokio::io::AsyncWriteExt::write_all(&mut held, request.as_bytes())
        .await
        .expect("write");
    until("the doomed node's request to hold the lease", || async {
        (origin.open() == 1 && redis.int(&["ZCARD", &origin.lease_key()]).await == 1).then_some(())
    })
    .await;
    // Renewed at least once: the lease outlives a request longer than it.
    let first = lease_expiry(&redis, &origin).await;
    until_within("the lease to be renewed", LEASE_FOR, || async {
        (lease_expiry(&redis, &origin).await > first).then_some(())
    })
    .await;
    let config = on(&redis, Duration::from_secs(1), FleetOnUnavailable::Refuse);
    let other = fleet::node(Some(config), |c| {
        c.politeness.max_in_flight = 1;
        c.politeness.max_wait = Duration::from_secs(30);
    })
    .await;
    doomed.signal("KILL");
    let killed = Instant::now();
    let r = other.get(&origin.url("/after")).await;
    let took = killed.elapsed();
    drop(held);
    eprintln!("lease of a killed node freed after {took:?} (lease time {LEASE_FOR:?})");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(took <= LEASE_FOR + Duration::from_secs(1), "{took:?}");
    assert!(
        took >= LEASE_FOR - RENEW_EVERY - Duration::from_millis(500),
        "freed before its lease ran out: {took:?}"
    );
}

/// When the one lease on `origin` expires (ms of Redis's clock; 0: none).
async fn lease_expiry(redis: &Redis, origin: &Counting) -> u64 {
    let scores = redis
        .strings(&["ZRANGE", &origin.lease_key(), "0", "0", "WITHSCORES"])
        .await;
    scores.get(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The response-time floor, alone and in a fleet of three: an origin
/// that answers in 10 ms, then in 300 ms, is asked, once the median has
/// moved, at most once per `latency_factor` (2) × 300 ms, though requests
/// come all at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slower_origin_is_asked_less_often_alone_and_across_a_fleet() {
    let redis = need!(Redis::start().await);
    let alone = fleet::nodes(1, None, |c| c.politeness.latency_factor = 2.0).await;
    let config = on(&redis, Duration::from_secs(1), FleetOnUnavailable::Refuse);
    let fleet = fleet::nodes(3, Some(config), |c| {
        c.politeness.latency_factor = 2.0;
        c.politeness.max_wait = Duration::from_secs(30);
    })
    .await;
    for (name, nodes) in [("alone", &alone), ("fleet", &fleet)] {
        let origin = Counting::start(Duration::from_millis(10)).await;
        // 15 fast responses, every node among them: a floor of 20 ms.
        for i in 0..15 {
            let r = nodes[i % nodes.len()].get(&origin.url("/fast")).await;
            assert_eq!(r.status, 200);
        }
        // Eight slow ones move the median of the last 15 to 300 ms; two
        // more through each node: in a fleet a node reads the fleet's
        // median after each response (a Redis call of its own, after the
        // answer), so each has read the new one by its last but one.
        origin.set_delay(Duration::from_millis(300));
        for i in 0..8 + 2 * nodes.len() {
            let r = nodes[i % nodes.len()].get(&origin.url("/slow-down")).await;
            assert_eq!(r.status, 200);
        }
        let before = origin.arrived();
        let started = Instant::now();
        all_at_once(&origin, nodes, "/p", 6).await;
        let gaps = gaps_of(&origin.arrived_from(before));
        eprintln!(
            "{name}: six requests at once to an origin answering in 300 ms, latency_factor 2: \
             gaps {gaps:?}, {:?} in all",
            started.elapsed()
        );
        assert_eq!(gaps.len(), 5);
        // Each slot 600 ms after the last; each arrival late by up to the
        // forwarding jitter of a busy machine.
        let floor = Duration::from_millis(600);
        assert!(
            gaps.iter().all(|g| *g >= floor - TOLERANCE),
            "{name}: {gaps:?}"
        );
        let span: Duration = gaps.iter().sum();
        assert!(span >= floor * 5 - TOLERANCE, "{name}: {gaps:?}");
        // /explain names the floor as the interval's cause.
        let explained = nodes[0].explain(&origin.url("/p/0")).await;
        let politeness = &explained["politeness"];
        assert_eq!(politeness["cause"], "latency", "{name}: {explained}");
        let floor_secs = politeness["latency_floor_secs"].as_f64().unwrap_or(0.0);
        assert!((0.55..0.65).contains(&floor_secs), "{name}: {explained}");
    }
    let stats = redis.commandstats().await;
    assert!(stats.contains("cmdstat_lpush:"), "{stats}");
}

/// The cost of one `max_in_flight` lease on loopback Redis: 1000 leases
/// taken and given back, p50 and p99 printed (`--nocapture`; the figures
/// in docs/performance.md are a release build's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_latency_on_loopback_redis() {
    use robots_proxy::measure::Leased;
    let redis = need!(Redis::start().await);
    let fleet = bare_fleet(RedisTarget::Server(redis.url()), "lease", "lease-test");
    let mut took = Vec::new();
    for i in 0..1000 {
        let origin = format!("http://origin{}.example:80", i % 10);
        let id = fleet.lease_id();
        let started = Instant::now();
        let leased = fleet
            .lease(&origin, 2, &id, Duration::from_secs(1))
            .await
            .expect("leased");
        fleet.release_lease(&origin, &id).await.expect("released");
        took.push(started.elapsed());
        assert_eq!(leased, Leased::Yes(1));
    }
    // Full: the third of two waits until the first expires.
    let origin = "http://full.example:80";
    for _ in 0..2 {
        let id = fleet.lease_id();
        let leased = fleet.lease(origin, 2, &id, Duration::from_secs(1)).await;
        assert!(matches!(leased, Ok(Leased::Yes(_))), "{leased:?}");
    }
    let id = fleet.lease_id();
    match fleet.lease(origin, 2, &id, Duration::from_secs(1)).await {
        Ok(Leased::Full(2, wait)) => assert!(wait <= robots_proxy::measure::LEASE_FOR),
        other => panic!("{other:?}"),
    }
    took.sort();
    let (p50, p99) = fleet::p50_p99(&took);
    eprintln!(
        "max_in_flight lease, taken and given back, on loopback Redis: p50 {p50:?}, p99 {p99:?}"
    );
    until_within("nothing left", Duration::from_secs(1), || async {
        (redis
            .int(&[
                "ZCARD",
                "robots-proxy:lease:{http://origin0.example:80}:inflight",
            ])
            .await
            == 0)
            .then_some(())
    })
    .await;
}

/// A writer to Redis deletes an origin's leases while a node's requests
/// hold them: the node sends no more than `max_in_flight` itself, counts
/// the leases it finds gone (`robots_proxy_fleet_rejected_total{kind =
/// "lease"}`) and writes them back at their next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_deleted_in_redis_are_counted_and_written_back() {
    let redis = need!(Redis::start().await);
    let origin = Counting::start(Duration::from_millis(1700)).await;
    let config = on(&redis, Duration::from_secs(1), FleetOnUnavailable::Refuse);
    let node = fleet::node(Some(config), |c| {
        c.politeness.max_in_flight = 2;
        c.politeness.max_wait = Duration::from_secs(30);
    })
    .await;
    let node = Arc::new(node);
    let send = |i: usize| {
        let (node, url) = (node.clone(), origin.url(&format!("/p{i}")));
        tokio::spawn(async move { (node.get(&url).await.status, url) })
    };
    let held: Vec<_> = (0..2).map(send).collect();
    until("two requests to hold the leases", || async {
        (origin.open() == 2 && redis.int(&["ZCARD", &origin.lease_key()]).await == 2).then_some(())
    })
    .await;
    redis
        .command(&["DEL", &origin.lease_key()])
        .await
        .expect("del");
    // Redis now says none are in flight: the node's third waits its turn.
    let third = send(2);
    until("the leases to be written back", || async {
        (redis.int(&["ZCARD", &origin.lease_key()]).await == 2).then_some(())
    })
    .await;
    let rejected = metric(
        &node.metrics().await,
        "robots_proxy_fleet_rejected_total{kind=\"lease\"}",
    )
    .unwrap_or(0.0);
    assert!(rejected >= 2.0, "{rejected} leases found gone");
    for r in futures_util::future::join_all(held).await {
        let (status, url) = r.expect("request");
        assert_eq!(status, 200, "{url}");
    }
    let (status, url) = third.await.expect("request");
    assert!(matches!(status, 200 | 429 | 503 | 504), "{url}: {status}");
    assert_eq!(origin.most(), 2, "more than max_in_flight sent at once");
}
