//! Waiting for a slot on a direct limiter.

use super::engine::{self, Gate, Step, step_of};
use super::error::WaitError;
use super::jitter::Jitter;
use super::queue::WaitQueue;
#[cfg(feature = "tokio")]
use super::until_ready::UntilReady;
use crate::algorithm::{Algorithm, LeakyBucket, TokenBucket};
use crate::clock::{Clock, QuantaClock};
use crate::sync::Arc;
use crate::{Decision, RateLimiter};
use std::any::TypeId;
use std::time::Instant;

// The docs link a `tokio` feature method.
#[cfg_attr(not(feature = "tokio"), allow(rustdoc::broken_intra_doc_links))]
/// A [`RateLimiter`] that callers can wait on: async
/// [`until_ready`](Pacer::until_ready) (feature `tokio`) and blocking
/// [`wait`](Pacer::wait), with deadlines and jitter. Works with every
/// algorithm, [`Sharded`](crate::Sharded) included.
///
/// # No stampede
///
/// Waiters line up in a FIFO queue that the pacer owns. Only the waiter at
/// the front consults the limiter: it sleeps until the retry time the
/// limiter gives, consults again, and on admission hands the front to the
/// next waiter. Everyone else sleeps without a timer. So with 300 tasks on a
/// limit of 100/s the limiter is consulted about twice per admission when it
/// is saturated (one denial that learns the slot, one admission) instead of
/// once per waiting task per slot, and admissions follow arrival order. When
/// nobody waits, a caller consults at once: a free slot costs one check.
///
/// The queue lives in this wrapper, not in the limiter, so that plain
/// checks pay nothing for it. A direct [`check`](RateLimiter::check) on
/// [`limiter()`](Pacer::limiter) bypasses the queue: it competes with the
/// head for slots (the head then just learns a later retry time) and is
/// not counted in the queue's order.
///
/// # Cancellation
///
/// Nothing is consumed until the admission, which is the last step of a
/// wait, so dropping a waiting future (`select!`, `timeout`) or reaching a
/// deadline consumes nothing and frees the waiter's place. The exception:
/// the [`LeakyBucket`] in delay mode admits requests with a delay, reserving
/// a later slot at once; a future dropped while sleeping through that delay
/// loses the slot (the bucket has no refund). With a deadline, the pacer
/// probes such a bucket first and refuses a delay that ends past the
/// deadline without reserving it.
///
/// # Timer resolution
///
/// tokio's timer has millisecond resolution, so a wake-up can be up to
/// 1 ms late. The head then finds the slots that freed meanwhile and takes
/// them back to back, so throughput holds as long as the burst covers a
/// millisecond of the rate; for faster rates than 1000/s with a burst of 1,
/// expect about one admission per millisecond.
///
/// # Examples
///
/// ```
/// use rategate::{Pacer, Quota, RateLimiter, TokenBucket};
///
/// let limiter = RateLimiter::<TokenBucket>::new(Quota::per_second(1000)?.burst(1)?)?;
/// let pacer = Pacer::new(limiter);
/// let start = std::time::Instant::now();
/// for _ in 0..3 {
///     pacer.wait()?; // blocks until the next slot
/// }
/// assert!(start.elapsed() >= std::time::Duration::from_millis(2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Pacer<A: Algorithm = TokenBucket, C: Clock = QuantaClock> {
    limiter: RateLimiter<A, C>,
    queue: Arc<WaitQueue>,
    jitter: Jitter,
}

impl<A: Algorithm, C: Clock> std::fmt::Debug for Pacer<A, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pacer")
            .field("quota", &self.limiter.quota())
            .field("queue", &self.queue)
            .field("jitter", &self.jitter)
            .finish_non_exhaustive()
    }
}

impl<A: Algorithm, C: Clock> RateLimiter<A, C> {
    /// This limiter wrapped in a [`Pacer`], to wait for slots.
    pub fn into_pacer(self) -> Pacer<A, C> {
        Pacer::new(self)
    }
}

impl<A: Algorithm, C: Clock> Pacer<A, C> {
    /// Waits on `limiter`, without jitter.
    pub fn new(limiter: RateLimiter<A, C>) -> Self {
        Pacer {
            limiter,
            queue: Arc::new(WaitQueue::default()),
            jitter: Jitter::NONE,
        }
    }

    /// Waits on `limiter`, adding `jitter` to every wake-up that had to
    /// wait, so that many waiters do not come back in lockstep.
    pub fn with_jitter(limiter: RateLimiter<A, C>, jitter: Jitter) -> Self {
        let mut pacer = Self::new(limiter);
        pacer.jitter = jitter;
        pacer
    }

    /// The limiter waited on.
    pub fn limiter(&self) -> &RateLimiter<A, C> {
        &self.limiter
    }

    /// Blocks until a request of cost 1 is admitted.
    ///
    /// # Errors
    ///
    /// [`WaitError::NeverReady`] only if the limiter reports no retry time.
    #[inline]
    pub fn wait(&self) -> Result<Decision, WaitError> {
        self.wait_n(1)
    }

