//! The all-or-nothing decision's notion of "one state": keys, not their
//! stripe hashes.

use rategate::policy::{AllOf, KeyedLimit, Limit};
use rategate::{FixedWindow, KeyedRateLimiter};
use std::sync::Arc;

type Keyed = KeyedRateLimiter<String, FixedWindow>;

/// Two different keys whose 64-bit stripe hash (`stripes::keyed_lock_id`,
/// an FxHash step, trivially invertible) is equal. Found offline in a
/// few thousand random tries.
const KEY_A: &str = "user-AAAuser-BBB";
const KEY_B: &str = "pnucakxf_6I`]PX_";

/// Two different keys of one limiter whose stripe hashes collide are two
/// states: with a limit of 1 per key, two fresh keys each admit 1.
#[test]
fn two_keys_with_colliding_hashes_are_decided_as_one_state() {
    let limiter = Arc::new(Keyed::new("1/h".parse().unwrap()).unwrap());
    let all = AllOf::new([
        Arc::new(KeyedLimit::new(Arc::clone(&limiter), KEY_A.to_string())) as Arc<dyn Limit>,
        Arc::new(KeyedLimit::new(Arc::clone(&limiter), KEY_B.to_string())) as Arc<dyn Limit>,
    ]);
    // Each key alone admits a request of cost 1.
    assert!(limiter.peek_n(KEY_A, 1).unwrap().is_allowed());
    assert!(limiter.peek_n(KEY_B, 1).unwrap().is_allowed());
    let decision = all.check_n(1);
    assert!(
        matches!(decision, Ok(d) if d.is_allowed()),
        "two distinct fresh keys, each with room: {decision:?}"
    );

    let limiter = Arc::new(Keyed::new("2/h".parse().unwrap()).unwrap());
    assert!(limiter.check(KEY_A).is_allowed()); // one slot left on A
    let all = AllOf::new([
        Arc::new(KeyedLimit::new(Arc::clone(&limiter), KEY_A.to_string())) as Arc<dyn Limit>,
        Arc::new(KeyedLimit::new(Arc::clone(&limiter), KEY_B.to_string())) as Arc<dyn Limit>,
    ]);
    let decision = all.check_n(1);
    assert!(
        matches!(decision, Ok(d) if d.is_allowed()),
        "A has 1 left, B has 2: {decision:?}"
    );
}
