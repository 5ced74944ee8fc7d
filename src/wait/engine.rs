//! The waiting loop shared by every waiting type: async (tokio) and
//! blocking, with deadlines and jitter.
//!
//! A caller first tries the fast path: if nobody is queued it consults the
//! gate at once, and a free slot costs one consultation and no allocation.
//! Otherwise it takes a place in the [`WaitQueue`](super::queue::WaitQueue) and, once at the head,
//! loops: consult; if admitted, leave the queue (so the next waiter becomes
//! head) and return; if told to wait `d`, fail when `d` ends past the
//! deadline, else sleep `d` plus jitter and consult again.
//!
//! Nothing is consumed before an admission, so a waiter dropped anywhere in
//! this loop (a `select!` or `timeout` dropping its future) leaves nothing
//! behind but its place, which its drop frees. The one exception is the
//! leaky bucket's delay mode, which admits with a delay: the slot is
//! reserved at the admission, and a waiter dropped while sleeping through
//! that delay loses it (the leaky bucket has no refund).

use super::error::WaitError;
use super::jitter::Jitter;
use super::queue::Place;
use crate::Decision;
use std::time::{Duration, Instant};

/// What one consultation of a gate says.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Step {
    /// Admitted and recorded.
    Pass(Decision),
    /// Not admitted, nothing recorded; try again in this many nanoseconds.
    Wait(u64),
}

/// Something a waiter consults: a limiter, one key of a keyed limiter, the
/// outbound guard's limits with its pause and pacing.
pub(crate) trait Gate {
    /// Decides `cost` now, recording it if admitted.
    fn attempt(&self, cost: u32) -> Result<Step, WaitError>;

    /// Decides as [`attempt`](Gate::attempt) would, recording nothing.
    fn probe(&self, cost: u32) -> Result<Step, WaitError>;

    /// Whether an admission may come with a delay to sleep through (the
    /// leaky bucket's delay mode): with a deadline, such gates are probed
    /// before the admission, so that a delayed slot past the deadline is
    /// refused without being reserved.
    fn reserves_delay(&self) -> bool {
        false
    }

    /// Whether a caller may consult at once when nobody is queued. The
    /// outbound guard says no while it paces below its limits, so that only
    /// the head touches its pacing state.
    fn fast_path(&self) -> bool {
        true
    }
}

/// A denial's retry time as a step; `u64::MAX` means never.
///
/// The fast path's functions (this one, `consult`, `fast_path_async`, the
/// gates' `attempt`) are always inlined and the queued path kept out of
/// line: without those attributes a `Pacer::wait` with a free slot takes
/// 131 instructions instead of 86, and `Pacer::until_ready` 159 instead of
/// 124 (`measure/wait_instructions.rs`, callgrind, builds with and
/// without them).
#[inline(always)]
pub(crate) fn step_of(decision: Decision) -> Result<Step, WaitError> {
    if decision.is_allowed() {
        Ok(Step::Pass(decision))
    } else if decision.retry_after_nanos() == u64::MAX {
        Err(WaitError::NeverReady)
    } else {
        // A denial with a zero retry time (a concurrent caller took the slot
        // at the very moment it freed) retries after 1 ns rather than
        // spinning on the same instant.
        Ok(Step::Wait(decision.retry_after_nanos().max(1)))
    }
}

/// Consults the gate, probing first where an admission could reserve a
/// delayed slot past the deadline. `budget`: nanoseconds left before the
/// deadline, `None` without one.
#[inline(always)]
fn consult<G: Gate + ?Sized>(gate: &G, cost: u32, budget: Option<u64>) -> Result<Step, WaitError> {
    if let Some(budget) = budget
        && gate.reserves_delay()
    {
        match gate.probe(cost)? {
            Step::Pass(d) if d.delay_nanos() > budget => {
                return Err(WaitError::DeadlineExceeded {
                    ready_in: d.delay(),
                });
            }
            Step::Pass(_) => {}
            wait @ Step::Wait(_) => return Ok(wait),
        }
    }
    gate.attempt(cost)
}

