//! The outbound guard against upstreams that really take less than they
//! promised: the real [`OutboundLimiter`] and three baselines, each run on
//! the same simulated time, demand and upstream.
//!
//! A discrete-event simulation on a [`ManualClock`]: jobs arrive, wait in
//! each design's queue in arrival order (only the head consults the
//! design, as in the guard's own queue), are sent when admitted, and come
//! back 40-60 ms later (seeded) with the upstream's status and headers,
//! which the design observes. A 429 or 503 sends the job to the back of the
//! queue; a job not sent successfully by its 5 s deadline is a miss.
//!
//! The baselines are built here from their published descriptions, and
//! each honours `Retry-After` as the guard does, so that what is compared
//! is how each finds the rate:
//!
//! * **AWS-style CUBIC**: the AWS SDKs' adaptive retry mode: a client-side
//!   token bucket whose rate, on a throttle, drops to 0.7 of the measured
//!   sending rate, and otherwise grows along a cubic curve back to (and
//!   past) the rate of the last throttle (scale 0.4, never above twice the
//!   measured sending rate);
//! * **AIMD**: TCP-style, halving the rate on a 429 (once per second) and
//!   adding 5% of the configured rate each second without one;
//! * **fixed + pause**: the configured quota with its full burst (governor's
//!   `until_ready`) and a pause for `Retry-After`: what users do today.

use super::{Scenario, row};
use crate::outbound::UpstreamSignal;
use crate::sim::plot::{Body, Figure, Mark, Panel, Series, render, trim};
use crate::sim::{SEC, SimError, SplitMix64};
use crate::wait::{Gate, Step};
use crate::{ManualClock, OutboundLimiter, Quota, RateLimiter, TokenBucket};
use plotters::prelude::SeriesLabelPosition;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, UNIX_EPOCH};

/// The configured (promised) rate, per second.
const PROMISED: f64 = 100.0;
/// Simulated run and warm-up, in seconds.
const RUN: u64 = 60;
const WARM_UP: u64 = 5;
/// Every job's deadline from its arrival.
const DEADLINE: u64 = 5 * SEC;
const MS: u64 = 1_000_000;
/// Wall-clock time of the simulation's zero (on a whole second).
const EPOCH_SECS: u64 = 1_700_000_000;

/// How the upstream counts.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// Fixed windows of this many seconds, on wall-clock boundaries.
    Fixed(u64),
    /// A token bucket with this burst.
    Bucket(f64),
    /// A sliding log over one second.
    Sliding,
}

/// What the upstream says.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Signals {
    /// `Retry-After` (whole seconds, rounded up) on a 429.
    RetryAfter,
    /// `X-RateLimit-Limit/Remaining/Reset` (Unix seconds) on every answer.
    XRateLimit,
    /// `RateLimit-Policy` on every answer, a bare 429.
    Policy,
    /// A bare 429.
    Bare,
}

#[derive(Debug, Clone, Copy)]
enum Demand {
    /// Jobs per second, evenly spread.
    Steady(f64),
    /// `rate` per second for `on` seconds every `every` seconds.
    Bursts { rate: f64, on: u64, every: u64 },
}

impl Demand {
    fn arrivals(self, guards: usize) -> Vec<(u64, usize)> {
        let mut out = Vec::new();
        let mut push = |from: u64, to: u64, rate: f64| {
            let gap = (SEC as f64 / rate) as u64;
            let mut t = from;
            let mut i = 0;
            while t < to {
                out.push((t, i % guards));
                i += 1;
                t += gap;
            }
        };
        match self {
            Demand::Steady(rate) => push(0, RUN * SEC, rate),
            Demand::Bursts { rate, on, every } => {
                let mut s = 0;
                while s < RUN {
                    push(s * SEC, (s + on) * SEC, rate);
                    s += every;
                }
            }
        }
        out.sort_unstable();
        out
    }
}

/// One upstream situation.
#[derive(Clone, Copy)]
struct Situation {
    id: &'static str,
    about: &'static str,
    shape: Shape,
    signals: Signals,
    /// The upstream's real capacity at second `s`, as a fraction of the
    /// promised rate.
    capacity: fn(u64) -> f64,
    /// A 503 outage (with `Retry-After: 5`) over these seconds.
    outage: Option<(u64, u64)>,
    demand: Demand,
    /// Guards sharing the upstream (separate processes), demand split.
    guards: usize,
}

