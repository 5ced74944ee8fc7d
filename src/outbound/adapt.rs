//! The guard's own pacing below its limits: set from the upstream's
//! measured capacity when it answers 429, probed upwards when it stops, and
//! capped by what the upstream advertises (`RateLimit-Policy`, or what is
//! left until its reset).

use std::time::Duration;

/// How the guard's rate follows the upstream's 429s when the upstream does
/// not say its limit.
///
/// The guard measures the rate at which the upstream accepts its requests
/// (responses that are not 429: the most in any whole
/// [`every`](Adaptation::every) period of the last three since the last
/// cut). On a 429, counted once per
/// period so that the 429s of requests already in flight count once:
///
/// * when the upstream took less than was sent, what it took is its
///   capacity (one 429 never cuts the rate by more than half); when it
///   took all (a window's count reached, a burst spent), the measure
///   cannot tell, and the capacity is taken as
///   [`decrease`](Adaptation::decrease) times the rate. The guard paces at
///   the capacity less [`margin`](Adaptation::margin), and never below
///   [`floor`](Adaptation::floor);
/// * the guard holds that rate for a few periods (4 at first; doubled, up
///   to 32, each time a probe ends at the same capacity within 5%, and
///   back to 4 when the capacity moved), then probes upwards by
///   [`step`](Adaptation::step) of its rate, doubling the step each quiet
///   period (up to 25%): a probe past a capacity that did not move costs
///   one 429 per hold; a limit that was raised is found in a few periods.
///
/// The rate never exceeds the configured limits. 503 answers pause (for
/// their `Retry-After`) without lowering the rate: an outage is not a
/// limit.
///
/// # Examples
///
/// ```
/// use rategate::outbound::Adaptation;
/// use std::time::Duration;
///
/// let careful = Adaptation {
///     margin: 0.05,
///     every: Duration::from_secs(2),
///     ..Adaptation::default()
/// };
/// assert_eq!(careful.floor, Adaptation::default().floor);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adaptation {
    /// The factor of the rate kept on a 429 when the upstream took all
    /// that was sent in the last periods, so that the measure cannot tell
    /// its capacity (a window's count reached, a burst spent), in
    /// `(0, 1]`; default 0.85.
    pub decrease: f64,
    /// How far below the measured capacity the guard paces after a 429,
    /// in `[0, 0.5]`; default 0.01.
    pub margin: f64,
    /// The first probe's growth, as a fraction of the rate, doubled each
    /// quiet period up to 25%; default 0.01.
    pub step: f64,
    /// The period of measurement, decreases and increases; default 1 s.
    pub every: Duration,
    /// The lowest fraction of the configured rate; default 1/64.
    pub floor: f64,
}

impl Default for Adaptation {
    fn default() -> Self {
        Adaptation {
            decrease: 0.85,
            margin: 0.01,
            step: 0.01,
            every: Duration::from_secs(1),
            floor: 1.0 / 64.0,
        }
    }
}

impl Adaptation {
    /// Never changes the rate: the guard only pauses as told.
    pub const OFF: Adaptation = Adaptation {
        decrease: 1.0,
        margin: 0.0,
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
        Adaptation {
            decrease: clamp(self.decrease, 1e-6, 1.0, 0.85),
            margin: clamp(self.margin, 0.0, 0.5, 0.01),
            step: clamp(self.step, 0.0, MAX_STEP, 0.01),
            every: self.every.max(Duration::from_millis(1)),
            floor: clamp(self.floor, 1e-6, 1.0, 1.0 / 64.0),
        }
    }

    fn is_off(&self) -> bool {
        self.decrease >= 1.0 && self.step == 0.0 && self.floor >= 1.0
    }
}

/// Periods held after a 429 before the first probe, at first.
const HOLD_MIN: u32 = 4;
/// The longest hold, reached while probes keep ending at one capacity.
const HOLD_MAX: u32 = 32;
/// The most one 429 cuts from the rate, whatever was measured.
const MAX_CUT: f64 = 0.5;
/// The largest probe step, as a fraction of the rate.
const MAX_STEP: f64 = 0.25;
/// Buckets of a quarter period each in the meters: three periods.
const BUCKETS: usize = 12;
/// Buckets per period.
const PER_PERIOD: usize = 4;

