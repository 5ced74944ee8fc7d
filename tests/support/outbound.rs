//! Outbound guards and answers on tokio's paused time, shared by the
//! outbound tests.
#![allow(dead_code)]

use rategate::outbound::{OutboundLimiterBuilder, UpstreamSignal};
use rategate::{OutboundLimiter, Quota, RateLimiter, TokenBucket, TokioClock};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::time::Instant;

/// A token bucket of `per_sec` with `burst`, on tokio's clock.
pub fn limit(per_sec: u32, burst: u32) -> Arc<RateLimiter<TokenBucket, TokioClock>> {
    let quota = Quota::per_second(per_sec).unwrap().burst(burst).unwrap();
    Arc::new(RateLimiter::with_clock(quota, TokioClock::new()).unwrap())
}

/// A guard over one limit, on tokio's clock.
pub fn guard_of(l: Arc<RateLimiter<TokenBucket, TokioClock>>) -> OutboundLimiter<TokioClock> {
    builder_of(l).build()
}

/// The settings of a guard over `l` on a [`TokioClock`].
pub fn builder_of(
    l: Arc<RateLimiter<TokenBucket, TokioClock>>,
) -> OutboundLimiterBuilder<TokioClock> {
    OutboundLimiter::builder(l).clock(TokioClock::new())
}

/// An answer with `status` and `headers`, arriving now.
pub fn answer(status: u16, headers: &[(&str, &str)]) -> UpstreamSignal {
    UpstreamSignal::from_pairs(status, headers.iter().copied(), SystemTime::now())
}

/// Milliseconds an admission of `cost` takes from now.
pub async fn admit_ms(g: &OutboundLimiter<TokioClock>, cost: u32) -> u64 {
    let start = Instant::now();
    g.until_n_ready(cost).await.unwrap();
    start.elapsed().as_millis() as u64
}
