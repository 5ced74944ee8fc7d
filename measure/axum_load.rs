//! Load test of the axum example (`examples/axum_api.rs`) on loopback:
//! requests/s, p50 / p99 latency and the server's CPU time per request at
//! saturation without the layer, with it (one rule, and two rules checked
//! all or nothing), and with one million distinct client keys (the keyed
//! limiters stay under their key cap); then latency unloaded (one
//! connection, closed loop). Bounded in count and time; nothing leaves
//! 127.0.0.1.
//!
//! ```sh
//! cargo run --release --example axum_load --features axum -- [SECS] [CONNS] [ROUNDS] [HEADERS] [UNLOADED] [CONTROL]
//! ```
//!
//! Each phase runs SECS seconds (default 5) with CONNS kept-alive HTTP/1.1
//! connections (default 32), the client and the server in one process on
//! separate runtimes; the four phases alternate ROUNDS times (default 2),
//! each pair in turn bare first, then layered first (an even ROUNDS
//! balances the two orders),
//! the layer sending HEADERS (`default`, the layer's default: fields on
//! 429s only, also spelt `denials`; `all`: every field on every response;
//! `ietf`, `x`: only the IETF pair, only `x-ratelimit-*`, on every
//! response). The million-key phase sends exactly 1,000,000 requests (or
//! stops after 120 s). The server's CPU time is read per phase from
//! `/proc/self/task/*/schedstat` of its threads (named `srv...`), so the
//! co-located client's work is not counted. The unloaded phases send
//! UNLOADED requests (default 20,000) on one connection, each when the
//! previous answer has arrived, ROUNDS times each: the layer's latency
//! without queueing (p50 / p99 / p99.9).
//!
//! `SATURATION_ONLY=1` in the environment runs the saturation phases and
//! their summary only (no million-key, paced, unloaded or in-process
//! part), for repeated runs (`RUNS` in `scripts/http-load.sh`).
//!
//! `CLIENT=raw` in the environment makes the loaded phases' (saturation,
//! million keys, paced) load
//! generator write each request as bytes and read each response by its
//! `content-length`, instead of going through hyper's client: much less
//! work per request on the generator's side, so that with `PIN` (below)
//! the server's core is the one that saturates, as with `wrk` on a core
//! of its own. The unloaded phases always use hyper's client.
//!
//! `SERVER_WORKERS=N` in the environment sets each server's tokio worker
//! threads (default 2). With `PIN=SERVER_CPU,CLIENT_CPU` in the environment (`PIN=0,1`), every
//! server thread is bound to one CPU and every client thread to another,
//! so the server saturates its own core instead of sharing both with the
//! load generator. `PIN=0,0` puts every thread on one CPU: no wakeup of an
//! idle CPU per request, the steady setup for the unloaded latency.
//!
//! CONTROL replaces the layered server's layer to check the harness
//! itself: `layer` (default: the example's layer added with
//! `Router::layer`, with `same_body()`), `outer` (the same layer wrapped
//! once around the whole `Router` instead, as the example serves it,
//! `RateLimitLayer::around`: axum then does not put a copy of it in each
//! route), `bare` (no layer on either server: an A/A
//! comparison, whose ratios should be 0% give or take the noise),
//! `identity` (tower's `Identity` layer: what any layer's frame costs in
//! axum), `outer-identity` (`Identity` around the whole `Router`), `idle`
//! (rategate's layer with one rule that never applies: the
//! layer's frame without a limit's check), `per-ip`
//! (`RateLimitLayer::per_ip`: one tier keyed by the peer address, one
//! token bucket, no matcher: the simplest layer), `outer-per-ip` (that
//! layer around the whole `Router`), `tower-governor` (tower_governor's
//! per-IP `GovernorLayer` through `Router::layer`, governor's keyed GCRA:
//! the field's per-IP layer in the same harness), `spin` (a layer that only
//! busy-waits `SPIN_NS` nanoseconds per request, default 150, about the
//! layer's in-process cost, touching nothing shared: what that much
//! private work per request costs under this load) or `shared` (a layer
//! that only adds one to an atomic every server thread shares: what one
//! contended cache line per request costs). Each phase also reports the
//! whole process's CPU per request (client and servers together), and the
//! run the servers' context switches: where throughput falls further than
//! CPU per request rises, the cores were idle more, waiting.
//!
//! Then the layer alone is timed in-process, without sockets, per call;
//! `axum_load in-process [CALLS] [bare|one|bare-token|two]
//! [default|all|ietf|x|denials]` runs only that part, or one phase of it
//! (for a profiler: `valgrind --tool=callgrind`), with the layer's header
//! choice. The phases through axum's `Router` (the example's routes, one
//! anonymous request each), `router-bare`, `router-layer`, `router-per-ip`,
//! `router-tower-governor` and `router-outer`, run only when named. With `POLLUTE_KB=N` in the environment, N KiB are written
//! between calls (evicting what a tight loop keeps cached, as a server's
//! sockets and parsing do) and each call is timed on its own; a large N
//! makes each call slow to set up, so give a small CALLS (20000).

#[path = "../examples/axum_api.rs"]
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

