//! A multi-node simulation against a real Redis: how much each Redis mode
//! lets through when several app servers share one limit, what a decision
//! costs, and how much Redis traffic it takes.
//!
//! ```text
//! cargo run --release --features redis --example multi_node
//! ```
//!
//! The example starts `redis-server` on a free loopback port (and kills it
//! at the end), then, for each mode, re-executes itself as `NODES` separate
//! processes (`--node ...`) that share one key's limit of `LIMIT` requests a
//! second. Each node is offered `3 x LIMIT / NODES` requests a second, paced,
//! for `SECS` seconds, starting together on a second boundary (so fixed
//! windows line up with the run). Modes:
//!
//! * centralized: [`RedisLimiter`], one Lua call per request (local cache of
//!   denials off: Redis decides every request);
//! * synced every 250 ms and every 100 ms: [`SyncedLimiter`] (fixed window,
//!   and token bucket for comparison), with `local_share(1 / NODES)` so
//!   that a node holds a key it has not heard of yet to its share (an
//!   interval above half the period, such as 1 s here, is refused at build:
//!   the example shows the error);
//! * leased: [`LeasedLimiter`] (fixed-window budgets, slices renewed every
//!   100 ms).
//!
//! Reported per mode: admitted against what one exact limiter allows (the
//! overshoot, over the run and in the worst window: a token bucket of
//! capacity `LIMIT` alone admits up to `2 x LIMIT` in one second), the
//! bounds the module docs derive, over the run and per window (with the
//! sync round trip measured by the nodes), the
//! latency of a decision as the caller sees it (median, p99), and Redis
//! traffic: script calls per second and all commands per second (from
//! `INFO commandstats`, commands run inside scripts included) against
//! requests per second.
//!
//! Loopback only; about 70 s in all.

#[cfg(feature = "redis")]
mod run {
    use rategate::UnixClock;
    use rategate::redis::{LeasedLimiter, RedisLimiter, SyncAlgorithm, SyncedLimiter};
    use rategate::{Clock, Decision, FixedWindow, Quota, TokenBucket};
    use std::collections::BTreeMap;
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    /// Requests a second the shared key allows.
    const LIMIT: u32 = 1_000;
    /// App servers (processes).
    const NODES: usize = 4;
    /// Seconds of offered load per mode.
    const SECS: u64 = 10;
    /// Offered load, as a multiple of the limit.
    const OFFERED: u32 = 3;
    const KEY: &str = "tenant-42";

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Mode {
        Centralized,
        SyncedWindow(u64),
        SyncedBucket(u64),
        Leased,
    }

    const MODES: [Mode; 6] = [
        Mode::Centralized,
        Mode::SyncedWindow(250),
        Mode::SyncedWindow(100),
        Mode::SyncedBucket(250),
        Mode::SyncedBucket(100),
        Mode::Leased,
    ];

    impl Mode {
        fn name(self) -> String {
            match self {
                Mode::Centralized => "centralized (Redis per request)".into(),
                Mode::SyncedWindow(ms) => format!("synced, fixed window, {}", every(ms)),
                Mode::SyncedBucket(ms) => format!("synced, token bucket, {}", every(ms)),
                Mode::Leased => "leased (fixed-window budgets)".into(),
            }
        }

        fn arg(self) -> String {
            match self {
                Mode::Centralized => "central".into(),
                Mode::SyncedWindow(ms) => format!("window-{ms}"),
                Mode::SyncedBucket(ms) => format!("bucket-{ms}"),
                Mode::Leased => "leased".into(),
            }
        }

        fn parse(arg: &str) -> Mode {
            let ms = |s: &str| s.parse::<u64>().expect("interval in ms");
            match arg {
                "central" => Mode::Centralized,
                "leased" => Mode::Leased,
                _ => match arg.split_once('-') {
                    Some(("window", n)) => Mode::SyncedWindow(ms(n)),
                    Some(("bucket", n)) => Mode::SyncedBucket(ms(n)),
                    _ => panic!("unknown mode {arg}"),
                },
            }
        }
    }

