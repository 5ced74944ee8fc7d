//! Replay: a user's traffic under one or more policies.
//!
//! Input is streamed line by line, so a log of any length runs in memory
//! bounded by the options: each policy's keyed limiter holds at most
//! [`max_keys`](ReplayOptions::max_keys) keys (idle keys swept once per
//! period of the log's time; beyond the cap new keys share one state), the
//! most-denied keys are a fixed-size summary, the admitted-per-second
//! series has at most 2,048 buckets (each twice as wide when the log's span
//! outgrows them), and the reorder window holds the requests of
//! [`reorder_secs`](ReplayOptions::reorder_secs) of the log's time.
//!
//! Formats:
//!
//! * CSV: `time,key[,cost]`, `time` in seconds (`1714557600.25`, or from any
//!   origin: `12.5`) or RFC 3339 (`2024-05-01T10:00:00Z`), cost 1 when
//!   absent; a first line whose time is a word (`time,key,cost`) is a header.
//! * nginx, with any `log_format` ([`ReplayOptions::log_format`];
//!   `combined` by default): the time from `$msec`, `$time_iso8601` or
//!   `$time_local`, the arrival `$msec - $request_time` when both are
//!   logged, the key from any variable (`$remote_addr` by default), the
//!   cost from any or 1. Lines whose `$status` `limit_req` never decides
//!   are skipped ([`ReplayOptions::skip_status`]).
//!
//! A line that cannot be read is counted, and the first few are reported
//! with their line numbers, the field that failed and the line; the replay
//! goes on. The report warns, with figures, when the log's times are
//! coarser than a policy's interval, when they step back, and when most
//! lines fail under the format read.

mod format;
mod output;
mod parse;
mod top;

use super::policy::KeyedAny;
use super::{LimitSpec, SEC, SimError};
use crate::ManualClock;
use std::borrow::Cow;
use std::collections::BinaryHeap;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

pub use format::COMBINED;
use top::TopKeys;

/// The input's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// `time,key[,cost]`.
    Csv,
    /// An nginx access log in [`ReplayOptions::log_format`] (`combined`
    /// by default).
    Nginx,
}

/// What to replay and how.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The policies, each applied to the whole input independently.
    pub policies: Vec<LimitSpec>,
    /// The format; `None` tries the first lines as CSV and as the nginx
    /// log format and takes the one that reads more of them.
    pub format: Option<LogFormat>,
    /// The nginx `log_format` string, as in nginx's configuration;
    /// `None` is [`COMBINED`]. Given, it implies [`LogFormat::Nginx`].
    pub log_format: Option<String>,
    /// The nginx variable that keys requests (default `remote_addr`).
    pub key: String,
    /// The nginx variable that holds each request's cost (default: none,
    /// every request costs 1; a `-` value costs 1).
    pub cost: Option<String>,
    /// nginx statuses not replayed (default 400, 408, 414 and 494: nginx
    /// answers them while it reads the request line or headers, before
    /// the phase where `limit_req` runs, so `limit_req` never counted
    /// them). Empty to replay every line.
    pub skip_status: Vec<u16>,
    /// Requests are decided in time order within a window of this many
    /// seconds of the log's time (default 0: in log order). nginx writes
    /// a line when a request ends, so with `$msec - $request_time` the
    /// arrivals are out of log order by up to the longest request.
    pub reorder_secs: f64,
    /// Write each request's decisions here (CSV: line, time, key, cost,
    /// then one column per policy).
    pub decisions: Option<PathBuf>,
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

/// The statuses skipped by default; see [`ReplayOptions::skip_status`].
pub const SKIPPED_STATUSES: [u16; 4] = [400, 408, 414, 494];

/// The most characters of a malformed line kept in the report.
pub const MALFORMED_TEXT_MAX: usize = 200;

