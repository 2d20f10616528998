//! What an atomic read-modify-write costs on the machine that runs the
//! proxy, against a plain increment: the unit behind the locked
//! instructions `bench/cost LOCKED=1` counts per request (a reference
//! count's increment or decrement, a task's state change). Each step also
//! stores to a small buffer, as real code has stores in flight when it
//! takes a count: the locked operation waits for them to drain.
//!
//! Run with `cargo bench --bench atomics`.

use std::cell::Cell;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let mut stores = [0u64; 64];
    let mut i = 0usize;
    let count = AtomicU64::new(0);
    c.bench_function("locked_increment_with_a_store", |b| {
        b.iter(|| {
            count.fetch_add(1, Ordering::Relaxed);
            i = i.wrapping_add(1);
            stores[i & 63] = i as u64;
            black_box(&stores);
        })
    });
    let plain = Cell::new(0u64);
    c.bench_function("plain_increment_with_a_store", |b| {
        b.iter(|| {
            plain.set(black_box(plain.get()) + 1);
            i = i.wrapping_add(1);
            stores[i & 63] = i as u64;
            black_box(&stores);
        })
    });
    black_box((count, plain));
}

criterion_group!(benches, bench);
criterion_main!(benches);
