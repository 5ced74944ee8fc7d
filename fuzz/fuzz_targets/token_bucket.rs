//! `TokenBucket` against `tests/models/token_bucket.rs`, then the raw
//! steps against the invariants (see `rategate_fuzz`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rategate::{Quota, TokenBucket};
use rategate_fuzz::models::token_bucket::ModelBucket;
use rategate_fuzz::{Target, bucket_params as params, run};

struct Spec;

impl Target for Spec {
    type Alg = TokenBucket;
    type Model = ModelBucket;

    /// Beyond `tau = u64::MAX / 2` no reading is safe from the TAT
    /// overflow the model does not have (see `model_time`).
    fn model_covers(quota: &Quota) -> bool {
        let (interval, capacity) = params(quota);
        interval
            .checked_mul(capacity)
            .is_some_and(|tau| tau <= u64::MAX / 2)
    }

    /// Up to `u64::MAX - 2 tau` no TAT can pass `u64::MAX`; later, requests
    /// whose TAT would are denied (documented), so a later reading may deny
    /// what an earlier one admits, and `remaining` ignores that limit.
    fn horizon(quota: &Quota) -> u64 {
        let (interval, capacity) = params(quota);
        let tau = interval.saturating_mul(capacity);
        u64::MAX.saturating_sub(tau.saturating_mul(2))
    }

    /// The model takes readings that never go back, and has no state word
    /// to overflow: keep to times where the crate's theoretical arrival
    /// time (at most two capacities ahead of the reading) fits `u64`.
    fn model_time(quota: &Quota, _first: Option<u64>, prev: u64, raw: u64) -> u64 {
        raw.max(prev).min(Self::horizon(quota))
    }

    /// The TAT moves by `cost x interval` per admission, starts at the first
    /// admission's reading and stays within `tau` of the latest: admitted
    /// `x interval <= latest - first + capacity x interval`.
    fn max_admitted(quota: &Quota, first: u64, latest: u64) -> u128 {
        let (interval, capacity) = params(quota);
        u128::from(capacity) + u128::from(latest - first) / u128::from(interval)
    }
}

fuzz_target!(|data: &[u8]| run::<Spec>(data));
