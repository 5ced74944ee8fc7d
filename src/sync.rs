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

#[cfg(rategate_loom)]
pub(crate) use loom::sync::Arc;
#[cfg(rategate_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
