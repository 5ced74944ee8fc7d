//! The keyed limiter's map: `dashmap` normally; under `--cfg rategate_loom`
//! a loom `RwLock` around a `HashMap`, so the loom models check the keyed
//! limiter's insert / check / sweep races with the same locking discipline
//! (read lock to decide on a known key, write lock to insert or sweep).

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::ops::Deref;

#[cfg(not(rategate_loom))]
pub(crate) struct KeyMap<K, V, S> {
    map: dashmap::DashMap<K, V, S>,
}

#[cfg(not(rategate_loom))]
impl<K: Hash + Eq, V, S: BuildHasher + Clone> KeyMap<K, V, S> {
    pub(crate) fn new(hasher: S, shards: Option<usize>) -> Self {
        let map = match shards {
            Some(shards) => dashmap::DashMap::with_hasher_and_shard_amount(hasher, shards),
            None => dashmap::DashMap::with_hasher(hasher),
        };
        KeyMap { map }
    }

    /// The key's hash by the map's own (seeded) hasher.
    pub(crate) fn hash_of<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.map.hasher().hash_one(key)
    }

    /// The key's value, under its shard's read lock while the guard lives.
    ///
    /// The lookup is `dashmap`'s own (hash, shard, `hashbrown` probe), with
    /// one addition: before probing, the key's control bytes and the bucket
    /// at its probe start are both prefetched, so that the two cache misses
    /// of a lookup in a large map (control bytes, then the bucket they
    /// point to) overlap instead of following each other. Most keys sit at
    /// or near their probe start; for the others the prefetch is wasted and
    /// the probe proceeds as before (`cargo bench --bench keyed`, a million
    /// keys, shows the lookup's cost).
    #[inline]
    pub(crate) fn get<'a, Q>(&'a self, key: &'a Q) -> Option<impl Deref<Target = V> + 'a>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The same hash and shard as `DashMap::get`.
        let hash = self.map.hash_usize(&key) as u64;
        let shard = self.map.shards()[self.map.determine_shard(hash as usize)].read();
        prefetch_probe_start(&shard, hash);
        let bucket = shard.find(hash, |(k, _)| k.borrow() == key)?;
        // SAFETY: the bucket is full (`find` returned it) and stays in place
        // while the shard's read lock is held: only a writer (insert,
        // remove, rehash) moves or frees buckets. The guard below keeps the
        // lock for as long as the reference lives, as `dashmap::mapref::Ref`
        // does.
        let value: *const V = unsafe { bucket.as_ref() }.1.get();
        Some(ValueRef {
            _shard: shard,
            value,
        })
    }

    /// Runs `f` on the key's value under its shard's read lock.
    #[inline]
    pub(crate) fn with<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(key).map(|value| f(&value))
    }

    /// Runs `f` on the key's value under its shard's write lock. If the key
    /// is absent, `reserve()` decides under that lock whether it may be
    /// inserted: with `Some(ticket)`, `make()` is inserted and `f` runs on it
    /// with the ticket; with `None`, the map is left as it is and `None`
    /// returned. A known key runs `f` without a ticket.
    pub(crate) fn with_or_insert_if<T, R>(
        &self,
        key: K,
        reserve: impl FnOnce() -> Option<T>,
        make: impl FnOnce() -> V,
        f: impl FnOnce(&V, Option<T>) -> R,
    ) -> Option<R> {
        match self.map.entry(key) {
            dashmap::Entry::Occupied(entry) => Some(f(entry.get(), None)),
            dashmap::Entry::Vacant(entry) => {
                let ticket = reserve()?;
                let value = entry.insert(make());
                Some(f(&value, Some(ticket)))
            }
        }
    }

    /// Keeps the values `keep` approves, visiting each shard under its write
    /// lock.
    pub(crate) fn retain(&self, mut keep: impl FnMut(&K, &V) -> bool) {
        self.map.retain(|key, value| keep(key, value));
    }

    pub(crate) fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.remove(key).is_some()
    }

    pub(crate) fn shrink_to_fit(&self) {
        self.map.shrink_to_fit();
    }

    /// Visits every key and value, each shard under its read lock.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        for entry in self.map.iter() {
            f(entry.key(), entry.value());
        }
    }
}

/// A value in the map, with the read lock of its shard (`G`) that keeps it
/// in place.
#[cfg(not(rategate_loom))]
struct ValueRef<G, V> {
    _shard: G,
    value: *const V,
}

#[cfg(not(rategate_loom))]
impl<G, V> Deref for ValueRef<G, V> {
    type Target = V;

    #[inline]
    fn deref(&self) -> &V {
        // SAFETY: `value` points into the table `_shard` holds read-locked
        // (see `KeyMap::get`).
        unsafe { &*self.value }
    }
}

