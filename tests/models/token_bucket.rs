//! Token bucket reference model: a plain token bucket that keeps its credit
//! in nanoseconds of refill time and refills it lazily.
//!
//! Covers: times that never go back (each `now` at least the one before),
//! in the whole `u64` range. The model has no state word to overflow, so it
//! also admits requests whose GCRA theoretical arrival time would pass
//! `u64::MAX`, which the crate denies by design: compare decisions only for
//! times up to `u64::MAX - 2 x capacity x interval`.

use super::{Model, Outcome};
use rategate::{CheckError, Quota};

/// A token bucket the textbook way. `credit` is the bucket's content
/// measured in nanoseconds of refill (tokens x interval), so fractional
/// tokens are exact; the bucket starts full.
#[derive(Debug, Clone)]
pub struct ModelBucket {
    interval: u128,
    capacity: u128,
    credit: u128,
    last: u128,
}

impl ModelBucket {
    /// One token per `period / limit` rounded up to a whole nanosecond: the
    /// crate's promise is never to admit faster than the quota.
    pub fn with_params(limit: u32, period: u64, burst: Option<u32>) -> Self {
        let interval = u128::from(period.div_ceil(u64::from(limit)));
        let capacity = u128::from(burst.unwrap_or(limit));
        ModelBucket {
            interval,
            capacity,
            credit: capacity * interval,
            last: 0,
        }
    }
}

impl Model for ModelBucket {
    fn new(quota: &Quota) -> Self {
        ModelBucket::with_params(quota.limit(), quota.period_nanos(), quota.explicit_burst())
    }

    /// Time only moves forward in this model's inputs.
    fn request(&mut self, now: u64, cost: u32) -> Result<Outcome, CheckError> {
        if u128::from(cost) > self.capacity {
            return Err(CheckError::CostExceedsCapacity {
                cost,
                capacity: self.capacity as u32,
            });
        }
        let now = u128::from(now);
        let full = self.capacity * self.interval;
        self.credit = (self.credit + (now - self.last)).min(full);
        self.last = now;
        let need = u128::from(cost) * self.interval;
        let allowed = self.credit >= need;
        let retry_after = if allowed {
            self.credit -= need;
            0
        } else {
            need - self.credit
        };
        Ok(Outcome {
            allowed,
            limit: self.capacity as u32,
            remaining: (self.credit / self.interval) as u32,
            reset_after: (full - self.credit) as u64,
            retry_after: retry_after as u64,
            // A token bucket never delays.
            delay: 0,
        })
    }

    /// The tokens go back into the bucket as it is now, never past full.
    fn refund(&mut self, now: u64, cost: u32) -> u32 {
        let now = u128::from(now);
        let full = self.capacity * self.interval;
        self.credit = (self.credit + (now - self.last)).min(full);
        self.last = now;
        let given = (u128::from(cost) * self.interval).min(full - self.credit);
        self.credit += given;
        given.div_ceil(self.interval) as u32
    }
}

impl super::Retune for ModelBucket {
    /// Not modelled: the token bucket keeps its time to full across a
    /// change, which `tests/set_quota.rs` checks directly.
    fn set_quota(&mut self, _: &Quota) {
        unimplemented!("the token bucket's quota change is tested directly")
    }
}
