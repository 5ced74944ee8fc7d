//! Load generator for `rategate-rls` (Envoy's rate-limit service, RLS v3,
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) on
//! loopback: decisions per second, client-side latency (p50 / p99 / p99.9)
//! and, with `--server-pid`, the server's CPU time per decision and the
//! cores it used, at each number of requests in flight.
//!
//! Each level first runs one second of warm-up (not recorded), then keeps
//! `--in-flight` tasks each sending one request at a time, with one
//! descriptor `[(--descriptor-key, kX)]`, X drawn pseudo-randomly from
//! `0..--keys`, until `--seconds` have passed or `--max-requests` were sent.
//! Requests are spread round-robin over `--connections` HTTP/2 channels.
//! The server's CPU time is read from `/proc/PID/stat` (utime + stime)
//! before and after each level. Only loopback targets are accepted.
//!
//! ```sh
//! cargo build --release --features rls --bin rategate-rls --example rls_load
//! target/release/rategate-rls --config measure/rls_load.yaml --listen 127.0.0.1:8081 &
//! target/release/examples/rls_load --server-pid $! --label "rategate memory"
//! target/release/examples/rls_load --exact 50 --limit-key hot
//! kill %1
//! ```
//!
//! `--exact N` fires N requests for `[(--descriptor-key, --limit-key)]` at
//! once (every task waits at one barrier, then sends) and prints how many
//! were admitted and how many were over the limit: with
//! `measure/rls_load.yaml`, `hot` allows 10 a minute, so exactly 10 of 50
//! are admitted (on a fresh minute window).
//!
//! The client and the server share the machine's cores unless pinned apart
//! (`taskset`); the decisions per second are then a floor for the server.

use clap::Parser;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint};

/// Load generator for rategate-rls on loopback.
#[derive(Debug, Parser)]
#[command(name = "rls_load")]
struct Args {
    /// The server's gRPC address (loopback only).
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    target: String,
    /// The RLS domain of every request.
    #[arg(long, default_value = "load")]
    domain: String,
    /// The descriptor's key.
    #[arg(long, default_value = "user")]
    descriptor_key: String,
    /// Distinct descriptor values, `k0` to `k{keys-1}`.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    keys: u64,
    /// Seconds measured per level (after one second of warm-up).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// The most requests sent per level.
    #[arg(long, default_value_t = 5_000_000)]
    max_requests: u64,
    /// Requests in flight per level, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64",
          value_parser = clap::value_parser!(u32).range(1..))]
    in_flight: Vec<u32>,
    /// HTTP/2 connections, used round-robin.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    connections: u32,
    /// The server's PID, for its CPU time per decision.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Free text in each row's first column.
    #[arg(long, default_value = "rategate-rls")]
    label: String,
    /// Fire this many concurrent requests for one descriptor instead of the
    /// load levels, and print how many were admitted.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    exact: Option<u32>,
    /// The descriptor value `--exact` sends.
    #[arg(long, default_value = "hot")]
    limit_key: String,
}

/// What the tasks of one level (or of the exact mode) counted.
#[derive(Default)]
struct Tally {
    /// Latency of every decision (OK or OVER_LIMIT), in nanoseconds,
    /// saturating at `u32::MAX` (4.29 s).
    latencies: Vec<u32>,
    ok: u64,
    over: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.latencies.extend(other.latencies);
        self.ok += other.ok;
        self.over += other.over;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    fn error(&mut self, e: String) {
        self.errors += 1;
        self.first_error.get_or_insert(e);
    }

    /// Sends `request` and counts its answer.
    async fn ask(
        &mut self,
        client: &mut RateLimitServiceClient<Channel>,
        request: RateLimitRequest,
        record: bool,
    ) {
        let start = Instant::now();
        let answer = client.should_rate_limit(request).await;
        let nanos = u32::try_from(start.elapsed().as_nanos()).unwrap_or(u32::MAX);
        match answer.map(|r| Code::try_from(r.into_inner().overall_code)) {
            Ok(Ok(Code::Ok)) => self.ok += 1,
            Ok(Ok(Code::OverLimit)) => self.over += 1,
            Ok(code) => return self.error(format!("unexpected overall code {code:?}")),
            Err(status) => return self.error(status.to_string()),
        }
        if record {
            self.latencies.push(nanos);
        }
    }
}

fn request(domain: &str, key: &str, value: String) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.into(),
                value,
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// xorshift64: a key per request without a dependency; uniform enough to
/// spread the load over the keys.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Rejects a target whose host is not loopback: the tool sends up to
/// millions of requests and must not be pointed at a shared server.
fn loopback_endpoint(target: &str) -> Result<Endpoint, String> {
    let endpoint =
        Endpoint::from_shared(target.to_owned()).map_err(|e| format!("--target {target}: {e}"))?;
    match endpoint.uri().host() {
        Some("127.0.0.1" | "[::1]" | "::1" | "localhost") => Ok(endpoint),
        host => Err(format!(
            "--target {target}: host {} is not loopback (127.0.0.1, ::1 or localhost)",
            host.unwrap_or("(none)")
        )),
    }
}

