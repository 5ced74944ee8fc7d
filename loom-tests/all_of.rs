//! The all-or-nothing multi-limit check (`policy::AllOf`): no interleaving
//! of racing `AllOf`s over shared member limiters charges a subset of the
//! members of a request that was refused.

use crate::{model, sane};
use loom::sync::Arc;
use loom::thread;
use rategate::policy::{AllOf, KeyedLimit, Limit};
use rategate::{KeyedRateLimiter, ManualClock, Quota, RateLimiter, TokenBucket};

type Bucket = RateLimiter<TokenBucket, ManualClock>;

/// A bucket of capacity 1 on a frozen clock: charged once it denies.
fn bucket(clock: &ManualClock) -> Arc<Bucket> {
    Arc::new(RateLimiter::with_clock(Quota::per_second(1).unwrap(), clock.clone()).unwrap())
}

/// `AllOf::new` takes the crate's `Arc<dyn Limit>`, loom's under loom: a
/// trait object goes through std's `Arc`, which can unsize.
fn member<L: Limit + 'static>(limit: L) -> Arc<dyn Limit> {
    Arc::from_std(std::sync::Arc::new(limit) as std::sync::Arc<dyn Limit>)
}

fn charged(limiter: &Bucket) -> u32 {
    u32::from(!limiter.peek().is_allowed())
}

/// Runs each `AllOf` on its own thread (the first on this one) and returns
/// which were admitted.
fn race(all: Vec<AllOf>) -> Vec<bool> {
    let mut all = all.into_iter();
    let mine = all.next().unwrap();
    let handles: Vec<_> = all
        .map(|a| {
            thread::spawn(move || {
                let r = a.check_n_report(1).unwrap();
                sane(&r.decision());
                r.is_allowed()
            })
        })
        .collect();
    let r = mine.check_n_report(1).unwrap();
    sane(&r.decision());
    let mut admitted = vec![r.is_allowed()];
    admitted.extend(handles.into_iter().map(|h| h.join().unwrap()));
    admitted
}

/// Two `AllOf`s share one limit of capacity 1, listed first in one and
/// last in the other: one request passes; the refused one charges its own
/// limit nothing, and the shared limit is charged once.
#[test]
fn two_all_ofs_sharing_a_limit_charge_all_or_nothing() {
    model(|| {
        let clock = ManualClock::new();
        let (shared, a, b) = (bucket(&clock), bucket(&clock), bucket(&clock));
        let admitted = race(vec![
            AllOf::new([member(a.clone()), member(shared.clone())]),
            AllOf::new([member(shared.clone()), member(b.clone())]),
        ]);
        assert_eq!(admitted.iter().filter(|&&x| x).count(), 1);
        assert_eq!(
            charged(&a),
            u32::from(admitted[0]),
            "a charged iff admitted"
        );
        assert_eq!(
            charged(&b),
            u32::from(admitted[1]),
            "b charged iff admitted"
        );
        assert_eq!(charged(&shared), 1);
    });
}

/// Three `AllOf`s in a ring (x+y, y+z, z+x; every pair shares a limit of
/// capacity 1): exactly one passes, and each limit is charged exactly by
/// the admitted requests it is a member of.
#[test]
fn three_all_ofs_in_a_ring_charge_all_or_nothing() {
    model(|| {
        let clock = ManualClock::new();
        let (x, y, z) = (bucket(&clock), bucket(&clock), bucket(&clock));
        let admitted = race(vec![
            AllOf::new([member(x.clone()), member(y.clone())]),
            AllOf::new([member(y.clone()), member(z.clone())]),
            AllOf::new([member(z.clone()), member(x.clone())]),
        ]);
        assert_eq!(admitted.iter().filter(|&&x| x).count(), 1);
        let by = |i: usize, j: usize| u32::from(admitted[i]) + u32::from(admitted[j]);
        assert_eq!(charged(&x), by(0, 2));
        assert_eq!(charged(&y), by(0, 1));
        assert_eq!(charged(&z), by(1, 2));
    });
}

/// Keyed members (a new key inserted by its reservation, under the map's
/// write lock) racing over a shared direct limit.
#[test]
fn keyed_members_charge_all_or_nothing() {
    model(|| {
        let clock = ManualClock::new();
        let keyed = Arc::new(
            KeyedRateLimiter::<u8, TokenBucket>::builder(Quota::per_second(2).unwrap())
                .clock(clock.clone())
                .build()
                .unwrap(),
        );
        // Key 1 is known, one of its two slots left; key 2 is new
        // (inserted by its reservation, then checked).
        assert!(keyed.check(&1).is_allowed());
        let shared = bucket(&clock);
        let admitted = race(vec![
            AllOf::new([
                member(KeyedLimit::new(keyed.clone(), 1)),
                member(shared.clone()),
            ]),
            AllOf::new([
                member(shared.clone()),
                member(KeyedLimit::new(keyed.clone(), 2)),
            ]),
        ]);
        assert_eq!(admitted.iter().filter(|&&x| x).count(), 1);
        assert_eq!(keyed.peek(&1).is_allowed(), !admitted[0]);
        assert_eq!(keyed.peek_n(&2, 2).unwrap().is_allowed(), !admitted[1]);
        assert_eq!(charged(&shared), 1);
    });
}

/// A one-rule request (a one-member `AllOf`: a check under the key's
/// stripe) racing a two-rule request over the same limit of capacity 1: the
/// refused one charges nothing.
#[test]
fn a_one_member_check_racing_two_members_charges_all_or_nothing() {
    model(|| {
        let clock = ManualClock::new();
        let (shared, other) = (bucket(&clock), bucket(&clock));
        let admitted = race(vec![
            AllOf::new([member(shared.clone())]),
            AllOf::new([member(other.clone()), member(shared.clone())]),
        ]);
        assert_eq!(admitted.iter().filter(|&&x| x).count(), 1);
        assert_eq!(
            charged(&other),
            u32::from(admitted[1]),
            "other charged iff admitted"
        );
        assert_eq!(charged(&shared), 1);
    });
}

/// Two keys past a keyed limiter's key cap share its overflow state (one
/// slot left): a one-member request on one key races a two-member request
/// on the other.
#[test]
fn overflow_keys_charge_all_or_nothing() {
    model(|| {
        let clock = ManualClock::new();
        let keyed = Arc::new(
            KeyedRateLimiter::<u8, TokenBucket>::builder(Quota::per_second(2).unwrap())
                .clock(clock.clone())
                .max_keys(1)
                .build()
                .unwrap(),
        );
        // Key 0 fills the map; one of the overflow state's two slots is
        // taken by key 9.
        assert!(keyed.check(&0).is_allowed());
        assert!(keyed.check(&9).is_allowed());
        let other = bucket(&clock);
        let admitted = race(vec![
            AllOf::new([member(KeyedLimit::new(keyed.clone(), 1))]),
            AllOf::new([
                member(other.clone()),
                member(KeyedLimit::new(keyed.clone(), 2)),
            ]),
        ]);
        assert_eq!(admitted.iter().filter(|&&x| x).count(), 1);
        assert_eq!(
            charged(&other),
            u32::from(admitted[1]),
            "other charged iff admitted"
        );
        assert!(!keyed.peek(&3).is_allowed(), "the overflow state is spent");
    });
}
