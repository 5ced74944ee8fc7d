//! `SlidingWindowCounter` against `tests/models/sliding_window_counter.rs`,
//! then the raw steps against the invariants (see `rategate_fuzz`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rategate::{Quota, SlidingWindowCounter};
use rategate_fuzz::models::sliding_window_counter::ModelCounter;
use rategate_fuzz::{Target, bits_for, clamp_span, run, tag_span, windows_between};

struct Spec;

impl Target for Spec {
    type Alg = SlidingWindowCounter;
    type Model = ModelCounter;

    /// The window index keeps `64 - 2 bits(limit)` bits.
    fn exact_span(quota: &Quota) -> u64 {
        tag_span(quota.period_nanos(), 64 - 2 * bits_for(quota.limit()))
    }

    /// Steps back and `u64::MAX` are covered; readings are kept within the
    /// span where the truncated window tag is exact (the model has no tag).
    fn model_time(quota: &Quota, first: Option<u64>, _prev: u64, raw: u64) -> u64 {
        clamp_span(raw, first.unwrap_or(raw), Self::exact_span(quota))
    }

    /// Each window's own admissions fit the limit (the weighted previous
    /// count only takes room away): at most `limit` per window from the
    /// first admission's to the latest reading's.
    fn max_admitted(quota: &Quota, first: u64, latest: u64) -> u128 {
        u128::from(quota.limit()) * windows_between(quota.period_nanos(), first, latest)
    }
}

fuzz_target!(|data: &[u8]| run::<Spec>(data));