/// Clock ticks per second of `/proc/PID/stat`'s times.
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of `pid` in clock ticks (fields 14 and 15 of
/// `/proc/PID/stat`; counted after the `)` closing field 2, the command
/// name, which may hold spaces).
fn cpu_ticks(pid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let rest = &stat[stat.rfind(')').ok_or(format!("{path}: no command name"))? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Result<u64, String> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or(format!("{path}: no field {n}"))
    };
    Ok(field(14)? + field(15)?)
}

/// Runs `in_flight` tasks for `length` or `max_requests` requests,
/// whichever ends first; returns what they counted and the time taken.
async fn run_level(
    args: &Arc<Args>,
    clients: &[RateLimitServiceClient<Channel>],
    in_flight: u32,
    length: Duration,
    record: bool,
) -> (Tally, Duration) {
    let sent = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + length;
    let tasks: Vec<_> = (0..in_flight)
        .map(|t| {
            let mut client = clients[t as usize % clients.len()].clone();
            let (args, sent) = (Arc::clone(args), Arc::clone(&sent));
            tokio::spawn(async move {
                let mut tally = Tally::default();
                let mut state = 0x9E37_79B9_7F4A_7C15 ^ (u64::from(t) + 1);
                while Instant::now() < deadline
                    && sent.fetch_add(1, Ordering::Relaxed) < args.max_requests
                {
                    let value = format!("k{}", xorshift(&mut state) % args.keys);
                    let r = request(&args.domain, &args.descriptor_key, value);
                    tally.ask(&mut client, r, record).await;
                }
                tally
            })
        })
        .collect();
    let mut tally = Tally::default();
    for task in tasks {
        tally.merge(task.await.expect("a load task panicked"));
    }
    (tally, start.elapsed())
}

/// The latency at quantile `q` of sorted nanoseconds, in microseconds.
fn percentile(sorted: &[u32], q: f64) -> f64 {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    f64::from(sorted[i]) / 1e3
}

async fn load(args: Arc<Args>, clients: &[RateLimitServiceClient<Channel>]) -> Result<(), String> {
    let ticks = clock_ticks();
    println!(
        "| label | in flight | decisions/s | p50 µs | p99 µs | p99.9 µs \
         | server CPU µs/decision | server cores | over % | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &n in &args.in_flight {
        run_level(&args, clients, n, Duration::from_secs(1), false).await;
        let before = args.server_pid.map(cpu_ticks).transpose()?;
        let length = Duration::from_secs(args.seconds);
        let (mut tally, took) = run_level(&args, clients, n, length, true).await;
        let after = args.server_pid.map(cpu_ticks).transpose()?;
        let decisions = tally.ok + tally.over;
        if decisions == 0 {
            let e = tally.first_error.unwrap_or_default();
            return Err(format!(
                "in flight {n}: every request failed; first error: {e}"
            ));
        }
        tally.latencies.sort_unstable();
        let (server_us, cores) = match (before, after) {
            (Some(b), Some(a)) => {
                let cpu = (a - b) as f64 / ticks;
                (
                    format!("{:.1}", cpu * 1e6 / decisions as f64),
                    format!("{:.2}", cpu / took.as_secs_f64()),
                )
            }
            _ => ("-".into(), "-".into()),
        };
        println!(
            "| {} | {n} | {:.0} | {:.1} | {:.1} | {:.1} | {server_us} | {cores} | {:.1} | {} |",
            args.label,
            decisions as f64 / took.as_secs_f64(),
            percentile(&tally.latencies, 0.50),
            percentile(&tally.latencies, 0.99),
            percentile(&tally.latencies, 0.999),
            100.0 * tally.over as f64 / decisions as f64,
            tally.errors,
        );
    }
    Ok(())
}

/// `n` requests for one descriptor, all released by one barrier so that
/// they reach the server together.
async fn exact(
    args: &Args,
    clients: &[RateLimitServiceClient<Channel>],
    n: u32,
) -> Result<(), String> {
    let barrier = Arc::new(tokio::sync::Barrier::new(n as usize));
    let tasks: Vec<_> = (0..n)
        .map(|t| {
            let mut client = clients[t as usize % clients.len()].clone();
            let barrier = Arc::clone(&barrier);
            let r = request(&args.domain, &args.descriptor_key, args.limit_key.clone());
            tokio::spawn(async move {
                let mut tally = Tally::default();
                barrier.wait().await;
                tally.ask(&mut client, r, false).await;
                tally
            })
        })
        .collect();
    let mut tally = Tally::default();
    for task in tasks {
        tally.merge(task.await.expect("an exact-mode task panicked"));
    }
    println!(
        "exact: {n} concurrent requests for ({}, {}): {} admitted (OK), {} over limit, {} errors",
        args.descriptor_key, args.limit_key, tally.ok, tally.over, tally.errors
    );
    match tally.first_error {
        Some(e) => Err(format!("first error: {e}")),
        None => Ok(()),
    }
}

/// An error and its sources, `: `-separated (tonic's transport error
/// alone says only "transport error").
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

async fn run(args: Args) -> Result<(), String> {
    let endpoint = loopback_endpoint(&args.target)?;
    let mut clients = Vec::new();
    // One `connect` per channel: each is its own HTTP/2 connection.
    for _ in 0..args.connections {
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| format!("connecting to {}: {}", args.target, chain(&e)))?;
        clients.push(RateLimitServiceClient::new(channel));
    }
    match args.exact {
        Some(n) => exact(&args, &clients, n).await,
        None => load(Arc::new(args), &clients).await,
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rls_load: {e}");
            ExitCode::FAILURE
        }
    }
}
