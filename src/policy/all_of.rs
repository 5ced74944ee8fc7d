//! Several limits at once: a request passes only when every one admits it,
//! and a denial consumes nothing from any of them.

use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::sync::Arc;
use crate::{CheckError, Decision, KeyedRateLimiter, Quota, RateLimiter};
use parking_lot::{Mutex, MutexGuard};
use std::fmt;
use std::hash::{BuildHasher, Hash};

/// One limit a request can be checked against: a [`RateLimiter`], one key
/// of a [`KeyedRateLimiter`] ([`KeyedLimit`]), an [`AllOf`], or a type of
/// your own.
pub trait Limit: Send + Sync {
    /// Decides a request of `cost` now and records it if admitted.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when `cost` can never pass.
    fn check_n(&self, cost: u32) -> Result<Decision, CheckError>;

    /// Decides as [`check_n`](Limit::check_n) would, recording nothing.
    ///
    /// # Errors
    ///
    /// As [`check_n`](Limit::check_n).
    fn peek_n(&self, cost: u32) -> Result<Decision, CheckError>;

    /// The quota enforced (for an [`AllOf`], the slowest member's; `None`
    /// for an empty one, which limits nothing).
    fn quota(&self) -> Option<Quota>;

    /// An address identifying the state this limit decides on, equal for
    /// every handle on the same state (all keys of one keyed limiter share
    /// one). [`AllOf`] serializes its checks per state id.
    fn state_id(&self) -> usize {
        (self as *const Self).cast::<()>() as usize
    }
}

impl<A: Algorithm, C: Clock> Limit for RateLimiter<A, C> {
    #[inline]
    fn check_n(&self, cost: u32) -> Result<Decision, CheckError> {
        RateLimiter::check_n(self, cost)
    }

    #[inline]
    fn peek_n(&self, cost: u32) -> Result<Decision, CheckError> {
        RateLimiter::peek_n(self, cost)
    }

    fn quota(&self) -> Option<Quota> {
        Some(*RateLimiter::quota(self))
    }
}

impl<L: Limit + ?Sized> Limit for Arc<L> {
    #[inline]
    fn check_n(&self, cost: u32) -> Result<Decision, CheckError> {
        (**self).check_n(cost)
    }

    #[inline]
    fn peek_n(&self, cost: u32) -> Result<Decision, CheckError> {
        (**self).peek_n(cost)
    }

    fn quota(&self) -> Option<Quota> {
        (**self).quota()
    }

    fn state_id(&self) -> usize {
        (**self).state_id()
    }
}

/// One key of a shared [`KeyedRateLimiter`] as a [`Limit`] (a per-endpoint
/// or per-account limit inside an [`AllOf`]).
///
/// # Examples
///
/// ```
/// use rategate::policy::{KeyedLimit, Limit};
/// use rategate::{KeyedRateLimiter, Quota, TokenBucket};
/// use std::sync::Arc;
///
/// let per_endpoint = Arc::new(KeyedRateLimiter::<String, TokenBucket>::new(Quota::per_second(2)?)?);
/// let charges = KeyedLimit::new(Arc::clone(&per_endpoint), "POST /v1/charges".to_string());
/// assert!(charges.check_n(2)?.is_allowed());
/// assert!(!charges.peek_n(1)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KeyedLimit<K, A: Algorithm, C, S> {
    limiter: Arc<KeyedRateLimiter<K, A, C, S>>,
    key: K,
}

impl<K: fmt::Debug, A: Algorithm, C, S> fmt::Debug for KeyedLimit<K, A, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimit")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl<K, A: Algorithm, C, S> KeyedLimit<K, A, C, S> {
    /// The limit of `key` in `limiter`.
    pub fn new(limiter: Arc<KeyedRateLimiter<K, A, C, S>>, key: K) -> Self {
        KeyedLimit { limiter, key }
    }
}

impl<K, A, C, S> Limit for KeyedLimit<K, A, C, S>
where
    K: Hash + Eq + Clone + Send + Sync,
    A: Algorithm,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync,
{
    fn check_n(&self, cost: u32) -> Result<Decision, CheckError> {
        self.limiter.check_n(&self.key, cost)
    }

    fn peek_n(&self, cost: u32) -> Result<Decision, CheckError> {
        self.limiter.peek_n(&self.key, cost)
    }

    fn quota(&self) -> Option<Quota> {
        Some(*self.limiter.quota())
    }

    fn state_id(&self) -> usize {
        Arc::as_ptr(&self.limiter).cast::<()>() as usize
    }
}

/// Lock stripes shared by every [`AllOf`] in the process, chosen by state
/// id: two `AllOf`s that share a limit always take a common stripe.
const STRIPES: usize = 64;
static LOCKS: [Mutex<()>; STRIPES] = [const { parking_lot::const_mutex(()) }; STRIPES];

fn stripe_of(state_id: usize) -> usize {
    // Fibonacci hashing of the address: neighbouring allocations spread.
    (state_id.wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize) >> (usize::BITS - 6)) % STRIPES
}

