//! Waiting for a slot on one key of a keyed limiter.

use super::engine::{self, Gate, Step, step_of};
use super::error::WaitError;
use super::jitter::Jitter;
use super::pacer::is_leaky;
use super::queue::{Place, WaitQueue};
use crate::algorithm::{Algorithm, TokenBucket};
use crate::clock::{Clock, QuantaClock};
use crate::keyed::DefaultKeyHasher;
use crate::sync::{Arc, AtomicUsize, Ordering};
use crate::{Decision, KeyedRateLimiter};
use dashmap::DashMap;
use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::time::Instant;

// The docs link a `tokio` feature method.
#[cfg_attr(not(feature = "tokio"), allow(rustdoc::broken_intra_doc_links))]
/// A [`KeyedRateLimiter`] that callers can wait on, per key: async
/// [`until_key_ready`](KeyedPacer::until_key_ready) (feature `tokio`) and
/// blocking [`wait_key`](KeyedPacer::wait_key), with deadlines and jitter.
///
/// Each key that has waiters gets its own FIFO queue, as a
/// [`Pacer`](crate::Pacer) has one: only the head of a key's queue consults
/// the limiter, and admissions for that key follow arrival order. Keys do
/// not wait on each other. A key's queue exists only while it has waiters
/// (it is removed with its last waiter), so memory stays bounded by the
/// number of waiting keys, on top of the limiter's own bound.
///
/// Cancellation and deadlines behave as for [`Pacer`](crate::Pacer):
/// nothing is consumed before the admission.
///
/// # Examples
///
/// ```
/// use rategate::{KeyedPacer, KeyedRateLimiter, Quota, TokenBucket};
///
/// let limiter = KeyedRateLimiter::<String, TokenBucket>::new(Quota::per_second(1000)?.burst(1)?)?;
/// let pacer = KeyedPacer::new(limiter);
/// pacer.wait_key("alice")?;
/// pacer.wait_key("alice")?; // waits about 1 ms
/// pacer.wait_key("bob")?; // another key: at once
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KeyedPacer<K, A: Algorithm = TokenBucket, C = QuantaClock, S = DefaultKeyHasher> {
    limiter: KeyedRateLimiter<K, A, C, S>,
    /// The queues of keys that have waiters.
    queues: DashMap<K, Arc<WaitQueue>>,
    /// Waiters over all keys: when zero, callers skip the queue lookup.
    queued: AtomicUsize,
    jitter: Jitter,
}

impl<K, A: Algorithm, C, S> fmt::Debug for KeyedPacer<K, A, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedPacer")
            .field("limiter", &self.limiter)
            .field("queued", &self.queued.load(Ordering::Relaxed))
            .field("jitter", &self.jitter)
            .finish_non_exhaustive()
    }
}

/// A place in one key's queue; freeing it drops the key's queue if it was
/// the last.
struct KeyedPlace<'a, K: Hash + Eq> {
    place: Place,
    queues: &'a DashMap<K, Arc<WaitQueue>>,
    queued: &'a AtomicUsize,
    key: K,
}

impl<K: Hash + Eq> AsRef<Place> for KeyedPlace<'_, K> {
    fn as_ref(&self) -> &Place {
        &self.place
    }
}

impl<K: Hash + Eq> Drop for KeyedPlace<'_, K> {
    fn drop(&mut self) {
        self.place.leave();
        // Relaxed: a hint for the fast path, like the queue's own length.
        self.queued.fetch_sub(1, Ordering::Relaxed);
        // Under the shard's write lock, so no waiter can join this queue
        // between the emptiness test and the removal (joins happen under the
        // same lock).
        self.queues.remove_if(&self.key, |_, q| q.is_empty_locked());
    }
}

struct KeyGate<'a, K, A: Algorithm, C, S, Q: ?Sized> {
    limiter: &'a KeyedRateLimiter<K, A, C, S>,
    key: &'a Q,
}

impl<K, A, C, S, Q> Gate for KeyGate<'_, K, A, C, S, Q>
where
    K: Hash + Eq + Borrow<Q>,
    A: Algorithm,
    C: Clock,
    S: BuildHasher + Clone,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    #[inline]
    fn attempt(&self, cost: u32) -> Result<Step, WaitError> {
        step_of(self.limiter.check_n(self.key, cost)?)
    }

    fn probe(&self, cost: u32) -> Result<Step, WaitError> {
        step_of(self.limiter.peek_n(self.key, cost)?)
    }

    fn reserves_delay(&self) -> bool {
        is_leaky::<A>()
    }
}

