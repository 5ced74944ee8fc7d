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
/// tokens are exact; the bucket starts full. It is negative only after a
/// quota change left the bucket owing more than the new bucket holds.
#[derive(Debug, Clone)]
pub struct ModelBucket {
    interval: i128,
    capacity: i128,
    credit: i128,
    last: i128,
}

impl ModelBucket {
    /// One token per `period / limit` rounded up to a whole nanosecond: the
    /// crate's promise is never to admit faster than the quota.
    pub fn with_params(limit: u32, period: u64, burst: Option<u32>) -> Self {
        let interval = i128::from(period.div_ceil(u64::from(limit)));
        let capacity = i128::from(burst.unwrap_or(limit));
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
        if i128::from(cost) > self.capacity {
            return Err(CheckError::CostExceedsCapacity {
                cost,
                capacity: self.capacity as u32,
            });
        }
        let now = i128::from(now);
        let full = self.capacity * self.interval;
        self.credit = (self.credit + (now - self.last)).min(full);
        self.last = now;
        let need = i128::from(cost) * self.interval;
        // A probe (cost 0) always passes, even owing after a quota change.
        let allowed = cost == 0 || self.credit >= need;
        let retry_after = if allowed {
            self.credit -= need;
            0
        } else {
            need - self.credit
        };
        Ok(Outcome {
            allowed,
            limit: self.capacity as u32,
            remaining: (self.credit.max(0) / self.interval) as u32,
            reset_after: (full - self.credit) as u64,
            retry_after: retry_after as u64,
            // A token bucket never delays.
            delay: 0,
        })
    }

    /// The tokens go back into the bucket as it is now, never past full.
    fn refund(&mut self, now: u64, cost: u32) -> u32 {
        let now = i128::from(now);
        let full = self.capacity * self.interval;
        self.credit = (self.credit + (now - self.last)).min(full);
        self.last = now;
        let given = (i128::from(cost) * self.interval).min(full - self.credit);
        self.credit += given;
        // Rounded up; `given` is never negative (the credit is at most full).
        ((given + self.interval - 1) / self.interval) as u32
    }
}

impl super::Retune for ModelBucket {
    /// The time until the bucket is full again is kept: what the bucket
    /// lacked of full under the old quota (`full - credit`, in nanoseconds of
    /// refill) it lacks under the new one, which may be more than the new
    /// bucket holds (the credit is then negative: denied until refilled).
    fn set_quota(&mut self, quota: &Quota) {
        let lacking = self.capacity * self.interval - self.credit;
        let new =
            ModelBucket::with_params(quota.limit(), quota.period_nanos(), quota.explicit_burst());
        self.interval = new.interval;
        self.capacity = new.capacity;
        self.credit = self.capacity * self.interval - lacking;
    }
}
