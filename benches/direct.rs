//! Direct (unkeyed) checks on one thread: the allowed and the denied path,
//! on the default `QuantaClock` and on a `ManualClock`, next to governor's
//! direct limiter on its default clock with the same quota.
//!
//! * `direct_allow`: one per nanosecond (see `common::allow_quota`), never
//!   exhausted.
//! * `direct_deny`: one per minute, exhausted by one check before measuring.
//! * Variant `quanta`: the default clock (a TSC read plus the monotonic
//!   clamp). Variant `manual`: a `ManualClock`, set before every check (one
//!   relaxed store; on the allowed path two nanoseconds of simulated time
//!   per check, or as many more as the algorithm needs to admit every check;
//!   the same time on the denied path), which isolates the algorithm from
//!   the clock.
//! * Variant `manual_fields`: as `manual`, then every field of the
//!   decision read (`remaining`, `reset_after`, `retry_after`, `delay`), as
//!   an answer with rate-limit headers does; the difference from `manual`
//!   is what the decision's lazily derived fields save a caller that only
//!   asks `is_allowed`.
//! * An allowed-path benchmark whose trial run is denied is left out, with
//!   a note on stderr: the leaky bucket admits at most `burst + 1` requests
//!   per millisecond on one key (nginx's millisecond drain), far fewer than
//!   a tight loop makes.

mod common;

use common::{
    PerAlgorithm, allow_quota, config, denials, deny_quota, for_each_algorithm,
    governor_allow_quota, governor_deny_quota, on_allowed_path,
};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main};
use rategate::{Algorithm, Clock, Decision, ManualClock, RateLimiter};

const TRIAL_CHECKS: u64 = 100_000;

struct Allow<'a, 'g>(&'a mut BenchmarkGroup<'g, WallTime>);

impl PerAlgorithm for Allow<'_, '_> {
    fn run<A: Algorithm>(&mut self, name: &'static str) {
        let quota = allow_quota::<A>();

        let limiter = RateLimiter::<A>::new(quota).unwrap();
        let denied = denials(TRIAL_CHECKS, || limiter.check().is_allowed());
        let id = format!("direct_allow/{name}/quanta");
        if on_allowed_path(&id, denied, TRIAL_CHECKS) {
            self.0
                .bench_function(BenchmarkId::new(name, "quanta"), |b| {
                    b.iter(|| limiter.check())
                });
        }

        // The simulated time per check: twice the emission interval, or ten
        // times more until nothing is denied (the leaky bucket drains in
        // whole milliseconds).
        let clock = ManualClock::new();
        let first_step = 2 * quota.emission_interval_nanos();
        let mut step = first_step;
        let limiter = loop {
            assert!(
                step < 1_000_000_000,
                "{name}: no step keeps to the allowed path"
            );
            clock.set(0);
            let limiter = RateLimiter::<A, _>::with_clock(quota, clock.clone()).unwrap();
            let mut now = 0;
            let denied = denials(TRIAL_CHECKS, || {
                now += step;
                clock.set(now);
                limiter.check().is_allowed()
            });
            if denied == 0 {
                break limiter;
            }
            step *= 10;
        };
        if step != first_step {
            eprintln!("note: direct_allow/{name}/manual: {step} ns of simulated time per check");
        }
        let mut now = clock.now();
        self.0
            .bench_function(BenchmarkId::new(name, "manual"), |b| {
                b.iter(|| {
                    now += step;
                    clock.set(now);
                    limiter.check()
                })
            });
        self.0
            .bench_function(BenchmarkId::new(name, "manual_fields"), |b| {
                b.iter(|| {
                    now += step;
                    clock.set(now);
                    every_field(limiter.check())
                })
            });
    }
}

/// Every field of `decision`, read.
fn every_field(decision: Decision) -> (bool, u32, u64, u64, u64) {
    (
        decision.is_allowed(),
        decision.remaining(),
        decision.reset_after_nanos(),
        decision.retry_after_nanos(),
        decision.delay_nanos(),
    )
}

struct Deny<'a, 'g>(&'a mut BenchmarkGroup<'g, WallTime>);

impl PerAlgorithm for Deny<'_, '_> {
    fn run<A: Algorithm>(&mut self, name: &'static str) {
        let limiter = RateLimiter::<A>::new(deny_quota()).unwrap();
        assert!(limiter.check().is_allowed());
        assert!(!limiter.check().is_allowed(), "{name}: not exhausted");
        self.0
            .bench_function(BenchmarkId::new(name, "quanta"), |b| {
                b.iter(|| limiter.check())
            });
        assert!(!limiter.check().is_allowed());

        let clock = ManualClock::new();
        clock.set(1_000);
        let limiter = RateLimiter::<A, _>::with_clock(deny_quota(), clock.clone()).unwrap();
        assert!(limiter.check().is_allowed());
        assert!(!limiter.check().is_allowed(), "{name}: not exhausted");
        self.0
            .bench_function(BenchmarkId::new(name, "manual"), |b| {
                b.iter(|| {
                    clock.set(1_000);
                    limiter.check()
                })
            });
        self.0
            .bench_function(BenchmarkId::new(name, "manual_fields"), |b| {
                b.iter(|| {
                    clock.set(1_000);
                    every_field(limiter.check())
                })
            });
    }
}

fn direct_allow(c: &mut Criterion) {
    let mut group = c.benchmark_group("direct_allow");
    for_each_algorithm(&mut Allow(&mut group));

    let governor = governor::RateLimiter::direct(governor_allow_quota());
    let denied = denials(TRIAL_CHECKS, || governor.check().is_ok());
    if on_allowed_path("direct_allow/governor/quanta", denied, TRIAL_CHECKS) {
        group.bench_function(BenchmarkId::new("governor", "quanta"), |b| {
            b.iter(|| governor.check())
        });
    }
    group.finish();
}

fn direct_deny(c: &mut Criterion) {
    let mut group = c.benchmark_group("direct_deny");
    for_each_algorithm(&mut Deny(&mut group));

    let governor = governor::RateLimiter::direct(governor_deny_quota());
    assert!(governor.check().is_ok());
    assert!(governor.check().is_err(), "governor: not exhausted");
    group.bench_function(BenchmarkId::new("governor", "quanta"), |b| {
        b.iter(|| governor.check())
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = direct_allow, direct_deny
}
criterion_main!(benches);
