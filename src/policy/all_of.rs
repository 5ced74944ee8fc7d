//! Several limits at once: a request passes only when every one admits it,
//! and a denial consumes nothing from any of them.

use super::stripes::{keyed_lock_id, stripe_of, with_stripes};
use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::sync::Arc;
use crate::{CheckError, Decision, KeyedRateLimiter, Quota, RateLimiter};
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
    /// one). [`AllOf`] decides members with distinct state ids nested (see
    /// [`peek_then_check_n`](Limit::peek_then_check_n)), others one after
    /// the other.
    fn state_id(&self) -> usize {
        (self as *const Self).cast::<()>() as usize
    }

    /// Which of [`AllOf`]'s lock stripes guards this limit: equal for every
    /// handle on the same state. The default is the state id; a keyed limit
    /// mixes in its key, so that `AllOf`s on different keys of one keyed
    /// limiter rarely wait for each other.
    fn lock_id(&self) -> u64 {
        self.state_id() as u64
    }

    /// Peeks `cost`, shows the peek to `commit`, and if `commit` returns
    /// `true` checks `cost` (recording it if admitted). Returns the check's
    /// decision after a commit, else the peek's.
    ///
    /// [`AllOf`] decides through this method, nesting each member's call
    /// inside the previous member's `commit` (the last member just checks).
    /// The default peeks and checks separately; a limit that must find its
    /// state first overrides it to find it once ([`KeyedLimit`] decides on
    /// one map lookup, holding the key's entry across both, so that no
    /// sweep can drop it in between). An override may hold a lock on its
    /// state while `commit` runs: `AllOf` nests only members whose
    /// [`state_id`](Limit::state_id)s differ, so `commit` never touches a
    /// state with this one's id.
    ///
    /// # Errors
    ///
    /// As [`check_n`](Limit::check_n); `commit` is then not called.
    fn peek_then_check_n(
        &self,
        cost: u32,
        commit: &mut dyn FnMut(&Decision) -> bool,
    ) -> Result<Decision, CheckError> {
        let peek = self.peek_n(cost)?;
        if commit(&peek) {
            self.check_n(cost)
        } else {
            Ok(peek)
        }
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

    /// One clock reading for the peek and the check.
    fn peek_then_check_n(
        &self,
        cost: u32,
        commit: &mut dyn FnMut(&Decision) -> bool,
    ) -> Result<Decision, CheckError> {
        RateLimiter::peek_then_check_n(self, cost, commit)
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

    fn lock_id(&self) -> u64 {
        (**self).lock_id()
    }

    fn peek_then_check_n(
        &self,
        cost: u32,
        commit: &mut dyn FnMut(&Decision) -> bool,
    ) -> Result<Decision, CheckError> {
        (**self).peek_then_check_n(cost, commit)
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

    fn lock_id(&self) -> u64 {
        keyed_lock_id(&self.key)
    }

    fn peek_then_check_n(
        &self,
        cost: u32,
        commit: &mut dyn FnMut(&Decision) -> bool,
    ) -> Result<Decision, CheckError> {
        self.limiter.peek_then_check_n(&self.key, cost, commit)
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

/// A member's cost can never pass: which member, and its error. Nothing was
/// consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberError {
    /// The index in [`AllOf::members`] of the limit whose capacity the cost
    /// exceeds.
    pub member: usize,
    /// That limit's error.
    pub error: CheckError,
}

impl fmt::Display for MemberError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "member {}: {}", self.member, self.error)
    }
}

impl std::error::Error for MemberError {}

/// Folds the members' final decisions into the binding one.
struct Fold<'a> {
    best: Option<(usize, Decision)>,
    peeks_allowed: bool,
    /// Member `i`'s latest decision goes to `decisions[i]`, when the
    /// caller asked for them (an empty slice: not kept).
    decisions: &'a mut [Decision],
    /// Only keep the decisions: the binding one is found afterwards, if at
    /// all ([`bind`]).
    keep_only: bool,
    /// Every decision recorded admitted (a member records its peek and
    /// then its check only when every peek admitted, so this is whether
    /// the request was admitted everywhere).
    all_allowed: bool,
}

