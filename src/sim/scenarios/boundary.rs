//! The fixed window's boundary burst, through all five algorithms.

use super::{Scenario, clock_label, max_in_span, row, single};
use crate::AlgorithmKind;
use crate::ManualClock;
use crate::sim::plot::{Body, Figure, Mark, Panel, Series, render};
use crate::sim::{SEC, SimError};
use plotters::prelude::SeriesLabelPosition;

/// One algorithm's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BoundaryRow {
    /// The algorithm.
    pub algorithm: AlgorithmKind,
    /// The policy it ran, as a policy string.
    pub policy: String,
    /// Admitted of the 100 sent at 00:59:50.
    pub first_burst: u64,
    /// Admitted of the 100 sent at 01:00:10.
    pub second_burst: u64,
    /// The most admitted in any 60 s span.
    pub max_in_60s: u64,
}

/// Limit 100 per minute; 100 requests at 00:59:50 and 100 at 01:00:10.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BoundaryBurst {
    /// Requests per minute.
    pub limit: u64,
    /// One row per algorithm.
    pub rows: Vec<BoundaryRow>,
}

impl BoundaryBurst {
    /// The row of one algorithm.
    pub fn row(&self, algorithm: AlgorithmKind) -> Option<&BoundaryRow> {
        self.rows.iter().find(|r| r.algorithm == algorithm)
    }
}

const POLICIES: [(AlgorithmKind, &str); 5] = [
    (AlgorithmKind::TokenBucket, "token:100/m burst=20"),
    (AlgorithmKind::FixedWindow, "fixed:100/m"),
    (AlgorithmKind::SlidingWindowLog, "log:100/m"),
    (AlgorithmKind::SlidingWindowCounter, "counter:100/m"),
    (AlgorithmKind::LeakyBucket, "leaky:100r/m burst=20 nodelay"),
];

/// Runs the boundary burst: windows are aligned to the minute (the clock's
/// origin is 00:00:00), so 00:59:50 and 01:00:10 fall in two windows
/// 20 s apart.
pub fn boundary_burst() -> Result<Scenario<BoundaryBurst>, SimError> {
    let first_at = (59 * 60 + 50) * SEC;
    let second_at = (60 * 60 + 10) * SEC;
    let mut rows = Vec::new();
    let mut series = Vec::new();
    for (i, (algorithm, text)) in POLICIES.iter().enumerate() {
        let clock = ManualClock::new();
        let (policy, limiter) = single(text, &clock)?;
        let mut admitted = Vec::new();
        let mut burst = |at: u64| -> Result<u64, SimError> {
            clock.set(at);
            let mut n = 0;
            for _ in 0..100 {
                if limiter.check_n("client", 1)?.is_allowed() {
                    admitted.push((at, 1));
                    n += 1;
                }
            }
            Ok(n)
        };
        let first = burst(first_at)?;
        let second = burst(second_at)?;
        let max = max_in_span(&admitted, 60 * SEC);
        let secs = |t: u64| t as f64 / SEC as f64;
        series.push(Series::new(
            format!("{} ({policy}): {}", algorithm.label(), first + second),
            Mark::Step,
            i,
            vec![
                (secs(first_at) - 20.0, 0.0),
                (secs(first_at), first as f64),
                (secs(second_at), (first + second) as f64),
                (secs(second_at) + 20.0, (first + second) as f64),
            ],
        ));
        rows.push(BoundaryRow {
            algorithm: *algorithm,
            policy: policy.to_string(),
            first_burst: first,
            second_burst: second,
            max_in_60s: max,
        });
    }

    let mut over_time = Panel::new(
        "Admitted so far (cumulative)",
        "time (hh:mm:ss after the clock's origin)",
        "requests admitted",
        Body::Xy(series),
    );
    over_time
        .vlines
        .push((3600.0, "window boundary at 01:00:00".into()));
    over_time.x_fmt = Some(clock_label);
    over_time.y_range = Some((0.0, 290.0));
    let mut worst = Panel::new(
        "Most admitted in any 60 s span",
        "algorithm",
        "requests in 60 s",
        Body::Bars(
            rows.iter()
                .map(|r| (short(r.algorithm).to_string(), r.max_in_60s as f64))
                .collect(),
        ),
    );
    worst.hlines.push((100.0, "limit: 100 per minute".into()));
    worst.legend = SeriesLabelPosition::UpperRight;
    let svg = render(&Figure {
        title: "Boundary burst: 100/min, 100 requests at 00:59:50 and 100 at 01:00:10".into(),
        note: "Each algorithm on its own rategate limiter, manual clock; windows aligned to the minute."
            .into(),
        panels: vec![over_time, worst],
        cols: 2,
        width: 1200,
        panel_height: 460,
    })?;

    let mut table = vec![row(&[
        &"algorithm",
        &"policy",
        &"at 00:59:50",
        &"at 01:00:10",
        &"most in any 60 s",
    ])];
    for r in &rows {
        table.push(row(&[
            &r.algorithm.label(),
            &r.policy,
            &r.first_burst,
            &r.second_burst,
            &r.max_in_60s,
        ]));
    }
    Ok(Scenario {
        id: "boundary_burst",
        title: "The fixed window's boundary burst",
        about: "Limit 100 per minute. A client sends 100 requests at 00:59:50 and 100 more at \
                01:00:10, 20 s later but in the next minute. The fixed window starts afresh at \
                01:00:00 and admits all 200 within 20 s; the sliding window log admits no more \
                than 100 in any 60 s; the counter admits its weighted estimate; the token and \
                leaky buckets admit their burst twice."
            .into(),
        summary: BoundaryBurst { limit: 100, rows },
        table,
        svg,
    })
}

fn short(a: AlgorithmKind) -> &'static str {
    match a {
        AlgorithmKind::TokenBucket => "token bucket",
        AlgorithmKind::FixedWindow => "fixed window",
        AlgorithmKind::SlidingWindowLog => "window log",
        AlgorithmKind::SlidingWindowCounter => "win. counter",
        AlgorithmKind::LeakyBucket => "leaky bucket",
    }
}
