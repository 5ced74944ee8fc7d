//! The sliding window counter against the exact log on a bursty trace.

use super::{Scenario, max_in_span, max_in_window, row, single};
use crate::ManualClock;
use crate::sim::plot::{Body, Figure, Mark, Panel, Series, render};
use crate::sim::{SEC, SimError, SplitMix64};
use plotters::prelude::SeriesLabelPosition;

/// Where the two disagree, each run on its own admitted history.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CounterVsLog {
    /// Requests per minute.
    pub limit: u64,
    /// Requests in the trace.
    pub requests: u64,
    /// Admitted by the exact log.
    pub log_admitted: u64,
    /// Admitted by the counter.
    pub counter_admitted: u64,
    /// Requests the counter admitted and the log denied.
    pub counter_only: u64,
    /// Requests the log admitted and the counter denied.
    pub log_only: u64,
    /// The most the log admitted in any 60 s span.
    pub log_max_in_60s: u64,
    /// The most the counter admitted in any 60 s span.
    pub counter_max_in_60s: u64,
    /// The most the counter admitted in one aligned minute.
    pub counter_max_in_window: u64,
}

const LIMIT: u64 = 100;
const MINUTES: u64 = 60;

/// The trace: a Poisson background of 1 request a second (60 a minute,
/// under the limit) and, every 4 to 10 minutes, a burst of 2 to 6 requests
/// a second for 15 to 60 s.
fn trace(seed: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    let end = MINUTES * 60 * SEC;
    let mut times = Vec::new();
    let mut t = 0.0;
    loop {
        t += rng.exponential(1.0);
        let ns = (t * SEC as f64) as u64;
        if ns >= end {
            break;
        }
        times.push(ns);
    }
    let mut start = 60.0 + rng.unit() * 120.0;
    while ((start * SEC as f64) as u64) < end {
        let rate = 2.0 + rng.unit() * 4.0;
        let length = 15.0 + rng.unit() * 45.0;
        let mut t = start;
        while t < start + length {
            t += rng.exponential(1.0 / rate);
            let ns = (t * SEC as f64) as u64;
            if ns < end {
                times.push(ns);
            }
        }
        start += 240.0 + rng.unit() * 360.0;
    }
    times.sort_unstable();
    times
}

