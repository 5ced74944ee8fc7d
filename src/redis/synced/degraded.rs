//! Which Redis Cluster slots a synced limiter could not sync: a dead master
//! degrades the keys it serves, not every key of the limiter.

use super::store::key_slot;
use crate::redis::key::encode_tag;
use crate::sync::{AtomicU64, Ordering};

const SLOTS: usize = 16_384;
const WORDS: usize = SLOTS / 64;

/// One bit per Cluster slot (a single server sets or clears them all),
/// written by the sync (one at a time, under its lock) and read by checks.
#[derive(Debug)]
pub(crate) struct DegradedSlots {
    bits: Box<[AtomicU64]>,
    /// How many slots are set: checks skip the slot lookup while it is 0.
    count: AtomicU64,
}

impl Default for DegradedSlots {
    fn default() -> Self {
        DegradedSlots {
            bits: (0..WORDS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
        }
    }
}

impl DegradedSlots {
    /// Marks the slots `start..=end` degraded or healthy.
    pub(crate) fn set(&self, (start, end): (u16, u16), degraded: bool) {
        for slot in usize::from(start)..=usize::from(end).min(SLOTS - 1) {
            let bit = 1u64 << (slot % 64);
            // Relaxed: a hint for checks (see `is_degraded`); the sync is
            // the only writer.
            let word = &self.bits[slot / 64];
            let was = word.load(Ordering::Relaxed) & bit != 0;
            if was != degraded {
                if degraded {
                    word.fetch_or(bit, Ordering::Relaxed);
                    self.count.fetch_add(1, Ordering::Relaxed);
                } else {
                    word.fetch_and(!bit, Ordering::Relaxed);
                    self.count.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Whether any slot is degraded.
    pub(crate) fn any(&self) -> bool {
        // Relaxed: a decision made a moment before a change is seen is one
        // the previous state allowed.
        self.count.load(Ordering::Relaxed) > 0
    }

    /// Whether the slot of user key `key` is degraded.
    pub(crate) fn is_degraded(&self, key: &str) -> bool {
        if !self.any() {
            return false;
        }
        // The slot of the key's tag, as Redis computes it for every Redis
        // key of this user key (the tag has no braces: it is hashed whole).
        let mut tag = String::with_capacity(key.len() + 1);
        encode_tag(key, &mut tag);
        let slot = usize::from(key_slot(tag.as_bytes()));
        // Relaxed: see `any`.
        self.bits[slot / 64].load(Ordering::Relaxed) & (1 << (slot % 64)) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_set_and_clear() {
        let d = DegradedSlots::default();
        assert!(!d.any() && !d.is_degraded("k"));
        d.set((0, 16_383), true);
        assert!(d.is_degraded("k") && d.is_degraded(""));
        d.set((0, 16_383), false);
        assert!(!d.any());
        let slot = key_slot(b"k");
        d.set((slot, slot), true);
        d.set((slot, slot), true);
        assert!(d.is_degraded("k"));
        assert!(!d.is_degraded("other-key-elsewhere"));
        d.set((slot, slot), false);
        assert!(!d.any());
    }
}