/// Worker threads per server runtime: `SERVER_WORKERS` in the
/// environment, else 2 (one per vCPU of the development VM, which the
/// load generator's thread then shares with them).
fn server_workers() -> usize {
    std::env::var("SERVER_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(2)
}

/// Which side of the load test a thread belongs to, for [`pin`].
#[derive(Clone, Copy)]
enum Side {
    Server,
    Client,
}

/// With `PIN=SERVER_CPU,CLIENT_CPU` in the environment (`PIN=0,1`), binds
/// the calling thread to the server's or the client's CPU, so that the
/// servers and the load generator do not share a core and the server,
/// alone on its core, is what saturates. Without it (the default), the
/// scheduler places every thread. Linux only; elsewhere a no-op.
fn pin(side: Side) {
    let Ok(spec) = std::env::var("PIN") else {
        return;
    };
    let cpus: Vec<usize> = spec
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let [server, client] = cpus[..] else {
        panic!("PIN={spec:?}: give SERVER_CPU,CLIENT_CPU, e.g. PIN=0,1");
    };
    let cpu = match side {
        Side::Server => server,
        Side::Client => client,
    };
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `set` is a plain bit mask on the stack, initialised by
        // CPU_ZERO before use; pid 0 is the calling thread.
        let ok = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_ZERO(&mut set);
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        };
        assert!(ok, "PIN: cannot bind a thread to CPU {cpu}");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cpu;
}

/// Serves `service` on a runtime of its own whose threads are all named
/// `name...` (`srv-b`, `srv-l`: a `srv` prefix), so that [`server_cpu_ns`]
/// can tell them from the client's and from the other server's.
///
/// Any service axum can serve: a `Router`, or a layer wrapped around a
/// whole `Router` once.
fn serve<S>(service: S, name: &'static str) -> SocketAddr
where
    S: tower::Service<
            Request<axum::body::Body>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new().name(format!("{name}-accept"));
    let _server = spawned
        .spawn(move || {
            pin(Side::Server);
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(server_workers())
                .thread_name(name)
                .on_thread_start(|| pin(Side::Server))
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                axum::serve(
                    listener,
                    axum::ServiceExt::<Request<axum::body::Body>>::into_make_service_with_connect_info::<SocketAddr>(service),
                )
                .await
                .unwrap();
            });
        })
        .expect("spawn the server thread");
    rx.recv().unwrap()
}

/// Nanoseconds on CPU so far of this process's threads whose names start
/// with `prefix` (`srv`: every server runtime's), summed: the first field of
/// `/proc/self/task/<tid>/schedstat`, or `utime + stime` of
/// `/proc/self/task/<tid>/stat` (clock ticks, taken as 10 ms) where the
/// kernel keeps no schedstat. `None` off Linux.
fn server_cpu_ns(prefix: &str) -> Option<u64> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let dir = task.path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue; // a thread that just ended
        };
        if !comm.starts_with(prefix) {
            continue;
        }
        let from_schedstat = std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok());
        let ns = from_schedstat.or_else(|| stat_cpu_ns(&dir.join("stat")));
        total += ns.unwrap_or(0);
    }
    Some(total)
}

/// Voluntary and involuntary context switches so far of this process's
/// threads whose names start with `prefix`, from
/// `/proc/self/task/<tid>/status`. `None` off Linux.
fn context_switches(prefix: &str) -> Option<(u64, u64)> {
    let (mut voluntary, mut involuntary) = (0, 0);
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        for line in status.lines() {
            let count = |v: &str| v.trim().parse::<u64>().unwrap_or(0);
            if let Some(v) = line.strip_prefix("voluntary_ctxt_switches:") {
                voluntary += count(v);
            } else if let Some(v) = line.strip_prefix("nonvoluntary_ctxt_switches:") {
                involuntary += count(v);
            }
        }
    }
    Some((voluntary, involuntary))
}

/// A control for `idle`: the layer with one tier and one rule that never
/// applies, so each request pays the layer's frame (the key extracted, the
/// rules matched, the response future) but no limit's check.
fn idle_layer(limiters: &Limiters) -> rategate::http::RateLimitLayer {
    use rategate::http::{ClientClass, KeyExtractor, Matcher, RateLimitLayer, Rule};
    let never = Matcher::from_fn(|_| false);
    RateLimitLayer::builder()
        .class(
            ClientClass::new("all", KeyExtractor::global())
                .rule(Rule::new("never", limiters.reads.clone()).when(never)),
        )
        .build()
        .expect("one tier, one rule")
}

/// `RateLimitLayer::per_ip` with a quota no load run reaches.
fn generous_per_ip() -> rategate::http::RateLimitLayer {
    rategate::http::RateLimitLayer::per_ip(Quota::per_second(1_000_000_000).unwrap()).unwrap()
}

/// The `outer-*` controls: `layer` wrapped once around the whole `Router`
/// (`axum::serve` takes a service whose responses have axum's body, so
/// the layered response's body is boxed into one, as `Router::layer`
/// boxes each route's).
fn outer<L, B>(layer: L) -> SocketAddr
where
    L: tower::Layer<Router>,
    L::Service: tower::Service<
            Request<axum::body::Body>,
            Response = http::Response<B>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    <L::Service as tower::Service<Request<axum::body::Body>>>::Future: Send,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    use tower::ServiceExt;
    serve(
        ServiceExt::<Request<axum::body::Body>>::map_response(layer.layer(api::app(None)), |r| {
            r.map(axum::body::Body::new)
        }),
        "srv-l",
    )
}

/// The `tower-governor` control: tower_governor's per-IP layer (governor's
/// keyed GCRA behind the peer address), with a quota no load run reaches:
/// the field's per-IP layer, in the same harness.
fn tower_governor_layer() -> tower_governor::GovernorLayer<
    tower_governor::key_extractor::PeerIpKeyExtractor,
    governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>,
    axum::body::Body,