    fn every(ms: u64) -> String {
        if ms % 1_000 == 0 {
            format!("every {} s", ms / 1_000)
        } else {
            format!("every {ms} ms")
        }
    }

    fn unix_ms() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_millis() as u64
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().collect();
        if args.get(1).map(String::as_str) == Some("--node") {
            node(&args[2..]);
        } else {
            parent();
        }
    }

    // ---------------------------------------------------------------- node

    /// What a node reports: admissions per window (Unix second), offered
    /// requests, decision latencies (ns), the longest sync round trip seen.
    struct Report {
        admitted: BTreeMap<u64, u64>,
        offered: u64,
        latencies: Vec<u32>,
        sync_max_ns: u64,
    }

    fn node(args: &[String]) {
        let mode = Mode::parse(&args[0]);
        let index: usize = args[1].parse().unwrap();
        let port: u16 = args[2].parse().unwrap();
        let start_ms: u64 = args[3].parse().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let report = runtime.block_on(drive(mode, index, port, start_ms));
        let windows: Vec<String> = report
            .admitted
            .iter()
            .map(|(w, n)| format!("{w}:{n}"))
            .collect();
        let latencies: Vec<String> = report.latencies.iter().map(u32::to_string).collect();
        println!(
            "RESULT {} {} {} {} {}",
            report.offered,
            report.sync_max_ns,
            windows.join(","),
            latencies.join(","),
            index
        );
    }

    /// The limiter a node uses, behind one `decide` call.
    enum Limiter {
        Central(RedisLimiter<FixedWindow>),
        Window(SyncedLimiter<FixedWindow>),
        Bucket(SyncedLimiter<TokenBucket>),
        Leased(LeasedLimiter),
    }

    async fn synced<A: SyncAlgorithm>(
        url: &str,
        prefix: &str,
        ms: u64,
        wall: &UnixClock,
    ) -> SyncedLimiter<A> {
        SyncedLimiter::<A>::builder(Quota::per_second(LIMIT).unwrap())
            .url(url)
            .prefix(prefix)
            .clock(wall.clone())
            .interval(Duration::from_millis(ms))
            // A key this node has not heard of yet (and one whose Redis is
            // down) gets its share only: no node starts with the whole
            // quota.
            .local_share(1.0 / NODES as f64)
            .build()
            .await
            .expect("connect")
    }

    async fn drive(mode: Mode, index: usize, port: u16, start_ms: u64) -> Report {
        let url = format!("redis://127.0.0.1:{port}/");
        let prefix = mode.arg();
        let quota = Quota::per_second(LIMIT).unwrap();
        // The nodes' limiters and their own accounting read one clock.
        let wall = UnixClock::new();
        let limiter = match mode {
            Mode::Centralized => Limiter::Central(
                RedisLimiter::<FixedWindow>::builder(quota)
                    .url(&url)
                    .prefix(&prefix)
                    .local_cache(false)
                    .build()
                    .await
                    .expect("connect"),
            ),
            Mode::SyncedWindow(ms) => Limiter::Window(synced(&url, &prefix, ms, &wall).await),
            Mode::SyncedBucket(ms) => Limiter::Bucket(synced(&url, &prefix, ms, &wall).await),
            Mode::Leased => Limiter::Leased(
                LeasedLimiter::builder(quota)
                    .clock(wall.clone())
                    .url(&url)
                    .prefix(&prefix)
                    .build()
                    .await
                    .expect("connect"),
            ),
        };
        // Start together, on the second boundary the parent chose, and stop
        // on the one SECS later: the run covers SECS whole windows.
        let (first, last) = (start_ms * 1_000_000, (start_ms + SECS * 1_000) * 1_000_000);
        let start =
            tokio::time::Instant::now() + Duration::from_nanos(first.saturating_sub(wall.now()));
        let end = start + Duration::from_secs(SECS);
        let rate = f64::from(OFFERED * LIMIT) / NODES as f64;
        let gap = Duration::from_secs_f64(1.0 / rate);
        // Stagger the nodes' request trains a little.
        let mut next = start + gap.mul_f64(index as f64 / NODES as f64);
        let mut report = Report {
            admitted: BTreeMap::new(),
            offered: 0,
            latencies: Vec::with_capacity((rate * SECS as f64) as usize + 16),
            sync_max_ns: 0,
        };
        let mut next_sample = start;
        while next < end {
            if tokio::time::Instant::now() < next {
                tokio::time::sleep_until(next).await;
            }
            next += gap;
            let at = wall.now();
            if at < first {
                continue;
            }
            if at >= last {
                break;
            }
            report.offered += 1;
            let began = Instant::now();
            let decision: Decision = match &limiter {
                Limiter::Central(l) => l.check(KEY).await.map(|d| d.decision()).expect("cost 1"),
                Limiter::Window(l) => l.check(KEY),
                Limiter::Bucket(l) => l.check(KEY),
                Limiter::Leased(l) => l.check(KEY),
            };
            let took = began.elapsed().as_nanos();
            report
                .latencies
                .push(u32::try_from(took).unwrap_or(u32::MAX));
            if decision.is_allowed() {
                const SECOND: u64 = 1_000_000_000;
                let now = wall.now();
                let window = if matches!(mode, Mode::SyncedBucket(_)) {
                    now / SECOND
                } else {
                    // The window the limiter counted it in: an admitted
                    // fixed-window decision resets at that window's end
                    // (on the limiter's clock, Redis's for the centralized
                    // mode; rounding absorbs the small difference).
                    (now + decision.reset_after_nanos() + SECOND / 2) / SECOND - 1
                };
                *report.admitted.entry(window).or_default() += 1;
            }
            if tokio::time::Instant::now() >= next_sample {
                next_sample += Duration::from_millis(20);
                let latency = match &limiter {
                    Limiter::Window(l) => l.stats().last_sync_latency,
                    Limiter::Bucket(l) => l.stats().last_sync_latency,
                    Limiter::Leased(l) => l.stats().last_latency,
                    Limiter::Central(_) => Duration::ZERO,
                };
                report.sync_max_ns = report.sync_max_ns.max(latency.as_nanos() as u64);
            }
        }
        match &limiter {
            Limiter::Window(l) => l.shutdown().await.expect("flush"),
            Limiter::Bucket(l) => l.shutdown().await.expect("flush"),
            Limiter::Leased(l) => l.shutdown().await.expect("return"),
            Limiter::Central(_) => {}
        }
        report
    }

    // -------------------------------------------------------------- parent

    /// `redis-server` on a free loopback port, killed on drop.
    struct Server {
        child: Child,
        port: u16,
        dir: std::path::PathBuf,
    }

    impl Server {
        fn start() -> Server {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let dir = std::env::temp_dir().join(format!("rategate-multi-node-{port}"));
            std::fs::create_dir_all(&dir).unwrap();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .args(["--dir", dir.to_str().unwrap()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed");
            Server { child, port, dir }
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// `INFO commandstats` as (script calls, all commands but INFO).
    async fn command_counts(con: &mut redis::aio::MultiplexedConnection) -> (u64, u64) {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(con)
            .await
            .expect("INFO");
        let (mut scripts, mut all) = (0, 0);
        for line in info.lines() {
            let Some((name, rest)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let calls: u64 = rest
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            if name == "info" {
                continue;
            }
            all += calls;
            if matches!(name, "evalsha" | "eval" | "evalsha_ro" | "eval_ro") {
                scripts += calls;
            }
        }
        (scripts, all)
    }

    struct Row {
        mode: Mode,
        admitted: u64,
        allowed: u64,
        worst_window: u64,
        /// Single-limiter allowance in one window, and the derived bound.
        window_allowed: u64,
        window_bound: u64,
        bound: u64,
        p50: u32,
        p99: u32,
        calls_per_s: f64,
        cmds_per_s: f64,
        requests_per_s: f64,
        sync_ms: f64,
    }

    fn parent() {
        let server = Server::start();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut con = runtime.block_on(async {
            let client =
                redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Ok(con) = client.get_multiplexed_async_connection().await {
                    return con;
                }
                assert!(Instant::now() < deadline, "redis-server did not start");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        // An interval as long as the window: no bound means anything, and
        // the builder says so.
        let refused = runtime.block_on(async {
            SyncedLimiter::<FixedWindow>::builder(Quota::per_second(LIMIT).unwrap())
                .url(&format!("redis://127.0.0.1:{}/", server.port))
                .interval(Duration::from_secs(1))
                .build()
                .await
                .err()
                .map(|e| e.to_string())
        });
        let exe = std::env::current_exe().unwrap();
        let began = Instant::now();
        let mut rows = Vec::new();
        for mode in MODES {
            eprintln!("running: {} ...", mode.name());
            let (calls0, cmds0) = runtime.block_on(command_counts(&mut con));
            // Two seconds to connect, then the next whole second.
            let start_ms = (unix_ms() / 1_000 + 2) * 1_000;
            let children: Vec<Child> = (0..NODES)
                .map(|i| {
                    Command::new(&exe)
                        .args(["--node", &mode.arg(), &i.to_string()])
                        .args([server.port.to_string(), start_ms.to_string()])
                        .stdout(Stdio::piped())
                        .spawn()
                        .expect("spawn a node")
                })
                .collect();
            let mut reports = Vec::new();
            for mut child in children {
                let out = child.stdout.take().unwrap();
                for line in BufReader::new(out).lines() {
                    let line = line.unwrap();
                    if let Some(rest) = line.strip_prefix("RESULT ") {
                        reports.push(parse_report(rest));
                    }
                }
                assert!(child.wait().unwrap().success(), "a node failed");
            }
            let (calls1, cmds1) = runtime.block_on(command_counts(&mut con));
            rows.push(summarize(mode, &reports, calls1 - calls0, cmds1 - cmds0));
        }
        let mut table = String::new();
        table.push_str(&format!(
            "{NODES} nodes (processes), one key limited to {LIMIT}/s, offered {}/s ({OFFERED}x) for {SECS} s per mode; loopback Redis 7.\n\n",
            OFFERED * LIMIT
        ));
        table.push_str("| mode | admitted / allowed | overshoot | bound (derived) | worst 1 s window / one limiter's | worst-window bound | decision p50 | decision p99 | Redis script calls/s | Redis commands/s | requests/s |\n");
        table.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
        for r in &rows {
            let over = |n: u64, of: u64| 100.0 * (n as f64 - of as f64) / of as f64;
            let bound = if r.mode == Mode::Centralized || r.mode == Mode::Leased {
                format!("{} (+0%)", r.allowed)
            } else {
                format!(
                    "{} ({:+.0}%; δ = {:.1} ms)",
                    r.bound,
                    over(r.bound, r.allowed),
                    r.sync_ms
                )
            };
            table.push_str(&format!(
                "| {} | {} / {} | {:+.1}% | {} | {} / {} ({:+.1}%) | {} ({:+.0}%) | {} | {} | {:.1} | {:.1} | {:.0} |\n",
                r.mode.name(),
                r.admitted,
                r.allowed,
                over(r.admitted, r.allowed),
                bound,
                r.worst_window,
                r.window_allowed,
                over(r.worst_window, r.window_allowed),
                r.window_bound,
                over(r.window_bound, r.window_allowed),
                nanos(r.p50),
                nanos(r.p99),
                r.calls_per_s,
                r.cmds_per_s,
                r.requests_per_s,
            ));
        }
        println!("{table}");
        match refused {
            Some(error) => {
                println!("synced, interval 1 s (the whole window): refused at build: {error}")
            }
            None => println!("synced, interval 1 s: NOT refused"),
        }
        println!("total run time {:.0} s", began.elapsed().as_secs_f64());
        for r in &rows {
            if r.mode == Mode::Leased || r.mode == Mode::Centralized {
                assert!(
                    r.worst_window <= u64::from(LIMIT),
                    "{} exceeded the limit",
                    r.mode.name()
                );
            } else {
                assert!(r.admitted <= r.bound, "{} beyond its bound", r.mode.name());
                assert!(
                    r.worst_window <= r.window_bound,
                    "{} beyond its worst-window bound",
                    r.mode.name()
                );
            }
        }
        drop(server);
    }

    fn nanos(ns: u32) -> String {
        if ns >= 1_000_000 {
            format!("{:.2} ms", f64::from(ns) / 1e6)
        } else if ns >= 1_000 {
            format!("{:.1} µs", f64::from(ns) / 1e3)
        } else {
            format!("{ns} ns")
        }
    }

    fn parse_report(line: &str) -> Report {
        let mut fields = line.split(' ');
        let mut next = || fields.next().unwrap_or("");
        let offered = next().parse().unwrap();
        let sync_max_ns = next().parse().unwrap();
        let admitted = next()
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|wc| {
                let (w, c) = wc.split_once(':').unwrap();
                (w.parse().unwrap(), c.parse().unwrap())
            })
            .collect();
        let latencies = next()
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|n| n.parse().unwrap())
            .collect();
        Report {
            admitted,
            offered,
            latencies,
            sync_max_ns,
        }
    }

    fn summarize(mode: Mode, reports: &[Report], calls: u64, cmds: u64) -> Row {
        let mut windows: BTreeMap<u64, u64> = BTreeMap::new();
        let mut latencies = Vec::new();
        let (mut offered, mut sync_max) = (0, 0);
        for r in reports {
            for (w, n) in &r.admitted {
                *windows.entry(*w).or_default() += n;
            }
            latencies.extend_from_slice(&r.latencies);
            offered += r.offered;
            sync_max = sync_max.max(r.sync_max_ns);
        }
        latencies.sort_unstable();
        let pick = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
        let admitted: u64 = windows.values().sum();
        let limit = u64::from(LIMIT);
        let secs = SECS as f64;
        // Per node offered rate, and the span 2 (I + δ) of the bound.
        let lambda = f64::from(OFFERED * LIMIT) / NODES as f64;
        let delta = sync_max as f64 / 1e9;
        let others = (NODES - 1) as f64;
        // (run allowed, run bound, window allowed, window bound)
        let (allowed, bound, window_allowed, window_bound) = match mode {
            Mode::Centralized | Mode::Leased => (limit * SECS, limit * SECS, limit, limit),
            Mode::SyncedWindow(ms) => {
                // Per window: limit + (N - 1) min(limit, 2 λ (I + δ)).
                let span = 2.0 * (ms as f64 / 1e3 + delta);
                let extra = others * (lambda * span).min(limit as f64);
                let window = (limit as f64 + extra) as u64;
                (limit * SECS, window * SECS, limit, window)
            }
            Mode::SyncedBucket(ms) => {
                // Over any span t: capacity + rate x t, plus (N - 1)
                // a_i(2 (I + δ)), with a_i(x) <= min(λ x, capacity + rate x).
                let span = 2.0 * (ms as f64 / 1e3 + delta);
                let a = (lambda * span).min(limit as f64 + limit as f64 * span);
                let allowed = limit + limit * SECS;
                // One second: capacity + rate x 1 s.
                let window = 2 * limit;
                (
                    allowed,
                    (allowed as f64 + others * a) as u64,
                    window,
                    (window as f64 + others * a) as u64,
                )
            }
        };
        Row {
            mode,
            admitted,
            allowed,
            worst_window: windows.values().copied().max().unwrap_or(0),
            window_allowed,
            window_bound,
            bound,
            p50: pick(0.5),
            p99: pick(0.99),
            calls_per_s: calls as f64 / secs,
            cmds_per_s: cmds as f64 / secs,
            requests_per_s: offered as f64 / secs,
            sync_ms: delta * 1e3,
        }
    }
}

fn main() {
    #[cfg(feature = "redis")]
    run::main();
    #[cfg(not(feature = "redis"))]
    eprintln!("this example needs the Redis backend: --features redis");
}