/// How long to sleep for a wait of `wait` ns: `wait` plus jitter, but never
/// past the deadline because of the jitter alone.
fn sleep_for(wait: u64, budget: Option<u64>, jitter: &Jitter) -> Duration {
    let wait = Duration::from_nanos(wait);
    let jittered = wait.saturating_add(jitter.sample());
    match budget {
        Some(budget) => jittered.min(Duration::from_nanos(budget)).max(wait),
        None => jittered,
    }
}

/// Nanoseconds left before `deadline`; reads the clock only when there is
/// one (a free slot without a deadline costs no clock read here).
#[inline]
fn budget_of(deadline: Option<Instant>) -> Option<u64> {
    deadline.map(|d| crate::clock::duration_to_nanos(d.saturating_duration_since(Instant::now())))
}

/// Blocking wait. `deadline` is on the standard clock.
///
/// `idle`: whether nobody is queued (the fast path's hint); `join` takes a
/// place in the queue.
#[inline]
pub(crate) fn wait_blocking<G: Gate + ?Sized, P: AsRef<Place>>(
    gate: &G,
    idle: bool,
    join: impl FnOnce() -> P,
    cost: u32,
    deadline: Option<Instant>,
    jitter: &Jitter,
) -> Result<Decision, WaitError> {
    let mut learned = None;
    if idle && gate.fast_path() {
        match consult(gate, cost, budget_of(deadline))? {
            Step::Pass(d) if d.delay_nanos() == 0 => return Ok(d),
            Step::Pass(d) => return Ok(finish_blocking(d)),
            Step::Wait(wait) => learned = Some(wait),
        }
    }
    wait_blocking_queued(gate, join, cost, deadline, jitter, learned)
}

/// The queued path of [`wait_blocking`], out of line so the fast path stays
/// small enough to inline into its callers.
#[cold]
#[inline(never)]
fn wait_blocking_queued<G: Gate + ?Sized, P: AsRef<Place>>(
    gate: &G,
    join: impl FnOnce() -> P,
    cost: u32,
    deadline: Option<Instant>,
    jitter: &Jitter,
    mut learned: Option<u64>,
) -> Result<Decision, WaitError> {
    let place = join();
    if place.as_ref().ahead() > 0 {
        // What the fast path learned is stale by the time this waiter is
        // head.
        learned = None;
        if !place.as_ref().wait_head_blocking(deadline) {
            return Err(WaitError::QueuedAtDeadline {
                ahead: place.as_ref().ahead(),
            });
        }
    }
    loop {
        let budget = budget_of(deadline);
        let wait = match learned.take() {
            Some(wait) => wait,
            None => match consult(gate, cost, budget)? {
                Step::Pass(d) => {
                    drop(place);
                    return Ok(finish_blocking(d));
                }
                Step::Wait(wait) => wait,
            },
        };
        if let Some(budget) = budget
            && wait > budget
        {
            return Err(WaitError::DeadlineExceeded {
                ready_in: Duration::from_nanos(wait),
            });
        }
        std::thread::sleep(sleep_for(wait, budget, jitter));
    }
}

fn finish_blocking(decision: Decision) -> Decision {
    if decision.delay_nanos() > 0 {
        std::thread::sleep(decision.delay());
    }
    decision
}

/// Async wait on tokio's timer. `deadline` is on tokio's clock.
///
/// The fast path runs in this small future; the waiting loop, whose state
/// (a timer, a queue place) is several times larger, is boxed and only
/// allocated when the caller must wait, so that a free slot costs little
/// more than a check.
#[cfg(feature = "tokio")]
pub(crate) async fn wait_async<G: Gate + ?Sized, P: AsRef<Place>>(
    gate: &G,
    idle: bool,
    join: impl FnOnce() -> P,
    cost: u32,
    deadline: Option<tokio::time::Instant>,
    jitter: &Jitter,
) -> Result<Decision, WaitError> {
    let mut learned = None;
    if idle && gate.fast_path() {
        let budget = deadline.map(|d| async_budget(d, tokio::time::Instant::now()));
        match consult(gate, cost, budget)? {
            Step::Pass(d) if d.delay_nanos() == 0 => return Ok(d),
            Step::Pass(d) => return Ok(finish_async(d).await),
            Step::Wait(wait) => learned = Some(wait),
        }
    }
    Box::pin(wait_async_queued(
        gate, join, cost, deadline, jitter, learned,
    ))
    .await
}

