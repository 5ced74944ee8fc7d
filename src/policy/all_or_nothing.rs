//! The all-or-nothing decision: several limits admit a request together,
//! or none of them is charged. One path for any number of limits, used by
//! [`AllOf`](super::AllOf) and by the HTTP layer's rules.
//!
//! # How it holds
//!
//! The decision takes the lock stripe of every state it decides on
//! ([`crate::stripes`]), then
//!
//! 1. *reserves* each member: finds the state it decides on (a keyed
//!    limiter inserts a key it did not hold, or finds that the key belongs
//!    in the overflow state) and peeks the member's cost there. Members
//!    that turn out to share one state (one limiter listed twice, two keys
//!    past a key cap) peek their costs together as well;
//! 2. if every peek admitted, *checks* each member, recording the request.
//!
//! A member whose state is guarded by a stripe the decision does not hold
//! (a key that went to its limiter's overflow state) says so before
//! anything is recorded; the decision then takes that stripe as well and
//! starts again. While the stripes are held, no other decision changes
//! these states, a key found stays where it was found (a sweep leaves a
//! key whose stripe is held), and time passing only frees capacity in
//! every algorithm: so every check admits what its peek admitted, and a
//! refused request records nothing anywhere. One member is simply checked
//! under its stripe: its own check is atomic, and the stripe keeps it out
//! of other decisions' way between their peeks and checks.
//!
//! What the guarantee does not cover: a check made directly on a shared
//! limiter (`limiter.check_n`), outside any layer or `AllOf`, takes no
//! stripe. If it takes the last slot of a member between a decision's peek
//! and its check, the decision's earlier members have been charged for a
//! request that is then refused. A limit of the application's own that
//! panics in its check leaves the members checked before it charged (the
//! stripes are released as the panic unwinds). Such code runs while the
//! decision holds its stripes: a `set_quota`, a `reset` or another `AllOf`
//! it makes takes only the stripes that are free (waiting could deadlock),
//! so it does not wait for other threads' decisions. A limit of your own
//! that wraps another limit decides on a state of its own: listed beside
//! the limit it wraps, the two are not told to be one state. A refused
//! request may leave the keys it reserved in their maps (they hold full
//! budgets, and are swept when idle).

use crate::stripes::{mask_of, with_stripes};
use crate::{CheckError, Decision};
use std::fmt;

/// Which state a member decided on, within one decision: equal for two
/// members on the same state (one limiter listed twice, two rules on one
/// keyed limiter for one key, keys past a key cap in one overflow state).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StateId {
    /// The address of the limiter (or tier) that holds the state.
    owner: usize,
    /// Which of its states: a key's hash by the limiter's own seeded map
    /// hasher, so that two keys share an id only by a 64-bit accident no
    /// client can aim at; 0 for a limiter with one state.
    state: u64,
    /// The limiter's overflow state, shared by the keys past its key cap.
    overflow: bool,
}

impl StateId {
    /// State `state` of the limiter at `owner`.
    pub(crate) fn of(owner: usize, state: u64) -> StateId {
        StateId {
            owner,
            state,
            overflow: false,
        }
    }

    /// The overflow state of the limiter at `owner`.
    pub(crate) fn overflow(owner: usize) -> StateId {
        StateId {
            owner,
            state: 0,
            overflow: true,
        }
    }

    /// The address of the limiter that holds the state (a policy's check
    /// finds the tier its peek chose by it).
    #[cfg(all(feature = "http", feature = "serde"))]
    pub(crate) fn owner(&self) -> usize {
        self.owner
    }
}

/// What a member decides while a decision holds the stripes in a mask.
/// Part of the protocol between [`Limit`](super::Limit) (or the HTTP
/// layer's `Backend`) and the all-or-nothing decision; a limit of your own
/// keeps the provided methods that return it.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held<T> {
    /// Decided on a state whose stripe is held.
    Decided(Result<T, CheckError>),
    /// The state is guarded by the stripe of this lock id, which the
    /// decision does not hold: nothing was recorded.
    NeedStripe(u64),
}

/// A member's cost can never pass: which member, and its error. Nothing was
/// consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberError {
    /// The index in [`AllOf::members`](super::AllOf::members) of the limit
    /// whose capacity the cost exceeds.
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

/// One limit in a decision, with the cost the request takes from it.
pub(crate) trait Member {
    /// What the request costs this member.
    fn cost(&self) -> u32;
    /// The lock id of the stripe that guards the member's state, as far
    /// as it is known before the decision (a keyed limit's key).
    fn lock_id(&self) -> u64;
    /// Finds the member's state and peeks `cost` there.
    fn reserve(&self, cost: u32, held: u64) -> Held<(Decision, StateId)>;
    /// Checks `cost`, recording it if admitted, on the state the
    /// reservation found (`reserved`; `None` when nothing was reserved).
    fn check(&self, cost: u32, held: u64, reserved: Option<StateId>) -> Held<Decision>;
}

/// Members decided without a heap allocation for their bookkeeping.
const INLINE: usize = 4;

