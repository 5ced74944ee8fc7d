//! Replay: a user's traffic under one or more policies.
//!
//! Input is streamed line by line, so a log of any length runs in memory
//! bounded by the options: each policy's keyed limiter holds at most
//! [`max_keys`](ReplayOptions::max_keys) keys (idle keys swept once per
//! period of the log's time; beyond the cap new keys share one state), the
//! most-denied keys are a fixed-size summary, and the admitted-per-second
//! series has at most 2,048 buckets (each twice as wide when the log's span
//! outgrows them).
//!
//! Formats:
//!
//! * CSV: `time,key[,cost]`, `time` in seconds (`1714557600.25`, or from any
//!   origin: `12.5`) or RFC 3339 (`2024-05-01T10:00:00Z`), cost 1 when
//!   absent; a first line whose time is a word (`time,key,cost`) is a header.
//! * nginx `combined`: keyed by the client address (`$remote_addr`), cost 1,
//!   time from `[$time_local]`.
//!
//! A line that cannot be read is counted, and the first few are reported
//! with their line numbers and what is wrong; the replay goes on.

mod output;
mod parse;
mod top;

use super::policy::KeyedAny;
use super::{LimitSpec, SEC, SimError};
use crate::ManualClock;
use std::borrow::Cow;
use std::io::BufRead;
use std::path::Path;
use top::TopKeys;

/// The input's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// `time,key[,cost]`.
    Csv,
    /// nginx's default `combined` access log.
    Nginx,
}

/// What to replay and how.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The policies, each applied to the whole input independently.
    pub policies: Vec<LimitSpec>,
    /// The format; `None` guesses from the first line.
    pub format: Option<LogFormat>,
    /// Keys each policy's limiter holds at most (default 100,000).
    pub max_keys: usize,
    /// How many most-denied keys to report (default 10).
    pub top: usize,
    /// How many malformed lines to report with their numbers (default 20);
    /// all are counted.
    pub malformed_kept: usize,
    /// Draw a progress bar on the terminal (never when stderr is not one).
    pub progress: bool,
}

impl ReplayOptions {
    /// Defaults, with these policies.
    pub fn new(policies: Vec<LimitSpec>) -> ReplayOptions {
        ReplayOptions {
            policies,
            format: None,
            max_keys: 100_000,
            top: 10,
            malformed_kept: 20,
            progress: false,
        }
    }
}

/// A line that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MalformedLine {
    /// 1-based line number.
    pub line: u64,
    /// What is wrong.
    pub reason: String,
    /// The line's start (at most 80 characters).
    pub text: String,
}

/// One of the keys most denied.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeniedKey {
    /// The key.
    pub key: String,
    /// Requests denied (at most `overcount` above the truth).
    pub denied: u64,
    /// How much `denied` may exceed the truth: 0 unless more distinct keys
    /// were denied than the summary tracks.
    pub overcount: u64,
}

/// What one policy did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PolicyReport {
    /// The policy, with its algorithm named.
    pub policy: String,
    /// Requests checked.
    pub requests: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests denied (including `never_pass`).
    pub denied: u64,
    /// Cost admitted and denied (equal to the counts when every cost is 1).
    pub cost_admitted: u64,
    /// See [`cost_admitted`](PolicyReport::cost_admitted).
    pub cost_denied: u64,
    /// Requests whose cost is above what the policy can ever admit.
    pub never_pass: u64,
    /// The keys most denied.
    pub top_denied: Vec<DeniedKey>,
    /// Keys held by the limiter at the end.
    pub keys_at_end: usize,
    /// New keys that found the key cap full and shared one state.
    pub overflowed: u64,
    /// Requests admitted per bucket (see [`ReplayReport::bucket_secs`]).
    pub admitted_per_bucket: Vec<u64>,
}

/// What a replay found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReplayReport {
    /// The format read.
    pub format: LogFormat,
    /// Lines read (blank lines and a CSV header included).
    pub lines: u64,
    /// Requests read (lines that parsed).
    pub requests: u64,
    /// Lines that could not be read.
    pub malformed: u64,
    /// The first of them.
    pub malformed_lines: Vec<MalformedLine>,
    /// The first request's time, seconds (since the Unix epoch for nginx
    /// logs and absolute CSV times).
    pub first_time: f64,
    /// The latest request's time, seconds.
    pub last_time: f64,
    /// Width of the per-bucket series, seconds.
    pub bucket_secs: f64,
    /// Requests offered per bucket, from `first_time` (rounded down to the
    /// bucket width).
    pub offered_per_bucket: Vec<u64>,
    /// One report per policy, in the order given.
    pub policies: Vec<PolicyReport>,
    /// The process's peak resident memory at the end, bytes (Linux).
    pub peak_rss_bytes: Option<u64>,
}

const MAX_BUCKETS: usize = 2048;

struct PolicyRun {
    policy: LimitSpec,
    limiter: KeyedAny,
    report: PolicyReport,
    top: TopKeys,
}

