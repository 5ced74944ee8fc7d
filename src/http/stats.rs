//! What the layer decided, counted.

use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// Counters of a [`RateLimitLayer`](super::RateLimitLayer), read with
/// [`RateLimitLayer::stats`](super::RateLimitLayer::stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayerStats {
    /// Requests the limits admitted.
    pub allowed: u64,
    /// Requests answered 429.
    pub limited: u64,
    /// In shadow mode, requests that would have been answered 429 (they
    /// were served).
    pub shadow_limited: u64,
    /// Requests no class found a key for (answered, or in shadow mode
    /// served, without a limit).
    pub no_key: u64,
    /// Requests whose cost a limit can never admit.
    pub cost_too_high: u64,
    /// Requests no rule applied to (served untouched).
    pub unlimited: u64,
}

/// The layer's counters, one set per stripe: every request adds to one
/// counter, and a single set would be one cache line written by every
/// request on every core. Each thread adds to its own stripe (the thread
/// index [`Sharded`](crate::Sharded) shards by, modulo the stripes), on a
/// line of its own; [`snapshot`](StripedCounters::snapshot) sums them.
#[derive(Debug, Default)]
pub(crate) struct StripedCounters {
    stripes: [CachePadded<Counters>; STRIPES],
}

/// Stripes per layer: threads beyond it share stripes, round-robin.
const STRIPES: usize = 8;

impl StripedCounters {
    /// The calling thread's counters.
    #[inline]
    pub(crate) fn here(&self) -> &Counters {
        &self.stripes[crate::algorithm::home_index() % STRIPES]
    }

    /// Every stripe's counts, summed.
    pub(crate) fn snapshot(&self) -> LayerStats {
        // Relaxed: statistics, ordering nothing else.
        let sum = |counter: fn(&Counters) -> &AtomicU64| {
            self.stripes
                .iter()
                .map(|stripe| counter(stripe).load(Ordering::Relaxed))
                .sum()
        };
        LayerStats {
            allowed: sum(|c| &c.allowed),
            limited: sum(|c| &c.limited),
            shadow_limited: sum(|c| &c.shadow_limited),
            no_key: sum(|c| &c.no_key),
            cost_too_high: sum(|c| &c.cost_too_high),
            unlimited: sum(|c| &c.unlimited),
        }
    }
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
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn threads_count_on_their_own_stripes_and_the_snapshot_sums_them() {
        let counters = std::sync::Arc::new(StripedCounters::default());
        // More threads than stripes: some share one, none is lost.
        let threads: Vec<_> = (0..2 * STRIPES as u64)
            .map(|t| {
                let counters = std::sync::Arc::clone(&counters);
                std::thread::spawn(move || {
                    for _ in 0..1_000 + t {
                        Counters::bump(&counters.here().allowed);
                    }
                    Counters::bump(&counters.here().limited);
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let n = 2 * STRIPES as u64;
        let stats = counters.snapshot();
        assert_eq!(stats.allowed, 1_000 * n + n * (n - 1) / 2);
        assert_eq!(stats.limited, n);
        assert_eq!(stats.unlimited, 0);
        // Two threads on distinct stripes write distinct lines.
        let used = counters
            .stripes
            .iter()
            .filter(|stripe| stripe.limited.load(Ordering::Relaxed) > 0)
            .count();
        assert!(used > 1, "every thread counted on one stripe");
    }
}