/// Runs the scenario for `seed`.
pub fn counter_vs_log(seed: u64) -> Result<Scenario<CounterVsLog>, SimError> {
    let times = trace(seed);
    let clock = ManualClock::new();
    let (_, log) = single("log:100/m", &clock)?;
    let (_, counter) = single("counter:100/m", &clock)?;
    let (mut log_adm, mut cnt_adm, mut counter_only, mut log_only) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for &t in &times {
        clock.set(t);
        let l = log.check_n("client", 1)?.is_allowed();
        let c = counter.check_n("client", 1)?.is_allowed();
        if l {
            log_adm.push((t, 1));
        }
        if c {
            cnt_adm.push((t, 1));
        }
        if c && !l {
            counter_only.push((t, 1));
        }
        if l && !c {
            log_only.push((t, 1));
        }
    }
    let summary = CounterVsLog {
        limit: LIMIT,
        requests: times.len() as u64,
        log_admitted: log_adm.len() as u64,
        counter_admitted: cnt_adm.len() as u64,
        counter_only: counter_only.len() as u64,
        log_only: log_only.len() as u64,
        log_max_in_60s: max_in_span(&log_adm, 60 * SEC),
        counter_max_in_60s: max_in_span(&cnt_adm, 60 * SEC),
        counter_max_in_window: max_in_window(&cnt_adm, 60 * SEC),
    };

    let offered: Vec<(u64, u64)> = times.iter().map(|&t| (t, 1)).collect();
    let minutes = |v: Vec<(f64, f64)>| v.into_iter().map(|(x, y)| (x / 60.0, y)).collect();
    let mut trailing = Panel::new(
        "Admitted in the trailing 60 s, sampled every second",
        "time (minutes)",
        "requests in the last 60 s",
        Body::Xy(vec![
            Series::new("offered", Mark::Line, 5, minutes(trailing_60s(&offered))),
            Series::new(
                format!(
                    "sliding window counter (max {})",
                    summary.counter_max_in_60s
                ),
                Mark::Line,
                1,
                minutes(trailing_60s(&cnt_adm)),
            ),
            Series::new(
                format!("sliding window log (max {})", summary.log_max_in_60s),
                Mark::Line,
                0,
                minutes(trailing_60s(&log_adm)),
            ),
        ]),
    );
    trailing
        .hlines
        .push((LIMIT as f64, "limit: 100 per minute".into()));
    trailing.x_range = Some((0.0, MINUTES as f64));
    trailing.legend = SeriesLabelPosition::UpperRight;
    let mut disagree = Panel::new(
        "Requests decided differently, per minute",
        "time (minutes)",
        "requests in the minute",
        Body::Xy(vec![
            Series::new(
                format!("counter admitted, log denied ({})", summary.counter_only),
                Mark::Step,
                1,
                per_minute(&counter_only),
            ),
            Series::new(
                format!("log admitted, counter denied ({})", summary.log_only),
                Mark::Step,
                0,
                per_minute(&log_only),
            ),
        ]),
    );
    disagree.x_range = Some((0.0, MINUTES as f64));
    disagree.legend = SeriesLabelPosition::UpperRight;
    let svg = render(&Figure {
        title: "Sliding window counter against the exact log: 100/min, one bursty client, 1 hour"
            .into(),
        note: "Each algorithm runs on its own admitted history (rategate limiters, manual clock); \
               background 1 request/s plus bursts of 2-6/s."
            .into(),
        panels: vec![trailing, disagree],
        cols: 1,
        width: 1100,
        panel_height: 380,
    })?;
    let table = vec![
        row(&[
            &"requests",
            &"log admitted",
            &"counter admitted",
            &"counter only",
            &"log only",
            &"most in 60 s: log",
            &"most in 60 s: counter",
        ]),
        row(&[
            &summary.requests,
            &summary.log_admitted,
            &summary.counter_admitted,
            &summary.counter_only,
            &summary.log_only,
            &summary.log_max_in_60s,
            &summary.counter_max_in_60s,
        ]),
    ];
    Ok(Scenario {
        id: "counter_vs_log",
        title: "Sliding window counter against the exact log",
        about: "One client, limit 100 per minute, one hour: a background of one request a second \
                and bursts of 2 to 6 a second. The log admits at most 100 in any 60 s; the counter \
                weighs the previous minute by how much of it is still in the window, which \
                assumes its requests were spread evenly: after a burst late in a minute it \
                admits too much, after one early in a minute too little."
            .into(),
        summary,
        table,
        svg,
    })
}

/// For each second, admissions in the 60 s before it: (seconds, count).
fn trailing_60s(events: &[(u64, u64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let (mut lo, mut hi, mut sum) = (0, 0, 0);
    for s in 0..=MINUTES * 60 {
        let t = s * SEC;
        while hi < events.len() && events[hi].0 < t {
            sum += events[hi].1;
            hi += 1;
        }
        while lo < hi && events[lo].0 + 60 * SEC < t {
            sum -= events[lo].1;
            lo += 1;
        }
        out.push((s as f64, sum as f64));
    }
    out
}

fn per_minute(events: &[(u64, u64)]) -> Vec<(f64, f64)> {
    let mut counts = vec![0u64; MINUTES as usize];
    for &(t, n) in events {
        if let Some(c) = counts.get_mut((t / (60 * SEC)) as usize) {
            *c += n;
        }
    }
    let mut pts: Vec<(f64, f64)> = counts
        .iter()
        .enumerate()
        .map(|(m, &c)| (m as f64, c as f64))
        .collect();
    pts.push((MINUTES as f64, counts.last().copied().unwrap_or(0) as f64));
    pts
}
