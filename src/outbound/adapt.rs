//! The guard's own pacing below its limits: set from the upstream's
//! measured capacity when it answers 429, probed upwards when it stops, and
//! capped by what the upstream advertises (`RateLimit-Policy`, or what is
//! left until its reset).

use std::time::Duration;

/// How the guard's rate follows the upstream's 429s.
///
/// The guard counts the responses the upstream accepted (not 429). On a
/// 429, counted once per [`every`](Adaptation::every) period so that the
/// 429s of requests already in flight count once, it estimates the
/// upstream's capacity from the best evidence it has:
///
/// 1. the guard's first answers: the upstream's budget is fresh when the
///    guard starts, so a 429 between half a period and a period (of the
///    configured quota) after the first answer says the upstream takes
///    what it accepted until then per period;
/// 2. an advertised `RateLimit-Policy`, unless the upstream accepted
///    clearly less (a quota shared with other clients);
/// 3. what it accepted over the last period (since the last 429), when
///    that is less than the rate sent at by more than the margin and two
///    requests (one 429 never cuts the rate by more than half);
/// 4. after a probe past a known capacity, that capacity, or the fastest
///    rate that passed two whole periods without a 429 if that is higher;
/// 5. two episodes in a row, each from a pause to a 429 at one rate, that
///    each took all that was sent: a token bucket that refilled in the
///    pause took its burst plus its rate times the episode's length, so
///    the difference of the counts over the difference of the lengths is
///    its rate;
/// 6. otherwise (it took all that was sent: a window's count reached, a
///    burst spent) a blind cut to [`decrease`](Adaptation::decrease) times
///    the rate, deeper on each further 429 before anything passes (0.85,
///    0.72, 0.52 with the default): the limit fell further than the last
///    cut went.
///
/// The guard then paces [`margin`](Adaptation::margin) below the capacity,
/// and at least one request per period below it (upstreams count whole
/// requests), never below [`floor`](Adaptation::floor). It holds that rate
/// for 30 periods (doubled, up to 120, each time a probe ends at the same
/// capacity within 5%; back to 30 when the capacity moved, and 10 after a
/// blind cut, which is a guess), then probes
/// upwards in steps two periods apart, the first by
/// [`step`](Adaptation::step) of the rate and each next one twice as
/// large (up to 25%): against an upstream that does not move, a probe
/// costs one 429 (and its `Retry-After` pause) per hold; a limit that was
/// raised is found within a hold and a few steps.
///
/// The rate never exceeds the configured limits. 503 answers pause (for
/// their `Retry-After`) without lowering the rate: an outage is not a
/// limit.
///
/// Answers that arrive during a pause (to requests sent before it) are not
/// counted. Measured against AWS-style CUBIC, AIMD and a fixed quota over
/// thirteen upstreams: the `outbound_adaptation` scenario of `rategate-sim`
/// (`docs/outbound.md`).
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
    /// The factor of the rate kept on a 429 when nothing tells the
    /// upstream's capacity (it took all that was sent), in `(0, 1]`;
    /// default 0.85.
    pub decrease: f64,
    /// How far below the estimated capacity the guard paces, as a fraction
    /// of it, in `[0, 0.5]`; default 0.01.
    pub margin: f64,
    /// The first probe step, as a fraction of the rate, doubled at each
    /// next step up to 25%; default 0.01.
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
const HOLD_MIN: u32 = 30;
/// The longest hold, reached while probes keep ending at one capacity.
const HOLD_MAX: u32 = 120;
/// Periods held after a blind cut (nothing told the capacity).
const HOLD_BLIND: u32 = 10;
/// The most one 429 cuts from the rate, whatever was measured.
const MAX_CUT: f64 = 0.5;
/// The largest probe step, as a fraction of the rate.
const MAX_STEP: f64 = 0.25;
/// Buckets of a quarter period each in the meters: three periods.
const BUCKETS: usize = 12;
/// Buckets per period.
const PER_PERIOD: usize = 4;

/// Accepted responses counted in `BUCKETS` buckets of
/// a quarter period each.
#[derive(Debug)]
struct Meter {
    width: u64,
    counts: [u64; BUCKETS],
    /// Index (time / width) of the newest bucket.
    newest: u64,
    first: Option<u64>,
    /// Events since the meter started.
    total: u64,
}

