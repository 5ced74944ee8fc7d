//! Differential check of [`LeakyBucket`] against a real nginx `limit_req`.
//!
//! For each scenario this starts nginx (from `$PATH`, or `$NGINX`) as a child
//! process on a free loopback port with a generated config in a temp dir,
//! sends a paced trace of HTTP/1.0 GETs (one connection and one reader
//! thread per request, so requests nginx holds in delay mode do not block the
//! schedule), records each request's send time and whether nginx answered
//! 200 (admitted, possibly after a delay) or 429, then replays the same
//! relative timestamps through `RateLimiter::<LeakyBucket, ManualClock>` with
//! the same quota string and compares every decision.
//!
//! nginx reads its millisecond clock (`CLOCK_MONOTONIC`, whole ms, cached per
//! event-loop turn) when it processes a request, so the replay is done twice:
//! "raw" from time 0 (the millisecond phase is arbitrary) and "aligned" with
//! the sub-millisecond phase of `CLOCK_MONOTONIC` at the first send (so the
//! replay crosses millisecond boundaries where nginx did, up to nginx's
//! processing latency). A request is flagged *ambiguous* when its rategate
//! decision changes across 300 replays jittered by a random phase and a
//! random 0–0.5 ms processing delay per burst: a mismatch there is a timing
//! artefact; a mismatch on an unambiguous request is a semantic difference.
//!
//! Run with `cargo run --release --example nginx_trace` (Linux; needs nginx).

use rategate::{LeakyBucket, ManualClock, Quota, RateLimiter};
use std::error::Error;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

const NANOS_PER_MS: u64 = 1_000_000;