    /// Blocks until a request of `cost` is admitted.
    ///
    /// # Errors
    ///
    /// [`WaitError::CostExceedsCapacity`] at once for a cost that can never
    /// pass.
    #[inline]
    pub fn wait_n(&self, cost: u32) -> Result<Decision, WaitError> {
        self.wait_inner(cost, None)
    }

    /// Blocks until a request of `cost` is admitted, or fails at once,
    /// consuming nothing, when its slot comes after `deadline`.
    ///
    /// # Errors
    ///
    /// [`WaitError::DeadlineExceeded`] (with when it could pass),
    /// [`WaitError::QueuedAtDeadline`], [`WaitError::CostExceedsCapacity`].
    pub fn wait_n_by(&self, cost: u32, deadline: Instant) -> Result<Decision, WaitError> {
        self.wait_inner(cost, Some(deadline))
    }

    #[inline]
    fn wait_inner(&self, cost: u32, deadline: Option<Instant>) -> Result<Decision, WaitError> {
        engine::wait_blocking(
            &self.limiter,
            self.queue.is_idle(),
            || WaitQueue::join(&self.queue),
            cost,
            deadline,
            &self.jitter,
        )
    }
}

#[cfg(feature = "tokio")]
impl<A: Algorithm, C: Clock> Pacer<A, C> {
    /// Waits until a request of cost 1 is admitted.
    ///
    /// # Errors
    ///
    /// [`WaitError::NeverReady`] only if the limiter reports no retry time.
    ///
    /// # Examples
    ///
    /// ```
    /// use rategate::{Pacer, Quota, RateLimiter, TokenBucket, TokioClock};
    /// use std::sync::Arc;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
    /// let limiter = RateLimiter::<TokenBucket, _>::with_clock(
    ///     Quota::per_second(10)?.burst(1)?,
    ///     TokioClock::new(),
    /// )?;
    /// let pacer = Arc::new(Pacer::new(limiter));
    /// let start = tokio::time::Instant::now();
    /// let tasks: Vec<_> = (0..5)
    ///     .map(|_| {
    ///         let pacer = Arc::clone(&pacer);
    ///         tokio::spawn(async move { pacer.until_ready().await })
    ///     })
    ///     .collect();
    /// for task in tasks {
    ///     task.await??;
    /// }
    /// // One slot every 100 ms: the fifth passes at 400 ms.
    /// assert_eq!(start.elapsed().as_millis(), 400);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn until_ready(&self) -> UntilReady<'_, A, C> {
        UntilReady::new(self, 1, None)
    }

    /// Waits until a request of `cost` is admitted.
    ///
    /// # Errors
    ///
    /// [`WaitError::CostExceedsCapacity`] at once for a cost that can never
    /// pass.
    pub fn until_n_ready(&self, cost: u32) -> UntilReady<'_, A, C> {
        UntilReady::new(self, cost, None)
    }

    /// Waits until a request of cost 1 is admitted, or fails, consuming
    /// nothing, when its slot comes after `deadline` (on tokio's clock).
    ///
    /// # Errors
    ///
    /// As [`until_n_ready_by`](Pacer::until_n_ready_by).
    pub fn until_ready_by(&self, deadline: tokio::time::Instant) -> UntilReady<'_, A, C> {
        UntilReady::new(self, 1, Some(deadline))
    }

    /// Waits until a request of `cost` is admitted, or fails, consuming
    /// nothing, when its slot comes after `deadline`. The failure comes as
    /// soon as the limiter names a slot past the deadline, not at the
    /// deadline.
    ///
    /// # Errors
    ///
    /// [`WaitError::DeadlineExceeded`] (with when it could pass),
    /// [`WaitError::QueuedAtDeadline`] when others were still ahead at the
    /// deadline, [`WaitError::CostExceedsCapacity`].
    pub fn until_n_ready_by(
        &self,
        cost: u32,
        deadline: tokio::time::Instant,
    ) -> UntilReady<'_, A, C> {
        UntilReady::new(self, cost, Some(deadline))
    }

    pub(super) fn queue(&self) -> &Arc<WaitQueue> {
        &self.queue
    }

    pub(super) fn jitter(&self) -> &Jitter {
        &self.jitter
    }
}

impl<A: Algorithm, C: Clock> Gate for RateLimiter<A, C> {
    #[inline(always)]
    fn attempt(&self, cost: u32) -> Result<Step, WaitError> {
        step_of(self.check_n(cost)?)
    }

    fn probe(&self, cost: u32) -> Result<Step, WaitError> {
        step_of(self.peek_n(cost)?)
    }

    fn reserves_delay(&self) -> bool {
        is_leaky::<A>()
    }
}

/// Whether `A` is the leaky bucket, the one algorithm that admits with a
/// delay.
pub(crate) fn is_leaky<A: 'static>() -> bool {
    TypeId::of::<A>() == TypeId::of::<LeakyBucket>()
}
