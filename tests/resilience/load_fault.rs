//! Load with faults: many keep-alive client connections through the proxy
//! to loopback origins that reset, hang on, or answer garbage to about 1% of
//! requests, with a known share of requests aimed at disallowed paths.
//!
//! Checks: every request gets an answer (no hang) and exactly the status its
//! URL calls for; every blocked request has exactly one audit line; no
//! disallowed request reaches an origin; each robots.txt is fetched once;
//! the proxy still answers afterwards; RSS comes back near its baseline.
//!
//! Size: LOAD_FAULT_REQUESTS (default 2000) over LOAD_FAULT_CONNECTIONS
//! (default 50), in LOAD_FAULT_WAVES (default 2). The full run is
//! `bench/load-fault` (20,000 over 200, release).
//!
//! RSS is the whole test process's: the origins' per-path hit counters and
//! the client's bookkeeping grow by roughly 1 MiB per 10,000 requests, so
//! the bound is for leaks of the proxy's own, not a measurement of it.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::support::faulty::{Fault, FaultyOrigin, Plan};
use crate::support::{Proxy, admin, metric, status_kib};

/// Normal origins (robots.txt served) and the one whose robots.txt fails.
const ORIGINS: usize = 4;
/// Upstream response timeout: hung requests become 504 after it.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(1);
/// No request may take longer than this (no-hang bound, not a speed goal).
const REQUEST_LIMIT: Duration = Duration::from_secs(30);
/// Leak check: RSS after the run must be below baseline + this.
const RSS_SLACK_KIB: u64 = 64 * 1024;

const ROBOTS: &str = "User-agent: *\n\
                      Disallow: /private/\n\
                      Allow: /private/public-ok/\n\
                      Disallow: /*.pdf$\n";

/// What one request is and what must come of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    /// Allowed, origin answers 200.
    Ok,
    /// Allowed by the Allow rule inside a disallowed directory.
    AllowRule,
    /// Disallowed by `/private/` or `/*.pdf$`: 403, never forwarded.
    Disallowed,
    /// To the origin whose robots.txt cannot be fetched: 503.
    Unreachable,
    /// Origin resets the connection: 502.
    Reset,
    /// Origin never answers: 504.
    Hang,
    /// Origin answers garbage: 502.
    Garbage,
}

impl Kind {
    fn expected_status(self) -> u16 {
        match self {
            Kind::Ok | Kind::AllowRule => 200,
            Kind::Disallowed => 403,
            Kind::Unreachable => 503,
            Kind::Reset | Kind::Garbage => 502,
            Kind::Hang => 504,
        }
    }
    fn blocked(self) -> bool {
        matches!(self, Kind::Disallowed | Kind::Unreachable)
    }
}

/// The fault an allowed request id meets: 1 in 100 in all.
fn fault_of(id: usize) -> Kind {
    match id % 300 {
        150 => Kind::Reset,
        151 => Kind::Hang,
        152 => Kind::Garbage,
        _ => Kind::Ok,
    }
}

/// Request `id`: its kind and its path (unique per id).
fn request_for(id: usize) -> (Kind, usize, String) {
    let origin = id % ORIGINS;
    match id % 100 {
        0 | 1 => (Kind::Unreachable, ORIGINS, format!("/page/{id}")),
        2..=6 => (Kind::Disallowed, origin, format!("/private/{id}")),
        7..=11 => (Kind::Disallowed, origin, format!("/files/{id}.pdf")),
        12 | 13 => (Kind::AllowRule, origin, format!("/private/public-ok/{id}")),
        // Not `$`-anchored at .pdf: the query follows.
        14 => (Kind::Ok, origin, format!("/files/{id}.pdf?v=1")),
        _ => (fault_of(id), origin, format!("/page/{id}?q={id}")),
    }
}

/// The body the origin sends for an allowed path.
fn body_for(path: &str) -> String {
    format!("ok {path}\n")
}

