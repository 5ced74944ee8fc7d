//! Decisions per second against a local Redis, with 1, 16 and 64 concurrent
//! tasks, side by side with what `redis-benchmark` reports on the same
//! server with as many clients: `EVALSHA` of a trivial script (`return 1`,
//! the ceiling for one script call per request), and `EVALSHA` of the token
//! bucket script itself with the limiter's arguments on random keys (the
//! same work per call). The limiter and `redis-benchmark` take turns, three
//! times per row, and the table gives the medians and their ratios, so that
//! a noisy machine moves both sides alike.
//!
//! Starts its own `redis-server` on a free loopback port and stops it at the
//! end. Run with:
//!
//! ```sh
//! cargo run --release --features redis --example redis_throughput
//! ```
//!
//! `RATEGATE_BATCHES_IN_FLIGHT=n` sets the limiter's
//! `batches_in_flight` (default: the builder's, 2).

#[path = "../tests/support/redis_server.rs"]
mod redis_server;

use rategate::redis::{RedisAlgorithm, RedisLimiter, Source, TimeSource};
use rategate::{Quota, TokenBucket};
use redis_server::RedisServer;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const RUN: Duration = Duration::from_secs(2);
/// Turns per row.
const TURNS: usize = 3;

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

/// Requests per second `redis-benchmark` reports for `args` with `clients`
/// connections (`-r` for `__rand_int__` keys), or `None` without it.
fn redis_benchmark(
    server: &RedisServer,
    clients: usize,
    requests: usize,
    args: &[String],
) -> Option<f64> {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &server.port.to_string()])
        .args([
            "-n",
            &requests.to_string(),
            "-c",
            &clients.to_string(),
            "-q",
        ])
        .args(["-r", "10000"])
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // `-q` prints "EVALSHA ...: 123456.79 requests per second, p50=..."
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains("requests per second"))?;
    let line = line.rsplit('\r').next().unwrap_or(line);
    let (_, rest) = line.rsplit_once(": ")?;
    rest.split_whitespace().next()?.parse().ok()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let quota = Quota::per_second(1_000_000).unwrap();
    let in_flight: Option<usize> = std::env::var("RATEGATE_BATCHES_IN_FLIGHT")
        .ok()
        .map(|n| n.parse().expect("RATEGATE_BATCHES_IN_FLIGHT: a number"));
    let limiter = runtime.block_on(async {
        let builder = RedisLimiter::<TokenBucket>::builder(quota);
        let builder = match in_flight {
            Some(n) => builder.batches_in_flight(n),
            None => builder,
        };
        builder
            .url(&server.url())
            .prefix("bench")
            .time(TimeSource::Server)
            .local_cache(false)
            .build()
            .await
            .unwrap()
    });
    let trivial = server
        .cli(&["SCRIPT", "LOAD", "return 1"])
        .unwrap_or_default()
        .trim()
        .to_owned();
    let bucket = server
        .cli(&["SCRIPT", "LOAD", <TokenBucket as RedisAlgorithm>::SCRIPT])
        .unwrap_or_default()
        .trim()
        .to_owned();
    // The limiter's own call: one key (random among 10,000), server time,
    // cost 1, the quota's parameters in microseconds.
    let mut same_work = vec![
        "EVALSHA".to_owned(),
        bucket,
        "1".to_owned(),
        limiter.redis_keys("user-__rand_int__")[0].clone(),
        "-1".to_owned(),
        "1".to_owned(),
    ];
    for param in TokenBucket::script_params(&quota, 1_000).unwrap() {
        same_work.push(param.to_string());
    }
    let trivial_args = vec!["EVALSHA".to_owned(), trivial, "0".to_owned()];
    println!(
        "rategate RedisLimiter<TokenBucket> on redis-server {} (127.0.0.1; concurrent decisions batched into one script call on the batching task's own connection, {} batches in flight, a lone caller calling directly), {} turns of {} s per row, medians",
        server
            .cli(&["INFO", "server"])
            .and_then(|i| i
                .lines()
                .find(|l| l.starts_with("redis_version:"))
                .map(|l| l[14..].trim().to_owned()))
            .unwrap_or_default(),
        in_flight.map_or_else(|| "default (2)".to_owned(), |n| n.to_string()),
        TURNS,
        RUN.as_secs()
    );
    println!();
    println!(
        "| concurrent tasks | decisions/s | p50 latency | p99 latency | redis-benchmark EVALSHA `return 1`/s | ratio | redis-benchmark EVALSHA token bucket/s | ratio |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for tasks in [1, 16, 64] {
        let (mut ours, mut ceiling, mut same) = (Vec::new(), Vec::new(), Vec::new());
        let mut lat = Vec::new();
        for _ in 0..TURNS {
            let (per_sec, latencies) = runtime.block_on(measure(&limiter, tasks));
            ours.push(per_sec);
            lat.extend(latencies);
            // About as long as our turn.
            let requests = ((per_sec * RUN.as_secs_f64()) as usize).max(10_000);
            if let Some(r) = redis_benchmark(&server, tasks, requests, &trivial_args) {
                ceiling.push(r);
            }
            if let Some(r) = redis_benchmark(&server, tasks, requests, &same_work) {
                same.push(r);
            }
        }
        lat.sort_unstable();
        let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
        let ours = median(ours);
        let column = |values: Vec<f64>| {
            if values.is_empty() {
                "redis-benchmark not found | -".to_owned()
            } else {
                let m = median(values);
                format!("{m:.0} | {:.2}", ours / m)
            }
        };
        println!(
            "| {tasks} | {ours:.0} | {:.0?} | {:.0?} | {} | {} |",
            pct(0.50),
            pct(0.99),
            column(ceiling),
            column(same)
        );
    }
}
