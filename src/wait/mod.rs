//! Waiting for a slot instead of failing: [`Pacer`] (one limiter) and
//! [`KeyedPacer`] (per key), async with feature `tokio` and blocking, with
//! deadlines ([`WaitError`]), cancellation that consumes nothing, and
//! [`Jitter`]. [`TokioClock`] (feature `tokio`) lets tests of waiting run
//! under tokio's paused time.
//!
//! The design, in short: waiters of one limit (or one key) line up in a
//! FIFO queue and only the head consults the limiter, sleeping exactly
//! until the retry time the limiter reports. See [`Pacer`] for why this
//! rather than a reservation in the algorithm's state: it works unchanged on
//! every algorithm, a cancelled waiter holds nothing to give back, and the
//! limiter is still consulted only about once or twice per admission.

mod engine;
mod error;
mod jitter;
mod keyed;
mod pacer;
mod queue;
#[cfg(feature = "tokio")]
mod tokio_clock;
#[cfg(feature = "tokio")]
mod until_ready;

#[cfg(feature = "tokio")]
pub(crate) use engine::wait_async;
pub(crate) use engine::{Gate, Step, step_of, wait_blocking};
pub(crate) use queue::WaitQueue;

pub use error::WaitError;
pub use jitter::Jitter;
pub use keyed::KeyedPacer;
pub use pacer::Pacer;
#[cfg(feature = "tokio")]
pub use tokio_clock::TokioClock;
#[cfg(feature = "tokio")]
pub use until_ready::UntilReady;
