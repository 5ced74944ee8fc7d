//! How a key's local state and Redis exchange usage, per algorithm.
//!
//! The local state is the algorithm's own atomic word, decided on by the
//! algorithm's own `check`. Two more pieces per key make the sync work:
//!
//! * [`Pending`]: local admissions not yet sent. For the window algorithms
//!   two slots, one per window parity, each `window << 32 | units` (the
//!   window's low 32 bits), so admissions on both sides of a window boundary
//!   between two syncs keep their windows; the token bucket keeps a plain
//!   unit count instead.
//! * The fold: what other nodes admitted (Redis's total minus what this
//!   node already counted) is added into the state by compare-exchange, so
//!   admissions that raced with the sync are never lost.

use crate::Decision;
use crate::algorithm::{Algorithm, FixedWindow, SlidingWindowCounter, TokenBucket};
use crate::sync::{AtomicU64, Ordering};

/// The algorithm behind a synced limiter, as the sync needs to see it.
#[derive(Debug, Clone, Copy)]
pub enum Shape<'a> {
    /// One count per window.
    Fixed(&'a FixedWindow),
    /// Counts of the current and the previous window.
    Sliding(&'a SlidingWindowCounter),
    /// A theoretical arrival time.
    Bucket(&'a TokenBucket),
}

/// The algorithms a synced limiter supports (sealed: implemented here only).
pub trait Sealed: Algorithm<State = AtomicU64> {
    /// This algorithm as the sync sees it.
    fn shape(&self) -> Shape<'_>;
}

impl Sealed for FixedWindow {
    fn shape(&self) -> Shape<'_> {
        Shape::Fixed(self)
    }
}

impl Sealed for SlidingWindowCounter {
    fn shape(&self) -> Shape<'_> {
        Shape::Sliding(self)
    }
}

impl Sealed for TokenBucket {
    fn shape(&self) -> Shape<'_> {
        Shape::Bucket(self)
    }
}

impl Shape<'_> {
    /// Whether usage is counted per window (else: a token bucket TAT).
    pub(crate) fn windowed(self) -> bool {
        !matches!(self, Shape::Bucket(_))
    }

    /// How many windows before the current one still weigh in a decision.
    pub(crate) fn lookback(self) -> u64 {
        match self {
            Shape::Sliding(_) => 1,
            Shape::Fixed(_) | Shape::Bucket(_) => 0,
        }
    }

    /// The window in which an admitted request of non-zero cost was
    /// counted, read from its decision: the algorithm's `check` counts in
    /// the state's window (which may be later than `now`'s if another
    /// thread already moved on), and reports `reset_after` to the end of
    /// that window (fixed window) or of the next one (sliding window
    /// counter).
    ///
    /// A saturated `reset_after` means that end lies beyond `u64::MAX`
    /// nanoseconds, which only the last window (fixed) or the last two
    /// (sliding) reach: the result is then the last window, or the one
    /// before for the sliding window counter (off by one at most, at the
    /// end of the clock's range).
    pub(crate) fn admitted_window(self, period: u64, now: u64, decision: &Decision) -> u64 {
        let reset = decision.reset_after_nanos();
        let windows_after: u64 = match self {
            Shape::Fixed(_) => 1,
            Shape::Sliding(_) => 2,
            Shape::Bucket(_) => return 0,
        };
        if reset == u64::MAX {
            return (u64::MAX / period).saturating_sub(windows_after - 1);
        }
        let end = u128::from(now) + u128::from(reset);
        // end = (window + windows_after) x period exactly, and the window
        // is one the clock can reach, so the result fits.
        u64::try_from((end / u128::from(period)).saturating_sub(u128::from(windows_after)))
            .unwrap_or(now / period)
    }

    /// Adds `others` units that other nodes admitted in `window` to the
    /// state, each count clamped to `limit` (beyond it every request is
    /// denied anyway). `now` only resolves the fixed window's truncated
    /// window tag and must be within 2^31 windows of `window`.
    ///
    /// * Fixed window: added to the count if the state is in `window`; a
    ///   state in an earlier window (or fresh) moves to `window` with
    ///   `others`; a state already in a later window is left alone (the
    ///   count of `window` no longer matters).
    /// * Sliding window counter: added to the current count if the state
    ///   is in `window`, to the previous count if it is in the next window;
    ///   an older state moves to `window` first, as the algorithm would.
    pub(crate) fn fold_window(
        self,
        state: &AtomicU64,
        now: u64,
        window: u64,
        others: u64,
        limit: u64,
    ) {
        if others == 0 {
            return;
        }
        // Relaxed throughout, as in the algorithms' own `check`: the word is
        // self-contained, and the compare-exchange makes read-modify-write
        // atomic against concurrent checks (a failure retries on the value
        // it observed), so no local admission is lost.
        let mut word = state.load(Ordering::Relaxed);
        loop {
            let new = match self {
                Shape::Fixed(fw) => {
                    let (stored, count) = fw.stored(word, now);
                    if count == 0 || stored < window {
                        fw.word(window, others.min(limit))
                    } else if stored == window {
                        fw.word(window, (count + others).min(limit))
                    } else {
                        return;
                    }
                }
                Shape::Sliding(swc) => {
                    let mut counts = swc.counts_at(word, window);
                    if counts.window == window {
                        counts.current = (counts.current + others).min(limit);
                    } else if counts.window == window + 1 {
                        counts.previous = (counts.previous + others).min(limit);
                    } else {
                        return;
                    }
                    swc.pack(counts)
                }
                Shape::Bucket(_) => return,
            };
            if new == word {
                return;
            }
            match state.compare_exchange_weak(word, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(observed) => word = observed,
            }
        }
    }
}