impl<'a> Fold<'a> {
    fn new(decisions: &'a mut [Decision], keep_only: bool) -> Fold<'a> {
        Fold {
            best: None,
            peeks_allowed: true,
            decisions,
            keep_only,
            all_allowed: true,
        }
    }

    fn record(&mut self, member: usize, decision: Decision) {
        if let Some(slot) = self.decisions.get_mut(member) {
            *slot = decision;
        }
        self.all_allowed &= decision.is_allowed();
        if self.keep_only {
            return;
        }
        // On a tie the first member binds, whatever order they came in.
        self.best = Some(match self.best {
            Some((i, best))
                if !tighter(&decision, &best) && (i < member || tighter(&best, &decision)) =>
            {
                (i, best)
            }
            _ => (member, decision),
        });
    }

    fn finish(self) -> AllOfDecision {
        AllOfDecision {
            decision: self.best.map_or_else(unlimited, |(_, d)| d),
            member: self.best.map(|(i, _)| i),
        }
    }
}

/// The binding decision among members' final decisions (what
/// [`decide_all`] returns), from those [`admits_all`] kept.
#[cfg(feature = "tower")]
pub(crate) fn bind(decisions: &[Decision]) -> AllOfDecision {
    let mut fold = Fold::new(&mut [], false);
    for (i, decision) in decisions.iter().enumerate() {
        fold.record(i, *decision);
    }
    fold.finish()
}

/// Whether `b` binds more than `a`: a denial over an admission, the longer
/// retry between denials (every member must admit), the fewer remaining
/// between admissions.
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

/// The all-or-nothing decision over `members`, each charged `cost`;
/// `decisions[i]` gets member `i`'s decision (the check's after a commit,
/// else the peek's) when `decisions` has room for every member; an empty
/// slice keeps none. Allocates nothing.
pub(crate) fn decide_all<M: Limit>(
    members: &[M],
    cost: u32,
    decisions: &mut [Decision],
) -> Result<AllOfDecision, MemberError> {
    let mut fold = Fold::new(decisions, false);
    run(members, cost, &mut fold)?;
    Ok(fold.finish())
}

/// [`decide_all`] without finding the binding decision: whether every
/// member admitted, each member's decision kept in `decisions` as
/// `decide_all` keeps them, for [`bind`] when the caller needs the
/// binding one (the HTTP layer's admissions without headers do not).
#[cfg(feature = "tower")]
pub(crate) fn admits_all<M: Limit>(
    members: &[M],
    cost: u32,
    decisions: &mut [Decision],
) -> Result<bool, MemberError> {
    let mut fold = Fold::new(decisions, true);
    run(members, cost, &mut fold)?;
    Ok(fold.all_allowed)
}

fn run<M: Limit>(members: &[M], cost: u32, fold: &mut Fold<'_>) -> Result<(), MemberError> {
    if let [only] = members {
        // Alone, a member needs no lock: its own check is atomic.
        let decision = only
            .check_n(cost)
            .map_err(|error| MemberError { member: 0, error })?;
        fold.record(0, decision);
        return Ok(());
    }
    let mut mask = 0u64;
    for member in members {
        mask |= 1 << stripe_of(member.lock_id());
    }
    // Distinct stripes imply distinct states; otherwise compare the ids.
    let distinct = mask.count_ones() as usize == members.len()
        || members.iter().enumerate().all(|(i, a)| {
            let id = a.state_id();
            members[..i].iter().all(|b| b.state_id() != id)
        });
    with_stripes(mask, || match members {
        [a, b] if distinct => {
            let none = Decision::allow(0, 0, 0);
            let mut out = [none; 2];
            if pair(a, b, cost, &mut out)? {
                fold.record(1, out[1]);
            }
            fold.record(0, out[0]);
            Ok(())
        }
        _ if distinct => nested(members, 0, cost, fold).map(drop),
        _ => two_phase(members, cost, fold),
    })
}

/// [`nested`] for two members (the HTTP layer's common case: a quota per
/// hour and one per second), without the recursion: `a` peeks, `b`
/// checks inside `a`'s commit if `a`'s peek admitted (else only peeks),
/// and `a` checks if both admitted. On success writes `a`'s decision to
/// `out[0]` and `b`'s to `out[1]`, and returns whether `b` decided
/// (`false` only from a `Limit` that broke `peek_then_check_n`'s
/// contract, as in `nested`: then only `a`'s decision counts, and
/// `out[1]` is left as it was). On an error `out` is left as it was.
///
/// The decisions go straight to `out` rather than back in a returned
/// tuple: at saturation each line of code the HTTP layer's two-rule check
/// runs is fetched again per request, and moving a tuple of decisions
/// through each caller's `Result` took several of them.
fn pair<M: Limit>(a: &M, b: &M, cost: u32, out: &mut [Decision; 2]) -> Result<bool, MemberError> {
    let mut second = None;
    // Whether every decision so far admitted. Kept across calls of the
    // commit, as `nested` keeps `peeks_allowed`: a `Limit` that shows it
    // more than one peek (breaking its contract) gets no commit after a
    // denial.
    let mut admitted = true;
    let first = a
        .peek_then_check_n(cost, &mut |peek| {
            admitted &= peek.is_allowed();
            let decision = if admitted {
                b.check_n(cost)
            } else {
                b.peek_n(cost)
            };
            admitted &= decision.is_ok_and(|d| d.is_allowed());
            second = Some(decision);
            admitted
        })
        .map_err(|error| MemberError { member: 0, error })?;
    // `peek_then_check_n` shows every successful peek to the commit, so
    // `second` is set once `a` decided.
    let decided = match second {
        None => false,
        Some(Err(error)) => return Err(MemberError { member: 1, error }),
        Some(Ok(second)) => {
            out[1] = second;
            true
        }
    };
    out[0] = first;
    Ok(decided)
}

/// [`admits_all`] for two members, in fewer lines of code than the
/// general path (no slices of members, no fold): at saturation a server
/// fetches each cache line of code a request runs again per request, so
/// the HTTP layer's two-rule check pays for the code it spans as much as
/// for its instructions. Decides as `admits_all(members, cost,
/// decisions)` does.
#[cfg(feature = "tower")]
#[inline(always)]
pub(crate) fn admits_pair<M: Limit>(
    members: &[M; 2],
    cost: u32,
    decisions: &mut [Decision; 2],
) -> Result<bool, MemberError> {
    let [a, b] = members;
    let mask = 1u64 << stripe_of(a.lock_id()) | 1u64 << stripe_of(b.lock_id());
    // Distinct stripes imply distinct states (as in `run`).
    if mask.count_ones() == 1 && a.state_id() == b.state_id() {
        return admits_all(members, cost, decisions);
    }
    let decided = with_stripes(mask, || pair(a, b, cost, decisions))?;
    Ok(decisions[0].is_allowed() && (!decided || decisions[1].is_allowed()))
}

/// Member `i` peeks, and inside its `commit` the members after it decide;
/// each checks on the way back out if every peek admitted and every member
/// after it was charged (the innermost checks at once). One lookup per member, every decision of a member
/// at one instant. Members must be on distinct states: a keyed member holds
/// its map entry while the later members decide.
///
/// Returns whether members `i..` were all charged.
fn nested<M: Limit>(
    members: &[M],
    i: usize,
    cost: u32,
    fold: &mut Fold<'_>,
) -> Result<bool, MemberError> {
    let Some(member) = members.get(i) else {
        return Ok(fold.peeks_allowed);
    };
    if i + 1 == members.len() {
        // The innermost member decides last, with every other peek known:
        // it checks at once (a denial records nothing, as its peek would)
        // if they all admitted, and only peeks (for the report) if not.
        let decision = if fold.peeks_allowed {
            member.check_n(cost)
        } else {
            member.peek_n(cost)
        }
        .map_err(|error| MemberError { member: i, error })?;
        fold.peeks_allowed &= decision.is_allowed();
        fold.record(i, decision);
        return Ok(fold.peeks_allowed);
    }
    let mut inner = Ok(false);
    let decision = member
        .peek_then_check_n(cost, &mut |peek| {
            fold.peeks_allowed &= peek.is_allowed();
            inner = nested(members, i + 1, cost, fold);
            matches!(inner, Ok(true))
        })
        .map_err(|error| MemberError { member: i, error })?;
    let committed = inner?;
    fold.record(i, decision);
    // A committed check denies only when a caller outside every `AllOf`
    // took the capacity since the peek: the members after this one were
    // charged, the ones before it will not be (see the type's docs).
    Ok(committed && decision.is_allowed())
}

/// Members sharing a state (two keys of one keyed limiter): peek them all,
/// then check them all, one lookup each time.
fn two_phase<M: Limit>(members: &[M], cost: u32, fold: &mut Fold<'_>) -> Result<(), MemberError> {
    for (i, member) in members.iter().enumerate() {
        let peek = member
            .peek_n(cost)
            .map_err(|error| MemberError { member: i, error })?;
        fold.peeks_allowed &= peek.is_allowed();
        fold.record(i, peek);
    }
    if !fold.peeks_allowed {
        return Ok(());
    }
    fold.best = None;
    for (i, member) in members.iter().enumerate() {
        let decision = member
            .check_n(cost)
            .map_err(|error| MemberError { member: i, error })?;
        fold.record(i, decision);
        if !decision.is_allowed() {
            // As in `nested`: only a check outside every `AllOf` gets here.
            return Ok(());
        }
    }
    Ok(())
}

/// Several limits that admit a request together or not at all: Stripe's
/// read or write limit plus a per-endpoint limit, a per-user limit plus a
/// global one, a burst limit plus a daily cap.
///
/// A check *peeks* every member (recording nothing); if any would deny, it
/// returns that denial (the one with the longest retry time, since every
/// member must admit) and nothing is consumed anywhere. Otherwise it checks
/// every member, recording the request in each.
/// [`check_n_report`](AllOf::check_n_report) also says which member denied.
///
/// The members decide nested: each member's peek runs the later members'
/// decisions inside it, and checks once they all admitted, so a member on
/// a keyed limiter ([`KeyedLimit`]) is looked up once, not twice, and a
/// check allocates nothing.
///
/// # What "all or nothing" guarantees
///
/// During a check, `AllOf` holds a lock stripe for every member's state
/// (stripes shared by all `AllOf`s in the process, chosen by
/// [`Limit::lock_id`]: per key for a keyed limiter; taken in a fixed order,
/// so there is no deadlock). Time passing only frees capacity in every
/// algorithm, so among callers that go through an `AllOf`, a member that
/// admitted the peek admits the check: all or nothing holds exactly (a loom
/// model checks it for every interleaving of three racing `AllOf`s).
///
/// A caller that checks a member limiter *directly*, outside any `AllOf`,
/// takes no stripe. If such a check takes the last slot of member `B`
/// between this `AllOf`'s peek and its check of `B`, the members after `B`
/// have recorded the request and `B` denies it: the request is refused but
/// charged to those members (`AllOf` does not give it back: [`Limit`] has
/// no refund, though [`RateLimiter::refund`] does). To rule that
/// out, route every use of a shared limiter through `AllOf`s (a one-member
/// `AllOf` costs no lock) or give `AllOf` its own limiters. The lock is held
/// for two lock-free operations per member, tens of nanoseconds.
///
/// The same holds for keys of a keyed limiter past its key cap under
/// [`Overflow::Shared`](crate::Overflow::Shared): they share one state but
/// not one stripe.
///
/// An `AllOf` is itself a [`Limit`], but list an inner `AllOf`'s members in
/// the outer one rather than nesting it: the stripes are not reentrant, so
/// a nested `AllOf` whose stripes collide with the outer one's deadlocks.
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

impl AllOf {
    /// The limits a request must pass together. An empty set admits
    /// everything.
    pub fn new(members: impl IntoIterator<Item = Arc<dyn Limit>>) -> Self {
        AllOf {
            members: members.into_iter().collect(),
        }
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
        decide_all(&self.members, cost, &mut [])
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
        match self.check_n_report(cost) {
            Ok(report) => Ok(report.decision()),
            Err(e) => Err(e.error),
        }
    }

