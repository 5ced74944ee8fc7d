//! Sliding window log: the exact sliding window.
//!
//! The log keeps the time and cost of every admitted request that may still
//! be inside the window, and admits a request of cost `c` at `now` only if
//! the costs admitted in the last period, plus `c`, stay within the limit.
//! Unlike a fixed window it has no boundary burst: no window of one period,
//! wherever it is placed, ever holds more than `limit`. This is the "sliding
//! log" of the rate-limiting literature (Figma engineering, "An alternative
//! approach to rate limiting", 2017; Alex Xu, *System Design Interview*,
//! ch. 4), paid for with memory proportional to the limit.
//!
//! # Window boundary
//!
//! The window at `now` is the half-open interval `(now - period, now]`: a
//! request admitted at `t` counts until `t + period` and no longer at
//! `t + period` itself. With a limit of 1 per second, requests at 0 s and at
//! exactly 1 s both pass. A request's slot is therefore free again exactly
//! one period after it was taken, which is also what `retry_after` and
//! `reset_after` report.
//!
//! # Why a lock
//!
//! The log is many words (a ring of entries plus a running sum), and one
//! compare-exchange can only replace one word, so the read-decide-append
//! cannot be made atomic with a CAS as the one-word algorithms do. A
//! lock-free multi-word log (per-slot sequence numbers, or copy-on-write
//! snapshots) would cost more per check than the few instructions the lock
//! guards. Each key's log has its own lock, held while expired entries are
//! dropped, the sum is compared and one entry is appended: O(1) amortised
//! for an admission; a denial also walks the entries that must expire
//! before the request fits (at most its cost many).
//!
//! The lock is the sequence word of the summary below: a check takes it
//! with one compare-exchange (from the word it has just read for a denial
//! without the lock) and releases it with a plain store that also
//! publishes the summary. An uncontended admission thus pays one
//! read-modify-write, as the one-word algorithms do; a general-purpose
//! mutex adds a second to release. Paired builds, the log behind
//! `parking_lot`'s raw mutex (the summary still published under its
//! sequence number) against this lock: `keyed_hit/sliding_window_log/1k_keys`
//! 31.8 ns against 28.1, `direct_allow/sliding_window_log/manual` 20.4
//! against 15.5 (`cargo bench --bench keyed`, `--bench direct`). A
//! thread that finds the lock held spins briefly, then yields its CPU on
//! each try (`crossbeam_utils::Backoff`): the critical section is a handful
//! of loads and stores, with no call out and no system call, so parking
//! the thread would cost more than the wait. While the ring grows (at most
//! `log2(limit)` times per key, by doubling) it also holds one
//! reallocation of the ring, and a snapshot holds it while it copies the
//! log out.
//!
//! # Denials without the lock
//!
//! A full log denies every request until its oldest entry leaves, and under
//! a flood that is what most checks are. After every change the lock holder
//! publishes a summary (the costs used, the oldest and the newest entry's
//! times) under a sequence lock. A check that reads a consistent summary,
//! whose oldest entry is still in the window at its reading, and whose cost
//! would fit with one more unit free (the oldest entry's leaving frees at
//! least that), is denied from the summary alone: the decision is the one
//! the locked path would make, field for field, with loads only. Anything
//! else (an admission, an expiry, a larger shortfall, a torn read) takes the
//! lock.

use super::{Algorithm, check_cost};
use crate::sync::{AtomicU64, Backoff, LockWait, MutPtr, Ordering, UnsafeCell};
use crate::{CheckError, Decision, Quota, QuotaError};
use entries::{Entries, Entry};
use std::mem::ManuallyDrop;