impl ReplayOptions {
    /// Defaults, with these policies.
    pub fn new(policies: Vec<LimitSpec>) -> ReplayOptions {
        ReplayOptions {
            policies,
            format: None,
            log_format: None,
            key: "remote_addr".into(),
            cost: None,
            skip_status: SKIPPED_STATUSES.to_vec(),
            reorder_secs: 0.0,
            decisions: None,
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
    /// What is wrong, naming the field that failed.
    pub reason: String,
    /// The line, cut at [`MALFORMED_TEXT_MAX`] characters (then ending
    /// in `...`).
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
    /// Lines skipped for their status (see [`ReplayOptions::skip_status`]).
    pub skipped_status: u64,
    /// The finest step of the requests' times, seconds (1 for a log of
    /// whole seconds, 0.001 for `$msec`).
    pub time_resolution_secs: f64,
    /// Requests earlier than a request before them in the log (after the
    /// reorder window).
    pub steps_back: u64,
    /// The largest such step, seconds.
    pub largest_step_back_secs: f64,
    /// Requests at the same time as the request before them.
    pub same_time: u64,
    /// What may make the replay differ from the server, with figures and
    /// what to do about it.
    pub warnings: Vec<String>,
    /// The first of them.
    pub malformed_lines: Vec<MalformedLine>,
    /// The earliest request's time, seconds (since the Unix epoch for nginx
    /// logs and absolute CSV times).
    pub first_time: f64,
    /// The latest request's time, seconds.
    pub last_time: f64,
    /// Width of the per-bucket series, seconds.
    pub bucket_secs: f64,
    /// Requests offered per bucket, from the first request decided
    /// (rounded down to the bucket width); requests earlier than it (times
    /// that step back) count in the first bucket.
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
    /// Requests waiting in the reorder window, earliest first.
    window: BinaryHeap<std::cmp::Reverse<Waiting>>,
    reorder: u64,
    /// The latest time read, and the latest decided.
    latest_read: u64,
    latest_decided: Option<u64>,
    /// The finest time step seen (a power of 1,000 of nanoseconds).
    finest: u64,
    decisions: Option<(csv::Writer<std::io::BufWriter<std::fs::File>>, PathBuf)>,
    /// One policy's decision per column, reused.
    row: Vec<&'static str>,
}

/// A request in the reorder window: by time, then by line.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Waiting {
    time: u64,
    line: u64,
    key: Vec<u8>,
    cost: u32,
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
                    top: TopKeys::new(opts.top.saturating_mul(8).clamp(64, 1 << 20)),
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
                skipped_status: 0,
                time_resolution_secs: 1.0,
                steps_back: 0,
                largest_step_back_secs: 0.0,
                same_time: 0,
                warnings: Vec::new(),
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
            window: BinaryHeap::new(),
            reorder: secs_to_nanos(opts.reorder_secs),
            latest_read: 0,
            latest_decided: None,
            finest: SEC,
            decisions: None,
            row: Vec::with_capacity(opts.policies.len()),
        })
    }

    /// Opens the decisions file and writes its header.
    fn write_decisions_to(&mut self, path: &Path) -> Result<(), SimError> {
        let file = std::fs::File::create(path).map_err(|e| SimError::Output {
            path: path.to_path_buf(),
            source: e,
        })?;
        let mut out = csv::Writer::from_writer(std::io::BufWriter::new(file));
        let mut header = vec![
            "line".to_string(),
            "time".into(),
            "key".into(),
            "cost".into(),
        ];
        header.extend(self.runs.iter().map(|r| r.report.policy.clone()));
        out.write_record(&header).map_err(|e| SimError::Output {
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        })?;
        self.decisions = Some((out, path.to_path_buf()));
        Ok(())
    }

    /// A request read from line `line`: decided now, or held in the
    /// reorder window until no earlier one can come.
    fn read(&mut self, line: u64, time: u64, key: &[u8], cost: u32) -> Result<(), SimError> {
        if self.reorder == 0 {
            return self.decide(line, time, key, cost);
        }
        self.latest_read = self.latest_read.max(time);
        self.window.push(std::cmp::Reverse(Waiting {
            time,
            line,
            key: key.to_vec(),
            cost,
        }));
        let until = self.latest_read.saturating_sub(self.reorder);
        while self
            .window
            .peek()
            .is_some_and(|std::cmp::Reverse(w)| w.time <= until)
        {
            if let Some(std::cmp::Reverse(w)) = self.window.pop() {
                self.decide(w.line, w.time, &w.key, w.cost)?;
            }
        }
        Ok(())
    }

    /// Decides what is left in the reorder window.
    fn drain(&mut self) -> Result<(), SimError> {
        while let Some(std::cmp::Reverse(w)) = self.window.pop() {
            self.decide(w.line, w.time, &w.key, w.cost)?;
        }
        Ok(())
    }

    fn malformed(&mut self, line: u64, reason: &str, text: &[u8]) {
        self.report.malformed += 1;
        if self.report.malformed_lines.len() < self.malformed_kept {
            let text = String::from_utf8_lossy(text);
            let mut shown: String = text.chars().take(MALFORMED_TEXT_MAX).collect();
            if text.chars().nth(MALFORMED_TEXT_MAX).is_some() {
                shown.push_str("...");
            }
            self.report.malformed_lines.push(MalformedLine {
                line,
                reason: reason.to_string(),
                text: shown,
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

    fn decide(&mut self, line: u64, time: u64, key: &[u8], cost: u32) -> Result<(), SimError> {
        if let Some(latest) = self.latest_decided {
            if time < latest {
                self.report.steps_back += 1;
                self.report.largest_step_back_secs = self
                    .report
                    .largest_step_back_secs
                    .max((latest - time) as f64 / SEC as f64);
            } else if time == latest {
                self.report.same_time += 1;
            }
        }
        self.latest_decided = Some(self.latest_decided.map_or(time, |l| l.max(time)));
        self.finest = self.finest.min(format::resolution(time));
        self.request(time, key, cost);
        if let Some((out, path)) = &mut self.decisions {
            let time = format!("{}.{:09}", time / SEC, time % SEC);
            let cost = cost.to_string();
            let line = line.to_string();
            let mut record: Vec<&[u8]> =
                vec![line.as_bytes(), time.as_bytes(), key, cost.as_bytes()];
            record.extend(self.row.iter().map(|d| d.as_bytes()));
            out.write_record(&record).map_err(|e| SimError::Output {
                path: path.clone(),
                source: std::io::Error::other(e),
            })?;
        }
        Ok(())
    }

    fn request(&mut self, time: u64, key: &[u8], cost: u32) {
        self.row.clear();
        let key = key_text(key);
        let secs = time as f64 / SEC as f64;
        if self.report.requests == 0 || secs < self.report.first_time {
            self.report.first_time = secs;
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
                    self.row.push("allowed");
                    r.admitted += 1;
                    r.cost_admitted += u64::from(cost);
                    grow(&mut r.admitted_per_bucket, b);
                    r.admitted_per_bucket[b] += 1;
                }
                Ok(_) => {
                    self.row.push("denied");
                    r.denied += 1;
                    r.cost_denied += u64::from(cost);
                    run.top.add(&key);
                }
                Err(_) => {
                    self.row.push("never");
                    r.denied += 1;
                    r.never_pass += 1;
                    r.cost_denied += u64::from(cost);
                    run.top.add(&key);
                }
            }
        }
    }

    /// The warnings, from what the replay saw.
    fn warn(&mut self, input: &Input) {
        let r = &mut self.report;
        r.time_resolution_secs = self.finest as f64 / SEC as f64;
        let requests = r.requests.max(1);
        let share = |n: u64| format!("{:.1}%", n as f64 * 100.0 / requests as f64);
        // The tightest interval between two admissions any policy allows.
        let tightest = self
            .runs
            .iter()
            .map(|run| {
                let q = run.policy.quota();
                (
                    q.period_nanos() / u64::from(q.limit().max(1)),
                    run.report.policy.clone(),
                )
            })
            .min();
        if let Some((interval, policy)) = tightest
            && r.requests > 1
            && self.finest > interval
        {
            let fix = match input.kind {
                LogFormat::Nginx if !input.has_msec => {
                    "; log `$msec` (with `$request_time`, the arrival is `$msec - $request_time`) \
                     and pass the log_format with --log-format"
                }
                _ => "; log times with milliseconds",
            };
            r.warnings.push(format!(
                "the log's times are steps of {} but {policy} admits a request every {}: \
                 requests within one step are replayed as if they arrived at once, and \
                 {} of the requests share their time with the request before them, so \
                 decisions can differ from the server's{fix}",
                human_nanos(self.finest),
                human_nanos(interval),
                share(r.same_time),
            ));
        }
        if r.steps_back > 0 {
            let fix = if self.reorder == 0 {
                format!(
                    "; replay with --reorder {} to decide them in time order, or sort the log by time",
                    (r.largest_step_back_secs.ceil() as u64).max(1)
                )
            } else {
                "; widen --reorder past the largest step, or sort the log by time".into()
            };
            r.warnings.push(format!(
                "{} requests ({}) are earlier than a request decided before them (the \
                 largest step back is {:.3} s): each is decided at the latest time seen{fix}",
                r.steps_back,
                share(r.steps_back),
                r.largest_step_back_secs,
            ));
        }
        if input.status_like_costs > 0 && input.status_like_costs * 10 >= input.costs * 9 {
            r.warnings.push(format!(
                "the third CSV column looks like HTTP statuses ({} of {} values from 100 to \
                 599), but it is read as each request's cost: write time,key[,cost]",
                input.status_like_costs, input.costs
            ));
        }
        let read = r.requests + r.malformed + r.skipped_status;
        if r.malformed > 0 && r.malformed * 2 > read {
            let hint = match input.kind {
                LogFormat::Csv => {
                    "is it an nginx access log? Try --format nginx, and --log-format with \
                     the log_format of your nginx configuration"
                }
                LogFormat::Nginx => {
                    "does the log use another log_format? Pass it with --log-format \
                     (as in your nginx configuration), or --format csv for a CSV file"
                }
            };
            r.warnings.push(format!(
                "{} of {read} lines could not be read as {}: {hint}",
                r.malformed,
                input.describe(),
            ));
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

/// What the replay reads, and what it noticed about the input.
struct Input {
    kind: LogFormat,
    has_msec: bool,
    custom: bool,
    /// CSV costs read, and those from 100 to 599.
    costs: u64,
    status_like_costs: u64,
}

impl Input {
    fn describe(&self) -> &'static str {
        match (self.kind, self.custom) {
            (LogFormat::Csv, _) => "CSV (time,key[,cost])",
            (LogFormat::Nginx, false) => "nginx's combined format",
            (LogFormat::Nginx, true) => "the given nginx log_format",
        }
    }
}

/// How many of the first lines the format is guessed from.
const GUESS_LINES: usize = 20;

/// Counts the bytes and lines read through it: a CSV reader skips blank
/// lines, which still count, and numbers its records without them.
struct Counting<R> {
    inner: R,
    bytes: u64,
    last: Option<u8>,
    /// Byte offsets of the newlines read but not yet passed by a record
    /// (at most a buffer's worth).
    newlines: std::collections::VecDeque<u64>,
    /// Newlines before the last record asked about.
    passed: u64,
}

impl<R> Counting<R> {
    fn new(inner: R) -> Counting<R> {
        Counting {
            inner,
            bytes: 0,
            last: None,
            newlines: std::collections::VecDeque::new(),
            passed: 0,
        }
    }

    /// The 1-based line of the byte at `offset` (offsets asked in order).
    fn line_at(&mut self, offset: u64) -> u64 {
        while self.newlines.front().is_some_and(|&n| n < offset) {
            self.newlines.pop_front();
            self.passed += 1;
        }
        self.passed + 1
    }

    /// Every line read, the last one counted without a newline too.
    fn lines(&self) -> u64 {
        self.passed + self.newlines.len() as u64 + u64::from(self.last.is_some_and(|b| b != b'\n'))
    }
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        for (i, &b) in buf[..n].iter().enumerate() {
            if b == b'\n' {
                self.newlines.push_back(self.bytes + i as u64);
            }
        }
        self.bytes += n as u64;
        if n > 0 {
            self.last = Some(buf[n - 1]);
        }
        Ok(n)
    }
}

/// Replays `input` (read to its end) under `opts`; `total_bytes`, when
/// known, sizes the progress bar.
///
/// # Errors
///
/// [`SimError::NoPolicy`], a [`SimError::Quota`] for a policy its algorithm
/// cannot hold, [`SimError::Format`] for a log format, key or cost
/// variable that cannot be used, and [`SimError::Io`] when reading fails
/// or the decisions file cannot be written. Malformed lines are not
/// errors: they are in the report.
pub fn replay<R: BufRead>(
    mut input: R,
    total_bytes: Option<u64>,
    opts: &ReplayOptions,
) -> Result<ReplayReport, SimError> {
    check_options(opts)?;
    let io = |e| SimError::io("<input>", e);
    let nginx = format::Format::new(
        opts.log_format.as_deref().unwrap_or(COMBINED),
        &opts.key,
        opts.cost.as_deref(),
    )
    .map_err(SimError::Format)?;
    let kind = match (opts.format, &opts.log_format) {
        (Some(f), _) => f,
        (None, Some(_)) => LogFormat::Nginx,
        (None, None) => {
            let head = input.fill_buf().map_err(io)?;
            guess(head, &nginx)
        }
    };
    let mut info = Input {
        kind,
        has_msec: nginx.has_msec(),
        custom: opts.log_format.is_some(),
        costs: 0,
        status_like_costs: 0,
    };
    let mut rep = Replayer::new(opts, kind)?;
    if let Some(path) = &opts.decisions {
        rep.write_decisions_to(path)?;
    }
    let bar = progress_bar(opts.progress, total_bytes);
    let tick = |bytes: u64| {
        if let Some(b) = &bar {
            b.set_position(bytes);
        }
    };
    match kind {
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
                let number = rep.report.lines;
                let line = buf.trim_ascii_end();
                if line.is_empty() {
                    continue;
                }
                match nginx.read(line) {
                    Ok(l) if l.status.is_some_and(|s| opts.skip_status.contains(&s)) => {
                        rep.report.skipped_status += 1;
                    }
                    Ok(l) => rep.read(number, l.time, l.key, l.cost)?,
                    Err(reason) => rep.malformed(number, &reason, line),
                }
                if number % 65_536 == 0 {
                    tick(bytes);
                }
            }
        }
        LogFormat::Csv => {
            let mut reader = csv::ReaderBuilder::new()
                .has_headers(false)
                .flexible(true)
                .from_reader(Counting::new(input));
            let mut record = csv::ByteRecord::new();
            loop {
                match reader.read_byte_record(&mut record) {
                    Ok(false) => break,
                    Ok(true) => {}
                    Err(e) => match e.into_kind() {
                        csv::ErrorKind::Io(e) => return Err(io(e)),
                        other => {
                            let number = reader.get_ref().passed + 1;
                            rep.malformed(number, &format!("{other:?}"), b"");
                            continue;
                        }
                    },
                }
                // The record's line is its newline's (the reader's start of a
                // record may be a blank line it skipped).
                let end = reader.position().byte().saturating_sub(1);
                let number = reader.get_mut().line_at(end);
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
                    Ok((t, key, cost)) => {
                        if n == 3 && !fields[2].trim_ascii().is_empty() {
                            info.costs += 1;
                            info.status_like_costs += u64::from((100..=599).contains(&cost));
                        }
                        rep.read(number, t, key, cost)?;
                    }
                    Err(reason) => {
                        let text = record.iter().collect::<Vec<_>>().join(&b","[..]);
                        rep.malformed(number, reason, &text);
                    }
                }
                if number % 65_536 == 0 {
                    tick(reader.get_ref().bytes);
                }
            }
            rep.report.lines = reader.get_ref().lines();
        }
    }
    rep.drain()?;
    if let Some((out, path)) = &mut rep.decisions {
        out.flush().map_err(|e| SimError::Output {
            path: path.clone(),
            source: e,
        })?;
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    rep.warn(&info);
    Ok(rep.finish(opts.top))
}

