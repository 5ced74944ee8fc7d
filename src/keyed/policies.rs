//! Policies on a [`KeyedRateLimiter`] beyond checking: refunds and run-time
//! quota changes.

use super::KeyedRateLimiter;
use crate::algorithm::{Adjust, Adjustable, Algorithm};
use crate::clock::Clock;
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