/// Sliding window log: at most `limit` per period in *every* window of one
/// period, exactly (windows are `(now - period, now]`).
///
/// The quota's burst does not apply: the most that can pass at once is the
/// limit.
///
/// State: one [`WindowLog`] per key, a lock-guarded ring buffer of
/// `(time, cost)` entries, one per distinct admission time (requests
/// admitted in the same nanosecond share an entry). Every entry has a cost of
/// at least 1 and the costs in the log sum to at most `limit`, so the ring
/// never holds more than `limit` entries.
///
/// # Refund
///
/// A refund takes `cost` off the *oldest* entries still in the window, the
/// ones that would leave it first. It frees `cost` at once, and at every
/// later time the log holds at least what it would hold had the refunded
/// request never been admitted (taking the newest entries instead would free
/// room early). Unlike the one-word algorithms it runs under the log's lock,
/// as a check does.
///
/// # Memory per key
///
/// On a 64-bit target, 80 bytes inline (the ring's header, which holds the
/// first entry itself, the running sum and the latest reading, and the four
/// words of the denial's summary, one of which is the lock) plus 16 bytes
/// per ring slot on the heap. A key with one admission time in its window
/// (a client seen once; any key of a limit of 1) allocates nothing; a
/// second entry at a distinct time allocates the ring, which grows only as
/// requests arrive, doubling from 4 slots and capped at `limit` slots: at
/// most `80 + 16 x limit` bytes, reached only when `limit` requests at
/// distinct times fall in one window. A key whose log has emptied is idle, and a
/// keyed limiter's sweep frees it entirely.
///
/// # Time going backwards
///
/// A `now` earlier than the latest one a check has seen counts as that
/// latest time (no time elapsed): admissions are recorded at it, and entries
/// dropped as expired at it stay dropped, so a step back can never reopen a
/// window. The limit holds in every window of the recorded times.
///
/// `retry_after` and `reset_after` stay measured from the `now` given, so
/// they include the step back.
///
/// Checks on different threads share the latest reading through a word
/// raised with plain stores (denials without the lock read and write it;
/// see the module docs), so two checks racing on different threads may
/// leave the earlier of their readings there. A later check on a clock
/// that stepped back may then be recorded at that earlier reading, or be
/// denied without the lock where the lock holder would have dropped an
/// entry: it is still no earlier than any reading that dropped an entry or
/// admitted one (the lock holder keeps that reading itself), so no window
/// reopens and the limit holds as above. A snapshot saves the latest
/// reading of either kind.
///
/// The summary's sequence number has 32 bits: a reader would have to stall
/// between its two reads of it across 2^31 publications (tens of seconds of
/// admissions to one key) to take a torn summary for a whole one.
///
/// # Extremes
///
/// An entry admitted less than one period before `u64::MAX` nanoseconds
/// (584 years) never leaves the window, since the clock cannot reach its
/// expiry. Durations are computed exactly and saturate at `u64::MAX`.
///
/// # Examples
///
/// ```
/// use rategate::{ManualClock, Quota, RateLimiter, SlidingWindowLog};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let limiter =
///     RateLimiter::<SlidingWindowLog, _>::with_clock(Quota::per_minute(2)?, clock.clone())?;
/// assert!(limiter.check().is_allowed()); // t = 0 s
/// clock.advance(Duration::from_secs(40));
/// assert!(limiter.check().is_allowed()); // t = 40 s
/// let denied = limiter.check();
/// assert!(!denied.is_allowed());
/// // The first slot frees when the request at 0 s leaves the window.
/// assert_eq!(denied.retry_after(), Duration::from_secs(20));
/// clock.advance(Duration::from_secs(20));
/// assert!(limiter.check().is_allowed()); // t = 60 s: (0 s, 60 s] holds one
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindowLog {
    /// The most cost admitted in any window, at least 1.
    limit: u32,
    /// The window length in nanoseconds, at least 1.
    period: u64,
}

/// The [`SlidingWindowLog`]'s per-key state: the log of admitted requests
/// still in the window, behind a short-held lock.
///
/// # Examples
///
/// ```
/// use rategate::algorithm::{Algorithm, SlidingWindowLog, WindowLog};
/// use rategate::Quota;
///
/// let log = SlidingWindowLog::from_quota(&Quota::per_second(3)?)?;
/// let state: WindowLog = log.new_state();
/// assert!(log.check(&state, 0, 2)?.is_allowed());
/// // One left: a request of cost 1 now would take it.
/// assert_eq!(log.peek(&state, 0, 1)?.remaining(), 0);
/// assert!(!log.is_idle(&state, 999_999_999));
/// assert!(log.is_idle(&state, 1_000_000_000));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct WindowLog {
    /// The log's summary for denials without the lock, whose sequence word
    /// is also the lock.
    hint: Hint,
    /// The log, reached only through a [`LogGuard`].
    log: UnsafeCell<Log>,
    /// How a check waits for the lock (zero-sized but under loom).
    wait: LockWait,
}