/// The state of a replay in progress.
struct Replayer {
    clock: ManualClock,
    runs: Vec<PolicyRun>,
    report: ReplayReport,
    origin: Option<u64>,
    width: u64,
    malformed_kept: usize,
}

impl Replayer {
    fn new(opts: &ReplayOptions, format: LogFormat) -> Result<Replayer, SimError> {
        if opts.policies.is_empty() {
            return Err(SimError::NoPolicy);
        }
        let clock = ManualClock::new();
        let runs = opts
            .policies
            .iter()
            .map(|&policy| {
                Ok(PolicyRun {
                    policy,
                    limiter: KeyedAny::new(policy, clock.clone(), opts.max_keys)?,
                    report: PolicyReport {
                        policy: policy.to_string(),
                        requests: 0,
                        admitted: 0,
                        denied: 0,
                        cost_admitted: 0,
                        cost_denied: 0,
                        never_pass: 0,
                        top_denied: Vec::new(),
                        keys_at_end: 0,
                        overflowed: 0,
                        admitted_per_bucket: Vec::new(),
                    },
                    top: TopKeys::new((opts.top * 8).max(64)),
                })
            })
            .collect::<Result<Vec<_>, SimError>>()?;
        Ok(Replayer {
            clock,
            runs,
            report: ReplayReport {
                format,
                lines: 0,
                requests: 0,
                malformed: 0,
                malformed_lines: Vec::new(),
                first_time: 0.0,
                last_time: 0.0,
                bucket_secs: 1.0,
                offered_per_bucket: Vec::new(),
                policies: Vec::new(),
                peak_rss_bytes: None,
            },
            origin: None,
            width: SEC,
            malformed_kept: opts.malformed_kept,
        })
    }

    fn malformed(&mut self, line: u64, reason: &str, text: &[u8]) {
        self.report.malformed += 1;
        if self.report.malformed_lines.len() < self.malformed_kept {
            let text = String::from_utf8_lossy(text);
            self.report.malformed_lines.push(MalformedLine {
                line,
                reason: reason.to_string(),
                text: text.chars().take(80).collect(),
            });
        }
    }

    /// The bucket of time `t`, widening every bucket when `t` is beyond them.
    fn bucket(&mut self, t: u64) -> usize {
        let origin = *self.origin.get_or_insert(t / SEC * SEC);
        let offset = t.saturating_sub(origin);
        while offset / self.width >= MAX_BUCKETS as u64 {
            self.width *= 2;
            halve(&mut self.report.offered_per_bucket);
            for run in &mut self.runs {
                halve(&mut run.report.admitted_per_bucket);
            }
        }
        let i = (offset / self.width) as usize;
        grow(&mut self.report.offered_per_bucket, i);
        i
    }

    fn request(&mut self, time: u64, key: &[u8], cost: u32) {
        let key: Cow<str> = String::from_utf8_lossy(key);
        if self.report.requests == 0 {
            self.report.first_time = time as f64 / SEC as f64;
        }
        self.report.requests += 1;
        self.report.last_time = self.report.last_time.max(time as f64 / SEC as f64);
        let b = self.bucket(time);
        self.report.offered_per_bucket[b] += 1;
        // Out-of-order lines (nginx logs a request when it ends) are decided
        // at their own time: every algorithm counts a step back as no time.
        self.clock.set(time);
        for run in &mut self.runs {
            let r = &mut run.report;
            r.requests += 1;
            match run.limiter.check_n(&key, cost) {
                Ok(d) if d.is_allowed() => {
                    r.admitted += 1;
                    r.cost_admitted += u64::from(cost);
                    grow(&mut r.admitted_per_bucket, b);
                    r.admitted_per_bucket[b] += 1;
                }
                Ok(_) => {
                    r.denied += 1;
                    r.cost_denied += u64::from(cost);
                    run.top.add(&key);
                }
                Err(_) => {
                    r.denied += 1;
                    r.never_pass += 1;
                    r.cost_denied += u64::from(cost);
                    run.top.add(&key);
                }
            }
        }
    }

    fn finish(mut self, top: usize) -> ReplayReport {
        self.report.bucket_secs = self.width as f64 / SEC as f64;
        let n = self.report.offered_per_bucket.len();
        for mut run in self.runs {
            run.report.admitted_per_bucket.resize(n, 0);
            run.report.top_denied = run
                .top
                .top(top)
                .into_iter()
                .map(|(key, denied, overcount)| DeniedKey {
                    key,
                    denied,
                    overcount,
                })
                .collect();
            run.report.keys_at_end = run.limiter.len();
            run.report.overflowed = run.limiter.overflow_count();
            debug_assert_eq!(run.report.policy, run.policy.to_string());
            self.report.policies.push(run.report);
        }
        self.report.peak_rss_bytes = peak_rss_bytes();
        self.report
    }
}

