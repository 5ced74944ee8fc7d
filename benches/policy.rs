//! Policies: a 3-limit all-or-nothing check (`policy::AllOf`) next to the
//! same three limits checked one by one (no all-or-nothing guarantee: a
//! denial by the third would leave the first two charged).
//!
//! * `all_of_3/direct`: three direct token buckets.
//! * `all_of_3/keyed`: one key in each of three keyed token buckets
//!   (`String` keys, 1,000 live keys per limiter, the key drawn by a cheap
//!   PRNG), as the HTTP layer checks a request's rules.
//!
//! Allowed path throughout (the token bucket's quota from `common`).

mod common;

use common::{KeyRng, allow_quota, config};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rategate::policy::{AllOf, KeyedLimit, Limit};
use rategate::{KeyedRateLimiter, RateLimiter, TokenBucket};
use std::hint::black_box;
use std::sync::Arc;

const KEYS: u64 = 1_000;

fn direct(c: &mut Criterion) {
    let mut group = c.benchmark_group("all_of_3");
    let limiters: Vec<Arc<RateLimiter<TokenBucket>>> = (0..3)
        .map(|_| Arc::new(RateLimiter::new(allow_quota::<TokenBucket>()).unwrap()))
        .collect();
    group.bench_function(BenchmarkId::new("one_by_one", "direct"), |b| {
        b.iter(|| {
            limiters
                .iter()
                .all(|l| black_box(l.check_n(1).unwrap()).is_allowed())
        })
    });
    let all = AllOf::new(limiters.iter().map(|l| Arc::clone(l) as Arc<dyn Limit>));
    assert!(all.check_n(1).unwrap().is_allowed());
    group.bench_function(BenchmarkId::new("all_of", "direct"), |b| {
        b.iter(|| black_box(all.check_n(1).unwrap()))
    });
    group.finish();
}

fn keyed(c: &mut Criterion) {
    type Keyed = KeyedRateLimiter<String, TokenBucket>;
    let mut group = c.benchmark_group("all_of_3");
    let limiters: Vec<Arc<Keyed>> = (0..3)
        .map(|_| Arc::new(Keyed::new(allow_quota::<TokenBucket>()).unwrap()))
        .collect();
    let keys: Vec<String> = (0..KEYS).map(|k| format!("user-{k}")).collect();
    for limiter in &limiters {
        for key in &keys {
            assert!(limiter.check(key.as_str()).is_allowed());
        }
    }
    let mut rng = KeyRng::new(0x5eed);
    group.bench_function(BenchmarkId::new("one_by_one", "keyed"), |b| {
        b.iter(|| {
            let key = keys[rng.below(KEYS) as usize].as_str();
            limiters
                .iter()
                .all(|l| black_box(l.check_n(key, 1).unwrap()).is_allowed())
        })
    });
    // One `AllOf` per key, built beforehand, as a policy holding its
    // members would be.
    let all: Vec<AllOf> =
        keys.iter()
            .map(|key| {
                AllOf::new(limiters.iter().map(|l| {
                    Arc::new(KeyedLimit::new(Arc::clone(l), key.clone())) as Arc<dyn Limit>
                }))
            })
            .collect();
    group.bench_function(BenchmarkId::new("all_of", "keyed"), |b| {
        b.iter(|| black_box(all[rng.below(KEYS) as usize].check_n(1).unwrap()))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = direct, keyed
}
criterion_main!(benches);