// SAFETY: `log` is only reached through a `LogGuard`, and a guard exists
// only between a compare-exchange that made the summary's sequence odd and
// the store that makes it even again (`WindowLog::lock_from`, `LogGuard`'s
// drop): one guard per log at a time, with the Acquire of the one and the
// Release of the other ordering each holder's accesses after the previous
// holder's. The rest of the state is atomics.
unsafe impl Sync for WindowLog {}

impl std::fmt::Debug for WindowLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The summary only: the log itself is behind the lock.
        let word = self.hint.seq_used.load(Ordering::Relaxed);
        f.debug_struct("WindowLog")
            .field("used", &(word as u32))
            .field("locked", &(word & LOCKED != 0))
            .field("seen", &self.hint.seen.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The low bit of the summary's sequence number, in its word: set while a
/// thread holds the log's lock.
const LOCKED: u64 = 1 << 32;

/// A summary of the log, published by the lock holder under a sequence
/// lock, from which a check can deny a request without the lock.
///
/// The sequence number is even when the words are stable and odd while a
/// thread holds the log's lock (and may rewrite them): making it odd with a
/// compare-exchange *is* taking the lock, so a check that takes it pays one
/// read-modify-write, and its release is a plain store of the next even
/// number. A state starts with its log's summary (all zeros for a new
/// log), since a release that changed nothing rewrites only `used`.
#[derive(Debug)]
struct Hint {
    /// The sequence number in the high 32 bits, `used` in the low 32.
    seq_used: AtomicU64,
    /// The oldest live entry's time.
    oldest: AtomicU64,
    /// The newest entry's time.
    newest: AtomicU64,
    /// The log's clock as checks see it: the latest reading any check has
    /// seen, with or without the lock (see "Time going backwards"). Raised
    /// by plain stores outside the sequence lock; the lock holder also
    /// keeps its own `Log::latest`, which no racing store can lower.
    seen: AtomicU64,
}

impl WindowLog {
    /// A state holding `log` (new, or restored from a snapshot), its
    /// summary published: every later release rewrites the sequence word
    /// with `used` but the ends only after a change, so the summary must
    /// describe the log from the start. `seen` starts at the log's clock, as
    /// a lock holder leaves it.
    fn with_log(log: Log) -> WindowLog {
        let (oldest, newest) = log.ends();
        let hint = Hint {
            seq_used: AtomicU64::new(u64::from(log.used)),
            oldest: AtomicU64::new(oldest),
            newest: AtomicU64::new(newest),
            seen: AtomicU64::new(log.latest),
        };
        WindowLog {
            hint,
            log: UnsafeCell::new(log),
            wait: LockWait::default(),
        }
    }

    /// Takes the log's lock.
    fn lock(&self) -> LogGuard<'_> {
        // Relaxed: only a guess at the word; the compare-exchange decides.
        self.lock_from(self.hint.seq_used.load(Ordering::Relaxed))
    }

    /// Takes the log's lock, trying first from `word`, the summary's word
    /// as the caller last read it (a check has just read it for a denial
    /// without the lock: the uncontended lock is then one compare-exchange
    /// and no further load).
    ///
    /// A thread that finds the lock held waits with [`Backoff`]: a few
    /// spins, then a yield of its CPU per try. A check holds the lock for
    /// a handful of loads and stores (and, while the ring grows, one
    /// reallocation of at most `limit` entries); a snapshot holds it while
    /// it copies the log out (12 bytes per entry).
    #[inline(always)]
    fn lock_from(&self, mut word: u64) -> LogGuard<'_> {
        let backoff = Backoff::new();
        loop {
            if word & LOCKED == 0 {
                // Acquire: pairs with the Release store that released the
                // lock, so this holder sees the log as the last one left it.
                // Relaxed on failure: nothing is read through a failure.
                match self.hint.seq_used.compare_exchange(
                    word,
                    word | LOCKED,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        return LogGuard {
                            hint: &self.hint,
                            wait: &self.wait,
                            log: ManuallyDrop::new(self.log.get_mut()),
                            seq: (word >> 32) as u32 | 1,
                            changed: false,
                        };
                    }
                    Err(now) => word = now,
                }
                if word & LOCKED == 0 {
                    // Another thread took and released it meanwhile.
                    continue;
                }
            }
            word = self.wait.wait(&self.hint.seq_used, word, &backoff);
        }
    }

    /// The log's clock at a check: its latest reading, or a later one a
    /// denial without the lock has seen.
    #[inline]
    fn latest(&self, log: &Log) -> u64 {
        // Relaxed: any value stored is some denial's reading, each of which
        // may count; nothing else is read through it.
        log.latest.max(self.hint.seen.load(Ordering::Relaxed))
    }
}