/// Several limits that admit a request together or not at all: Stripe's
/// read or write limit plus a per-endpoint limit, a per-user limit plus a
/// global one, a burst limit plus a daily cap.
///
/// A check first *peeks* every member (recording nothing); if any would
/// deny, it returns that denial (the one with the longest retry time, since
/// every member must admit) and nothing is consumed anywhere. Otherwise it
/// checks every member, recording the request in each.
///
/// # What "all or nothing" guarantees
///
/// Between the peeks and the checks, `AllOf` holds a lock stripe for every
/// member's state (stripes shared by all `AllOf`s in the process, taken in
/// a fixed order, so there is no deadlock). Time passing only frees
/// capacity in every algorithm, so among callers that go through an
/// `AllOf`, a member that admitted the peek admits the check: all or
/// nothing holds exactly.
///
/// A caller that checks a member limiter *directly*, outside any `AllOf`,
/// takes no stripe. If such a check takes the last slot of member `B`
/// between this `AllOf`'s peek and its check of `B`, the members checked
/// before `B` have recorded the request and `B` denies it: the request is
/// refused but charged to those members (the limiters have no refund). To
/// rule that out, route every use of a shared limiter through `AllOf`s (a
/// one-member `AllOf` costs no lock) or give `AllOf` its own limiters. The
/// lock is held for two lock-free operations per member, tens of
/// nanoseconds.
///
/// # Examples
///
/// ```
/// use rategate::policy::{AllOf, Limit};
/// use rategate::{Quota, RateLimiter, TokenBucket};
/// use std::sync::Arc;
///
/// let write = Arc::new(RateLimiter::<TokenBucket>::new(Quota::per_second(100)?)?);
/// let endpoint = Arc::new(RateLimiter::<TokenBucket>::new(Quota::per_second(1)?)?);
/// let create_charge = AllOf::new([write.clone() as Arc<dyn Limit>, endpoint.clone()]);
/// assert!(create_charge.check_n(1)?.is_allowed());
/// // The endpoint's limit is spent: the next call is denied and the write
/// // limit is not charged for it.
/// assert!(!create_charge.check_n(1)?.is_allowed());
/// // (peek counts the request it peeks: 100 - 1 - 1)
/// assert_eq!(write.peek().remaining(), 98);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct AllOf {
    members: Vec<Arc<dyn Limit>>,
    /// Distinct lock stripes of the members, ascending (the lock order).
    stripes: Vec<usize>,
}

impl fmt::Debug for AllOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quotas: Vec<Option<Quota>> = self.members.iter().map(|m| m.quota()).collect();
        f.debug_struct("AllOf").field("quotas", &quotas).finish()
    }
}

impl AllOf {
    /// The limits a request must pass together. An empty set admits
    /// everything.
    pub fn new(members: impl IntoIterator<Item = Arc<dyn Limit>>) -> Self {
        let members: Vec<Arc<dyn Limit>> = members.into_iter().collect();
        let mut stripes: Vec<usize> = members.iter().map(|m| stripe_of(m.state_id())).collect();
        stripes.sort_unstable();
        stripes.dedup();
        AllOf { members, stripes }
    }

    /// The member limits.
    pub fn members(&self) -> &[Arc<dyn Limit>] {
        &self.members
    }

    fn lock(&self) -> Vec<MutexGuard<'static, ()>> {
        // Ascending stripe order in every AllOf: no lock cycle is possible.
        self.stripes.iter().map(|&s| LOCKS[s].lock()).collect()
    }

    /// Of the members' decisions, the one a caller should act on: the
    /// denial with the longest retry, else the admission with the fewest
    /// remaining.
    fn tighter(so_far: Option<Decision>, b: Decision) -> Option<Decision> {
        let Some(a) = so_far else {
            return Some(b);
        };
        Some(match (a.is_allowed(), b.is_allowed()) {
            (true, false) => b,
            (false, true) => a,
            (false, false) if b.retry_after_nanos() > a.retry_after_nanos() => b,
            (true, true) if b.remaining() < a.remaining() => b,
            _ => a,
        })
    }

    fn unlimited() -> Decision {
        Decision::allow(u32::MAX, u32::MAX, 0)
    }
}

impl Limit for AllOf {
    /// Admits `cost` in every member, or in none.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when a member can never admit
    /// `cost`; nothing is consumed.
    fn check_n(&self, cost: u32) -> Result<Decision, CheckError> {
        if let [only] = self.members.as_slice() {
            return only.check_n(cost);
        }
        let _locks = self.lock();
        // Folded as they come: no allocation per check.
        let mut peeked = None;
        for member in &self.members {
            peeked = Self::tighter(peeked, member.peek_n(cost)?);
        }
        if peeked.is_some_and(|d| !d.is_allowed()) {
            return Ok(peeked.unwrap_or_else(Self::unlimited));
        }
        let mut checked = None;
        for member in &self.members {
            let decision = member.check_n(cost)?;
            if !decision.is_allowed() {
                // Only a direct check outside any AllOf can get here; see
                // the type's docs for what the earlier members recorded.
                return Ok(decision);
            }
            checked = Self::tighter(checked, decision);
        }
        Ok(checked.unwrap_or_else(Self::unlimited))
    }

    fn peek_n(&self, cost: u32) -> Result<Decision, CheckError> {
        let mut peeked = None;
        for member in &self.members {
            peeked = Self::tighter(peeked, member.peek_n(cost)?);
        }
        Ok(peeked.unwrap_or_else(Self::unlimited))
    }

    /// The slowest member's quota (the lowest sustained rate).
    fn quota(&self) -> Option<Quota> {
        self.members
            .iter()
            .filter_map(|m| m.quota())
            .max_by(|a, b| {
                // Slower = longer emission interval; compared exactly as
                // period_a * limit_b against period_b * limit_a.
                let lhs = u128::from(a.period_nanos()) * u128::from(b.limit());
                let rhs = u128::from(b.period_nanos()) * u128::from(a.limit());
                lhs.cmp(&rhs)
            })
    }
}
