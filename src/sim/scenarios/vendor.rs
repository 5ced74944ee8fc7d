//! Real-world quotas: Stripe live and test mode, GitHub REST signed in and
//! anonymous, GitHub GraphQL points.

use super::{Scenario, max_in_span, max_in_window, per_bucket, row};
use crate::sim::plot::{Body, Figure, Mark, Panel, Series, render};
use crate::sim::{SEC, SimError, SplitMix64};
use crate::{FixedWindow, ManualClock, Quota, RateLimiter, TokenBucket, presets};
use plotters::prelude::SeriesLabelPosition;

/// One quota's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct QuotaRow {
    /// What is limited ("Stripe live, read").
    pub name: String,
    /// The policy, as a policy string.
    pub policy: String,
    /// Units offered over the run.
    pub offered: u64,
    /// Units admitted over the run.
    pub admitted: u64,
    /// The most admitted in any span of one period.
    pub max_in_period: u64,
    /// The most admitted in one aligned window of one period.
    pub max_in_window: u64,
}

/// GitHub GraphQL: queries of varying point cost under 5,000 points an hour.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GraphqlRow {
    /// The policy.
    pub policy: String,
    /// Queries sent, and of them admitted.
    pub queries: u64,
    /// See [`queries`](GraphqlRow::queries).
    pub queries_admitted: u64,
    /// Points asked for, and of them admitted.
    pub points_offered: u64,
    /// See [`points_offered`](GraphqlRow::points_offered).
    pub points_admitted: u64,
    /// The most points admitted in one hour window.
    pub max_points_in_window: u64,
}

/// The vendors' published limits, each under a client that asks for more.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VendorQuotas {
    /// Stripe: live and test mode, reads and writes (token buckets, 10 s).
    pub stripe: Vec<QuotaRow>,
    /// GitHub REST: 5,000/h and 60/h (fixed hourly windows, 3 h).
    pub github: Vec<QuotaRow>,
    /// GitHub GraphQL points (fixed hourly windows, 3 h).
    pub graphql: GraphqlRow,
}

impl VendorQuotas {
    /// A Stripe or GitHub row by name.
    pub fn row(&self, name: &str) -> Option<&QuotaRow> {
        self.stripe
            .iter()
            .chain(&self.github)
            .find(|r| r.name == name)
    }
}

const STRIPE_SECS: u64 = 10;
const GITHUB_HOURS: u64 = 3;

/// Evenly spaced times: `rate` a second for `secs` seconds.
fn paced(rate: u64, secs: u64) -> Vec<u64> {
    (0..rate * secs).map(|i| i * SEC / rate).collect()
}

fn run<A: crate::Algorithm>(
    name: &str,
    alg: &str,
    quota: Quota,
    times: &[u64],
) -> Result<(QuotaRow, Vec<(u64, u64)>), SimError> {
    let clock = ManualClock::new();
    let limiter = RateLimiter::<A, _>::with_clock(quota, clock.clone())?;
    let mut admitted = Vec::new();
    for &t in times {
        clock.set(t);
        if limiter.check().is_allowed() {
            admitted.push((t, 1));
        }
    }
    let period = quota.period_nanos();
    Ok((
        QuotaRow {
            name: name.into(),
            policy: format!("{alg}:{quota}"),
            offered: times.len() as u64,
            admitted: admitted.len() as u64,
            max_in_period: max_in_span(&admitted, period),
            max_in_window: max_in_window(&admitted, period),
        },
        admitted,
    ))
}

