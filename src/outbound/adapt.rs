//! The guard's own pacing below its limits: lowered when the upstream keeps
//! answering 429, raised back gradually when it stops, and capped by the
//! policy the upstream advertises.

use std::time::Duration;

/// How the guard's rate follows the upstream's 429s: additive increase,
/// multiplicative decrease (AIMD, as TCP does for congestion).
///
/// On a 429 the guard's rate is multiplied by
/// [`decrease`](Adaptation::decrease) (at most once per
/// [`every`](Adaptation::every), so that a burst of 429s for requests that
/// were already in flight counts once), down to
/// [`floor`](Adaptation::floor) of its configured rate. While responses
/// come back without a 429 it grows by [`step`](Adaptation::step) of the
/// configured rate per `every`, up to the configured rate. While below it,
/// the guard paces requests evenly (no bursts).
///
/// # Examples
///
/// ```
/// use rategate::Adaptation;
/// use std::time::Duration;
///
/// let gentle = Adaptation {
///     decrease: 0.7,
///     step: 0.02,
///     every: Duration::from_secs(2),
///     ..Adaptation::default()
/// };
/// assert_eq!(gentle.floor, Adaptation::default().floor);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adaptation {
    /// Factor applied to the rate on a 429, in `(0, 1]`; default 0.5.
    pub decrease: f64,
    /// Fraction of the configured rate regained per `every` without a 429;
    /// default 0.05 (from half the rate back to full in 10 s).
    pub step: f64,
    /// The period of decreases and increases; default 1 s.
    pub every: Duration,
    /// The lowest fraction of the configured rate; default 1/64.
    pub floor: f64,
}

impl Default for Adaptation {
    fn default() -> Self {
        Adaptation {
            decrease: 0.5,
            step: 0.05,
            every: Duration::from_secs(1),
            floor: 1.0 / 64.0,
        }
    }
}

impl Adaptation {
    /// Never changes the rate: the guard only pauses as told.
    pub const OFF: Adaptation = Adaptation {
        decrease: 1.0,
        step: 0.0,
        every: Duration::from_secs(1),
        floor: 1.0,
    };

    /// The same settings with every field forced into its range (NaN and
    /// out-of-range values replaced by the nearest sensible one).
    fn sanitized(self) -> Adaptation {
        let clamp = |x: f64, lo: f64, hi: f64, default: f64| {
            if x.is_nan() { default } else { x.clamp(lo, hi) }
        };
        let floor = clamp(self.floor, 1e-6, 1.0, 1.0 / 64.0);
        Adaptation {
            decrease: clamp(self.decrease, 1e-6, 1.0, 0.5),
            step: clamp(self.step, 0.0, 1.0, 0.05),
            every: self.every,
            floor,
        }
    }
}

/// The pacing state, kept under the guard's mutex (touched once per
/// response, never on the admission path).
#[derive(Debug)]
pub(crate) struct Throttle {
    settings: Adaptation,
    /// Nanoseconds per unit of cost at the configured rate; 0 when the
    /// guard has no limit to scale.
    base_gap: u64,
    /// Fraction of the configured rate, in `[floor, 1]`.
    factor: f64,
    /// When the factor last changed (guard clock, ns).
    last_change: Option<u64>,
    /// Nanoseconds per unit from the upstream's advertised policy; 0 none.
    policy_gap: u64,
}

impl Throttle {
    pub(crate) fn new(settings: Adaptation, base_gap: u64) -> Self {
        Throttle {
            settings: settings.sanitized(),
            base_gap,
            factor: 1.0,
            last_change: None,
            policy_gap: 0,
        }
    }

    fn every(&self) -> u64 {
        crate::clock::duration_to_nanos(self.settings.every)
    }

    fn due(&self, now: u64) -> bool {
        self.last_change
            .is_none_or(|t| now.saturating_sub(t) >= self.every())
    }

    /// A 429: lower the rate, once per period.
    pub(crate) fn on_limited(&mut self, now: u64) {
        if self.due(now) {
            self.factor = (self.factor * self.settings.decrease).max(self.settings.floor);
            self.last_change = Some(now);
        }
    }

    /// A response without 429: raise the rate, once per period.
    pub(crate) fn on_success(&mut self, now: u64) {
        if self.factor < 1.0 && self.due(now) {
            self.factor = (self.factor + self.settings.step).min(1.0);
            self.last_change = Some(now);
        }
    }

    /// The upstream advertised `quota` per `window`.
    pub(crate) fn on_policy(&mut self, quota: u64, window: Duration) {
        let gap = window.as_nanos() / u128::from(quota.max(1));
        self.policy_gap = u64::try_from(gap).unwrap_or(u64::MAX);
    }

    /// Nanoseconds per unit of cost between admissions; 0 when the limits
    /// alone decide (bursts allowed).
    pub(crate) fn gap(&self) -> u64 {
        let own = if self.factor < 1.0 && self.base_gap > 0 {
            // factor >= floor >= 1e-6, so this is finite; saturating cast.
            (self.base_gap as f64 / self.factor) as u64
        } else {
            0
        };
        // A policy only slows the guard down: one as fast as its own limits
        // or faster changes nothing.
        let policy = if self.policy_gap > self.base_gap {
            self.policy_gap
        } else {
            0
        };
        own.max(policy)
    }

    pub(crate) fn base_gap_nanos(&self) -> u64 {
        self.base_gap
    }

    pub(crate) fn factor(&self) -> f64 {
        self.factor
    }
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn decreases_once_per_period_and_recovers_step_by_step() {
        let mut t = Throttle::new(Adaptation::default(), 10_000_000); // 100/s
        assert_eq!(t.gap(), 0);
        t.on_limited(0);
        t.on_limited(S / 2); // same period: no second halving
        assert_eq!(t.factor(), 0.5);
        assert_eq!(t.gap(), 20_000_000);
        t.on_success(S / 2);
        assert_eq!(t.factor(), 0.5, "not a period yet");
        t.on_success(S);
        assert!((t.factor() - 0.55).abs() < 1e-9);
        for i in 2..=12 {
            t.on_success(i * S);
        }
        assert_eq!(t.factor(), 1.0);
        assert_eq!(t.gap(), 0);
        for i in 20..40 {
            t.on_limited(i * S);
        }
        assert_eq!(t.factor(), 1.0 / 64.0, "floored");
    }

    #[test]
    fn a_slower_policy_caps_the_rate() {
        let mut t = Throttle::new(Adaptation::OFF, 10_000_000);
        t.on_policy(50, Duration::from_secs(1));
        assert_eq!(t.gap(), 20_000_000);
        t.on_policy(1000, Duration::from_secs(1));
        assert_eq!(t.gap(), 0, "a faster policy changes nothing");
        t.on_limited(0);
        assert_eq!(t.factor(), 1.0, "adaptation off");
    }

    #[test]
    fn hostile_settings_are_sanitized() {
        let s = Adaptation {
            decrease: f64::NAN,
            step: -3.0,
            every: Duration::ZERO,
            floor: 0.0,
        };
        let mut t = Throttle::new(s, 1);
        for i in 0..100 {
            t.on_limited(i);
        }
        assert!(t.factor() > 0.0);
        assert!(t.gap() < u64::MAX);
    }
}
