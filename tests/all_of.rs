//! AllOf: several limits admit together or not at all.

use rategate::policy::{AllOf, KeyedLimit, Limit};
use rategate::{
    CheckError, FixedWindow, KeyedRateLimiter, ManualClock, Quota, RateLimiter, SlidingWindowLog,
    TokenBucket,
};
use std::sync::Arc;
use std::time::Duration;

fn bucket(clock: &ManualClock, per_sec: u32) -> Arc<RateLimiter<TokenBucket, ManualClock>> {
    Arc::new(RateLimiter::with_clock(Quota::per_second(per_sec).unwrap(), clock.clone()).unwrap())
}

#[test]
fn a_denial_consumes_nothing_from_the_other_limits() {
    let clock = ManualClock::new();
    let read = bucket(&clock, 100);
    let endpoint = bucket(&clock, 2);
    let window = Arc::new(
        RateLimiter::<FixedWindow, _>::with_clock(Quota::per_second(50).unwrap(), clock.clone())
            .unwrap(),
    );
    let all = AllOf::new([
        read.clone() as Arc<dyn Limit>,
        window.clone(),
        endpoint.clone(),
    ]);
    assert!(all.check_n(1).unwrap().is_allowed());
    assert!(all.check_n(1).unwrap().is_allowed());
    // The endpoint (last member) is spent: ten denials charge nobody.
    for _ in 0..10 {
        let d = all.check_n(1).unwrap();
        assert!(!d.is_allowed());
        assert_eq!(
            d.retry_after(),
            Duration::from_millis(500),
            "the endpoint's retry"
        );
    }
    // peek's remaining counts after the request it peeks: 100 - 2 - 1.
    assert_eq!(read.peek().remaining(), 97);
    assert_eq!(window.peek().remaining(), 47);
    // A denial by the first member charges the later ones nothing either.
    let spent = bucket(&clock, 1);
    assert!(spent.check().is_allowed());
    let other = bucket(&clock, 10);
    let all = AllOf::new([spent.clone() as Arc<dyn Limit>, other.clone()]);
    assert!(!all.check_n(1).unwrap().is_allowed());
    assert_eq!(other.peek().remaining(), 9, "untouched");
    // After the retry time, all pass together.
    clock.advance(Duration::from_secs(1));
    assert!(all.check_n(1).unwrap().is_allowed());
    assert_eq!(other.peek().remaining(), 8);
}

#[test]
fn the_binding_decision_is_the_tightest() {
    let clock = ManualClock::new();
    let loose = bucket(&clock, 100);
    let tight = bucket(&clock, 4);
    let all = AllOf::new([loose as Arc<dyn Limit>, tight.clone()]);
    let d = all.check_n(1).unwrap();
    assert_eq!((d.limit(), d.remaining()), (4, 3));
    assert_eq!(all.quota(), Some(Quota::per_second(4).unwrap()));
    assert_eq!(AllOf::new([]).quota(), None);
    assert!(AllOf::new([]).check_n(1_000).unwrap().is_allowed());
}

#[test]
fn a_cost_one_member_can_never_pass_is_an_error_consuming_nothing() {
    let clock = ManualClock::new();
    let big = bucket(&clock, 100);
    let small = bucket(&clock, 5);
    let all = AllOf::new([big.clone() as Arc<dyn Limit>, small]);
    assert_eq!(
        all.check_n(6),
        Err(CheckError::CostExceedsCapacity {
            cost: 6,
            capacity: 5
        })
    );
    assert_eq!(big.peek().remaining(), 99, "untouched");
}