/// Runs the scenario; `seed` sets the GraphQL queries' costs.
pub fn vendor_quotas(seed: u64) -> Result<Scenario<VendorQuotas>, SimError> {
    // Stripe: reads offered at 150/s, writes at 60/s.
    let reads = paced(150, STRIPE_SECS);
    let writes = paced(60, STRIPE_SECS);
    let mut stripe = Vec::new();
    let mut stripe_series = Vec::new();
    let specs = [
        ("Stripe live, read", presets::stripe_live_read(), &reads),
        ("Stripe live, write", presets::stripe_live_write(), &writes),
        ("Stripe test, read", presets::stripe_test_read(), &reads),
        ("Stripe test, write", presets::stripe_test_write(), &writes),
    ];
    for (i, (name, quota, times)) in specs.into_iter().enumerate() {
        let (r, admitted) = run::<TokenBucket>(name, "token", quota, times)?;
        let pts = steps_per_second(&per_bucket(&admitted, SEC));
        // Test-mode reads and writes share one limit and both exceed it, so
        // their lines coincide after the first second: dash one.
        let mark = if i == 3 { Mark::DashedStep } else { Mark::Step };
        stripe_series.push(Series::new(
            format!("{name} ({}/s): {}", quota.limit(), r.admitted),
            mark,
            i,
            pts,
        ));
        stripe.push(r);
    }
    let mut stripe_panel = Panel::new(
        "Stripe: admitted per second (reads offered 150/s, writes 60/s)",
        "time (s)",
        "requests admitted per second",
        Body::Xy(stripe_series),
    );
    stripe_panel.y_range = Some((0.0, 200.0));
    stripe_panel.legend = SeriesLabelPosition::UpperRight;

    // GitHub REST: a client at 2 requests/s (7,200 an hour) for 3 hours.
    let client = paced(2, GITHUB_HOURS * 3600);
    let mut github = Vec::new();
    let mut github_panels = Vec::new();
    let specs = [
        (
            "GitHub REST, signed in",
            presets::github_rest_authenticated(),
        ),
        (
            "GitHub REST, anonymous",
            presets::github_rest_unauthenticated(),
        ),
    ];
    for (i, (name, quota)) in specs.into_iter().enumerate() {
        let (r, admitted) = run::<FixedWindow>(name, "fixed", quota, &client)?;
        let mut p = Panel::new(
            format!("{name}: {}/h, client at 2 requests/s", quota.limit()),
            "time (hours)",
            "requests admitted (cumulative)",
            Body::Xy(vec![
                Series::new(
                    format!("admitted: {}", r.admitted),
                    Mark::Line,
                    2 + i,
                    cumulative_hours(&admitted),
                ),
                Series::new(
                    format!("offered: {}", r.offered),
                    Mark::Dashed,
                    6,
                    vec![(0.0, 0.0), (GITHUB_HOURS as f64, r.offered as f64)],
                ),
            ]),
        );
        if let Body::Xy(series) = &mut p.body {
            series.push(Series::new(
                format!("allowed: {} per hourly window", quota.limit()),
                Mark::Dashed,
                0,
                allowance(quota.limit(), GITHUB_HOURS),
            ));
        }
        p.y_range = Some((0.0, 3.6 * f64::from(quota.limit())));
        p.x_range = Some((0.0, GITHUB_HOURS as f64));
        p.legend = SeriesLabelPosition::LowerRight;
        github_panels.push(p);
        github.push(r);
    }

    // GitHub GraphQL: a query every 6 s (600 an hour), each costing 1 to 50
    // points (most cheap), under 5,000 points an hour.
    let mut rng = SplitMix64::new(seed ^ 0x6772_6170_686C);
    let quota = presets::github_graphql_points();
    let clock = ManualClock::new();
    let points = RateLimiter::<FixedWindow, _>::with_clock(quota, clock.clone())?;
    let (mut offered, mut admitted_q, mut admitted_pts, mut queries) =
        (0u64, 0u64, Vec::new(), 0u64);
    let mut offered_pts = Vec::new();
    let mut t = 0;
    while t < GITHUB_HOURS * 3600 * SEC {
        clock.set(t);
        let u = rng.unit();
        let cost = 1 + (u * u * 49.0) as u32;
        queries += 1;
        offered += u64::from(cost);
        offered_pts.push((t, u64::from(cost)));
        if points.check_n(cost)?.is_allowed() {
            admitted_q += 1;
            admitted_pts.push((t, u64::from(cost)));
        }
        t += 6 * SEC;
    }
    let graphql = GraphqlRow {
        policy: format!("fixed:{quota}"),
        queries,
        queries_admitted: admitted_q,
        points_offered: offered,
        points_admitted: admitted_pts.iter().map(|e| e.1).sum(),
        max_points_in_window: max_in_window(&admitted_pts, quota.period_nanos()),
    };
    let mut gql_panel = Panel::new(
        "GitHub GraphQL: 5,000 points/h, a query every 6 s costing 1-50 points",
        "time (hours)",
        "points (cumulative)",
        Body::Xy(vec![
            Series::new(
                format!("points admitted: {}", graphql.points_admitted),
                Mark::Line,
                3,
                cumulative_hours(&admitted_pts),
            ),
            Series::new(
                format!("points asked: {}", graphql.points_offered),
                Mark::Dashed,
                6,
                cumulative_hours(&offered_pts),
            ),
        ]),
    );
    if let Body::Xy(series) = &mut gql_panel.body {
        series.push(Series::new(
            "allowed: 5,000 points per hourly window",
            Mark::Dashed,
            0,
            allowance(5000, GITHUB_HOURS),
        ));
    }
    gql_panel.x_range = Some((0.0, GITHUB_HOURS as f64));
    gql_panel.legend = SeriesLabelPosition::UpperLeft;

    let mut panels = vec![stripe_panel];
    panels.extend(github_panels);
    panels.push(gql_panel);
    let svg = render(&Figure {
        title: "Published vendor limits under a client that asks for more".into(),
        note: "Stripe as token buckets (burst = the per-second limit); GitHub as fixed hourly \
               windows starting at the first request. Figures from the vendors' pages (rategate::presets)."
            .into(),
        panels,
        cols: 2,
        width: 1300,
        panel_height: 430,
    })?;
    let mut table = vec![row(&[
        &"limit",
        &"policy",
        &"offered",
        &"admitted",
        &"most in one period",
    ])];
    for r in stripe.iter().chain(&github) {
        table.push(row(&[
            &r.name,
            &r.policy,
            &r.offered,
            &r.admitted,
            &r.max_in_period,
        ]));
    }
    table.push(row(&[
        &"GitHub GraphQL (points)",
        &graphql.policy,
        &graphql.points_offered,
        &graphql.points_admitted,
        &graphql.max_points_in_window,
    ]));
    Ok(Scenario {
        id: "vendor_quotas",
        title: "Real-world quotas",
        about: "Stripe's 100 requests a second in live mode and 25 in test mode, for reads and \
                writes separately, under a client reading at 150/s and writing at 60/s for 10 s; \
                GitHub's REST limits, 5,000 an hour signed in and 60 anonymous, under a client at \
                2 requests a second for 3 hours; GitHub GraphQL's 5,000 points an hour under \
                queries of 1 to 50 points."
            .into(),
        summary: VendorQuotas {
            stripe,
            github,
            graphql,
        },
        table,
        svg,
    })
}

fn steps_per_second(counts: &[u64]) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = counts
        .iter()
        .enumerate()
        .map(|(s, &n)| (s as f64, n as f64))
        .collect();
    if let Some(&(x, n)) = pts.last() {
        pts.push((x + 1.0, n));
    }
    pts
}

/// Cumulative units over time in hours, thinned to at most ~2,000 points.
fn cumulative_hours(events: &[(u64, u64)]) -> Vec<(f64, f64)> {
    let step = (events.len() / 2000).max(1);
    let mut out = vec![(0.0, 0.0)];
    let mut sum = 0;
    for (i, &(t, n)) in events.iter().enumerate() {
        sum += n;
        if i % step == 0 || i + 1 == events.len() {
            out.push((t as f64 / 3600.0 / SEC as f64, sum as f64));
        }
    }
    out
}

/// What hourly windows allow in all, by the end of each: a staircase.
fn allowance(limit: u32, hours: u64) -> Vec<(f64, f64)> {
    let mut pts = Vec::new();
    for h in 0..hours {
        let total = f64::from(limit) * (h + 1) as f64;
        pts.push((h as f64, total));
        pts.push(((h + 1) as f64, total));
    }
    pts
}
