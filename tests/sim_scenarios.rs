//! The simulator's headline numbers are what each algorithm guarantees.
//! Every number is read from the scenario's own summary (what
//! `summary.json` holds), never recomputed here.

#![cfg(feature = "sim")]

use rategate::AlgorithmKind;
use rategate::sim::scenarios::{
    ServerMode, boundary_burst, burst_vs_smoothing, counter_vs_log, three_servers, vendor_quotas,
};
use rategate::sim::{simulate, write_report};

const SEED: u64 = 0x5EED_2024;

#[test]
fn boundary_burst_admits_what_each_algorithm_allows() {
    let s = boundary_burst().unwrap().summary;
    let got = |a| {
        let r = s.row(a).unwrap();
        (r.first_burst, r.second_burst, r.max_in_60s)
    };
    // Two fresh windows 20 s apart: all 200 within 20 s.
    assert_eq!(got(AlgorithmKind::FixedWindow), (100, 100, 200));
    // The log never admits more than the limit in any 60 s.
    assert_eq!(got(AlgorithmKind::SlidingWindowLog), (100, 0, 100));
    // ceil(100 x 50/60) = 84 of the previous minute still weigh: 16 pass.
    assert_eq!(got(AlgorithmKind::SlidingWindowCounter), (100, 16, 116));
    // Capacity 20, refilled in full by 20 s.
    assert_eq!(got(AlgorithmKind::TokenBucket), (20, 20, 40));
    // nginx: burst + 1, and the bucket drains in 20 s.
    assert_eq!(got(AlgorithmKind::LeakyBucket), (21, 21, 42));
}

#[test]
fn smoothing_delays_match_nginx() {
    let s = burst_vs_smoothing().unwrap().summary;
    let token = s.row("token:10/1s burst=20").unwrap();
    assert_eq!(
        (token.first_burst_at_once, token.delayed, token.admitted),
        (20, 0, 35)
    );
    let nodelay = s.row("leaky:10/1s burst=20 nodelay").unwrap();
    assert_eq!(
        (
            nodelay.first_burst_at_once,
            nodelay.delayed,
            nodelay.max_delay_ms
        ),
        (21, 0, 0)
    );
    // delay=8: the first 1 + 8 pass at once, the other 12 wait 100 ms each more.
    let two_stage = s.row("leaky:10/1s burst=20 delay=8").unwrap();
    assert_eq!(
        (
            two_stage.first_burst_at_once,
            two_stage.first_burst_last_departure_ms
        ),
        (9, 1200)
    );
    // Plain burst=20: every excess request waits its turn at 10/s.
    let plain = s.row("leaky:10/1s burst=20").unwrap();
    assert_eq!(
        (
            plain.first_burst_at_once,
            plain.first_burst_last_departure_ms,
            plain.denied
        ),
        (1, 2000, 9)
    );
}

#[test]
fn three_servers_overshoot_within_the_documented_bounds() {
    let s = three_servers(SEED).unwrap().summary;
    assert_eq!(s.offered, 3000);
    let row = |m| s.row(m).unwrap();
    for r in &s.rows {
        assert_eq!(r.per_second.iter().sum::<u64>(), r.admitted, "{:?}", r.mode);
    }
    // Each server alone admits the whole limit: three times it.
    assert_eq!(row(ServerMode::LocalOnly).admitted, 3000);
    let central = row(ServerMode::Central);
    assert_eq!((central.admitted, central.worst_window), (1000, 100));
    // Leases: never above the limit in any window.
    let leased = row(ServerMode::Leased { tick_ms: 100 });
    assert!(
        leased.worst_window <= 100 && leased.admitted >= 900,
        "{leased:?}"
    );
    // Synced fixed window: at most (N - 1) x min(limit, 2 x rate x interval)
    // over the limit per window (the synced module's bound, round trip 0).
    let bound = |interval_s: f64| 100 + 2 * (100f64.min(2.0 * 100.0 * interval_s) as u64);
    let slow = row(ServerMode::Synced { interval_ms: 1000 });
    assert!(
        slow.worst_window > 100 && slow.worst_window <= bound(1.0),
        "{slow:?}"
    );
    let fast = row(ServerMode::Synced { interval_ms: 100 });
    assert!(
        fast.worst_window > 100 && fast.worst_window <= bound(0.1),
        "{fast:?}"
    );
    assert!(fast.admitted < slow.admitted);
}