fn situations() -> Vec<Situation> {
    let steady = Demand::Steady(120.0);
    let at = |id, about, capacity: fn(u64) -> f64| Situation {
        id,
        about,
        shape: Shape::Fixed(1),
        signals: Signals::RetryAfter,
        capacity,
        outage: None,
        demand: steady,
        guards: 1,
    };
    vec![
        at("70%", "fixed 1 s windows at 70/s, Retry-After", |_| 0.7),
        at("80%", "fixed 1 s windows at 80/s, Retry-After", |_| 0.8),
        at("90%", "fixed 1 s windows at 90/s, Retry-After", |_| 0.9),
        at(
            "halved",
            "fixed windows at 80/s, 40/s from 20 s to 40 s, Retry-After",
            |s| if (20..40).contains(&s) { 0.4 } else { 0.8 },
        ),
        Situation {
            signals: Signals::Policy,
            ..at(
                "halved, policy",
                "fixed windows at 80/s, 40/s from 20 s to 40 s, RateLimit-Policy",
                |s| if (20..40).contains(&s) { 0.4 } else { 0.8 },
            )
        },
        Situation {
            shape: Shape::Bucket(40.0),
            ..at("bucket", "token bucket 80/s, burst 40, Retry-After", |_| {
                0.8
            })
        },
        Situation {
            shape: Shape::Sliding,
            ..at("sliding", "sliding log, 80 in any 1 s, Retry-After", |_| {
                0.8
            })
        },
        Situation {
            shape: Shape::Fixed(60),
            signals: Signals::XRateLimit,
            ..at(
                "x-ratelimit",
                "fixed 1 min windows of 4,800, X-RateLimit-* only",
                |_| 0.8,
            )
        },
        Situation {
            signals: Signals::Policy,
            ..at(
                "policy",
                "fixed 1 s windows at 80/s, RateLimit-Policy only",
                |_| 0.8,
            )
        },
        Situation {
            signals: Signals::Bare,
            ..at("bare", "fixed 1 s windows at 80/s, bare 429", |_| 0.8)
        },
        Situation {
            demand: Demand::Bursts {
                rate: 240.0,
                on: 1,
                every: 4,
            },
            ..at(
                "bursty",
                "fixed 1 s windows at 90/s; 240 jobs in 1 s every 4 s",
                |_| 0.9,
            )
        },
        Situation {
            guards: 2,
            ..at(
                "two guards",
                "two guards (60/s each) share fixed windows at 80/s, Retry-After",
                |_| 0.8,
            )
        },
        Situation {
            outage: Some((20, 30)),
            ..at(
                "outage",
                "fixed windows at 80/s; 503 + Retry-After: 5 from 20 s to 30 s",
                |_| 0.8,
            )
        },
    ]
}

/// The upstream model.
struct Upstream {
    situation: Situation,
    /// Fixed window: (window index, count).
    window: (u64, u64),
    /// Token bucket: (tokens, last time).
    bucket: (f64, u64),
    /// Sliding log: accepted times within the last second.
    log: VecDeque<u64>,
}

impl Upstream {
    fn new(situation: Situation) -> Self {
        let burst = match situation.shape {
            Shape::Bucket(b) => b,
            _ => 0.0,
        };
        Upstream {
            situation,
            window: (0, 0),
            bucket: (burst, 0),
            log: VecDeque::new(),
        }
    }

    fn rate(&self, now: u64) -> f64 {
        (self.situation.capacity)(now / SEC) * PROMISED
    }

