//! The fault harness, bounded (about 90 s): a master killed under
//! Sentinel and in a Cluster, a master hung, a partition, a restart that
//! loses everything, against the Redis limiter, the synced and the leased
//! limiter under load from two application nodes. What must hold under
//! every fault: nothing panics, no caller waits past its timeout, Redis
//! decides again within seconds of the fault's end, and the leased
//! limiter never admits over its limit where Redis keeps its data (a
//! hang excepted: see the check). The
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
        (Fault::KillMaster, Kind::Leased),
        (Fault::Hang, Kind::Leased),
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
        let back = plan.fault + Duration::from_secs(3);
        match row.recovered_after {
            Some(after) if after > back => fail(format!("back to normal after {after:?}")),
            None if fault != Fault::RestartEmpty => {
                fail("no failure seen: the fault did not land".into())
            }
            _ => {}
        }
        // Leases: a hard bound wherever Redis keeps what it granted
        // (replicas acknowledge each grant before it is used). Not under a
        // hang: the old master can come back before it is demoted, still
        // acknowledged by a replica that then follows the new master, and
        // the grants it made are lost (see docs/redis.md, "Leases across a
        // failover").
        if kind == Kind::Leased && fault != Fault::Hang && row.over > 0 {
            fail(format!("{} admitted over the limit", row.over));
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
