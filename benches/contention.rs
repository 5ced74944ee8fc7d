//! Two threads checking at once, next to governor with the same quota
//! (allowed path: one request per nanosecond, which two threads cannot
//! outrun).
//!
//! * `direct`: one direct limiter shared by both threads.
//! * `hot_key`: a keyed limiter, both threads on one key.
//! * `distinct_keys`: a keyed limiter, each thread on its own 1,000 keys
//!   (disjoint sets, drawn by a PRNG), so the threads share no state but
//!   do share the map's shard locks now and then (as real traffic does)
//!   and whatever else the limiter shares (its clock).
//!
//! Each sample starts two scoped threads that wait on a barrier and then
//! run `iters` checks each; the time reported is the slower thread's, so
//! the figure is the time per check as seen by each thread (two threads
//! together complete two checks in that time).

mod common;

use common::{
    KeyRng, PerAlgorithm, THREADS, allow_quota, config, for_each_algorithm, governor_allow_quota,
    two_threads,
};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main};
use rategate::{Algorithm, KeyedRateLimiter, RateLimiter};
const KEYS_PER_THREAD: u64 = 1_000;

/// Thread `t`'s keys are `t, t + THREADS, t + 2 x THREADS, ...`.
fn own_key(t: u64, rng: &mut KeyRng) -> u64 {
    rng.below(KEYS_PER_THREAD) * THREADS + t
}

struct Contended<'a, 'g>(&'a mut BenchmarkGroup<'g, WallTime>);

impl PerAlgorithm for Contended<'_, '_> {
    fn run<A: Algorithm>(&mut self, name: &'static str) {
        let quota = allow_quota::<A>();

        let direct = RateLimiter::<A>::new(quota).unwrap();
        self.0
            .bench_function(BenchmarkId::new(name, "direct"), |b| {
                b.iter_custom(|iters| two_threads(iters, |_, _| direct.check()))
            });
        assert!(direct.check().is_allowed(), "{name}: allowed path denied");

        let keyed = KeyedRateLimiter::<u64, A>::new(quota).unwrap();
        for key in 0..KEYS_PER_THREAD * THREADS {
            keyed.check(&key);
        }
        self.0
            .bench_function(BenchmarkId::new(name, "hot_key"), |b| {
                b.iter_custom(|iters| two_threads(iters, |_, _| keyed.check(&0)))
            });
        assert!(keyed.check(&0).is_allowed(), "{name}: allowed path denied");
        self.0
            .bench_function(BenchmarkId::new(name, "distinct_keys"), |b| {
                b.iter_custom(|iters| two_threads(iters, |t, rng| keyed.check(&own_key(t, rng))))
            });
        assert_eq!(keyed.len() as u64, KEYS_PER_THREAD * THREADS);
    }
}

fn contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("contended_2_threads");
    for_each_algorithm(&mut Contended(&mut group));

    let quota = governor_allow_quota();
    let direct = governor::RateLimiter::direct(quota);
    group.bench_function(BenchmarkId::new("governor", "direct"), |b| {
        b.iter_custom(|iters| two_threads(iters, |_, _| direct.check()))
    });
    assert!(direct.check().is_ok(), "governor: allowed path denied");

    let keyed = governor::RateLimiter::keyed(quota);
    for key in 0..KEYS_PER_THREAD * THREADS {
        let _ = keyed.check_key(&key);
    }
    group.bench_function(BenchmarkId::new("governor", "hot_key"), |b| {
        b.iter_custom(|iters| two_threads(iters, |_, _| keyed.check_key(&0)))
    });
    assert!(keyed.check_key(&0).is_ok(), "governor: allowed path denied");
    group.bench_function(BenchmarkId::new("governor", "distinct_keys"), |b| {
        b.iter_custom(|iters| two_threads(iters, |t, rng| keyed.check_key(&own_key(t, rng))))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = contended
}
criterion_main!(benches);
