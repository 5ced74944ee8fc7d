use super::*;

const MS: u64 = NANOS_PER_MS;

fn bucket(quota: &str) -> LeakyBucket {
    LeakyBucket::from_quota(&quota.parse().unwrap()).unwrap()
}

fn slot(state: &AtomicU64) -> Option<Slot> {
    Slot::unpack(state.load(Ordering::Relaxed))
}

/// A denial's times and `remaining`, derived when asked from what the
/// decision keeps, equal the direct formulas at the packing's extremes: the largest
/// burst and the slowest and fastest rates, a cost of one and of the
/// whole capacity, an empty and a full excess, `last` at 0 and at the
/// last millisecond the word holds, `now` before and far after it.
#[test]
fn a_denials_deferred_times_equal_the_direct_formulas() {
    let quotas = [
        format!("1/1000s burst={}", LeakyBucket::MAX_BURST),
        format!("1/1ns burst={}", LeakyBucket::MAX_BURST),
        "10r/s".to_string(),
        "100r/m burst=7".to_string(),
    ];
    for quota in &quotas {
        let lb = bucket(quota);
        for cost in [1, lb.capacity] {
            for excess in [0, 1, lb.burst / 2, lb.burst, EXCESS_MASK] {
                for last_ms in [0, 1, 12_345, MAX_MS] {
                    for now in [0, last_ms * MS, last_ms * MS + 999_999, u64::MAX] {
                        let slot = Slot { excess, last_ms };
                        let over = (excess + UNIT * u64::from(cost)).saturating_sub(lb.burst);
                        let want = (
                            until_ms(last_ms + drain_ms(lb.per_rate, excess + UNIT), now),
                            until_ms(last_ms + drain_ms(lb.per_rate, over), now),
                        );
                        // The room below the burst at `now`, after the
                        // drain since `last`.
                        let now_ms = (now / MS).min(MAX_MS);
                        let level = lb.drained(slot, now_ms).0;
                        let room = (lb.burst as i64 - level).max(0) as u64;
                        let shift = (UNIT * u64::from(cost)) as i64 - lb.burst as i64;
                        let d = Decision::deny_leaky(
                            lb.capacity,
                            shift as i32,
                            slot.pack(),
                            now,
                            lb.per_rate,
                        );
                        let case = format!("{quota} cost {cost} {slot:?} now {now}");
                        assert_eq!(
                            denial_times(slot.pack(), shift as i32, now, lb.per_rate),
                            want,
                            "{case}"
                        );
                        assert_eq!(
                            (d.reset_after_nanos(), d.retry_after_nanos()),
                            want,
                            "{case}"
                        );
                        assert_eq!(d.remaining(), (room / UNIT) as u32, "{case}");
                        assert_eq!(
                            d.retry_after_secs(),
                            want.1.div_ceil(1_000_000_000).max(1),
                            "{case}"
                        );
                        assert!(!d.is_allowed() && d.delay_nanos() == 0, "{case}");
                    }
                }
            }
        }
    }
}

#[test]
fn rates_match_nginx_units() {
    assert_eq!(bucket("10r/s").rate, 10_000);
    assert_eq!(bucket("100r/m").rate, 1_666);
    assert_eq!(bucket("1r/m").rate, 16);
    assert_eq!(bucket("7/1500ms").rate, 4_666);
    assert_eq!(bucket("1/1ns").rate, 1_000_000_000_000);
    let lb = bucket("10r/s burst=12 delay=8");
    assert_eq!((lb.burst, lb.delay, lb.capacity), (12_000, 8_000, 13));
    let lb = bucket("10r/s burst=20 nodelay");
    assert_eq!((lb.burst, lb.delay, lb.capacity), (20_000, 20_000, 21));
    let lb = bucket("10r/s");
    assert_eq!((lb.burst, lb.delay, lb.capacity), (0, 0, 1));
}

#[test]
fn unsupported_quotas_are_refused() {
    let slow: Quota = "1/1001s".parse().unwrap();
    assert_eq!(
        LeakyBucket::from_quota(&slow),
        Err(QuotaError::RateTooLow {
            limit: 1,
            period_nanos: 1_001_000_000_000
        })
    );
    assert!(LeakyBucket::from_quota(&"1/1000s".parse().unwrap()).is_ok());
    let big = Quota::per_second(1).unwrap().burst(8_389).unwrap();
    assert_eq!(
        LeakyBucket::from_quota(&big),
        Err(QuotaError::LimitTooLarge {
            limit: 8_389,
            max: 8_388
        })
    );
    assert_eq!(LeakyBucket::MAX_BURST, 8_388);
}