    /// The answer to a request arriving at `now`: status and headers.
    fn answer(&mut self, now: u64) -> (u16, Vec<(&'static str, String)>) {
        if let Some((from, to)) = self.situation.outage
            && (from * SEC..to * SEC).contains(&now)
        {
            return (503, vec![("Retry-After", "5".into())]);
        }
        let rate = self.rate(now);
        // (accepted, limit, remaining, retry or reset in ns)
        let (ok, limit, remaining, wait) = match self.situation.shape {
            Shape::Fixed(secs) => {
                let width = secs * SEC;
                let index = now / width;
                if self.window.0 != index {
                    self.window = (index, 0);
                }
                let limit = (rate * secs as f64).round() as u64;
                let ok = self.window.1 < limit;
                if ok {
                    self.window.1 += 1;
                }
                (ok, limit, limit - self.window.1, (index + 1) * width - now)
            }
            Shape::Bucket(burst) => {
                let (tokens, last) = self.bucket;
                let tokens = (tokens + rate * (now - last) as f64 / SEC as f64).min(burst);
                let ok = tokens >= 1.0;
                let tokens = if ok { tokens - 1.0 } else { tokens };
                self.bucket = (tokens, now);
                let wait = ((1.0 - tokens).max(0.0) / rate * SEC as f64) as u64;
                (ok, burst as u64, tokens as u64, wait)
            }
            Shape::Sliding => {
                while self.log.front().is_some_and(|&t| t + SEC <= now) {
                    self.log.pop_front();
                }
                let limit = rate.round() as u64;
                let ok = (self.log.len() as u64) < limit;
                if ok {
                    self.log.push_back(now);
                }
                let wait = self.log.front().map_or(0, |&t| t + SEC - now);
                (ok, limit, limit.saturating_sub(self.log.len() as u64), wait)
            }
        };
        let status = if ok { 200 } else { 429 };
        let secs_up = |ns: u64| ns.div_ceil(SEC).max(1);
        let headers = match self.situation.signals {
            Signals::RetryAfter if !ok => vec![("Retry-After", secs_up(wait).to_string())],
            Signals::RetryAfter | Signals::Bare => Vec::new(),
            Signals::XRateLimit => vec![
                ("X-RateLimit-Limit", limit.to_string()),
                ("X-RateLimit-Remaining", remaining.to_string()),
                (
                    "X-RateLimit-Reset",
                    (EPOCH_SECS + (now + wait).div_ceil(SEC)).to_string(),
                ),
            ],
            Signals::Policy => {
                let window = match self.situation.shape {
                    Shape::Fixed(secs) => secs,
                    _ => 1,
                };
                vec![(
                    "RateLimit-Policy",
                    format!("\"default\";q={limit};w={window}"),
                )]
            }
        };
        (status, headers)
    }
}

/// The designs compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rategate,
    Cubic,
    Aimd,
    Fixed,
}

const KINDS: [Kind; 4] = [Kind::Rategate, Kind::Cubic, Kind::Aimd, Kind::Fixed];

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Rategate => "OutboundLimiter",
            Kind::Cubic => "AWS-style CUBIC",
            Kind::Aimd => "AIMD",
            Kind::Fixed => "fixed + pause",
        }
    }
}

/// A token bucket on the simulated clock, in seconds and tokens.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    capacity: f64,
    tokens: f64,
    last: u64,
}

impl Bucket {
    fn new(rate: f64, capacity: f64) -> Self {
        Bucket {
            rate,
            capacity,
            tokens: capacity,
            last: 0,
        }
    }

    fn refill(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.last) as f64 / SEC as f64;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.capacity);
        self.last = now;
    }

    /// Nanoseconds until a token is there (0: now).
    fn wait(&mut self, now: u64) -> u64 {
        self.refill(now);
        if self.tokens >= 1.0 {
            0
        } else {
            ((((1.0 - self.tokens) / self.rate) * SEC as f64).ceil() as u64).max(1)
        }
    }
}

/// The AWS SDKs' adaptive client rate limiter.
#[derive(Debug)]
struct Cubic {
    enabled: bool,
    bucket: Bucket,
    last_max_rate: f64,
    last_throttle: f64,
    time_window: f64,
    measured: f64,
    count: f64,
    last_bucket: f64,
}

impl Cubic {
    const BETA: f64 = 0.7;
    const SCALE: f64 = 0.4;
    const SMOOTH: f64 = 0.8;

    fn new() -> Self {
        Cubic {
            enabled: false,
            bucket: Bucket::new(0.5, 1.0),
            last_max_rate: 0.0,
            last_throttle: 0.0,
            time_window: 0.0,
            measured: 0.0,
            count: 0.0,
            last_bucket: 0.0,
        }
    }

