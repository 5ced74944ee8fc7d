//! The shared half of the differential fuzz targets: decoding fuzz input
//! into a quota and a sequence of (clock step, cost), and the two passes
//! every algorithm's target runs on it.
//!
//! * [`differential`]: the limiter (`RateLimiter<A, ManualClock>`, `peek_n`
//!   then `check_n` at every step) against the algorithm's reference model
//!   from `tests/models/` (the same code the property tests use), every
//!   decision field equal. The steps are first moved into the model's
//!   domain ([`Target::model_time`]): some models only cover time that
//!   never goes back, or times below a horizon.
//! * [`invariants`]: the raw steps (zero gaps, steps back, jumps to near
//!   `u64::MAX`), with no model, checking what must hold whatever the
//!   clock does: see that function.
//!
//! Input format (every read past the end gives zeros, so any input decodes):
//! the quota (period, limit, burst, delay mode; see [`decode_quota`]), then
//! steps of one op byte and its arguments (see [`Step::decode`]).

#[path = "../../tests/models/mod.rs"]
pub mod models;

use models::{Model, Outcome};
use rategate::{Algorithm, CheckError, Decision, Delay, ManualClock, Quota, RateLimiter};
use std::time::Duration;

/// Nanoseconds per millisecond.
pub const MS: u64 = 1_000_000;

/// The most steps one input runs (keeps one execution to milliseconds).
pub const MAX_STEPS: usize = 192;

/// Little-endian reader over the fuzz input; zeros past the end.
pub struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0; N];
        for b in &mut out {
            *b = self.u8();
        }
        out
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.bytes())
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.bytes())
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes())
    }
}

/// Decodes a quota; `None` when the bytes describe none (a burst of 0 is
/// dropped instead).
///
/// * period (`u8 % 8`): 0: 1..=256 ns; 1: 1..=65 536 ms; 2: 1..=256 s;
///   3: a minute; 4: an hour; 5: a raw `u64`; 6: `u64::MAX - u16`;
///   7: 1..=2^32 ns.
/// * limit (`u8 % 6`): 0: 1..=8; 1: 1..=256; 2: 1..=65 536; 3: a raw
///   `u32`; 4: the period (one per ns, the most allowed); 5: `u32::MAX`.
///   Clamped to the period.
/// * burst (`u8 % 4`): 0: none; 1: 1..=16; 2: a `u16`; 3: a raw `u32`.
/// * delay (`u8 % 3`): smooth, nodelay, `delay=u8`.
pub fn decode_quota(r: &mut Reader) -> Option<Quota> {
    let period = match r.u8() % 8 {
        0 => 1 + u64::from(r.u8()),
        1 => (1 + u64::from(r.u16())) * MS,
        2 => (1 + u64::from(r.u8())) * 1_000_000_000,
        3 => 60_000_000_000,
        4 => 3_600_000_000_000,
        5 => r.u64().max(1),
        6 => u64::MAX - u64::from(r.u16()),
        _ => 1 + u64::from(r.u32()),
    };
    let limit = match r.u8() % 6 {
        0 => 1 + u32::from(r.u8() % 8),
        1 => 1 + u32::from(r.u8()),
        2 => 1 + u32::from(r.u16()),
        3 => r.u32().max(1),
        4 => u32::try_from(period).unwrap_or(u32::MAX),
        _ => u32::MAX,
    };
    let limit = u32::try_from(u64::from(limit).min(period)).ok()?;
    let quota = Quota::with_period(limit, Duration::from_nanos(period)).ok()?;
    let burst = match r.u8() % 4 {
        0 => None,
        1 => Some(1 + u32::from(r.u8() % 16)),
        2 => Some(u32::from(r.u16())),
        _ => Some(r.u32()),
    };
    let quota = match burst {
        Some(b) => quota.burst(b).unwrap_or(quota),
        None => quota,
    };
    let delay = match r.u8() % 3 {
        0 => Delay::Smooth,
        1 => Delay::NoDelay,
        _ => Delay::After(r.u8().into()),
    };
    Some(quota.delay(delay))
}

