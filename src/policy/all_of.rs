//! Several limits at once: a request passes only when every one admits it,
//! and a denial consumes nothing from any of them.

use super::all_or_nothing::{self, Held, Member, MemberError, StateId};
use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::stripes::keyed_lock_id;
use crate::sync::Arc;
use crate::{CheckError, Decision, KeyedRateLimiter, Quota, RateLimiter};
use smallvec::SmallVec;
use std::fmt;
use std::hash::{BuildHasher, Hash};

/// Members decided without a heap allocation (more spill to the heap).
const INLINE: usize = 4;

/// One limit a request can be checked against: a [`RateLimiter`], one key
/// of a [`KeyedRateLimiter`] ([`KeyedLimit`]), or a type of your own,
/// which implements `check_n`, `peek_n` and `quota` and makes its
/// decisions with [`Decision::allowed`] and [`Decision::denied`].
///
/// An [`AllOf`] is not a `Limit`: list an inner set's members in the outer
/// one instead of nesting it.
///
/// ```compile_fail
/// use rategate::policy::{AllOf, Limit};
/// use std::sync::Arc;
///
/// let inner = AllOf::new([]);
/// let outer = AllOf::new([Arc::new(inner) as Arc<dyn Limit>]);
/// ```
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

    /// The quota enforced (`None` when there is none to report).
    fn quota(&self) -> Option<Quota>;

    /// The all-or-nothing protocol: which lock stripe guards this limit's
    /// state (equal for every handle on one state). The default, the
    /// limit's address, is right for a limit with one state.
    #[doc(hidden)]
    fn lock_id(&self) -> u64 {
        address_of(self) as u64
    }

    /// The all-or-nothing protocol: finds this limit's state and peeks
    /// `cost` there, while the stripes in `held` are held. The default
    /// peeks; the state is the limit itself.
    #[doc(hidden)]
    fn reserve_held(&self, cost: u32, held: u64) -> Held<(Decision, StateId)> {
        let _ = held;
        Held::Decided(
            self.peek_n(cost)
                .map(|d| (d, StateId::of(address_of(self), 0))),
        )
    }

    /// The all-or-nothing protocol: checks `cost` while the stripes in
    /// `held` are held. The default checks.
    #[doc(hidden)]
    fn check_held(&self, cost: u32, held: u64) -> Held<Decision> {
        let _ = held;
        Held::Decided(self.check_n(cost))
    }
}

/// The address of `value`, as an identity.
pub(crate) fn address_of<T: ?Sized>(value: &T) -> usize {
    (value as *const T).cast::<()>() as usize
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
        Some(RateLimiter::quota(self))
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

    fn lock_id(&self) -> u64 {
        (**self).lock_id()
    }

    fn reserve_held(&self, cost: u32, held: u64) -> Held<(Decision, StateId)> {
        (**self).reserve_held(cost, held)
    }

    fn check_held(&self, cost: u32, held: u64) -> Held<Decision> {
        (**self).check_held(cost, held)
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
        Some(self.limiter.quota())
    }

    fn lock_id(&self) -> u64 {
        keyed_lock_id(&self.key)
    }

    fn reserve_held(&self, cost: u32, held: u64) -> Held<(Decision, StateId)> {
        self.limiter
            .reserve_held(&self.key, keyed_lock_id(&self.key), cost, held)
    }

    fn check_held(&self, cost: u32, held: u64) -> Held<Decision> {
        self.limiter.check_held(&self.key, cost, held)
    }
}

/// A limit and the cost a request takes from it, as one member of an
/// all-or-nothing decision.
struct Charged<'a> {
    limit: &'a dyn Limit,
    cost: u32,
}

impl Member for Charged<'_> {
    fn cost(&self) -> u32 {
        self.cost
    }

    fn lock_id(&self) -> u64 {
        self.limit.lock_id()
    }

    fn reserve(&self, cost: u32, held: u64) -> Held<(Decision, StateId)> {
        self.limit.reserve_held(cost, held)
    }

    fn check(&self, cost: u32, held: u64, _reserved: Option<StateId>) -> Held<Decision> {
        self.limit.check_held(cost, held)
    }
}

