//! The algorithm chosen at run time against the static type: the same
//! quota, the same clock, `RateLimiter<AnyAlgorithm>` next to
//! `RateLimiter<TokenBucket>` (and the sliding window counter, whose state
//! is also one word), on the allowed and the denied path, and a keyed
//! check of one known key.
//!
//! Rows: `dynamic_{allow,deny,keyed}/{algorithm}/{static,any}`, and
//! `dynamic_{allow,deny}/token_bucket/adjustable`: the same bucket in an
//! [`Adjustable`](rategate::algorithm::Adjustable), whose quota can change
//! at run time (the price of the swappable parameters). The clock
//! is a `ManualClock` set before every check, which isolates the dispatch
//! from the clock read (see `benches/direct.rs`).

mod common;

use common::{allow_quota, config, deny_quota};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main};
use rategate::algorithm::Adjustable;
use rategate::{
    Algorithm, AlgorithmKind, AnyAlgorithm, KeyedRateLimiter, ManualClock, Quota, RateLimiter,
    SlidingWindowCounter, TokenBucket,
};

/// Two limiters on one clock, static `A` and `AnyAlgorithm` of `kind`.
fn pair<A: Algorithm>(
    quota: Quota,
    kind: AlgorithmKind,
    clock: &ManualClock,
) -> (
    RateLimiter<A, ManualClock>,
    RateLimiter<AnyAlgorithm, ManualClock>,
) {
    let fixed = RateLimiter::<A, _>::with_clock(quota, clock.clone()).unwrap();
    let any = AnyAlgorithm::new(kind, &quota).unwrap();
    (
        fixed,
        RateLimiter::from_algorithm(any, quota, clock.clone()),
    )
}

/// The quota of the allowed or the denied path, and the clock's step per
/// check: on the allowed path twice the emission interval keeps every check
/// admitted; on the denied path the clock stands still after one admission.
fn path<A: Algorithm>(allow: bool) -> (Quota, u64) {
    if allow {
        let quota = allow_quota::<A>();
        (quota, 2 * quota.emission_interval_nanos())
    } else {
        (deny_quota(), 0)
    }
}

fn rows<A: Algorithm>(group: &mut BenchmarkGroup<'_, WallTime>, kind: AlgorithmKind, allow: bool) {
    let name = kind.name();
    let (quota, step) = path::<A>(allow);
    let clock = ManualClock::new();
    let (fixed, any) = pair::<A>(quota, kind, &clock);
    fixed.check();
    any.check();
    assert_eq!(fixed.check().is_allowed(), allow, "{name} static");
    assert_eq!(any.check().is_allowed(), allow, "{name} any");
    let mut now = 0u64;
    group.bench_function(BenchmarkId::new(name, "static"), |b| {
        b.iter(|| {
            now += step;
            clock.set(now);
            fixed.check()
        })
    });
    group.bench_function(BenchmarkId::new(name, "any"), |b| {
        b.iter(|| {
            now += step;
            clock.set(now);
            any.check()
        })
    });
}

/// `Adjustable<TokenBucket>` on the path `rows` measured.
fn adjustable_row(group: &mut BenchmarkGroup<'_, WallTime>, allow: bool) {
    let (quota, step) = path::<TokenBucket>(allow);
    let clock = ManualClock::new();
    let limiter =
        RateLimiter::<Adjustable<TokenBucket>, _>::with_clock(quota, clock.clone()).unwrap();
    limiter.check();
    assert_eq!(limiter.check().is_allowed(), allow, "adjustable");
    let mut now = 0u64;
    group.bench_function(BenchmarkId::new("token_bucket", "adjustable"), |b| {
        b.iter(|| {
            now += step;
            clock.set(now);
            limiter.check()
        })
    });
}

fn keyed_rows<A: Algorithm>(group: &mut BenchmarkGroup<'_, WallTime>, kind: AlgorithmKind) {
    let name = kind.name();
    let quota = allow_quota::<A>();
    let step = 2 * quota.emission_interval_nanos();
    let clock = ManualClock::new();
    let fixed = KeyedRateLimiter::<u64, A>::builder(quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    let any = KeyedRateLimiter::<u64, AnyAlgorithm>::builder(quota)
        .clock(clock.clone())
        .algorithm(AnyAlgorithm::new(kind, &quota).unwrap())
        .build()
        .unwrap();
    let mut now = 0u64;
    group.bench_function(BenchmarkId::new(name, "static"), |b| {
        b.iter(|| {
            now += step;
            clock.set(now);
            fixed.check(&7)
        })
    });
    group.bench_function(BenchmarkId::new(name, "any"), |b| {
        b.iter(|| {
            now += step;
            clock.set(now);
            any.check(&7)
        })
    });
}

fn dynamic(c: &mut Criterion) {
    for allow in [true, false] {
        let mut group = c.benchmark_group(if allow {
            "dynamic_allow"
        } else {
            "dynamic_deny"
        });
        rows::<TokenBucket>(&mut group, AlgorithmKind::TokenBucket, allow);
        adjustable_row(&mut group, allow);
        rows::<SlidingWindowCounter>(&mut group, AlgorithmKind::SlidingWindowCounter, allow);
        group.finish();
    }
    let mut group = c.benchmark_group("dynamic_keyed");
    keyed_rows::<TokenBucket>(&mut group, AlgorithmKind::TokenBucket);
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = dynamic
}
criterion_main!(benches);