/// The format that reads more of the first lines of `head`: nginx's (as
/// `nginx` reads it) or CSV.
fn guess(head: &[u8], nginx: &format::Format) -> LogFormat {
    let lines = head
        .split(|&b| b == b'\n')
        .map(<[u8]>::trim_ascii)
        .filter(|l| !l.is_empty())
        .take(GUESS_LINES);
    let (mut as_nginx, mut as_csv) = (0, 0);
    for line in lines {
        as_nginx += usize::from(nginx.read(line).is_ok());
        let fields: Vec<&[u8]> = line.split(|&b| b == b',').collect();
        as_csv += usize::from(parse::csv_record(&fields).is_ok() || parse::is_header(&fields));
    }
    if as_nginx > as_csv {
        LogFormat::Nginx
    } else if as_csv > as_nginx {
        LogFormat::Csv
    } else if head.contains(&b'[') && head.contains(&b'"') {
        // Neither reads: a cut or garbled log that looks like nginx's.
        LogFormat::Nginx
    } else {
        LogFormat::Csv
    }
}

/// A key's bytes as the limiters' `String` key, one text per byte string:
/// valid UTF-8 without a backslash as it is; anything else with each
/// backslash doubled and each byte that is not UTF-8 as `\xHH` (nginx's
/// own escape), so two different byte strings never share a budget.
fn key_text(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.contains('\\') => Cow::Borrowed(text),
        _ => {
            let mut out = String::with_capacity(bytes.len() + 8);
            for chunk in bytes.utf8_chunks() {
                out.push_str(&chunk.valid().replace('\\', "\\\\"));
                for b in chunk.invalid() {
                    out.push_str(&format!("\\x{b:02X}"));
                }
            }
            Cow::Owned(out)
        }
    }
}

