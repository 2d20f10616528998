//! Redis memory and round trips of fleet mode, for the README's scale on
//! paper.
//!
//! Starts nothing: give it a Redis (`REDIS=redis://127.0.0.1:6379/0`, an
//! empty database; it is flushed first). Stores ORIGINS (default 100,000)
//! shared robots.txt entries as a fleet node does (the corpus's files
//! cycled, deflate-compressed, with an entry description of the size the
//! proxy writes) and as many Crawl-delay schedule keys, then reads Redis's
//! `used_memory` and reports bytes per origin for each kind of key, and
//! the round trips of a booking, a shared look and a store (p50, p99);
//! then a `max_in_flight` lease taken and given back per origin, and a
//! tenth of the origins' response-time lists (`latency_factor`) filled,
//! their round trips and bytes per list.
//!
//!   redis-server --port 6390 --save '' --appendonly no &
//!   REDIS=redis://127.0.0.1:6390/0 cargo run --release --example fleet_memory
//!
//! The corpus directory defaults to ../shared/bench-data/corpus beside the
//! repository (then /work/shared/bench-data/corpus); ROBOTS_CORPUS
//! overrides it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use robots_proxy::measure::{
    Booking, Fleet, FleetSettings, Leased, Look, OnUnavailable, RedisTarget, Take, Text,
};

fn corpus() -> Vec<bytes::Bytes> {
    let dir = std::env::var_os("ROBOTS_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let beside =
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/bench-data/corpus");
            if beside.is_dir() {
                beside
            } else {
                PathBuf::from("/work/shared/bench-data/corpus")
            }
        });
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    files
        .iter()
        .filter_map(|p| std::fs::read(p).ok().map(bytes::Bytes::from))
        .collect()
}

async fn used_memory(url: &str) -> u64 {
    let client = redis::Client::open(url).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory")
}

fn pct(v: &mut [Duration], p: usize) -> Duration {
    v.sort();
    v[(v.len() * p / 100).min(v.len() - 1)]
}

#[tokio::main]
async fn main() {
    let url = std::env::var("REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379/0".into());
    let origins: usize = std::env::var("ORIGINS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    {
        let client = redis::Client::open(url.as_str()).expect("url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let _: () = redis::cmd("FLUSHDB")
            .query_async(&mut conn)
            .await
            .expect("FLUSHDB");
    }
    let fleet = Fleet::new(&FleetSettings {
        redis: RedisTarget::Server(url.clone()),
        name: "default".into(),
        node: "robots-1.example:3128".into(),
        timeout: Duration::from_secs(5),
        on_unavailable: OnUnavailable::Refuse,
        keys: None,
    })
    .expect("fleet");
    let files = corpus();
    let text_bytes: usize = files.iter().map(bytes::Bytes::len).sum();
    println!(
        "{} corpus files, mean {} bytes",
        files.len(),
        text_bytes / files.len().max(1)
    );
    let day = Duration::from_secs(86_400);
    let before = used_memory(&url).await;
    let (mut stores, mut looks) = (Vec::new(), Vec::new());
    for i in 0..origins {
        let origin = format!("https://www{i}.site-{i}.example");
        // The description the proxy stores: its kept entry, the node and
        // the fetch's evidence.
        let meta = format!(
            r#"{{"origin":"{origin}","state":"fresh","reason":null,"status":200,"fetched_at_ms":1795000000000,"expires_at_ms":1795086400000,"sha256":"{:064x}","failures":0,"node":"robots-1.example:3128","evidence":{{"url":"{origin}/robots.txt","final_url":"{origin}/robots.txt","content_type":"text/plain","etag":"\"5f2a-61c0e\"","last_modified":"Mon, 02 Nov 2026 10:00:00 GMT"}}}}"#,
            i
        );
        let started = Instant::now();
        let look = fleet
            .look_robots(&origin, Take::IfNotFresh, Duration::from_secs(10), 1 << 20)
            .await;
        let Ok(Look::Lead(None, lease)) = look else {
            panic!("{look:?}")
        };
        let stored = fleet
            .store_robots(
                &origin,
                &lease,
                meta.as_bytes(),
                Text::Set(files[i % files.len()].clone()),
                day,
                Duration::from_secs(30 * 86_400),
            )
            .await;
        assert_eq!(stored, Ok(true));
        stores.push(started.elapsed());
        if i % 10 == 0 {
            let started = Instant::now();
            let look = fleet
                .look_robots(&origin, Take::No, Duration::from_secs(10), 1 << 20)
                .await;
            looks.push(started.elapsed());
            assert!(matches!(look, Ok(Look::Fresh(_))));
        }
    }
    let robots = used_memory(&url).await;
    let mut books = Vec::new();
    for i in 0..origins {
        let key = format!("https://www{i}.site-{i}.example:443 examplebot");
        let started = Instant::now();
        let booked = fleet
            .book(&key, Duration::from_secs(10), Duration::from_secs(600), 64)
            .await
            .expect("booked");
        books.push(started.elapsed());
        assert!(matches!(booked, Booking::Wait(_)));
    }
    let schedules = used_memory(&url).await;
    let per = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / origins as f64;
    println!(
        "{origins} origins: robots.txt entries {:.0} bytes each in Redis, Crawl-delay schedule keys {:.0} bytes each",
        per(before, robots),
        per(robots, schedules)
    );
    println!(
        "round trips: look+lease+store p50 {:?} p99 {:?}; look of a stored entry p50 {:?} p99 {:?}; booking p50 {:?} p99 {:?}",
        pct(&mut stores, 50),
        pct(&mut stores, 99),
        pct(&mut looks, 50),
        pct(&mut looks, 99),
        pct(&mut books, 50),
        pct(&mut books, 99)
    );
    let mut leases = Vec::new();
    for i in 0..origins {
        let origin = format!("https://www{i}.site-{i}.example:443");
        let id = fleet.lease_id();
        let started = Instant::now();
        let leased = fleet
            .lease(&origin, 4, &id, Duration::from_secs(5))
            .await
            .expect("leased");
        fleet.release_lease(&origin, &id).await.expect("released");
        leases.push(started.elapsed());
        assert_eq!(leased, Leased::Yes(1));
    }
    let lists = origins / 10;
    let mut samples = Vec::new();
    let before_lists = used_memory(&url).await;
    for i in 0..lists {
        let origin = format!("https://www{i}.site-{i}.example:443");
        for s in 0..15u64 {
            let started = Instant::now();
            fleet
                .record_ttfb(&origin, Duration::from_micros(20_000 + 997 * s))
                .await
                .expect("recorded");
            samples.push(started.elapsed());
        }
    }
    let after_lists = used_memory(&url).await;
    println!(
        "max_in_flight lease taken and given back p50 {:?} p99 {:?}; response time recorded (15 kept) p50 {:?} p99 {:?}, {:.0} bytes per origin's list",
        pct(&mut leases, 50),
        pct(&mut leases, 99),
        pct(&mut samples, 50),
        pct(&mut samples, 99),
        after_lists.saturating_sub(before_lists) as f64 / lists.max(1) as f64
    );
}
