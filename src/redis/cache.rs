//! The local over-limit cache of a [`RedisLimiter`](super::RedisLimiter):
//! keys Redis denied, answered locally until the denial can have changed.
//!
//! # What a cached denial means
//!
//! Redis denied `cost` for a key with `retry_after = r` at local time `t`:
//! that cost cannot pass before `t + r`. Every algorithm's retry time grows
//! with the cost (a larger request needs at least as much room), and until
//! then other nodes can only use room up, so **every cost at or above the
//! denied one is denied until `t + r`**, and nothing is said of smaller
//! costs. Each key keeps one such pair. A new denial replaces it unless the
//! old pair already covers it (an older pair with a smaller or equal cost
//! and a later or equal deadline); two pairs that do not cover each other
//! are both true, and the newer is kept. So a cached answer is always one
//! Redis gave: the cache never denies what Redis would admit.
//!
//! # Bounded work per call
//!
//! Lookups touch one map shard. Insertions (only after a Redis denial) also
//! push the deadline on a min-heap and pop what has expired: every pushed
//! deadline is popped once, so expiry is `O(log n)` amortised per insertion.
//! A full cache (as many heap entries as its capacity) makes room by
//! dropping the denial that ends soonest: one pop per insertion, never a
//! scan, whatever the key churn (a client rotating keys pays nothing more).
//! Every cached key has its current deadline in the heap, so the map never
//! holds more keys than the capacity.

use crate::sync::Mutex;
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A cached denial: every cost of at least `cost` is denied until `until`
/// (the local clock's nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Denial {
    until: u64,
    cost: u32,
}

#[derive(Debug)]
pub(crate) struct DenialCache {
    map: DashMap<String, Denial>,
    /// `(until, key)` of every denial stored, soonest first; entries whose
    /// key has since been replaced or removed are stale and skipped.
    expiry: Mutex<BinaryHeap<Reverse<(u64, String)>>>,
    capacity: usize,
}

impl DenialCache {
    pub(crate) fn new(capacity: usize) -> DenialCache {
        DenialCache {
            map: DashMap::new(),
            expiry: Mutex::new(BinaryHeap::new()),
            capacity,
        }
    }

    /// How long `cost` for `key` is still denied at `now`, if the cache
    /// knows it is.
    pub(crate) fn denied_for(&self, key: &str, now: u64, cost: u32) -> Option<u64> {
        let denial = *self.map.get(key)?;
        if now < denial.until {
            return (cost >= denial.cost).then(|| denial.until - now);
        }
        // Passed: drop it now rather than at the next insertion (the heap
        // entry left behind is stale and skipped when popped).
        self.map.remove_if(key, |_, d| now >= d.until);
        None
    }

    /// Records that Redis denied `cost` for `key` at `now` for `retry_after`
    /// nanoseconds.
    pub(crate) fn insert(&self, key: &str, now: u64, cost: u32, retry_after: u64) {
        if retry_after == 0 || self.capacity == 0 {
            return;
        }
        let until = now.saturating_add(retry_after);
        // Lock order: the heap, then a map shard (lookups take only the
        // shard), so no deadlock.
        let mut heap = self.expiry.lock();
        while let Some(Reverse((at, _))) = heap.peek() {
            if *at > now {
                break;
            }
            if let Some(Reverse((_, old))) = heap.pop() {
                self.map.remove_if(&old, |_, d| now >= d.until);
            }
        }
        // Insertions are serialized by the heap lock, so the key cannot
        // appear between this look and the entry below. Room is made first:
        // the entry holds its shard's lock, which the evictions may need.
        if !self.map.contains_key(key) {
            // Full: drop the denial that ends soonest (a stale heap entry
            // frees its slot without touching the map).
            while heap.len() >= self.capacity {
                let Some(Reverse((at, old))) = heap.pop() else {
                    break;
                };
                self.map.remove_if(&old, |_, d| d.until == at);
            }
        }
        let fresh = Denial { until, cost };
        let stored = match self.map.entry(key.to_owned()) {
            Entry::Occupied(mut e) => {
                let old = *e.get();
                // The old pair covers the new one: keep it.
                if old.cost <= cost && old.until >= until {
                    false
                } else {
                    e.insert(fresh);
                    true
                }
            }
            Entry::Vacant(e) => {
                e.insert(fresh);
                true
            }
        };
        if stored {
            heap.push(Reverse((until, key.to_owned())));
        }
        // Updates of existing keys push too; keep the heap within twice the
        // capacity by dropping the soonest deadlines (at worst a denial is
        // forgotten early: Redis answers instead).
        while heap.len() > self.capacity.saturating_mul(2) {
            if let Some(Reverse((at, old))) = heap.pop() {
                self.map.remove_if(&old, |_, d| d.until == at);
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_what_redis_said() {
        let cache = DenialCache::new(10);
        // Cost 5 denied for 5 s, then cost 3 for 3 s (the trace).
        cache.insert("k", 0, 5, 5_000);
        assert_eq!(cache.denied_for("k", 0, 3), None);
        cache.insert("k", 0, 3, 3_000);
        assert_eq!(cache.denied_for("k", 1_000, 3), Some(2_000));
        // After 3 s cost 3 goes to Redis again.
        assert_eq!(cache.denied_for("k", 3_000, 3), None);
        // A covered denial does not replace a wider one.
        cache.insert("k", 4_000, 2, 4_000);
        cache.insert("k", 4_000, 6, 1_000);
        assert_eq!(cache.denied_for("k", 4_500, 2), Some(3_500));
    }

    #[test]
    fn full_cache_drops_the_soonest_and_stays_bounded() {
        let cache = DenialCache::new(1_000);
        for i in 0..1_000u64 {
            cache.insert(&format!("k{i}"), 0, 1, 1_000 + i);
        }
        assert_eq!(cache.len(), 1_000);
        // A new key's denial is kept; k0 (ending soonest) makes room.
        cache.insert("new", 0, 1, 10_000);
        assert_eq!(cache.denied_for("new", 1, 1), Some(9_999));
        assert_eq!(cache.denied_for("k0", 1, 1), None);
        assert_eq!(cache.denied_for("k1", 1, 1), Some(1_000));
        assert_eq!(cache.len(), 1_000);
        // Churn over many more keys than the capacity, with repeated
        // updates of one key: never above the capacity.
        for i in 0..20_000u64 {
            cache.insert(&format!("c{i}"), 10, 1, 5_000);
            cache.insert("hot", 10 + i, (i % 7) as u32, 100);
        }
        assert!(cache.len() <= 1_000);
        assert!(cache.expiry.lock().len() <= 2_000);
    }
}
