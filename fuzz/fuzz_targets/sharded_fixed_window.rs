//! `Sharded<FixedWindow, 3>` against the invariants (see `rategate_fuzz`):
//! costs above 1 fall past the home shard, and `remaining`, `retry_after`
//! and `reset_after` must still be what the shards together do. No model:
//! the bound is the whole quota's, for readings that never go back (see
//! `Target::MONOTONIC`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rategate::{FixedWindow, Quota, Sharded};
use rategate_fuzz::models::fixed_window::ModelWindow;
use rategate_fuzz::{Target, bits_for, run, tag_span, windows_between};

struct Spec;

impl Target for Spec {
    type Alg = Sharded<FixedWindow, 3>;
    type Model = ModelWindow;

    const FRAGMENTED: bool = true;
    const MONOTONIC: bool = true;

    fn model_covers(_quota: &Quota) -> bool {
        false
    }

    fn limit(quota: &Quota, _capacity: u32) -> u32 {
        quota.limit()
    }

    /// Each shard's window tag keeps at least the bits the whole limit
    /// leaves.
    fn exact_span(quota: &Quota) -> u64 {
        tag_span(quota.period_nanos(), 64 - bits_for(quota.limit()))
    }

    fn model_time(_quota: &Quota, _first: Option<u64>, _prev: u64, raw: u64) -> u64 {
        raw
    }

    /// The shards share the windows, and their shares sum to the limit.
    fn max_admitted(quota: &Quota, first: u64, latest: u64) -> u128 {
        u128::from(quota.limit()) * windows_between(quota.period_nanos(), first, latest)
    }
}

fuzz_target!(|data: &[u8]| run::<Spec>(data));
