//! Run-time quota changes, the documented cases per algorithm: a key that
//! used 90 of 100 and is moved to 50 is denied until it is back below 50
//! (the counting algorithms), a raised quota takes effect at once, and the
//! token bucket keeps its time to full. `tests/refund.rs` compares random
//! runs with quota changes against the reference models.

use rategate::algorithm::{Adjust, Adjustable};
use rategate::{
    Algorithm, FixedWindow, KeyedRateLimiter, LeakyBucket, ManualClock, Quota, QuotaError,
    RateLimiter, SlidingWindowCounter, SlidingWindowLog, TokenBucket,
};
use std::time::Duration;

fn limiter<A: Adjust>(quota: Quota) -> (RateLimiter<Adjustable<A>, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (
        RateLimiter::with_clock(quota, clock.clone()).unwrap(),
        clock,
    )
}

/// 90 of 100 per minute used at 0 s, moved to 50: denied, and still denied
/// while the 90 count; moved to 200: 110 more pass at once.
fn cut_then_raise<A: Adjust>() -> (RateLimiter<Adjustable<A>, ManualClock>, ManualClock) {
    let (limiter, clock) = limiter::<A>(Quota::per_minute(100).unwrap());
    assert!(limiter.check_n(90).unwrap().is_allowed());
    limiter.set_quota(Quota::per_minute(50).unwrap()).unwrap();
    assert_eq!(limiter.quota().limit(), 50);
    let denied = limiter.check();
    assert!(!denied.is_allowed());
    assert_eq!((denied.limit(), denied.remaining()), (50, 0));
    clock.advance(Duration::from_secs(30));
    assert!(!limiter.check().is_allowed());
    limiter.set_quota(Quota::per_minute(200).unwrap()).unwrap();
    assert!(limiter.check_n(110).unwrap().is_allowed());
    assert!(!limiter.check().is_allowed());
    limiter.set_quota(Quota::per_minute(50).unwrap()).unwrap();
    (limiter, clock)
}

#[test]
fn fixed_window_counts_carry_over() {
    let (limiter, clock) = cut_then_raise::<FixedWindow>();
    // The next window starts from zero under the new limit.
    clock.advance(Duration::from_secs(30));
    assert_eq!(limiter.check_n(50).unwrap().remaining(), 0);
    assert!(!limiter.check().is_allowed());
}

#[test]
fn sliding_window_log_counts_carry_over() {
    let (limiter, clock) = cut_then_raise::<SlidingWindowLog>();
    // At 60 s the 90 from 0 s leave; the 110 from 30 s stay until 90 s.
    clock.advance(Duration::from_secs(30));
    assert!(!limiter.check().is_allowed());
    clock.advance(Duration::from_secs(30));
    assert_eq!(limiter.check_n(50).unwrap().remaining(), 0);
}

#[test]
fn sliding_window_counter_counts_carry_over() {
    let (limiter, clock) = cut_then_raise::<SlidingWindowCounter>();
    // At 60 s the 200 of the first minute weigh fully; at 120 s nothing.
    clock.advance(Duration::from_secs(30));
    assert!(!limiter.check().is_allowed());
    clock.advance(Duration::from_secs(60));
    assert_eq!(limiter.check_n(50).unwrap().remaining(), 0);
}

#[test]
fn leaky_bucket_excess_carries_over() {
    // 10 per second, 9 queued: 10 at once. 8 used (excess 7), moved to
    // burst 4: denied until the excess drains to 3, 400 ms at 10 per second.
    let quota = Quota::per_second(10).unwrap().burst(9).unwrap();
    let (limiter, clock) = limiter::<LeakyBucket>(quota);
    assert!(limiter.check_n(8).unwrap().is_allowed());
    limiter
        .set_quota(Quota::per_second(10).unwrap().burst(4).unwrap())
        .unwrap();
    assert!(!limiter.check().is_allowed());
    clock.advance(Duration::from_millis(399));
    assert!(!limiter.check().is_allowed());
    clock.advance(Duration::from_millis(1));
    assert!(limiter.check().is_allowed());
    // Raised: room at once.
    limiter
        .set_quota(Quota::per_second(10).unwrap().burst(20).unwrap())
        .unwrap();
    assert!(limiter.check_n(16).unwrap().is_allowed());
}

#[test]
fn token_bucket_keeps_its_time_to_full() {
    let (limiter, clock) = limiter::<TokenBucket>(Quota::per_minute(100).unwrap());
    assert!(limiter.check_n(90).unwrap().is_allowed());
    // 54 s until full, under either quota: 90% used, so 5 of 50 are left.
    limiter.set_quota(Quota::per_minute(50).unwrap()).unwrap();
    let d = limiter.peek_n(0).unwrap();
    assert_eq!((d.limit(), d.remaining()), (50, 5));
    assert_eq!(d.reset_after(), Duration::from_secs(54));
    // A burst below the debt denies until the debt drains below it.
    limiter
        .set_quota(Quota::per_minute(50).unwrap().burst(10).unwrap())
        .unwrap();
    let d = limiter.check();
    assert!(!d.is_allowed());
    // One more token (1.2 s) fits in the 12 s tolerance after 43.2 s.
    assert_eq!(
        d.retry_after(),
        Duration::from_millis(54_000 + 1_200 - 12_000)
    );
    clock.advance(d.retry_after());
    assert!(limiter.check().is_allowed());
}

