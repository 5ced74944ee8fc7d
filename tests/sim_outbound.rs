//! The outbound guard's adaptation on the simulator's scenario harness
//! (`rategate::sim::scenarios::outbound_adaptation`): every figure read
//! from the scenario's own summary.

#![cfg(feature = "sim")]

use rategate::sim::scenarios::{OutboundAdaptation, outbound_adaptation};

const GUARD: &str = "OutboundLimiter";

fn summary() -> OutboundAdaptation {
    outbound_adaptation(7).unwrap().summary
}

fn situations(s: &OutboundAdaptation) -> Vec<String> {
    let mut out: Vec<String> = s.rows.iter().map(|r| r.situation.clone()).collect();
    out.dedup();
    out
}

#[test]
fn the_guard_delivers_more_with_fewer_429s_than_the_adaptive_baselines() {
    let s = summary();
    assert_eq!(situations(&s).len(), 12);
    for situation in situations(&s) {
        let ours = s.row(&situation, GUARD).unwrap();
        for baseline in ["AWS-style CUBIC", "AIMD"] {
            let other = s.row(&situation, baseline).unwrap();
            assert!(
                ours.delivered_share >= other.delivered_share,
                "{situation}: {ours:?} against {other:?}"
            );
            assert!(
                ours.limited_per_1000 <= other.limited_per_1000,
                "{situation}: {ours:?} against {other:?}"
            );
        }
    }
}

#[test]
fn advertised_limits_are_filled_without_a_429() {
    let s = summary();
    for situation in ["x-ratelimit", "policy"] {
        let r = s.row(situation, GUARD).unwrap();
        assert!(r.delivered_share >= 0.98, "{r:?}");
        assert_eq!(r.limited_per_1000, 0.0, "{r:?}");
    }
}

#[test]
fn bursts_that_fit_within_the_deadline_all_go() {
    let r = summary();
    let r = r.row("bursty", GUARD).unwrap();
    assert_eq!(r.deadline_misses, 0, "{r:?}");
}

#[test]
fn the_same_seed_gives_the_same_figures() {
    let a = serde_json::to_string(&summary()).unwrap();
    let b = serde_json::to_string(&summary()).unwrap();
    assert_eq!(a, b);
}
