//! Policies on a [`KeyedRateLimiter`] beyond checking: refunds, run-time
//! quota changes, snapshots.

use super::KeyedRateLimiter;
use crate::algorithm::{Adjust, Adjustable, Algorithm};
use crate::clock::Clock;
use crate::snapshot::{self, Reader, Snapshot, SnapshotError, SnapshotKey};
use crate::{Quota, QuotaError};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

impl<K, A, C, S> KeyedRateLimiter<K, A, C, S>
where
    K: Hash + Eq,
    A: Algorithm,
    C: Clock,
    S: BuildHasher + Clone,
{
    /// Gives back up to `cost` of what earlier checks of `key` admitted (a
    /// request that failed before doing its work), as the algorithm's
    /// [`refund`](Algorithm::refund) documents: never more room than a key
    /// never seen. Returns how much was given back. A key the limiter does
    /// not hold (never seen, swept as idle, or reset) has nothing to give
    /// back: the refund is a no-op that returns 0 and inserts nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use rategate::{KeyedRateLimiter, ManualClock, Quota, SlidingWindowLog};
    ///
    /// let limiter = KeyedRateLimiter::<String, SlidingWindowLog, _>::builder(Quota::per_second(5)?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// assert!(limiter.check_n("alice", 5)?.is_allowed());
    /// assert_eq!(limiter.refund("alice", 2), 2);
    /// assert_eq!(limiter.peek("alice").remaining(), 1);
    /// assert_eq!(limiter.refund("bob", 3), 0); // never seen: nothing to give back
    /// assert_eq!(limiter.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund<Q>(&self, key: &Q, cost: u32) -> u32
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.clock.now();
        self.map
            .with(key, |state| self.algorithm.refund(state, now, cost))
            .unwrap_or(0)
    }
}

impl<K, A, C, S> KeyedRateLimiter<K, Adjustable<A>, C, S>
where
    K: Hash + Eq,
    A: Adjust,
    C: Clock,
    S: BuildHasher + Clone,
{
    /// Makes `quota` the one every key gets from its next check on, keeping
    /// every key's state: see [`Adjustable`] for what each algorithm's state
    /// then means. Checks stay lock-free; a check racing the change decides
    /// under either quota.
    ///
    /// # Errors
    ///
    /// As [`Adjustable::set_quota`]; the quota in force is then unchanged.
    ///
    /// # Examples
    ///
    /// ```
    /// use rategate::algorithm::Adjustable;
    /// use rategate::{KeyedRateLimiter, ManualClock, Quota, SlidingWindowLog};
    ///
    /// let limiter = KeyedRateLimiter::<String, Adjustable<SlidingWindowLog>, _>::builder(Quota::per_hour(60)?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// assert!(limiter.check_n("anonymous", 60)?.is_allowed());
    /// limiter.set_quota(Quota::per_hour(5000)?)?; // signed in: at once
    /// assert_eq!(limiter.check("anonymous").remaining(), 4939);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) -> Result<(), QuotaError> {
        self.algorithm.set_quota(quota)
    }
}

impl<K, A, C, S> KeyedRateLimiter<K, A, C, S>
where
    K: Hash + Eq + SnapshotKey,
    A: Snapshot,
    C: Clock,
    S: BuildHasher + Clone,
{
    /// The live state of every key that is not idle, in the versioned byte
    /// format of [`snapshot`](crate::snapshot), for
    /// [`restore`](KeyedRateLimiter::restore) into a fresh limiter. Each
    /// key's state is read atomically (keys checked meanwhile may be read
    /// before or after their check); checks are not blocked.
    ///
    /// # Examples
    ///
    /// ```
    /// use rategate::{KeyedRateLimiter, ManualClock, Quota, TokenBucket};
    ///
    /// let quota = Quota::per_minute(10)?;
    /// let old = KeyedRateLimiter::<String, TokenBucket, _>::builder(quota).clock(ManualClock::new()).build()?;
    /// assert!(old.check_n("alice", 10)?.is_allowed());
    /// let bytes = old.snapshot();
    ///
    /// let new = KeyedRateLimiter::<String, TokenBucket, _>::builder(quota).clock(ManualClock::new()).build()?;
    /// assert_eq!(new.restore(&bytes)?, 1);
    /// assert!(!new.check("alice").is_allowed()); // no fresh burst after the restart
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn snapshot(&self) -> Vec<u8> {
        let now = self.clock.now();
        let mut body = Vec::new();
        let mut keys = 0u64;
        self.map.for_each(|key, state| {
            if !self.algorithm.is_idle(state, now) {
                keys += 1;
                snapshot::write_field(&mut body, |out| key.write(out));
                snapshot::write_field(&mut body, |out| self.algorithm.save(state, out));
            }
        });
        let mut out = Vec::with_capacity(body.len() + 64);
        snapshot::write_header::<A>(&mut out, &self.quota(), now, keys);
        out.extend(body);
        out
    }

    /// Loads a [`snapshot`](KeyedRateLimiter::snapshot) taken from a limiter
    /// with the same algorithm and quota; the time between the two counts as
    /// no time elapsed (see [`snapshot`](crate::snapshot)). Keys this limiter
    /// already holds keep their own state. Returns how many keys were
    /// restored.
    ///
    /// # Errors
    ///
    /// A [`SnapshotError`] for bytes that are not a snapshot, another format
    /// version, algorithm or quota, or a malformed key or state: the whole
    /// snapshot is checked first, and the limiter is then left unchanged.
    /// [`SnapshotError::MapFull`] when the key cap is reached part way.
    pub fn restore(&self, bytes: &[u8]) -> Result<usize, SnapshotError> {
        let now = self.clock.now();
        let (mut reader, then, count) = Reader::open::<A>(bytes, &self.quota())?;
        let mut entries = Vec::new();
        for index in 0..count {
            let key = K::read(reader.field()?).ok_or(SnapshotError::BadKey { index })?;
            let state = self
                .algorithm
                .load(reader.field()?, then, now)
                .ok_or(SnapshotError::BadState { index })?;
            entries.push((key, state));
        }
        if !reader.is_done() {
            return Err(SnapshotError::Truncated);
        }
        let mut restored = 0;
        for (key, state) in entries {
            let inserted = self.map.with_or_insert_if(
                key,
                || self.reserve_slot(),
                || state,
                |_, slot| slot.map(|slot| slot.keep()).is_some(),
            );
            match inserted {
                Some(new) => restored += usize::from(new),
                None => return Err(SnapshotError::MapFull { restored }),
            }
        }
        Ok(restored)
    }
}