/// Seconds (not negative, not NaN: see [`check_options`]) as nanoseconds,
/// saturating: an infinite window sorts the whole log.
fn secs_to_nanos(secs: f64) -> u64 {
    if secs > 0.0 {
        (secs * SEC as f64).min(u64::MAX as f64) as u64
    } else {
        0
    }
}

/// The options a replay cannot use, as [`SimError::Invalid`].
fn check_options(opts: &ReplayOptions) -> Result<(), SimError> {
    let invalid = |what: &str| Err(SimError::Invalid(what.to_string()));
    if opts.reorder_secs.is_nan() || opts.reorder_secs < 0.0 {
        return invalid("the reorder window must be 0 or more seconds");
    }
    if opts.max_keys == 0 {
        return invalid("max_keys must be at least 1");
    }
    let nginx_options = opts.log_format.is_some()
        || opts.cost.is_some()
        || opts.key.trim_start_matches('$') != "remote_addr";
    if opts.format == Some(LogFormat::Csv) && nginx_options {
        return invalid(
            "the log format, key and cost variables apply to nginx logs, not to CSV (time,key[,cost])",
        );
    }
    Ok(())
}

/// A duration for a message: `1 s`, `100 ms`, `250 µs`, `40 ns`.
fn human_nanos(n: u64) -> String {
    if n >= SEC && n % SEC == 0 {
        format!("{} s", n / SEC)
    } else if n >= SEC {
        format!("{:.3} s", n as f64 / SEC as f64)
    } else if n >= 1_000_000 {
        format!("{} ms", (n as f64 / 1e6).round())
    } else if n >= 1_000 {
        format!("{} µs", (n as f64 / 1e3).round())
    } else {
        format!("{n} ns")
    }
}

/// Replays a file; see [`replay`].
///
/// # Errors
///
/// As [`replay`], and [`SimError::Io`] when the file cannot be opened.
pub fn replay_file(path: &Path, opts: &ReplayOptions) -> Result<ReplayReport, SimError> {
    let file = std::fs::File::open(path).map_err(|e| SimError::io(path, e))?;
    if let Some(decisions) = &opts.decisions
        && same_file(path, decisions)
    {
        return Err(SimError::Invalid(format!(
            "the decisions file {} is the log being replayed",
            decisions.display()
        )));
    }
    let len = file.metadata().ok().map(|m| m.len());
    let reader = std::io::BufReader::with_capacity(1 << 16, file);
    replay(reader, len, opts).map_err(|e| match e {
        SimError::Io { source, .. } => SimError::io(path, source),
        e => e,
    })
}

/// Whether `a` and `b` name one existing file (through links too).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
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