    fn observe(&mut self, now: u64, throttled: bool) {
        let t = now as f64 / SEC as f64;
        // The measured sending rate, in half-second buckets.
        let bucket = (t * 2.0).floor() / 2.0;
        self.count += 1.0;
        if bucket > self.last_bucket {
            let current = self.count / (bucket - self.last_bucket);
            self.measured = current * Self::SMOOTH + self.measured * (1.0 - Self::SMOOTH);
            self.count = 0.0;
            self.last_bucket = bucket;
        }
        let rate = if throttled {
            let to_use = if self.enabled {
                self.measured.min(self.bucket.rate)
            } else {
                self.measured
            };
            self.last_max_rate = to_use;
            self.time_window = (self.last_max_rate * (1.0 - Self::BETA) / Self::SCALE).cbrt();
            self.last_throttle = t;
            self.enabled = true;
            to_use * Self::BETA
        } else {
            self.time_window = (self.last_max_rate * (1.0 - Self::BETA) / Self::SCALE).cbrt();
            Self::SCALE * (t - self.last_throttle - self.time_window).powi(3) + self.last_max_rate
        };
        let rate = rate.min(2.0 * self.measured).max(0.5);
        self.bucket.refill(now);
        self.bucket.rate = rate;
        self.bucket.capacity = rate.max(1.0);
        self.bucket.tokens = self.bucket.tokens.min(self.bucket.capacity);
    }
}

/// A design under test.
enum Design {
    Rategate(Box<OutboundLimiter<ManualClock>>),
    Baseline {
        kind: Kind,
        /// The configured quota.
        quota: Bucket,
        cubic: Cubic,
        /// AIMD: the paced rate and when it last changed.
        aimd: (Bucket, u64),
        pause_until: u64,
    },
}

impl Design {
    fn new(kind: Kind, clock: &ManualClock) -> Result<Self, SimError> {
        if kind == Kind::Rategate {
            let quota = Quota::per_second(PROMISED as u32)?;
            let limit = RateLimiter::<TokenBucket, _>::with_clock(quota, clock.clone())?;
            return Ok(Design::Rategate(Box::new(OutboundLimiter::with_clock(
                limit,
                clock.clone(),
            ))));
        }
        // governor's `until_ready` at the quota passes its full burst; the
        // adaptive baselines pace the quota evenly, as the guard does.
        let burst = if kind == Kind::Fixed { PROMISED } else { 1.0 };
        Ok(Design::Baseline {
            kind,
            quota: Bucket::new(PROMISED, burst),
            cubic: Cubic::new(),
            aimd: (Bucket::new(PROMISED, 1.0), 0),
            pause_until: 0,
        })
    }

    /// `None`: admitted now; `Some(wait)`: ask again then.
    fn attempt(&mut self, now: u64) -> Option<u64> {
        match self {
            Design::Rategate(guard) => match Gate::attempt(guard.as_ref(), 1) {
                Ok(Step::Pass(_)) => None,
                Ok(Step::Wait(wait)) => Some(wait.max(1)),
                Err(_) => Some(SEC),
            },
            Design::Baseline {
                kind,
                quota,
                cubic,
                aimd,
                pause_until,
            } => {
                if now < *pause_until {
                    return Some(*pause_until - now);
                }
                let own = match kind {
                    Kind::Cubic if cubic.enabled => Some(&mut cubic.bucket),
                    Kind::Aimd => Some(&mut aimd.0),
                    _ => None,
                };
                let wait = quota.wait(now);
                let own_wait = own.map_or(0, |b| b.wait(now));
                match wait.max(own_wait) {
                    0 => {
                        quota.tokens -= 1.0;
                        match kind {
                            Kind::Cubic if cubic.enabled => cubic.bucket.tokens -= 1.0,
                            Kind::Aimd => aimd.0.tokens -= 1.0,
                            _ => {}
                        }
                        None
                    }
                    wait => Some(wait),
                }
            }
        }
    }

