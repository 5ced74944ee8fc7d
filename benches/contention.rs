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
//! run `iters` checks each; the time reported is the slower thread's
//! divided by two: the *aggregate* time per check (each thread sees twice
//! that per check). A benchmark whose two-thread trial run is denied is
//! left out with a note on stderr, as the leaky bucket's one-key cases are
//! (it admits at most `burst + 1` requests per millisecond on one key).

mod common;

use common::{
    KeyRng, PerAlgorithm, THREADS, allow_quota, config, denials_two_threads, for_each_algorithm,
    governor_allow_quota, on_allowed_path, two_threads,
};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main};
use rategate::{Algorithm, KeyedRateLimiter, RateLimiter};

const KEYS_PER_THREAD: u64 = 1_000;
/// The hot key, outside both threads' own keys.
const HOT_KEY: u64 = KEYS_PER_THREAD * THREADS;
const TRIAL_CHECKS: u64 = 20_000;

/// Thread `t`'s keys are `t, t + THREADS, t + 2 x THREADS, ...`.
fn own_key(t: u64, rng: &mut KeyRng) -> u64 {
    rng.below(KEYS_PER_THREAD) * THREADS + t
}

struct Contended<'a, 'g>(&'a mut BenchmarkGroup<'g, WallTime>);

impl PerAlgorithm for Contended<'_, '_> {
    fn run<A: Algorithm>(&mut self, name: &'static str) {
        let quota = allow_quota::<A>();

        let direct = RateLimiter::<A>::new(quota).unwrap();
        bench_if_allowed(self.0, name, "direct", |_, _| direct.check().is_allowed());

        let keyed = KeyedRateLimiter::<u64, A>::new(quota).unwrap();
        for key in 0..=HOT_KEY {
            keyed.check(&key);
        }
        bench_if_allowed(self.0, name, "hot_key", |_, _| {
            keyed.check(&HOT_KEY).is_allowed()
        });
        bench_if_allowed(self.0, name, "distinct_keys", |t, rng| {
            keyed.check(&own_key(t, rng)).is_allowed()
        });
        assert_eq!(keyed.len() as u64, HOT_KEY + 1);
    }
}

/// Benchmarks `check` on two threads if a two-thread trial run of it stays
/// on the allowed path.
fn bench_if_allowed(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    variant: &str,
    check: impl Fn(u64, &mut KeyRng) -> bool + Sync,
) {
    let denied = denials_two_threads(TRIAL_CHECKS, &check);
    let id = format!("contended_2_threads/{name}/{variant}");
    if on_allowed_path(&id, denied, THREADS * TRIAL_CHECKS) {
        group.bench_function(BenchmarkId::new(name, variant), |b| {
            b.iter_custom(|iters| two_threads(iters, &check))
        });
    }
}

fn contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("contended_2_threads");
    for_each_algorithm(&mut Contended(&mut group));

    let quota = governor_allow_quota();
    let direct = governor::RateLimiter::direct(quota);
    bench_if_allowed(&mut group, "governor", "direct", |_, _| {
        direct.check().is_ok()
    });

    let keyed = governor::RateLimiter::keyed(quota);
    for key in 0..=HOT_KEY {
        let _ = keyed.check_key(&key);
    }
    bench_if_allowed(&mut group, "governor", "hot_key", |_, _| {
        keyed.check_key(&HOT_KEY).is_ok()
    });
    bench_if_allowed(&mut group, "governor", "distinct_keys", |t, rng| {
        keyed.check_key(&own_key(t, rng)).is_ok()
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = contended
}
criterion_main!(benches);