#[test]
fn keyed_limiter_changes_every_key_at_its_next_check() {
    let limiter =
        KeyedRateLimiter::<u8, Adjustable<FixedWindow>, _>::builder(Quota::per_hour(60).unwrap())
            .clock(ManualClock::new())
            .build()
            .unwrap();
    assert!(limiter.check_n(&1, 60).unwrap().is_allowed());
    assert!(!limiter.check(&1).is_allowed());
    limiter.set_quota(Quota::per_hour(5000).unwrap()).unwrap();
    assert_eq!(limiter.quota().limit(), 5000);
    assert_eq!(limiter.check(&1).remaining(), 4939);
    assert_eq!(limiter.check(&2).remaining(), 4999);
}

#[test]
fn refused_changes_keep_the_quota() {
    let (limiter, _) = limiter::<SlidingWindowCounter>(Quota::per_minute(10).unwrap());
    assert_eq!(
        limiter.set_quota(Quota::per_hour(10).unwrap()),
        Err(QuotaError::PeriodFixed {
            period_nanos: 60_000_000_000
        })
    );
    assert_eq!(limiter.quota(), Quota::per_minute(10).unwrap());
    // The log may change its period: its entries are times.
    let (log, _) = limiter_log();
    assert!(log.set_quota(Quota::per_hour(10).unwrap()).is_ok());
    assert_eq!(log.algorithm().capacity(), 10);
}

fn limiter_log() -> (
    RateLimiter<Adjustable<SlidingWindowLog>, ManualClock>,
    ManualClock,
) {
    limiter::<SlidingWindowLog>(Quota::per_minute(10).unwrap())
}

/// A check racing a change decides under the old quota or the new one,
/// whole, never a mix (a limit of 1 cannot admit a cost of 2; a limit of 3
/// admits it with 1 left), and every check after the change sees the new
/// one. Threads, many rounds: the swap is `arc_swap`'s, outside the loom
/// models.
#[test]
fn a_check_racing_a_change_decides_under_one_quota_whole() {
    use rategate::{Algorithm, CheckError, FixedWindow};
    use std::sync::Barrier;
    for _ in 0..2_000 {
        let fw = Adjustable::<FixedWindow>::from_quota(&Quota::per_second(1).unwrap()).unwrap();
        let state = fw.new_state();
        let start = Barrier::new(2);
        let decided = std::thread::scope(|s| {
            let checker = s.spawn(|| {
                start.wait();
                fw.check(&state, 0, 2)
            });
            start.wait();
            fw.set_quota(Quota::per_second(3).unwrap()).unwrap();
            checker.join().unwrap()
        });
        match decided {
            Err(e) => assert_eq!(
                e,
                CheckError::CostExceedsCapacity {
                    cost: 2,
                    capacity: 1
                }
            ),
            Ok(d) => assert_eq!((d.is_allowed(), d.limit(), d.remaining()), (true, 3, 1)),
        }
        assert_eq!(fw.quota().limit(), 3);
        assert_eq!(fw.peek(&state, 0, 1).unwrap().limit(), 3);
    }
}

/// A refund is priced at the quota in force: for the token bucket, one
/// refunded after a lowering frees the new interval, which may be the old
/// quota's whole bucket (the `Adjustable` docs, "Refunds across a change").
#[test]
fn token_bucket_refunds_are_priced_at_the_quota_in_force() {
    let (lowered, _clock) = limiter::<TokenBucket>(Quota::per_hour(1000).unwrap());
    assert!(lowered.check_n(1000).unwrap().is_allowed());
    lowered.set_quota(Quota::per_hour(1).unwrap()).unwrap();
    assert_eq!(lowered.refund(1), 1);
    lowered.set_quota(Quota::per_hour(1000).unwrap()).unwrap();
    assert_eq!(lowered.peek().remaining(), 999);
    // Refunded before the change, the same request frees one token.
    let (first, _clock) = limiter::<TokenBucket>(Quota::per_hour(1000).unwrap());
    assert!(first.check_n(1000).unwrap().is_allowed());
    assert_eq!(first.refund(1), 1);
    first.set_quota(Quota::per_hour(1).unwrap()).unwrap();
    first.set_quota(Quota::per_hour(1000).unwrap()).unwrap();
    assert_eq!(first.peek().remaining(), 0);
}
