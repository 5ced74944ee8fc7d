//! The guard's own pacing below its limits: lowered when the upstream keeps
//! answering 429, raised back gradually when it stops, and capped by the
//! policy the upstream advertises.

use std::time::Duration;

/// How the guard's rate follows the upstream's 429s when the upstream does
/// not say its limit: a bisection between the fastest rate known to pass
/// and the slowest known to draw a 429.
///
/// The guard keeps two marks, as fractions of its configured rate: *good*,
/// the fastest rate it sent at for a whole [`every`](Adaptation::every)
/// without a 429, and *ceiling*, the rate that drew the last 429 (both 1.0
/// at first). On a 429 (counted at most once per `every`, so that a burst
/// of 429s for requests already in flight counts once) the ceiling becomes
/// the current rate; if *good* is not below it, *good* is multiplied by
/// [`decrease`](Adaptation::decrease) (down to [`floor`](Adaptation::floor));
/// the guard drops to *good* and holds it for `HOLD` (10) periods: a
/// lowered upstream limit usually sits at or near *good*, and holding it
/// costs no 429. Then, after each `every` without a 429, the current rate
/// becomes *good* and the guard tries half-way to the ceiling, while the
/// two are more than half a [`step`](Adaptation::step) apart: a limit
/// between them is bracketed in a few 429s, each after a hold. After
/// `PROBE_AFTER` (30) quiet periods with the bracket closed, the ceiling is
/// raised by `step` (the upstream may have raised its limit), up to the
/// configured rate. While below the
/// configured rate, the guard paces requests evenly (no bursts).
///
/// # Examples
///
/// ```
/// use rategate::outbound::Adaptation;
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
/// Quiet periods with the bracket closed before the guard probes a higher
/// rate.
const PROBE_AFTER: u32 = 30;

/// Periods the guard holds its rate after a 429 before probing upwards.
const HOLD: u32 = 10;

#[derive(Debug)]
pub(crate) struct Throttle {
    settings: Adaptation,
    /// Nanoseconds per unit of cost at the configured rate; 0 when the
    /// guard has no limit to scale.
    base_gap: u64,
    /// Fraction of the configured rate, in `[floor, 1]`.
    factor: f64,
    /// The factor that last drew a 429 (1.0: none yet, or probed back up).
    ceiling: f64,
    /// The fastest factor sent at for a whole period without a 429.
    good: f64,
    /// Quiet periods since the bracket closed.
    quiet: u32,
    /// Quiet periods since the last 429 (the hold before probing).
    held: u32,
    /// When the factor was last cut (guard clock, ns): 429s count once
    /// per period.
    last_cut: Option<u64>,
    /// When the factor last rose, or was cut: rises come one period apart,
    /// the first a full period after a cut.
    last_rise: Option<u64>,
    /// Nanoseconds per unit from the upstream's advertised policy; 0 none.
    policy_gap: u64,
}

impl Throttle {
    pub(crate) fn new(settings: Adaptation, base_gap: u64) -> Self {
        Throttle {
            settings: settings.sanitized(),
            base_gap,
            factor: 1.0,
            ceiling: 1.0,
            good: 1.0,
            quiet: 0,
            held: HOLD,
            last_cut: None,
            last_rise: None,
            policy_gap: 0,
        }
    }

    fn every(&self) -> u64 {
        crate::clock::duration_to_nanos(self.settings.every)
    }

    fn due(&self, since: Option<u64>, now: u64) -> bool {
        since.is_none_or(|t| now.saturating_sub(t) >= self.every())
    }

    /// A 429: lower the rate, once per period.
    pub(crate) fn on_limited(&mut self, now: u64) {
        if self.due(self.last_cut, now) {
            self.ceiling = self.factor;
            if self.good >= self.factor {
                self.good = (self.factor * self.settings.decrease).max(self.settings.floor);
            }
            self.factor = self.good;
            self.quiet = 0;
            self.held = 0;
            self.last_cut = Some(now);
            self.last_rise = Some(now);
        }
    }