/// The log's lock, held: the log through `Deref`; dropping it publishes
/// the summary (its ends only if [`publish`](LogGuard::publish) was called)
/// and releases the lock.
struct LogGuard<'a> {
    hint: &'a Hint,
    wait: &'a LockWait,
    /// The log; dropped (under loom: its access ends) before the release.
    log: ManuallyDrop<MutPtr<Log>>,
    /// The sequence number the lock set (odd).
    seq: u32,
    /// Whether the log's ends may have changed since the lock was taken.
    changed: bool,
}

impl LogGuard<'_> {
    /// Marks the log as changed: the summary's oldest and newest times are
    /// rewritten on release.
    fn publish(&mut self) {
        self.changed = true;
    }
}

impl std::ops::Deref for LogGuard<'_> {
    type Target = Log;

    fn deref(&self) -> &Log {
        // SAFETY: the guard holds the lock (see `WindowLog`'s `Sync`).
        self.log.with(|log| unsafe { &*log })
    }
}

impl std::ops::DerefMut for LogGuard<'_> {
    fn deref_mut(&mut self) -> &mut Log {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference.
        self.log.with(|log| unsafe { &mut *log })
    }
}

impl Drop for LogGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        let hint = self.hint;
        let changed = self.changed;
        let log: &Log = self;
        if changed {
            let (oldest, newest) = log.ends();
            // Release: a reader whose Acquire load reads either word sees
            // the odd number the lock set when it re-reads the sequence,
            // and discards what it read.
            hint.oldest.store(oldest, Ordering::Release);
            hint.newest.store(newest, Ordering::Release);
        }
        let used = log.used;
        // SAFETY: `self.log` is not used again; under loom this ends the
        // access to the cell, which must precede the release.
        unsafe { ManuallyDrop::drop(&mut self.log) };
        let next = self.seq.wrapping_add(1);
        // Release: releases the lock (the next holder's Acquire sees every
        // access to the log above), and a reader whose Acquire load sees
        // this even number sees the words above.
        hint.seq_used
            .store(u64::from(next) << 32 | u64::from(used), Ordering::Release);
        self.wait.wake();
    }
}

/// The log proper; see [`WindowLog`].
#[derive(Debug, Default)]
struct Log {
    /// Admissions, oldest first, at strictly increasing times (all at most
    /// `latest`), each with a cost of at least 1. Entries expired since the
    /// last check linger until the next one drops them; all were in the
    /// window at the last admission, so there are at most `limit` of them.
    entries: Entries,
    /// The sum of the entries' costs: at most `limit`.
    used: u32,
    /// The latest reading a check holding the lock has seen (0 if none).
    /// Entries were dropped as expired at this time, so an earlier reading
    /// counts as this one: it must not see a window the log no longer
    /// holds. The log's clock is this or, if later, `Hint::seen`.
    latest: u64,
}

impl Log {
    /// The summary's times: the oldest and the newest entry's (0 if none).
    fn ends(&self) -> (u64, u64) {
        let at = |entry: Option<&Entry>| entry.map_or(0, |e| e.at);
        (at(self.entries.front()), at(self.entries.back()))
    }
}

impl SlidingWindowLog {
    /// Nanoseconds from `now` until an entry admitted at `at` leaves the
    /// window (0 if it already has), computed exactly and saturated at
    /// `u64::MAX`.
    #[inline]
    fn until_expiry(&self, at: u64, now: u64) -> u64 {
        let expiry = u128::from(at) + u128::from(self.period);
        u64::try_from(expiry.saturating_sub(u128::from(now))).unwrap_or(u64::MAX)
    }

    /// Whether an entry admitted at `at` is out of the window at `now`
    /// (`now` is clamped to the log's latest reading, so `now >= at`).
    #[inline]
    fn expired(&self, at: u64, now: u64) -> bool {
        now - at >= self.period
    }