#[test]
fn keyed_members_and_window_logs_compose() {
    let clock = ManualClock::new();
    let per_endpoint = Arc::new(
        KeyedRateLimiter::<String, SlidingWindowLog>::builder(Quota::per_second(3).unwrap())
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let write = bucket(&clock, 100);
    let charges = AllOf::new([
        write.clone() as Arc<dyn Limit>,
        Arc::new(KeyedLimit::new(
            Arc::clone(&per_endpoint),
            "charges".to_string(),
        )),
    ]);
    let refunds = AllOf::new([
        write.clone() as Arc<dyn Limit>,
        Arc::new(KeyedLimit::new(
            Arc::clone(&per_endpoint),
            "refunds".to_string(),
        )),
    ]);
    let passed = (0..10)
        .filter(|_| charges.check_n(1).unwrap().is_allowed())
        .count();
    assert_eq!(passed, 3);
    assert!(refunds.check_n(1).unwrap().is_allowed(), "another key");
    assert_eq!(
        write.peek().remaining(),
        95,
        "3 charges + 1 refund, no denial charged"
    );
}

/// Threads race through two AllOfs that share a limiter, with time frozen:
/// the shared limiter must be charged exactly what the two others were.
#[test]
fn concurrent_all_ofs_sharing_a_limit_charge_all_or_nothing() {
    for _ in 0..20 {
        let clock = ManualClock::new();
        let shared = bucket(&clock, 60);
        let a = bucket(&clock, 40);
        let b = bucket(&clock, 40);
        let via_a = Arc::new(AllOf::new([shared.clone() as Arc<dyn Limit>, a.clone()]));
        let via_b = Arc::new(AllOf::new([b.clone() as Arc<dyn Limit>, shared.clone()]));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let all = if t % 2 == 0 {
                    Arc::clone(&via_a)
                } else {
                    Arc::clone(&via_b)
                };
                std::thread::spawn(move || {
                    (0..200)
                        .filter(|_| all.check_n(1).unwrap().is_allowed())
                        .count()
                })
            })
            .collect();
        let admitted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        // Time is frozen, so what a bucket has admitted is its capacity
        // less what it could still admit.
        let used = |l: &RateLimiter<TokenBucket, ManualClock>, cap: u32| {
            let d = l.peek();
            cap - d.remaining() - u32::from(d.is_allowed())
        };
        assert_eq!(admitted, 60);
        assert_eq!(used(&shared, 60), used(&a, 40) + used(&b, 40));
        assert_eq!(used(&shared, 60), 60);
    }
}

/// Checks `a` and `b` on two threads released together; whether each was
/// admitted.
fn race_two(a: AllOf, b: AllOf) -> [bool; 2] {
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let [a, b] = [a, b].map(|all| {
        let barrier = Arc::clone(&barrier);
        std::thread::spawn(move || {
            barrier.wait();
            all.check_n(1).unwrap().is_allowed()
        })
    });
    [a.join().unwrap(), b.join().unwrap()]
}

/// The last slot of a shared limit, raced for by two AllOfs many times: the
/// window between peek and check is where a partial charge would happen
/// without the shared lock stripes.
#[test]
fn racing_for_the_last_shared_slot_never_charges_partially() {
    let mut partial = 0;
    for _ in 0..3000 {
        let clock = ManualClock::new();
        let shared = bucket(&clock, 1);
        let a = bucket(&clock, 1);
        let b = bucket(&clock, 1);
        let admitted = race_two(
            AllOf::new([a.clone() as Arc<dyn Limit>, shared.clone()]),
            AllOf::new([b.clone() as Arc<dyn Limit>, shared.clone()]),
        );
        assert_eq!(admitted.iter().filter(|&&x| x).count(), 1);
        let spent = |l: &RateLimiter<TokenBucket, ManualClock>| !l.peek().is_allowed();
        if usize::from(spent(&a)) + usize::from(spent(&b)) != 1 {
            partial += 1;
        }
    }
    assert_eq!(partial, 0, "rounds where a denied request was charged");
}

#[test]
fn the_report_names_the_denying_member() {
    let clock = ManualClock::new();
    let (loose, tight, slow) = (bucket(&clock, 100), bucket(&clock, 1), bucket(&clock, 2));
    let all = AllOf::new([loose.clone() as Arc<dyn Limit>, tight.clone(), slow.clone()]);
    let first = all.check_n_report(1).unwrap();
    assert!(first.is_allowed());
    assert_eq!(first.denied_by(), None);
    assert_eq!(
        first.binding(),
        Some(1),
        "the fewest remaining: tight, 0 left"
    );
    // Tight (1/s) needs 1 s; slow (2/s) still has one.
    let denied = all.check_n_report(1).unwrap();
    assert_eq!(denied.denied_by(), Some(1));
    assert_eq!(denied.decision().retry_after(), Duration::from_secs(1));
    assert_eq!(all.check_n(1).unwrap(), denied.decision());
    // Two deny: the longer wait binds (slow's 500 ms against tight's 1 s
    // after 400 ms: 100 ms against 600 ms).
    assert!(slow.check().is_allowed());
    clock.advance(Duration::from_millis(400));
    let both = all.check_n_report(1).unwrap();
    assert_eq!(both.denied_by(), Some(1));
    assert_eq!(both.decision().retry_after(), Duration::from_millis(600));
    // Equal waits: the first member binds.
    let (x, y) = (bucket(&clock, 1), bucket(&clock, 1));
    assert!(x.check().is_allowed() && y.check().is_allowed());
    let tie = AllOf::new([x as Arc<dyn Limit>, y]);
    assert_eq!(tie.check_n_report(1).unwrap().denied_by(), Some(0));
    // A cost that never passes names its member; nothing is consumed.
    let error = all.check_n_report(3).unwrap_err();
    assert_eq!(error.member, 1);
    assert_eq!(
        error.error,
        CheckError::CostExceedsCapacity {
            cost: 3,
            capacity: 1
        }
    );
    // Refilled in the 400 ms; the peek counts itself. Nothing else charged.
    assert_eq!(loose.peek().remaining(), 99);
    assert_eq!(AllOf::new([]).check_n_report(1).unwrap().binding(), None);
}