/// Decides `members` all or nothing: with `commit`, records the request in
/// every member or in none; without, only says whether they would all
/// admit it now. `decisions[i]` gets member `i`'s decision (its check's
/// after an admission, else its peek's); it must be as long as `members`.
/// Returns whether every member admitted.
///
/// # Errors
///
/// A [`MemberError`] when a member (or several on one state, together) can
/// never admit its cost; nothing is recorded.
pub(crate) fn decide<M: Member>(
    members: &[M],
    commit: bool,
    decisions: &mut [Decision],
) -> Result<bool, MemberError> {
    let Some(first) = members.first() else {
        return Ok(true);
    };
    let mut mask = members.iter().fold(mask_of(first.lock_id()), |mask, m| {
        mask | mask_of(m.lock_id())
    });
    let mut inline = [StateId::default(); INLINE];
    let mut spill = Vec::new();
    let ids: &mut [StateId] = if members.len() <= INLINE {
        &mut inline[..members.len()]
    } else {
        spill.resize(members.len(), StateId::default());
        &mut spill
    };
    loop {
        match with_stripes(mask, || attempt(members, mask, commit, decisions, ids)) {
            Attempt::Done(result) => return result,
            // Each retry adds a stripe to the mask, so there are at most
            // as many retries as stripes.
            Attempt::Need(lock_id) => mask |= mask_of(lock_id),
            // A key placed in an overflow state found room since: the
            // next attempt finds it in its limiter's map.
            Attempt::Moved => {}
        }
    }
}

enum Attempt {
    Done(Result<bool, MemberError>),
    Need(u64),
    Moved,
}

/// One try at the decision, holding the stripes in `held`.
fn attempt<M: Member>(
    members: &[M],
    held: u64,
    commit: bool,
    decisions: &mut [Decision],
    ids: &mut [StateId],
) -> Attempt {
    let error = |member, error| Attempt::Done(Err(MemberError { member, error }));
    if let ([only], true) = (members, commit) {
        return match only.check(only.cost(), held, None) {
            Held::NeedStripe(lock_id) => Attempt::Need(lock_id),
            Held::Decided(Err(e)) => error(0, e),
            Held::Decided(Ok(decision)) => {
                decisions[0] = decision;
                Attempt::Done(Ok(decision.is_allowed()))
            }
        };
    }
    let mut admitted = true;
    for (i, member) in members.iter().enumerate() {
        match member.reserve(member.cost(), held) {
            Held::NeedStripe(lock_id) => return Attempt::Need(lock_id),
            Held::Decided(Err(e)) => return error(i, e),
            Held::Decided(Ok((decision, id))) => {
                decisions[i] = decision;
                ids[i] = id;
                admitted &= decision.is_allowed();
            }
        }
    }
    // A key placed in its limiter's overflow state (the map was full) can
    // find room a moment later, when a sweep or a reset frees some: a
    // later member of the same limiter and key then inserts it, and the
    // two would be decided on different states. Placements are settled
    // once no overflow placement would now land elsewhere. Only keys past
    // a key cap pay for the second look.
    if ids.iter().any(|id| id.overflow) {
        for (i, member) in members.iter().enumerate() {
            if !ids[i].overflow {
                continue;
            }
            match member.reserve(member.cost(), held) {
                Held::NeedStripe(lock_id) => return Attempt::Need(lock_id),
                Held::Decided(Err(e)) => return error(i, e),
                Held::Decided(Ok((_, id))) if id != ids[i] => return Attempt::Moved,
                Held::Decided(Ok(_)) => {}
            }
        }
    }
    // Members on one state must fit in it together: the first of each
    // such group peeks the group's whole cost.
    for i in 0..members.len() {
        if !admitted {
            break;
        }
        if ids[..i].contains(&ids[i]) {
            continue;
        }
        let together = (i + 1..members.len())
            .filter(|&j| ids[j] == ids[i])
            .fold(members[i].cost(), |sum, j| {
                sum.saturating_add(members[j].cost())
            });
        if together == members[i].cost() {
            continue;
        }
        match members[i].reserve(together, held) {
            Held::NeedStripe(lock_id) => return Attempt::Need(lock_id),
            Held::Decided(Err(e)) => return error(i, e),
            Held::Decided(Ok((decision, _))) if !decision.is_allowed() => {
                decisions[i] = decision;
                admitted = false;
            }
            Held::Decided(Ok(_)) => {}
        }
    }
    if !admitted || !commit {
        return Attempt::Done(Ok(admitted));
    }
    for (i, member) in members.iter().enumerate() {
        match member.check(member.cost(), held, Some(ids[i])) {
            Held::Decided(Ok(decision)) => {
                decisions[i] = decision;
                if !decision.is_allowed() {
                    // Only a check outside every decision (see the module
                    // docs) takes capacity between a peek and its check.
                    return Attempt::Done(Ok(false));
                }
            }
            Held::Decided(Err(e)) => return error(i, e),
            // The reservation left the key in the map or took the stripe
            // of the state it is in, so a check finds it where the peek
            // did: never reached.
            Held::NeedStripe(_) => return Attempt::Done(Ok(false)),
        }
    }
    Attempt::Done(Ok(true))
}