> {
    let config = tower_governor::governor::GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(1_000_000)
        .finish()
        .expect("a non-zero period and burst");
    tower_governor::GovernorLayer::new(config)
}

/// Nanoseconds the `spin` control busy-waits per request: `SPIN_NS` in
/// the environment, else 150.
fn spin_ns() -> u64 {
    std::env::var("SPIN_NS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150)
}

/// The `spin` control: `ns` nanoseconds of private work per request.
fn spin_layer<B>(
    ns: u64,
) -> tower::util::MapRequestLayer<impl Fn(Request<B>) -> Request<B> + Clone> {
    let ns = Duration::from_nanos(ns);
    tower::util::MapRequestLayer::new(move |request| {
        let start = Instant::now();
        while start.elapsed() < ns {
            std::hint::spin_loop();
        }
        request
    })
}

/// The `shared` control: one add to a counter every server thread writes.
fn shared_layer<B>() -> tower::util::MapRequestLayer<impl Fn(Request<B>) -> Request<B> + Clone> {
    let counter = Arc::new(AtomicU64::new(0));
    tower::util::MapRequestLayer::new(move |request| {
        // Relaxed: a count, ordering nothing else; the point is the
        // contended line.
        counter.fetch_add(1, Ordering::Relaxed);
        request
    })
}

struct Outcome {
    requests: u64,
    statuses: [u64; 6],
    elapsed: Duration,
    latencies_us: Vec<u32>,
    /// The server's CPU time over the phase, ns (all server threads).
    server_cpu_ns: Option<u64>,
    /// The whole process's CPU time over the phase, ns (client and
    /// servers; 10 ms ticks).
    process_cpu_ns: Option<u64>,
}

impl Outcome {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    /// Server CPU µs per request.
    fn cpu_us(&self) -> f64 {
        match self.server_cpu_ns {
            Some(ns) if self.requests > 0 => ns as f64 / 1e3 / self.requests as f64,
            _ => f64::NAN,
        }
    }

    /// The whole process's CPU µs per request: the server's and the
    /// client's, which share the machine's cores.
    fn process_cpu_us(&self) -> f64 {
        match self.process_cpu_ns {
            Some(ns) if self.requests > 0 => ns as f64 / 1e3 / self.requests as f64,
            _ => f64::NAN,
        }
    }
}

/// This process's CPU time so far (every thread, ended ones included).
/// `None` off Linux.
fn process_cpu_ns() -> Option<u64> {
    stat_cpu_ns(std::path::Path::new("/proc/self/stat"))
}

/// `utime + stime` of a `/proc/.../stat` file (a process's or a thread's),
/// in clock ticks taken as 10 ms.
fn stat_cpu_ns(path: &std::path::Path) -> Option<u64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the parenthesised name: state is field 3, utime 14 and
    // stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10_000_000)
}