#[test]
fn packing_round_trips_at_the_extremes() {
    for slot in [
        Slot {
            excess: 0,
            last_ms: 0,
        },
        Slot {
            excess: EXCESS_MASK,
            last_ms: MAX_MS,
        },
        Slot {
            excess: 8_388_000,
            last_ms: 12_345,
        },
    ] {
        assert_ne!(slot.pack(), 0);
        assert_eq!(Slot::unpack(slot.pack()), Some(slot));
    }
    assert_eq!(Slot::unpack(0), None);
    assert_eq!(MAX_MS, 2_199_023_255_550);
}

#[test]
fn nginx_excess_accounting() {
    // 2r/s: 2000 thousandths per second, 2 per ms.
    let lb = bucket("2r/s burst=2");
    let state = lb.new_state();
    let d = lb.check(&state, 0, 1).unwrap();
    assert!(d.is_allowed());
    assert_eq!((d.remaining(), d.delay_nanos()), (2, 0));
    assert_eq!(d.reset_after_nanos(), 500 * MS);
    assert_eq!(
        slot(&state),
        Some(Slot {
            excess: 0,
            last_ms: 0
        })
    );
    // 100 ms later: 0 - 200 + 1000 = 800, waits 800 * 1000 / 2000 ms.
    let d = lb.check(&state, 100 * MS + 999_999, 1).unwrap();
    assert!(d.is_allowed());
    assert_eq!(
        slot(&state),
        Some(Slot {
            excess: 800,
            last_ms: 100
        })
    );
    assert_eq!(d.delay_nanos(), 400 * MS);
    assert_eq!(d.remaining(), 1);
    // Drained to a new key's level after (800 + 1000) / 2 = 900 ms.
    assert_eq!(d.reset_after_nanos(), 1_000 * MS - (100 * MS + 999_999));
    // Same ms: 1800, then 2800 > 2000 is rejected and changes nothing.
    assert!(lb.check(&state, 100 * MS, 1).unwrap().is_allowed());
    let d = lb.check(&state, 100 * MS, 1).unwrap();
    assert!(!d.is_allowed());
    assert_eq!(
        slot(&state),
        Some(Slot {
            excess: 1_800,
            last_ms: 100
        })
    );
    assert_eq!(d.remaining(), 0);
    // Passes once 800 has drained: at ms 500.
    assert_eq!(d.retry_after_nanos(), 400 * MS);
    assert!(!lb.check(&state, 500 * MS - 1, 1).unwrap().is_allowed());
    assert!(lb.check(&state, 500 * MS, 1).unwrap().is_allowed());
}

#[test]
fn last_moves_only_when_ms_is_nonzero_and_truncation_is_kept() {
    // 100r/m = 1666 thousandths per second: 1 ms drains 1 (1.666 truncated).
    let lb = bucket("100r/m burst=3");
    let state = lb.new_state();
    lb.check(&state, 0, 1).unwrap();
    lb.check(&state, 0, 1).unwrap();
    assert_eq!(
        slot(&state),
        Some(Slot {
            excess: 1_000,
            last_ms: 0
        })
    );
    lb.check(&state, MS, 1).unwrap();
    assert_eq!(
        slot(&state),
        Some(Slot {
            excess: 1_999,
            last_ms: 1
        })
    );
    lb.check(&state, MS + 5, 1).unwrap();
    assert_eq!(
        slot(&state),
        Some(Slot {
            excess: 2_999,
            last_ms: 1
        })
    );
}

#[test]
fn time_going_back_counts_as_zero_ms() {
    let lb = bucket("1r/s burst=1 nodelay");
    let state = lb.new_state();
    assert!(lb.check(&state, 5_000 * MS, 1).unwrap().is_allowed());
    assert!(lb.check(&state, 5_000 * MS, 1).unwrap().is_allowed());
    // A reading 4 s (or 100 s) earlier drains nothing and keeps `last`.
    for back in [1_000 * MS, 0] {
        let d = lb.check(&state, back, 1).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after_nanos(), 6_000 * MS - back);
    }
    assert_eq!(
        slot(&state),
        Some(Slot {
            excess: 1_000,
            last_ms: 5_000
        })
    );
    // Admitted at an earlier reading: `last` stays at 5 000.
    let lb = bucket("1r/s burst=3");
    let state = lb.new_state();
    lb.check(&state, 5_000 * MS, 1).unwrap();
    let d = lb.check(&state, 4_000 * MS, 1).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.delay_nanos(), 1_000 * MS);
    assert_eq!(
        slot(&state),
        Some(Slot {
            excess: 1_000,
            last_ms: 5_000
        })
    );
    assert!(!lb.is_idle(&state, 4_000 * MS));
}

