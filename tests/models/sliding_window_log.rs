//! Sliding window log reference model: a plain list of every admission
//! ever made, `(time, cost)` in `u128`, that sums the costs inside
//! `(now - period, now]` from scratch on every request.
//!
//! Covers: any steps, back included (an earlier reading counts as the
//! latest one a check has seen), at any `u64` time.

use super::{Model, Outcome};
use rategate::{CheckError, Quota};

/// Every admission, never pruned. `latest` is the latest reading a check
/// has seen: an earlier reading counts as it (no time elapsed).
#[derive(Debug, Clone)]
pub struct ModelLog {
    limit: u128,
    period: u128,
    admitted: Vec<(u128, u32)>,
    latest: u128,
}

fn to_u64(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

impl ModelLog {
    pub fn with_params(limit: u32, period: u64) -> Self {
        ModelLog {
            limit: limit.into(),
            period: period.into(),
            admitted: Vec::new(),
            latest: 0,
        }
    }

    /// Admissions still counting at `t`: admitted at `a` with `t - period < a`.
    fn in_window(&self, t: u128) -> Vec<(u128, u32)> {
        self.admitted
            .iter()
            .copied()
            .filter(|&(a, _)| a + self.period > t)
            .collect()
    }

    fn used(&self, t: u128) -> u128 {
        self.in_window(t).iter().map(|&(_, c)| u128::from(c)).sum()
    }

    pub fn is_idle(&self, now: u64) -> bool {
        self.in_window(self.latest.max(now.into())).is_empty()
    }
}

impl Model for ModelLog {
    fn new(quota: &Quota) -> Self {
        ModelLog::with_params(quota.limit(), quota.period_nanos())
    }

    /// Takes cost off the oldest admissions still in the window.
    fn refund(&mut self, now: u64, cost: u32) -> u32 {
        self.latest = self.latest.max(now.into());
        let t = self.latest;
        let period = self.period;
        let mut left = cost;
        for (_, c) in self.admitted.iter_mut().filter(|(a, _)| *a + period > t) {
            let take = (*c).min(left);
            *c -= take;
            left -= take;
        }
        self.admitted.retain(|&(_, c)| c > 0);
        cost - left
    }

    fn request(&mut self, now: u64, cost: u32) -> Result<Outcome, CheckError> {
        if u128::from(cost) > self.limit {
            return Err(CheckError::CostExceedsCapacity {
                cost,
                capacity: self.limit as u32,
            });
        }
        let real = u128::from(now);
        let t = self.latest.max(real);
        // A probe (cost 0) records nothing, not even the reading.
        if cost > 0 {
            self.latest = t;
        }
        let used = self.used(t);
        // A probe (cost 0) always passes, even over a lowered limit.
        let allowed = cost == 0 || used + u128::from(cost) <= self.limit;
        if allowed && cost > 0 {
            self.admitted.push((t, cost));
        }
        let window = self.in_window(t);
        let reset_after = window
            .iter()
            .map(|&(a, _)| a + self.period - real)
            .max()
            .unwrap_or(0);
        let retry_after = if allowed {
            0
        } else {
            // The earliest expiry time after which what is left in the window
            // plus this cost fits.
            let mut expiries: Vec<u128> = window.iter().map(|&(a, _)| a + self.period).collect();
            expiries.sort_unstable();
            let at = expiries
                .into_iter()
                .find(|&e| {
                    let left: u128 = window
                        .iter()
                        .filter(|&&(a, _)| a + self.period > e)
                        .map(|&(_, c)| u128::from(c))
                        .sum();
                    left + u128::from(cost) <= self.limit
                })
                .expect("an empty window always fits");
            at - real
        };
        let used_after = self.used(t);
        Ok(Outcome {
            allowed,
            limit: self.limit as u32,
            remaining: self.limit.saturating_sub(used_after) as u32,
            reset_after: to_u64(reset_after),
            retry_after: to_u64(retry_after),
            delay: 0,
        })
    }
}

impl super::Retune for ModelLog {
    fn set_quota(&mut self, quota: &Quota) {
        self.limit = quota.limit().into();
        self.period = quota.period_nanos().into();
    }
}