/// How the clock moves before a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Time {
    /// Stay.
    Stay,
    /// Forward a few nanoseconds.
    Nanos(u8),
    /// Forward `k` units (period, emission interval, ms or ns), plus or
    /// minus one nanosecond: window edges, refill instants.
    Units { k: u8, unit: u8, delta: i8 },
    /// Forward `n / 16` of a period.
    Sixteenths(u8),
    /// Back `n / 16` units (at least 1 ns), saturating at 0.
    Back { n: u8, unit: u8 },
    /// To `u64::MAX - n`: the end of the clock.
    End(u16),
    /// Forward `2^n` nanoseconds (saturating).
    Pow2(u8),
    /// To `n` nanoseconds from the origin (usually a step back).
    Origin(u16),
}

/// The cost of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cost {
    One,
    Zero,
    /// `n % (capacity + 2)`: up to just past the capacity.
    Small(u8),
    /// Any `u32`.
    Raw(u32),
}

/// One step: move the clock, peek, and check unless `peek_only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub time: Time,
    pub cost: Cost,
    pub peek_only: bool,
}

impl Step {
    /// Op byte: bits 0-2 the time kind, 3-4 the cost kind, bit 5 peek
    /// only; then the arguments the kinds take.
    pub fn decode(r: &mut Reader) -> Step {
        let op = r.u8();
        let time = match op & 7 {
            0 => Time::Stay,
            1 => Time::Nanos(r.u8()),
            2 => {
                let a = r.u8();
                Time::Units {
                    k: a & 7,
                    unit: (a >> 3) & 3,
                    delta: ((a >> 5) % 3) as i8 - 1,
                }
            }
            3 => Time::Sixteenths(r.u8()),
            4 => {
                let a = r.u8();
                Time::Back {
                    n: a & 63,
                    unit: a >> 6,
                }
            }
            5 => Time::End(r.u16()),
            6 => Time::Pow2(r.u8() % 64),
            _ => Time::Origin(r.u16()),
        };
        let cost = match (op >> 3) & 3 {
            0 => Cost::One,
            1 => Cost::Zero,
            2 => Cost::Small(r.u8()),
            _ => Cost::Raw(r.u32()),
        };
        Step {
            time,
            cost,
            peek_only: op & 0x20 != 0,
        }
    }

    /// The reading after this step from `now`.
    pub fn time_after(&self, now: u64, quota: &Quota) -> u64 {
        let period = quota.period_nanos();
        let unit = |u: u8| match u & 3 {
            0 => period,
            1 => quota.emission_interval_nanos(),
            2 => MS,
            _ => 1,
        };
        match self.time {
            Time::Stay => now,
            Time::Nanos(n) => now.saturating_add(n.into()),
            Time::Units { k, unit: u, delta } => {
                let gap = unit(u).saturating_mul(k.into());
                now.saturating_add(gap.saturating_add_signed(delta.into()))
            }
            Time::Sixteenths(n) => {
                let gap = u128::from(period) * u128::from(n) / 16;
                now.saturating_add(u64::try_from(gap).unwrap_or(u64::MAX))
            }
            Time::Back { n, unit: u } => {
                let gap = (u128::from(unit(u)) * u128::from(n) / 16).max(1);
                now.saturating_sub(u64::try_from(gap).unwrap_or(u64::MAX))
            }
            Time::End(n) => u64::MAX - u64::from(n),
            Time::Pow2(n) => now.saturating_add(1 << n),
            Time::Origin(n) => n.into(),
        }
    }

    pub fn cost(&self, capacity: u32) -> u32 {
        match self.cost {
            Cost::One => 1,
            Cost::Zero => 0,
            Cost::Small(n) => {
                let n = u64::from(n) % (u64::from(capacity) + 2);
                n as u32
            }
            Cost::Raw(n) => n,
        }
    }
}

/// Decodes the whole input: a quota and up to [`MAX_STEPS`] steps.
pub fn decode(data: &[u8]) -> Option<(Quota, Vec<Step>)> {
    let mut r = Reader::new(data);
    let quota = decode_quota(&mut r)?;
    let mut steps = Vec::new();
    while !r.is_empty() && steps.len() < MAX_STEPS {
        steps.push(Step::decode(&mut r));
    }
    Some((quota, steps))
}

/// What one algorithm's target adds to the shared passes.
pub trait Target {
    type Alg: Algorithm;
    type Model: Model;

    /// Whether admissions may carry a delay (the leaky bucket).
    const DELAYS: bool = false;

