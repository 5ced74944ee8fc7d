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

    /// The key's value, under its shard's read lock while the guard lives.
    #[inline]
    pub(crate) fn get<'a, Q>(&'a self, key: &'a Q) -> Option<impl Deref<Target = V> + 'a>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(key)
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
    pub(crate) fn retain(&self, mut keep: impl FnMut(&V) -> bool) {
        self.map.retain(|_, value| keep(value));
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

    pub(crate) fn retain(&self, mut keep: impl FnMut(&V) -> bool) {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, value| keep(value));
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
