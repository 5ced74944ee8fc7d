//! [`Adjustable`]: any algorithm whose quota can change at run time, without
//! rebuilding the limiter or losing any key's state.

use super::{Algorithm, LeakyBucket, SlidingWindowLog, TokenBucket};
use crate::sync::Mutex;
use crate::{CheckError, Decision, Quota, QuotaError};
use arc_swap::ArcSwap;
use std::fmt;
use std::sync::Arc;

/// An algorithm whose parameters can be rebuilt for another quota so that
/// they still read the states the old ones wrote.
pub trait Adjust: Algorithm {
    /// Parameters for `quota` whose state layout every later
    /// [`retune`](Adjust::retune) keeps (the window algorithms take their
    /// widest packing). By default [`from_quota`](Algorithm::from_quota).
    ///
    /// # Errors
    ///
    /// As [`from_quota`](Algorithm::from_quota).
    fn adjustable(quota: &Quota) -> Result<Self, QuotaError> {
        Self::from_quota(quota)
    }

    /// Parameters for `quota` that read the states `self` wrote.
    ///
    /// # Errors
    ///
    /// What [`from_quota`](Algorithm::from_quota) refuses, and
    /// [`QuotaError::PeriodFixed`] for a window algorithm asked for another
    /// period.
    fn retune(&self, quota: &Quota) -> Result<Self, QuotaError>;
}

/// The window algorithms count in windows of their period: a change must
/// keep it.
pub(super) fn same_period(period: u64, quota: &Quota) -> Result<(), QuotaError> {
    if quota.period_nanos() == period {
        Ok(())
    } else {
        Err(QuotaError::PeriodFixed {
            period_nanos: period,
        })
    }
}

/// The state is the theoretical arrival time, an absolute time: it keeps
/// *how long until the bucket is full again*, not a count of tokens. Under
/// the new quota the key holds `(tau' - (TAT - now)) / T'` tokens (`tau'` the
/// new burst tolerance, `T'` the new interval). With the default burst
/// (`tau` = the period, or a little more when the interval is rounded up to
/// a whole nanosecond) the bucket stays as full *in proportion*: 90 of 100
/// used, moved to 50 per period, leaves 5 (90% used); a smaller burst than
/// the debt denies until the debt has drained below it; a raised quota gives
/// its larger burst and faster refill at once.
impl Adjust for TokenBucket {
    fn retune(&self, quota: &Quota) -> Result<Self, QuotaError> {
        TokenBucket::from_quota(quota)
    }
}

/// The state is the excess in thousandths of a request, absolute: under the
/// new burst a key whose excess is above it is denied until the new rate has
/// drained it below; a raised burst or rate takes effect at once.
impl Adjust for LeakyBucket {
    fn retune(&self, quota: &Quota) -> Result<Self, QuotaError> {
        LeakyBucket::from_quota(quota)
    }
}

/// The log of admissions is absolute: a key that used 90 of 100 in the last
/// period, moved to 50, is denied until its entries in the window sum below
/// 50 (entries leave one period after they were admitted); a raised limit
/// takes effect at once. The period may change too: the window is then the
/// new period back from now.
impl Adjust for SlidingWindowLog {
    fn retune(&self, quota: &Quota) -> Result<Self, QuotaError> {
        SlidingWindowLog::from_quota(quota)
    }
}