/// An [`AllOf`] decision and the member it comes from.
///
/// # Examples
///
/// ```
/// use rategate::policy::{AllOf, Limit};
/// use rategate::{Quota, RateLimiter, TokenBucket};
/// use std::sync::Arc;
///
/// let hourly = Arc::new(RateLimiter::<TokenBucket>::new(Quota::per_hour(5000)?)?);
/// let burst = Arc::new(RateLimiter::<TokenBucket>::new(Quota::per_second(1)?)?);
/// let all = AllOf::new([hourly as Arc<dyn Limit>, burst]);
/// assert_eq!(all.check_n_report(1)?.denied_by(), None);
/// let report = all.check_n_report(1)?;
/// assert!(!report.is_allowed());
/// assert_eq!(report.denied_by(), Some(1)); // the per-second limit
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllOfDecision {
    decision: Decision,
    member: Option<usize>,
}

impl AllOfDecision {
    /// The decision: on a denial the denying member's (the longest retry
    /// when several deny), else the admission with the fewest remaining.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// Whether every member admitted (and was charged).
    pub fn is_allowed(&self) -> bool {
        self.decision.is_allowed()
    }

    /// On a denial, the index in [`AllOf::members`] of the limit that
    /// denied (the one with the longest retry when several did).
    pub fn denied_by(&self) -> Option<usize> {
        self.member.filter(|_| !self.is_allowed())
    }

    /// The index of the member whose numbers [`decision`](Self::decision)
    /// carries; `None` for an empty `AllOf`.
    pub fn binding(&self) -> Option<usize> {
        self.member
    }
}

/// The binding decision among members' final decisions: on a denial the
/// denying member's (the longest retry when several deny, since every
/// member must admit), else the admission with the fewest remaining; on a
/// tie the first member's.
pub(crate) fn bind(decisions: &[Decision]) -> AllOfDecision {
    let mut best: Option<(usize, Decision)> = None;
    for (i, decision) in decisions.iter().enumerate() {
        if best.is_none_or(|(_, b)| tighter(decision, &b)) {
            best = Some((i, *decision));
        }
    }
    AllOfDecision {
        decision: best.map_or_else(unlimited, |(_, d)| d),
        member: best.map(|(i, _)| i),
    }
}

/// Whether `b` binds more than `a`: a denial over an admission, the longer
/// retry between denials, the fewer remaining between admissions.
fn tighter(b: &Decision, a: &Decision) -> bool {
    match (a.is_allowed(), b.is_allowed()) {
        (true, false) => true,
        (false, false) => b.retry_after_nanos() > a.retry_after_nanos(),
        (true, true) => b.remaining() < a.remaining(),
        (false, true) => false,
    }
}

fn unlimited() -> Decision {
    Decision::allow(u32::MAX, u32::MAX, 0)
}

/// Several limits that admit a request together or not at all: Stripe's
/// read or write limit plus a per-endpoint limit, a per-user limit plus a
/// global one, a burst limit plus a daily cap.
///
/// A check finds every member's state and peeks it (recording nothing); if
/// any would deny, it returns that denial (the one with the longest retry
/// time, since every member must admit) and nothing is consumed anywhere.
/// Otherwise it checks every member, recording the request in each.
/// Members on one state (one limiter listed twice) must admit their costs
/// together. [`check_n_report`](AllOf::check_n_report) also says which
/// member denied.
///
/// # What "all or nothing" guarantees
///
/// During a check, `AllOf` holds a lock stripe for every member's state:
/// stripes shared by every `AllOf` and every HTTP layer in the process,
/// per key for a keyed limiter (and one more for the overflow state of a
/// key past its limiter's key cap), taken in a fixed order, so there is no
/// deadlock. Time passing only frees capacity in every algorithm, so among
/// callers that go through an `AllOf` or the HTTP layer, a member that
/// admitted the peek admits the check: a refused request records nothing
/// (loom models check it for every interleaving of racing decisions,
/// one-member and several-member ones, and keys in the overflow state).
///
/// A caller that checks a member limiter *directly* (`limiter.check_n`),
/// outside any `AllOf` or layer, takes no stripe. If such a check takes the
/// last slot of a member between this `AllOf`'s peek and its check, the
/// members checked before it have recorded a request that is then refused.
/// To rule that out, route every use of a shared limiter through `AllOf`s
/// (a one-member `AllOf` is a check under one stripe) or give `AllOf` its
/// own limiters.
///
/// An `AllOf` is not itself a [`Limit`]: list an inner set's members in the
/// outer one.
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
}