    /// Whether the model covers `quota` at all (some reading in its domain).
    fn model_covers(_quota: &Quota) -> bool {
        true
    }

    /// `raw`, the next reading, moved into the model's domain, given the
    /// first reading of the run and the previous one (both already moved).
    fn model_time(quota: &Quota, first: Option<u64>, prev: u64, raw: u64) -> u64;

    /// The spread of readings within which the algorithm is exact (window
    /// tags decode to the window they were written in); `u64::MAX`: any.
    /// The time-relation checks of [`invariants`] only run within it.
    fn exact_span(_quota: &Quota) -> u64 {
        u64::MAX
    }

    /// The latest reading up to which the algorithm keeps its contract in
    /// full; past it the algorithm's documented end-of-clock behaviour
    /// applies. The checks of [`invariants`] that relate decisions at
    /// different times (and `remaining` on denials) only run up to it.
    fn horizon(_quota: &Quota) -> u64 {
        u64::MAX
    }

    /// The most total cost the limiter may admit when its first admission
    /// (of a non-zero cost) was at `first` and the latest reading is
    /// `latest`.
    fn max_admitted(quota: &Quota, first: u64, latest: u64) -> u128;

    /// What [`Decision::limit`] reports: the capacity, except where an
    /// algorithm admits at most one part of its limit per request
    /// (`Sharded` reports the whole quota's).
    fn limit(_quota: &Quota, capacity: u32) -> u32 {
        capacity
    }

    /// Whether the invariants keep readings from going back. `Sharded`
    /// counts a step back as no time elapsed per shard, so a shard that has
    /// not seen the later time decides at the earlier one (documented): the
    /// whole quota's admission bound then holds only for readings that do
    /// not go back.
    const MONOTONIC: bool = false;

    /// Whether room can be split so that a denied cost finds `remaining` at
    /// or above it (`Sharded`: room spread over shards, none with enough).
    const FRAGMENTED: bool = false;
}

/// Runs both passes on one input.
pub fn run<T: Target>(data: &[u8]) {
    let Some((quota, steps)) = decode(data) else {
        return;
    };
    if debug() {
        eprintln!("quota {quota} ({quota:?})");
        for (i, step) in steps.iter().enumerate() {
            eprintln!("step {i}: {step:?}");
        }
    }
    if let Err(e) = T::Alg::from_quota(&quota) {
        // Refusals are errors, never panics; nothing more to drive.
        let _ = e.to_string();
        return;
    }
    if T::model_covers(&quota) {
        differential::<T>(&quota, &steps);
    }
    invariants::<T>(&quota, &steps);
}

/// Whether `RATEGATE_FUZZ_DEBUG` is set: print each decoded input (to
/// read a crash or a seed: `RATEGATE_FUZZ_DEBUG=1 fuzz/target/.../TARGET FILE`).
fn debug() -> bool {
    static DEBUG: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DEBUG.get_or_init(|| std::env::var_os("RATEGATE_FUZZ_DEBUG").is_some())
}

fn new_limiter<A: Algorithm>(quota: &Quota, clock: &ManualClock) -> RateLimiter<A, ManualClock> {
    match RateLimiter::with_clock(*quota, clock.clone()) {
        Ok(limiter) => limiter,
        Err(e) => panic!("{quota}: accepted by from_quota, refused by the limiter: {e}"),
    }
}

fn outcome(result: Result<Decision, CheckError>) -> Result<Outcome, CheckError> {
    result.map(|d| Outcome::of(&d))
}

/// The limiter against the model, every field, at every step (moved into
/// the model's domain).
pub fn differential<T: Target>(quota: &Quota, steps: &[Step]) {
    let clock = ManualClock::new();
    let limiter = new_limiter::<T::Alg>(quota, &clock);
    let capacity = limiter.algorithm().capacity();
    let mut model = T::Model::new(quota);
    let mut first = None;
    let mut now = 0;
    for (i, step) in steps.iter().enumerate() {
        now = T::model_time(quota, first, now, step.time_after(now, quota));
        first.get_or_insert(now);
        clock.set(now);
        let cost = step.cost(capacity);
        let peeked = outcome(limiter.peek_n(cost));
        let want = model.peek(now, cost);
        assert_eq!(
            peeked, want,
            "{quota}: peek differs from the model at step {i} ({step:?}), t={now}, cost={cost}"
        );
        if !step.peek_only {
            let got = outcome(limiter.check_n(cost));
            let want = model.request(now, cost);
            assert_eq!(
                got, want,
                "{quota}: check differs from the model at step {i} ({step:?}), t={now}, cost={cost}"
            );
        }
    }
}