/// The token bucket's fold: the local TAT becomes at least `global` (the
/// TAT Redis returned, which covers every node's debt and this node's up to
/// the sync), plus what this node admitted since the sync started: its
/// local TAT's advance beyond `reference`, the larger of the TAT sent and
/// the time of the sync (an advance up to that time is refill, not use).
pub(crate) fn fold_tat(state: &AtomicU64, global: u64, reference: u64) {
    // Relaxed: see `fold_window`.
    let mut tat = state.load(Ordering::Relaxed);
    loop {
        let new = tat.max(global.saturating_add(tat.saturating_sub(reference)));
        if new == tat {
            return;
        }
        match state.compare_exchange_weak(tat, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(observed) => tat = observed,
        }
    }
}

const TAG_MASK: u64 = u32::MAX as u64;

/// The low 32 bits of a window index, as kept in a slot.
fn tag(window: u64) -> u64 {
    window & TAG_MASK
}

/// The window near `near` whose low 32 bits are `tag` (within 2^31).
fn untag(tag: u64, near: u64) -> u64 {
    // The signed distance in 32-bit arithmetic.
    let diff = (tag.wrapping_sub(near) & TAG_MASK) as u32 as i32;
    near.wrapping_add_signed(i64::from(diff))
}

/// Whether the 32-bit tag `a` stands for a later window than `b`.
fn later(a: u64, b: u64) -> bool {
    ((a.wrapping_sub(b) & TAG_MASK) as u32 as i32) > 0
}

/// Local admissions not yet sent to Redis, per window: two slots, for
/// windows of each parity, each `tag << 32 | units` with `tag` the window's
/// low 32 bits. Units per window never exceed the limit (a `u32`), since
/// the local state counts them too.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    slots: [AtomicU64; 2],
}