/// Prefetches the control bytes and the bucket at `hash`'s probe start in
/// a `hashbrown` table (`dashmap`'s shard). The layout is `hashbrown`'s:
/// buckets stored backwards from `data_end`, control bytes from
/// `data_end` on, the probe starting at `hash & (buckets - 1)`. A layout
/// that differed would make the prefetch useless, never a lookup wrong:
/// prefetching reads nothing and cannot fault.
#[cfg(not(rategate_loom))]
#[inline(always)]
fn prefetch_probe_start<T>(table: &hashbrown::raw::RawTable<T>, hash: u64) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let end = table.data_end().as_ptr();
        let start = (hash as usize) & (table.buckets() - 1);
        // Addresses computed with wrapping arithmetic: nothing is read
        // through them.
        let control = (end as *const i8).wrapping_add(start);
        let bucket = end.wrapping_sub(start + 1) as *const i8;
        // SAFETY: a prefetch is a hint that reads no memory and never
        // faults, whatever the address.
        #[allow(unused_unsafe)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(control);
            _mm_prefetch::<_MM_HINT_T0>(bucket);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (table, hash);
}

#[cfg(rategate_loom)]
pub(crate) struct KeyMap<K, V, S> {
    map: loom::sync::RwLock<std::collections::HashMap<K, V, S>>,
}

#[cfg(rategate_loom)]
impl<K: Hash + Eq, V, S: BuildHasher + Clone> KeyMap<K, V, S> {
    pub(crate) fn new(hasher: S, _shards: Option<usize>) -> Self {
        KeyMap {
            map: loom::sync::RwLock::new(std::collections::HashMap::with_hasher(hasher)),
        }
    }

    /// The key's hash by the map's own hasher.
    pub(crate) fn hash_of<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.hasher().hash_one(key)
    }

    pub(crate) fn with<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.get(key).map(f)
    }

    pub(crate) fn get<'a, Q>(&'a self, key: &'a Q) -> Option<impl Deref<Target = V> + 'a>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.contains_key(key).then_some(LoomRef { map, key })
    }

    pub(crate) fn with_or_insert_if<T, R>(
        &self,
        key: K,
        reserve: impl FnOnce() -> Option<T>,
        make: impl FnOnce() -> V,
        f: impl FnOnce(&V, Option<T>) -> R,
    ) -> Option<R> {
        use std::collections::hash_map::Entry;
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        match map.entry(key) {
            Entry::Occupied(entry) => Some(f(entry.get(), None)),
            Entry::Vacant(entry) => {
                let ticket = reserve()?;
                let value = entry.insert(make());
                Some(f(value, Some(ticket)))
            }
        }
    }

    pub(crate) fn retain(&self, mut keep: impl FnMut(&K, &V) -> bool) {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        map.retain(|key, value| keep(key, value));
    }

    pub(crate) fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        map.remove(key).is_some()
    }

    pub(crate) fn shrink_to_fit(&self) {}

    pub(crate) fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.iter().for_each(|(k, v)| f(k, v));
    }
}

/// A value of the loom model's map, looked up again on each access under
/// the read lock the guard holds (which keeps the key from being removed).
#[cfg(rategate_loom)]
struct LoomRef<'a, K, V, S, Q: ?Sized> {
    map: loom::sync::RwLockReadGuard<'a, std::collections::HashMap<K, V, S>>,
    key: &'a Q,
}

#[cfg(rategate_loom)]
impl<K, V, S, Q> Deref for LoomRef<'_, K, V, S, Q>
where
    K: Hash + Eq + Borrow<Q>,
    S: BuildHasher,
    Q: Hash + Eq + ?Sized,
{
    type Target = V;

    fn deref(&self) -> &V {
        match self.map.get(self.key) {
            Some(value) => value,
            // The read lock held since `get` found the key keeps it.
            None => unreachable!("a key removed under a read lock"),
        }
    }
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn prefetching_lookup_finds_exactly_the_keys_present() {
        // Enough keys for several resizes of every shard, so probes start
        // in tables of many sizes and some keys sit away from their start.
        let map = KeyMap::new(foldhash::fast::RandomState::default(), Some(4));
        for k in 0..200_000u64 {
            map.with_or_insert_if(k, || Some(()), || k * 3, |_, _| ());
        }
        for k in 0..200_000u64 {
            assert_eq!(map.get(&k).map(|v| *v), Some(k * 3));
        }
        for k in 200_000..210_000u64 {
            assert!(map.get(&k).is_none());
        }
        for k in (0..200_000u64).step_by(2) {
            assert!(map.remove(&k));
        }
        for k in 0..1_000u64 {
            assert_eq!(map.get(&k).map(|v| *v), (k % 2 == 1).then_some(k * 3));
        }
    }

    #[test]
    fn prefetching_lookup_borrows_string_keys() {
        let map = KeyMap::new(std::hash::RandomState::new(), None);
        assert!(map.get("empty map").is_none());
        for i in 0..1_000 {
            map.with_or_insert_if(format!("user-{i}"), || Some(()), || i, |_, _| ());
        }
        assert_eq!(map.get("user-999").map(|v| *v), Some(999));
        assert!(map.get("user-1000").is_none());
    }
}
