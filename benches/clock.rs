//! The cost of reading the time, which every check pays once.
//!
//! * `clock_now`, one thread: rategate's `QuantaClock::now` (a TSC read, the
//!   conversion to nanoseconds, and the monotonic clamp on a shared atomic
//!   high-water mark), the same quanta read without the clamp (what rategate's
//!   clock does before clamping, and what governor's `QuantaClock` does),
//!   governor's `QuantaClock::now`; rategate's `StdClock::now`,
//!   `std::time::Instant::now()`, governor's `MonotonicClock::now`.
//! * `clock_now_2_threads`: two threads reading one clock (clones share the
//!   high-water mark); aggregate time per read (each thread sees twice it).
//!
//! Governor's rows pair with rategate's by variant (`quanta`, `std`).

mod common;

use common::{config, two_threads};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use governor::clock::Clock as _;
use rategate::{Clock, QuantaClock, StdClock};
use std::time::Instant;

/// What `QuantaClock::now` does before its clamp: a TSC read scaled to
/// nanoseconds since an origin.
struct Unclamped {
    clock: quanta::Clock,
    origin: u64,
}

impl Unclamped {
    fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        Unclamped { clock, origin }
    }

    #[inline]
    fn now(&self) -> u64 {
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }
}

fn clock_now(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock_now");

    let clamped = QuantaClock::new();
    group.bench_function(BenchmarkId::new("rategate_clamped", "quanta"), |b| {
        b.iter(|| clamped.now())
    });
    let unclamped = Unclamped::new();
    group.bench_function(BenchmarkId::new("quanta_unclamped", "quanta"), |b| {
        b.iter(|| unclamped.now())
    });
    let governor_quanta = governor::clock::QuantaClock::default();
    group.bench_function(BenchmarkId::new("governor", "quanta"), |b| {
        b.iter(|| governor_quanta.now())
    });

    let std_clock = StdClock::new();
    group.bench_function(BenchmarkId::new("rategate", "std"), |b| {
        b.iter(|| std_clock.now())
    });
    group.bench_function(BenchmarkId::new("std_instant", "std"), |b| {
        b.iter(Instant::now)
    });
    let governor_std = governor::clock::MonotonicClock;
    group.bench_function(BenchmarkId::new("governor", "std"), |b| {
        b.iter(|| governor_std.now())
    });
    group.finish();
}

fn clock_now_2_threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock_now_2_threads");

    let clamped = QuantaClock::new();
    group.bench_function(BenchmarkId::new("rategate_clamped", "quanta"), |b| {
        b.iter_custom(|iters| two_threads(iters, |_, _| clamped.now()))
    });
    let unclamped = Unclamped::new();
    group.bench_function(BenchmarkId::new("quanta_unclamped", "quanta"), |b| {
        b.iter_custom(|iters| two_threads(iters, |_, _| unclamped.now()))
    });
    let governor_quanta = governor::clock::QuantaClock::default();
    group.bench_function(BenchmarkId::new("governor", "quanta"), |b| {
        b.iter_custom(|iters| two_threads(iters, |_, _| governor_quanta.now()))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = clock_now, clock_now_2_threads
}
criterion_main!(benches);
