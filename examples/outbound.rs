//! Many tokio tasks calling a rate-limited upstream through one
//! `OutboundLimiter`, offline: the upstream is a small HTTP server on a free
//! loopback port that enforces its own limit with 429 + `Retry-After`, and
//! halves that limit mid-run.
//!
//! Three runs: an upstream that only sends `Retry-After` (Stripe's style;
//! the guard must find the new rate from what the upstream accepts), one
//! that also advertises its policy in the IETF `RateLimit-Policy` field
//! (the guard adopts it), and one that only ever takes 80% of the promised
//! rate and only sends `Retry-After`.
//!
//! `cargo run --release --example outbound --features tokio`

use rategate::{OutboundLimiter, Quota, RateLimiter, TokenBucket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const TASKS: usize = 300;
const LIMIT: u32 = 100;
const PHASE_ONE: Duration = Duration::from_secs(4);
const PHASE_TWO: Duration = Duration::from_secs(6);

/// The upstream: its own token bucket (LIMIT/s, burst 20), swapped for one
/// at half the rate when told to.
struct Upstream {
    limiter: Mutex<Arc<RateLimiter<TokenBucket>>>,
    advertise_policy: bool,
    rate: AtomicU64,
    ok: AtomicU64,
    limited: AtomicU64,
    /// (seconds since start, was 429) per request, for the timeline.
    log: Mutex<Vec<(f64, bool)>>,
    start: Instant,
}

fn bucket(rate: u32) -> Arc<RateLimiter<TokenBucket>> {
    let quota = Quota::per_second(rate).unwrap().burst(20).unwrap();
    Arc::new(RateLimiter::new(quota).unwrap())
}

impl Upstream {
    fn halve(&self) {
        let rate = self.rate.load(Ordering::Relaxed) as u32 / 2;
        self.rate.store(rate.into(), Ordering::Relaxed);
        *self.limiter.lock().unwrap() = bucket(rate);
    }

    fn answer(&self) -> String {
        let limiter = Arc::clone(&self.limiter.lock().unwrap());
        let d = limiter.check();
        let rate = self.rate.load(Ordering::Relaxed);
        let policy = if self.advertise_policy {
            format!("RateLimit-Policy: \"default\";q={rate};w=1\r\n")
        } else {
            String::new()
        };
        self.log
            .lock()
            .unwrap()
            .push((self.start.elapsed().as_secs_f64(), !d.is_allowed()));
        if d.is_allowed() {
            self.ok.fetch_add(1, Ordering::Relaxed);
            format!("HTTP/1.1 200 OK\r\n{policy}Content-Length: 2\r\nConnection: close\r\n\r\nok")
        } else {
            self.limited.fetch_add(1, Ordering::Relaxed);
            format!(
                "HTTP/1.1 429 Too Many Requests\r\nRetry-After: {}\r\n{policy}Content-Length: 0\r\nConnection: close\r\n\r\n",
                d.retry_after_secs().max(1)
            )
        }
    }
}

async fn serve(listener: TcpListener, upstream: Arc<Upstream>) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            continue;
        };
        let upstream = Arc::clone(&upstream);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 1024];
            let mut read = 0;
            while !buf[..read].windows(4).any(|w| w == b"\r\n\r\n") && read < buf.len() {
                match socket.read(&mut buf[read..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => read += n,
                }
            }
            let _ = socket.write_all(upstream.answer().as_bytes()).await;
        });
    }
}

/// One request: (status, headers).
async fn call(addr: std::net::SocketAddr) -> std::io::Result<(u16, Vec<(String, String)>)> {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /v1/charges HTTP/1.1\r\nHost: upstream\r\nConnection: close\r\n\r\n")
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let mut lines = response.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok((status, headers))
}

/// What the upstream does.
#[derive(Clone, Copy)]
struct Setup {
    /// Its real rate, per second.
    rate: u32,
    /// Whether it halves that rate after the first phase.
    halves: bool,
    advertise_policy: bool,
    /// The two phases' lengths.
    phases: (Duration, Duration),
}