    /// The pure decision core: decide a request of `cost` (at most the
    /// limit) at `now` against `log`, whose clock reads `latest`, which is
    /// not modified (expired entries still in it are skipped). Returns the
    /// decision and, when admitted with a cost, the time to record it at.
    ///
    /// Always inlined: as a call it returned the decision through the stack
    /// in pieces the CPU could not forward to the loads reading it back
    /// (`cargo bench --bench direct`, `direct_deny/sliding_window_log/manual`:
    /// 3.7 ns against 9.0 with this function, `decide_on`,
    /// `deny_without_lock`, `lock_from` and `check` plain `#[inline]`).
    #[inline(always)]
    fn decide(&self, log: &Log, latest: u64, now: u64, cost: u32) -> (Decision, Option<u64>) {
        // One decision per kind of storage, so that the walk below runs on
        // the kind's own iterator.
        match &log.entries {
            Entries::Ring(ring) => {
                self.decide_on(ring.iter(), ring.back(), log.used, latest, now, cost)
            }
            Entries::Inline(entry) => {
                self.decide_on(entry.iter(), entry.as_ref(), log.used, latest, now, cost)
            }
        }
    }

    /// [`decide`](Self::decide) on the log's entries, oldest first, with
    /// its newest entry and `used`.
    #[inline(always)]
    fn decide_on<'a>(
        &self,
        entries: impl Iterator<Item = &'a Entry>,
        newest: Option<&Entry>,
        used: u32,
        latest: u64,
        now: u64,
        cost: u32,
    ) -> (Decision, Option<u64>) {
        let at = now.max(latest);
        let mut live = entries.peekable();
        let mut used = used;
        while let Some(entry) = live.next_if(|e| self.expired(e.at, at)) {
            used -= entry.cost;
        }
        // Both are at most the limit, a u32: no overflow in u64.
        let used = u64::from(used);
        let after = used + u64::from(cost);
        let limit = u64::from(self.limit);
        let newest = newest.filter(|e| !self.expired(e.at, at));
        // Cost 0 is a probe: admitted even over a limit cut at run time.
        if after <= limit || cost == 0 {
            let newest = if cost > 0 {
                Some(at)
            } else {
                newest.map(|e| e.at)
            };
            let reset = newest.map_or(0, |t| self.until_expiry(t, now));
            let decision = Decision::allow(self.limit, limit.saturating_sub(after) as u32, reset);
            (decision, (cost > 0).then_some(at))
        } else {
            // The oldest live entries must leave until `need` cost is freed;
            // the last of them to leave sets the retry time. The live entries
            // hold `used` > limit - cost = used - need, so the walk always
            // ends at an entry.
            let need = after - limit;
            let mut freed = 0;
            let mut retry = 0;
            for entry in live {
                freed += u64::from(entry.cost);
                if freed >= need {
                    retry = self.until_expiry(entry.at, now);
                    break;
                }
            }
            let reset = newest.map_or(0, |e| self.until_expiry(e.at, now));
            // After a run-time limit cut `used` may exceed the limit.
            let left = limit.saturating_sub(used) as u32;
            let decision = Decision::deny(self.limit, left, reset, retry);
            (decision, None)
        }
    }

    /// Moves the log's clock to `now` (if later) and drops the entries that
    /// are out of the window at the result; whether it dropped any.
    fn advance(&self, state: &WindowLog, log: &mut Log, now: u64) -> bool {
        let seen = state.hint.seen.load(Ordering::Relaxed);
        log.latest = log.latest.max(seen).max(now);
        if log.latest > seen {
            // The log's clock, for the expiry test of denials without the
            // lock. Relaxed: see `Hint::seen`.
            state.hint.seen.store(log.latest, Ordering::Relaxed);
        }
        let mut dropped = false;
        while let Some(oldest) = log.entries.front() {
            if !self.expired(oldest.at, log.latest) {
                break;
            }
            log.used -= oldest.cost;
            log.entries.pop_front();
            dropped = true;
        }
        dropped
    }

    /// Appends an admission of `cost` (at least 1) at `at`, the log's
    /// latest reading; same-time admissions share an entry.
    fn record(&self, log: &mut Log, at: u64, cost: u32) {
        // used + cost <= limit was just checked under the same lock.
        log.used += cost;
        if let Some(last) = log.entries.back_mut() {
            if last.at == at {
                last.cost += cost;
                return;
            }
        }
        log.entries.push_back(Entry { at, cost }, self.limit);
    }
}