impl<K, A, C, S> KeyedPacer<K, A, C, S>
where
    K: Hash + Eq,
    A: Algorithm,
    C: Clock,
    S: BuildHasher + Clone,
{
    /// Waits on `limiter`, without jitter.
    pub fn new(limiter: KeyedRateLimiter<K, A, C, S>) -> Self {
        KeyedPacer {
            limiter,
            queues: DashMap::new(),
            queued: AtomicUsize::new(0),
            jitter: Jitter::NONE,
        }
    }

    /// Waits on `limiter`, adding `jitter` to every wake-up that had to
    /// wait, so that many waiters do not come back in lockstep.
    pub fn with_jitter(limiter: KeyedRateLimiter<K, A, C, S>, jitter: Jitter) -> Self {
        let mut pacer = Self::new(limiter);
        pacer.jitter = jitter;
        pacer
    }

    /// The limiter waited on.
    pub fn limiter(&self) -> &KeyedRateLimiter<K, A, C, S> {
        &self.limiter
    }

    /// Keys that have waiters right now.
    pub fn waiting_keys(&self) -> usize {
        self.queues.len()
    }

    fn idle<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // Relaxed: a hint; see `queued`.
        self.queued.load(Ordering::Relaxed) == 0 || self.queues.get(key).is_none_or(|q| q.is_idle())
    }

    fn join<Q>(&self, key: &Q) -> KeyedPlace<'_, K>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.queued.fetch_add(1, Ordering::Relaxed);
        let entry = self.queues.entry(key.to_owned()).or_default();
        // Joined while the entry's shard lock is held: see the drop.
        let place = WaitQueue::join(entry.value());
        drop(entry);
        KeyedPlace {
            place,
            queues: &self.queues,
            queued: &self.queued,
            key: key.to_owned(),
        }
    }

    /// Blocks until a request of cost 1 for `key` is admitted.
    ///
    /// # Errors
    ///
    /// [`WaitError::NeverReady`] only if the limiter reports no retry time.
    pub fn wait_key<Q>(&self, key: &Q) -> Result<Decision, WaitError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.wait_key_n(key, 1)
    }

    /// Blocks until a request of `cost` for `key` is admitted.
    ///
    /// # Errors
    ///
    /// [`WaitError::CostExceedsCapacity`] at once for a cost that can never
    /// pass.
    pub fn wait_key_n<Q>(&self, key: &Q, cost: u32) -> Result<Decision, WaitError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.wait_key_inner(key, cost, None)
    }

    /// Blocks until a request of `cost` for `key` is admitted, or fails,
    /// consuming nothing, when its slot comes after `deadline`.
    ///
    /// # Errors
    ///
    /// [`WaitError::DeadlineExceeded`], [`WaitError::QueuedAtDeadline`],
    /// [`WaitError::CostExceedsCapacity`].
    pub fn wait_key_n_by<Q>(
        &self,
        key: &Q,
        cost: u32,
        deadline: Instant,
    ) -> Result<Decision, WaitError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.wait_key_inner(key, cost, Some(deadline))
    }

    fn wait_key_inner<Q>(
        &self,
        key: &Q,
        cost: u32,
        deadline: Option<Instant>,
    ) -> Result<Decision, WaitError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let gate = KeyGate {
            limiter: &self.limiter,
            key,
        };
        engine::wait_blocking(
            &gate,
            self.idle(key),
            || self.join(key),
            cost,
            deadline,
            &self.jitter,
        )
    }
}

#[cfg(feature = "tokio")]
impl<K, A, C, S> KeyedPacer<K, A, C, S>
where
    K: Hash + Eq,
    A: Algorithm,
    C: Clock,
    S: BuildHasher + Clone,
{
    /// Waits until a request of cost 1 for `key` is admitted.
    ///
    /// # Errors
    ///
    /// [`WaitError::NeverReady`] only if the limiter reports no retry time.
    pub async fn until_key_ready<Q>(&self, key: &Q) -> Result<Decision, WaitError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.until_key_inner(key, 1, None).await
    }

    /// Waits until a request of `cost` for `key` is admitted.
    ///
    /// # Errors
    ///
    /// [`WaitError::CostExceedsCapacity`] at once for a cost that can never
    /// pass.
    pub async fn until_key_n_ready<Q>(&self, key: &Q, cost: u32) -> Result<Decision, WaitError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.until_key_inner(key, cost, None).await
    }

    /// Waits until a request of `cost` for `key` is admitted, or fails,
    /// consuming nothing, when its slot comes after `deadline` (on tokio's
    /// clock).
    ///
    /// # Errors
    ///
    /// [`WaitError::DeadlineExceeded`], [`WaitError::QueuedAtDeadline`],
    /// [`WaitError::CostExceedsCapacity`].
    pub async fn until_key_n_ready_by<Q>(
        &self,
        key: &Q,
        cost: u32,
        deadline: tokio::time::Instant,
    ) -> Result<Decision, WaitError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.until_key_inner(key, cost, Some(deadline)).await
    }

    async fn until_key_inner<Q>(
        &self,
        key: &Q,
        cost: u32,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Decision, WaitError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let gate = KeyGate {
            limiter: &self.limiter,
            key,
        };
        engine::wait_async(
            &gate,
            self.idle(key),
            || self.join(key),
            cost,
            deadline,
            &self.jitter,
        )
        .await
    }
}
