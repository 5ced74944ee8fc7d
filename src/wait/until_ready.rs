//! The future of [`Pacer::until_n_ready`](super::Pacer::until_n_ready): a
//! named type whose first poll runs the fast path inline (a free slot costs
//! one limiter check, no allocation, no nested async state machines), and
//! which boxes the queued path only when a caller must wait.

use super::engine::{self, FastPath};
use super::error::WaitError;
use super::pacer::Pacer;
use super::queue::WaitQueue;
use crate::Decision;
use crate::algorithm::Algorithm;
use crate::clock::Clock;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

type Slow<'a> = Pin<Box<dyn Future<Output = Result<Decision, WaitError>> + Send + 'a>>;

/// Waits for a slot of a [`Pacer`]; from [`Pacer::until_n_ready`] and its
/// variants. Nothing happens until it is first polled; dropping it before
/// it completes consumes nothing (see [`Pacer`] for the one exception, the
/// leaky bucket's delay mode).
#[must_use = "futures do nothing unless polled"]
pub struct UntilReady<'a, A: Algorithm, C: Clock> {
    pacer: &'a Pacer<A, C>,
    cost: u32,
    deadline: Option<tokio::time::Instant>,
    /// `None` until the first poll took the slow path.
    slow: Option<Slow<'a>>,
}

impl<A: Algorithm, C: Clock> fmt::Debug for UntilReady<'_, A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UntilReady")
            .field("cost", &self.cost)
            .field("deadline", &self.deadline)
            .field("queued", &self.slow.is_some())
            .finish_non_exhaustive()
    }
}

impl<'a, A: Algorithm, C: Clock> UntilReady<'a, A, C> {
    pub(super) fn new(
        pacer: &'a Pacer<A, C>,
        cost: u32,
        deadline: Option<tokio::time::Instant>,
    ) -> Self {
        UntilReady {
            pacer,
            cost,
            deadline,
            slow: None,
        }
    }
}

impl<A: Algorithm, C: Clock> Future for UntilReady<'_, A, C> {
    type Output = Result<Decision, WaitError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Every field is `Unpin` (references, a `Copy` value, a `Box`).
        let this = self.get_mut();
        if this.slow.is_none() {
            let (pacer, cost, deadline) = (this.pacer, this.cost, this.deadline);
            let limiter = pacer.limiter();
            let queue = pacer.queue();
            let learned = match engine::fast_path_async(limiter, queue.is_idle(), cost, deadline) {
                FastPath::Done(result) => return Poll::Ready(result),
                FastPath::Delay(d) => {
                    this.slow = Some(Box::pin(engine::finish_delay(d)));
                    return this.poll_slow(cx);
                }
                FastPath::Queue(learned) => learned,
            };
            this.slow = Some(Box::pin(engine::wait_async_queued(
                limiter,
                move || WaitQueue::join(queue),
                cost,
                deadline,
                pacer.jitter(),
                learned,
            )));
        }
        this.poll_slow(cx)
    }
}

impl<A: Algorithm, C: Clock> UntilReady<'_, A, C> {
    #[cold]
    fn poll_slow(&mut self, cx: &mut Context<'_>) -> Poll<Result<Decision, WaitError>> {
        match self.slow.as_mut() {
            Some(slow) => slow.as_mut().poll(cx),
            // Set just before every call.
            None => Poll::Ready(Err(WaitError::NeverReady)),
        }
    }
}