async fn run(setup: Setup) {
    let Setup {
        rate,
        halves,
        advertise_policy,
        phases: (phase_one, phase_two),
    } = setup;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let start = Instant::now();
    let upstream = Arc::new(Upstream {
        limiter: Mutex::new(bucket(rate)),
        advertise_policy,
        rate: AtomicU64::new(rate.into()),
        ok: AtomicU64::new(0),
        limited: AtomicU64::new(0),
        log: Mutex::new(Vec::new()),
        start,
    });
    let server = tokio::spawn(serve(listener, Arc::clone(&upstream)));

    // The guard, set at the upstream's published limit; it spreads its
    // calls evenly at that rate.
    let own = RateLimiter::<TokenBucket>::new(Quota::per_second(LIMIT).unwrap()).unwrap();
    let guard = Arc::new(OutboundLimiter::new(own));

    let stop = Arc::new(AtomicBool::new(false));
    let arrivals = Arc::new(AtomicU64::new(0));
    let admissions = Arc::new(AtomicU64::new(0));
    let distance = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (guard, stop) = (Arc::clone(&guard), Arc::clone(&stop));
            let (arrivals, admissions, distance) = (
                Arc::clone(&arrivals),
                Arc::clone(&admissions),
                Arc::clone(&distance),
            );
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let arrived = arrivals.fetch_add(1, Ordering::Relaxed);
                    guard.until_ready().await.unwrap();
                    let admitted = admissions.fetch_add(1, Ordering::Relaxed);
                    distance.fetch_add(admitted.abs_diff(arrived), Ordering::Relaxed);
                    let Ok((status, headers)) = call(addr).await else {
                        continue;
                    };
                    guard.observe_response(
                        status,
                        headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
                    );
                }
            })
        })
        .collect();

    tokio::time::sleep(phase_one).await;
    if halves {
        upstream.halve();
    }
    let halved_at = start.elapsed().as_secs_f64();
    tokio::time::sleep(phase_two).await;
    stop.store(true, Ordering::Relaxed);
    for t in &tasks {
        t.abort();
    }
    server.abort();

    let end = halved_at + phase_two.as_secs_f64();
    let log: Vec<_> = upstream
        .log
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|(t, _)| *t < end)
        .collect();
    let phase = |from: f64, to: f64| {
        let reqs: Vec<_> = log.iter().filter(|(t, _)| *t >= from && *t < to).collect();
        let ok = reqs.iter().filter(|(_, l)| !l).count() as f64;
        let limited = reqs.iter().filter(|(_, l)| *l).count();
        (ok / (to - from), limited)
    };
    let (rate_one, limited_one) = phase(0.0, halved_at);
    // Converged: from the last 429 on, no more.
    let last_429 = log
        .iter()
        .filter(|(t, l)| *l && *t >= halved_at)
        .map(|(t, _)| *t)
        .fold(halved_at, f64::max);
    let limited_two = log.iter().filter(|(t, l)| *l && *t >= halved_at).count();
    let (rate_tail, limited_tail) = phase(end - 2.0, end);
    let stats = guard.stats();
    let sent = log.len() as u64;
    let later = f64::from(if halves { rate / 2 } else { rate });
    println!(
        "upstream at {rate}/s (burst 20){}, sends {}: {TASKS} tasks, guard at {LIMIT}/s",
        if halves {
            format!(", halved to {}/s at {halved_at:.1} s", rate / 2)
        } else {
            String::new()
        },
        if advertise_policy {
            "Retry-After and RateLimit-Policy"
        } else {
            "Retry-After only"
        },
    );
    println!("  requests sent                  {sent}");
    let first_phase = format!("first {} s", phase_one.as_secs());
    let second_phase = if halves {
        "after halving".to_string()
    } else {
        format!("after {} s", phase_one.as_secs())
    };
    println!(
        "  upstream 429s                  {} ({first_phase} {limited_one}, {second_phase} {limited_two})",
        limited_one + limited_two
    );
    println!(
        "  throughput, {first_phase:13}      {rate_one:.1}/s = {:.1}% of {rate}/s",
        100.0 * rate_one / f64::from(rate)
    );
    if halves {
        println!(
            "  last 429 after halving         {}",
            if limited_two == 0 {
                "none".to_string()
            } else {
                format!("{:.2} s after it", last_429 - halved_at)
            }
        );
    }
    let (rate_late, limited_late) = phase(halved_at, end);
    println!(
        "  throughput, {second_phase:13}      {rate_late:.1}/s = {:.1}% of {later}/s ({limited_late} 429s)",
        100.0 * rate_late / later
    );
    println!(
        "  throughput, last 2 s           {rate_tail:.1}/s = {:.1}% of {later}/s ({limited_tail} 429s)",
        100.0 * rate_tail / later
    );
    println!(
        "  limiter checks per sent request {:.2}",
        stats.checks as f64 / sent as f64
    );
    println!(
        "  order distance                 {:.2} (mean |admission rank - arrival rank|)",
        distance.load(Ordering::Relaxed) as f64 / admissions.load(Ordering::Relaxed).max(1) as f64
    );
    println!(
        "  guard rate at the end          {:.0}% of {LIMIT}/s",
        100.0 * stats.rate_factor
    );
}

#[tokio::main]
async fn main() {
    let halving = Setup {
        rate: LIMIT,
        halves: true,
        advertise_policy: false,
        phases: (PHASE_ONE, PHASE_TWO),
    };
    run(halving).await;
    println!();
    run(Setup {
        advertise_policy: true,
        ..halving
    })
    .await;
    println!();
    run(Setup {
        rate: LIMIT * 8 / 10,
        halves: false,
        advertise_policy: false,
        phases: (Duration::from_secs(10), Duration::from_secs(20)),
    })
    .await;
}