impl SlidingWindowLog {
    /// The denial the locked path would make, from the log's summary alone,
    /// or `None` (take the lock) unless the summary is consistent, the
    /// request misses by exactly one unit, and the oldest entry is still in
    /// the window at `now`.
    ///
    /// The expiry test is made at the log's clock (`now`, or `seen` if
    /// later), as the locked path makes it, with the period in force (which
    /// an [`Adjustable`](super::Adjustable) log may have changed). The
    /// locked path would then drop no entry (entries are in time order and
    /// the oldest stays), keep `used`, and find the retry time at the oldest
    /// entry, whose cost of at least 1 frees the missing unit: the same
    /// decision, field for field.
    ///
    /// `seq_used` is the summary's word as the caller read it, with an
    /// Acquire load: it pairs with the Release store of an even number that
    /// released the lock, so the words read here are at least that
    /// publication's.
    #[inline(always)]
    fn deny_without_lock(
        &self,
        state: &WindowLog,
        seq_used: u64,
        now: u64,
        cost: u32,
    ) -> Option<Decision> {
        let hint = &state.hint;
        let used = seq_used as u32;
        // Both at most the limit, a u32: no overflow in u64.
        let after = u64::from(used) + u64::from(cost);
        let limit = u64::from(self.limit);
        // Most admissions leave here, before reading the rest.
        if after != limit + 1 {
            return None;
        }
        // Acquire: if either word comes from a later publication, the
        // re-read of the sequence below sees that publication's odd number
        // (or a later one), pairing with the publisher's Release stores.
        let oldest = hint.oldest.load(Ordering::Acquire);
        let newest = hint.newest.load(Ordering::Acquire);
        if seq_used & LOCKED != 0 || hint.seq_used.load(Ordering::Relaxed) != seq_used {
            return None;
        }
        // Relaxed: any value stored is some check's reading (see `seen`).
        let seen = hint.seen.load(Ordering::Relaxed);
        let at = now.max(seen);
        if self.expired(oldest, at.max(oldest)) {
            return None;
        }
        // The denial's reading becomes the log's clock if later. A plain
        // store: Relaxed, racing checks may leave the earlier reading (see
        // "Time going backwards" on the type); the summary's words do not
        // depend on it.
        if now > seen {
            hint.seen.store(now, Ordering::Relaxed);
        }
        let retry = self.until_expiry(oldest, now);
        let reset = self.until_expiry(newest, now);
        // After a run-time limit cut `used` may exceed the limit.
        let left = limit.saturating_sub(u64::from(used)) as u32;
        Some(Decision::deny(self.limit, left, reset, retry))
    }

    /// Appends the log (see [`Snapshot`](crate::snapshot::Snapshot)):
    /// `latest` (u64), the number of entries (u32), then each entry's time
    /// (u64) and cost (u32), little-endian, oldest first.
    pub(crate) fn save_log(&self, state: &WindowLog, out: &mut Vec<u8>) {
        let log = state.lock();
        // The log's clock, with the readings of denials without the lock.
        out.extend(state.latest(&log).to_le_bytes());
        // At most `limit` entries, a u32.
        out.extend((log.entries.len() as u32).to_le_bytes());
        for entry in log.entries.iter() {
            out.extend(entry.at.to_le_bytes());
            out.extend(entry.cost.to_le_bytes());
        }
    }

