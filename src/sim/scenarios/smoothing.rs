//! Burst against smoothing: the token bucket against the leaky bucket's
//! three modes, with the departure time of every admitted request.

use super::{Scenario, row, single};
use crate::ManualClock;
use crate::sim::plot::{Body, Figure, Mark, Panel, Series, render, trim};
use crate::sim::{SEC, SimError};
use plotters::prelude::SeriesLabelPosition;

/// One policy's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SmoothingRow {
    /// The policy, as a policy string.
    pub policy: String,
    /// Requests admitted (of 45).
    pub admitted: u64,
    /// Requests denied.
    pub denied: u64,
    /// Admitted requests told to wait (`Decision::delay` above zero).
    pub delayed: u64,
    /// The longest wait, in milliseconds.
    pub max_delay_ms: u64,
    /// Admitted requests of the first burst (30 at time 0) that leave at once.
    pub first_burst_at_once: u64,
    /// When the last admitted request of the first burst leaves, in ms.
    pub first_burst_last_departure_ms: u64,
}

/// 10 requests a second with a burst of 20: 30 requests at 0 s and 15 at 3 s.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Smoothing {
    /// One row per policy.
    pub rows: Vec<SmoothingRow>,
}

impl Smoothing {
    /// The row of a policy string as [`LimitSpec`](crate::sim::LimitSpec) displays it.
    pub fn row(&self, policy: &str) -> Option<&SmoothingRow> {
        self.rows.iter().find(|r| r.policy == policy)
    }
}

const POLICIES: [&str; 4] = [
    "token:10/s burst=20",
    "leaky:10r/s burst=20 nodelay",
    "leaky:10r/s burst=20 delay=8",
    "leaky:10r/s burst=20",
];

/// Runs the scenario.
pub fn burst_vs_smoothing() -> Result<Scenario<Smoothing>, SimError> {
    let arrivals: Vec<u64> = std::iter::repeat_n(0, 30)
        .chain(std::iter::repeat_n(3 * SEC, 15))
        .collect();
    let mut rows = Vec::new();
    let mut series = vec![Series::new(
        "arrivals (30 at 0 s, 15 at 3 s)",
        Mark::DashedStep,
        6,
        cumulative(&arrivals),
    )];
    for (i, text) in POLICIES.iter().enumerate() {
        let clock = ManualClock::new();
        let (policy, limiter) = single(text, &clock)?;
        let mut departures = Vec::new();
        let (mut denied, mut delayed, mut max_delay, mut at_once, mut last_first) = (0, 0, 0, 0, 0);
        for &t in &arrivals {
            clock.set(t);
            let d = limiter.check_n("client", 1)?;
            if !d.is_allowed() {
                denied += 1;
                continue;
            }
            let delay = d.delay_nanos();
            departures.push(t + delay);
            max_delay = max_delay.max(delay);
            if delay > 0 {
                delayed += 1;
            }
            if t == 0 {
                last_first = last_first.max(delay);
                if delay == 0 {
                    at_once += 1;
                }
            }
        }
        departures.sort_unstable();
        let admitted = departures.len() as u64;
        series.push(Series::new(
            format!(
                "{policy}: {admitted} admitted, longest wait {} s",
                trim(max_delay as f64 / SEC as f64)
            ),
            Mark::Step,
            i,
            cumulative(&departures),
        ));
        rows.push(SmoothingRow {
            policy: policy.to_string(),
            admitted,
            denied,
            delayed,
            max_delay_ms: max_delay / 1_000_000,
            first_burst_at_once: at_once,
            first_burst_last_departure_ms: last_first / 1_000_000,
        });
    }
    let mut panel = Panel::new(
        "Requests that have left (admitted, after any Decision::delay)",
        "time (s)",
        "requests departed (cumulative)",
        Body::Xy(series),
    );
    panel.x_range = Some((-0.2, 6.0));
    panel.y_range = Some((0.0, 60.0));
    panel.legend = SeriesLabelPosition::UpperLeft;
    let svg = render(&Figure {
        title: "Burst against smoothing: 10 requests/s, burst 20".into(),
        note: "The token bucket and leaky bucket nodelay pass a burst at once; delay=8 passes 9 \
               and spaces the rest 100 ms apart; plain burst=20 spaces every excess request."
            .into(),
        panels: vec![panel],
        cols: 1,
        width: 1000,
        panel_height: 520,
    })?;
    let mut table = vec![row(&[
        &"policy",
        &"admitted",
        &"denied",
        &"delayed",
        &"longest wait (ms)",
        &"first burst: left at once",
    ])];
    for r in &rows {
        table.push(row(&[
            &r.policy,
            &r.admitted,
            &r.denied,
            &r.delayed,
            &r.max_delay_ms,
            &r.first_burst_at_once,
        ]));
    }
    Ok(Scenario {
        id: "burst_vs_smoothing",
        title: "Burst against smoothing",
        about: "10 requests a second with a burst of 20. 30 requests arrive at once at 0 s and 15 \
                more at 3 s. The token bucket (burst 20) passes 20 at once and denies the rest. \
                The leaky bucket (nginx limit_req) admits the burst plus one; with nodelay they \
                all leave at once, with delay=8 the first 9 leave at once and the others wait \
                their turn at the rate, and without either option every excess request waits \
                (each admitted request's departure is its arrival plus Decision::delay)."
            .into(),
        summary: Smoothing { rows },
        table,
        svg,
    })
}

/// A cumulative count over sorted times, in seconds: a staircase's corners.
fn cumulative(times: &[u64]) -> Vec<(f64, f64)> {
    let mut out = vec![(-0.2, 0.0)];
    for (i, &t) in times.iter().enumerate() {
        out.push((t as f64 / SEC as f64, (i + 1) as f64));
    }
    if let Some(&(_, n)) = out.last() {
        out.push((6.0, n));
    }
    out
}