impl Pending {
    /// Records `units` admitted in `window`. A slot still holding an older
    /// window of the same parity (two or more windows back: no decision
    /// looks at it any more) is overwritten; units for a window older than
    /// the slot's are dropped for the same reason.
    pub(crate) fn add(&self, window: u64, units: u64) {
        if units == 0 {
            return;
        }
        let slot = &self.slots[(window & 1) as usize];
        let want = tag(window);
        // Relaxed: the slot is self-contained; the sync takes it with a
        // read-modify-write, which sees every add before it in the slot's
        // modification order, and an add after it stays for the next sync.
        let mut word = slot.load(Ordering::Relaxed);
        loop {
            let (have, held) = (word >> 32, word & TAG_MASK);
            let new = if held == 0 || later(want, have) {
                (want << 32) | units.min(TAG_MASK)
            } else if have == want {
                (want << 32) | (held + units).min(TAG_MASK)
            } else {
                return;
            };
            match slot.compare_exchange_weak(word, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(observed) => word = observed,
            }
        }
    }

    /// Takes every pending unit, as `(window, units)` pairs with windows
    /// resolved near `current`.
    pub(crate) fn take(&self, current: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.slots.iter().filter_map(move |slot| {
            // Relaxed: see `add`. The tag stays so concurrent adds of the
            // same window keep adding to it.
            let mut word = slot.load(Ordering::Relaxed);
            loop {
                if word & TAG_MASK == 0 {
                    return None;
                }
                match slot.compare_exchange_weak(
                    word,
                    word & !TAG_MASK,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Some((untag(word >> 32, current), word & TAG_MASK)),
                    Err(observed) => word = observed,
                }
            }
        })
    }

