//! Fixed window reference model, written from the definition: a `HashMap`
//! from window index to the cost admitted in it, plus the latest window that
//! admitted anything (a clock that steps back stays there).
//!
//! Covers: any steps, back included, at any `u64` time, as long as the
//! crate's truncated window tag is exact: always when every window the clock
//! can reach fits the tag (`u64::MAX / period < 2^(64 - bits(limit))`),
//! otherwise for readings less than `2^(63 - bits(limit))` windows apart.
//! Beyond that horizon the crate may take an old count for a current one
//! (documented); the model never does.

use super::{Model, Outcome};
use rategate::{CheckError, Quota};
use std::collections::HashMap;

/// One key's windows.
#[derive(Debug, Clone)]
pub struct ModelWindow {
    limit: u64,
    period: u64,
    /// Window index -> cost admitted in it.
    counts: HashMap<u64, u64>,
    /// The latest window that admitted a non-zero cost.
    last: Option<u64>,
}

impl ModelWindow {
    pub fn with_params(limit: u32, period: u64) -> ModelWindow {
        ModelWindow {
            limit: limit.into(),
            period,
            counts: HashMap::new(),
            last: None,
        }
    }

    /// The most cost that can pass at once.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window `now` counts in: never before one that admitted.
    fn window(&self, now: u64) -> u64 {
        let w = now / self.period;
        match self.last {
            Some(last) if last > w => last,
            _ => w,
        }
    }

    fn used(&self, window: u64) -> u64 {
        self.counts.get(&window).copied().unwrap_or(0)
    }

    /// Whether nothing is left in the window `now` counts in.
    pub fn is_idle(&self, now: u64) -> bool {
        self.used(self.window(now)) == 0
    }

    /// Decides a request of `cost` at `now`, recording it if admitted and
    /// `record` is set.
    pub fn decide(&mut self, now: u64, cost: u32, record: bool) -> Result<Outcome, CheckError> {
        if u64::from(cost) > self.limit {
            return Err(CheckError::CostExceedsCapacity {
                cost,
                capacity: self.limit as u32,
            });
        }
        let w = self.window(now);
        let used = self.used(w);
        let end = (u128::from(w) + 1) * u128::from(self.period);
        let until_end = u64::try_from(end - u128::from(now)).unwrap_or(u64::MAX);
        let limit = self.limit as u32;
        let cost = u64::from(cost);
        let outcome = |allowed, remaining, reset_after, retry_after| Outcome {
            allowed,
            limit,
            remaining,
            reset_after,
            retry_after,
            delay: 0,
        };
        // A probe (cost 0) always passes, even over a lowered limit.
        if used + cost <= self.limit || cost == 0 {
            if record && cost > 0 {
                *self.counts.entry(w).or_insert(0) += cost;
                self.last = Some(w);
            }
            let reset = if used + cost > 0 { until_end } else { 0 };
            Ok(outcome(
                true,
                self.limit.saturating_sub(used + cost) as u32,
                reset,
                0,
            ))
        } else {
            Ok(outcome(
                false,
                self.limit.saturating_sub(used) as u32,
                until_end,
                until_end,
            ))
        }
    }
}

impl Model for ModelWindow {
    fn new(quota: &Quota) -> Self {
        ModelWindow::with_params(quota.limit(), quota.period_nanos())
    }

    fn request(&mut self, now: u64, cost: u32) -> Result<Outcome, CheckError> {
        self.decide(now, cost, true)
    }

    fn peek(&self, now: u64, cost: u32) -> Result<Outcome, CheckError> {
        self.clone().decide(now, cost, false)
    }

    /// Lowers the count of `now`'s window, never below zero; a window
    /// emptied so is a key never seen.
    fn refund(&mut self, now: u64, cost: u32) -> u32 {
        let w = now / self.period;
        if self.window(now) != w {
            return 0;
        }
        let used = self.used(w);
        let given = used.min(cost.into());
        self.counts.insert(w, used - given);
        if used - given == 0 {
            self.last = None;
        }
        given as u32
    }
}

impl super::Retune for ModelWindow {
    fn set_quota(&mut self, quota: &Quota) {
        self.limit = quota.limit().into();
    }
}

impl super::Idle for ModelWindow {
    fn is_idle(&self, now: u64) -> bool {
        ModelWindow::is_idle(self, now)
    }
}