/// The raw steps, with no model. At every step:
///
/// * `peek_n` decides exactly as the `check_n` that follows it;
/// * an error exactly for a cost above the capacity; otherwise `limit` is
///   the capacity, `remaining <= limit`, admissions have no `retry_after`,
///   denials no `delay` and a `retry_after` above 0, and only the leaky
///   bucket delays;
/// * the total cost admitted stays within [`Target::max_admitted`];
///
/// and, while every reading so far lies within [`Target::exact_span`] and
/// up to [`Target::horizon`]:
///
/// * a denial leaves `remaining < max(cost, 1)`;
/// * a step back never grants more: if a request passes at a reading
///   earlier than the latest one, it passes at the latest one too, with at
///   least as much `remaining` and no longer a `delay`;
/// * `retry_after` is exact: the same request passes at `now +
///   retry_after` and not one nanosecond earlier (unless it is `u64::MAX`,
///   never or saturated, or the clock cannot reach that time);
/// * `reset_after` is exact: at `now + reset_after`, at or after every
///   reading so far, the limiter decides as a new one does (same
///   exceptions).
pub fn invariants<T: Target>(quota: &Quota, steps: &[Step]) {
    let clock = ManualClock::new();
    let limiter = new_limiter::<T::Alg>(quota, &clock);
    let capacity = limiter.algorithm().capacity();
    let span = T::exact_span(quota);
    let horizon = T::horizon(quota);
    let (mut lowest, mut latest) = (u64::MAX, 0u64);
    let mut first_admission: Option<u64> = None;
    let mut admitted: u128 = 0;
    let mut now = 0;
    for (i, step) in steps.iter().enumerate() {
        now = step.time_after(now, quota);
        if T::MONOTONIC {
            now = now.max(latest);
        }
        lowest = lowest.min(now);
        latest = latest.max(now);
        // Whether every reading so far and `t` lie within the exact span
        // and before the horizon.
        let exact = |t: u64| latest.max(t) - lowest.min(t) <= span && latest.max(t) <= horizon;
        clock.set(now);
        let cost = step.cost(capacity);
        let at = format!("{quota}: step {i} ({step:?}), t={now}, cost={cost}");
        let peek_at = |t: u64| {
            clock.set(t);
            let d = limiter.peek_n(cost);
            clock.set(now);
            d
        };

        let peeked = limiter.peek_n(cost);
        // A step back grants nothing more than the latest reading would.
        if let Ok(p) = peeked
            && now < latest
            && p.is_allowed()
            && exact(now)
        {
            let later = peek_at(latest).expect("the cost passed at an earlier time");
            assert!(
                later.is_allowed()
                    && later.remaining() >= p.remaining()
                    && later.delay_nanos() <= p.delay_nanos(),
                "{at}: {p:?} after a step back, but {later:?} at t={latest}"
            );
        }
        let decision = if step.peek_only {
            peeked
        } else {
            let got = limiter.check_n(cost);
            assert_eq!(
                outcome(got),
                outcome(peeked),
                "{at}: check differs from peek"
            );
            got
        };
        let d = match decision {
            Err(e) => {
                assert_eq!(
                    e,
                    CheckError::CostExceedsCapacity { cost, capacity },
                    "{at}"
                );
                continue;
            }
            Ok(d) => d,
        };
        assert!(cost <= capacity, "{at}: a cost above capacity decided");
        assert_eq!(d.limit(), T::limit(quota, capacity), "{at}: limit");
        // Cost 0 is a probe in every algorithm: always admitted.
        assert!(
            cost > 0 || d.is_allowed(),
            "{at}: a probe was denied: {d:?}"
        );
        assert!(d.remaining() <= d.limit(), "{at}: remaining {d:?}");
        if d.is_allowed() {
            assert_eq!(d.retry_after_nanos(), 0, "{at}: {d:?}");
        } else {
            assert_eq!(d.delay_nanos(), 0, "{at}: {d:?}");
            // Fewer than `cost` unit requests could pass right after.
            assert!(
                d.remaining() < cost || T::FRAGMENTED || !exact(now),
                "{at}: denied, yet {d:?}"
            );
        }
        if !T::DELAYS {
            assert_eq!(d.delay_nanos(), 0, "{at}: {d:?}");
        }
        if d.is_allowed() && !step.peek_only && cost > 0 {
            let first = *first_admission.get_or_insert(now);
            admitted += u128::from(cost);
            let most = T::max_admitted(quota, first, latest);
            assert!(
                admitted <= most || !exact(first),
                "{at}: {admitted} admitted since t={first}, at most {most}"
            );
        }

        // Retry-after: the same request passes then, not a nanosecond
        // earlier (a denial changed nothing).
        if !d.is_allowed() {
            let retry = d.retry_after_nanos();
            assert!(retry > 0, "{at}: denied with no retry_after: {d:?}");
            // u64::MAX: never, or beyond the clock (saturated).
            let reachable = retry < u64::MAX;
            if let Some(then) = now.checked_add(retry).filter(|&t| reachable && exact(t)) {
                let then_d = peek_at(then).expect("decided at now");
                assert!(
                    then_d.is_allowed(),
                    "{at}: {d:?}, still denied at t={then}: {then_d:?}"
                );
                let before = peek_at(then - 1).expect("decided at now");
                assert!(
                    !before.is_allowed(),
                    "{at}: {d:?}, but allowed already at t={}: {before:?}",
                    then - 1
                );
            }
        }

        // Remaining: after the last step, if a check, exactly that many
        // cost-1 requests pass with the clock frozen (the end of `u64` time
        // included: only the tag span limits it).
        let bound = d.limit().max(capacity).saturating_add(2);
        if i + 1 == steps.len() && !step.peek_only && latest - lowest <= span && bound <= 4_096 {
            let passed = (0..bound).filter(|_| limiter.check().is_allowed()).count();
            assert_eq!(
                passed,
                d.remaining() as usize,
                "{at}: {d:?}, but {passed} passed next"
            );
            break;
        }

        // Reset-after: then, at or after every reading so far, the state is
        // as good as new. (A peek's admission was not recorded: skipped.)
        let recorded = !step.peek_only || !d.is_allowed() || cost == 0;
        let reachable = d.reset_after_nanos() < u64::MAX;
        if let Some(then) = now
            .checked_add(d.reset_after_nanos())
            .filter(|&t| recorded && reachable && t >= latest && exact(t))
        {
            let fresh_clock = ManualClock::new();
            fresh_clock.set(then);
            let fresh = new_limiter::<T::Alg>(quota, &fresh_clock);
            let want = outcome(fresh.peek_n(cost));
            let got = outcome(peek_at(then));
            assert_eq!(got, want, "{at}: {d:?}, not as new at t={then}");
        }
    }
}