/// Events (accepted responses, admissions) counted in `BUCKETS` buckets of
/// a quarter period each.
#[derive(Debug)]
struct Meter {
    width: u64,
    counts: [u64; BUCKETS],
    /// Index (time / width) of the newest bucket.
    newest: u64,
    first: Option<u64>,
}

impl Meter {
    fn new(every: u64) -> Self {
        Meter {
            width: (every / PER_PERIOD as u64).max(1),
            counts: [0; BUCKETS],
            newest: 0,
            first: None,
        }
    }

    fn slot(index: u64) -> usize {
        (index % BUCKETS as u64) as usize
    }

    fn roll(&mut self, now: u64) {
        let index = now / self.width;
        if index > self.newest {
            let stale = (index - self.newest).min(BUCKETS as u64);
            for k in 1..=stale {
                self.counts[Self::slot(self.newest + k)] = 0;
            }
            self.newest = index;
        }
    }

    fn add_n(&mut self, now: u64, n: u64) {
        self.first.get_or_insert(now);
        self.roll(now);
        let bucket = &mut self.counts[Self::slot(self.newest)];
        *bucket = bucket.saturating_add(n);
    }

    /// The count over the last two periods.
    fn recent(&mut self, now: u64) -> u64 {
        self.roll(now);
        (0..2 * PER_PERIOD as u64)
            .map(|k| self.counts[Self::slot(self.newest.wrapping_sub(k))])
            .fold(0, u64::saturating_add)
    }

    /// The highest rate per second over any whole period of the last three
    /// (over the time since the first event, while that is shorter than a
    /// period); `None` before any event. The highest, because a period
    /// that ramped up, or paused for a `Retry-After`, says less about what
    /// the upstream takes than the best one does.
    fn best_per_second(&mut self, now: u64) -> Option<f64> {
        let first = self.first?;
        self.roll(now);
        let period = self.width * PER_PERIOD as u64;
        let since = now.saturating_sub(first);
        if since < period {
            let total: u64 = self.counts.iter().fold(0, |a, &b| a.saturating_add(b));
            return Some(total as f64 * 1e9 / since.max(1_000) as f64);
        }
        let windows = (since / self.width).min((BUCKETS - PER_PERIOD) as u64);
        let best = (0..=windows)
            .map(|end| {
                (0..PER_PERIOD as u64)
                    .map(|k| self.counts[Self::slot(self.newest.wrapping_sub(end + k))])
                    .fold(0, u64::saturating_add)
            })
            .max()
            .unwrap_or(0);
        Some(best as f64 * 1e9 / period as f64)
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
    /// The upstream's capacity as measured at the last 429, or as
    /// advertised, as a fraction of the configured rate.
    capacity: Option<f64>,
    accepted: Meter,
    /// The fastest factor held for a whole period without a 429 since the
    /// last cut.
    passed: f64,
    /// Whole periods at the current factor without a 429.
    streak: u32,
    /// Whether the factor was raised past the held rate since the last
    /// cut.
    probing: bool,
    /// Whole periods since the last cut.
    held: u32,
    /// Periods to hold before probing.
    hold: u32,
    /// The next probe's growth.
    probe_step: f64,
    /// When the factor was last cut (guard clock, ns).
    last_cut: Option<u64>,
    /// Start of the current period of `on_success` (guard clock, ns).
    period_start: Option<u64>,
    /// The last advertised policy, `(quota, window ns)`.
    policy: Option<(u64, u64)>,
    /// Nanoseconds per unit from the upstream's advertised policy; 0 none.
    policy_gap: u64,
    /// Nanoseconds per unit to spread what remains until the upstream's
    /// reset, and when that reset comes.
    remaining_gap: u64,
    remaining_until: u64,
    /// Whether the limits' burst may go at once at the configured rate
    /// (otherwise the guard spreads its requests evenly).
    bursts: bool,
    /// Admissions seen at the last response, responses seen, and
    /// admissions over the last two periods: what is still in flight.
    admitted: u64,
    responses: u64,
    sent: Meter,
}

impl Throttle {
    pub(crate) fn new(settings: Adaptation, base_gap: u64) -> Self {
        let settings = settings.sanitized();
        let every = crate::clock::duration_to_nanos(settings.every);
        Throttle {
            settings,
            base_gap,
            factor: 1.0,
            capacity: None,
            accepted: Meter::new(every),
            passed: 0.0,
            streak: 0,
            probing: false,
            held: 0,
            hold: HOLD_MIN,
            probe_step: settings.step,
            last_cut: None,
            period_start: None,
            policy: None,
            policy_gap: 0,
            remaining_gap: 0,
            remaining_until: 0,
            bursts: false,
            admitted: 0,
            responses: 0,
            sent: Meter::new(every),
        }
    }

