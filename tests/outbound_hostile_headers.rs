//! The outbound guard against hostile header values and header mixes:
//! overflowing products, spent limits without a reset, unparseable fields
//! among several limits, and faster headers after a paced schedule.
#![cfg(feature = "tokio")]

#[path = "support/outbound.rs"]
mod support;

use rategate::outbound::UpstreamSignal;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::{admit_ms, answer, guard_of, limit};
use tokio::time::Instant;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

// ---------------------------------------------------------------------
// Parsing never panics: comparisons of absurd counts and resets
// saturate.
// ---------------------------------------------------------------------

#[test]
fn huge_ratelimit_items_do_not_panic() {
    let header = "\"a\";r=99999999999999999999;t=1, \"b\";r=1;t=99999999999999999999";
    let s = UpstreamSignal::from_pairs(200, [("RateLimit", header)], at(1_700_000_000));
    // Whichever binds, parsing must return.
    assert!(s.remaining().is_some());
}

#[test]
fn huge_policy_items_do_not_panic() {
    let header = "\"a\";q=99999999999999999999;w=1, \"b\";q=1;w=99999999999999999999";
    let s = UpstreamSignal::from_pairs(200, [("RateLimit-Policy", header)], at(1_700_000_000));
    assert!(s.policy().is_some());
}

// ---------------------------------------------------------------------
// A spent limit that names no reset (`t` is optional in the IETF draft)
// binds, whatever the other limits report.
// ---------------------------------------------------------------------

#[test]
fn a_spent_limit_without_reset_still_binds() {
    let s = UpstreamSignal::from_pairs(
        200,
        [("RateLimit", "\"a\";r=0, \"b\";r=100;t=60")],
        at(1_700_000_000),
    );
    assert_eq!(s.remaining(), Some(0), "limit \"a\" is spent: {s:?}");
}

// ---------------------------------------------------------------------
// A faster pace shortens a scheduled wait, never below the configured
// rate's gap after the last admission.
// ---------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_faster_header_does_not_break_the_configured_rate_after_a_costly_call() {
    // 10/s, burst 10: paced evenly at 100 ms a unit.
    let g = guard_of(limit(10, 10));
    // 2 left for 1 s: 500 ms a request until the reset.
    g.observe(&answer(
        200,
        &[("x-ratelimit-remaining", "2"), ("x-ratelimit-reset", "1")],
    ));
    assert_eq!(admit_ms(&g, 10).await, 0);
    // Its answer: plenty left.
    g.observe(&answer(
        200,
        &[
            ("x-ratelimit-remaining", "1000"),
            ("x-ratelimit-reset", "10"),
        ],
    ));
    // Ten units went at once: at the configured 10/s the next unit is due
    // 1 s later (as it is without the first header).
    let waited = admit_ms(&g, 1).await;
    assert!(waited >= 990, "next admission after {waited} ms");
}

#[tokio::test(start_paused = true)]
async fn a_faster_header_does_not_break_the_configured_rate_between_single_calls() {
    // 10/s, burst 10: paced evenly at 100 ms a request.
    let g = guard_of(limit(10, 10));
    assert_eq!(admit_ms(&g, 1).await, 0);
    // Its answer: 1 left until a reset 150 ms away.
    g.observe(&answer(
        200,
        &[
            ("x-ratelimit-remaining", "1"),
            ("x-ratelimit-reset", "0.15"),
        ],
    ));
    assert_eq!(admit_ms(&g, 1).await, 100);
    // Its answer: plenty left (a new window).
    g.observe(&answer(
        200,
        &[
            ("x-ratelimit-remaining", "1000"),
            ("x-ratelimit-reset", "10"),
        ],
    ));
    // The configured rate: at least 100 ms between two requests.
    let waited = admit_ms(&g, 1).await;
    assert!(waited >= 99, "next admission after {waited} ms");
}

// ---------------------------------------------------------------------
// Pairing by order within a family: a field that does not parse keeps
// its place, so no limit's remaining pairs with another's reset.
// ---------------------------------------------------------------------

#[test]
fn a_bad_reset_does_not_pair_one_limits_remaining_with_anothers_reset() {
    // A proxy's limit (4000 left, its reset broken) and the origin's (5
    // left for 1 s).
    let s = UpstreamSignal::from_pairs(
        200,
        [
            ("x-ratelimit-remaining", "4000"),
            ("x-ratelimit-reset", "soon"),
            ("x-ratelimit-remaining", "5"),
            ("x-ratelimit-reset", "1"),
        ],
        at(1_700_000_000),
    );
    assert_eq!(s.errors().len(), 1);
    let pair = (s.remaining(), s.reset_after());
    assert_ne!(
        pair,
        (Some(4000), Some(Duration::from_secs(1))),
        "the proxy's remaining paired with the origin's reset"
    );
}

#[tokio::test(start_paused = true)]
async fn a_bad_reset_does_not_let_the_guard_outrun_the_origin() {
    let g = guard_of(limit(100, 100));
    g.observe(&answer(
        200,
        &[
            ("x-ratelimit-remaining", "4000"),
            ("x-ratelimit-reset", "soon"),
            ("x-ratelimit-remaining", "5"),
            ("x-ratelimit-reset", "1"),
        ],
    ));
    // The origin has 5 left this second: no more than 5 (and a little
    // slack) should go before its reset.
    let start = Instant::now();
    let mut sent = 0;
    while start.elapsed() < Duration::from_millis(990) {
        tokio::select! {
            r = g.until_ready() => { r.unwrap(); sent += 1; }
            _ = tokio::time::sleep_until(start + Duration::from_millis(990)) => break,
        }
    }
    assert!(
        sent <= 6,
        "{sent} requests sent where the origin had 5 left"
    );
}

// ---------------------------------------------------------------------
// A 429 whose spent limit names a reset already past by the client's
// clock (clock skew with a Unix-time reset) pauses for the fallback.
// ---------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_429_with_a_past_reset_pauses_for_the_fallback() {
    let g = guard_of(limit(10, 10));
    let past = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 5;
    let past = past.to_string();
    g.observe(&answer(
        429,
        &[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", past.as_str()),
        ],
    ));
    assert_eq!(g.paused_for(), Duration::from_secs(1));
}