#[test]
fn counter_and_log_disagree_where_the_counter_estimates() {
    let s = counter_vs_log(SEED).unwrap().summary;
    // The trace goes over the limit, and the log holds it exactly.
    assert!(s.requests > s.log_admitted);
    assert_eq!(s.log_max_in_60s, 100);
    // The counter never admits more than the limit in an aligned minute,
    // but over a sliding 60 s it can (at most two minutes' worth).
    assert!(s.counter_max_in_window <= 100);
    assert!(s.counter_max_in_60s > 100 && s.counter_max_in_60s <= 200);
    assert!(s.counter_only > 0 && s.log_only > 0);
    assert_eq!(
        s.counter_admitted + s.log_only,
        s.log_admitted + s.counter_only
    );
}

#[test]
fn vendor_quotas_hold() {
    let s = vendor_quotas(SEED).unwrap().summary;
    let row = |n| s.row(n).unwrap();
    // Token bucket under steady overload for 10 s: the burst plus the refill.
    let live_read = row("Stripe live, read");
    assert!((1098..=1100).contains(&live_read.admitted), "{live_read:?}");
    assert!(live_read.max_in_period <= 200);
    assert_eq!(row("Stripe live, write").admitted, 600);
    for name in ["Stripe test, read", "Stripe test, write"] {
        assert!((273..=275).contains(&row(name).admitted), "{:?}", row(name));
    }
    // Hourly fixed windows: exactly the limit in each of the 3 hours.
    let signed_in = row("GitHub REST, signed in");
    assert_eq!(
        (signed_in.admitted, signed_in.max_in_window),
        (15_000, 5_000)
    );
    let anonymous = row("GitHub REST, anonymous");
    assert_eq!((anonymous.admitted, anonymous.max_in_window), (180, 60));
    assert!(s.graphql.max_points_in_window <= 5_000);
    assert!(s.graphql.points_offered > s.graphql.points_admitted);
}

#[test]
fn a_seed_gives_the_same_report_and_another_seed_another() {
    let a = simulate(SEED).unwrap();
    let b = simulate(SEED).unwrap();
    let json = |s: &rategate::sim::Simulation| serde_json::to_string(s).unwrap();
    assert_eq!(json(&a), json(&b));
    for (x, y) in a.scenarios.iter().zip(&b.scenarios) {
        assert_eq!(x.svg, y.svg, "{}", x.id);
    }
    let c = simulate(SEED + 1).unwrap();
    assert_ne!(json(&a), json(&c));
}

#[test]
fn the_binary_writes_the_report_and_its_summary_holds_the_headlines() {
    let dir = std::env::temp_dir().join(format!("rategate-sim-report-{}", std::process::id()));
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_rategate-sim"))
        .args(["simulate", "--out"])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    for id in [
        "boundary_burst",
        "burst_vs_smoothing",
        "three_servers",
        "counter_vs_log",
        "vendor_quotas",
        "outbound_adaptation",
    ] {
        let svg = std::fs::read_to_string(dir.join(format!("{id}.svg"))).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{id}"
        );
    }
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 6);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let rows = &summary["scenarios"][0]["summary"]["rows"];
    let fixed = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["algorithm"] == "fixed_window")
        .unwrap();
    assert_eq!(fixed["max_in_60s"], 200);
    let log = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["algorithm"] == "sliding_window_log")
        .unwrap();
    assert_eq!(log["max_in_60s"], 100);
    std::fs::remove_dir_all(&dir).unwrap();
    // The library's writer gives the same files.
    let dir2 = std::env::temp_dir().join(format!("rategate-sim-lib-{}", std::process::id()));
    let files = write_report(&simulate(SEED).unwrap(), &dir2).unwrap();
    assert_eq!(files.len(), 8);
    std::fs::remove_dir_all(&dir2).unwrap();
}