/// The load generator's runtime: one worker, on the client's CPU under
/// `PIN` (the calling thread too).
fn client_runtime() -> tokio::runtime::Runtime {
    pin(Side::Client);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .on_thread_start(|| pin(Side::Client))
        .enable_all()
        .build()
        .unwrap()
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        // No rounds of that kind (`TOGETHER_KIND`).
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
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
    let rt = client_runtime();
    let cpu_before = server_cpu_ns("srv");
    let process_before = process_cpu_ns();
    let mut outcome = rt.block_on(async move {
        let next = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + Duration::from_secs(secs);
        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..conns {
            let next = Arc::clone(&next);
            if raw_client() {
                tasks.push(tokio::spawn(raw_connection(
                    addr, next, deadline, limit, path, headers, gap,
                )));
                continue;
            }
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
                let mut tickets = Tickets::new(next, deadline, limit, gap);
                while let Some(n) = tickets.next().await {
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
            server_cpu_ns: None,
            process_cpu_ns: None,
        }
    });
    // Connections closed before the reading: the server's last work on
    // them is counted too.
    drop(rt);
    std::thread::sleep(Duration::from_millis(20));
    outcome.server_cpu_ns = cpu_before
        .zip(server_cpu_ns("srv"))
        .map(|(before, after)| after.saturating_sub(before));
    outcome.process_cpu_ns = process_before
        .zip(process_cpu_ns())
        .map(|(before, after)| after.saturating_sub(before));
    outcome
}

/// Both servers (`[bare, layered]`) loaded at once for `secs`, `conns`
/// connections each, by the raw client: each server's requests served and
/// its threads' CPU time (`srv-b...`, `srv-l...`) over the same interval.
/// With the servers sharing one core (`PIN`), the scheduler splits the
/// core between them and whatever else slows the machine slows both
/// alike, so each one's CPU per request is measured under the same
/// conditions: the layer's cost without the drift between phases that
/// the alternating setup pairs away only in part.
fn load_together(
    addrs: [SocketAddr; 2],
    conns: usize,
    secs: u64,
    headers: Headers,
) -> [Outcome; 2] {
    let rt = client_runtime();
    let cpu = || [server_cpu_ns("srv-b"), server_cpu_ns("srv-l")];
    let before = cpu();
    let start = Instant::now();
    let served = rt.block_on(async move {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut tasks = Vec::new();
        for (side, addr) in addrs.into_iter().enumerate() {
            let next = Arc::new(AtomicU64::new(0));
            for _ in 0..conns {
                let connection = raw_connection(
                    addr,
                    Arc::clone(&next),
                    deadline,
                    u64::MAX,
                    "/v1/charges",
                    headers,
                    None,
                );
                tasks.push((side, tokio::spawn(connection)));
            }
        }
        let mut served: [(Vec<u32>, [u64; 6]); 2] = Default::default();
        for (side, task) in tasks {
            let (latencies, statuses) = task.await.unwrap();
            served[side].0.extend(latencies);
            for (total, part) in served[side].1.iter_mut().zip(statuses) {
                *total += part;
            }
        }
        served
    });
    let elapsed = start.elapsed();
    drop(rt);
    std::thread::sleep(Duration::from_millis(20));
    let after = cpu();
    let mut side = 0;
    served.map(|(mut latencies_us, statuses)| {
        latencies_us.sort_unstable();
        let server_cpu_ns = before[side]
            .zip(after[side])
            .map(|(before, after)| after.saturating_sub(before));
        side += 1;
        Outcome {
            requests: latencies_us.len() as u64,
            statuses,
            elapsed,
            latencies_us,
            server_cpu_ns,
            process_cpu_ns: None,
        }
    })
}

/// A connection's turns in a load phase: each a ticket from the counter
/// all connections share (the request's number), until `limit` tickets or
/// the deadline; paced `gap` apart when given.
struct Tickets {
    next: Arc<AtomicU64>,
    deadline: Instant,
    limit: u64,
    gap: Option<Duration>,
    due: tokio::time::Instant,
}

impl Tickets {
    fn new(next: Arc<AtomicU64>, deadline: Instant, limit: u64, gap: Option<Duration>) -> Self {
        Tickets {
            next,
            deadline,
            limit,
            gap,
            due: tokio::time::Instant::now(),
        }
    }

    async fn next(&mut self) -> Option<u64> {
        if let Some(gap) = self.gap {
            self.due += gap;
            tokio::time::sleep_until(self.due).await;
        }
        // Relaxed: a ticket counter, ordering nothing else.
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        (n < self.limit && Instant::now() < self.deadline).then_some(n)
    }
}

/// Whether the loaded phases use the raw client: `CLIENT=raw` in the
/// environment (else hyper's client).
fn raw_client() -> bool {
    std::env::var("CLIENT").is_ok_and(|c| c == "raw")
}

/// One kept-alive connection of the raw client (`CLIENT=raw`): each
/// request written as bytes, each response read until its head and its
/// `content-length` bytes have arrived, nothing else parsed. It costs the
/// load generator's core much less per request than hyper's client, so
/// that with `PIN` the server's core, not the generator's, is the one
/// that saturates (as with `wrk` on a core of its own).
async fn raw_connection(
    addr: SocketAddr,
    next: Arc<AtomicU64>,
    deadline: Instant,
    limit: u64,
    path: &'static str,
    headers: Headers,
    gap: Option<Duration>,
) -> (Vec<u32>, [u64; 6]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let mut latencies = Vec::new();
    let mut statuses = [0u64; 6];
    let mut request = Vec::with_capacity(256);
    let mut buf = vec![0u8; 16 * 1024];
    let mut tickets = Tickets::new(next, deadline, limit, gap);
    while let Some(n) = tickets.next().await {
        request.clear();
        request.extend_from_slice(b"GET ");
        request.extend_from_slice(path.as_bytes());
        request.extend_from_slice(b" HTTP/1.1\r\nhost: localhost\r\n");
        for (name, value) in headers(n) {
            request.extend_from_slice(name.as_bytes());
            request.extend_from_slice(b": ");
            request.extend_from_slice(value.as_bytes());
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"\r\n");
        let sent = Instant::now();
        stream.write_all(&request).await.unwrap();
        // One request in flight per connection: the buffer holds one
        // response at a time.
        let mut filled = 0;
        let status = loop {
            assert!(
                filled < buf.len(),
                "a response head over {} bytes",
                buf.len()
            );
            let read = stream.read(&mut buf[filled..]).await.unwrap();
            assert!(read > 0, "the server closed the connection");
            filled += read;
            if let Some((status, total)) = response_length(&buf[..filled]) {
                if filled >= total {
                    assert_eq!(filled, total, "one response in flight, no more bytes");
                    break status;
                }
                assert!(total <= buf.len(), "a response larger than the buffer");
            }
        };
        latencies.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
        statuses[usize::from(status / 100).min(5)] += 1;
    }
    (latencies, statuses)
}

/// For a buffer that starts with an HTTP/1.1 response: its status and
/// its whole length (head and `content-length` body) once the head has
/// arrived, else `None`.
fn response_length(buf: &[u8]) -> Option<(u16, usize)> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..head_end]).expect("an ASCII response head");
    let status = head
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let mut body = None;
    for line in head.split("\r\n").skip(1) {
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                body = Some(value.trim().parse().expect("a content-length"));
            }
            assert!(
                !name.eq_ignore_ascii_case("transfer-encoding"),
                "the raw client reads content-length bodies only"
            );
        }
    }
    // Without a length only a response that has no body can be framed.
    let body = body.unwrap_or_else(|| {
        assert!(
            status < 200 || status == 204 || status == 304,
            "a {status} response without content-length: the raw client cannot frame it"
        );
        0
    });
    Some((status, head_end + body))
}

