//! `workers` serving threads: each new connection goes to the thread with
//! the fewest open and is served there, on an event loop of its own, to
//! its end; all of them serve, drain on shutdown and end with the proxy.

use std::time::Duration;

use crate::support::{Conn, HeldOrigin, Origin, Proxy, until_refused, until_within};

/// Threads of this process named as the proxy names its extra serving
/// threads (the first serving thread is the runtime `App::serve` runs on).
fn serving_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("robots-proxy-"))
        .count()
}

const NO_HANG: Duration = Duration::from_secs(20);

/// Waits (bounded) until no serving thread is left: a joined thread leaves
/// `/proc/self/task` a moment after `pthread_join` returns.
async fn threads_gone() {
    until_within(
        "the serving threads to end with the proxy",
        NO_HANG,
        || async {
            match serving_threads() {
                0 => Ok(()),
                n => Err(format!("{n} serving threads")),
            }
        },
    )
    .await;
}

/// A proxy on `workers` serving threads, `grace` to drain on shutdown.
async fn serving(workers: usize, grace: Duration) -> Proxy {
    Proxy::start_with(|c| {
        c.workers = workers;
        c.shutdown_grace = grace;
    })
    .await
}

// One test in this file: it counts the process's threads. On a
// current-thread runtime, as the binary's first serving thread is.
#[tokio::test]
async fn every_serving_thread_serves_drains_and_ends_with_the_proxy() {
    let origin = Origin::start().await;
    let held = HeldOrigin::start().await;
    let mut proxy = serving(3, Duration::from_secs(30)).await;
    let addr = proxy.addr;

    // Many keep-alive connections at once, several requests each, spread
    // over the threads: every one is answered.
    let mut clients = Vec::new();
    for i in 0..24 {
        let url = origin.url(&format!("/page-{i}"));
        clients.push(tokio::spawn(async move {
            let mut conn = Conn::open(addr).await;
            for _ in 0..4 {
                let resp = conn.get(&url).await;
                assert_eq!(resp.status, 200, "{}", resp.body);
            }
        }));
    }
    for c in clients {
        tokio::time::timeout(NO_HANG, c)
            .await
            .expect("a client hung")
            .expect("client task");
    }
    // Started before the first connection was accepted.
    assert_eq!(
        serving_threads(),
        2,
        "workers = 3: two threads besides the caller's"
    );

    // Requests in flight on whichever threads took them: shutdown waits
    // for all of them, then every serving thread ends.
    let mut in_flight = Vec::new();
    for i in 0..6 {
        in_flight.push(held.hold(addr, &format!("/slow-{i}")).await);
    }
    proxy.stop();
    // Refused once the listener has closed; the requests, on whichever
    // threads took them, are still held meanwhile.
    until_refused(addr).await;
    assert!(
        !proxy.done.is_finished(),
        "serve returned with requests in flight"
    );
    held.release();
    for r in in_flight {
        let resp = r.outcome().await.expect("response");
        assert_eq!(resp.status, 200, "{}", resp.body);
    }
    let cut = proxy.finished().await;
    assert_eq!(cut, 0, "every request finished within the grace");
    threads_gone().await;

    // A request that outlives the grace is cut on the thread that holds
    // it (the other one: of equally loaded threads the calling one comes
    // last), and the threads end all the same.
    let held = HeldOrigin::start().await;
    let mut proxy = serving(2, Duration::from_millis(200)).await;
    let addr = proxy.addr;
    let stuck = held.hold(addr, "/never").await;
    assert_eq!(serving_threads(), 1);
    proxy.stop();
    let cut = proxy.finished().await;
    assert_eq!(cut, 1, "the held request was cut");
    assert!(
        stuck.outcome().await.is_err(),
        "a cut request gets no response"
    );
    threads_gone().await;
}