fn grow(v: &mut Vec<u64>, i: usize) {
    if v.len() <= i {
        v.resize(i + 1, 0);
    }
}

/// Merges pairs of buckets: the series at twice the width.
fn halve(v: &mut Vec<u64>) {
    let merged: Vec<u64> = v.chunks(2).map(|c| c.iter().sum()).collect();
    *v = merged;
}

/// Replays `input` (read to its end) under `opts`; `total_bytes`, when
/// known, sizes the progress bar.
///
/// # Errors
///
/// [`SimError::NoPolicy`], a [`SimError::Quota`] for a policy its algorithm
/// cannot hold, and [`SimError::Io`] when reading fails. Malformed lines
/// are not errors: they are in the report.
pub fn replay<R: BufRead>(
    mut input: R,
    total_bytes: Option<u64>,
    opts: &ReplayOptions,
) -> Result<ReplayReport, SimError> {
    let io = |e| SimError::io("<input>", e);
    let format = match opts.format {
        Some(f) => f,
        None => {
            let head = input.fill_buf().map_err(io)?;
            let first = head
                .split(|&b| b == b'\n')
                .find(|l| !l.trim_ascii().is_empty())
                .unwrap_or(b"");
            if parse::looks_like_nginx(first) {
                LogFormat::Nginx
            } else {
                LogFormat::Csv
            }
        }
    };
    let mut rep = Replayer::new(opts, format)?;
    let bar = progress_bar(opts.progress, total_bytes);
    let tick = |bytes: u64| {
        if let Some(b) = &bar {
            b.set_position(bytes);
        }
    };
    match format {
        LogFormat::Nginx => {
            let mut buf = Vec::with_capacity(512);
            let mut bytes = 0u64;
            loop {
                buf.clear();
                let n = input.read_until(b'\n', &mut buf).map_err(io)?;
                if n == 0 {
                    break;
                }
                bytes += n as u64;
                rep.report.lines += 1;
                let line = buf.trim_ascii_end();
                if line.is_empty() {
                    continue;
                }
                match parse::nginx_line(line) {
                    Ok((t, key, cost)) => rep.request(t, key, cost),
                    Err(reason) => {
                        let number = rep.report.lines;
                        rep.malformed(number, reason, line);
                    }
                }
                if rep.report.lines % 65_536 == 0 {
                    tick(bytes);
                }
            }
        }
        LogFormat::Csv => {
            let mut reader = csv::ReaderBuilder::new()
                .has_headers(false)
                .flexible(true)
                .from_reader(input);
            let mut record = csv::ByteRecord::new();
            loop {
                match reader.read_byte_record(&mut record) {
                    Ok(false) => break,
                    Ok(true) => {}
                    Err(e) => match e.into_kind() {
                        csv::ErrorKind::Io(e) => return Err(io(e)),
                        other => {
                            let number = rep.report.lines + 1;
                            rep.report.lines = number;
                            rep.malformed(number, &format!("{other:?}"), b"");
                            continue;
                        }
                    },
                }
                let pos = record
                    .position()
                    .map(|p| (p.line(), p.byte()))
                    .unwrap_or((rep.report.lines + 1, 0));
                rep.report.lines = pos.0;
                // Up to four fields, without allocating: more than three is
                // malformed whatever the fourth holds.
                let mut slots: [&[u8]; 4] = [b""; 4];
                let n = record.len().min(4);
                for (slot, field) in slots.iter_mut().zip(record.iter()) {
                    *slot = field;
                }
                let fields = &slots[..n];
                if rep.report.requests == 0 && rep.report.malformed == 0 && parse::is_header(fields)
                {
                    continue;
                }
                match parse::csv_record(fields) {
                    Ok((t, key, cost)) => rep.request(t, key, cost),
                    Err(reason) => {
                        let text = fields.join(&b","[..]);
                        rep.malformed(pos.0, reason, &text);
                    }
                }
                if pos.0 % 65_536 == 0 {
                    tick(pos.1);
                }
            }
        }
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    Ok(rep.finish(opts.top))
}

/// Replays a file; see [`replay`].
///
/// # Errors
///
/// As [`replay`], and [`SimError::Io`] when the file cannot be opened.
pub fn replay_file(path: &Path, opts: &ReplayOptions) -> Result<ReplayReport, SimError> {
    let file = std::fs::File::open(path).map_err(|e| SimError::io(path, e))?;
    let len = file.metadata().ok().map(|m| m.len());
    let reader = std::io::BufReader::with_capacity(1 << 16, file);
    replay(reader, len, opts).map_err(|e| match e {
        SimError::Io { source, .. } => SimError::io(path, source),
        e => e,
    })
}

fn progress_bar(on: bool, total: Option<u64>) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if !on || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total.unwrap_or(0));
    let style = indicatif::ProgressStyle::with_template(
        "{spinner} replaying [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    Some(bar)
}

/// Peak resident memory (`VmHWM`), Linux only.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