    /// A log from [`save_log`](Self::save_log)'s bytes, taken at `then` and
    /// restored at `now`, its times moved with the clock; `None` if the
    /// bytes are not a log this limit could hold.
    pub(crate) fn load_log(&self, bytes: &[u8], then: u64, now: u64) -> Option<WindowLog> {
        let (latest, rest) = bytes.split_first_chunk::<8>()?;
        let (count, mut rest) = rest.split_first_chunk::<4>()?;
        let count = u32::from_le_bytes(*count);
        if count > self.limit || rest.len() != count as usize * 12 {
            return None;
        }
        let latest = u64::from_le_bytes(*latest);
        let mut log = Log {
            entries: Entries::with_capacity(count as usize),
            used: 0,
            latest: super::moved_time(latest, then, now),
        };
        let mut previous = None;
        while let Some((at, tail)) = rest.split_first_chunk::<8>() {
            let (cost, tail) = tail.split_first_chunk::<4>()?;
            let (at, cost) = (u64::from_le_bytes(*at), u32::from_le_bytes(*cost));
            // Times strictly increasing, at most `latest`; costs at least 1,
            // summing to at most the limit.
            if cost == 0 || at > latest || previous.is_some_and(|p| p >= at) {
                return None;
            }
            previous = Some(at);
            log.used = log.used.checked_add(cost).filter(|&u| u <= self.limit)?;
            // Times before the restoring clock's origin all become 0.
            let at = super::moved_time(at, then, now);
            match log.entries.back_mut() {
                Some(last) if last.at == at => last.cost += cost,
                _ => log.entries.push_back(Entry { at, cost }, self.limit),
            }
            rest = tail;
        }
        Some(WindowLog::with_log(log))
    }
}

impl Algorithm for SlidingWindowLog {
    /// The log of admitted requests; see [`WindowLog`].
    type State = WindowLog;

    fn from_quota(quota: &Quota) -> Result<Self, QuotaError> {
        let limit = quota.limit();
        // A ring of `limit` entries must be addressable (only a concern on
        // 16- and 32-bit targets); on 64-bit any u32 limit fits.
        let max = isize::MAX as usize / size_of::<Entry>();
        if !usize::try_from(limit).is_ok_and(|l| l <= max) {
            return Err(QuotaError::LimitTooLarge {
                limit: limit.into(),
                max: max as u64,
            });
        }
        Ok(SlidingWindowLog {
            limit,
            period: quota.period_nanos(),
        })
    }

    fn new_state(&self) -> WindowLog {
        WindowLog::with_log(Log::default())
    }

    // Always inlined, for the same reason as `decide`.
    #[inline(always)]
    fn check(&self, state: &WindowLog, now: u64, cost: u32) -> Result<Decision, CheckError> {
        if cost == 0 {
            // A probe: always admitted, and it must not move the log's clock
            // or drop entries, so it is a peek.
            return self.peek(state, now, 0);
        }
        check_cost(cost, self.limit)?;
        // Acquire: see `deny_without_lock`.
        let word = state.hint.seq_used.load(Ordering::Acquire);
        if let Some(denied) = self.deny_without_lock(state, word, now, cost) {
            return Ok(denied);
        }
        // The lock orders every access to the log: a check sees all the
        // admissions of the checks that held the lock before it. Tried
        // first from the word just read: one compare-exchange uncontended.
        let mut log = state.lock_from(word);
        let dropped = self.advance(state, &mut log, now);
        let (decision, at) = self.decide(&log, log.latest, now, cost);
        if let Some(at) = at {
            self.record(&mut log, at, cost);
        }
        if dropped || at.is_some() {
            log.publish();
        }
        Ok(decision)
    }

    fn peek(&self, state: &WindowLog, now: u64, cost: u32) -> Result<Decision, CheckError> {
        check_cost(cost, self.limit)?;
        // The lock gives a consistent snapshot; the log is only read.
        let log = state.lock();
        Ok(self.decide(&log, state.latest(&log), now, cost).0)
    }

    fn is_idle(&self, state: &WindowLog, now: u64) -> bool {
        let log = state.lock();
        let now = now.max(state.latest(&log));
        // Entries are in time order: the log is empty at `now` when its
        // newest entry has left the window.
        log.entries
            .back()
            .is_none_or(|newest| self.expired(newest.at, now))
    }

    fn capacity(&self) -> u32 {
        self.limit
    }

    fn refund(&self, state: &WindowLog, now: u64, cost: u32) -> u32 {
        if cost == 0 {
            return 0;
        }
        // The lock orders the refund with every check, as `check` argues.
        let mut log = state.lock();
        let dropped = self.advance(state, &mut log, now);
        let mut left = cost;
        while let Some(oldest) = log.entries.front_mut().filter(|_| left > 0) {
            let take = oldest.cost.min(left);
            oldest.cost -= take;
            left -= take;
            if oldest.cost == 0 {
                log.entries.pop_front();
            }
            log.used -= take;
        }
        if dropped || left < cost {
            log.publish();
        }
        cost - left
    }
}

mod entries;
#[cfg(all(test, not(rategate_loom)))]
mod tests;