impl Meter {
    fn new(every: u64) -> Self {
        Meter {
            width: (every / PER_PERIOD as u64).max(1),
            counts: [0; BUCKETS],
            newest: 0,
            first: None,
            total: 0,
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
        self.total = self.total.saturating_add(n);
    }

    /// The rate per second over the last period (over the time since the
    /// first event, while that is shorter); `None` before any event. The
    /// last period: by the time of a 429, a token bucket's burst is spent
    /// and the rate it refills at is what passes.
    fn last_period_per_second(&mut self, now: u64) -> Option<f64> {
        let first = self.first?;
        self.roll(now);
        let per = PER_PERIOD as u64;
        let start = self.newest.saturating_sub(per - 1) * self.width;
        let span = now.saturating_sub(start.max(first)).max(1_000);
        let total = (0..per.min(self.newest + 1))
            .map(|k| self.counts[Self::slot(self.newest - k)])
            .fold(0, u64::saturating_add);
        Some(total as f64 * 1e9 / span as f64)
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
    /// The configured quota's count per period.
    limit: u64,
    /// The guard's first answers, until the first 429 or a period: when
    /// the first answer came, and how many passed. The upstream's budget
    /// is fresh when the guard starts, so a 429 within a period of it
    /// says the upstream takes that many per period.
    first_episode: Option<(Option<u64>, u64)>,
    /// The fastest factor held for a whole period without a 429 since the
    /// last cut.
    passed: f64,
    /// Whole periods at the current factor without a 429.
    streak: u32,
    /// The end of the guard's current pause.
    resume_at: u64,
    /// The last blind cut's episode: answers accepted from the first one
    /// after the pause to the 429, and how long that took (ns).
    episode: Option<(u64, u64)>,
    /// How many times `decrease` the last cut applied, if it was blind
    /// (0: it was not).
    blind: u32,
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
    /// Start of the current period of answers (guard clock, ns).
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
    /// Responses seen: with the admissions, what is still in flight.
    responses: u64,
    /// The period of measurement (ns): `Adaptation::every`, or four
    /// requests at the configured rate if that is longer.
    every: u64,
    /// The longest pacing gap a header may impose (ns).
    max_pause: u64,
    /// The last advertised policy and how many answers in a row carried it.
    policy_seen: Option<((u64, u64), u32)>,
}

impl Throttle {
    /// `base_gap`: nanoseconds per unit at the configured rate; `limit`:
    /// the configured quota's count per period.
    pub(crate) fn new(settings: Adaptation, base_gap: u64, limit: u64) -> Self {
        let settings = settings.sanitized();
        // A period long enough to count something: at least four requests
        // at the configured rate (a per-minute quota measures over
        // periods of tens of seconds).
        let every = crate::clock::duration_to_nanos(settings.every).max(base_gap.saturating_mul(4));
        Throttle {
            settings,
            base_gap,
            factor: 1.0,
            capacity: None,
            accepted: Meter::new(every),
            limit,
            first_episode: Some((None, 0)),
            passed: 0.0,
            streak: 0,
            episode: None,
            resume_at: 0,
            blind: 0,
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
            responses: 0,
            every,
            max_pause: u64::MAX,
            policy_seen: None,
        }
    }

    pub(crate) fn set_bursts(&mut self, bursts: bool) {
        self.bursts = bursts;
    }

    /// A response arrived, with `admitted` admissions so far and `recent`
    /// of them in the last two periods: returns how many admitted requests
    /// are still in flight (their responses not seen), at most the recent
    /// ones, so that an application that does not observe every response
    /// is not taken to have thousands in flight.
    pub(crate) fn on_response(&mut self, admitted: u64, recent: u64) -> u64 {
        self.responses = self.responses.saturating_add(1);
        admitted.saturating_sub(self.responses).min(recent)
    }

    /// The period of measurement, in nanoseconds.
    pub(crate) fn every(&self) -> u64 {
        self.every
    }

    /// The longest gap a header may set (the guard's maximum pause).
    pub(crate) fn set_max_pause(&mut self, max_pause: u64) {
        self.max_pause = max_pause;
    }

    /// The accepted rate as a fraction of the configured one.
    fn accepted_fraction(&mut self, now: u64) -> Option<f64> {
        if self.base_gap == 0 {
            return None;
        }
        let per_second = self.accepted.last_period_per_second(now)?;
        Some(per_second * self.base_gap as f64 / 1e9)
    }

    /// A 429: set the rate from the measured capacity, once per period.
    /// `sent`: the rate the guard admitted at over the last period, per
    /// second.
    pub(crate) fn on_limited(&mut self, now: u64, sent: f64) {
        let s = self.settings;
        if s.is_off()
            || self
                .last_cut
                .is_some_and(|t| now.saturating_sub(t) < self.every)
        {
            return;
        }
        let capacity = self.estimate(now, sent).max(s.floor);
        if self.blind == 0 {
            // Only consecutive blind cuts compare episodes.
            self.episode = None;
        }
        let same = self
            .capacity
            .is_some_and(|c| (c - capacity).abs() <= 0.05 * c);
        self.hold = if same {
            (self.hold * 2).min(HOLD_MAX)
        } else if self.blind > 0 {
            // A guess: probe again soon.
            HOLD_BLIND
        } else {
            HOLD_MIN
        };
        self.capacity = Some(capacity);
        self.factor = self.below(capacity);
        self.held = 0;
        self.passed = 0.0;
        self.streak = 0;
        self.probing = false;
        self.probe_step = s.step;
        // What is accepted from now on measures the upstream as it is now
        // (a limit just lowered shows in the next 429's measure).
        self.accepted = Meter::new(self.every);
        self.last_cut = Some(now);
        // Periods start at the first answer after the pause.
        self.period_start = None;
    }

    /// The upstream's capacity at a 429, as a fraction of the configured
    /// rate, from the best evidence there is.
    fn estimate(&mut self, now: u64, sent: f64) -> f64 {
        let s = self.settings;
        // The rate sent at, as a fraction of the configured rate, at most
        // the guard's own rate.
        // (Nothing admitted through the guard: its own rate.)
        let sent = if self.base_gap > 0 && sent > 0.0 {
            (sent * self.base_gap as f64 / 1e9).min(self.factor)
        } else {
            self.factor
        };
        let blind_before = std::mem::take(&mut self.blind);
        // A rate that passed is a floor for the capacity only below the
        // rate that drew this 429; at or above it, the capacity fell.
        let passed = if self.passed < self.factor {
            self.passed
        } else {
            0.0
        };
        // The guard's first answers: the upstream's budget was fresh, so
        // what it took before a 429 within one period is its count per
        // period. An episode shorter than half a period says too little: a
        // token bucket's small burst ends that early.
        let period = self.base_gap.saturating_mul(self.limit);
        if let Some((Some(start), count)) = self.first_episode.take() {
            let first = count as f64 / self.limit.max(1) as f64;
            let lasted = now.saturating_sub(start);
            if (period / 2..=period).contains(&lasted) && first < sent {
                return first;
            }
        }
        let accepted = self.accepted_fraction(now);
        // What the upstream advertises, unless it took clearly less (the
        // quota is shared with other clients).
        if let Some(policy) = self.policy_fraction() {
            if policy <= self.factor + 1e-9 && accepted.is_none_or(|a| a >= 0.95 * policy) {
                return policy;
            }
        }
        // The upstream took less than was sent (by more than the margin
        // and two requests, a count's noise): that is its capacity.
        // Otherwise it took all that was sent in the last period (a
        // window's count reached): the measure cannot tell.
        if let Some(accepted) = accepted {
            if accepted < sent * (1.0 - s.margin) - 2.0 / self.limit.max(1) as f64 {
                return accepted.max(sent * MAX_CUT);
            }
        }
        // A probe past a known capacity confirms the fastest rate that
        // passed two periods.
        if let (true, Some(known)) = (self.probing, self.capacity) {
            return known.max(passed);
        }
        // Two episodes that each took all that was sent, at different
        // rates, from a fresh start or a pause to a 429: a token bucket
        // that refilled during the pause and emptied at the 429 took its
        // burst plus its rate times the episode's length in both, so the
        // difference of the counts over the difference of the lengths is
        // its rate.
        let episode = self
            .accepted
            .first
            .map(|first| (self.accepted.total, now.saturating_sub(first)));
        let previous = std::mem::replace(&mut self.episode, episode);
        if let (Some((n1, t1)), Some((n2, t2)), false) = (previous, episode, self.probing) {
            if t2.abs_diff(t1) >= period / 2 && self.base_gap > 0 {
                let per_ns = (n2 as f64 - n1 as f64) / (t2 as f64 - t1 as f64);
                let fraction = per_ns * self.base_gap as f64;
                if fraction > 0.0 && fraction < sent {
                    return fraction.max(sent * MAX_CUT);
                }
            }
        }
        // A blind cut. Blind cuts one after another, nothing passing in
        // between: the limit fell further than the last cut went, so each
        // goes deeper (0.85, 0.72, 0.52 of the rate with the default).
        let again = blind_before > 0
            && passed == 0.0
            && self
                .last_cut
                .is_some_and(|t| now.saturating_sub(t) <= self.every.saturating_mul(3));
        self.blind = if again { (blind_before * 2).min(4) } else { 1 };
        let blind = sent * s.decrease.powi(self.blind as i32);
        // `below` takes the margin off again.
        (blind / (1.0 - s.margin)).max(passed)
    }

    /// The rate to hold below a capacity: `margin` below it, and at least
    /// one request per period (an upstream counts whole requests).
    fn below(&self, capacity: f64) -> f64 {
        // One request per period, but at most twice the margin: for a quota
        // of 10 per minute one request is 10%.
        let one = if self.limit > 0 {
            (1.0 / self.limit as f64).min(2.0 * self.settings.margin)
        } else {
            0.0
        };
        (capacity - (capacity * self.settings.margin).max(one)).clamp(self.settings.floor, 1.0)
    }

    /// The advertised policy as a fraction of the configured rate.
    fn policy_fraction(&self) -> Option<f64> {
        (self.policy.is_some() && self.base_gap > 0 && self.policy_gap > 0)
            .then(|| self.base_gap as f64 / self.policy_gap as f64)
    }

    /// The guard pauses until `until` (guard clock, ns).
    pub(crate) fn on_pause(&mut self, until: u64) {
        self.resume_at = self.resume_at.max(until);
    }

    /// A response that passed the upstream's limit.
    pub(crate) fn on_accepted(&mut self, now: u64) {
        if now < self.resume_at {
            // An answer to a request sent before the pause: it measures
            // the upstream as it was.
            return;
        }
        self.accepted.add_n(now, 1);
        if let Some((start, count)) = &mut self.first_episode {
            let start = *start.get_or_insert(now);
            *count += 1;
            let period = self.base_gap.saturating_mul(self.limit);
            if now.saturating_sub(start) > period {
                self.first_episode = None;
            }
        }
        let start = *self.period_start.get_or_insert(now);
        if now.saturating_sub(start) < self.every {
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
        let target = self.below(capacity);
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

    /// An advertised `RateLimit-Policy`: it caps the pace at once. A changed
    /// one ends a hold (the guard paces at it, within its configured
    /// limits) when two answers in a row carry it: endpoints behind one
    /// guard that advertise different policies do not undo a 429's cut.
    pub(crate) fn on_policy(&mut self, quota: u64, window: Duration) {
        let window = crate::clock::duration_to_nanos(window);
        let key = (quota, window);
        let seen = match self.policy_seen {
            Some((k, n)) if k == key => n.saturating_add(1),
            _ => 1,
        };
        self.policy_seen = Some((key, seen));
        let gap = u128::from(window) / u128::from(quota.max(1));
        let gap = u64::try_from(gap).unwrap_or(u64::MAX);
        // Paced a margin below the policy: even pacing at exactly the
        // policy's rate meets a window's edge one request early whenever a
        // response or a timer is late.
        let margin = 1.0 - self.settings.margin.max(0.01);
        self.policy_gap = (gap as f64 / margin) as u64;
        if seen < 2 || self.policy == Some(key) {
            return;
        }
        self.policy = Some(key);
        if self.base_gap > 0 && !self.settings.is_off() {
            let fraction = self.base_gap as f64 / gap.max(1) as f64;
            self.capacity = Some(fraction.max(self.settings.floor));
            self.factor = fraction.clamp(self.settings.floor, 1.0);
            self.held = self.hold;
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

    /// The guard's own gap, from its configured rate and factor alone (0:
    /// the limits decide).
    pub(crate) fn own_gap(&self) -> u64 {
        if self.base_gap > 0 && (self.factor < 1.0 || !self.bursts) {
            // factor >= floor >= 1e-6, so this is finite; saturating cast.
            (self.base_gap as f64 / self.factor) as u64
        } else {
            0
        }
    }

    /// Nanoseconds per unit of cost between admissions: the slower of the
    /// configured rate scaled by the factor and the advertised policy (0:
    /// the limits alone decide, bursts allowed).
    pub(crate) fn steady_gap(&self) -> u64 {
        let own = self.own_gap();
        // A header's gap is a pause between two requests: capped as every
        // pause is, whatever window a policy advertises.
        own.max(self.policy_gap.min(self.max_pause))
    }

    /// The gap that spreads what remains until the upstream's reset, and
    /// the reset (guard clock, ns); `(0, 0)` when none.
    pub(crate) fn remaining_gap(&self) -> (u64, u64) {
        (self.remaining_gap.min(self.max_pause), self.remaining_until)
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
                    t.on_limited(now, 0.0);
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
        let mut t = Throttle::new(Adaptation::default(), 10 * MS, 100); // 100/s
        let (factors, _) = drive(&mut t, |_| 0.8, 3);
        let f = factors[2];
        assert!((0.72..0.8).contains(&f), "{factors:?}");
        assert_eq!(t.gap(3 * S), (10.0 * MS as f64 / f) as u64);
    }

    #[test]
    fn a_steady_capacity_is_held_and_probed_rarely() {
        let mut t = Throttle::new(Adaptation::default(), 10 * MS, 100);
        let (factors, _) = drive(&mut t, |_| 0.8, 120);
        let late = &factors[60..];
        let mean = late.iter().sum::<f64>() / late.len() as f64;
        assert!(mean > 0.77 && mean < 0.81, "{mean}: {factors:?}");
        // Holds grow to HOLD_MAX while probes end at the same capacity.
        assert_eq!(t.hold, HOLD_MAX);
    }

    #[test]
    fn a_lowered_and_restored_limit_is_followed() {
        let mut t = Throttle::new(Adaptation::default(), 10 * MS, 100);
        let limit = |s: u64| if (20..40).contains(&s) { 0.4 } else { 0.8 };
        let (factors, _) = drive(&mut t, limit, 100);
        assert!(factors[28..40].iter().all(|&f| f <= 0.41), "{factors:?}");
        assert!(factors[28..40].iter().all(|&f| f > 0.3), "{factors:?}");
        assert!(factors[90..].iter().all(|&f| f > 0.7), "{factors:?}");
    }

    #[test]
    fn the_first_answers_tell_a_fresh_window_count() {
        let mut t = Throttle::new(Adaptation::default(), 10 * MS, 100);
        for i in 0..80 {
            t.on_accepted(i * 10 * MS);
        }
        t.on_limited(800 * MS, 0.0);
        // 80 per period, less one request per period.
        assert!((t.factor() - 0.79).abs() < 1e-9, "{}", t.factor());
    }

    #[test]
    fn blind_cuts_in_a_row_go_deeper() {
        let mut t = Throttle::new(Adaptation::default(), 10 * MS, 100);
        t.on_limited(0, 0.0);
        let first = t.factor();
        // Everything sent at that rate is taken, then another 429.
        let gap = (10.0 * MS as f64 / first) as u64;
        let mut now = 0;
        while now < 1_500 * MS {
            now += gap;
            t.on_accepted(now);
        }
        t.on_limited(now, 0.0);
        let ratio = t.factor() / first;
        assert!((0.70..0.73).contains(&ratio), "{ratio}");
    }

    /// An upstream token bucket of 80/s with a burst of 40, refilled in
    /// each pause: two episodes at different rates tell its rate.
    #[test]
    fn two_blind_episodes_tell_a_token_buckets_rate() {
        let mut t = Throttle::new(Adaptation::default(), 10 * MS, 100);
        // Sends at the guard's pace from a full bucket until a 429.
        fn episode(t: &mut Throttle, now: &mut u64) {
            let mut tokens = 40.0f64;
            loop {
                let gap = t.gap(*now);
                tokens = (tokens + 80.0 * gap as f64 / 1e9).min(40.0);
                *now += gap;
                if tokens < 1.0 {
                    t.on_limited(*now, 0.0);
                    return;
                }
                tokens -= 1.0;
                t.on_accepted(*now);
            }
        }
        let mut now = 0;
        episode(&mut t, &mut now);
        let blind = t.factor();
        assert!((0.84..=0.85).contains(&blind), "{blind}");
        // The upstream's second of Retry-After refills the bucket.
        now += S;
        t.on_pause(now);
        episode(&mut t, &mut now);
        let factor = t.factor();
        assert!((0.78..=0.80).contains(&factor), "{factor}");
    }

    #[test]
    fn a_changed_policy_ends_a_hold() {
        let mut t = Throttle::new(Adaptation::default(), 10 * MS, 100);
        t.on_limited(0, 0.0);
        assert!(t.factor() < 1.0);
        // Slower than the guard's own rate: paces at once; a changed
        // policy ends the hold on its second answer in a row.
        t.on_policy(80, Duration::from_secs(1));
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
        let mut t = Throttle::new(Adaptation::default(), 10 * MS, 100);
        assert!(!t.on_remaining(40, S, 0));
        assert_eq!(t.gap(0), 25 * MS);
        assert_eq!(t.gap(S), 10 * MS, "the reset ends it");
        assert!(t.on_remaining(0, S, 0));
    }

    #[test]
    fn adaptation_off_never_changes_the_rate() {
        let mut t = Throttle::new(Adaptation::OFF, 10 * MS, 100);
        for i in 0..10 {
            t.on_limited(i * S, 0.0);
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
        let mut t = Throttle::new(s, 1, 1);
        for i in 0..100 {
            t.on_limited(i * MS, 0.0);
            t.on_accepted(i * MS + 1);
        }
        assert!(t.factor() > 0.0);
        assert!(t.gap(0) < u64::MAX);
    }
}
