//! A FIFO queue of waiters in front of one limit: only the head consults it.
//!
//! Waiters take numbered places in arrival order. The waiter at the front is
//! the *head*: it alone consults the limiter, sleeps until the time the
//! limiter names, and consults again. Everyone behind it sleeps without a
//! timer until the place in front of them is freed. So a limit with a
//! thousand waiters is consulted about as often as it admits, instead of a
//! thousand times per admission (the stampede of every waiter waking at the
//! same retry time), and admissions follow arrival order.
//!
//! The queue is runtime-free: a waiter is woken through a task [`Waker`] or
//! by unparking its thread, whichever it left.

use crate::sync::{Arc, AtomicUsize, Mutex, Ordering};
use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};
use std::thread::Thread;
use std::time::Instant;

/// The waiters of one limit, in arrival order.
#[derive(Debug)]
pub(crate) struct WaitQueue {
    /// Places taken and not yet freed. Read without the lock by the fast
    /// path, which only uses it as a hint: "nobody is waiting, consult the
    /// limiter directly". A stale read can let one newcomer consult ahead of
    /// a waiter that joined a moment earlier, which costs order, not
    /// correctness: the limiter still decides.
    len: AtomicUsize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_ticket: u64,
    /// Sorted by ticket; the front is the head.
    places: VecDeque<Entry>,
}

#[derive(Debug)]
struct Entry {
    ticket: u64,
    wake: Option<Wake>,
}

#[derive(Debug)]
enum Wake {
    // Woken by async waiters only (feature `tokio`).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    Task(Waker),
    Thread(Thread),
}

impl Wake {
    fn wake(self) {
        match self {
            Wake::Task(waker) => waker.wake(),
            Wake::Thread(thread) => thread.unpark(),
        }
    }
}

impl Default for WaitQueue {
    fn default() -> Self {
        WaitQueue {
            len: AtomicUsize::new(0),
            inner: Mutex::new(Inner::default()),
        }
    }
}

impl WaitQueue {
    /// Whether no place is taken (a hint; see `len`).
    #[inline]
    pub(crate) fn is_idle(&self) -> bool {
        // Relaxed: a hint for fairness only, see the field's comment.
        self.len.load(Ordering::Relaxed) == 0
    }

    /// Whether no place is taken, read under the lock (exact at that moment).
    pub(crate) fn is_empty_locked(&self) -> bool {
        self.inner.lock().places.is_empty()
    }

    /// Takes the next place at the back of the queue.
    /// (An associated function rather than a method: loom's `Arc` cannot
    /// be a method receiver.)
    pub(crate) fn join(queue: &Arc<Self>) -> Place {
        let this = &**queue;
        let mut inner = this.inner.lock();
        let ticket = inner.next_ticket;
        inner.next_ticket += 1;
        inner.places.push_back(Entry { ticket, wake: None });
        // Relaxed: see `len`; the lock orders the queue itself.
        this.len.fetch_add(1, Ordering::Relaxed);
        Place {
            queue: Arc::clone(queue),
            ticket,
            left: false,
        }
    }

    fn leave(&self, ticket: u64) {
        let next = {
            let mut inner = self.inner.lock();
            let Ok(index) = inner.places.binary_search_by_key(&ticket, |e| e.ticket) else {
                return;
            };
            inner.places.remove(index);
            self.len.fetch_sub(1, Ordering::Relaxed);
            if index == 0 {
                // The head left (admitted, failed or cancelled): the next
                // waiter becomes head and must be told.
                inner.places.front_mut().and_then(|e| e.wake.take())
            } else {
                None
            }
        };
        // Woken outside the lock, so the woken waiter does not block on it.
        if let Some(wake) = next {
            wake.wake();
        }
    }
}

/// A place in a [`WaitQueue`]; dropping it frees the place, which is what
/// makes a cancelled waiter (a dropped future) leave the queue.
#[derive(Debug)]
pub(crate) struct Place {
    queue: Arc<WaitQueue>,
    ticket: u64,
    /// Set once the place is freed, so that the drop does not free it again.
    left: bool,
}

impl Place {
    /// Ready once this place is at the front of the queue.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn poll_head(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut inner = self.queue.inner.lock();
        if inner.places.front().map(|e| e.ticket) == Some(self.ticket) {
            return Poll::Ready(());
        }
        if let Ok(i) = inner
            .places
            .binary_search_by_key(&self.ticket, |e| e.ticket)
        {
            let entry = &mut inner.places[i];
            match &entry.wake {
                Some(Wake::Task(w)) if w.will_wake(cx.waker()) => {}
                _ => entry.wake = Some(Wake::Task(cx.waker().clone())),
            }
        }
        Poll::Pending
    }

    /// Waits until this place is the head (`true`) or `deadline` passes
    /// (`false`), parking the thread.
    pub(crate) fn wait_head_blocking(&self, deadline: Option<Instant>) -> bool {
        loop {
            {
                let mut inner = self.queue.inner.lock();
                if inner.places.front().map(|e| e.ticket) == Some(self.ticket) {
                    return true;
                }
                if let Ok(i) = inner
                    .places
                    .binary_search_by_key(&self.ticket, |e| e.ticket)
                {
                    inner.places[i].wake = Some(Wake::Thread(std::thread::current()));
                }
            }
            // Unparks can be spurious or early; the loop re-checks.
            match deadline {
                None => std::thread::park(),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    std::thread::park_timeout(deadline - now);
                }
            }
        }
    }

    /// Places ahead of this one.
    pub(crate) fn ahead(&self) -> usize {
        let inner = self.queue.inner.lock();
        inner.places.partition_point(|e| e.ticket < self.ticket)
    }
}

impl AsRef<Place> for Place {
    fn as_ref(&self) -> &Place {
        self
    }
}

impl Place {
    /// Frees the place now (the drop then does nothing).
    pub(crate) fn leave(&mut self) {
        if !self.left {
            self.left = true;
            self.queue.leave(self.ticket);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.leave();
    }
}

/// Resolves once a place is the head of its queue.
#[cfg(feature = "tokio")]
pub(crate) struct Head<'a>(pub(crate) &'a Place);

#[cfg(feature = "tokio")]
impl std::future::Future for Head<'_> {
    type Output = ();

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.poll_head(cx)
    }
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn head_passes_in_arrival_order_and_cancelled_places_are_skipped() {
        let queue = Arc::new(WaitQueue::default());
        assert!(queue.is_idle());
        let a = WaitQueue::join(&queue);
        let b = WaitQueue::join(&queue);
        let c = WaitQueue::join(&queue);
        assert_eq!((a.ahead(), b.ahead(), c.ahead()), (0, 1, 2));
        assert!(a.wait_head_blocking(Some(Instant::now())));
        assert!(!c.wait_head_blocking(Some(Instant::now())));
        drop(b); // cancelled behind the head
        assert_eq!(c.ahead(), 1);
        drop(a);
        assert!(c.wait_head_blocking(Some(Instant::now())));
        drop(c);
        assert!(queue.is_idle());
        assert!(queue.is_empty_locked());
    }

    #[test]
    fn a_parked_waiter_is_woken_when_it_becomes_head() {
        let queue = Arc::new(WaitQueue::default());
        let head = WaitQueue::join(&queue);
        let q = Arc::clone(&queue);
        let waiter = std::thread::spawn(move || {
            let place = WaitQueue::join(&q);
            place.wait_head_blocking(None)
        });
        while queue.len.load(Ordering::Relaxed) < 2 {
            std::thread::yield_now();
        }
        drop(head);
        assert!(waiter.join().unwrap());
    }
}
