//! The outbound guard under paused tokio time: pauses, adaptation, policy
//! caps, several limits, deadlines.
#![cfg(feature = "tokio")]

use rategate::outbound::{Adaptation, UpstreamSignal};
use rategate::policy::{AllOf, Limit};
use rategate::{OutboundLimiter, Quota, RateLimiter, TokenBucket, TokioClock, WaitError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

fn limit(per_sec: u32, burst: u32) -> Arc<RateLimiter<TokenBucket, TokioClock>> {
    let quota = Quota::per_second(per_sec).unwrap().burst(burst).unwrap();
    Arc::new(RateLimiter::with_clock(quota, TokioClock::new()).unwrap())
}

fn guard(limits: Vec<Arc<dyn Limit>>) -> Arc<OutboundLimiter<TokioClock>> {
    Arc::new(OutboundLimiter::with_clock(
        AllOf::new(limits),
        TokioClock::new(),
    ))
}

/// A guard that lets the limits' burst go at once.
fn bursty(limits: Vec<Arc<dyn Limit>>) -> Arc<OutboundLimiter<TokioClock>> {
    Arc::new(
        OutboundLimiter::builder(AllOf::new(limits))
            .clock(TokioClock::new())
            .bursts(true)
            .build(),
    )
}

fn answer(status: u16, headers: &[(&str, &str)]) -> UpstreamSignal {
    UpstreamSignal::from_pairs(status, headers.iter().copied(), SystemTime::now())
}

/// Admission times (ms from now) of `n` waiters spawned in order.
async fn admissions(guard: &Arc<OutboundLimiter<TokioClock>>, n: usize) -> Vec<u64> {
    let start = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let guard = Arc::clone(guard);
            tokio::spawn(async move {
                guard.until_ready().await.unwrap();
                start.elapsed().as_millis() as u64
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_429_pauses_every_waiter_until_retry_after() {
    let g = guard(vec![limit(100, 100)]);
    g.observe(&answer(429, &[("Retry-After", "2")]));
    assert_eq!(g.paused_for(), Duration::from_secs(2));
    let times = admissions(&g, 5).await;
    // None before the pause ends; after it, paced at 85% of the rate
    // (the 429 came with nothing measured yet): 11.8 ms apart, the first
    // gap 1 ms short (the pacing credits up to 1 ms of timer lateness).
    let gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(times[0], 2000);
    assert!(gaps.iter().all(|&g| (10..=12).contains(&g)), "{times:?}");
    assert_eq!(g.stats().limited, 1);
}

#[tokio::test(start_paused = true)]
async fn zero_remaining_pauses_until_the_reset() {
    let g = bursty(vec![limit(100, 100)]);
    g.observe(&answer(
        200,
        &[("X-RateLimit-Remaining", "0"), ("X-RateLimit-Reset", "3")],
    ));
    assert_eq!(admissions(&g, 2).await, vec![3000, 3000]);
    // Remaining above zero pauses nothing.
    g.observe(&answer(
        200,
        &[("X-RateLimit-Remaining", "7"), ("X-RateLimit-Reset", "3")],
    ));
    assert_eq!(admissions(&g, 1).await, vec![0]);
}

#[tokio::test(start_paused = true)]
async fn a_429_without_a_time_uses_the_fallback_pause() {
    let g = Arc::new(
        OutboundLimiter::builder(limit(100, 100))
            .clock(TokioClock::new())
            .fallback_pause(Duration::from_millis(750))
            .build(),
    );
    g.observe(&answer(429, &[]));
    assert_eq!(admissions(&g, 1).await, vec![750]);
}

#[tokio::test(start_paused = true)]
async fn requests_are_spread_evenly_unless_bursts_are_allowed() {
    let g = guard(vec![limit(100, 100)]);
    assert_eq!(admissions(&g, 4).await, vec![0, 10, 20, 30]);
    let g = bursty(vec![limit(100, 100)]);
    assert_eq!(admissions(&g, 4).await, vec![0, 0, 0, 0]);
}

#[tokio::test(start_paused = true)]
async fn a_429_paces_just_below_the_rate_the_upstream_took() {
    let g = guard(vec![limit(100, 100)]);
    // The upstream took 62.5 a second (one every 16 ms) for a second and
    // a half, then said 429.
    for _ in 0..94 {
        tokio::time::sleep(Duration::from_millis(16)).await;
        g.observe(&answer(200, &[]));
    }
    g.observe(&answer(429, &[("Retry-After", "0")]));
    let factor = g.stats().rate_factor;
    assert!((0.6..0.63).contains(&factor), "{factor}");
    // A second 429 in the same second counts once.
    g.observe(&answer(429, &[("Retry-After", "0")]));
    assert_eq!(g.stats().rate_factor, factor);
    // Paced at that rate: 16.2 ms apart.
    let t = admissions(&g, 5).await;
    let gaps: Vec<u64> = t.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().all(|&g| (15..=17).contains(&g)), "{t:?}");
}

#[tokio::test(start_paused = true)]
async fn a_429_after_taking_all_that_was_sent_cuts_by_the_decrease() {
    let g = guard(vec![limit(100, 100)]);
    g.observe(&answer(429, &[("Retry-After", "0")]));
    // 85% of the rate, less the margin's one request per period.
    let factor = g.stats().rate_factor;
    assert!((0.84..=0.85).contains(&factor), "{factor}");
}

#[tokio::test(start_paused = true)]
async fn remaining_is_spread_until_the_reset_less_what_is_in_flight() {
    let g = guard(vec![limit(100, 100)]);
    // Two admitted, one answered: one still in flight.
    admissions(&g, 2).await;
    g.observe(&answer(
        200,
        &[("X-RateLimit-Remaining", "11"), ("X-RateLimit-Reset", "1")],
    ));
    // 10 left for the second: 100 ms apart.
    let t = admissions(&g, 3).await;
    let gaps: Vec<u64> = t.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().all(|&g| (99..=101).contains(&g)), "{t:?}");
}

#[tokio::test(start_paused = true)]
async fn a_503_pauses_without_lowering_the_rate() {
    let g = guard(vec![limit(100, 100)]);
    g.observe(&answer(503, &[("Retry-After", "2")]));
    assert_eq!(g.paused_for(), Duration::from_secs(2));
    assert_eq!(g.stats().rate_factor, 1.0);
}

#[tokio::test(start_paused = true)]
async fn an_advertised_slower_policy_caps_the_rate() {
    let g = guard(vec![limit(100, 100)]);
    g.observe(&answer(
        200,
        &[("RateLimit-Policy", r#""default";q=10;w=1"#)],
    ));
    // Paced 1% below the policy (a late timer adds up to a millisecond).
    let t = admissions(&g, 4).await;
    let gaps: Vec<u64> = t.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().all(|&g| (101..=103).contains(&g)), "{t:?}");
}

#[tokio::test(start_paused = true)]
async fn several_limits_all_must_admit() {
    let read = limit(10, 1);
    let endpoint = limit(2, 1);
    let g = guard(vec![read.clone() as Arc<dyn Limit>, endpoint.clone()]);
    let t = admissions(&g, 4).await;
    assert_eq!(t, vec![0, 500, 1000, 1500], "the endpoint's 2/s binds");
    // The read limit was charged 4 times, not once per denial: it is full
    // again 100 ms after the last admission.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        read.peek().remaining(),
        0,
        "a burst of 1: peek would take the only slot"
    );
    assert!(read.peek().is_allowed());
    // About one check per admission, plus one denial learning each slot.
    let stats = g.stats();
    assert_eq!(stats.admitted, 4);
    assert!(stats.checks <= 2 * stats.admitted, "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn a_pause_past_the_deadline_fails_at_once() {
    let g = guard(vec![limit(100, 100)]);
    g.observe(&answer(429, &[("Retry-After", "10")]));
    let start = Instant::now();
    let err = g
        .until_n_ready_by(1, start + Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        WaitError::DeadlineExceeded {
            ready_in: Duration::from_secs(10)
        }
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(g.stats().checks, 0, "the limits were not even consulted");
    let err = g.until_n_ready(101).await.unwrap_err();
    assert!(matches!(
        err,
        WaitError::CostExceedsCapacity {
            cost: 101,
            capacity: 100
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn hostile_pauses_are_capped() {
    let g = Arc::new(
        OutboundLimiter::builder(limit(100, 100))
            .clock(TokioClock::new())
            .max_pause(Duration::from_secs(30))
            .build(),
    );
    g.observe(&answer(429, &[("Retry-After", "99999999999999999999999")]));
    assert_eq!(g.paused_for(), Duration::from_secs(30));
    // The default cap is one hour.
    let g = guard(vec![limit(100, 100)]);
    g.observe(&answer(
        200,
        &[
            ("X-RateLimit-Remaining", "0"),
            ("X-RateLimit-Reset", "999999999"),
        ],
    ));
    assert_eq!(g.paused_for(), Duration::from_secs(3600));
    // Junk pauses nothing.
    let g = guard(vec![limit(100, 100)]);
    let s = answer(200, &[("Retry-After", "-1"), ("X-RateLimit-Reset", "soon")]);
    g.observe(&s);
    assert_eq!(g.paused_for(), Duration::ZERO);
    assert_eq!(s.errors().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn adaptation_off_only_pauses() {
    let g = Arc::new(
        OutboundLimiter::builder(limit(100, 100))
            .clock(TokioClock::new())
            .adaptation(Adaptation::OFF)
            .bursts(true)
            .build(),
    );
    g.observe(&answer(429, &[("Retry-After", "1")]));
    assert_eq!(g.stats().rate_factor, 1.0);
    assert_eq!(admissions(&g, 3).await, vec![1000; 3]);
}

/// A guard from a policy file: every named policy limits at once, with the
/// algorithm each names (a token bucket of 2/s and a fixed window of 3 per
/// minute: spread evenly at 2/s, the fourth when the minute's window
/// ends).
#[cfg(feature = "serde")]
#[tokio::test(start_paused = true)]
async fn a_guard_from_a_policy_file_waits_under_every_named_policy() {
    use rategate::policy::config::PolicyFile;
    let file = PolicyFile::from_toml(
        r#"
        [policies.per_second]
        quota = "2/s"
        [policies.per_minute]
        algorithm = "fixed_window"
        quota = "3/m"
        "#,
    )
    .unwrap();
    let guard = Arc::new(
        OutboundLimiter::from_policies_with_clock(
            &file,
            &["per_second", "per_minute"],
            TokioClock::new(),
        )
        .unwrap(),
    );
    let times = admissions(&guard, 4).await;
    assert_eq!(&times[..3], &[0, 500, 1000]);
    // The fixed window's edge is a whole minute of the clock's time.
    assert!((59_000..=60_000).contains(&times[3]), "{times:?}");
    // Nothing is charged but admissions: the new minute's window holds the
    // fourth admission alone, whatever the waits before it tried.
    let per_minute = &guard.limits().members()[1];
    assert_eq!(per_minute.peek_n(0).unwrap().remaining(), 2);
}

/// Policies that cannot be one limit for everything are refused, naming
/// the policy and the field.
#[cfg(feature = "serde")]
#[test]
fn a_guard_refuses_policies_it_cannot_apply() {
    use rategate::policy::config::PolicyFile;
    let file = PolicyFile::from_toml(
        r#"
        [policies.ok]
        quota = "2/s"
        [policies.by_ip]
        quota = "2/s"
        key = "ip"
        [policies.tiered]
        quota = "2/s"
        [policies.tiered.tiers]
        gold = "10/s"
        [policies.remote]
        quota = "2/s"
        backend = { kind = "redis", url = "redis://127.0.0.1:1/" }
        [policies.dry]
        quota = "2/s"
        shadow = true
        "#,
    )
    .unwrap();
    let error = |names: &[&str]| OutboundLimiter::from_policies(&file, names).unwrap_err();
    for (name, field) in [
        ("by_ip", "key"),
        ("tiered", "tiers"),
        ("remote", "backend"),
        ("dry", "shadow"),
    ] {
        let e = error(&["ok", name]);
        assert_eq!(
            (e.policy(), e.field_name()),
            (Some(name), Some(field)),
            "{e}"
        );
    }
    let e = error(&["ok", "missing"]);
    assert_eq!((e.policy(), e.field_name()), (Some("missing"), None));
    assert!(e.to_string().contains("no policy of this name"), "{e}");
    assert!(error(&[]).to_string().contains("at least one policy"));
    assert!(OutboundLimiter::from_policies(&file, &["ok"]).is_ok());
}

/// An advertised policy's window paces the next call by at most the
/// maximum pause, however long the window.
#[tokio::test(start_paused = true)]
async fn an_advertised_policy_paces_by_at_most_the_maximum_pause() {
    let g = Arc::new(
        OutboundLimiter::builder(limit(100, 100))
            .clock(TokioClock::new())
            .max_pause(Duration::from_secs(2))
            .build(),
    );
    g.observe(&answer(
        200,
        &[("RateLimit-Policy", r#""p";q=1;w=99999999999999999999"#)],
    ));
    let t = admissions(&g, 2).await;
    assert_eq!(t, vec![0, 2000]);
}

/// One limit needs no `AllOf`: the guard takes a limiter, or an `Arc` of
/// one shared with other code, and waits under it.
#[tokio::test(start_paused = true)]
async fn a_guard_over_one_limiter_needs_no_all_of() {
    let shared = limit(2, 1);
    let guard = OutboundLimiter::with_clock(Arc::clone(&shared), TokioClock::new());
    let start = Instant::now();
    for _ in 0..3 {
        guard.until_ready().await.unwrap();
    }
    // Three calls at 2/s with a burst of 1: the third waits a whole second.
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert!(!shared.peek_n(1).unwrap().is_allowed());
}

/// The guard paces at the limit a burst meets first (the shortest period)
/// and spreads calls evenly only over periods of a minute or less.
#[tokio::test(start_paused = true)]
async fn pacing_follows_the_shortest_limit_and_hourly_quotas_burst() {
    let daily = Quota::with_period(100_000, Duration::from_secs(86_400)).unwrap();
    let daily =
        Arc::new(RateLimiter::<TokenBucket, _>::with_clock(daily, TokioClock::new()).unwrap());
    let g = guard(vec![limit(100, 100), daily]);
    assert_eq!(admissions(&g, 3).await, vec![0, 10, 20]);
    let hourly = Quota::with_period(5000, Duration::from_secs(3600)).unwrap();
    let hourly =
        Arc::new(RateLimiter::<TokenBucket, _>::with_clock(hourly, TokioClock::new()).unwrap());
    let g = guard(vec![hourly]);
    assert_eq!(admissions(&g, 3).await, vec![0, 0, 0]);
}