impl fmt::Debug for AllOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quotas: Vec<Option<Quota>> = self.members.iter().map(|m| m.quota()).collect();
        f.debug_struct("AllOf").field("quotas", &quotas).finish()
    }
}

/// One limit (or an `Arc` of one) as a set of one:
/// `OutboundLimiter::new(limiter)`.
impl<L: Limit + 'static> From<L> for AllOf {
    fn from(limit: L) -> AllOf {
        AllOf::new([shared(limit)])
    }
}

/// `limit` as a shared member.
fn shared<L: Limit + 'static>(limit: L) -> Arc<dyn Limit> {
    // Through std's `Arc`, which can unsize (loom's, under loom, cannot).
    let limit = std::sync::Arc::new(limit) as std::sync::Arc<dyn Limit>;
    #[cfg(rategate_loom)]
    let limit = Arc::from_std(limit);
    limit
}

impl AllOf {
    /// The limits a request must pass together. An empty set admits
    /// everything.
    pub fn new(members: impl IntoIterator<Item = Arc<dyn Limit>>) -> Self {
        AllOf {
            members: members.into_iter().collect(),
        }
    }

    /// This set and `limit` (a limiter, or an `Arc` of one kept elsewhere
    /// too): limits of different types without naming `dyn Limit`.
    ///
    /// ```
    /// use rategate::policy::AllOf;
    /// use rategate::{FixedWindow, RateLimiter, TokenBucket};
    /// use std::sync::Arc;
    ///
    /// let per_second = RateLimiter::<TokenBucket>::new("100/s".parse()?)?;
    /// let per_day = Arc::new(RateLimiter::<FixedWindow>::new("10000/d".parse()?)?);
    /// let both = AllOf::from(per_second).and(Arc::clone(&per_day));
    /// assert!(both.check_n(1)?.is_allowed());
    /// assert_eq!(per_day.peek_n(0)?.remaining(), 9_999); // charged once
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn and<L: Limit + 'static>(mut self, limit: L) -> AllOf {
        self.members.push(shared(limit));
        self
    }

    /// The member limits.
    pub fn members(&self) -> &[Arc<dyn Limit>] {
        &self.members
    }

    /// Admits `cost` in every member, or in none, and says which member
    /// the decision comes from ([`AllOfDecision::denied_by`]).
    ///
    /// # Errors
    ///
    /// A [`MemberError`] naming the member that can never admit `cost`;
    /// nothing is consumed.
    pub fn check_n_report(&self, cost: u32) -> Result<AllOfDecision, MemberError> {
        self.decide(cost, true)
    }

    /// Admits `cost` in every member, or in none.
    ///
    /// # Errors
    ///
    /// [`CheckError::CostExceedsCapacity`] when a member can never admit
    /// `cost`; nothing is consumed.
    pub fn check_n(&self, cost: u32) -> Result<Decision, CheckError> {
        match self.check_n_report(cost) {
            Ok(report) => Ok(report.decision()),
            Err(e) => Err(e.error),
        }
    }

    /// What [`check_n`](Self::check_n) would decide now, recording
    /// nothing.
    ///
    /// # Errors
    ///
    /// As [`check_n`](Self::check_n).
    pub fn peek_n(&self, cost: u32) -> Result<Decision, CheckError> {
        match self.decide(cost, false) {
            Ok(report) => Ok(report.decision()),
            Err(e) => Err(e.error),
        }
    }

    /// The slowest member's quota (the lowest sustained rate); `None` for
    /// an empty set, which limits nothing.
    pub fn quota(&self) -> Option<Quota> {
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

    fn decide(&self, cost: u32, commit: bool) -> Result<AllOfDecision, MemberError> {
        // Up to `INLINE` members on the stack: a decision allocates nothing.
        let members: SmallVec<[Charged<'_>; INLINE]> = self
            .members
            .iter()
            .map(|limit| Charged {
                limit: &**limit,
                cost,
            })
            .collect();
        let mut decisions: SmallVec<[Decision; INLINE]> =
            smallvec::smallvec![unlimited(); members.len()];
        all_or_nothing::decide(&members, commit, &mut decisions)?;
        Ok(bind(&decisions))
    }
}

/// Admits each limit's own cost in every limit, or in none: `decisions[i]`
/// gets limit `i`'s decision (its check's after an admission, else its
/// peek's). Returns whether every limit admitted.
///
/// # Errors
///
/// A [`MemberError`] naming the limit that can never admit its cost;
/// nothing is consumed.
#[cfg(feature = "rls")]
pub(crate) fn decide_costs(
    limits: &[(&dyn Limit, u32)],
    decisions: &mut [Decision],
) -> Result<bool, MemberError> {
    let members: SmallVec<[Charged<'_>; INLINE]> = limits
        .iter()
        .map(|&(limit, cost)| Charged { limit, cost })
        .collect();
    all_or_nothing::decide(&members, true, decisions)
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;
    use crate::{KeyedRateLimiter, ManualClock, Overflow, Quota, RateLimiter, TokenBucket};
    use std::time::Duration;

    fn bucket(clock: &ManualClock, per_second: u32) -> Arc<dyn Limit> {
        Arc::new(
            RateLimiter::<TokenBucket, _>::with_clock(
                Quota::per_second(per_second).unwrap(),
                clock.clone(),
            )
            .unwrap(),
        )
    }

    #[test]
    fn one_limiter_listed_twice_must_admit_both_costs() {
        let clock = ManualClock::new();
        let shared = bucket(&clock, 3);
        let twice = AllOf::new([Arc::clone(&shared), Arc::clone(&shared)]);
        // 3 slots: the first request takes 2.
        assert!(twice.check_n(1).unwrap().is_allowed());
        // 1 slot left: each peek alone admits, together they do not, and
        // the refused request takes nothing.
        assert!(!twice.check_n(1).unwrap().is_allowed());
        assert!(shared.peek_n(1).unwrap().is_allowed());
        assert!(!twice.peek_n(1).unwrap().is_allowed());
        clock.advance(Duration::from_secs(1));
        assert!(twice.check_n(1).unwrap().is_allowed());
    }

    #[test]
    fn two_keys_in_one_overflow_state_must_admit_both_costs() {
        let clock = ManualClock::new();
        let keyed = Arc::new(
            KeyedRateLimiter::<String, TokenBucket>::builder(Quota::per_second(3).unwrap())
                .clock(clock.clone())
                .max_keys(1)
                .overflow(Overflow::Shared)
                .build()
                .unwrap(),
        );
        assert!(keyed.check("held").is_allowed());
        let on = |key: &str| -> Arc<dyn Limit> {
            Arc::new(KeyedLimit::new(Arc::clone(&keyed), key.to_string()))
        };
        // "a" and "b" both go to the overflow state: 3 slots, 2 a request.
        let both = AllOf::new([on("a"), on("b")]);
        assert!(both.check_n(1).unwrap().is_allowed());
        assert!(!both.check_n(1).unwrap().is_allowed());
        // The refused request took nothing: one slot is left.
        assert!(keyed.check("c").is_allowed());
        assert!(!keyed.check("c").is_allowed());
    }

    #[test]
    fn a_cost_no_member_can_hold_is_an_error_and_takes_nothing() {
        let clock = ManualClock::new();
        let (a, b) = (bucket(&clock, 5), bucket(&clock, 2));
        let all = AllOf::new([Arc::clone(&a), Arc::clone(&b)]);
        let error = all.check_n_report(3).unwrap_err();
        assert_eq!(error.member, 1);
        assert!(a.peek_n(5).unwrap().is_allowed());
        // Two members on one state whose costs together exceed it.
        let twice = AllOf::new([Arc::clone(&b), Arc::clone(&b)]);
        assert_eq!(twice.check_n_report(2).unwrap_err().member, 0);
        assert!(b.peek_n(2).unwrap().is_allowed());
    }
}