/// `count` requests to each of `addrs` on one connection each, one at a
/// time, alternating (request `n` to each server carries `headers(n)`):
/// each server's latency without queueing, and its threads' CPU time
/// (`srv-b...` for the first, `srv-l...` for the second).
fn unloaded_pair(addrs: [SocketAddr; 2], count: u64, headers: Headers) -> [Outcome; 2] {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let prefixes = ["srv-b", "srv-l"];
    let before = prefixes.map(server_cpu_ns);
    let deadline = Instant::now() + Duration::from_secs(120);
    let (latencies, statuses, elapsed) = rt.block_on(async move {
        let mut senders = Vec::new();
        for addr in addrs {
            let stream = TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .unwrap();
            tokio::spawn(conn);
            senders.push(sender);
        }
        let mut latencies = [Vec::new(), Vec::new()];
        let mut statuses = [[0u64; 6]; 2];
        let mut elapsed = [Duration::ZERO; 2];
        for n in 0..count {
            if Instant::now() >= deadline {
                break;
            }
            for (i, sender) in senders.iter_mut().enumerate() {
                let mut request = Request::get("/v1/charges").header("host", "localhost");
                for (name, value) in headers(n) {
                    request = request.header(name, value);
                }
                let request = request.body(Empty::<Bytes>::new()).unwrap();
                let sent = Instant::now();
                sender.ready().await.unwrap();
                let response = sender.send_request(request).await.unwrap();
                let status = response.status().as_u16();
                response.into_body().collect().await.unwrap();
                let took = sent.elapsed();
                elapsed[i] += took;
                latencies[i].push(took.as_micros().min(u32::MAX as u128) as u32);
                statuses[i][usize::from(status / 100).min(5)] += 1;
            }
        }
        (latencies, statuses, elapsed)
    });
    drop(rt);
    std::thread::sleep(Duration::from_millis(20));
    let after = prefixes.map(server_cpu_ns);
    let mut outcomes = latencies.into_iter().zip(statuses).zip(elapsed).map(
        |((mut latencies_us, statuses), elapsed)| {
            latencies_us.sort_unstable();
            Outcome {
                requests: latencies_us.len() as u64,
                statuses,
                elapsed,
                latencies_us,
                server_cpu_ns: None,
                // Both servers share the unloaded run: no split.
                process_cpu_ns: None,
            }
        },
    );
    let mut next = || outcomes.next().unwrap();
    let mut pair = [next(), next()];
    for ((outcome, before), after) in pair.iter_mut().zip(before).zip(after) {
        outcome.server_cpu_ns = before
            .zip(after)
            .map(|(before, after)| after.saturating_sub(before));
    }
    pair
}

type Headers = fn(u64) -> Vec<(&'static str, String)>;

/// One round's (requests/s, server CPU µs/request) for each of the four
/// saturation phases.
type Round = [(f64, f64); 4];

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at]
}

const HEADER: &str = "| phase | requests | requests/s | p50 µs | p99 µs | p99.9 µs | 2xx / 429 | server CPU µs/request | process CPU µs/request |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|";

fn report(name: &str, o: &Outcome) -> f64 {
    let rps = o.rps();
    println!(
        "| {name} | {} | {:.0} | {} | {} | {} | {} / {} | {:.2} | {:.2} |",
        o.requests,
        rps,
        percentile(&o.latencies_us, 0.50),
        percentile(&o.latencies_us, 0.99),
        percentile(&o.latencies_us, 0.999),
        o.statuses[2],
        o.statuses[4],
        o.cpu_us(),
        o.process_cpu_us(),
    );
    rps
}

/// Several rounds of one phase, pooled: requests, time, latencies and
/// server CPU added up.
#[derive(Default)]
struct Pooled {
    requests: u64,
    cpu_ns: u64,
    latencies_us: Vec<u32>,
}

impl Pooled {
    fn add(&mut self, o: &Outcome) {
        self.requests += o.requests;
        self.cpu_ns += o.server_cpu_ns.unwrap_or(0);
        self.latencies_us.extend_from_slice(&o.latencies_us);
    }

    fn cpu_us(&self) -> f64 {
        self.cpu_ns as f64 / 1e3 / self.requests.max(1) as f64
    }