/// Two members on one keyed limiter (two keys): decided one after the
/// other, not nested, so a new key's insert never waits on a lookup the
/// same check holds. New and known keys, admitted and denied.
#[test]
fn two_keys_of_one_keyed_limiter_in_one_all_of() {
    let clock = ManualClock::new();
    let keyed = Arc::new(
        KeyedRateLimiter::<String, TokenBucket>::builder(Quota::per_second(2).unwrap())
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let other = bucket(&clock, 10);
    let key = |k: &str| Arc::new(KeyedLimit::new(Arc::clone(&keyed), k.to_string()));
    let all = AllOf::new([key("a") as Arc<dyn Limit>, other.clone(), key("b")]);
    assert!(keyed.check("b").is_allowed());
    assert!(all.check_n(1).unwrap().is_allowed(), "a new, b known");
    let denied = all.check_n_report(1).unwrap();
    assert_eq!(denied.denied_by(), Some(2), "b is spent");
    assert_eq!(
        keyed.peek("a").remaining(),
        0,
        "a: one of two left, not charged"
    );
    assert_eq!(other.peek().remaining(), 8);
    assert_eq!(keyed.len(), 2);
}

/// Racing `AllOf`s over one key of a keyed limiter (one lock stripe per
/// key) and over different keys (mostly different stripes): the shared key
/// is charged exactly what the other members were.
#[test]
fn racing_all_ofs_on_keyed_members_charge_all_or_nothing() {
    for _ in 0..200 {
        let clock = ManualClock::new();
        let keyed = Arc::new(
            KeyedRateLimiter::<String, TokenBucket>::builder(Quota::per_second(1).unwrap())
                .clock(clock.clone())
                .build()
                .unwrap(),
        );
        let (a, b) = (bucket(&clock, 1), bucket(&clock, 1));
        let shared = |k: &str| Arc::new(KeyedLimit::new(Arc::clone(&keyed), k.to_string()));
        let admitted = race_two(
            AllOf::new([a.clone() as Arc<dyn Limit>, shared("u")]),
            AllOf::new([shared("u") as Arc<dyn Limit>, b.clone()]),
        );
        assert_eq!(admitted.iter().filter(|&&x| x).count(), 1);
        assert_eq!(
            !a.peek().is_allowed(),
            admitted[0],
            "a charged iff admitted"
        );
        assert_eq!(
            !b.peek().is_allowed(),
            admitted[1],
            "b charged iff admitted"
        );
        assert!(!keyed.peek("u").is_allowed());
        assert!(keyed.peek("v").is_allowed());
    }
}

/// A limit of the application's own (a counter it keeps): in an `AllOf`
/// beside the crate's limiters, a denial elsewhere charges it nothing.
struct Counter {
    used: std::sync::Mutex<u32>,
    limit: u32,
}

impl Limit for Counter {
    fn check_n(&self, cost: u32) -> Result<rategate::Decision, CheckError> {
        let mut used = self.used.lock().unwrap();
        let decision = self.peek_at(*used, cost);
        if decision.is_allowed() {
            *used += cost;
        }
        Ok(decision)
    }

    fn peek_n(&self, cost: u32) -> Result<rategate::Decision, CheckError> {
        Ok(self.peek_at(*self.used.lock().unwrap(), cost))
    }

    fn quota(&self) -> Option<Quota> {
        None
    }
}

impl Counter {
    /// Its own decision, made with `Decision`'s public constructors: no
    /// limiter of the crate behind it.
    fn peek_at(&self, used: u32, cost: u32) -> rategate::Decision {
        let hour = std::time::Duration::from_secs(3600);
        let left = self.limit - used;
        if cost <= left {
            rategate::Decision::allowed(self.limit, left - cost, hour)
        } else {
            rategate::Decision::denied(self.limit, left, hour, hour)
        }
    }
}

#[test]
fn a_limit_of_your_own_takes_part_all_or_nothing() {
    let clock = ManualClock::new();
    let counter = Arc::new(Counter {
        used: std::sync::Mutex::new(0),
        limit: 10,
    });
    let spent = bucket(&clock, 1);
    let all = AllOf::new([counter.clone() as Arc<dyn Limit>, spent.clone()]);
    assert!(all.check_n(1).unwrap().is_allowed());
    assert_eq!(*counter.used.lock().unwrap(), 1);
    // `spent` denies: the counter is not charged.
    assert!(!all.check_n(1).unwrap().is_allowed());
    assert_eq!(*counter.used.lock().unwrap(), 1);
}