/// The origin's side of [`request_for`]: the fault by the id in the path.
fn origin_plan() -> Plan {
    Arc::new(|path: &str| {
        if path == "/robots.txt" {
            return Fault::Ok(ROBOTS.to_string());
        }
        let id: Option<usize> = path
            .strip_prefix("/page/")
            .and_then(|rest| rest.split('?').next())
            .and_then(|n| n.parse().ok());
        match id.map(fault_of) {
            Some(Kind::Reset) => Fault::Reset,
            Some(Kind::Hang) => Fault::Hang,
            Some(Kind::Garbage) => Fault::Garbage,
            _ => Fault::Ok(body_for(path)),
        }
    })
}

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, got {v:?}")),
        Err(_) => default,
    }
}

#[derive(Default)]
struct Outcomes {
    /// (kind, status) -> count
    by_kind: BTreeMap<(Kind, u16), usize>,
    /// status -> count
    by_status: BTreeMap<u16, usize>,
    /// Requests whose answer was not the one their URL calls for.
    wrong: Vec<String>,
    /// Client-side failures: no response at all.
    failures: Vec<String>,
    /// URL -> kind, for the blocked ones.
    blocked_urls: HashMap<String, Kind>,
    reconnects: usize,
}

type Sender = SendRequest<Empty<Bytes>>;

async fn connect(proxy: SocketAddr) -> Result<Sender, String> {
    let stream = TcpStream::connect(proxy)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(conn);
    Ok(sender)
}

