//! Politeness limiter behaviour on tokio's paused clock: waits are timers
//! the runtime fires exactly when their time comes, so every assertion on
//! time is exact, and time moves only by `tokio::time::advance` or by the
//! limiter's own sleeps.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, advance};

use super::{Mode, Politeness, PolitenessSettings, RateLimited};

const KEY: &str = "https://example.com:443 examplebot";

fn politeness(mode: Mode) -> Arc<Politeness> {
    Arc::new(Politeness::new(PolitenessSettings {
        mode,
        default_interval: None,
        max_tracked: 1000,
        idle_evict_after: Duration::from_secs(60),
        max_crawl_delay: Duration::from_secs(60),
        signals: Default::default(),
    }))
}

fn delay(max_wait_ms: u64) -> Mode {
    Mode::Delay {
        max_wait: Duration::from_millis(max_wait_ms),
        max_queue: 0,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn delay_mode_spaces_sequential_requests() {
    let p = politeness(delay(5_000));
    let t0 = Instant::now();
    for i in 0..3u32 {
        let held = p.acquire(KEY, Some(0.2)).await.unwrap();
        assert_eq!(t0.elapsed(), ms(200) * i);
        assert_eq!(held, if i == 0 { Duration::ZERO } else { ms(200) });
    }
}

#[tokio::test(start_paused = true)]
async fn delay_mode_spaces_concurrent_requests_in_order() {
    let p = politeness(delay(5_000));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let p = Arc::clone(&p);
        tasks.push(tokio::spawn(async move {
            let held = p.acquire(KEY, Some(0.2)).await.unwrap();
            (t0.elapsed(), held)
        }));
    }
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.unwrap());
    }
    done.sort();
    for (i, (at, held)) in done.into_iter().enumerate() {
        assert_eq!(at, ms(200) * i as u32);
        assert_eq!(held, ms(200) * i as u32, "held from arrival to its slot");
    }
}

