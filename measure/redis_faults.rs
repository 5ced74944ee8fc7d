//! Faults against every Redis limiter, as a table: a master killed
//! (Sentinel and Cluster), hung (`SIGSTOP`), paused (`CLIENT PAUSE`), cut
//! off (a proxy that drops every byte), restarted with and without
//! persistence, each under a steady load from two application nodes;
//! every decision compared with one exact in-memory limiter of the same
//! algorithm fed the same requests (see `tests/support/faults.rs`).
//! Real `redis-server` and `redis-sentinel` processes on free loopback
//! ports; about 12 s per row.
//!
//! ```text
//! cargo run --release --features redis --example redis_faults
//! cargo run --release --features redis --example redis_faults -- --faults kill,partition --limiters token_bucket,leased,leased-1
//! ```
//!
//! Faults: kill, hang, pause, partition, restart-empty, restart-aof,
//! cluster-kill. Limiters: the five algorithm names (`RedisLimiter`),
//! synced, leased (waiting for every replica), leased-1 (for one).
//! `--quick` runs the test suite's shorter timeline; `--after S` observes
//! S seconds after the fault's end instead of 4.

#[path = "../tests/support/faults.rs"]
mod faults;
#[path = "../tests/support/redis_server.rs"]
mod redis_server;
#[path = "../tests/support/redis_topology.rs"]
mod redis_topology;

use faults::{Fault, Kind, Plan};

fn list<T>(args: &[String], flag: &str, parse: fn(&str) -> Option<T>, all: &[T]) -> Vec<T>
where
    T: Copy,
{
    match args.iter().position(|a| a == flag) {
        None => all.to_vec(),
        Some(i) => args
            .get(i + 1)
            .map(|v| {
                v.split(',')
                    .map(|name| {
                        parse(name.trim()).unwrap_or_else(|| {
                            eprintln!("{flag}: unknown name {name:?}");
                            std::process::exit(2)
                        })
                    })
                    .collect()
            })
            .unwrap_or_else(|| {
                eprintln!("{flag} needs a comma-separated list");
                std::process::exit(2)
            }),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let faults = list(&args, "--faults", Fault::parse, &Fault::ALL);
    let kinds = list(&args, "--limiters", Kind::parse, &Kind::ALL);
    let mut plan = if args.iter().any(|a| a == "--quick") {
        Plan::quick()
    } else {
        Plan::full()
    };
    if let Some(i) = args.iter().position(|a| a == "--after") {
        let secs = args
            .get(i + 1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                eprintln!("--after needs a number of seconds");
                std::process::exit(2)
            });
        plan.after = std::time::Duration::from_secs(secs);
    }
    println!(
        "{} application nodes, {} tasks, {} keys at {}/s each, {} requests/s offered; \
         {:?} steady, {:?} fault, {:?} after; Redis timeout {:?}\n",
        plan.nodes,
        plan.tasks,
        plan.keys,
        plan.limit,
        plan.offered,
        plan.before,
        plan.fault,
        plan.after,
        plan.timeout
    );
    println!("{}", faults::header());
    for &fault in &faults {
        for &kind in &kinds {
            let row = faults::run(fault, kind, &plan);
            println!("{}", faults::line(&row));
        }
    }
}
