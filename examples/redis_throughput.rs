//! Decisions per second against a local Redis, with 1, 16 and 64 concurrent
//! tasks, beside what `redis-benchmark` reports for `EVALSHA` of a trivial
//! script on the same server (the ceiling for one script call per decision).
//!
//! Starts its own `redis-server` on a free loopback port and stops it at the
//! end. Run with:
//!
//! ```sh
//! cargo run --release --features redis --example redis_throughput
//! ```

#[path = "../tests/support/redis_server.rs"]
mod redis_server;

use rategate::redis::{RedisLimiter, Source, TimeSource};
use rategate::{Quota, TokenBucket};
use redis_server::RedisServer;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const RUN: Duration = Duration::from_secs(3);

async fn measure(limiter: &RedisLimiter<TokenBucket>, tasks: usize) -> (f64, Vec<Duration>) {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + RUN;
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (limiter, done) = (limiter.clone(), done.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut i = 0u64;
                while Instant::now() < deadline {
                    // Spread over keys as real traffic would.
                    let key = format!("user-{}", (t as u64 * 7919 + i) % 10_000);
                    let start = Instant::now();
                    let d = limiter.check(&key).await.expect("cost 1 fits");
                    latencies.push(start.elapsed());
                    assert_eq!(d.source(), Source::Redis);
                    i += 1;
                }
                done.fetch_add(i, Ordering::Relaxed);
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for h in handles {
        latencies.extend(h.await.unwrap());
    }
    latencies.sort_unstable();
    let per_sec = done.load(Ordering::Relaxed) as f64 / RUN.as_secs_f64();
    (per_sec, latencies)
}

fn redis_benchmark(server: &RedisServer, clients: usize) -> Option<String> {
    let sha = server.cli(&["SCRIPT", "LOAD", "return 1"])?;
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &server.port.to_string()])
        .args(["-n", "200000", "-c", &clients.to_string(), "-q"])
        .args(["EVALSHA", sha.trim(), "0"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // `-q` prints "EVALSHA ...: 123456.79 requests per second, p50=..."
    text.lines()
        .rev()
        .find(|l| l.contains("requests per second"))
        .map(|l| l.rsplit('\r').next().unwrap_or(l).trim().to_owned())
}

fn main() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let quota = Quota::per_second(1_000_000).unwrap();
    let limiter = runtime.block_on(async {
        RedisLimiter::<TokenBucket>::builder(quota)
            .url(&server.url())
            .prefix("bench")
            .time(TimeSource::Server)
            .local_cache(false)
            .build()
            .await
            .unwrap()
    });
    println!(
        "rategate RedisLimiter<TokenBucket> on redis-server {} (127.0.0.1, one multiplexed connection), {} s per row",
        server
            .cli(&["INFO", "server"])
            .and_then(|i| i
                .lines()
                .find(|l| l.starts_with("redis_version:"))
                .map(|l| l[14..].trim().to_owned()))
            .unwrap_or_default(),
        RUN.as_secs()
    );
    println!();
    println!(
        "| concurrent tasks | decisions/s | p50 latency | p99 latency | redis-benchmark EVALSHA `return 1` (same clients) |"
    );
    println!("|---:|---:|---:|---:|---|");
    for tasks in [1, 16, 64] {
        let (per_sec, lat) = runtime.block_on(measure(&limiter, tasks));
        let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
        let ceiling =
            redis_benchmark(&server, tasks).unwrap_or_else(|| "redis-benchmark not found".into());
        println!(
            "| {tasks} | {per_sec:.0} | {:.0?} | {:.0?} | {ceiling} |",
            pct(0.50),
            pct(0.99)
        );
    }
}
