//! The outbound guard under hostile and awkward input: headers that
//! report several limits, conflicting or broken fields, applications that
//! observe some answers only, costly calls, short maximum pauses, slow
//! quotas, endpoints advertising different policies, dropped waiters and
//! concurrent pauses. Each test states what a production user expects.
#![cfg(feature = "tokio")]

#[path = "support/outbound.rs"]
mod support;

use rategate::outbound::UpstreamSignal;
use rategate::policy::{AllOf, Limit};
use rategate::{OutboundLimiter, Quota, RateLimiter, TokenBucket, TokioClock};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use support::{admit_ms, answer, builder_of, guard_of, limit};
use tokio::time::Instant;

// ---------------------------------------------------------------------
// An IETF `RateLimit` field listing two limits: each remaining pairs
// with its own reset.
// ---------------------------------------------------------------------

/// `RateLimit: "hour";r=4000;t=3000, "sec";r=3;t=1` says: 4000 left for
/// 50 minutes, and 3 left this second. The signal must pair each remaining
/// with its own reset; the guard must not spread 3 requests over 50
/// minutes (one every 1000 s).
#[tokio::test(start_paused = true)]
async fn ratelimit_with_two_limits_pairs_remaining_with_its_own_reset() {
    let header = r#""hour";r=4000;t=3000, "sec";r=3;t=1"#;
    let signal = answer(200, &[("RateLimit", header)]);
    let pair = (signal.remaining(), signal.reset_after());
    assert!(
        pair == (Some(3), Some(Duration::from_secs(1)))
            || pair == (Some(4000), Some(Duration::from_secs(3000))),
        "remaining and reset from different limits: {pair:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn ratelimit_with_two_limits_does_not_stall_the_guard() {
    let g = guard_of(limit(10, 10));
    g.observe(&answer(
        200,
        &[("RateLimit", r#""hour";r=4000;t=3000, "sec";r=3;t=1"#)],
    ));
    assert_eq!(admit_ms(&g, 1).await, 0);
    // Either limit allows another request within a second or so.
    let second = admit_ms(&g, 1).await;
    assert!(second <= 2_000, "second request waited {second} ms");
}

// ---------------------------------------------------------------------
// Calls in flight are at most the admissions of the last two periods:
// an application that observes some answers only is not paused until
// the reset by a healthy `remaining`.
// ---------------------------------------------------------------------

/// 100 requests went out over 10 s (10/s), none observed; then one
/// response says 50 remain until a reset in 30 s. At most the last two
/// periods' admissions (20) can be in flight, as the throttle documents,
/// so 30 are left: the guard should pace (~1 s apart), not pause 30 s.
#[tokio::test(start_paused = true)]
async fn unobserved_old_admissions_are_not_taken_to_be_in_flight() {
    let g = guard_of(limit(10, 10));
    for _ in 0..100 {
        g.until_ready().await.unwrap();
    }
    // The last admissions' responses trickle in; the app observes one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    g.observe(&answer(
        200,
        &[("X-RateLimit-Remaining", "50"), ("X-RateLimit-Reset", "30")],
    ));
    assert_eq!(
        g.paused_for(),
        Duration::ZERO,
        "50 remaining paused the guard"
    );
    let next = admit_ms(&g, 1).await;
    assert!(next <= 2_000, "next request waited {next} ms");
}

// ---------------------------------------------------------------------
// A costly admission under a header's gap schedules the next one no
// later than the maximum pause, and spreading ends at the reset.
// ---------------------------------------------------------------------

/// An upstream says 1 left until a reset in an hour; a call of cost 1000
/// is admitted. The next call must not wait 1000 hours: every pause is
/// capped at max_pause (1 h by default), and the reset ends the spreading.
#[tokio::test(start_paused = true)]
async fn a_costly_admission_does_not_stall_past_max_pause() {
    let g = guard_of(limit(10, 1000));
    g.observe(&answer(
        200,
        &[
            ("X-RateLimit-Remaining", "1"),
            ("X-RateLimit-Reset", "3600"),
        ],
    ));
    assert_eq!(admit_ms(&g, 1000).await, 0);
    let next = tokio::time::timeout(Duration::from_secs(2 * 3600), g.until_ready()).await;
    assert!(
        next.is_ok(),
        "the next call still waits after twice max_pause (the reset was at 1 h)"
    );
}

// ---------------------------------------------------------------------
// A corrected header releases the schedule a broken one set.
// ---------------------------------------------------------------------

/// A broken `RateLimit-Policy: q=1;w=3600` sets a gap of an hour (capped);
/// one request goes. The very next response advertises 100/s again. The
/// guard should pace at its configured 10/s, not hold the next request
/// for the hour the broken header scheduled.
#[tokio::test(start_paused = true)]
async fn a_corrected_policy_releases_the_schedule_of_a_broken_one() {
    let g = guard_of(limit(10, 10));
    g.observe(&answer(200, &[("RateLimit-Policy", "\"x\";q=1;w=3600")]));
    assert_eq!(admit_ms(&g, 1).await, 0);
    tokio::time::sleep(Duration::from_millis(200)).await;
    g.observe(&answer(200, &[("RateLimit-Policy", "\"x\";q=100;w=1")]));
    let next = admit_ms(&g, 1).await;
    assert!(next <= 1_000, "next request waited {next} ms after the fix");
}

// ---------------------------------------------------------------------
// GitHub's secondary rate limit answers 403 with Retry-After: a limit.
// ---------------------------------------------------------------------

/// GitHub (for which the crate ships presets) documents: "you will
/// receive a 403 or 429 response ... If the retry-after response header
/// is present, you should not retry your request until after that many
/// seconds has elapsed." The guard pauses for it.
#[tokio::test(start_paused = true)]
async fn a_403_with_retry_after_pauses() {
    let g = guard_of(limit(10, 10));
    let signal = answer(403, &[("Retry-After", "60")]);
    g.observe(&signal);
    assert!(
        g.paused_for() >= Duration::from_secs(59),
        "403 + Retry-After: 60 paused {:?}; is_limited() = {}",
        g.paused_for(),
        signal.is_limited()
    );
}

// ---------------------------------------------------------------------
// A `RateLimit-Policy` item with a bad parameter is skipped; the items
// around it still count, in any order.
// ---------------------------------------------------------------------

#[test]
fn a_bad_policy_item_does_not_discard_the_good_ones() {
    let now = SystemTime::now();
    let a = UpstreamSignal::from_pairs(
        200,
        [(
            "RateLimit-Policy",
            r#""burst";q=abc;w=1, "day";q=1000;w=86400"#,
        )],
        now,
    );
    let b = UpstreamSignal::from_pairs(
        200,
        [(
            "RateLimit-Policy",
            r#""day";q=1000;w=86400, "burst";q=abc;w=1"#,
        )],
        now,
    );
    let day = Some((1000, Duration::from_secs(86_400)));
    assert_eq!(b.policy(), day);
    assert_eq!(a.policy(), day, "the valid item after a bad one is lost");
}

// ---------------------------------------------------------------------
// "The rate sent at" is what the guard admitted, not what it allows: a
// light client whose every request was accepted, then refused, is cut
// blind below what it sent (not by half of what it could send).
// ---------------------------------------------------------------------

/// The app sends 10/s through a 100/s guard for 3 s; the upstream takes
/// all of it, then answers one 429. It took all that was sent, so the cut
/// is blind: to 0.85 of the 10/s sent, less the margin.
#[tokio::test(start_paused = true)]
async fn a_429_to_a_light_client_that_was_never_refused_is_a_blind_cut() {
    let g = guard_of(limit(100, 100));
    for _ in 0..30 {
        g.until_ready().await.unwrap();
        g.observe(&answer(200, &[]));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    g.until_ready().await.unwrap();
    g.observe(&answer(429, &[("Retry-After", "0")]));
    let factor = g.stats().rate_factor;
    assert!(
        (0.07..=0.0875).contains(&factor),
        "one 429 after 10/s were all accepted set the rate to {factor} of 100/s"
    );
}

// ---------------------------------------------------------------------
// A 429 that names no time pauses until a reported reset only when that
// limit is spent (remaining 0); otherwise for the fallback pause.
// ---------------------------------------------------------------------

/// GitHub sends `x-ratelimit-*` of its primary (hourly) limit on every
/// answer; a 429 from a secondary limit without Retry-After still carries
/// `remaining: 4000, reset: in 50 min`. The hourly limit is not what
/// refused: GitHub says wait until the reset only when remaining is 0,
/// otherwise at least a minute: the guard pauses for its fallback.
#[tokio::test(start_paused = true)]
async fn a_429_does_not_pause_until_the_reset_of_a_limit_with_plenty_left() {
    let g = guard_of(limit(10, 10));
    g.observe(&answer(
        429,
        &[
            ("X-RateLimit-Remaining", "4000"),
            ("X-RateLimit-Reset", "3000"),
        ],
    ));
    let paused = g.paused_for();
    assert!(
        paused <= Duration::from_secs(60),
        "a 429 with 4000 remaining paused {paused:?}"
    );
}

/// The same through IETF `RateLimit`: the only item says 9000 remain until
/// a reset in a day; the 429 came from another limit.
#[tokio::test(start_paused = true)]
async fn a_429_does_not_pause_until_the_reset_of_an_unexhausted_ratelimit_item() {
    let g = guard_of(limit(10, 10));
    g.observe(&answer(429, &[("RateLimit", r#""day";r=9000;t=80000"#)]));
    let paused = g.paused_for();
    assert!(
        paused <= Duration::from_secs(60),
        "a 429 with 9000 remaining paused {paused:?}"
    );
}

// ---------------------------------------------------------------------
// Duplicated X-RateLimit fields (a proxy's per-second limit and the
// origin's hourly one, both sent) pair in order, through `observe_http`.
// ---------------------------------------------------------------------

#[cfg(feature = "http")]
#[tokio::test(start_paused = true)]
async fn duplicated_x_ratelimit_fields_do_not_stall_the_guard() {
    use http::{HeaderMap, HeaderValue, StatusCode};
    let g = guard_of(limit(10, 10));
    let mut h = HeaderMap::new();
    // Proxy: 5 left this second. Origin: 4000 left for 50 minutes.
    h.append("x-ratelimit-remaining", HeaderValue::from_static("5"));
    h.append("x-ratelimit-reset", HeaderValue::from_static("1"));
    h.append("x-ratelimit-remaining", HeaderValue::from_static("4000"));
    h.append("x-ratelimit-reset", HeaderValue::from_static("3000"));
    let signal = g.observe_http(StatusCode::OK, &h);
    assert_eq!(admit_ms(&g, 1).await, 0);
    let second = admit_ms(&g, 1).await;
    assert!(
        second <= 2_000,
        "second request waited {second} ms; signal {:?} / {:?}",
        signal.remaining(),
        signal.reset_after()
    );
}

// ---------------------------------------------------------------------
// Waiters dropped during a pause leave no trace.
// ---------------------------------------------------------------------

/// waiters dropped by a timeout during a pause leave no trace.
#[tokio::test(start_paused = true)]
async fn dropped_waiters_do_not_block_the_queue() {
    let g = Arc::new(guard_of(limit(10, 10)));
    g.observe(&answer(429, &[("Retry-After", "5")]));
    let start = Instant::now();
    for _ in 0..4 {
        let r = tokio::time::timeout(Duration::from_secs(1), g.until_ready()).await;
        assert!(r.is_err());
    }
    g.until_ready().await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(5));
}

// ---------------------------------------------------------------------
// A maximum pause shorter than the configured pacing gap caps what
// headers impose only: observing answers keeps the configured pace, and
// a 429's cut slows the guard down.
// ---------------------------------------------------------------------

fn per_minute(n: u32) -> Arc<RateLimiter<TokenBucket, TokioClock>> {
    let q = Quota::with_period(n, Duration::from_secs(60)).unwrap();
    Arc::new(RateLimiter::with_clock(q, TokioClock::new()).unwrap())
}

/// 10 per minute, evenly paced (one every 6 s), max_pause(5 s): the
/// user caps how long a header may stall the client. The pacing at the
/// configured rate must not change because a plain 200 was observed, and
/// a 429 (cut to 0.85: one every ~7 s) must slow the guard down.
#[tokio::test(start_paused = true)]
async fn a_short_max_pause_does_not_undo_pacing_or_a_429_cut() {
    let g = builder_of(per_minute(10))
        .max_pause(Duration::from_secs(5))
        .build();
    assert_eq!(admit_ms(&g, 1).await, 0);
    let unobserved = admit_ms(&g, 1).await;
    g.observe(&answer(200, &[]));
    admit_ms(&g, 1).await; // scheduled before the observe
    let observed = admit_ms(&g, 1).await;
    g.observe(&answer(429, &[("Retry-After", "0")]));
    let factor = g.stats().rate_factor;
    admit_ms(&g, 1).await;
    let after_429 = admit_ms(&g, 1).await;
    assert!(
        observed == unobserved && after_429 > unobserved,
        "gap before any observe {unobserved} ms, after an empty 200 {observed} ms, \
         after a 429 (factor {factor}) {after_429} ms"
    );
}

// ---------------------------------------------------------------------
// A pause recorded while threads are admitting stops them.
// ---------------------------------------------------------------------

/// four threads admit through a bursty 1000/s guard; a 429 with
/// Retry-After 0.3 s is observed. No admission comes after observe
/// returned (plus 20 ms of scheduling slack) and before the pause ends.
#[test]
fn a_pause_stops_concurrent_blocking_waiters() {
    use std::time::Instant as StdInstant;
    let q = Quota::per_second(1000).unwrap();
    let l = Arc::new(RateLimiter::<TokenBucket>::new(q).unwrap());
    let g = Arc::new(
        OutboundLimiter::builder(AllOf::new([l as Arc<dyn Limit>]))
            .bursts(true)
            .build(),
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (g, stop) = (Arc::clone(&g), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut t = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    g.wait().unwrap();
                    t.push(StdInstant::now());
                }
                t
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    g.observe(&answer(429, &[("Retry-After", "0.3")]));
    let t0 = StdInstant::now();
    std::thread::sleep(Duration::from_millis(400));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let all: Vec<_> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let bad: Vec<_> = all
        .iter()
        .filter(|&&t| t > t0 + Duration::from_millis(20) && t < t0 + Duration::from_millis(280))
        .collect();
    assert!(bad.is_empty(), "{} admissions during the pause", bad.len());
    assert!(all.iter().any(|&t| t > t0 + Duration::from_millis(300)));
}

// ---------------------------------------------------------------------
// A quota slower than one request per `every` (1 s) is measured over a
// period of at least four requests: a guard whose every answer was
// accepted is cut blind on a 429, not read as "the upstream took
// nothing".
// ---------------------------------------------------------------------

/// 10 per minute, paced evenly (6 s), every answer observed and accepted
/// for two minutes, then one 429. It took all that was sent: the
/// documented cut is blind (0.85 of the rate, less one request per
/// period: ~0.75); and "one 429 never cuts the rate by more than half".
#[tokio::test(start_paused = true)]
async fn a_429_at_a_per_minute_quota_is_not_read_as_nothing_accepted() {
    let g = guard_of(per_minute(10));
    for _ in 0..20 {
        g.until_ready().await.unwrap();
        g.observe(&answer(200, &[]));
    }
    g.until_ready().await.unwrap();
    g.observe(&answer(429, &[("Retry-After", "0")]));
    let first = g.stats().rate_factor;
    // Everything sent at the new rate is accepted for a minute, then
    // another 429.
    for _ in 0..10 {
        g.until_ready().await.unwrap();
        g.observe(&answer(200, &[]));
    }
    g.until_ready().await.unwrap();
    g.observe(&answer(429, &[("Retry-After", "0")]));
    let second = g.stats().rate_factor;
    assert!(
        first >= 0.7 && second >= 0.5,
        "factor after one 429: {first}, after a second one a minute later: {second}"
    );
}

// ---------------------------------------------------------------------
// Endpoints behind one guard that advertise different policies, answers
// alternating, do not undo the rate a 429 set: a changed policy ends a
// hold only when two answers in a row carry it.
// ---------------------------------------------------------------------

/// Two endpoints advertise 100/s and 50/s (both above the guard's 10/s),
/// answers alternate. The upstream says 429 (Retry-After 0): the guard
/// must hold a lower rate for a while, not return to the full rate on the
/// next 200.
#[tokio::test(start_paused = true)]
async fn alternating_policies_do_not_erase_a_429_cut() {
    let g = guard_of(limit(10, 10));
    let a = [("RateLimit-Policy", "\"a\";q=100;w=1")];
    let b = [("RateLimit-Policy", "\"b\";q=50;w=1")];
    for i in 0..40 {
        g.until_ready().await.unwrap();
        g.observe(&answer(200, if i % 2 == 0 { &a } else { &b }));
    }
    g.until_ready().await.unwrap();
    g.observe(&answer(429, &[("Retry-After", "0")]));
    let cut = g.stats().rate_factor;
    g.until_ready().await.unwrap();
    g.observe(&answer(200, &a));
    g.until_ready().await.unwrap();
    g.observe(&answer(200, &b));
    let after = g.stats().rate_factor;
    assert!(
        cut < 1.0 && after <= cut + 0.05,
        "cut to {cut} by the 429, back to {after} two 200s later"
    );
}

// ---------------------------------------------------------------------
// Adaptation settings at their extremes.
// ---------------------------------------------------------------------

/// A measurement period near the largest a `u64` of nanoseconds holds: a
/// second blind 429 one period after the first must not overflow the
/// window it is compared against (a panic in debug builds, a wrong cut in
/// release ones).
#[test]
fn a_huge_adaptation_period_does_not_overflow() {
    use rategate::ManualClock;
    use rategate::outbound::Adaptation;
    let clock = ManualClock::new();
    let every = Duration::from_nanos(u64::MAX / 3 + 1);
    let limit =
        RateLimiter::<TokenBucket, _>::with_clock(Quota::per_second(10).unwrap(), clock.clone())
            .unwrap();
    let g = OutboundLimiter::builder(limit)
        .clock(clock.clone())
        .adaptation(Adaptation {
            every,
            ..Adaptation::default()
        })
        .max_pause(Duration::from_secs(1))
        .build();
    g.observe(&answer(429, &[]));
    clock.advance(every);
    g.observe(&answer(429, &[]));
    let factor = g.stats().rate_factor;
    assert!(factor > 0.0 && factor < 1.0, "{factor}");
}
