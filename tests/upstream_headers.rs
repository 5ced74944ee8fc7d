//! Reading what upstreams say about their limits: vendor-shaped responses
//! and hostile values.

use rategate::outbound::{HeaderError, UpstreamSignal, parse_retry_after};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

const NOW: u64 = 1_700_000_000; // Tue, 14 Nov 2023 22:13:20 GMT

#[test]
fn stripe_429_with_retry_after() {
    // Stripe's rate-limited answer: 429, a Retry-After, its own headers.
    let s = UpstreamSignal::from_pairs(
        429,
        [
            ("Content-Type", "application/json"),
            ("Request-Id", "req_123"),
            ("Stripe-Should-Retry", "true"),
            ("Retry-After", "1"),
        ],
        at(NOW),
    );
    assert!(s.is_limited());
    assert_eq!(s.retry_after(), Some(Duration::from_secs(1)));
    assert_eq!(s.remaining(), None);
    assert!(s.errors().is_empty());
}

#[test]
fn github_primary_and_secondary_limits() {
    let spent = UpstreamSignal::from_pairs(
        403,
        [
            ("X-RateLimit-Limit", "5000"),
            ("X-RateLimit-Remaining", "0"),
            ("X-RateLimit-Used", "5000"),
            ("X-RateLimit-Reset", "1700003600"),
            ("X-RateLimit-Resource", "core"),
        ],
        at(NOW),
    );
    // GitHub answers a spent primary limit with 403 and 0 remaining: a
    // limit, paused until the reset.
    assert!(spent.is_limited());
    assert_eq!(spent.remaining(), Some(0));
    assert_eq!(spent.reset_after(), Some(Duration::from_secs(3600)));
    let secondary = UpstreamSignal::from_pairs(429, [("retry-after", "60")], at(NOW));
    assert_eq!(secondary.retry_after(), Some(Duration::from_secs(60)));
    // The secondary limit may come as a 403 with Retry-After too; a 403
    // without either is a refusal of another kind.
    let secondary = UpstreamSignal::from_pairs(403, [("retry-after", "60")], at(NOW));
    assert!(secondary.is_limited());
    let forbidden = UpstreamSignal::from_pairs(403, [("x-ratelimit-remaining", "12")], at(NOW));
    assert!(!forbidden.is_limited());
    // A reset given as seconds from now (other APIs' style).
    let delta = UpstreamSignal::from_pairs(200, [("x-ratelimit-reset", "42")], at(NOW));
    assert_eq!(delta.reset_after(), Some(Duration::from_secs(42)));
}

