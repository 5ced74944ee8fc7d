//! The client's CPU time per decision of a [`RedisLimiter`] against a local
//! Redis, with 1, 16 and 64 concurrent tasks: a load-independent measure of
//! what the limiter costs on the application's side (the process's user and
//! system time from `/proc/self/stat`; `redis-server` is another process and
//! not counted), where decisions per second move with whatever else runs on
//! the machine.
//!
//! Each row makes a fixed number of decisions (token bucket, server time,
//! 10,000 keys, local cache off, so every decision goes to Redis) on a
//! multi-threaded tokio runtime, three turns, and prints the median CPU
//! microseconds per decision and the mean batch size (decisions per script
//! call). Linux only. Run with:
//!
//! ```sh
//! cargo run --release --features redis --example redis_client_cpu [decisions per turn [tasks]]
//! ```
//!
//! With `RATEGATE_REDIS_PORT` set it uses the server already on that
//! loopback port, so that `perf stat -e instructions:u` on this process
//! counts the client's instructions alone.

#[path = "../tests/support/redis_server.rs"]
mod redis_server;

use rategate::redis::{RedisLimiter, Source, TimeSource};
use rategate::{Quota, TokenBucket};
use redis_server::RedisServer;
use std::time::Instant;

/// The process's user + system CPU time in seconds, from `/proc/self/stat`
/// (fields 14 and 15, in clock ticks of 1/100 s).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("Linux /proc/self/stat");
    // The command name (field 2) may hold spaces: count from its ')'.
    let after = &stat[stat.rfind(')').expect("a command name") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields[i - 3].parse::<f64>().expect("a tick count");
    (ticks(14) + ticks(15)) / 100.0
}

/// Script calls the server on `port` has run so far (`INFO commandstats`).
fn script_calls(port: u16) -> u64 {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "INFO", "commandstats"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let info = out.unwrap_or_default();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

async fn run(limiter: &RedisLimiter<TokenBucket>, tasks: usize, decisions: u64) {
    let per_task = decisions / tasks as u64;
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut key = String::new();
                for i in 0..per_task {
                    use std::fmt::Write;
                    key.clear();
                    let _ = write!(key, "user-{}", (t as u64 * 7919 + i) % 10_000);
                    let d = limiter.check(&key).await.expect("cost 1 fits");
                    assert_eq!(d.source(), Source::Redis);
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
}

fn main() {
    let decisions: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(150_000);
    // `RATEGATE_REDIS_PORT`: a server already running on 127.0.0.1 (so
    // that `perf stat` on this process counts the client alone).
    let external = std::env::var("RATEGATE_REDIS_PORT")
        .ok()
        .and_then(|p| p.parse::<u16>().ok());
    let server = external.is_none().then(RedisServer::start);
    let port = external.or(server.as_ref().map(|s| s.port)).unwrap_or(6379);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let limiter = runtime.block_on(async {
        RedisLimiter::<TokenBucket>::builder(Quota::per_second(1_000_000).unwrap())
            .url(&format!("redis://127.0.0.1:{port}/"))
            .prefix("bench")
            .time(TimeSource::Server)
            .local_cache(false)
            .build()
            .await
            .unwrap()
    });
    // Warm up (connections, allocator, the scripts' first runs).
    runtime.block_on(run(&limiter, 16, 20_000));
    println!(
        "| tasks | client CPU µs/decision | decisions/s (indicative) | decisions per script call |"
    );
    println!("|---:|---:|---:|---:|");
    // A second argument picks one row (for profiling).
    let rows: Vec<usize> = match std::env::args().nth(2).and_then(|a| a.parse().ok()) {
        Some(tasks) => vec![tasks],
        None => vec![1, 16, 64],
    };
    for tasks in rows {
        let mut cpu = Vec::new();
        let mut rate = Vec::new();
        let mut batch = Vec::new();
        for _ in 0..3 {
            let n = decisions / tasks as u64 * tasks as u64;
            let calls = script_calls(port);
            let (cpu0, wall0) = (cpu_seconds(), Instant::now());
            runtime.block_on(run(&limiter, tasks, n));
            let (cpu1, wall) = (cpu_seconds(), wall0.elapsed());
            let calls = script_calls(port) - calls;
            cpu.push((cpu1 - cpu0) * 1e6 / n as f64);
            rate.push(n as f64 / wall.as_secs_f64());
            batch.push(n as f64 / calls.max(1) as f64);
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "| {tasks} | {:.2} | {:.0} | {:.1} |",
            median(cpu),
            median(rate),
            median(batch)
        );
    }
}