#[tokio::test(start_paused = true)]
async fn reject_mode_refuses_second_immediate_request() {
    let p = politeness(Mode::Reject);
    p.acquire(KEY, Some(0.5)).await.unwrap();
    let err = p.acquire(KEY, Some(0.5)).await.unwrap_err();
    assert_eq!(err.retry_after, ms(500));
    assert_eq!(err.retry_after_secs(), 1);
    // Another agent on the same origin is a different key.
    p.acquire("https://example.com:443 otherbot", Some(0.5))
        .await
        .unwrap();
    // A refusal books nothing: 1 ms before the slot it is still refused,
    // with 1 ms to wait; at the slot it goes.
    advance(ms(499)).await;
    let err = p.acquire(KEY, Some(0.5)).await.unwrap_err();
    assert_eq!(err.retry_after, ms(1));
    advance(ms(1)).await;
    assert_eq!(p.acquire(KEY, Some(0.5)).await, Ok(Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn delay_mode_refuses_at_once_past_max_wait() {
    let p = politeness(delay(100));
    p.acquire(KEY, Some(1.0)).await.unwrap();
    let t0 = Instant::now();
    let err: RateLimited = p.acquire(KEY, Some(1.0)).await.unwrap_err();
    assert_eq!(t0.elapsed(), Duration::ZERO, "refusal must not wait");
    assert_eq!(err.retry_after, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn queued_waiters_count_against_max_wait() {
    // interval 200 ms, max_wait 300 ms: slots at 0, 200 ms; a third request
    // would wait 400 ms, so it is refused although the key's "next free"
    // time on its own is only 200 ms away.
    let p = politeness(delay(300));
    let t0 = Instant::now();
    p.acquire(KEY, Some(0.2)).await.unwrap();
    let p2 = Arc::clone(&p);
    let second = tokio::spawn(async move { p2.acquire(KEY, Some(0.2)).await });
    // Let the second book its slot (the clock does not move).
    tokio::task::yield_now().await;
    assert_eq!(p.next_slot(KEY), Some((ms(200), ms(400))));
    let err = p.acquire(KEY, Some(0.2)).await.unwrap_err();
    assert_eq!(err.retry_after, ms(400));
    assert_eq!(second.await.unwrap(), Ok(ms(200)));
    assert_eq!(t0.elapsed(), ms(200));
}

#[tokio::test]
async fn no_delay_touches_no_state() {
    let p = politeness(Mode::Reject);
    for i in 0..100 {
        p.acquire(&format!("https://h{i}.example:443 bot"), None)
            .await
            .unwrap();
        p.acquire("https://same.example:443 bot", Some(0.0))
            .await
            .unwrap();
    }
    assert_eq!(p.tracked(), 0);
}

#[tokio::test(start_paused = true)]
async fn default_interval_applies_without_crawl_delay() {
    let p = Politeness::new(PolitenessSettings {
        mode: Mode::Reject,
        default_interval: Some(ms(300)),
        ..PolitenessSettings::default()
    });
    p.acquire(KEY, None).await.unwrap();
    let err = p.acquire(KEY, None).await.unwrap_err();
    assert_eq!(err.retry_after, ms(300));
    // A smaller Crawl-delay does not undercut the default.
    assert_eq!(
        p.acquire(KEY, Some(0.01)).await,
        Err(RateLimited {
            retry_after: ms(300)
        })
    );
}

#[tokio::test(start_paused = true)]
async fn huge_crawl_delay_is_clamped() {
    let p = Politeness::new(PolitenessSettings {
        mode: Mode::Reject,
        max_crawl_delay: Duration::from_secs(2),
        ..PolitenessSettings::default()
    });
    p.acquire(KEY, Some(86_400.0)).await.unwrap();
    let err = p.acquire(KEY, Some(86_400.0)).await.unwrap_err();
    assert_eq!(err.retry_after, Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn tracked_keys_stay_bounded() {
    let p = Politeness::new(PolitenessSettings {
        mode: Mode::Reject,
        default_interval: None,
        max_tracked: 1_000,
        idle_evict_after: Duration::from_secs(600),
        max_crawl_delay: Duration::from_secs(60),
        signals: Default::default(),
    });
    let cap = p.capacity();
    assert!((900..=1_000).contains(&cap), "capacity {cap}");
    for i in 0..20_000 {
        p.acquire(&format!("https://h{i}.example:443 bot"), Some(10.0))
            .await
            .unwrap();
        if i % 1_000 == 0 {
            assert!(p.tracked() <= cap);
        }
    }
    assert_eq!(p.tracked(), cap);
    // The clock did not move: every key pushed out was inside its 10 s
    // interval.
    assert_eq!(p.evicted_active(), 20_000 - cap as u64);
}

#[tokio::test(start_paused = true)]
async fn idle_keys_are_swept() {
    let p = Politeness::new(PolitenessSettings {
        mode: Mode::Reject,
        default_interval: None,
        max_tracked: 1_000,
        idle_evict_after: ms(50),
        max_crawl_delay: Duration::from_secs(60),
        signals: Default::default(),
    });
    for i in 0..50 {
        p.acquire(&format!("https://h{i}.example:443 bot"), Some(0.02))
            .await
            .unwrap();
    }
    // A key still inside a long Crawl-delay is kept whatever its idle time,
    // even when it sits in the middle of the LRU order.
    p.acquire(KEY, Some(30.0)).await.unwrap();
    for i in 50..100 {
        p.acquire(&format!("https://h{i}.example:443 bot"), Some(0.02))
            .await
            .unwrap();
    }
    assert_eq!(p.tracked(), 101);
    // Idle means unused for idle_evict_after (50 ms) and past the interval.
    advance(ms(49)).await;
    p.sweep();
    assert_eq!(p.tracked(), 101);
    advance(ms(1)).await;
    p.sweep();
    assert_eq!(p.tracked(), 1);
    assert!(p.acquire(KEY, Some(30.0)).await.is_err());
    assert_eq!(p.evicted_active(), 0);
}

#[tokio::test(start_paused = true)]
async fn delay_mode_holds_at_most_max_queue_requests_per_key() {
    let p = Arc::new(Politeness::new(PolitenessSettings {
        mode: Mode::Delay {
            max_wait: Duration::from_secs(3600),
            max_queue: 2,
        },
        ..PolitenessSettings::default()
    }));
    // The first goes at once; two more are held; a fourth is refused.
    p.acquire(KEY, Some(10.0)).await.unwrap();
    let held: Vec<_> = (0..2)
        .map(|_| {
            let p = p.clone();
            tokio::spawn(async move { p.acquire(KEY, Some(10.0)).await })
        })
        .collect();
    tokio::task::yield_now().await;
    let err = p.acquire(KEY, Some(10.0)).await.unwrap_err();
    assert_eq!(err.retry_after, Duration::from_secs(30));
    for h in held {
        assert!(h.await.unwrap().is_ok());
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_that_leaves_the_queue_moves_those_behind_it_up() {
    let p = politeness(delay(60_000));
    let t0 = Instant::now();
    p.acquire(KEY, Some(1.0)).await.unwrap();
    // Three held, for the slots at 1, 2 and 3 s.
    let held: Vec<_> = (0..3)
        .map(|_| {
            let p = p.clone();
            tokio::spawn(async move {
                let held = p.acquire(KEY, Some(1.0)).await;
                (t0.elapsed(), held)
            })
        })
        .collect();
    tokio::task::yield_now().await;
    assert_eq!(p.next_slot(KEY), Some((ms(1000), ms(4000))));
    // The first two give up at 0.5 s: the third goes at 1 s, the key's
    // next free slot is 2 s.
    advance(ms(500)).await;
    let mut held = held.into_iter();
    held.next().unwrap().abort();
    held.next().unwrap().abort();
    tokio::task::yield_now().await;
    assert_eq!(p.next_slot(KEY), Some((ms(1000), ms(1500))));
    let (at, third) = held.next().unwrap().await.unwrap();
    assert_eq!(at, ms(1000));
    assert_eq!(third, Ok(ms(1000)), "held from its arrival to its slot");
    assert_eq!(p.next_slot(KEY), Some((ms(1000), ms(1000))));
    // One in the middle leaves: the one behind it takes its slot.
    let t1 = Instant::now();
    let held: Vec<_> = (0..3)
        .map(|_| {
            let p = p.clone();
            tokio::spawn(async move {
                p.acquire(KEY, Some(1.0)).await.unwrap();
                t1.elapsed()
            })
        })
        .collect();
    tokio::task::yield_now().await;
    let mut held = held.into_iter();
    let first = held.next().unwrap();
    held.next().unwrap().abort();
    tokio::task::yield_now().await;
    assert_eq!(p.next_slot(KEY), Some((ms(1000), ms(3000))));
    assert_eq!(first.await.unwrap(), ms(1000));
    assert_eq!(held.next().unwrap().await.unwrap(), ms(2000));
    // The last one held leaves: its slot is free again.
    let last = {
        let p = p.clone();
        tokio::spawn(async move { p.acquire(KEY, Some(1.0)).await })
    };
    tokio::task::yield_now().await;
    assert_eq!(p.next_slot(KEY), Some((ms(1000), ms(2000))));
    last.abort();
    tokio::task::yield_now().await;
    assert_eq!(p.next_slot(KEY), Some((ms(1000), ms(1000))));
}