/// Parameters that can be replaced at run time: the quota a check uses is
/// one pointer away, swapped atomically by [`set_quota`](Adjustable::set_quota).
///
/// Wrap an algorithm in it to change the quota of a live limiter
/// ([`RateLimiter::set_quota`](crate::RateLimiter::set_quota),
/// [`KeyedRateLimiter::set_quota`](crate::KeyedRateLimiter::set_quota)) without
/// rebuilding it or losing any key's state. A limiter not built with it pays
/// nothing; one built with it loads the current parameters through
/// [`arc_swap`] on every check, which costs about 11 ns (`cargo bench
/// --bench dynamic`, rows `token_bucket/static` and `adjustable`: 7.0 and
/// 18.2 ns on the allowed path, on a 2-vCPU x86-64 VM), the price of
/// freeing replaced parameters (see Memory).
///
/// # What happens to state
///
/// Every key keeps its state, read under the new parameters from its next
/// check on; what that means is documented per algorithm on its [`Adjust`]
/// implementation. In short: the counting algorithms (fixed window, sliding
/// window counter and log, leaky bucket) keep their counts, so a key that
/// used 90 of 100 and is moved to 50 is denied until it is back below 50,
/// and a raised quota takes effect at once; the token bucket keeps its time
/// to full (proportional use). The fixed window and the sliding window
/// counter keep their period ([`QuotaError::PeriodFixed`] otherwise) and are
/// built with their widest state packing, so any later limit fits; the
/// sliding window log may change its period too. A check racing the change
/// decides under either quota, whole.
///
/// The widest packing leaves fewer bits for the window index than a fixed
/// limit would: 32 for the fixed window, 24 for the sliding window counter.
/// A key left untouched for more than 2^31 (fixed window) or 2^23 (counter)
/// windows may have its old count read as a later window's and be denied
/// until that window ends (never admitted beyond its limit). Keyed limiters
/// that sweep drop such idle keys long before; a direct limiter idle that
/// long (2^23 one-second windows is 97 days) should be rebuilt.
///
/// # Refunds across a change
///
/// A refund is priced at the quota in force when it is made, not at the
/// one its request was admitted under. For the counting algorithms the
/// two are the same count. For the token bucket they are not: its state is
/// a time to full, so a refund frees `cost` intervals of the *current*
/// quota. After a lower quota (a longer interval) a refund frees more of
/// the bucket than its request took. For example, a bucket of 1,000/h
/// emptied by 1,000 requests, moved to 1/h, then refunded 1, is full
/// again; moved back to 1,000/h, it admits another 1,000 at once. Refund
/// before changing the quota, or expect a refund made after a lowering to
/// give back up to the new interval's share of the old quota.
///
/// # Memory
///
/// A change allocates the new parameters (the size of `A` and a
/// [`Quota`]) and frees the replaced ones once no check still reads them
/// ([`arc_swap`]), so a limiter's memory does not grow with the number of
/// changes.
///
/// # Examples
///
/// ```
/// use rategate::algorithm::Adjustable;
/// use rategate::{FixedWindow, ManualClock, Quota, RateLimiter};
///
/// let limiter =
///     RateLimiter::<Adjustable<FixedWindow>, _>::with_clock(Quota::per_minute(100)?, ManualClock::new())?;
/// assert!(limiter.check_n(90)?.is_allowed());
/// limiter.set_quota(Quota::per_minute(50)?)?;
/// assert!(!limiter.check().is_allowed()); // 90 used of 50
/// limiter.set_quota(Quota::per_minute(200)?)?;
/// assert_eq!(limiter.check().remaining(), 109);
/// assert_eq!(limiter.quota().limit(), 200);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Adjustable<A> {
    /// The parameters checks use. A check holds the version it loaded for
    /// the whole decision (one quota, whole); a change swaps in a new one,
    /// and the replaced version is freed when the last check holding it
    /// ends.
    current: ArcSwap<Version<A>>,
    /// Serialises changes: each retunes the version current when it
    /// starts.
    changes: Mutex<()>,
}

/// One quota and the parameters built from it.
#[derive(Debug)]
struct Version<A> {
    algorithm: A,
    quota: Quota,
}

impl<A: Adjust> Adjustable<A> {
    /// The quota checks enforce now.
    pub fn quota(&self) -> Quota {
        self.current.load().quota
    }

