//! The fault harness, bounded (about 100 s): a master killed under
//! Sentinel and in a Cluster, a master hung, a partition, a restart that
//! loses everything, against the Redis limiter, the synced and the leased
//! limiter under load from two application nodes. What must hold under
//! every fault: nothing panics, no caller waits past its timeout, Redis
//! decides again within seconds of the fault's end, and the leased
//! limiter never admits over its limit where Redis keeps its data. The
//! full table: `cargo run --release --features redis --example
//! redis_faults`.

#![cfg(feature = "redis")]

#[path = "support/faults.rs"]
mod faults;
#[path = "support/redis_server.rs"]
mod redis_server;
#[path = "support/redis_topology.rs"]
mod redis_topology;

use faults::{Fault, Kind, Plan};
use rategate::AlgorithmKind;
use std::time::Duration;

#[test]
fn faults_under_load() {
    let plan = Plan::quick();
    let cells = [
        (Fault::KillMaster, Kind::Redis(AlgorithmKind::TokenBucket)),
        (Fault::KillMaster, Kind::LeasedOneReplica),
        (Fault::Hang, Kind::Leased),
        (Fault::Hang, Kind::LeasedOneReplica),
        (
            Fault::Partition,
            Kind::Redis(AlgorithmKind::SlidingWindowCounter),
        ),
        (Fault::Partition, Kind::Synced),
        (Fault::Partition, Kind::Leased),
        (Fault::RestartEmpty, Kind::Redis(AlgorithmKind::FixedWindow)),
        (
            Fault::ClusterKillMaster,
            Kind::Redis(AlgorithmKind::TokenBucket),
        ),
    ];
    println!("{}", faults::header());
    let mut failures = Vec::new();
    for (fault, kind) in cells {
        let row = faults::run(fault, kind, &plan);
        println!("{}", faults::line(&row));
        let mut fail =
            |what: String| failures.push(format!("{} / {}: {what}", fault.name(), kind.name()));
        if row.panics > 0 || row.hung > 0 {
            fail(format!("{} panics, {} checks hung", row.panics, row.hung));
        }
        // A check waits for one Redis call at most: its timeout, with room
        // for a shared 2-core machine's scheduling.
        let most = plan.timeout + Duration::from_millis(500);
        if row.max_latency > most {
            fail(format!(
                "a check took {:?} (timeout {:?})",
                row.max_latency, plan.timeout
            ));
        }
        // Back to normal within seconds of the fault's end (a failover
        // takes about 2 s: 1 s to agree the master is down, then the
        // promotion), well before the run ends (`plan.after`, 4 s, after
        // the fault's end): a limiter that never recovers fails here.
        // Leases waiting for every replica are the exception under a hang:
        // after a failover they resume only once the old master is back as
        // a replica, which the sentinels see on their 10 s `INFO` cycle.
        let back = plan.fault + Duration::from_secs(3);
        let waits_for_demotion = fault == Fault::Hang && kind == Kind::Leased;
        match row.recovered_after {
            Some(after) if after > back && !waits_for_demotion => {
                fail(format!("back to normal after {after:?}"))
            }
            None if fault != Fault::RestartEmpty => {
                fail("no failure seen: the fault did not land".into())
            }
            _ => {}
        }
        // Leases waiting for every replica: a hard bound wherever Redis
        // keeps what it granted, a hang included (a promoted replica
        // acknowledged every grant in use; a master that comes back
        // before it is demoted has lost a replica, so nothing it grants
        // is acknowledged). Waiting for fewer: a failover can lose
        // grants in use, and the new master grants them again, at most
        // one limit per key in a window.
        match kind {
            Kind::Leased if row.over > 0 => fail(format!("{} admitted over the limit", row.over)),
            Kind::LeasedOneReplica if row.worst_second_over > plan.limit as usize => fail(format!(
                "{} over the limit in one key-second, more than the limit",
                row.worst_second_over
            )),
            _ => {}
        }
        if row.requests < 1_000 {
            fail(format!(
                "only {} requests: the load did not run",
                row.requests
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