    fn p(&mut self, p: f64) -> u32 {
        self.latencies_us.sort_unstable();
        percentile(&self.latencies_us, p)
    }
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

/// The layer's builder for a header choice: the layer's default, fields
/// on 429s only (`default`, or `denials`); every field on every response
/// (`all`); the IETF pair only (`ietf`) or `x-ratelimit-*` only (`x`) on
/// every response.
fn builder(headers: &str) -> rategate::http::RateLimitLayerBuilder {
    let builder = rategate::http::RateLimitLayer::builder();
    match headers {
        "default" | "denials" => builder,
        "all" => builder.headers_on_allowed(true),
        "ietf" => builder.headers_on_allowed(true).x_ratelimit_headers(false),
        "x" => builder.headers_on_allowed(true).ietf_headers(false),
        other => panic!("header choice {other:?}: default, denials, all, ietf or x"),
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
    // With `POLLUTE_KB=N` in the environment, N KiB are written between
    // calls and only the calls are timed (each on its own, `POLLUTE_KB=0`
    // too, so that rows compare): the layer with the caches a server's
    // sockets and parsing leave it, rather than kept warm by a tight loop.
    let pollute_kb: Option<usize> = std::env::var("POLLUTE_KB")
        .ok()
        .and_then(|v| v.parse().ok());
    let mut junk = pollute_kb.map(|kb| vec![0u8; kb * 1024]);
    let mut time = |f: &mut dyn FnMut()| {
        let Some(junk) = &mut junk else {
            let start = Instant::now();
            for _ in 0..calls {
                f();
            }
            return start.elapsed().as_nanos() as f64 / f64::from(calls);
        };
        let mut total = Duration::ZERO;
        for _ in 0..calls {
            for i in (0..junk.len()).step_by(64) {
                junk[i] = junk[i].wrapping_add(1);
            }
            let start = Instant::now();
            f();
            total += start.elapsed();
        }
        std::hint::black_box(&*junk);
        total.as_nanos() as f64 / f64::from(calls)
    };
    let mut bare = inner;
    let mut limited = limiters.layer_from(builder(headers)).layer(inner);
    // The same through axum's `Router` (the example's routes), as a
    // server runs them: bare, with a layer added by `Router::layer`, and
    // with the example's layer wrapped once around the whole `Router`.
    type Boxed = tower::util::BoxService<
        Request<axum::body::Body>,
        axum::response::Response,
        std::convert::Infallible,
    >;
    let mut router_phase = |name: &str, mut app: Boxed| {
        if only.is_none_or(|o| o != name) {
            return;
        }
        let ns = time(&mut || {
            rt.block_on(async {
                let mut request = Request::get("/v1/charges")
                    .body(axum::body::Body::empty())
                    .unwrap();
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                let _ = app.ready().await.unwrap().call(request).await;
            })
        });
        println!("  {name:<36} {ns:>8.0} ns/request");
    };
    router_phase("router-bare", Boxed::new(api::app(None)));
    router_phase(
        "router-layer",
        Boxed::new(api::app(Some(limiters.layer_from(builder(headers))))),
    );
    router_phase(
        "router-per-ip",
        Boxed::new(api::app(Some(generous_per_ip()))),
    );
    router_phase(
        "router-tower-governor",
        Boxed::new(api::app(None).layer(tower_governor_layer())),
    );
    router_phase(
        "router-outer",
        Boxed::new(api::limited_app(limiters.layer_from(builder(headers)))),
    );
    // The two per-IP layers placed as `outer` places the example's: once
    // around the whole `Router`.
    router_phase(
        "router-outer-per-ip",
        Boxed::new(
            tower::ServiceExt::<Request<axum::body::Body>>::map_response(
                generous_per_ip().same_body().layer(api::app(None)),
                |r| r.map(axum::body::Body::new),
            ),
        ),
    );
    router_phase(
        "router-outer-tower-governor",
        Boxed::new(
            tower::ServiceExt::<Request<axum::body::Body>>::map_response(
                tower_governor_layer().layer(api::app(None)),
                |r| r.map(axum::body::Body::new),
            ),
        ),
    );
    // `only` picks one phase (for a profiler); the rest report 0.
    let mut phase = |name: &str, layer: bool, signed_in: bool| {
        if only.is_some_and(|o| o != name) {
            return 0.0;
        }
        // One future per service: a future shared by both would be as
        // large as the larger, and the bare phase would pay for the
        // layer's (copying and dropping its state) too.
        time(&mut || {
            if layer {
                rt.block_on(async {
                    let request = make(signed_in);
                    let _ = limited.ready().await.unwrap().call(request).await;
                })
            } else {
                rt.block_on(async {
                    let request = make(signed_in);
                    let _ = bare.ready().await.unwrap().call(request).await;
                })
            }
        })
    };
    let bare_ns = phase("bare", false, false);
    let one_ns = phase("one", true, false);
    let bare_token_ns = phase("bare-token", false, true);
    let two_ns = phase("two", true, true);
    println!();
    println!(
        "In-process, {calls} calls each (request built, decided, fields written as the header choice says){}:",
        pollute_kb.map_or(String::new(), |kb| format!(
            ", {kb} KiB written between calls"
        ))
    );
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

/// `TOGETHER=1`: both servers loaded at once ([`load_together`]), the
/// anonymous requests then the signed-in ones, `rounds` times; each
/// round's layered CPU per request against the bare one's, and the median
/// over the rounds, as the throughput a saturated server keeps (bare CPU
/// per request over layered: a server on a saturated core serves the
/// inverse of its CPU per request). `TOGETHER_KIND=0` (anonymous) or `1`
/// (signed-in) in the environment runs that kind of request only: under a
/// profiler (`valgrind --tool=callgrind --cache-sim=yes
/// --separate-threads=yes`), each server thread's instructions and cache
/// misses per request for one kind.
fn together(bare: SocketAddr, limited: SocketAddr, conns: usize, secs: u64, rounds: u32) {
    let conns = (conns / 2).max(1);
    println!(
        "Both servers at once, {conns} connections each, {secs} s per round; the layered \
         server's throughput at saturation against the bare one's (bare CPU per request \
         over layered, minus 1):"
    );
    let mut ratios: [Vec<f64>; 2] = Default::default();
    for round in 1..=rounds {
        let mut line = format!("round {round}:");
        for (kind, (label, headers)) in [("one rule", no_headers as Headers), ("two rules", token)]
            .into_iter()
            .enumerate()
        {
            if std::env::var("TOGETHER_KIND").is_ok_and(|k| k != kind.to_string()) {
                continue;
            }
            let [b, l] = load_together([bare, limited], conns, secs, headers);
            let ratio = (b.cpu_us() / l.cpu_us() - 1.0) * 100.0;
            ratios[kind].push(ratio);
            line += &format!(
                " {label} {:.0}/{:.0} requests/s ({}/{} requests), {:.2}/{:.2} µs CPU/request \
                 ({ratio:+.1}%);",
                b.rps(),
                l.rps(),
                b.requests,
                l.requests,
                b.cpu_us(),
                l.cpu_us()
            );
        }
        println!("{line}");
    }
    let [one, two] = ratios;
    println!(
        "Together, median over rounds: throughput one rule {:+.1}%, two rules {:+.1}%",
        median(one),
        median(two)
    );
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().is_some_and(|a| a == "in-process") {
        // Only the in-process timing (for a profiler such as callgrind).
        let calls = args.nth(1).and_then(|a| a.parse().ok()).unwrap_or(200_000);
        let only = args.next();
        let headers = args.next().unwrap_or_else(|| "default".to_string());
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
    let headers = args.next().unwrap_or_else(|| "default".to_string());
    let unloaded: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let control = args.next().unwrap_or_else(|| "layer".to_string());
    // Fail on a bad choice before any phase runs.
    let _ = builder(&headers);
    assert!(
        [
            "layer",
            "outer",
            "bare",
            "identity",
            "outer-identity",
            "idle",
            "per-ip",
            "outer-per-ip",
            "tower-governor",
            "outer-tower-governor",
            "spin",
            "shared"
        ]
        .contains(&control.as_str()),
        "control {control:?}: layer, outer, bare, identity, outer-identity, idle, per-ip, \
         outer-per-ip, tower-governor, outer-tower-governor, spin or shared"
    );
    println!(
        "{secs} s per phase, {conns} connections, {rounds} rounds, loopback, header fields: {headers}, \
         layered server: {control}, {} worker thread(s) per server, {} client{}\n",
        server_workers(),
        if raw_client() { "raw" } else { "hyper" },
        std::env::var("PIN").map_or(String::new(), |p| format!(", PIN={p}")),
    );
    // `outer` runs the real layer, only placed differently.
    let real_layer = matches!(control.as_str(), "layer" | "outer");
    if !real_layer {
        println!(
            "(Control {control}: the rows named \"layer\" are that server's; the million-key \
             phase is skipped; the in-process timing at the end is the real layer's.)\n"
        );
        if control == "spin" {
            println!("(spin: {} ns per request)\n", spin_ns());
        }
    }
    println!("{HEADER}");

    // `api::app` has made each handler its route once (`with_state`), so
    // `serve`, which takes any service through `axum::ServiceExt`, does
    // not build each route again per request.
    let bare = serve(api::app(None), "srv-b");
    let limiters = Limiters::new(&generous());
    // The "layered" server: the layer, or a control in its place.
    let layered = |router: Router| serve(router, "srv-l");
    let limited = match control.as_str() {
        "layer" => layered(api::app(Some(limiters.layer_from(builder(&headers))))),
        "outer" => serve(
            api::limited_app(limiters.layer_from(builder(&headers))),
            "srv-l",
        ),
        "bare" => layered(api::app(None)),
        "identity" => layered(api::app(None).layer(tower::layer::util::Identity::new())),
        "outer-identity" => outer(tower::layer::util::Identity::new()),
        "idle" => layered(api::app(Some(idle_layer(&limiters)))),
        "per-ip" => layered(api::app(Some(generous_per_ip()))),
        "outer-per-ip" => outer(generous_per_ip().same_body()),
        "tower-governor" => layered(api::app(None).layer(tower_governor_layer())),
        "outer-tower-governor" => outer(tower_governor_layer()),
        "spin" => layered(api::app(None).layer(spin_layer(spin_ns()))),
        "shared" => layered(api::app(None).layer(shared_layer())),
        other => unreachable!("checked above: {other}"),
    };
    // Phases alternate, ROUNDS times, so that a machine whose load drifts
    // (other work, thermal limits) weighs on every phase alike.
    // Without the layer, the signed-in phase's requests (an
    // `authorization` header, built per request by the client) cost more
    // than bare ones: each layered phase is compared with the same
    // requests served without the layer.
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
    if std::env::var("TOGETHER").is_ok_and(|v| v == "1") {
        together(bare, limited, conns, secs, rounds);
        return;
    }
    let mut totals = [0.0f64; 4];
    let mut saturated: [Pooled; 4] = Default::default();
    // Each round's (requests/s, server CPU µs/request) per phase: a round's
    // layered phase against the bare one next to it, under the same load.
    let mut per_round: Vec<Round> = Vec::new();
    for round in 1..=rounds {
        let mut this = [(0.0, 0.0); 4];
        // Odd rounds run each pair bare first, even rounds layered first
        // (A B, then B A): whatever a phase leaves behind for the next one
        // (sockets closing, caches, the scheduler's state) falls on both
        // sides alike.
        let order: [usize; 4] = if round % 2 == 1 {
            [0, 1, 2, 3]
        } else {
            [1, 0, 3, 2]
        };
        for i in order {
            let (name, addr, headers) = phases[i];
            let outcome = load(addr, conns, secs, u64::MAX, "/v1/charges", headers, None);
            totals[i] += report(&format!("{name} (round {round})"), &outcome);
            saturated[i].add(&outcome);
            this[i] = (outcome.rps(), outcome.cpu_us());
        }
        per_round.push(this);
    }
    let [base, one, base_token, two] = totals;
    for (label, prefix) in [("no layer", "srv-b"), ("layered", "srv-l")] {
        if let Some((voluntary, involuntary)) = context_switches(prefix) {
            println!(
                "Context switches of the {label} server's threads so far: {voluntary} voluntary \
                 (waiting for work), {involuntary} involuntary (preempted)"
            );
        }
    }

    // `SATURATION_ONLY`: the saturation phases and their summary, nothing
    // else (for `scripts/http-load.sh`'s repeated runs).
    let saturation_only = std::env::var("SATURATION_ONLY").is_ok_and(|v| v == "1");
    // Under a control no limiter holds keys: nothing to show.
    let million = (real_layer && !saturation_only).then(|| {
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
        // Counted now: the phases after it let sweeps drop the idle keys.
        (million, limiters.anonymous_hourly.len())
    });

    // Below saturation: at half the bare server's rate, what the layer adds
    // to each request's latency without the queueing that saturation adds.
    if !saturation_only {
        let rate = (base / f64::from(rounds) / 2.0).round();
        println!();
        println!("At a fixed {rate:.0} requests/s (half the bare saturation rate):");
        println!();
        println!("{HEADER}");
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
    }

    let mut quiet: [Pooled; 4] = Default::default();
    // Unloaded: one connection to each server, closed loop, a bounded
    // count; no queue. The two servers take turns, request by request, so
    // that whatever else the machine runs weighs on both alike.
    if !saturation_only {
        println!();
        println!(
            "Unloaded: one connection to each server, {unloaded} requests each, \
             one at a time, alternating between the servers:"
        );
        println!();
        println!("{HEADER}");
        for round in 1..=rounds {
            for (pair, (names, headers)) in quiet.chunks_mut(2).zip([
                (
                    ["no layer", "layer, anonymous by IP, one rule"],
                    no_headers as Headers,
                ),
                (
                    [
                        "no layer, signed-in requests",
                        "layer, signed-in by token, hourly + read all or nothing",
                    ],
                    token,
                ),
            ]) {
                let outcomes = unloaded_pair([bare, limited], unloaded, headers);
                for ((pooled, name), outcome) in pair.iter_mut().zip(names).zip(&outcomes) {
                    report(&format!("{name}, unloaded (round {round})"), outcome);
                    pooled.add(outcome);
                }
            }
        }
    }

    let pct = |a: f64, b: f64| (a / b - 1.0) * 100.0;
    let [s_base, s_one, s_base_token, s_two] = &saturated;
    println!();
    println!(
        "Throughput against no layer, same requests (all rounds): one rule {:+.1}%, \
         two rules {:+.1}% (against bare requests: {:+.1}%)",
        pct(one, base),
        pct(two, base_token),
        pct(two, base)
    );
    println!(
        "Server CPU per request at saturation (all rounds): no layer {:.2} µs, one rule {:.2} µs \
         ({:+.2} µs, {:+.1}%); signed-in no layer {:.2} µs, two rules {:.2} µs ({:+.2} µs, {:+.1}%)",
        s_base.cpu_us(),
        s_one.cpu_us(),
        s_one.cpu_us() - s_base.cpu_us(),
        pct(s_one.cpu_us(), s_base.cpu_us()),
        s_base_token.cpu_us(),
        s_two.cpu_us(),
        s_two.cpu_us() - s_base_token.cpu_us(),
        pct(s_two.cpu_us(), s_base_token.cpu_us()),
    );
    let paired = |f: &dyn Fn(&Round) -> f64| median(per_round.iter().map(f).collect());
    println!(
        "Median over rounds of each round's paired ratio: throughput one rule {:+.1}%, \
         two rules {:+.1}%; server CPU per request one rule {:+.1}% ({:+.2} µs), \
         two rules {:+.1}% ({:+.2} µs)",
        paired(&|r| pct(r[1].0, r[0].0)),
        paired(&|r| pct(r[3].0, r[2].0)),
        paired(&|r| pct(r[1].1, r[0].1)),
        paired(&|r| r[1].1 - r[0].1),
        paired(&|r| pct(r[3].1, r[2].1)),
        paired(&|r| r[3].1 - r[2].1),
    );
    if saturation_only {
        return;
    }
    let [q_base, q_one, q_base_token, q_two] = &mut quiet;
    for (label, bare, layered) in [
        ("one rule", q_base, q_one),
        ("two rules", q_base_token, q_two),
    ] {
        println!(
            "Unloaded, {label} against the same requests bare (all rounds pooled): \
             p50 {} -> {} µs ({:+}), p99 {} -> {} µs ({:+}), p99.9 {} -> {} µs ({:+}); \
             server CPU {:.2} -> {:.2} µs/request ({:+.2})",
            bare.p(0.5),
            layered.p(0.5),
            i64::from(layered.p(0.5)) - i64::from(bare.p(0.5)),
            bare.p(0.99),
            layered.p(0.99),
            i64::from(layered.p(0.99)) - i64::from(bare.p(0.99)),
            bare.p(0.999),
            layered.p(0.999),
            i64::from(layered.p(0.999)) - i64::from(bare.p(0.999)),
            bare.cpu_us(),
            layered.cpu_us(),
            layered.cpu_us() - bare.cpu_us(),
        );
    }
    if let Some((million, held)) = million {
        let cap = generous().max_keys;
        println!(
            "Keys held by the anonymous limiter right after {} distinct IPs: {held} (cap {cap}), \
             {} at the end; new keys past the cap shared one state {} times",
            million.requests,
            limiters.anonymous_hourly.len(),
            limiters.anonymous_hourly.overflow_count()
        );
        assert!(held <= cap, "the key cap was exceeded");
    }
    in_process(&limiters, 200_000, None, &headers);
}