    /// Makes `quota` the one every later check enforces. Lock-free for
    /// checks; concurrent changes are serialised by a mutex. The change
    /// waits for all-or-nothing decisions in progress (it takes every lock
    /// stripe), so that no decision peeks under one quota and checks under
    /// another.
    ///
    /// # Errors
    ///
    /// What [`Adjust::retune`] refuses (a window algorithm asked for another
    /// period, a quota the algorithm cannot represent); the quota in force
    /// is then unchanged.
    ///
    /// # From inside a decision
    ///
    /// Called from code an all-or-nothing decision runs (a
    /// [`Limit`](crate::policy::Limit) or HTTP `Backend` of your own, say
    /// one whose quota follows load), the change does not wait for that
    /// decision, which holds the stripes it would take, nor for any other
    /// decision in progress. All or nothing then holds only for these
    /// changes:
    ///
    /// - retuning the member's own limiter in its `peek`, or raising it in
    ///   its `check`. A member that lowers its quota between its peek and
    ///   its check may deny at the check after the members before it were
    ///   charged;
    /// - with no other thread deciding on that limiter meanwhile. A change
    ///   made inside one decision can land between another thread's peek
    ///   and check on the same limiter, and that decision may then charge
    ///   its earlier members and be denied.
    ///
    /// Changing *another* member of the same decision is never safe: that
    /// member may deny at its check after the members before it were
    /// charged. Outside any decision, `set_quota` waits for the decisions
    /// in progress and none of this applies.
    pub fn set_quota(&self, quota: Quota) -> Result<(), QuotaError> {
        crate::stripes::with_stripes(crate::stripes::ALL_STRIPES, || self.publish(quota))
    }

    /// `set_quota`, under every stripe.
    fn publish(&self, quota: Quota) -> Result<(), QuotaError> {
        let _change = self.changes.lock();
        let algorithm = self.current.load().algorithm.retune(&quota)?;
        self.current.store(Arc::new(Version { algorithm, quota }));
        Ok(())
    }
}

impl<A: Adjust> Algorithm for Adjustable<A> {
    type State = A::State;

    fn from_quota(quota: &Quota) -> Result<Self, QuotaError> {
        Ok(Adjustable {
            current: ArcSwap::from_pointee(Version {
                algorithm: A::adjustable(quota)?,
                quota: *quota,
            }),
            changes: Mutex::new(()),
        })
    }

    fn new_state(&self) -> A::State {
        self.current.load().algorithm.new_state()
    }

    #[inline]
    fn check(&self, state: &A::State, now: u64, cost: u32) -> Result<Decision, CheckError> {
        self.current.load().algorithm.check(state, now, cost)
    }

    #[inline]
    fn peek(&self, state: &A::State, now: u64, cost: u32) -> Result<Decision, CheckError> {
        self.current.load().algorithm.peek(state, now, cost)
    }

    fn is_idle(&self, state: &A::State, now: u64) -> bool {
        self.current.load().algorithm.is_idle(state, now)
    }

    fn capacity(&self) -> u32 {
        self.current.load().algorithm.capacity()
    }

    fn refund(&self, state: &A::State, now: u64, cost: u32) -> u32 {
        self.current.load().algorithm.refund(state, now, cost)
    }

    fn current_quota(&self) -> Option<Quota> {
        Some(self.quota())
    }
}

impl<A: Adjust + fmt::Debug> fmt::Debug for Adjustable<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Adjustable")
            .field("quota", &self.quota())
            .field("algorithm", &self.current.load().algorithm)
            .finish()
    }
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;
    use crate::{FixedWindow, SlidingWindowCounter};

    #[test]
    fn window_algorithms_keep_their_period() {
        let fw = Adjustable::<FixedWindow>::from_quota(&Quota::per_second(5).unwrap()).unwrap();
        let err = fw.set_quota(Quota::per_minute(5).unwrap());
        assert_eq!(
            err,
            Err(QuotaError::PeriodFixed {
                period_nanos: 1_000_000_000
            })
        );
        assert_eq!(fw.quota().limit(), 5);
        let swc =
            Adjustable::<SlidingWindowCounter>::from_quota(&Quota::per_second(5).unwrap()).unwrap();
        assert!(
            swc.set_quota(Quota::per_second((1 << 20) - 1).unwrap())
                .is_ok()
        );
        assert!(matches!(
            swc.set_quota(Quota::per_second(1 << 20).unwrap()),
            Err(QuotaError::LimitTooLarge { .. })
        ));
    }
}