/// One client connection: takes request ids until `end`.
async fn client_loop(
    proxy: SocketAddr,
    urls: Arc<Vec<String>>,
    next: Arc<AtomicUsize>,
    end: usize,
    outcomes: Arc<Mutex<Outcomes>>,
) {
    let mut sender: Option<Sender> = None;
    let mut used = false;
    loop {
        let id = next.fetch_add(1, Ordering::Relaxed);
        if id >= end {
            return;
        }
        let (kind, _, _) = request_for(id);
        let url = &urls[id];
        // A usable connection: reuse (keep-alive) or open a new one.
        let ready = match sender.as_mut() {
            Some(s) => s.ready().await.is_ok(),
            None => false,
        };
        if !ready {
            if used {
                outcomes.lock().expect("outcomes").reconnects += 1;
            }
            match connect(proxy).await {
                Ok(s) => sender = Some(s),
                Err(e) => {
                    outcomes
                        .lock()
                        .expect("outcomes")
                        .failures
                        .push(format!("{url}: {e}"));
                    continue;
                }
            }
        }
        used = true;
        let Some(s) = sender.as_mut() else { continue };
        let req = Request::get(url.as_str())
            .body(Empty::<Bytes>::new())
            .expect("request");
        let result = tokio::time::timeout(REQUEST_LIMIT, async {
            let resp = s.send_request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("body: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        })
        .await;
        let mut o = outcomes.lock().expect("outcomes");
        match result {
            Err(_) => {
                o.failures
                    .push(format!("{url}: no answer within {REQUEST_LIMIT:?}"));
                sender = None;
            }
            Ok(Err(e)) => {
                o.failures.push(format!("{url}: {e}"));
                sender = None;
            }
            Ok(Ok((status, body))) => {
                *o.by_kind.entry((kind, status)).or_default() += 1;
                *o.by_status.entry(status).or_default() += 1;
                if status != kind.expected_status() {
                    o.wrong.push(format!(
                        "{url} ({kind:?}): status {status}, expected {}",
                        kind.expected_status()
                    ));
                } else if status == 200 {
                    let (_, _, path) = request_for(id);
                    if body != body_for(&path).as_bytes() {
                        o.wrong.push(format!("{url}: wrong body {body:?}"));
                    }
                }
                if kind.blocked() {
                    o.blocked_urls.insert(url.clone(), kind);
                }
            }
        }
    }
}

/// Waits until the proxy has closed every client connection (the memory
/// they held given back).
async fn every_connection_closed(proxy: &Proxy) {
    proxy
        .until_metrics("every client connection to close", |t| {
            metric(t, "robots_proxy_open_connections") == Some(0.0)
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_with_faults_answers_every_request_and_blocks_and_audits_exactly() {
    let total = env_usize("LOAD_FAULT_REQUESTS", 2000);
    let connections = env_usize("LOAD_FAULT_CONNECTIONS", 50).max(1);
    let waves = env_usize("LOAD_FAULT_WAVES", 2).max(1);

    let mut origins = Vec::new();
    for _ in 0..ORIGINS {
        origins.push(FaultyOrigin::start(origin_plan()).await);
    }
    // robots.txt (and everything else) resets: the proxy answers 503.
    origins.push(FaultyOrigin::start(Arc::new(|_: &str| Fault::Reset)).await);
    let proxy = Proxy::start_with(|c| {
        admin(c);
        c.upstream.response_timeout = UPSTREAM_TIMEOUT;
        c.robots.fetch_timeout = Duration::from_secs(5);
    })
    .await;

    let urls: Arc<Vec<String>> = Arc::new(
        (0..total)
            .map(|id| {
                let (_, origin, path) = request_for(id);
                origins[origin].url(&path)
            })
            .collect(),
    );

    let rss_baseline = status_kib(None, "VmRSS");
    let rss_peak = Arc::new(AtomicUsize::new(rss_baseline as usize));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, on) = (rss_peak.clone(), sampling.clone());
        tokio::spawn(async move {
            while on.load(Ordering::Relaxed) {
                peak.fetch_max(status_kib(None, "VmRSS") as usize, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    // Waves (LOAD_FAULT_WAVES, default 2), each on fresh client connections:
    // RSS after the last wave near RSS after the first means memory does not
    // grow with requests.
    let outcomes = Arc::new(Mutex::new(Outcomes::default()));
    let mut elapsed = Duration::ZERO;
    let mut rss_after_wave = Vec::new();
    for wave in 0..waves {
        let (from, to) = (total * wave / waves, total * (wave + 1) / waves);
        let started = Instant::now();
        let next = Arc::new(AtomicUsize::new(from));
        let clients: Vec<_> = (0..connections)
            .map(|_| {
                tokio::spawn(client_loop(
                    proxy.addr,
                    urls.clone(),
                    next.clone(),
                    to,
                    outcomes.clone(),
                ))
            })
            .collect();
        // Generous no-hang bound for a whole wave.
        let limit = Duration::from_secs(120) + Duration::from_millis(20 * (to - from) as u64);
        let joined = tokio::time::timeout(limit, futures_util::future::join_all(clients)).await;
        assert!(joined.is_ok(), "a wave did not finish within {limit:?}");
        for j in joined.expect("joined") {
            j.expect("client task");
        }
        elapsed += started.elapsed();
        every_connection_closed(&proxy).await;
        rss_after_wave.push(status_kib(None, "VmRSS"));
    }
    // The proxy still answers, on a new connection.
    let after_ok = proxy.get(&origins[0].url("/page/after?q=after")).await;
    assert_eq!(after_ok.status, 200, "{}", after_ok.body);
    let after_blocked = proxy.get(&origins[1].url("/private/after")).await;
    assert_eq!(after_blocked.status, 403, "{}", after_blocked.body);

    every_connection_closed(&proxy).await;
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.await;
    let rss_after = status_kib(None, "VmRSS");
    let rss_hwm = status_kib(None, "VmHWM");
    let rss_peak = rss_peak.load(Ordering::Relaxed) as u64;

    let o = outcomes.lock().expect("outcomes");
    let answered: usize = o.by_status.values().sum();
    println!(
        "load-fault: {total} requests over {connections} connections in {:.2} s: {:.0} requests/s",
        elapsed.as_secs_f64(),
        answered as f64 / elapsed.as_secs_f64()
    );
    println!(
        "  by status: {}",
        o.by_status
            .iter()
            .map(|(s, n)| format!("{s}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  by kind:   {}",
        o.by_kind
            .iter()
            .map(|((k, s), n)| format!("{k:?}->{s}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  client reconnects: {}, no answer: {}, wrong answer: {}",
        o.reconnects,
        o.failures.len(),
        o.wrong.len()
    );
    let origin_connections: Vec<usize> = origins.iter().map(|o| o.connections()).collect();
    println!("  origin connections accepted: {origin_connections:?}");
    println!(
        "  RSS (whole test process: proxy, origins, clients): baseline {:.1} MiB, \
         peak {:.1} MiB (VmHWM {:.1} MiB), after each wave [{}] MiB, after {:.1} MiB",
        rss_baseline as f64 / 1024.0,
        rss_peak as f64 / 1024.0,
        rss_hwm as f64 / 1024.0,
        rss_after_wave
            .iter()
            .map(|k| format!("{:.1}", *k as f64 / 1024.0))
            .collect::<Vec<_>>()
            .join(", "),
        rss_after as f64 / 1024.0
    );

    // Every request got an answer, the one its URL calls for.
    assert!(
        o.failures.is_empty(),
        "{} requests got no answer, e.g. {:?}",
        o.failures.len(),
        &o.failures[..o.failures.len().min(5)]
    );
    assert_eq!(answered, total);
    assert!(
        o.wrong.is_empty(),
        "{} wrong answers, e.g. {:?}",
        o.wrong.len(),
        &o.wrong[..o.wrong.len().min(5)]
    );

    // Exactly one audit line per blocked request, matched by URL, none else.
    let audit = proxy.audit();
    let mut audited: HashMap<String, Vec<String>> = HashMap::new();
    for line in &audit {
        let url = line["url"].as_str().expect("audit url").to_string();
        let decision = line["decision"].as_str().expect("decision").to_string();
        audited.entry(url).or_default().push(decision);
    }
    for (url, kind) in &o.blocked_urls {
        let want = match kind {
            Kind::Disallowed => "disallowed",
            _ => "unreachable",
        };
        assert_eq!(
            audited.get(url).map(Vec::as_slice),
            Some(&[want.to_string()][..]),
            "audit lines for {url}"
        );
    }
    // The one extra blocked request is the after-check.
    assert_eq!(audit.len(), o.blocked_urls.len() + 1, "audit line count");

    // No disallowed request reached an origin; every allowed one did, once.
    let mut forwarded = 0;
    for (i, origin) in origins.iter().enumerate() {
        let hits = origin.all_hits();
        assert_eq!(
            hits.get("/robots.txt"),
            Some(&1),
            "origin {i} robots.txt fetches"
        );
        for (path, n) in &hits {
            let bare = path.split('?').next().unwrap_or_default();
            let disallowed = (bare.starts_with("/private/")
                && !bare.starts_with("/private/public-ok/"))
                || path.ends_with(".pdf");
            assert!(!disallowed, "origin {i} saw disallowed {path} ({n} times)");
            if i == ORIGINS {
                assert_eq!(path, "/robots.txt", "unreachable origin saw {path}");
            }
            if path != "/robots.txt" {
                assert_eq!(*n, 1, "origin {i} saw {path} {n} times");
                forwarded += 1;
            }
        }
    }
    let allowed = (0..total)
        .filter(|&id| !request_for(id).0.blocked())
        .count();
    assert_eq!(
        forwarded,
        allowed + 1,
        "requests forwarded (with the after-check)"
    );

    // Memory comes back near the baseline (a leak check, not a benchmark).
    assert!(
        rss_after < rss_baseline + RSS_SLACK_KIB,
        "RSS after the run {rss_after} KiB vs baseline {rss_baseline} KiB"
    );
}
