//! Atomics shim: `std` atomics normally, loom's under `--cfg rategate_loom`.
//!
//! Every lock-free state machine in the crate takes its atomics and `Arc`
//! from here, so the loom models in `loom-tests/` check the real code. The cfg
//! is crate-specific (like crossbeam's `crossbeam_loom`), so a downstream
//! `--cfg loom` cannot switch it on by accident.

#[cfg(not(rategate_loom))]
pub(crate) use std::sync::Arc;
#[cfg(not(rategate_loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

#[cfg(rategate_loom)]
pub(crate) use loom::sync::Arc;
#[cfg(rategate_loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

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
}
