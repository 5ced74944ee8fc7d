//! Sliding window counter reference model, written from the documented rule,
//! not from the crate's code: a list of admitted `(time, cost)` and plain
//! `u128` maths. A request passes at `t` if the real-valued estimate fits,
//! `previous x (period - elapsed) + (current + cost) x period <= limit x
//! period`; `remaining` is the most further units the same test admits;
//! `retry_after` is found by bisection over time; `reset_after` is when the
//! last admission's window and the one after it are over.
//!
//! Covers: any steps, back included, at any `u64` time, as long as the
//! crate's truncated window tag is exact: always when every window the clock
//! can reach fits the tag (`u64::MAX / period < 2^(64 - 2 bits(limit))`),
//! otherwise for readings less than `2^(63 - 2 bits(limit))` windows apart.
//! Beyond that horizon the crate may take old counts for current ones
//! (documented); the model never does.

use super::{Model, Outcome};
use rategate::{CheckError, Quota};

/// One key's admissions.
#[derive(Debug, Clone)]
pub struct ModelCounter {
    limit: u128,
    period: u128,
    /// Admitted requests: (time they counted at, cost).
    admitted: Vec<(u128, u128)>,
    /// Start of the window of the latest admission: a clock that steps back
    /// before it counts as this time.
    floor: u128,
}

fn saturate(t: u128) -> u64 {
    u64::try_from(t).unwrap_or(u64::MAX)
}

impl ModelCounter {
    pub fn with_params(limit: u32, period: u64) -> ModelCounter {
        ModelCounter {
            limit: limit.into(),
            period: period.into(),
            admitted: Vec::new(),
            floor: 0,
        }
    }

    /// The most cost that can pass at once.
    pub fn limit(&self) -> u128 {
        self.limit
    }

    /// Cost admitted in window `w`.
    fn in_window(&self, w: u128) -> u128 {
        self.admitted
            .iter()
            .filter(|&&(t, _)| t / self.period == w)
            .map(|&(_, c)| c)
            .sum()
    }

    /// (previous-window cost, current-window cost, elapsed) at time `t`.
    fn counts(&self, t: u128) -> (u128, u128, u128) {
        let w = t / self.period;
        let previous = if w == 0 { 0 } else { self.in_window(w - 1) };
        (previous, self.in_window(w), t % self.period)
    }

    /// `limit x period - previous x (period - elapsed)`: the room, in
    /// units of 1/period requests, before the current count and the cost.
    fn scaled_room(&self, t: u128) -> (i128, u128) {
        let (previous, current, elapsed) = self.counts(t);
        let room =
            (self.limit * self.period) as i128 - (previous * (self.period - elapsed)) as i128;
        (room, current)
    }

    fn passes(&self, t: u128, cost: u128) -> bool {
        let (room, current) = self.scaled_room(t);
        ((current + cost) * self.period) as i128 <= room
    }

    /// Whole units the estimate still admits at `t`, floored at zero.
    fn units(&self, t: u128) -> u128 {
        let (room, current) = self.scaled_room(t);
        let whole = room.div_euclid(self.period as i128) - current as i128;
        whole.max(0) as u128
    }

    fn reset_at(&self, t: u128) -> Option<u128> {
        let w = t / self.period;
        if self.in_window(w) > 0 {
            Some((w + 2) * self.period)
        } else if w > 0 && self.in_window(w - 1) > 0 {
            Some((w + 1) * self.period)
        } else {
            None
        }
    }

    /// Whether the admissions no longer weigh at `now`.
    pub fn is_idle(&self, now: u64) -> bool {
        let t = u128::from(now).max(self.floor);
        let (previous, current, _) = self.counts(t);
        previous == 0 && current == 0
    }

    /// Decides a request of `cost` at `now`, recording it if admitted and
    /// `record` is set.
    pub fn decide(&mut self, now: u64, cost: u32, record: bool) -> Result<Outcome, CheckError> {
        if u128::from(cost) > self.limit {
            return Err(CheckError::CostExceedsCapacity {
                cost,
                capacity: self.limit as u32,
            });
        }
        let mut k = self.clone();
        let now = u128::from(now);
        let t = now.max(k.floor);
        let cost = u128::from(cost);
        let limit = self.limit as u32;
        // Cost 0 is a probe: admitted whatever the estimate.
        if cost == 0 || k.passes(t, cost) {
            let remaining = k.units(t).saturating_sub(cost);
            if cost > 0 {
                k.admitted.push((t, cost));
                k.floor = t / self.period * self.period;
            }
            let reset = k.reset_at(t).map_or(0, |r| saturate(r - now));
            if record && cost > 0 {
                *self = k;
            }
            Ok(Outcome {
                allowed: true,
                limit,
                remaining: remaining as u32,
                reset_after: reset,
                retry_after: 0,
                delay: 0,
            })
        } else {
            // The estimate never grows without arrivals: bisect for the
            // first time it admits `cost`; two windows on it is zero.
            let (mut lo, mut hi) = (t, (t / self.period + 2) * self.period);
            assert!(k.passes(hi, cost));
            while lo + 1 < hi {
                let mid = lo + (hi - lo) / 2;
                if k.passes(mid, cost) {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            let reset = k.reset_at(t).map_or(0, |r| saturate(r - now));
            Ok(Outcome {
                allowed: false,
                limit,
                remaining: k.units(t) as u32,
                reset_after: reset,
                retry_after: saturate(hi - now),
                delay: 0,
            })
        }
    }
}

impl Model for ModelCounter {
    /// Takes cost off the current window's admissions, never below zero.
    fn refund(&mut self, now: u64, cost: u32) -> u32 {
        let t = u128::from(now).max(self.floor);
        let w = t / self.period;
        let mut left = u128::from(cost);
        let period = self.period;
        for (_, c) in self.admitted.iter_mut().filter(|(at, _)| *at / period == w) {
            let take = (*c).min(left);
            *c -= take;
            left -= take;
        }
        self.admitted.retain(|&(_, c)| c > 0);
        (u128::from(cost) - left) as u32
    }

    fn new(quota: &Quota) -> Self {
        ModelCounter::with_params(quota.limit(), quota.period_nanos())
    }

    fn request(&mut self, now: u64, cost: u32) -> Result<Outcome, CheckError> {
        self.decide(now, cost, true)
    }

    fn peek(&self, now: u64, cost: u32) -> Result<Outcome, CheckError> {
        self.clone().decide(now, cost, false)
    }
}

impl super::Idle for ModelCounter {
    fn is_idle(&self, now: u64) -> bool {
        ModelCounter::is_idle(self, now)
    }
}

impl super::Retune for ModelCounter {
    fn set_quota(&mut self, quota: &Quota) {
        self.limit = quota.limit().into();
    }
}