    fn observe(&mut self, now: u64, signal: &UpstreamSignal) {
        match self {
            Design::Rategate(guard) => guard.observe(signal),
            Design::Baseline {
                kind,
                cubic,
                aimd,
                pause_until,
                ..
            } => {
                let throttled = signal.status() == 429;
                // The AWS SDKs retry through their bucket and do not read
                // `Retry-After`; the others pause for it.
                if signal.is_limited() && *kind != Kind::Cubic {
                    let pause = signal.retry_after().or(signal.reset_after());
                    let pause = pause.map_or(SEC, crate::clock::duration_to_nanos);
                    *pause_until = (*pause_until).max(now + pause);
                }
                match kind {
                    Kind::Cubic => cubic.observe(now, throttled),
                    Kind::Aimd => {
                        let (bucket, changed) = aimd;
                        if now.saturating_sub(*changed) >= SEC {
                            bucket.refill(now);
                            bucket.rate = if throttled {
                                (bucket.rate / 2.0).max(1.0)
                            } else {
                                (bucket.rate + 0.05 * PROMISED).min(PROMISED)
                            };
                            *changed = now;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrive { guard: usize, job: usize },
    Wake { guard: usize },
    Answer { guard: usize, job: usize, sent: u64 },
}

#[derive(Debug, Clone, Copy)]
struct Job {
    arrived: u64,
    /// The upstream's answer to the last send (status, index in `answers`).
    answer: usize,
}

/// One design's run in one situation.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OutboundRow {
    /// The situation's name.
    pub situation: String,
    /// The design.
    pub design: String,
    /// Successful requests after the warm-up, as a share of what the
    /// upstream could take (or of the demand, where that is less).
    pub delivered_share: f64,
    /// 429s per 1,000 requests sent, after the warm-up.
    pub limited_per_1000: f64,
    /// Jobs not sent successfully by their 5 s deadline (all run).
    pub deadline_misses: u64,
    /// Jobs offered (all run).
    pub jobs: u64,
    /// Median and 99th percentile of the wait from arrival to the
    /// successful send, in ms.
    pub wait_p50_ms: u64,
    /// See `wait_p50_ms`.
    pub wait_p99_ms: u64,
    /// Seconds from the start (or from the last change of the upstream's
    /// capacity) until two seconds in a row deliver 95% of what the
    /// upstream could take; `None`: never.
    pub converge_s: Option<u64>,
    /// Successful requests per second, for the plot.
    #[serde(skip)]
    pub per_second: Vec<f64>,
}

struct Run {
    row: OutboundRow,
}

fn run(situation: Situation, kind: Kind, seed: u64) -> Result<Run, SimError> {
    let clock = ManualClock::new();
    let guards = situation.guards;
    let mut designs = (0..guards)
        .map(|_| Design::new(kind, &clock))
        .collect::<Result<Vec<_>, _>>()?;
    let mut upstream = Upstream::new(situation);
    let mut rng = SplitMix64::new(seed);
    let mut queues: Vec<VecDeque<usize>> = vec![VecDeque::new(); guards];
    let mut wake_at: Vec<Option<u64>> = vec![None; guards];
    let mut jobs: Vec<Job> = Vec::new();
    let mut answers: Vec<(u16, Vec<(&'static str, String)>)> = Vec::new();
    let mut events: BinaryHeap<Reverse<(u64, u64, Event)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |events: &mut BinaryHeap<_>, at: u64, e: Event| {
        seq += 1;
        events.push(Reverse((at, seq, e)));
    };
    let seconds = RUN as usize;
    let mut offered = vec![0.0; seconds + 10];
    for (t, guard) in situation.demand.arrivals(guards) {
        offered[(t / SEC) as usize] += 1.0;
        let job = jobs.len();
        jobs.push(Job {
            arrived: t,
            answer: 0,
        });
        push(&mut events, t, Event::Arrive { guard, job });
    }
    let (mut ok, mut sent, mut limited) = (
        vec![0.0; seconds + 10],
        vec![0u64; seconds + 10],
        vec![0u64; seconds + 10],
    );
    let mut waits = Vec::new();
    let mut misses = 0u64;
    let end = (RUN + 10) * SEC;
    while let Some(Reverse((now, _, event))) = events.pop() {
        if now > end {
            break;
        }
        clock.set(now);
        let guard = match event {
            Event::Arrive { guard, job } => {
                queues[guard].push_back(job);
                guard
            }
            Event::Answer {
                guard,
                job,
                sent: at,
            } => {
                let (status, headers) = &answers[jobs[job].answer];
                let wall = UNIX_EPOCH + Duration::from_secs(EPOCH_SECS) + Duration::from_nanos(now);
                let signal = UpstreamSignal::from_pairs(
                    *status,
                    headers.iter().map(|(n, v)| (*n, v.as_str())),
                    wall,
                );
                designs[guard].observe(now, &signal);
                let second = (at / SEC) as usize;
                if *status == 200 {
                    ok[second] += 1.0;
                    waits.push(at - jobs[job].arrived);
                } else {
                    if *status == 429 {
                        limited[second] += 1;
                    }
                    if now < jobs[job].arrived + DEADLINE {
                        queues[guard].push_back(job);
                    } else {
                        misses += 1;
                    }
                }
                guard
            }
            Event::Wake { guard } => {
                if wake_at[guard] == Some(now) {
                    wake_at[guard] = None;
                }
                guard
            }
        };
        // The head of this guard's queue consults the design.
        while let Some(&job) = queues[guard].front() {
            let deadline = jobs[job].arrived + DEADLINE;
            if now >= deadline {
                queues[guard].pop_front();
                misses += 1;
                continue;
            }
            match designs[guard].attempt(now) {
                None => {
                    queues[guard].pop_front();
                    sent[(now / SEC) as usize] += 1;
                    jobs[job].answer = answers.len();
                    answers.push(upstream.answer(now));
                    let latency = 40 * MS + rng.below(20 * MS);
                    push(
                        &mut events,
                        now + latency,
                        Event::Answer {
                            guard,
                            job,
                            sent: now,
                        },
                    );
                }
                Some(wait) => {
                    let at = (now + wait).min(deadline);
                    if wake_at[guard].is_none_or(|w| w > at || w <= now) {
                        wake_at[guard] = Some(at);
                        push(&mut events, at, Event::Wake { guard });
                    }
                    break;
                }
            }
        }
    }
    // Jobs still queued at the end, with their deadline within the run,
    // missed it.
    for q in &queues {
        misses += q
            .iter()
            .filter(|&&j| jobs[j].arrived + DEADLINE <= end)
            .count() as u64;
    }
    let capacity = |s: u64| {
        if situation.outage.is_some_and(|(a, b)| (a..b).contains(&s)) {
            0.0
        } else {
            (situation.capacity)(s) * PROMISED
        }
    };
    // Bursty demand that fits: every job offered could be served, so the
    // share counts the whole run.
    let measured = if matches!(situation.demand, Demand::Bursts { .. }) {
        0..RUN + 10
    } else {
        WARM_UP..RUN
    };
    let delivered: f64 = measured.clone().map(|s| ok[s as usize]).sum();
    let possible: f64 = measured
        .clone()
        .map(capacity)
        .sum::<f64>()
        .min(measured.clone().map(|s| offered[s as usize]).sum());
    let sent_after: u64 = measured.clone().map(|s| sent[s as usize]).sum();
    let limited_after: u64 = measured.clone().map(|s| limited[s as usize]).sum();
    waits.sort_unstable();
    let pct = |p: f64| {
        waits
            .get(((waits.len() as f64 * p) as usize).min(waits.len().saturating_sub(1)))
            .map_or(0, |&w| w / MS)
    };
    // Convergence: from each change of capacity (and the start).
    let changes: Vec<u64> = (0..RUN)
        .filter(|&s| s == 0 || capacity(s) != capacity(s - 1))
        .collect();
    let mut converge = Some(0);
    for &c in &changes {
        let found = (c..RUN - 1).find(|&s| {
            let need = 0.95 * (capacity(s) + capacity(s + 1));
            ok[s as usize] + ok[s as usize + 1] >= need
        });
        converge = match (converge, found) {
            (Some(a), Some(s)) => Some(a.max(s - c)),
            _ => None,
        };
    }
    if matches!(situation.demand, Demand::Bursts { .. }) {
        converge = None;
    }
    Ok(Run {
        row: OutboundRow {
            situation: situation.id.into(),
            design: kind.label().into(),
            delivered_share: if possible > 0.0 {
                delivered / possible
            } else {
                1.0
            },
            limited_per_1000: if sent_after > 0 {
                1000.0 * limited_after as f64 / sent_after as f64
            } else {
                0.0
            },
            deadline_misses: misses,
            jobs: jobs.len() as u64,
            wait_p50_ms: pct(0.5),
            wait_p99_ms: pct(0.99),
            converge_s: converge,
            per_second: ok[..seconds].to_vec(),
        },
    })
}

/// Every situation, every design.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OutboundAdaptation {
    /// One row per situation and design.
    pub rows: Vec<OutboundRow>,
}

impl OutboundAdaptation {
    /// The row of a situation and design (`"OutboundLimiter"`,
    /// `"AWS-style CUBIC"`, `"AIMD"`, `"fixed + pause"`).
    pub fn row(&self, situation: &str, design: &str) -> Option<&OutboundRow> {
        self.rows
            .iter()
            .find(|r| r.situation == situation && r.design == design)
    }
}

/// Runs the scenario.
pub fn outbound_adaptation(seed: u64) -> Result<Scenario<OutboundAdaptation>, SimError> {
    let mut rows = Vec::new();
    let mut panels = Vec::new();
    for situation in situations() {
        let mut series = vec![Series::new(
            "upstream capacity",
            Mark::DashedStep,
            6,
            (0..=RUN)
                .map(|s| {
                    let out = situation.outage.is_some_and(|(a, b)| (a..b).contains(&s));
                    let c = if out {
                        0.0
                    } else {
                        (situation.capacity)(s) * PROMISED
                    };
                    (s as f64, c)
                })
                .collect(),
        )];
        for (i, kind) in KINDS.into_iter().enumerate() {
            let r = run(situation, kind, seed)?.row;
            series.push(Series::new(
                kind.label(),
                Mark::Line,
                i,
                r.per_second
                    .iter()
                    .enumerate()
                    .map(|(s, &v)| (s as f64 + 0.5, v))
                    .collect(),
            ));
            rows.push(r);
        }
        let mut panel = Panel::new(
            situation.about,
            "time (s)",
            "successful requests/s",
            Body::Xy(series),
        );
        panel.x_range = Some((0.0, RUN as f64));
        panel.y_range = Some((0.0, 130.0));
        panel.legend = SeriesLabelPosition::LowerRight;
        panels.push(panel);
    }
    let svg = render(&Figure {
        title: "Outbound guard against upstreams that take less than promised (100/s)".into(),
        note: "Delivered per second by each design; dashed: what the upstream really takes. \
               120 jobs/s offered unless noted, 5 s deadlines, 40-60 ms round trips."
            .into(),
        panels,
        cols: 3,
        width: 1500,
        panel_height: 300,
    })?;
    let mut table = vec![row(&[
        &"upstream",
        &"design",
        &"delivered",
        &"429s / 1,000",
        &"deadline misses",
        &"wait p50 / p99 (ms)",
        &"converged (s)",
    ])];
    for r in &rows {
        table.push(row(&[
            &r.situation,
            &r.design,
            &format!("{}%", trim(100.0 * r.delivered_share)),
            &trim(r.limited_per_1000),
            &format!("{} of {}", r.deadline_misses, r.jobs),
            &format!("{} / {}", r.wait_p50_ms, r.wait_p99_ms),
            &r.converge_s.map_or("never".to_string(), |s| s.to_string()),
        ]));
    }
    Ok(Scenario {
        id: "outbound_adaptation",
        title: "Outbound adaptation",
        about: "A guard configured at 100/s calls an upstream that really takes less (70%, 80%, \
                90%, halved for 20 s), counts differently (fixed windows, a token bucket, a \
                sliding log), says more or less (Retry-After, X-RateLimit-*, RateLimit-Policy, \
                a bare 429), is shared by two guards, or goes down for 10 s. The real \
                OutboundLimiter runs against three baselines built from their published \
                descriptions: the AWS SDKs' adaptive (CUBIC) rate, TCP-style AIMD, and the \
                fixed quota with a pause on Retry-After. Delivered and 429s count after a 5 s \
                warm-up."
            .into(),
        summary: OutboundAdaptation { rows },
        table,
        svg,
    })
}