    /// Whether no unit is pending.
    pub(crate) fn is_empty(&self) -> bool {
        // Relaxed: a hint for sweeps, which hold the key's map lock.
        self.slots
            .iter()
            .all(|slot| slot.load(Ordering::Relaxed) & TAG_MASK == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Quota;
    use std::time::Duration;

    fn quota(limit: u32, period: u64) -> Quota {
        Quota::with_period(limit, Duration::from_nanos(period)).unwrap()
    }

    /// The admitted window read from decisions is the window the state
    /// holds afterwards, for fresh, current, rolled-over and stepped-back
    /// states, and near the end of the clock.
    #[test]
    fn admitted_window_matches_the_state() {
        let fw = FixedWindow::from_quota(&quota(5, 100)).unwrap();
        let swc = SlidingWindowCounter::from_quota(&quota(5, 100)).unwrap();
        let times = [0, 1, 99, 100, 250, 399, 1_000, u64::MAX - 200, u64::MAX];
        for &first in &times {
            for &second in &times {
                let state = fw.new_state();
                for now in [first, second] {
                    let d = fw.check(&state, now, 1).unwrap();
                    if d.is_allowed() {
                        let w = fw.shape().admitted_window(100, now, &d);
                        let (stored, _) = fw.stored(state.load(Ordering::Relaxed), now);
                        assert_eq!(w, stored, "fixed {first} {second}");
                    }
                }
                let state = swc.new_state();
                for now in [first, second] {
                    let d = swc.check(&state, now, 1).unwrap();
                    if d.is_allowed() {
                        let w = swc.shape().admitted_window(100, now, &d);
                        let counts = swc.counts_at(state.load(Ordering::Relaxed), now / 100);
                        if d.reset_after_nanos() == u64::MAX {
                            assert!(counts.window - w <= 1, "sliding {first} {second}");
                        } else {
                            assert_eq!(w, counts.window, "sliding {first} {second}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn fixed_window_fold() {
        let fw = FixedWindow::from_quota(&quota(10, 100)).unwrap();
        let shape = fw.shape();
        let state = fw.new_state();
        // Fresh: the others' units start the window.
        shape.fold_window(&state, 250, 2, 3, 10);
        assert_eq!(fw.peek(&state, 250, 1).unwrap().remaining(), 6);
        assert!(fw.check(&state, 260, 2).unwrap().is_allowed());
        shape.fold_window(&state, 270, 2, 4, 10);
        assert_eq!(fw.peek(&state, 270, 1).unwrap().remaining(), 0);
        // Clamped at the limit: full, never over.
        shape.fold_window(&state, 270, 2, 50, 10);
        let d = fw.check(&state, 270, 1).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(d.remaining(), 0);
        // An older window no longer matters; a newer one replaces.
        shape.fold_window(&state, 270, 1, 5, 10);
        assert_eq!(fw.stored(state.load(Ordering::Relaxed), 270), (2, 10));
        shape.fold_window(&state, 310, 3, 4, 10);
        assert_eq!(fw.stored(state.load(Ordering::Relaxed), 310), (3, 4));
    }

    #[test]
    fn sliding_window_fold() {
        let swc = SlidingWindowCounter::from_quota(&quota(10, 100)).unwrap();
        let shape = swc.shape();
        let state = swc.new_state();
        assert!(swc.check(&state, 150, 2).unwrap().is_allowed());
        // Others: 4 in window 1 (the state's), then 3 in window 2, which
        // rolls the state over: previous = 6, current = 3.
        shape.fold_window(&state, 150, 1, 4, 10);
        shape.fold_window(&state, 200, 2, 3, 10);
        let counts = swc.counts_at(state.load(Ordering::Relaxed), 2);
        assert_eq!((counts.window, counts.previous, counts.current), (2, 6, 3));
        // Late news about window 1 lands in the previous count.
        shape.fold_window(&state, 200, 1, 2, 10);
        let counts = swc.counts_at(state.load(Ordering::Relaxed), 2);
        assert_eq!((counts.previous, counts.current), (8, 3));
        // At 250: ceil(8 x 50 / 100) + 3 = 7 of 10; one more leaves 2.
        assert_eq!(swc.peek(&state, 250, 1).unwrap().remaining(), 2);
        // Two windows back: ignored.
        shape.fold_window(&state, 200, 0, 9, 10);
        assert_eq!(swc.counts_at(state.load(Ordering::Relaxed), 2), counts);
    }

    #[test]
    fn token_bucket_fold() {
        let state = AtomicU64::new(1_000);
        // Redis knows more (2_500); nothing admitted since the sync.
        fold_tat(&state, 2_500, 1_000);
        assert_eq!(state.load(Ordering::Relaxed), 2_500);
        // Admitted 300 ns of cost since a sync that sent 2_500 at time
        // 2_000: Redis says 4_000, so 4_300.
        state.store(2_800, Ordering::Relaxed);
        fold_tat(&state, 4_000, 2_500);
        assert_eq!(state.load(Ordering::Relaxed), 4_300);
        // The bucket had refilled by the sync (reference: the sync's time,
        // 900): 50 ns of cost admitted since count on top of Redis's TAT.
        state.store(950, Ordering::Relaxed);
        fold_tat(&state, 2_000, 900);
        assert_eq!(state.load(Ordering::Relaxed), 2_050);
        // Never backwards.
        fold_tat(&state, 10, 2_050);
        assert_eq!(state.load(Ordering::Relaxed), 2_050);
    }

    #[test]
    fn pending_keeps_windows_apart() {
        let pending = Pending::default();
        assert!(pending.is_empty());
        pending.add(7, 2);
        pending.add(8, 1);
        pending.add(7, 3);
        let mut taken: Vec<_> = pending.take(8).collect();
        taken.sort_unstable();
        assert_eq!(taken, [(7, 5), (8, 1)]);
        assert!(pending.is_empty());
        // A slot two windows old is overwritten; late units for an older
        // window than the slot's are dropped.
        pending.add(9, 4);
        pending.add(11, 1);
        pending.add(9, 4);
        assert_eq!(pending.take(11).collect::<Vec<_>>(), [(11, 1)]);
        // Tags wrap at 2^32 windows and resolve near the current window.
        let far = (1u64 << 32) + 3;
        pending.add(far, 2);
        pending.add(far - 4, 9);
        assert_eq!(pending.take(far).collect::<Vec<_>>(), [(far, 2)]);
        assert_eq!(untag(tag(far - 1), far), far - 1);
        assert_eq!(untag(tag(far + 1), far), far + 1);
    }
}