#[test]
fn delay_modes() {
    // nginx's blog: 5r/s burst=12 delay=8: the first request and 8 excess
    // pass at once, 4 more wait 200 ms apart, the rest are rejected.
    let lb = bucket("5r/s burst=12 delay=8");
    let state = lb.new_state();
    let delays: Vec<Option<u64>> = (0..15)
        .map(|_| {
            let d = lb.check(&state, 0, 1).unwrap();
            d.is_allowed().then(|| d.delay_nanos() / MS)
        })
        .collect();
    let mut want = vec![Some(0); 9];
    want.extend([Some(200), Some(400), Some(600), Some(800), None, None]);
    assert_eq!(delays, want);

    let lb = bucket("10r/s burst=20 nodelay");
    let state = lb.new_state();
    for _ in 0..21 {
        let d = lb.check(&state, 0, 1).unwrap();
        assert!(d.is_allowed() && d.delay_nanos() == 0);
    }
    assert!(!lb.check(&state, 0, 1).unwrap().is_allowed());
}

#[test]
fn costs_use_the_floor_and_never_exceed_capacity() {
    let lb = bucket("1r/s burst=2 nodelay");
    let state = lb.new_state();
    // A new key: cost 3 leaves 2000.
    let d = lb.check(&state, 0, 3).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 0);
    assert_eq!(
        slot(&state),
        Some(Slot {
            excess: 2_000,
            last_ms: 0
        })
    );
    // Long idle: the same as a new key, not nginx's clamp after adding.
    let d = lb.check(&state, 1_000_000 * MS, 3).unwrap();
    assert!(d.is_allowed());
    assert_eq!(slot(&state).unwrap().excess, 2_000);
    let d = lb.check(&state, 1_000_000 * MS, 1).unwrap();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after_nanos(), 1_000 * MS);
    // Cost 0 passes and records nothing.
    let before = state.load(Ordering::Relaxed);
    let d = lb.check(&state, 1_000_500 * MS, 0).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 0);
    assert_eq!(state.load(Ordering::Relaxed), before);
    assert_eq!(
        lb.check(&state, 0, 4),
        Err(CheckError::CostExceedsCapacity {
            cost: 4,
            capacity: 3
        })
    );
}

#[test]
fn idle_means_drained_to_a_new_keys_level() {
    let lb = bucket("10r/s burst=5");
    let state = lb.new_state();
    assert!(lb.is_idle(&state, 0));
    lb.check(&state, 0, 1).unwrap(); // excess 0: idle after 100 ms
    assert!(!lb.is_idle(&state, 99 * MS + 999_999));
    assert!(lb.is_idle(&state, 100 * MS));
    lb.check(&state, 0, 1).unwrap(); // 1000: idle after 200 ms
    assert_eq!(
        lb.peek(&state, 50 * MS, 0).unwrap().reset_after_nanos(),
        150 * MS
    );
    // Counting the request itself: 1500 at ms 50 drains by ms 300.
    assert_eq!(
        lb.peek(&state, 50 * MS, 1).unwrap().reset_after_nanos(),
        250 * MS
    );
    assert!(!lb.is_idle(&state, 199 * MS));
    assert!(lb.is_idle(&state, 200 * MS));
    // Idle: a request leaves as many after it as on a new key.
    assert_eq!(lb.peek(&state, 200 * MS, 1).unwrap().remaining(), 5);
    assert_eq!(lb.peek(&state, 200 * MS, 0).unwrap().remaining(), 6);
}

#[test]
fn extreme_times_stand_still_without_panicking() {
    let lb = bucket("1r/s burst=1");
    let state = lb.new_state();
    assert!(lb.check(&state, u64::MAX, 1).unwrap().is_allowed());
    assert_eq!(slot(&state).unwrap().last_ms, MAX_MS);
    let d = lb.check(&state, u64::MAX, 1).unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.reset_after_nanos(), u64::MAX);
    let d = lb.check(&state, u64::MAX, 1).unwrap();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after_nanos(), u64::MAX);
    assert!(!lb.is_idle(&state, u64::MAX));
    let fast = bucket("1/1ns");
    let state = fast.new_state();
    assert!(fast.check(&state, 0, 1).unwrap().is_allowed());
    assert!(fast.check(&state, u64::MAX, 1).unwrap().is_allowed());
}
