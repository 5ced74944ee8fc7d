//! `SlidingWindowLog` against `tests/models/sliding_window_log.rs`, then
//! the raw steps against the invariants (see `rategate_fuzz`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rategate::{Quota, SlidingWindowLog};
use rategate_fuzz::models::sliding_window_log::ModelLog;
use rategate_fuzz::{Target, run};

struct Spec;

impl Target for Spec {
    type Alg = SlidingWindowLog;
    type Model = ModelLog;

    /// The model covers every reading, steps back and `u64::MAX` included.
    fn model_time(_quota: &Quota, _first: Option<u64>, _prev: u64, raw: u64) -> u64 {
        raw
    }

    /// Admissions are recorded at readings from `first` to `latest`; any
    /// `period` of them holds at most `limit`.
    fn max_admitted(quota: &Quota, first: u64, latest: u64) -> u128 {
        let periods = u128::from((latest - first) / quota.period_nanos()) + 1;
        u128::from(quota.limit()) * periods
    }
}

fuzz_target!(|data: &[u8]| run::<Spec>(data));
