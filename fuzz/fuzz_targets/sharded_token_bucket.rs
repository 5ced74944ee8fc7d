//! `Sharded<TokenBucket, 3>` against the invariants (see `rategate_fuzz`):
//! costs above 1 fall past the home shard, extreme quotas split into
//! shards with a third of the rate. No model: the bound is the whole
//! bucket's, `burst + t / T`, for readings that never go back (see
//! `Target::MONOTONIC`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rategate::{Quota, Sharded, TokenBucket};
use rategate_fuzz::models::token_bucket::ModelBucket;
use rategate_fuzz::{Target, bucket_params as params, run};

struct Spec;

impl Target for Spec {
    type Alg = Sharded<TokenBucket, 3>;
    type Model = ModelBucket;

    const FRAGMENTED: bool = true;
    const MONOTONIC: bool = true;

    fn model_covers(_quota: &Quota) -> bool {
        false
    }

    fn limit(quota: &Quota, _capacity: u32) -> u32 {
        quota.burst_or(quota.limit())
    }

    /// A shard's tolerance is at most three times the whole bucket's; past
    /// twice that before `u64::MAX` a TAT could not be stored.
    fn horizon(quota: &Quota) -> u64 {
        let (interval, capacity) = params(quota);
        let tau = interval.saturating_mul(capacity).saturating_mul(3);
        u64::MAX.saturating_sub(tau.saturating_mul(2))
    }

    fn model_time(_quota: &Quota, _first: Option<u64>, _prev: u64, raw: u64) -> u64 {
        raw
    }

    fn max_admitted(quota: &Quota, first: u64, latest: u64) -> u128 {
        let (interval, capacity) = params(quota);
        u128::from(capacity) + u128::from(latest - first) / u128::from(interval)
    }
}

fuzz_target!(|data: &[u8]| run::<Spec>(data));
