//! Load test of the axum example (`examples/axum_api.rs`) on loopback:
//! requests/s and p50 / p99 latency at saturation without the layer, with
//! it (one rule, and two rules checked all or nothing), and with one
//! million distinct client keys (the keyed limiters stay under their key
//! cap). Bounded in count and time; nothing leaves 127.0.0.1.
//!
//! ```sh
//! cargo run --release --example axum_load --features axum -- [SECS] [CONNS] [ROUNDS] [HEADERS]
//! ```
//!
//! Each phase runs SECS seconds (default 5) with CONNS kept-alive HTTP/1.1
//! connections (default 32), the client and the server in one process on
//! separate runtimes; the four phases alternate ROUNDS times (default 2),
//! the layer sending HEADERS (`all`, the default; `ietf`, `x`, `denials`:
//! see below). The million-key phase sends exactly 1,000,000
//! requests (or stops after 120 s). Then the layer alone is timed
//! in-process, without sockets, per call; `axum_load in-process [CALLS]
//! [bare|one|bare-token|two] [all|ietf|x|denials]` runs only that part, or
//! one phase of it (for a profiler: `valgrind --tool=callgrind`), with the
//! layer's header choice: every field (the default), only the IETF pair,
//! only `x-ratelimit-*`, or headers on 429s only.

#[path = "axum_api.rs"]
mod api;

use api::{Limiters, Quotas};
use axum::Router;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rategate::Quota;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};

/// Quotas no load run reaches: every request is admitted and does the
/// whole check.
fn generous() -> Quotas {
    let huge = Quota::per_second(1_000_000_000).unwrap();
    Quotas {
        token_hourly: huge,
        anonymous_hourly: huge,
        reads: huge,
        writes: huge,
        token_points: huge,
        anonymous_points: huge,
        max_keys: 100_000,
    }
}

fn serve(router: Router) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(
                listener,
                router.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
            .unwrap();
        });
    });
    rx.recv().unwrap()
}

struct Outcome {
    requests: u64,
    statuses: [u64; 6],
    elapsed: Duration,
    latencies_us: Vec<u32>,
}

/// Runs `conns` connections until `secs` pass or `limit` requests are sent;
/// request `n` carries the headers `headers(n)` gives. With `rate`, the
/// connections together send that many requests per second, each on its
/// own schedule (latency then is service time, not queueing); without, as
/// fast as answers come (saturation).
fn load(
    addr: SocketAddr,
    conns: usize,
    secs: u64,
    limit: u64,
    path: &'static str,
    headers: fn(u64) -> Vec<(&'static str, String)>,
    rate: Option<f64>,
) -> Outcome {
    let gap = rate.map(|r| Duration::from_secs_f64(conns as f64 / r));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let next = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + Duration::from_secs(secs);
        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..conns {
            let next = Arc::clone(&next);
            tasks.push(tokio::spawn(async move {
                let stream = TcpStream::connect(addr).await.unwrap();
                stream.set_nodelay(true).unwrap();
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .unwrap();
                tokio::spawn(conn);
                let mut latencies = Vec::new();
                let mut statuses = [0u64; 6];
                let mut due = tokio::time::Instant::now();
                loop {
                    if let Some(gap) = gap {
                        due += gap;
                        tokio::time::sleep_until(due).await;
                    }
                    // Relaxed: a ticket counter, ordering nothing else.
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= limit || Instant::now() >= deadline {
                        break;
                    }
                    let mut request = Request::get(path).header("host", "localhost");
                    for (name, value) in headers(n) {
                        request = request.header(name, value);
                    }
                    let request = request.body(Empty::<Bytes>::new()).unwrap();
                    let sent = Instant::now();
                    sender.ready().await.unwrap();
                    let response = sender.send_request(request).await.unwrap();
                    let status = response.status().as_u16();
                    response.into_body().collect().await.unwrap();
                    latencies.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
                    statuses[usize::from(status / 100).min(5)] += 1;
                }
                (latencies, statuses)
            }));
        }
        let mut latencies_us = Vec::new();
        let mut statuses = [0u64; 6];
        for task in tasks {
            let (l, s) = task.await.unwrap();
            latencies_us.extend(l);
            for (total, part) in statuses.iter_mut().zip(s) {
                *total += part;
            }
        }
        let elapsed = start.elapsed();
        latencies_us.sort_unstable();
        Outcome {
            requests: latencies_us.len() as u64,
            statuses,
            elapsed,
            latencies_us,
        }
    })
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at]
}