/// `CLOCK_MONOTONIC` in ns, the clock nginx's `ngx_current_msec` reads.
fn monotonic_ns() -> u64 {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_MONOTONIC: i32 = 1;
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec (64-bit Linux layout).
    let rc = unsafe { clock_gettime(CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A running nginx; killed (and its temp dir removed) on drop, panics
/// included.
struct Nginx {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Nginx {
    fn start(tag: usize, zone_rate: &str, limit_args: &str) -> Result<Nginx, Box<dyn Error>> {
        let dir = std::env::temp_dir().join(format!("rategate-nginx-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("www"))?;
        std::fs::write(dir.join("www/index.html"), "ok\n")?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let d = dir.display();
        // `return 200` would run in the rewrite phase, before limit_req's
        // preaccess phase, so the content is a static file.
        let conf = format!(
            "master_process off;\n\
             worker_processes 1;\n\
             pid {d}/nginx.pid;\n\
             error_log {d}/error.log info;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n\
               access_log {d}/access.log;\n\
               client_body_temp_path {d}/body;\n\
               limit_req_zone $binary_remote_addr zone=z:1m rate={zone_rate};\n\
               server {{\n\
                 listen 127.0.0.1:{port};\n\
                 root {d}/www;\n\
                 location / {{ limit_req zone=z {limit_args}; limit_req_status 429; }}\n\
               }}\n\
             }}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf)?;
        let bin = std::env::var("NGINX").unwrap_or_else(|_| "nginx".to_owned());
        let child = Command::new(bin)
            .arg("-p")
            .arg(&dir)
            .args(["-e", "error.log", "-c", "nginx.conf", "-g", "daemon off;"])
            .stdin(Stdio::null())
            .spawn()?;
        let mut nginx = Nginx { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(status) = nginx.child.try_wait()? {
                return Err(format!("nginx exited ({status}): {}", nginx.error_log()).into());
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(nginx);
            }
            if Instant::now() > deadline {
                return Err("nginx did not start listening".into());
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One request: which burst it belongs to, its send time relative to the
/// first request (from `Instant`), and nginx's answer.
struct Sent {
    burst: usize,
    rel_ns: u64,
    nginx: Option<bool>,
    status: String,
    /// From the send to the end of nginx's response (its hold, in delay
    /// mode, plus loopback latency).
    held_ns: u64,
}

/// A trace step: at `at_ms` after the start, send `count` requests at once.
type Step = (u64, u32);

fn burst(at_ms: u64, count: u32) -> Vec<Step> {
    vec![(at_ms, count)]
}

fn paced(start_ms: u64, count: u32, gap_ms: u64) -> Vec<Step> {
    (0..u64::from(count))
        .map(|i| (start_ms + i * gap_ms, 1))
        .collect()
}

fn sleep_until(target: Instant) {
    let now = Instant::now();
    if target > now + Duration::from_millis(2) {
        thread::sleep(target - now - Duration::from_millis(2));
    }
    while Instant::now() < target {
        std::hint::spin_loop();
    }
}

fn read_status(mut stream: TcpStream, sent: Instant) -> Result<(u16, u64), String> {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&buf);
    let held = sent.elapsed().as_nanos() as u64;
    text.split_ascii_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .map(|status| (status, held))
        .ok_or_else(|| format!("bad response {:?}", text.lines().next()))
}

/// Sends the trace; returns the requests in send order and the
/// `CLOCK_MONOTONIC` phase (ns within its millisecond) of the first send.
fn run_trace(port: u16, steps: &[Step]) -> Result<(Vec<Sent>, u64), Box<dyn Error>> {
    let start = Instant::now() + Duration::from_millis(50);
    let mut first: Option<(Instant, u64)> = None;
    let mut sent: Vec<(usize, Instant)> = Vec::new();
    let mut readers: Vec<JoinHandle<Result<(u16, u64), String>>> = Vec::new();
    for (b, &(at_ms, count)) in steps.iter().enumerate() {
        // Connect ahead of the send time; nginx waits for the request line.
        let mut conns = Vec::new();
        for _ in 0..count {
            let s = TcpStream::connect(("127.0.0.1", port))?;
            s.set_nodelay(true)?;
            conns.push(s);
        }
        sleep_until(start + Duration::from_millis(at_ms));
        for mut s in conns {
            let i = sent.len();
            let req = format!("GET /index.html?i={i} HTTP/1.0\r\n\r\n");
            let t = Instant::now();
            if first.is_none() {
                first = Some((t, monotonic_ns()));
            }
            s.write_all(req.as_bytes())?;
            sent.push((b, t));
            readers.push(thread::spawn(move || read_status(s, t)));
        }
    }
    let (t0, mono0) = first.ok_or("empty trace")?;
    let out = sent
        .into_iter()
        .zip(readers)
        .map(|((burst, t), h)| {
            let res = h.join().unwrap_or_else(|_| Err("reader panicked".into()));
            let (nginx, status, held_ns) = match res {
                Ok((200, held)) => (Some(true), "200".to_owned(), held),
                Ok((429, held)) => (Some(false), "429".to_owned(), held),
                Ok((other, held)) => (None, other.to_string(), held),
                Err(e) => (None, e, 0),
            };
            Sent {
                burst,
                rel_ns: (t - t0).as_nanos() as u64,
                nginx,
                status,
                held_ns,
            }
        })
        .collect();
    Ok((out, mono0 % NANOS_PER_MS))
}

/// rategate's decisions for the requests at `times` (ns, nondecreasing).
fn replay(quota: Quota, times: impl Iterator<Item = u64>) -> Result<Vec<bool>, Box<dyn Error>> {
    Ok(replay_delays(quota, times)?
        .into_iter()
        .map(|d| d.is_some())
        .collect())
}

/// rategate's decisions: `Some(delay_ns)` if admitted, `None` if denied.
fn replay_delays(
    quota: Quota,
    times: impl Iterator<Item = u64>,
) -> Result<Vec<Option<u64>>, Box<dyn Error>> {
    let clock = ManualClock::new();
    let limiter = RateLimiter::<LeakyBucket, _>::with_clock(quota, clock.clone())?;
    Ok(times
        .map(|t| {
            clock.set(t);
            let d = limiter.check();
            d.is_allowed().then(|| d.delay().as_nanos() as u64)
        })
        .collect())
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Per request: true when a jittered replay can decide it either way.
fn ambiguous(quota: Quota, reqs: &[Sent], bursts: usize) -> Result<Vec<bool>, Box<dyn Error>> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut seen = vec![[false; 2]; reqs.len()];
    for _ in 0..300 {
        let phase = rng.below(NANOS_PER_MS);
        let lag: Vec<u64> = (0..bursts).map(|_| rng.below(NANOS_PER_MS / 2)).collect();
        let times = reqs.iter().map(|r| phase + r.rel_ns + lag[r.burst]);
        for (s, ok) in seen.iter_mut().zip(replay(quota, times)?) {
            s[usize::from(ok)] = true;
        }
    }
    Ok(seen.into_iter().map(|s| s[0] && s[1]).collect())
}

struct Scenario {
    zone_rate: &'static str,
    limit_args: &'static str,
    quota: &'static str,
    steps: Vec<Step>,
}

fn main() -> Result<(), Box<dyn Error>> {
    let version = Command::new(std::env::var("NGINX").unwrap_or_else(|_| "nginx".to_owned()))
        .arg("-v")
        .output()?;
    print!("{}", String::from_utf8_lossy(&version.stderr));

    let scenarios = [
        Scenario {
            zone_rate: "1r/s",
            limit_args: "burst=5",
            quota: "1r/s burst=5",
            steps: [
                burst(0, 8),
                burst(1500, 2),
                burst(3700, 3),
                burst(4250, 1),
                burst(6600, 2),
                burst(7450, 4),
                burst(9900, 7),
            ]
            .concat(),
        },
        Scenario {
            zone_rate: "10r/s",
            limit_args: "burst=20 nodelay",
            quota: "10r/s burst=20 nodelay",
            steps: [
                burst(0, 25),
                paced(350, 30, 70),
                burst(2900, 12),
                paced(3650, 20, 45),
                burst(6550, 30),
            ]
            .concat(),
        },
        Scenario {
            zone_rate: "10r/s",
            limit_args: "burst=12 delay=8",
            quota: "10r/s burst=12 delay=8",
            steps: [
                burst(0, 15),
                burst(450, 3),
                paced(800, 20, 130),
                burst(4000, 10),
                paced(5230, 15, 85),
            ]
            .concat(),
        },
        Scenario {
            zone_rate: "100r/m",
            limit_args: "burst=3 nodelay",
            quota: "100r/m burst=3 nodelay",
            steps: [
                burst(0, 6),
                burst(900, 2),
                burst(2100, 3),
                paced(2800, 15, 450),
                burst(10_030, 5),
            ]
            .concat(),
        },
    ];

    let mut table = String::new();
    let mut details = String::new();
    for (tag, sc) in scenarios.iter().enumerate() {
        let quota: Quota = sc.quota.parse()?;
        let nginx = Nginx::start(tag, sc.zone_rate, sc.limit_args)?;
        let (reqs, phase) = run_trace(nginx.port, &sc.steps)?;
        // Let nginx flush its log lines before reading them.
        thread::sleep(Duration::from_millis(100));
        let log = nginx.error_log();
        drop(nginx);

        let raw = replay(quota, reqs.iter().map(|r| r.rel_ns))?;
        let delays = replay_delays(quota, reqs.iter().map(|r| phase + r.rel_ns))?;
        let aligned: Vec<bool> = delays.iter().map(Option::is_some).collect();
        // Hold time versus rategate's delay, over requests both admitted.
        let (mut delayed, mut worst) = (0, 0i64);
        for (r, d) in reqs.iter().zip(&delays) {
            if let (Some(true), Some(d)) = (r.nginx, d) {
                delayed += usize::from(*d > 0);
                let err = r.held_ns as i64 - *d as i64;
                if err.abs() > worst.abs() {
                    worst = err;
                }
            }
        }
        let amb = ambiguous(quota, &reqs, sc.steps.len())?;
        let nginx_ok = reqs.iter().filter(|r| r.nginx == Some(true)).count();
        let errors = reqs.iter().filter(|r| r.nginx.is_none()).count();
        let count = |v: &[bool]| v.iter().filter(|&&x| x).count();
        let mism = |v: &[bool]| {
            reqs.iter()
                .zip(v)
                .filter(|(r, ok)| r.nginx.is_some_and(|n| n != **ok))
                .count()
        };
        let unexplained = reqs
            .iter()
            .zip(&aligned)
            .zip(&amb)
            .filter(|((r, ok), a)| r.nginx.is_some_and(|n| n != **ok) && !**a)
            .count();
        writeln!(
            table,
            "{:<24} {:>5} {:>7} {:>8} {:>8} {:>9} {:>9} {:>6} {:>6} {:>6} {:>8} {:>9.2}",
            sc.quota,
            reqs.len(),
            nginx_ok,
            count(&raw),
            count(&aligned),
            mism(&raw),
            mism(&aligned),
            count(&amb),
            unexplained,
            errors,
            delayed,
            worst as f64 / 1e6
        )?;
        for (i, r) in reqs.iter().enumerate() {
            let differs = |ok: bool| r.nginx.is_some_and(|n| n != ok);
            if r.nginx.is_none() || differs(raw[i]) || differs(aligned[i]) {
                let needle = format!("?i={i} HTTP");
                let line = log
                    .lines()
                    .find(|l| l.contains(&needle))
                    .map(|l| {
                        let at = l.find("limiting").or_else(|| l.find("delaying"));
                        at.map_or(l, |p| &l[p..])
                    })
                    .unwrap_or("(no nginx log line: admitted without delay)");
                writeln!(
                    details,
                    "  [{}] #{i} burst {} at {:.3} ms (phase {:.3} ms, aligned ms {}): \
                     nginx {} rategate raw {} aligned {}{}\n      nginx: {}",
                    sc.quota,
                    r.burst,
                    r.rel_ns as f64 / 1e6,
                    phase as f64 / 1e6,
                    (phase + r.rel_ns) / NANOS_PER_MS,
                    r.status,
                    if raw[i] { 200 } else { 429 },
                    if aligned[i] { 200 } else { 429 },
                    if amb[i] { " [ambiguous]" } else { "" },
                    line
                )?;
            }
        }
    }
    println!(
        "\n{:<24} {:>5} {:>7} {:>8} {:>8} {:>9} {:>9} {:>6} {:>6} {:>6} {:>8} {:>9}",
        "scenario",
        "reqs",
        "nginx",
        "rg raw",
        "rg algn",
        "mism raw",
        "mism algn",
        "ambig",
        "unexpl",
        "errors",
        "delayed",
        "hold err ms"
    );
    print!("{table}");
    if details.is_empty() {
        println!("\nno mismatches");
    } else {
        println!("\nmismatches:\n{details}");
    }
    Ok(())
}