    pub(crate) fn bursts(&self) -> bool {
        self.bursts
    }

    pub(crate) fn set_bursts(&mut self, bursts: bool) {
        self.bursts = bursts;
    }

    /// A response arrived, with `admitted` admissions so far: returns how
    /// many admitted requests are still in flight (their responses not
    /// seen), counting at most the admissions of the last two periods, so
    /// that an application that does not observe every response is not
    /// taken to have thousands in flight.
    pub(crate) fn on_response(&mut self, admitted: u64, now: u64) -> u64 {
        self.responses += 1;
        let new = admitted.saturating_sub(self.admitted);
        self.admitted = self.admitted.max(admitted);
        self.sent.add_n(now, new);
        let recent = self.sent.recent(now);
        admitted.saturating_sub(self.responses).min(recent)
    }

    fn every(&self) -> u64 {
        crate::clock::duration_to_nanos(self.settings.every)
    }

    /// The accepted rate as a fraction of the configured one.
    fn accepted_fraction(&mut self, now: u64) -> Option<f64> {
        if self.base_gap == 0 {
            return None;
        }
        let per_second = self.accepted.best_per_second(now)?;
        Some(per_second * self.base_gap as f64 / 1e9)
    }

    /// A 429: set the rate from the measured capacity, once per period.
    pub(crate) fn on_limited(&mut self, now: u64) {
        let s = self.settings;
        if s.is_off()
            || self
                .last_cut
                .is_some_and(|t| now.saturating_sub(t) < self.every())
        {
            return;
        }
        let kept = 1.0 - s.margin;
        let capacity = match self.accepted_fraction(now) {
            // The upstream took less than was sent: that is its capacity.
            Some(accepted) if accepted < self.factor * kept => accepted.max(self.factor * MAX_CUT),
            // It took all that was sent in its best period (a window's
            // count reached, a burst spent): the measure cannot tell. A
            // probe past a known capacity confirms the fastest rate that
            // passed a whole period; otherwise, a blind cut.
            _ => match self.capacity {
                Some(known) if self.probing => known.max(self.passed),
                _ => (self.factor * s.decrease / kept).max(self.passed),
            },
        }
        .max(s.floor);
        let same = self
            .capacity
            .is_some_and(|c| (c - capacity).abs() <= 0.05 * c);
        self.hold = if same {
            (self.hold * 2).min(HOLD_MAX)
        } else {
            HOLD_MIN
        };
        self.capacity = Some(capacity);
        self.factor = (capacity * kept).clamp(s.floor, 1.0);
        self.held = 0;
        self.passed = 0.0;
        self.streak = 0;
        self.probing = false;
        self.probe_step = s.step;
        // What is accepted from now on measures the upstream as it is now
        // (a limit just lowered shows in the next 429's measure).
        self.accepted = Meter::new(self.every());
        self.last_cut = Some(now);
        // Periods start at the first answer after the pause.
        self.period_start = None;
    }

