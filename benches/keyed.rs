//! Keyed checks on one thread, next to governor's `DefaultKeyedRateLimiter`
//! (a `DashMap`) with the same quota.
//!
//! * `keyed_hit`: checks of keys already in the map, 1,000 or 1,000,000
//!   live `u64` keys, each check's key drawn by a cheap PRNG (so successive
//!   checks touch different shards and cache lines; at 1M keys most miss
//!   the cache). Allowed path (one request per nanosecond per key); a
//!   benchmark whose trial run is denied is left out with a note.
//! * `keyed_insert`: the first check of a new key, into a map that starts
//!   empty each sample (so the cost includes the map's amortised growth).
//! * `keyed_batch`: eight keys per iteration, drawn as above, decided by one
//!   `check_many` (one clock reading) or by eight `check`s.
//!
//! rategate hashes keys with its default, foldhash (seeded), governor with
//! the standard library's SipHash-1-3; `token_bucket_siphash` is rategate's
//! token bucket with SipHash too, for a like-for-like row. Both use
//! `DashMap`'s default shard count (4 per CPU, rounded up to a power of two).

mod common;

use common::{
    KeyRng, PerAlgorithm, allow_quota, config, denials, for_each_algorithm, governor_allow_quota,
    on_allowed_path,
};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main};
use rategate::{Algorithm, KeyedRateLimiter, TokenBucket};
use std::collections::hash_map::RandomState;
use std::hint::black_box;
use std::time::Instant;

const TRIAL_CHECKS: u64 = 100_000;
const SIZES: [(u64, &str); 2] = [(1_000, "1k_keys"), (1_000_000, "1M_keys")];

struct Hits<'a, 'g>(&'a mut BenchmarkGroup<'g, WallTime>);

impl PerAlgorithm for Hits<'_, '_> {
    fn run<A: Algorithm>(&mut self, name: &'static str) {
        for (keys, label) in SIZES {
            let limiter = KeyedRateLimiter::<u64, A>::new(allow_quota::<A>()).unwrap();
            for key in 0..keys {
                assert!(limiter.check(&key).is_allowed());
            }
            assert_eq!(limiter.len() as u64, keys);
            let mut rng = KeyRng::new(0x5eed);
            let denied = denials(TRIAL_CHECKS, || {
                limiter.check(&rng.below(keys)).is_allowed()
            });
            let id = format!("keyed_hit/{name}/{label}");
            if on_allowed_path(&id, denied, TRIAL_CHECKS) {
                self.0.bench_function(BenchmarkId::new(name, label), |b| {
                    b.iter(|| limiter.check(&rng.below(keys)))
                });
            }
            assert_eq!(limiter.len() as u64, keys, "{name}: a hit inserted a key");
        }
    }
}

struct Insert<'a, 'g>(&'a mut BenchmarkGroup<'g, WallTime>);

impl PerAlgorithm for Insert<'_, '_> {
    fn run<A: Algorithm>(&mut self, name: &'static str) {
        let quota = allow_quota::<A>();
        self.0
            .bench_function(BenchmarkId::new(name, "new_key"), |b| {
                b.iter_custom(|iters| {
                    let limiter = KeyedRateLimiter::<u64, A>::new(quota).unwrap();
                    let start = Instant::now();
                    for key in 0..iters {
                        black_box(limiter.check(&key));
                    }
                    let elapsed = start.elapsed();
                    assert_eq!(limiter.len() as u64, iters);
                    elapsed // the limiter is dropped outside the timing
                })
            });
    }
}

fn keyed_hit(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_hit");
    for_each_algorithm(&mut Hits(&mut group));

    for (keys, label) in SIZES {
        let limiter = KeyedRateLimiter::<u64, TokenBucket>::builder(allow_quota::<TokenBucket>())
            .hasher(RandomState::new())
            .build()
            .unwrap();
        for key in 0..keys {
            assert!(limiter.check(&key).is_allowed());
        }
        let mut rng = KeyRng::new(0x5eed);
        group.bench_function(BenchmarkId::new("token_bucket_siphash", label), |b| {
            b.iter(|| limiter.check(&rng.below(keys)))
        });
    }

    for (keys, label) in SIZES {
        let governor = governor::RateLimiter::keyed(governor_allow_quota());
        for key in 0..keys {
            assert!(governor.check_key(&key).is_ok());
        }
        assert_eq!(governor.len() as u64, keys);
        let mut rng = KeyRng::new(0x5eed);
        let denied = denials(TRIAL_CHECKS, || {
            governor.check_key(&rng.below(keys)).is_ok()
        });
        if on_allowed_path(&format!("keyed_hit/governor/{label}"), denied, TRIAL_CHECKS) {
            group.bench_function(BenchmarkId::new("governor", label), |b| {
                b.iter(|| governor.check_key(&rng.below(keys)))
            });
        }
    }
    group.finish();
}

/// `check_many` in batches of 8 keys, against 8 separate checks. Each
/// iteration is one batch of 8 (criterion reports time per iteration; the
/// README divides by 8 for the time per key).
fn keyed_batch(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_batch");
    for (keys, label) in SIZES {
        let limiter =
            KeyedRateLimiter::<u64, TokenBucket>::new(allow_quota::<TokenBucket>()).unwrap();
        for key in 0..keys {
            assert!(limiter.check(&key).is_allowed());
        }
        let mut rng = KeyRng::new(0x5eed);
        group.bench_function(BenchmarkId::new("check_many_8", label), |b| {
            b.iter(|| {
                let batch: [u64; 8] = std::array::from_fn(|_| rng.below(keys));
                limiter.check_many(&batch, |_, d| {
                    black_box(d);
                })
            })
        });
        group.bench_function(BenchmarkId::new("check_8", label), |b| {
            b.iter(|| {
                let batch: [u64; 8] = std::array::from_fn(|_| rng.below(keys));
                for key in &batch {
                    black_box(limiter.check(key));
                }
            })
        });
    }
    group.finish();
}

fn keyed_insert(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_insert");
    for_each_algorithm(&mut Insert(&mut group));

    let quota = governor_allow_quota();
    group.bench_function(BenchmarkId::new("governor", "new_key"), |b| {
        b.iter_custom(|iters| {
            let governor = governor::RateLimiter::keyed(quota);
            let start = Instant::now();
            for key in 0..iters {
                let _ = black_box(governor.check_key(&key));
            }
            let elapsed = start.elapsed();
            assert_eq!(governor.len() as u64, iters);
            elapsed
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = keyed_hit, keyed_insert, keyed_batch
}
criterion_main!(benches);
