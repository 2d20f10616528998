use super::*;

fn p(mode: Mode, default_interval: Option<Duration>) -> Politeness {
    Politeness::new(PolitenessSettings {
        mode,
        default_interval,
        max_tracked: 1000,
        idle_evict_after: Duration::from_secs(600),
        max_crawl_delay: Duration::from_secs(60),
        signals: Default::default(),
    })
}

#[test]
fn effective_interval_is_max_and_clamped() {
    let none = p(Mode::Reject, None);
    assert_eq!(none.effective_interval(None), None);
    assert_eq!(none.effective_interval(Some(0.0)), None);
    assert_eq!(none.effective_interval(Some(-3.0)), None);
    assert_eq!(none.effective_interval(Some(f64::NAN)), None);
    assert_eq!(
        none.effective_interval(Some(0.5)),
        Some(Duration::from_millis(500))
    );
    assert_eq!(
        none.effective_interval(Some(3600.0)),
        Some(Duration::from_secs(60))
    );
    assert_eq!(
        none.effective_interval(Some(f64::INFINITY)),
        Some(Duration::from_secs(60))
    );
    let dflt = p(Mode::Reject, Some(Duration::from_secs(2)));
    assert_eq!(dflt.effective_interval(None), Some(Duration::from_secs(2)));
    assert_eq!(
        dflt.effective_interval(Some(0.5)),
        Some(Duration::from_secs(2))
    );
    assert_eq!(
        dflt.effective_interval(Some(5.0)),
        Some(Duration::from_secs(5))
    );
    let zero = p(Mode::Reject, Some(Duration::ZERO));
    assert_eq!(zero.effective_interval(None), None);
}

#[test]
fn reserve_lines_up_slots_in_delay_mode() {
    let pol = p(
        Mode::Delay {
            max_wait: Duration::from_secs(10),
            max_queue: 0,
        },
        None,
    );
    let t0 = Instant::now();
    let i = Duration::from_secs(1);
    assert_eq!(pol.reserve_now("k", i, t0), Ok(t0));
    assert_eq!(pol.reserve_now("k", i, t0), Ok(t0 + i));
    assert_eq!(pol.reserve_now("k", i, t0), Ok(t0 + 2 * i));
    // Long after: the slot is "now", not in the past.
    let later = t0 + Duration::from_secs(100);
    assert_eq!(pol.reserve_now("k", i, later), Ok(later));
}

#[test]
fn changed_interval_applies_from_last_slot() {
    let pol = p(Mode::Reject, None);
    let t0 = Instant::now();
    assert!(pol.reserve_now("k", Duration::from_secs(1), t0).is_ok());
    let t1 = t0 + Duration::from_millis(1500);
    // With the old 1 s delay this would pass; the new 2 s one refuses.
    assert_eq!(
        pol.reserve_now("k", Duration::from_secs(2), t1),
        Err(RateLimited {
            retry_after: Duration::from_millis(500)
        })
    );
    // And a shorter one takes effect at once too.
    assert!(pol.reserve_now("k", Duration::from_secs(1), t1).is_ok());
}

#[test]
fn retry_after_secs_rounds_up() {
    let r = |ms| RateLimited {
        retry_after: Duration::from_millis(ms),
    };
    assert_eq!(r(0).retry_after_secs(), 1);
    assert_eq!(r(1).retry_after_secs(), 1);
    assert_eq!(r(1000).retry_after_secs(), 1);
    assert_eq!(r(1001).retry_after_secs(), 2);
}

#[test]
fn the_busiest_keys_are_those_booked_furthest_ahead() {
    let pol = p(
        Mode::Delay {
            max_wait: Duration::from_secs(600),
            max_queue: 0,
        },
        None,
    );
    let t0 = Instant::now();
    let i = Duration::from_secs(10);
    for (key, booked) in [("a", 1), ("b", 4), ("c", 2)] {
        for _ in 0..booked {
            pol.reserve_now(key, i, t0).ok();
        }
    }
    let busy = pol.busiest(2);
    let keys: Vec<&str> = busy.iter().map(|(k, _, _)| k.as_str()).collect();
    assert_eq!(keys, ["b", "c"]);
    assert_eq!(busy[0].1, i);
    // b's next free slot is four intervals on, less the time passed.
    assert!(busy[0].2 > Duration::from_secs(39) && busy[0].2 <= Duration::from_secs(40));
    assert_eq!(pol.busiest(10).len(), 3);
}

const S: u64 = 1_000_000;

#[test]
fn interleaved_slots_belong_to_their_rank() {
    // Three nodes, 1 s: node k takes the slots starting k, k+3, k+6 … s.
    for k in 0..3 {
        assert_eq!(interleaved_slot(0, S, 3, k, None), k * S);
    }
    // Just after a slot start: the next one of this rank.
    assert_eq!(interleaved_slot(1, S, 3, 0, None), 3 * S);
    assert_eq!(interleaved_slot(1, S, 3, 1, None), S);
    // Exactly on one of its own slots: that one, no wait.
    assert_eq!(interleaved_slot(6 * S, S, 3, 0, None), 6 * S);
    // Each slot once: after using 6 s, node 0's next is 9 s.
    assert_eq!(interleaved_slot(6 * S, S, 3, 0, Some(6 * S)), 9 * S);
    // A booked slot still ahead counts: the next one is N intervals on.
    assert_eq!(interleaved_slot(S, S, 3, 0, Some(9 * S)), 12 * S);
    // One node: every slot is its own.
    // Alone: no grid, only the interval after the last slot.
    assert_eq!(interleaved_slot(S + 1, S, 1, 0, None), S + 1);
    assert_eq!(interleaved_slot(S + 1, S, 1, 0, Some(S)), 2 * S);
    // A longer interval applies from the last slot, not only the lattice.
    let next = interleaved_slot(3 * S, 3 * S / 2, 3, 0, Some(3 * S));
    assert!(next >= 3 * S + 3 * S / 2, "{next}");
    assert_eq!(next % (3 * S / 2), 0);
    assert_eq!((next / (3 * S / 2)) % 3, 0);
    // Zeros are taken as 1, and nothing overflows.
    assert_eq!(interleaved_slot(5, 0, 0, 7, None), 5);
    let far = interleaved_slot(u64::MAX - 10, S, 3, 2, Some(u64::MAX - 10));
    assert!(far >= u64::MAX - S * 4);
}