#[test]
fn ietf_structured_fields() {
    let s = UpstreamSignal::from_pairs(
        429,
        [
            (
                "RateLimit-Policy",
                r#""burst";q=100;w=60, "daily";q=1000;w=86400"#,
            ),
            ("RateLimit", r#""burst";r=0;t=30"#),
        ],
        at(NOW),
    );
    assert_eq!(
        s.policy(),
        Some((1000, Duration::from_secs(86400))),
        "the slower policy"
    );
    assert_eq!(s.remaining(), Some(0));
    assert_eq!(s.reset_after(), Some(Duration::from_secs(30)));
    // Several limits listed: the exhausted one's reset counts.
    let s = UpstreamSignal::from_pairs(
        200,
        [("ratelimit", r#""minute";r=5;t=10, "hour";r=0;t=1200"#)],
        at(NOW),
    );
    assert_eq!(
        (s.remaining(), s.reset_after()),
        (Some(0), Some(Duration::from_secs(1200)))
    );
}

#[test]
fn ietf_older_drafts() {
    let s = UpstreamSignal::from_pairs(
        200,
        [
            ("RateLimit", "limit=100, remaining=0, reset=5"),
            ("RateLimit-Policy", "100;w=60"),
        ],
        at(NOW),
    );
    assert_eq!(s.remaining(), Some(0));
    assert_eq!(s.reset_after(), Some(Duration::from_secs(5)));
    assert_eq!(s.policy(), Some((100, Duration::from_secs(60))));
    let s = UpstreamSignal::from_pairs(
        200,
        [("RateLimit-Remaining", "3"), ("RateLimit-Reset", "7")],
        at(NOW),
    );
    assert_eq!(
        (s.remaining(), s.reset_after()),
        (Some(3), Some(Duration::from_secs(7)))
    );
}

#[test]
fn retry_after_as_an_http_date() {
    let s = UpstreamSignal::from_pairs(
        503,
        [("Retry-After", "Tue, 14 Nov 2023 22:15:20 GMT")],
        at(NOW),
    );
    assert!(s.is_limited(), "503 with Retry-After");
    assert_eq!(s.retry_after(), Some(Duration::from_secs(120)));
    assert!(!UpstreamSignal::from_pairs(503, [], at(NOW)).is_limited());
}

#[test]
fn hostile_values_are_errors_or_ignored_never_panics() {
    let now = at(NOW);
    assert_eq!(
        parse_retry_after("-5", now),
        Err(HeaderError::Negative {
            name: "retry-after"
        })
    );
    for bad in ["soon", "", "1e3", "0x10", "NaN", "inf", "+5", "5 s", "١٢"] {
        assert!(parse_retry_after(bad, now).is_err(), "{bad:?}");
    }
    // A date in the past: no wait at all.
    assert_eq!(
        parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT", now),
        Ok(Duration::ZERO)
    );
    // Huge numbers saturate (the guard then caps the pause).
    assert_eq!(
        parse_retry_after("184467440737095516150000", now).map(|d| d.as_secs()),
        Ok(u64::MAX)
    );
    // A reset in the past is no wait; negative and junk are reported.
    let s = UpstreamSignal::from_pairs(
        429,
        [
            ("x-ratelimit-reset", "1600000000"),
            ("x-ratelimit-remaining", "-1"),
            ("retry-after", "later"),
            ("ratelimit", ";;;==,,"),
            ("ratelimit-policy", r#""p";q=0;w=0"#),
        ],
        now,
    );
    assert_eq!(s.reset_after(), Some(Duration::ZERO));
    assert_eq!(s.remaining(), None);
    assert_eq!(s.retry_after(), None);
    assert_eq!(s.policy(), None);
    assert_eq!(s.errors().len(), 4, "{:?}", s.errors());
    for e in s.errors() {
        assert!(!e.to_string().is_empty());
    }
    // A huge Unix reset, beyond what SystemTime holds on some platforms.
    let s = UpstreamSignal::from_pairs(200, [("x-ratelimit-reset", "99999999999999999999")], now);
    assert!(s.reset_after().is_some() || !s.errors().is_empty());
    // Long garbage is cut in the error.
    let junk = "x".repeat(10_000);
    let s = UpstreamSignal::from_pairs(429, [("retry-after", junk.as_str())], now);
    match &s.errors()[0] {
        HeaderError::Invalid { value, .. } => assert_eq!(value.len(), 64),
        e => panic!("{e:?}"),
    }
}

#[cfg(feature = "http")]
#[test]
fn http_header_maps_plug_in() {
    use http::{HeaderMap, HeaderValue, StatusCode};
    let mut headers = HeaderMap::new();
    headers.insert("retry-after", HeaderValue::from_static("3"));
    headers.insert(
        "x-ratelimit-remaining",
        HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
    );
    let s = UpstreamSignal::from_http(StatusCode::TOO_MANY_REQUESTS, &headers, at(NOW));
    assert!(s.is_limited());
    assert_eq!(s.retry_after(), Some(Duration::from_secs(3)));
    assert_eq!(
        s.errors(),
        &[HeaderError::NotText {
            name: "x-ratelimit-remaining"
        }]
    );
}

/// Two `Retry-After` fields: the longest wait counts, whichever came last.
#[test]
fn duplicated_retry_after_takes_the_longest() {
    for pairs in [
        [("Retry-After", "120"), ("Retry-After", "1")],
        [("Retry-After", "1"), ("Retry-After", "120")],
    ] {
        let s = UpstreamSignal::from_pairs(429, pairs, at(NOW));
        assert_eq!(s.retry_after(), Some(Duration::from_secs(120)));
    }
}

/// One bad item in `RateLimit` is skipped and reported; the valid ones
/// still count.
#[test]
fn a_bad_ratelimit_item_keeps_the_others() {
    let s = UpstreamSignal::from_pairs(
        200,
        [("RateLimit", "\"a\";r=0;t=10, \"b\";r=-1;t=5")],
        at(NOW),
    );
    assert_eq!(s.remaining(), Some(0));
    assert_eq!(s.reset_after(), Some(Duration::from_secs(10)));
    assert_eq!(s.errors(), [HeaderError::Negative { name: "ratelimit" }]);
}

/// A Unix reset in milliseconds is read as milliseconds, not as a time
/// thousands of years away.
#[test]
fn a_unix_reset_in_milliseconds() {
    let s = UpstreamSignal::from_pairs(
        429,
        [
            ("X-RateLimit-Remaining", "0"),
            ("X-RateLimit-Reset", "1700000030000"),
        ],
        at(NOW),
    );
    assert_eq!(s.reset_after(), Some(Duration::from_secs(30)));
    let s = UpstreamSignal::from_pairs(429, [("X-RateLimit-Reset", "1700000030")], at(NOW));
    assert_eq!(s.reset_after(), Some(Duration::from_secs(30)));
}