fn report(name: &str, o: &Outcome) -> f64 {
    let rps = o.requests as f64 / o.elapsed.as_secs_f64();
    println!(
        "| {name} | {} | {:.0} | {} | {} | {} / {} |",
        o.requests,
        rps,
        percentile(&o.latencies_us, 0.50),
        percentile(&o.latencies_us, 0.99),
        o.statuses[2],
        o.statuses[4],
    );
    rps
}

fn no_headers(_: u64) -> Vec<(&'static str, String)> {
    Vec::new()
}

fn token(n: u64) -> Vec<(&'static str, String)> {
    // 64 tokens, spread over the connections.
    vec![("authorization", format!("Bearer token-{}", n % 64))]
}

fn distinct_ip(n: u64) -> Vec<(&'static str, String)> {
    // 10.x.y.z, one address per request: a million distinct keys, sent
    // through the trusted loopback proxy.
    let ip = 0x0A00_0000u32 | (n as u32 & 0x00FF_FFFF);
    vec![("x-forwarded-for", std::net::Ipv4Addr::from(ip).to_string())]
}

/// The layer's builder for a header choice: every field (`all`, the
/// default), the IETF pair only (`ietf`), `x-ratelimit-*` only (`x`), or
/// the fields on 429s only (`denials`).
fn builder(headers: &str) -> rategate::http::RateLimitBuilder {
    let builder = rategate::http::RateLimitLayer::builder();
    match headers {
        "ietf" => builder.x_ratelimit_headers(false),
        "x" => builder.ietf_headers(false),
        "denials" => builder.headers_on_allowed(false),
        _ => builder,
    }
}

