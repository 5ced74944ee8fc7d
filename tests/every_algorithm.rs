//! Properties every algorithm shares, checked on random sequences of
//! (time step, cost) through the direct limiter on a manual clock, for the
//! five algorithms and `Sharded` forms of the four splittable ones:
//!
//! * **A cost-0 check is a probe**: always admitted (also after the clock
//!   stepped back), it writes nothing (a twin limiter never probed makes
//!   every other decision the same), and it reports what `peek_n(0)` does.
//! * **`remaining` is what passes next**: after any decision, with the clock
//!   frozen, exactly `remaining` requests of cost 1 pass (found by replaying
//!   the sequence on a fresh limiter and draining it). Costs above 1 (which
//!   fall past a `Sharded` home shard) and extreme quotas (periods near
//!   `u64::MAX` nanoseconds, times near the end of `u64` time) included.
//!
//! Steps go back in time as well as forward. Quotas an algorithm refuses
//! are skipped: only the accepted ones must behave.

use proptest::prelude::*;
use rategate::{
    Algorithm, Delay, FixedWindow, LeakyBucket, ManualClock, Quota, RateLimiter, Sharded,
    SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use std::time::Duration;

#[derive(Debug, Clone)]
struct Case {
    limit: u32,
    period: u64,
    burst: Option<u32>,
    delay: Delay,
    start: u64,
    /// (signed time step, cost, probe before the request).
    steps: Vec<(i64, u32, bool)>,
}

impl Case {
    fn quota(&self) -> Option<Quota> {
        let quota = Quota::with_period(self.limit, Duration::from_nanos(self.period)).ok()?;
        let quota = match self.burst {
            Some(b) => quota.burst(b).ok()?,
            None => quota,
        };
        Some(quota.delay(self.delay))
    }

    /// The clock's reading before each step's request.
    fn times(&self) -> Vec<u64> {
        let mut now = self.start;
        self.steps
            .iter()
            .map(|&(step, _, _)| {
                now = now.saturating_add_signed(step);
                now
            })
            .collect()
    }
}

fn case() -> impl Strategy<Value = Case> {
    let period = prop_oneof![
        3 => 1u64..5_000,
        3 => 1_000_000u64..10_000_000_000,
        // Near the end of u64 nanoseconds.
        1 => (1u64..16).prop_map(|k| u64::MAX / k),
        1 => (1u64..64).prop_map(|k| u64::MAX / 64 * k),
    ];
    (1u32..24, period)
        .prop_filter("at most one per ns", |&(limit, period)| {
            u64::from(limit) <= period
        })
        .prop_flat_map(|(limit, period)| {
            let unit = (period / u64::from(limit)).max(1);
            let unit = i64::try_from(unit).unwrap_or(i64::MAX);
            let step = prop_oneof![
                3 => Just(0i64),
                3 => 0i64..=unit,
                2 => (-unit / 2)..=0,
                1 => 0i64..=unit.saturating_mul(3),
                1 => -1_000i64..=1_000,
            ];
            let start = prop_oneof![
                2 => Just(0u64),
                2 => 0u64..u64::MAX / 2,
                // Near the end of time, within a few periods.
                1 => (0u64..4).prop_map(move |k| u64::MAX - k.saturating_mul(period)),
                1 => (0u64..1 << 40).prop_map(|k| u64::MAX - k),
            ];
            let delay = prop_oneof![
                Just(Delay::Smooth),
                Just(Delay::NoDelay),
                (0u32..6).prop_map(Delay::After),
            ];
            (
                Just(limit),
                Just(period),
                proptest::option::of(1u32..30),
                delay,
                start,
                proptest::collection::vec((step, 0u32..7, any::<bool>()), 1..30),
            )
        })
        .prop_map(|(limit, period, burst, delay, start, steps)| Case {
            limit,
            period,
            burst,
            delay,
            start,
            steps,
        })
}

fn limiter<A: Algorithm>(case: &Case) -> Option<(RateLimiter<A, ManualClock>, ManualClock)> {
    let clock = ManualClock::new();
    let limiter = RateLimiter::<A, _>::with_clock(case.quota()?, clock.clone()).ok()?;
    Some((limiter, clock))
}

/// Probes interleaved on one limiter change nothing the twin sees.
fn probes_are_pure<A: Algorithm>(case: &Case) -> Result<(), TestCaseError> {
    let (Some((probed, clock)), Some((twin, twin_clock))) =
        (limiter::<A>(case), limiter::<A>(case))
    else {
        return Ok(());
    };
    let name = std::any::type_name::<A>();
    for (i, (&(_, cost, probe), now)) in case.steps.iter().zip(case.times()).enumerate() {
        clock.set(now);
        twin_clock.set(now);
        if probe {
            let peeked = probed.peek_n(0);
            let got = probed.check_n(0);
            prop_assert_eq!(got, peeked, "{} step {}: probe vs peek", name, i);
            prop_assert!(
                got.is_ok_and(|d| d.is_allowed()),
                "{} step {}: probe denied",
                name,
                i
            );
        }
        let got = probed.check_n(cost);
        let want = twin.check_n(cost);
        prop_assert_eq!(
            got,
            want,
            "{} step {} at {}: a probe wrote state",
            name,
            i,
            now
        );
    }
    Ok(())
}

/// After every decision exactly `remaining` cost-1 requests pass at once.
fn remaining_is_exact<A: Algorithm>(case: &Case) -> Result<(), TestCaseError> {
    let name = std::any::type_name::<A>();
    let times = case.times();
    for last in 0..case.steps.len() {
        let Some((limiter, clock)) = limiter::<A>(case) else {
            return Ok(());
        };
        let mut decision = None;
        for (&(_, cost, _), &now) in case.steps[..=last].iter().zip(&times) {
            clock.set(now);
            decision = Some(limiter.check_n(cost));
        }
        let Some(Ok(decision)) = decision else {
            continue;
        };
        let capacity = limiter.algorithm().capacity();
        let bound = decision.limit().max(capacity) + 2;
        let passed = (0..bound).filter(|_| limiter.check().is_allowed()).count() as u32;
        prop_assert_eq!(
            decision.remaining(),
            passed,
            "{} after step {} at {}: {:?}",
            name,
            last,
            times[last],
            decision
        );
    }
    Ok(())
}

macro_rules! every_algorithm {
    ($check:ident, $case:expr) => {{
        let case = $case;
        $check::<TokenBucket>(&case)?;
        $check::<FixedWindow>(&case)?;
        $check::<SlidingWindowLog>(&case)?;
        $check::<SlidingWindowCounter>(&case)?;
        $check::<LeakyBucket>(&case)?;
        $check::<Sharded<TokenBucket, 2>>(&case)?;
        $check::<Sharded<TokenBucket, 4>>(&case)?;
        $check::<Sharded<FixedWindow, 2>>(&case)?;
        $check::<Sharded<SlidingWindowLog, 3>>(&case)?;
        $check::<Sharded<SlidingWindowCounter, 2>>(&case)?;
    }};
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn cost_zero_is_a_pure_probe_everywhere(case in case()) {
        every_algorithm!(probes_are_pure, case);
    }

    #[test]
    fn remaining_is_what_passes_next_everywhere(case in case()) {
        every_algorithm!(remaining_is_exact, case);
    }
}
