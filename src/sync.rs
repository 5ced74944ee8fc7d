//! Atomics shim: `std` atomics normally, loom's under `--cfg rategate_loom`.
//!
//! Every lock-free state machine in the crate takes its atomics and `Arc`
//! from here, so the loom models in `loom-tests/` check the real code. The cfg
//! is crate-specific (like crossbeam's `crossbeam_loom`), so a downstream
//! `--cfg loom` cannot switch it on by accident.

#[cfg(not(rategate_loom))]
pub(crate) use std::sync::Arc;
#[cfg(not(rategate_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
// The HTTP layer's handler charge is its only user.
#[cfg(all(not(rategate_loom), feature = "http"))]
pub(crate) use std::sync::atomic::AtomicBool;

#[cfg(rategate_loom)]
pub(crate) use loom::sync::Arc;
#[cfg(all(rategate_loom, feature = "http"))]
pub(crate) use loom::sync::atomic::AtomicBool;
#[cfg(rategate_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A short-critical-section lock: `parking_lot::Mutex` normally, loom's
/// mutex under loom. `lock()` returns the guard directly in both.
#[cfg(not(rategate_loom))]
#[allow(dead_code)]
pub(crate) type Mutex<T> = parking_lot::Mutex<T>;

/// Loom's mutex with `parking_lot`'s signature (no poisoning).
#[cfg(rategate_loom)]
#[derive(Debug)]
#[allow(dead_code)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(rategate_loom)]
#[allow(dead_code)]
impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Mutex(loom::sync::Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn try_lock(&self) -> Option<loom::sync::MutexGuard<'_, T>> {
        self.0.try_lock().ok()
    }
}

/// Interior mutability for data that a lock made in the crate guards (the
/// sliding window log's): `std`'s `UnsafeCell` normally, loom's under loom,
/// which then checks that no two threads ever reach the data at once.
/// Both expose loom's API: [`UnsafeCell::get_mut`] hands out a [`MutPtr`]
/// that the lock's guard keeps while it holds the lock.
#[cfg(not(rategate_loom))]
pub(crate) use cell::{MutPtr, UnsafeCell};
#[cfg(rategate_loom)]
pub(crate) use loom::cell::{MutPtr, UnsafeCell};

#[cfg(not(rategate_loom))]
mod cell {
    /// `std::cell::UnsafeCell` with loom's `get_mut`.
    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(value: T) -> Self {
            UnsafeCell(std::cell::UnsafeCell::new(value))
        }

        /// A pointer to the data; only its [`MutPtr::with`] dereferences it.
        pub(crate) fn get_mut(&self) -> MutPtr<T> {
            MutPtr(self.0.get())
        }
    }

    /// A pointer to an [`UnsafeCell`]'s data (loom's `MutPtr`, which tracks
    /// the access for as long as it lives).
    #[derive(Debug)]
    pub(crate) struct MutPtr<T>(*mut T);

    impl<T> MutPtr<T> {
        /// Calls `f` with the raw pointer.
        pub(crate) fn with<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0)
        }
    }
}

/// How a thread waits while a lock made in the crate (the sliding window
/// log's) is held by another.
///
/// Normally a zero-sized type: the waiter backs off with
/// `crossbeam_utils::Backoff` (spins a few times, doubling, then yields
/// its CPU on each try) and reads the lock's word again, and the holder's
/// release wakes nobody. Under loom a spinning waiter cannot be modelled
/// (two waiters could take turns spinning forever while the holder waits
/// to run), so the waiter blocks on a loom condition variable until the
/// word changes, and the release notifies it. The lock itself (its
/// compare-exchange, its release store, their orderings) is the same code
/// in both.
#[derive(Debug, Default)]
pub(crate) struct LockWait {
    #[cfg(rategate_loom)]
    parked: (loom::sync::Mutex<()>, loom::sync::Condvar),
}

impl LockWait {
    /// Waits for `word`, last read as `seen`, to change (normally: for a
    /// moment) and returns a fresh read of it.
    #[inline]
    pub(crate) fn wait(&self, word: &AtomicU64, seen: u64, backoff: &Backoff) -> u64 {
        #[cfg(not(rategate_loom))]
        {
            let _ = seen;
            backoff.snooze();
            // Relaxed: a guess at the word for the next compare-exchange,
            // which decides.
            word.load(Ordering::Relaxed)
        }
        #[cfg(rategate_loom)]
        {
            let _ = backoff;
            let (lock, changed) = &self.parked;
            let mut parked = lock.lock().unwrap();
            loop {
                let now = word.load(Ordering::Relaxed);
                if now != seen {
                    return now;
                }
                parked = changed.wait(parked).unwrap();
            }
        }
    }

    /// Called by a lock's holder after the store that released it.
    #[inline]
    pub(crate) fn wake(&self) {
        #[cfg(rategate_loom)]
        {
            let (lock, changed) = &self.parked;
            // Taking the mutex orders this after any waiter's read of the
            // word: that waiter is then waiting, or reads the release.
            drop(lock.lock().unwrap());
            changed.notify_all();
        }
    }
}

/// Backs off while a lock made in the crate is held (see [`LockWait`]):
/// `crossbeam_utils::Backoff` normally.
#[cfg(not(rategate_loom))]
pub(crate) use crossbeam_utils::Backoff;

/// Loom's stand-in for `crossbeam_utils::Backoff`: [`LockWait`] blocks
/// instead.
#[cfg(rategate_loom)]
pub(crate) struct Backoff;

#[cfg(rategate_loom)]
impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff
    }
}
