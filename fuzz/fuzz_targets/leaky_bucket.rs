//! `LeakyBucket` against `tests/models/leaky_bucket.rs` (nginx
//! `limit_req`), then the raw steps against the invariants (see
//! `rategate_fuzz`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rategate::{LeakyBucket, Quota};
use rategate_fuzz::models::leaky_bucket::Nginx;
use rategate_fuzz::{MS, Target, run};

struct Spec;

/// The last millisecond the crate's state holds.
const MAX_MS: u64 = (1 << 41) - 2;

/// Thousandths of a request per second, as the crate and nginx count.
fn rate(quota: &Quota) -> u128 {
    u128::from(quota.limit()) * 1_000_000_000_000 / u128::from(quota.period_nanos())
}

impl Target for Spec {
    type Alg = LeakyBucket;
    type Model = Nginx;
    const DELAYS: bool = true;

    /// The model has no horizon; the crate's state stops at `MAX_MS`: keep
    /// to readings whose waits (under 2^35 ms) end before it. Steps back
    /// are covered.
    fn model_time(_quota: &Quota, _first: Option<u64>, _prev: u64, raw: u64) -> u64 {
        raw.min(((1 << 41) - (1 << 36)) * MS)
    }

    /// Each admission adds `1000 x cost` to an excess that never exceeds
    /// `1000 x burst` and starts at `1000 x (cost - 1)`, while the drain
    /// between admissions takes at most `rate x ms / 1000` over the
    /// milliseconds from the first admission to the latest reading.
    fn max_admitted(quota: &Quota, first: u64, latest: u64) -> u128 {
        let burst = u128::from(quota.explicit_burst().unwrap_or(0));
        let ms = u128::from(
            (latest / MS)
                .min(MAX_MS)
                .saturating_sub((first / MS).min(MAX_MS)),
        );
        ((burst + 1) * 1_000_000 + rate(quota) * ms) / 1_000_000
    }
}

fuzz_target!(|data: &[u8]| run::<Spec>(data));