/// The queued part of [`wait_async`].
/// The fast path of an async wait, run on its first poll: with nobody
/// queued, one consultation. `Ready` when it decided (an admission without
/// delay, or an error), else what the consultation learned for the queued
/// path (`Some(wait)`) or nothing (`None`: the queue was busy, or an
/// admission must still sleep through its delay, returned as `Err(d)`).
#[cfg(feature = "tokio")]
pub(crate) enum FastPath {
    Done(Result<Decision, WaitError>),
    Delay(Decision),
    Queue(Option<u64>),
}

#[cfg(feature = "tokio")]
#[inline(always)]
pub(crate) fn fast_path_async<G: Gate + ?Sized>(
    gate: &G,
    idle: bool,
    cost: u32,
    deadline: Option<tokio::time::Instant>,
) -> FastPath {
    if !(idle && gate.fast_path()) {
        return FastPath::Queue(None);
    }
    let budget = deadline.map(|d| async_budget(d, tokio::time::Instant::now()));
    match consult(gate, cost, budget) {
        Err(e) => FastPath::Done(Err(e)),
        Ok(Step::Pass(d)) if d.delay_nanos() == 0 => FastPath::Done(Ok(d)),
        Ok(Step::Pass(d)) => FastPath::Delay(d),
        Ok(Step::Wait(wait)) => FastPath::Queue(Some(wait)),
    }
}

/// The sleep through an admitted request's delay (leaky bucket, delay mode).
#[cfg(feature = "tokio")]
pub(crate) async fn finish_delay(decision: Decision) -> Result<Decision, WaitError> {
    Ok(finish_async(decision).await)
}

#[cfg(feature = "tokio")]
pub(crate) async fn wait_async_queued<G: Gate + ?Sized, P: AsRef<Place>>(
    gate: &G,
    join: impl FnOnce() -> P,
    cost: u32,
    deadline: Option<tokio::time::Instant>,
    jitter: &Jitter,
    mut learned: Option<u64>,
) -> Result<Decision, WaitError> {
    use super::queue::Head;
    let budget_now = || deadline.map(|d| async_budget(d, tokio::time::Instant::now()));
    let place = join();
    if place.as_ref().ahead() > 0 {
        learned = None;
        match deadline {
            None => Head(place.as_ref()).await,
            Some(deadline) => {
                if tokio::time::timeout_at(deadline, Head(place.as_ref()))
                    .await
                    .is_err()
                {
                    return Err(WaitError::QueuedAtDeadline {
                        ahead: place.as_ref().ahead(),
                    });
                }
            }
        }
    }
    loop {
        let budget = budget_now();
        let wait = match learned.take() {
            Some(wait) => wait,
            None => match consult(gate, cost, budget)? {
                Step::Pass(d) => {
                    drop(place);
                    return Ok(finish_async(d).await);
                }
                Step::Wait(wait) => wait,
            },
        };
        if let Some(budget) = budget
            && wait > budget
        {
            return Err(WaitError::DeadlineExceeded {
                ready_in: Duration::from_nanos(wait),
            });
        }
        tokio::time::sleep(sleep_for(wait, budget, jitter)).await;
    }
}

#[cfg(feature = "tokio")]
fn async_budget(deadline: tokio::time::Instant, now: tokio::time::Instant) -> u64 {
    crate::clock::duration_to_nanos(deadline.saturating_duration_since(now))
}

#[cfg(feature = "tokio")]
async fn finish_async(decision: Decision) -> Decision {
    if decision.delay_nanos() > 0 {
        tokio::time::sleep(decision.delay()).await;
    }
    decision
}
