//! The keys most denied, in bounded memory: the Space-Saving summary
//! (Metwally, Agrawal and El Abbadi, 2005).
//!
//! It tracks at most `capacity` keys. A key not tracked replaces the one
//! with the smallest count and inherits that count as its possible
//! overcount, so every reported count is at most `overcount` above the
//! truth, and any key denied more than `total / capacity` times is in the
//! summary. While no more than `capacity` distinct keys were denied the
//! counts are exact (overcount 0).

use std::collections::HashMap;

pub(crate) struct TopKeys {
    capacity: usize,
    counts: HashMap<Box<str>, (u64, u64)>,
}

impl TopKeys {
    pub(crate) fn new(capacity: usize) -> TopKeys {
        TopKeys {
            capacity: capacity.max(1),
            counts: HashMap::new(),
        }
    }

    pub(crate) fn add(&mut self, key: &str) {
        if let Some(c) = self.counts.get_mut(key) {
            c.0 += 1;
            return;
        }
        if self.counts.len() < self.capacity {
            self.counts.insert(key.into(), (1, 0));
            return;
        }
        // O(capacity), only for a key not tracked while the summary is full.
        let smallest = self
            .counts
            .iter()
            .min_by_key(|(_, c)| c.0)
            .map(|(k, c)| (k.clone(), c.0));
        if let Some((old, min)) = smallest {
            self.counts.remove(&old);
            self.counts.insert(key.into(), (min + 1, min));
        }
    }

    /// The `n` largest: (key, count, overcount), most denied first, ties by key.
    pub(crate) fn top(&self, n: usize) -> Vec<(String, u64, u64)> {
        let mut all: Vec<_> = self
            .counts
            .iter()
            .map(|(k, c)| (k.to_string(), c.0, c.1))
            .collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        all.truncate(n);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::TopKeys;

    #[test]
    fn exact_while_few_keys_and_heavy_hitters_survive() {
        let mut t = TopKeys::new(4);
        for k in ["a", "b", "a", "c", "a", "b"] {
            t.add(k);
        }
        assert_eq!(t.top(2), vec![("a".into(), 3, 0), ("b".into(), 2, 0)]);
        let mut t = TopKeys::new(8);
        for i in 0..10_000 {
            t.add("heavy");
            t.add(&format!("one-off-{i}"));
        }
        let top = t.top(1);
        assert_eq!(top[0].0, "heavy");
        assert!(top[0].1 >= 10_000 && top[0].1 - top[0].2 <= 10_000);
    }
}
