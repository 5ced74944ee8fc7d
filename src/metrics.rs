//! Metrics (feature `metrics`, through the `metrics` facade) and tracing
//! events (feature `tracing`). Without the features every hook here is an
//! empty inline function: nothing is compiled into the check paths.
//!
//! | name | kind | labels | when |
//! | --- | --- | --- | --- |
//! | `rategate_allowed_total` | counter | `policy` | a policy admitted a request |
//! | `rategate_denied_total` | counter | `policy` | a policy denied a request (enforced) |
//! | `rategate_shadow_denied_total` | counter | `policy` | a shadow-mode policy would have denied |
//! | `rategate_store_down_total` | counter | `source` (`fail_open`, `fail_closed`, `local_share`, `lease_unrenewed`) | Redis was unreachable and the store-down policy decided: a `RedisLimiter`'s policy; a `SyncedLimiter`'s check of a key whose last sync failed (or whose first has not succeeded), held to a local share below 1 (with the default share of 1 nothing holds a key back, and nothing is counted); a `LeasedLimiter::acquire` denied after the renewal round it made failed (on a Cluster: any node's part of that round) |
//! | `rategate_redis_seconds` | histogram | | a Redis call, success or failure: a `RedisLimiter`'s script call, a `SyncedLimiter`'s sync round, a `LeasedLimiter`'s lease round |
//! | `rategate_live_keys` | gauge | `policy` | keys held by a policy's in-memory tiers, set by `PolicyLimiter::record_live_keys` |
//!
//! Tracing: a `debug` event (target `rategate`) per denial with the policy
//! and key, a `trace` event per shadow denial, a `warn` event per Redis
//! failure with the error.

/// A policy's decision: the allowed / denied / shadow-denied counters and a
/// denial event.
#[cfg(feature = "serde")]
#[inline]
#[allow(unused_variables)]
pub(crate) fn policy_decision(policy: &str, key: &str, allowed: bool, shadow: bool) {
    #[cfg(feature = "metrics")]
    {
        let name = match (allowed, shadow) {
            (true, _) => "rategate_allowed_total",
            (false, false) => "rategate_denied_total",
            (false, true) => "rategate_shadow_denied_total",
        };
        metrics::counter!(name, "policy" => policy.to_owned()).increment(1);
    }
    #[cfg(feature = "tracing")]
    match (allowed, shadow) {
        (true, _) => {}
        (false, false) => tracing::debug!(target: "rategate", policy, key, "rate limit denied"),
        (false, true) => {
            tracing::trace!(target: "rategate", policy, key, "rate limit denied (shadow mode)")
        }
    }
}

/// A key's check decided by a store-down policy (`fail_open`,
/// `fail_closed`, `local_share`).
#[cfg(feature = "redis")]
#[inline]
#[allow(unused_variables)]
pub(crate) fn store_down(source: crate::redis::Source) {
    #[cfg(feature = "metrics")]
    {
        use crate::redis::Source;
        let source = match source {
            Source::FailOpen => "fail_open",
            Source::FailClosed => "fail_closed",
            Source::LocalShare => "local_share",
            Source::Redis | Source::LocalCache => return,
        };
        store_down_by(source);
    }
}

/// A decision made while Redis could not be reached, by `source` (a
/// synced limiter's `local_share`, a leased limiter's
/// `lease_unrenewed`).
#[cfg(feature = "redis")]
#[inline]
#[allow(unused_variables)]
pub(crate) fn store_down_by(source: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("rategate_store_down_total", "source" => source).increment(1);
}

/// Awaits a Redis script call, recording its latency with feature
/// `metrics`; without it, just awaits.
#[cfg(feature = "redis")]
#[inline]
pub(crate) async fn timed_redis_call<T>(call: impl std::future::Future<Output = T>) -> T {
    #[cfg(feature = "metrics")]
    let started = std::time::Instant::now();
    let output = call.await;
    #[cfg(feature = "metrics")]
    redis_latency(started.elapsed());
    output
}

/// A Redis call failed (unreachable, timed out, bad reply).
#[cfg(feature = "redis")]
#[inline]
#[allow(unused_variables)]
pub(crate) fn store_failure(error: &dyn std::fmt::Display) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "rategate", error = %error, "Redis store failure");
}

/// How long a Redis script call took.
#[cfg(all(feature = "redis", feature = "metrics"))]
#[inline]
pub(crate) fn redis_latency(elapsed: std::time::Duration) {
    metrics::histogram!("rategate_redis_seconds").record(elapsed.as_secs_f64());
}

/// The number of keys a policy holds.
#[cfg(feature = "serde")]
#[inline]
#[allow(unused_variables)]
pub(crate) fn live_keys(policy: &str, keys: usize) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("rategate_live_keys", "policy" => policy.to_owned()).set(keys as f64);
}