#[test]
fn interleaved_nodes_keep_the_interval_between_them() {
    // Three nodes booking at pseudo-random moments, each as often as it
    // may: the union of their slots never has two closer than I, and
    // each node's own are N·I apart.
    let (i, n) = (700_000u64, 3u64);
    let mut all = Vec::new();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for k in 0..n {
        let mut last = None;
        let mut now = 1_764_000_000 * S;
        let mut mine = Vec::new();
        for _ in 0..200 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            now += seed % (3 * i);
            let slot = interleaved_slot(now, i, n, k, last);
            assert!(slot >= now);
            assert_eq!((slot / i) % n, k);
            last = Some(slot);
            mine.push(slot);
        }
        for w in mine.windows(2) {
            assert!(w[1] >= w[0] + n * i, "{w:?}");
        }
        all.extend(mine);
    }
    all.sort_unstable();
    for w in all.windows(2) {
        assert!(w[1] >= w[0] + i, "{w:?}");
    }
}

#[test]
fn interleaved_booking_keeps_max_wait_and_max_queue() {
    let pol = p(
        Mode::Delay {
            max_wait: Duration::from_secs(5),
            max_queue: 0,
        },
        None,
    );
    let i = Duration::from_secs(1);
    let now = 10 * S;
    // Node 1 of 3: 10 s is its own; then 13 s; 16 s is past max_wait.
    assert_eq!(pol.reserve_interleaved("k", i, (3, 1), 0, now), Ok(10 * S));
    assert_eq!(pol.reserve_interleaved("k", i, (3, 1), 0, now), Ok(13 * S));
    assert_eq!(
        pol.reserve_interleaved("k", i, (3, 1), 0, now),
        Err(RateLimited {
            retry_after: Duration::from_secs(6)
        })
    );
    // Nothing was stored by the refusal.
    assert_eq!(
        pol.reserve_interleaved("k", i, (3, 1), 0, 13 * S),
        Ok(16 * S)
    );
    // Not before `from` (just after the last shared slot).
    assert_eq!(
        pol.reserve_interleaved("k2", i, (3, 0), 5 * S + 1, S),
        Ok(6 * S)
    );
    // max_queue counts this node's own spacing (N·I) per held request,
    // from `from` on.
    let queued = p(
        Mode::Delay {
            max_wait: Duration::from_secs(600),
            max_queue: 1,
        },
        None,
    );
    assert_eq!(queued.reserve_interleaved("k", i, (3, 0), 0, 1), Ok(3 * S));
    assert!(queued.reserve_interleaved("k", i, (3, 0), 0, 1).is_err());
    assert_eq!(
        queued.reserve_interleaved("k3", i, (3, 0), 10 * S + 1, 1),
        Ok(12 * S)
    );
    assert!(
        queued
            .reserve_interleaved("k3", i, (3, 0), 10 * S + 1, 1)
            .is_err()
    );
    // Reject: only a slot starting now.
    let reject = p(Mode::Reject, None);
    assert_eq!(
        reject.reserve_interleaved("k", i, (2, 0), 0, 4 * S),
        Ok(4 * S)
    );
    assert_eq!(
        reject.reserve_interleaved("k", i, (2, 0), 0, 4 * S),
        Err(RateLimited {
            retry_after: Duration::from_secs(2)
        })
    );
}

#[test]
fn idle_entries_go_before_active_ones() {
    let pol = Politeness::new(PolitenessSettings {
        mode: Mode::Reject,
        default_interval: None,
        max_tracked: 2,
        idle_evict_after: Duration::from_secs(5),
        max_crawl_delay: Duration::from_secs(60),
        signals: Default::default(),
    });
    let t0 = Instant::now();
    let i = Duration::from_secs(1);
    pol.reserve_now("a", i, t0).ok();
    pol.reserve_now("b", i, t0).ok();
    assert_eq!(pol.tracked(), 2);
    // Both idle by t0+10s: inserting "c" drops them, nothing active lost.
    pol.reserve_now("c", i, t0 + Duration::from_secs(10)).ok();
    assert_eq!(pol.tracked(), 1);
    assert_eq!(pol.evicted_active(), 0);
    let t1 = t0 + Duration::from_secs(10);
    pol.reserve_now("d", i, t1).ok();
    pol.reserve_now("e", i, t1).ok();
    assert_eq!(pol.tracked(), 2);
    assert_eq!(pol.evicted_active(), 1);
}

impl Politeness {
    /// [`Politeness::reserve`] for an origin not paused.
    fn reserve_now(
        &self,
        key: &str,
        interval: Duration,
        now: tokio::time::Instant,
    ) -> Result<tokio::time::Instant, RateLimited> {
        self.reserve(key, interval, now, None)
    }
}