/// The layer alone, in-process: ns per request through `RateLimit` around
/// a service that answers at once, against the same service bare.
fn in_process(limiters: &Limiters, calls: u32, only: Option<&str>, headers: &str) {
    use tower::{Layer, Service, ServiceExt};
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let inner = tower::service_fn(|_r: Request<()>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(Empty::<Bytes>::new()))
    });
    let peer: SocketAddr = "192.0.2.1:1234".parse().unwrap();
    let make = |auth: bool| {
        let mut r = Request::get("/v1/charges").body(()).unwrap();
        r.extensions_mut().insert(peer);
        if auth {
            r.headers_mut()
                .insert("authorization", "Bearer token-1".parse().unwrap());
        }
        r
    };
    let time = |f: &mut dyn FnMut()| {
        let start = Instant::now();
        for _ in 0..calls {
            f();
        }
        start.elapsed().as_nanos() as f64 / f64::from(calls)
    };
    let mut bare = inner;
    let mut limited = limiters.layer_from(builder(headers)).layer(inner);
    // `only` picks one phase (for a profiler); the rest report 0.
    let mut phase = |name: &str, layer: bool, signed_in: bool| {
        if only.is_some_and(|o| o != name) {
            return 0.0;
        }
        time(&mut || {
            rt.block_on(async {
                let request = make(signed_in);
                if layer {
                    let _ = limited.ready().await.unwrap().call(request).await;
                } else {
                    let _ = bare.ready().await.unwrap().call(request).await;
                }
            })
        })
    };
    let bare_ns = phase("bare", false, false);
    let one_ns = phase("one", true, false);
    let bare_token_ns = phase("bare-token", false, true);
    let two_ns = phase("two", true, true);
    println!();
    println!("In-process, {calls} calls each (request built, headers written):");
    println!("  bare service                         {bare_ns:>8.0} ns/request");
    println!(
        "  layer, anonymous (one rule)          {one_ns:>8.0} ns/request (+{:.0} ns)",
        one_ns - bare_ns
    );
    println!("  bare service, signed-in request      {bare_token_ns:>8.0} ns/request");
    println!(
        "  layer, signed-in (two rules, AllOf)  {two_ns:>8.0} ns/request (+{:.0} ns)",
        two_ns - bare_token_ns
    );
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().is_some_and(|a| a == "in-process") {
        // Only the in-process timing (for a profiler such as callgrind).
        let calls = args.nth(1).and_then(|a| a.parse().ok()).unwrap_or(200_000);
        let only = args.next();
        let headers = args.next().unwrap_or_else(|| "all".to_string());
        in_process(
            &Limiters::new(&generous()),
            calls,
            only.as_deref(),
            &headers,
        );
        return;
    }
    let secs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let conns: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(32);
    let rounds: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let headers = args.next().unwrap_or_else(|| "all".to_string());
    println!(
        "{secs} s per phase, {conns} connections, {rounds} rounds, loopback, header fields: {headers}\n"
    );
    println!("| phase | requests | requests/s | p50 µs | p99 µs | 2xx / 429 |");
    println!("|---|---:|---:|---:|---:|---:|");

    let bare = serve(api::app(None));
    let limiters = Limiters::new(&generous());
    let limited = serve(api::app(Some(limiters.layer_from(builder(&headers)))));
    // Phases alternate, ROUNDS times, so that a machine whose load drifts
    // (other work, thermal limits) weighs on every phase alike.
    // Without the layer, the signed-in phase's requests (an
    // `authorization` header, built per request by the client) cost more
    // than bare ones: each layered phase is compared with the same
    // requests served without the layer.
    type Headers = fn(u64) -> Vec<(&'static str, String)>;
    let phases: [(&str, SocketAddr, Headers); 4] = [
        ("no layer", bare, no_headers),
        ("layer, anonymous by IP, one rule", limited, no_headers),
        ("no layer, signed-in requests", bare, token),
        (
            "layer, signed-in by token, hourly + read all or nothing",
            limited,
            token,
        ),
    ];
    let mut totals = [0.0f64; 4];
    for round in 1..=rounds {
        for (total, (name, addr, headers)) in totals.iter_mut().zip(phases) {
            let outcome = load(addr, conns, secs, u64::MAX, "/v1/charges", headers, None);
            *total += report(&format!("{name} (round {round})"), &outcome);
        }
    }
    let [base, one, base_token, two] = totals;

    let million = load(
        limited,
        conns,
        120,
        1_000_000,
        "/v1/charges",
        distinct_ip,
        None,
    );
    report("layer, 1,000,000 distinct client IPs", &million);

    // Below saturation: at half the bare server's rate, what the layer adds
    // to each request's latency without the queueing that saturation adds.
    let rate = (base / f64::from(rounds) / 2.0).round();
    println!();
    println!("At a fixed {rate:.0} requests/s (half the bare saturation rate):");
    println!();
    println!("| phase | requests | requests/s | p50 µs | p99 µs | 2xx / 429 |");
    println!("|---|---:|---:|---:|---:|---:|");
    for round in 1..=rounds {
        for (name, addr) in [("no layer", bare), ("layer, one rule", limited)] {
            let outcome = load(
                addr,
                conns,
                secs,
                u64::MAX,
                "/v1/charges",
                no_headers,
                Some(rate),
            );
            report(&format!("{name}, paced (round {round})"), &outcome);
        }
    }
    println!();
    println!(
        "Throughput against no layer, same requests (all rounds): one rule {:+.1}%, \
         two rules {:+.1}% (against bare requests: {:+.1}%)",
        (one / base - 1.0) * 100.0,
        (two / base_token - 1.0) * 100.0,
        (two / base - 1.0) * 100.0
    );
    let cap = generous().max_keys;
    let held = limiters.anonymous_hourly.len();
    println!(
        "Keys held by the anonymous limiter after {} distinct IPs: {held} (cap {cap}); \
         new keys past the cap shared one state {} times",
        million.requests,
        limiters.anonymous_hourly.overflow_count()
    );
    assert!(held <= cap, "the key cap was exceeded");
    in_process(&limiters, 200_000, None, &headers);
}