    pub(crate) fn on_success(&mut self, now: u64) {
        if !self.due(self.last_rise, now) {
            return;
        }
        self.last_rise = Some(now);
        // A whole period at the current rate without a 429.
        self.good = self.good.max(self.factor);
        if self.held < HOLD {
            self.held += 1;
            return;
        }
        if self.ceiling - self.good > self.settings.step / 2.0 {
            self.factor = (self.good + self.ceiling) / 2.0;
            return;
        }
        if self.ceiling >= 1.0 {
            // Within a step of the configured rate, which always may be
            // tried: back to it.
            self.factor = 1.0;
            self.good = 1.0;
            return;
        }
        self.factor = self.good;
        {
            self.quiet += 1;
            if self.quiet >= PROBE_AFTER {
                self.quiet = 0;
                self.ceiling = (self.ceiling + self.settings.step).min(1.0);
                self.factor = (self.good + self.ceiling) / 2.0;
            }
        }
    }

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
    fn decreases_once_per_period_and_bisects_back() {
        let mut t = Throttle::new(Adaptation::default(), 10_000_000); // 100/s
        assert_eq!(t.gap(), 0);
        t.on_limited(0);
        t.on_limited(S / 2); // same period: no second cut
        assert_eq!(t.factor(), 0.5);
        assert_eq!(t.gap(), 20_000_000);
        t.on_success(S / 2);
        assert_eq!(t.factor(), 0.5, "not a period yet");
        // Held for HOLD periods, then half-way to the 429's rate.
        for i in 1..=u64::from(HOLD) {
            t.on_success(i * S);
            assert_eq!(t.factor(), 0.5);
        }
        let i = u64::from(HOLD) + 1;
        t.on_success(i * S);
        assert_eq!(t.factor(), 0.75);
        t.on_success((i + 1) * S);
        assert_eq!(t.factor(), 0.875);
        for k in 2..=8 {
            t.on_success((i + k) * S);
        }
        assert_eq!(t.factor(), 1.0);
        assert_eq!(t.gap(), 0);
        for i in 20..40 {
            t.on_limited(i * S);
        }
        assert_eq!(t.factor(), 1.0 / 64.0, "floored");
    }

    #[test]
    fn a_lowered_limit_is_bracketed_in_a_few_429s() {
        // The upstream now takes 0.5 of the configured rate: a 429 comes in
        // the period after any rate above it.
        let limit = 0.5;
        let mut t = Throttle::new(Adaptation::default(), 10_000_000);
        let mut limited = 0;
        let mut factors = Vec::new();
        for i in 0..90 {
            if t.factor() > limit {
                t.on_limited(i * S);
                limited += 1;
            } else {
                t.on_success(i * S);
            }
            factors.push(t.factor());
        }
        assert!(limited <= 6, "{limited} 429s: {factors:?}");
        // At the limit right after the first 429, and from the 60th second
        // on (the bracket closed, no more 429s).
        assert!(factors[..10].iter().all(|&f| f == limit), "{factors:?}");
        assert!(factors[60..].iter().all(|&f| f == limit), "{factors:?}");
    }

    #[test]
    fn after_quiet_periods_it_probes_higher() {
        let mut t = Throttle::new(Adaptation::default(), 10_000_000);
        t.on_limited(0); // at 1.0: back to 0.5
        let mut i = 1;
        while t.factor() < 0.75 {
            t.on_success(i * S);
            i += 1;
        }
        t.on_limited(i * S); // ceiling 0.75, back to 0.5
        i += 1;
        while t.factor() < 0.7 && i < 100 {
            t.on_success(i * S);
            i += 1;
        }
        let settled = t.factor();
        assert!(settled < 0.75 && settled > 0.7, "{settled}");
        for k in 0..u64::from(PROBE_AFTER) {
            t.on_success((i + k) * S);
        }
        assert!(t.factor() > settled, "{}", t.factor());
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