    fn peek_n(&self, cost: u32) -> Result<Decision, CheckError> {
        let mut peeked: Option<Decision> = None;
        for member in &self.members {
            let d = member.peek_n(cost)?;
            if peeked.is_none_or(|p| tighter(&d, &p)) {
                peeked = Some(d);
            }
        }
        Ok(peeked.unwrap_or_else(unlimited))
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

#[cfg(all(test, feature = "tower", not(rategate_loom)))]
mod tests {
    use super::*;
    use crate::{KeyedRateLimiter, ManualClock, Quota, RateLimiter, TokenBucket};
    use proptest::prelude::*;
    use std::time::Duration;

    type Keyed = KeyedRateLimiter<String, TokenBucket, ManualClock>;

    /// Two members of the kind `shape` names, on fresh limiters of
    /// `limits` per second: 0, two direct limiters; 1, one direct limiter
    /// twice (one state); 2, one key on two keyed limiters (one lock
    /// stripe, two states: the HTTP layer's case); 3, one key of one
    /// keyed limiter twice (one state); 4, two keys of one keyed limiter.
    fn members(clock: &ManualClock, limits: [u32; 2], shape: u8) -> [Arc<dyn Limit>; 2] {
        let quota = |n| Quota::per_second(n).unwrap();
        let direct = |n| -> Arc<dyn Limit> {
            Arc::new(RateLimiter::<TokenBucket, _>::with_clock(quota(n), clock.clone()).unwrap())
        };
        let keyed = |n| {
            Arc::new(
                KeyedRateLimiter::<String, TokenBucket>::builder(quota(n))
                    .clock(clock.clone())
                    .build()
                    .unwrap(),
            )
        };
        let on = |limiter: &Arc<Keyed>, key: &str| -> Arc<dyn Limit> {
            Arc::new(KeyedLimit::new(Arc::clone(limiter), key.to_string()))
        };
        match shape {
            0 => [direct(limits[0]), direct(limits[1])],
            1 => {
                let one = direct(limits[0]);
                [Arc::clone(&one), one]
            }
            2 => [on(&keyed(limits[0]), "k"), on(&keyed(limits[1]), "k")],
            3 => {
                let one = keyed(limits[0]);
                [on(&one, "k"), on(&one, "k")]
            }
            _ => {
                let one = keyed(limits[0]);
                [on(&one, "k"), on(&one, "other")]
            }
        }
    }

    /// The general path's nesting, for two members on distinct states
    /// (what `pair` replaced): whether both were charged.
    fn by_nesting(
        members: &[Arc<dyn Limit>; 2],
        cost: u32,
        decisions: &mut [Decision; 2],
    ) -> Result<bool, MemberError> {
        let mut fold = Fold::new(decisions, true);
        let mask = members
            .iter()
            .fold(0u64, |mask, m| mask | 1 << stripe_of(m.lock_id()));
        with_stripes(mask, || nested(members, 0, cost, &mut fold))?;
        Ok(fold.all_allowed)
    }

    proptest! {
        /// The pair's short path decides every request as the general
        /// path does, and as the nesting it replaced where the states are
        /// distinct: the same result (error and member included), the
        /// same decision per member, the same state left behind (the next
        /// peeks agree).
        #[test]
        fn admits_pair_decides_as_admits_all(
            limits in proptest::array::uniform2(1u32..6),
            shape in 0u8..5,
            steps in proptest::collection::vec((0u64..400, 0u32..4), 1..40),
        ) {
            let clocks = [ManualClock::new(), ManualClock::new(), ManualClock::new()];
            let short = members(&clocks[0], limits, shape);
            let general = members(&clocks[1], limits, shape);
            let nesting = members(&clocks[2], limits, shape);
            let distinct = !matches!(shape, 1 | 3);
            for (advance_ms, cost) in steps {
                for clock in &clocks {
                    clock.advance(Duration::from_millis(advance_ms));
                }
                let none = Decision::allow(0, 0, 0);
                let (mut got, mut want, mut nested_got) = ([none; 2], [none; 2], [none; 2]);
                let by_pair = admits_pair(&short, cost, &mut got);
                let by_all = admits_all(&general, cost, &mut want);
                let key = |r: Result<bool, MemberError>| r.map_err(|e| (e.member, e.error));
                prop_assert_eq!(key(by_pair), key(by_all));
                prop_assert_eq!(got, want);
                if distinct {
                    let nested_result = by_nesting(&nesting, cost, &mut nested_got);
                    prop_assert_eq!(key(nested_result), key(by_all));
                    prop_assert_eq!(nested_got, want);
                }
                for ((a, b), c) in short.iter().zip(&general).zip(&nesting) {
                    prop_assert_eq!(a.peek_n(1), b.peek_n(1));
                    if distinct {
                        prop_assert_eq!(c.peek_n(1), b.peek_n(1));
                    }
                }
            }
        }
    }
}
