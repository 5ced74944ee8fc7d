//! `UpstreamSignal` on arbitrary answers, through `from_pairs` (text) and
//! `from_http` (a `HeaderMap`, non-UTF-8 bytes included), then observed by
//! an `OutboundLimiter`: never panics; no pause and no pacing gap outlasts
//! the guard's maximum pause; the guard's rate stays a fraction in
//! `(0, 1]`.
//!
//! The input: two bytes pick the status, then lines of `name-index value`
//! (the first byte of a line picks one of the rate-limit fields, or a name
//! of the line's own), so that most lines reach a parser.

#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use libfuzzer_sys::fuzz_target;
use rategate::outbound::UpstreamSignal;
use rategate::{ManualClock, OutboundLimiter, Quota, RateLimiter, TokenBucket};
use std::time::{Duration, UNIX_EPOCH};

const NAMES: [&str; 10] = [
    "retry-after",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "ratelimit-remaining",
    "ratelimit-reset",
    "ratelimit",
    "ratelimit-policy",
    "x-rate-limit-remaining",
    "x-rate-limit-reset",
    "x-ratelimit-limit",
];
const STATUSES: [u16; 6] = [200, 429, 503, 403, 500, 204];
const MAX_PAUSE: Duration = Duration::from_secs(10);

fuzz_target!(|data: &[u8]| {
    let (status, rest) = match data {
        [a, b, rest @ ..] => (STATUSES[usize::from(*a ^ *b) % STATUSES.len()], rest),
        _ => return,
    };
    let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut pairs: Vec<(String, Vec<u8>)> = Vec::new();
    for line in rest.split(|&b| b == b'\n').take(32) {
        let Some((&pick, value)) = line.split_first() else {
            continue;
        };
        let name = match NAMES.get(usize::from(pick) % 16) {
            Some(name) => (*name).to_string(),
            None => String::from_utf8_lossy(value).chars().take(16).collect(),
        };
        pairs.push((name, value.to_vec()));
    }

    // Text: what `observe_response` reads.
    let text: Vec<(String, String)> = pairs
        .iter()
        .map(|(n, v)| (n.clone(), String::from_utf8_lossy(v).into_owned()))
        .collect();
    let from_text = UpstreamSignal::from_pairs(
        status,
        text.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        now,
    );

    // A HeaderMap: values as bytes, non-UTF-8 included.
    let mut map = HeaderMap::new();
    for (name, value) in &pairs {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            map.append(name, value);
        }
    }
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let from_map = UpstreamSignal::from_http(status, &map, now);

    for signal in [&from_text, &from_map] {
        let clock = ManualClock::new();
        let quota = Quota::per_second(100).unwrap();
        let limit = RateLimiter::<TokenBucket, _>::with_clock(quota, clock.clone()).unwrap();
        let guard = OutboundLimiter::builder(limit)
            .clock(clock.clone())
            .max_pause(MAX_PAUSE)
            .build();
        for _ in 0..3 {
            guard.observe(signal);
            assert!(guard.paused_for() <= MAX_PAUSE, "{signal:?}");
            let factor = guard.stats().rate_factor;
            assert!(factor > 0.0 && factor <= 1.0, "{factor}: {signal:?}");
            clock.advance(Duration::from_millis(700));
        }
    }
});
