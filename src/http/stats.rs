//! What the layer decided, counted.

use crate::sync::{AtomicU64, Ordering};

/// Counters of a [`RateLimitLayer`](super::RateLimitLayer), read with
/// [`RateLimitLayer::stats`](super::RateLimitLayer::stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayerStats {
    /// Requests the limits admitted.
    pub allowed: u64,
    /// Requests answered 429.
    pub limited: u64,
    /// In shadow mode, requests that would have been answered 429 (they
    /// were served).
    pub shadow_limited: u64,
    /// Requests no tier found a key for (answered, or in shadow mode
    /// served, without a limit).
    pub no_key: u64,
    /// Requests whose cost a limit can never admit.
    pub cost_too_high: u64,
    /// Requests no rule applied to (served untouched).
    pub unlimited: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) allowed: AtomicU64,
    pub(crate) limited: AtomicU64,
    pub(crate) shadow_limited: AtomicU64,
    pub(crate) no_key: AtomicU64,
    pub(crate) cost_too_high: AtomicU64,
    pub(crate) unlimited: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        // Relaxed: statistics, ordering nothing else.
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> LayerStats {
        let read = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LayerStats {
            allowed: read(&self.allowed),
            limited: read(&self.limited),
            shadow_limited: read(&self.shadow_limited),
            no_key: read(&self.no_key),
            cost_too_high: read(&self.cost_too_high),
            unlimited: read(&self.unlimited),
        }
    }
}