    /// A response that passed the upstream's limit.
    pub(crate) fn on_accepted(&mut self, now: u64) {
        self.accepted.add_n(now, 1);
        let start = *self.period_start.get_or_insert(now);
        if now.saturating_sub(start) < self.every() {
            return;
        }
        self.period_start = Some(now);
        // Two whole periods at this rate without a 429: one alone can
        // span the edge of an upstream's window and pass above its rate.
        self.streak += 1;
        if self.streak >= 2 {
            self.passed = self.passed.max(self.factor);
        }
        let s = self.settings;
        if s.is_off() || self.factor >= 1.0 {
            return;
        }
        self.held = self.held.saturating_add(1);
        let Some(capacity) = self.capacity else {
            self.factor = 1.0;
            return;
        };
        let target = (capacity * (1.0 - s.margin)).min(1.0);
        if self.factor < target {
            // Below the measured capacity (a cut bounded by `decrease`):
            // half-way there, at least a step, each period.
            let gain = ((target - self.factor) / 2.0).max(s.step * target);
            self.factor = (self.factor + gain).min(target);
            self.streak = 0;
            return;
        }
        // Probe steps two periods apart, so that each step can pass.
        if self.held < self.hold || (self.probing && self.streak < 2) {
            return;
        }
        self.factor = (self.factor * (1.0 + self.probe_step)).min(1.0);
        self.probe_step = (self.probe_step * 2.0).min(MAX_STEP);
        self.probing = true;
        self.streak = 0;
    }

    /// An advertised `RateLimit-Policy`. One that changed ends any hold:
    /// the guard paces at it (within the configured limits) at once.
    pub(crate) fn on_policy(&mut self, quota: u64, window: Duration) {
        let window = crate::clock::duration_to_nanos(window);
        let gap = u128::from(window) / u128::from(quota.max(1));
        let gap = u64::try_from(gap).unwrap_or(u64::MAX);
        // Paced a margin below the policy: even pacing at exactly the
        // policy's rate meets a window's edge one request early whenever a
        // response or a timer is late.
        let margin = 1.0 - self.settings.margin.max(0.01);
        self.policy_gap = (gap as f64 / margin) as u64;
        if self.policy != Some((quota, window)) {
            self.policy = Some((quota, window));
            if self.base_gap > 0 && !self.settings.is_off() {
                let fraction = self.base_gap as f64 / self.policy_gap.max(1) as f64;
                self.capacity = Some(fraction.max(self.settings.floor));
                self.factor = fraction.clamp(self.settings.floor, 1.0);
                self.held = self.hold;
            }
        }
    }

    /// `remaining` requests left until `reset` from `now`, less those in
    /// flight: spread them evenly until the reset. Returns `true` when
    /// nothing is left (the caller pauses until the reset).
    pub(crate) fn on_remaining(&mut self, remaining: u64, reset: u64, now: u64) -> bool {
        if remaining == 0 {
            return true;
        }
        self.remaining_gap = reset / remaining;
        self.remaining_until = now.saturating_add(reset);
        false
    }

    /// Nanoseconds per unit of cost between admissions: the slower of the
    /// configured rate scaled by the factor and the advertised policy (0:
    /// the limits alone decide, bursts allowed).
    pub(crate) fn steady_gap(&self) -> u64 {
        let own = if self.base_gap > 0 && (self.factor < 1.0 || !self.bursts) {
            // factor >= floor >= 1e-6, so this is finite; saturating cast.
            (self.base_gap as f64 / self.factor) as u64
        } else {
            0
        };
        own.max(self.policy_gap)
    }

    /// The gap that spreads what remains until the upstream's reset, and
    /// the reset (guard clock, ns); `(0, 0)` when none.
    pub(crate) fn remaining_gap(&self) -> (u64, u64) {
        (self.remaining_gap, self.remaining_until)
    }