/// Clamps `t` into `[lo, lo + span]` (saturating).
pub fn clamp_span(t: u64, lo: u64, span: u64) -> u64 {
    t.clamp(lo, lo.saturating_add(span))
}

/// `u64::MAX / period` windows fit in `bits` bits of window tag: `u64::MAX`
/// (any spread); otherwise the spread of readings, `2^(bits - 1) - 1`
/// windows, within which a tag decodes to the window it was written in.
pub fn tag_span(period: u64, bits: u32) -> u64 {
    let last = u64::MAX / period;
    if bits >= 64 || last < (1u64 << bits) {
        return u64::MAX;
    }
    let windows = (1u64 << (bits - 1)) - 1;
    windows.saturating_mul(period)
}

/// `bits(n)`: the bits any value up to `n` needs.
pub fn bits_for(n: u32) -> u32 {
    u32::BITS - n.leading_zeros()
}

/// The windows of `period` from the one holding `first` to the one holding
/// `latest`, inclusive.
pub fn windows_between(period: u64, first: u64, latest: u64) -> u128 {
    u128::from((latest / period).saturating_sub(first / period)) + 1
}

/// A token bucket's emission interval and capacity (burst, by default the
/// limit), for the token-bucket targets' bounds.
pub fn bucket_params(quota: &Quota) -> (u64, u64) {
    let interval = quota.emission_interval_nanos();
    let capacity = u64::from(quota.burst_or(quota.limit()));
    (interval, capacity)
}
