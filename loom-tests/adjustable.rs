//! A run-time quota change racing a check: the check decides under the old
//! quota or the new one, whole, never a mix, and after the change every
//! check sees the new one.

use crate::model;
use loom::sync::Arc;
use loom::thread;
use rategate::algorithm::Adjustable;
use rategate::{Algorithm, CheckError, FixedWindow, Quota};

#[test]
fn set_quota_races_a_check() {
    model(|| {
        let quota = Quota::per_second(1).unwrap();
        let fw = Arc::new(Adjustable::<FixedWindow>::from_quota(&quota).unwrap());
        let state = Arc::new(fw.new_state());
        let checker = {
            let (fw, state) = (fw.clone(), state.clone());
            thread::spawn(move || fw.check(&state, 0, 2))
        };
        fw.set_quota(Quota::per_second(3).unwrap()).unwrap();
        match checker.join().unwrap() {
            // The old quota: a cost of 2 never fits a limit of 1.
            Err(e) => assert_eq!(
                e,
                CheckError::CostExceedsCapacity {
                    cost: 2,
                    capacity: 1
                }
            ),
            // The new one, whole: limit 3 and 1 left.
            Ok(d) => assert_eq!((d.is_allowed(), d.limit(), d.remaining()), (true, 3, 1)),
        }
        assert_eq!(fw.quota().limit(), 3);
        assert_eq!(fw.peek(&state, 0, 1).unwrap().limit(), 3);
    });
}