    /// The gap at `now`: the slowest of the steady gap and what remains.
    #[cfg(test)]
    fn gap(&self, now: u64) -> u64 {
        let remaining = if now < self.remaining_until {
            self.remaining_gap
        } else {
            0
        };
        self.steady_gap().max(remaining)
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
    const MS: u64 = 1_000_000;

    /// Drives a throttle against an upstream that accepts `limit` (a
    /// fraction of the configured rate) per second, one response per 10 ms
    /// of the rate sent at; returns the factor each second.
    fn drive(t: &mut Throttle, limit: impl Fn(u64) -> f64, seconds: u64) -> (Vec<f64>, u32) {
        let mut factors = Vec::new();
        let mut limited = 0;
        let mut now = 0;
        let mut credit = 1.0;
        for second in 0..seconds {
            let end = (second + 1) * S;
            while now < end {
                // The guard's rate in requests per second at 100/s.
                let sent_gap = t.gap(now).max(10 * MS);
                credit = (credit + limit(second) * 100.0 * sent_gap as f64 / 1e9).min(2.0);
                if credit >= 1.0 {
                    credit -= 1.0;
                    t.on_accepted(now);
                } else {
                    t.on_limited(now);
                    limited += 1;
                }
                now += sent_gap;
            }
            factors.push(t.factor());
        }
        (factors, limited)
    }

    #[test]
    fn a_429_paces_just_below_the_measured_capacity() {
        let mut t = Throttle::new(Adaptation::default(), 10 * MS); // 100/s
        let (factors, _) = drive(&mut t, |_| 0.8, 3);
        let f = factors[2];
        assert!((0.72..0.8).contains(&f), "{factors:?}");
        assert_eq!(t.gap(3 * S), (10.0 * MS as f64 / f) as u64);
    }

    #[test]
    fn a_steady_capacity_is_held_and_probed_rarely() {
        let mut t = Throttle::new(Adaptation::default(), 10 * MS);
        let (factors, _) = drive(&mut t, |_| 0.8, 120);
        let late = &factors[60..];
        let mean = late.iter().sum::<f64>() / late.len() as f64;
        assert!(mean > 0.77 && mean < 0.81, "{mean}: {factors:?}");
        // Holds grow to HOLD_MAX while probes end at the same capacity.
        assert_eq!(t.hold, HOLD_MAX);
    }

    #[test]
    fn a_lowered_and_restored_limit_is_followed() {
        let mut t = Throttle::new(Adaptation::default(), 10 * MS);
        let limit = |s: u64| if (20..40).contains(&s) { 0.4 } else { 0.8 };
        let (factors, _) = drive(&mut t, limit, 100);
        assert!(factors[28..40].iter().all(|&f| f <= 0.41), "{factors:?}");
        assert!(factors[28..40].iter().all(|&f| f > 0.3), "{factors:?}");
        assert!(factors[90..].iter().all(|&f| f > 0.7), "{factors:?}");
    }

    #[test]
    fn a_changed_policy_ends_a_hold() {
        let mut t = Throttle::new(Adaptation::default(), 10 * MS);
        t.on_limited(0);
        assert!(t.factor() < 1.0);
        t.on_policy(80, Duration::from_secs(1));
        let gap = t.gap(0);
        assert!(gap > 12_500_000 && gap < 12_800_000, "{gap}");
        // The same policy again changes nothing; a slower one caps.
        t.on_policy(80, Duration::from_secs(1));
        assert_eq!(t.gap(0), gap);
        t.on_policy(10, Duration::from_secs(1));
        assert!(t.gap(0) >= 100 * MS);
    }

    #[test]
    fn remaining_is_spread_until_the_reset() {
        let mut t = Throttle::new(Adaptation::default(), 10 * MS);
        assert!(!t.on_remaining(40, S, 0));
        assert_eq!(t.gap(0), 25 * MS);
        assert_eq!(t.gap(S), 10 * MS, "the reset ends it");
        assert!(t.on_remaining(0, S, 0));
    }

    #[test]
    fn adaptation_off_never_changes_the_rate() {
        let mut t = Throttle::new(Adaptation::OFF, 10 * MS);
        for i in 0..10 {
            t.on_limited(i * S);
        }
        assert_eq!(t.factor(), 1.0);
    }

    #[test]
    fn hostile_settings_are_sanitized() {
        let s = Adaptation {
            decrease: f64::NAN,
            margin: 7.0,
            step: -3.0,
            every: Duration::ZERO,
            floor: 0.0,
        };
        let mut t = Throttle::new(s, 1);
        for i in 0..100 {
            t.on_limited(i * MS);
            t.on_accepted(i * MS + 1);
        }
        assert!(t.factor() > 0.0);
        assert!(t.gap(0) < u64::MAX);
    }
}
