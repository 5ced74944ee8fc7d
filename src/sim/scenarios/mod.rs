//! The classic scenarios, each run through the real limiters on a
//! [`ManualClock`] and returned with its headline
//! numbers (typed, for tests and `summary.json`), a table and an SVG.

mod boundary;
mod counter_vs_log;
mod outbound;
mod servers;
mod smoothing;
mod vendor;

pub use boundary::{BoundaryBurst, BoundaryRow, boundary_burst};
pub use counter_vs_log::{CounterVsLog, counter_vs_log};
pub use outbound::{OutboundAdaptation, OutboundRow, outbound_adaptation};
pub use servers::{ServerMode, ServerRow, ThreeServers, three_servers};
pub use smoothing::{Smoothing, SmoothingRow, burst_vs_smoothing};
pub use vendor::{GraphqlRow, QuotaRow, VendorQuotas, vendor_quotas};

use super::SimError;
use super::policy::{KeyedAny, LimitSpec};
use crate::ManualClock;

/// One scenario's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Scenario<T> {
    /// A file-name-safe identifier (`boundary_burst`): the SVG is `<id>.svg`.
    pub id: &'static str,
    /// The heading.
    pub title: &'static str,
    /// What was run, in a paragraph.
    pub about: String,
    /// The headline numbers.
    pub summary: T,
    /// The headline numbers as a table: a header row, then the rows.
    pub table: Vec<Vec<String>>,
    /// The picture.
    #[serde(skip)]
    pub svg: String,
}

impl<T: serde::Serialize> Scenario<T> {
    /// The same scenario with its summary as JSON, to be listed with others.
    pub fn erase(self) -> Result<Scenario<serde_json::Value>, SimError> {
        let summary =
            serde_json::to_value(&self.summary).map_err(|e| SimError::Json(e.to_string()))?;
        Ok(Scenario {
            id: self.id,
            title: self.title,
            about: self.about,
            summary,
            table: self.table,
            svg: self.svg,
        })
    }
}

/// One key's limiter for a policy, on `clock`.
pub(crate) fn single(policy: &str, clock: &ManualClock) -> Result<(LimitSpec, KeyedAny), SimError> {
    let policy: LimitSpec = policy.parse()?;
    let limiter = KeyedAny::new(policy, clock.clone(), 1)?;
    Ok((policy, limiter))
}

/// The most units admitted in any span `[t, t + span)`; `events` are
/// `(time, units)` in time order.
pub(crate) fn max_in_span(events: &[(u64, u64)], span: u64) -> u64 {
    let (mut best, mut sum, mut start) = (0, 0, 0);
    for &(t, units) in events {
        sum += units;
        while events[start].0.saturating_add(span) <= t {
            sum -= events[start].1;
            start += 1;
        }
        best = best.max(sum);
    }
    best
}

/// The most units admitted in any window `[k x period, (k + 1) x period)`.
pub(crate) fn max_in_window(events: &[(u64, u64)], period: u64) -> u64 {
    per_bucket(events, period).into_iter().max().unwrap_or(0)
}

/// Units per bucket of `width` from time 0, through the last event.
pub(crate) fn per_bucket(events: &[(u64, u64)], width: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for &(t, units) in events {
        let i = (t / width.max(1)) as usize;
        if out.len() <= i {
            out.resize(i + 1, 0);
        }
        out[i] += units;
    }
    out
}

/// `mm:ss` or `h:mm:ss` for an x axis in seconds.
pub(crate) fn clock_label(secs: f64) -> String {
    let s = secs.round().max(0.0) as u64;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{:02}:{:02}", s / 60, s % 60)
    }
}

pub(crate) fn row(cells: &[&dyn std::fmt::Display]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_and_windows() {
        let ev = [(0, 1), (10, 1), (59, 1), (60, 1), (61, 1), (125, 3)];
        assert_eq!(max_in_span(&ev, 60), 4); // 10, 59, 60, 61
        assert_eq!(max_in_span(&ev, 1), 3);
        assert_eq!(max_in_window(&ev, 60), 3); // [0, 60): 0, 10, 59
        assert_eq!(per_bucket(&ev, 60), vec![3, 2, 3]);
    }
}
