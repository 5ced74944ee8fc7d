//! Admissions counted per time bucket without a lock: what the guard sent
//! recently, for the calls still in flight and the rate sent at.

use crate::sync::{AtomicU64, Ordering};

/// Buckets of a quarter period each: two periods.
const BUCKETS: u64 = 8;
/// Low bits of a slot hold the count; the high bits the bucket's index.
const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// Admissions per quarter period over the last two periods, each slot an
/// `AtomicU64` packing the bucket's index (high bits) with its count (low
/// 24 bits, saturating): a slot whose index is not the bucket's counts 0.
#[derive(Debug)]
pub(crate) struct SentMeter {
    width: u64,
    slots: [AtomicU64; BUCKETS as usize],
    /// The first admission's time plus one (0: none yet).
    first: AtomicU64,
}

impl SentMeter {
    /// A meter of buckets of `every / 4` (at least 1 ns).
    pub(crate) fn new(every: u64) -> Self {
        SentMeter {
            width: (every / 4).max(1),
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
            first: AtomicU64::new(0),
        }
    }

    /// The tag of bucket `index`: the index without the count's bits.
    fn tag(index: u64) -> u64 {
        index << COUNT_BITS >> COUNT_BITS
    }

    /// Counts `n` admissions at `now`.
    pub(crate) fn record(&self, now: u64, n: u64) {
        // Relaxed: see below; only the first admission's time is kept, and
        // a load keeps the compare-exchange off every later admission.
        if self.first.load(Ordering::Relaxed) == 0 {
            let _ = self.first.compare_exchange(
                0,
                now.saturating_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        let index = now / self.width;
        let tag = Self::tag(index);
        let slot = &self.slots[(index % BUCKETS) as usize];
        // Relaxed: an estimate; no other memory is published through it, and
        // the compare-exchange alone keeps the tag and count consistent.
        let mut current = slot.load(Ordering::Relaxed);
        loop {
            let next = if current >> COUNT_BITS == tag {
                let count = ((current & COUNT_MASK) + n).min(COUNT_MASK);
                (tag << COUNT_BITS) | count
            } else {
                (tag << COUNT_BITS) | n.min(COUNT_MASK)
            };
            match slot.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// Admissions over the last `buckets` quarter periods up to `now`.
    pub(crate) fn recent(&self, now: u64, buckets: u64) -> u64 {
        let index = now / self.width;
        (0..buckets.min(BUCKETS))
            .filter_map(|k| index.checked_sub(k))
            .map(|i| {
                // Relaxed: see `record`.
                let slot = self.slots[(i % BUCKETS) as usize].load(Ordering::Relaxed);
                if slot >> COUNT_BITS == Self::tag(i) {
                    slot & COUNT_MASK
                } else {
                    0
                }
            })
            .sum()
    }

    /// Admissions per second over the last period (over the time since
    /// the first admission, while that is shorter); 0 before any.
    pub(crate) fn per_second(&self, now: u64) -> f64 {
        // Relaxed: see `record`.
        let first = self.first.load(Ordering::Relaxed);
        if first == 0 {
            return 0.0;
        }
        let index = now / self.width;
        let start = index.saturating_sub(3) * self.width;
        let span = now.saturating_sub(start.max(first - 1)).max(1_000);
        self.recent(now, 4) as f64 * 1e9 / span as f64
    }
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn counts_the_last_two_periods_only() {
        let m = SentMeter::new(1000); // buckets of 250
        m.record(0, 5);
        m.record(300, 2);
        assert_eq!(m.recent(300, 8), 7);
        assert_eq!(m.recent(300, 1), 2);
        // Two periods later the first bucket has left the window.
        assert_eq!(m.recent(2000, 8), 2);
        assert_eq!(m.recent(4000, 8), 0);
        // A slot reused by a later bucket starts from zero.
        m.record(2000, 1);
        assert_eq!(m.recent(2000, 1), 1);
        // 7 over the first 500 ns since the first admission at 0.
        let m = SentMeter::new(1_000_000_000);
        m.record(0, 5);
        m.record(400_000_000, 2);
        assert!((m.per_second(500_000_000) - 14.0).abs() < 1e-9);
    }

    #[test]
    fn counts_saturate() {
        let m = SentMeter::new(1000);
        m.record(0, COUNT_MASK);
        m.record(0, 5);
        assert_eq!(m.recent(0, 1), COUNT_MASK);
    }
}
