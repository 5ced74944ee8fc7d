//! Three servers sharing one limit: local counters only, a central counter,
//! batched sync every 1 s and every 100 ms, and leases.
//!
//! The shared store is modelled in process, with instant round trips: the
//! central counter is one rategate limiter that every server asks; a synced
//! server decides on its own limiter and, at each of its syncs, adds its
//! admissions to a per-window total and charges the other servers' new
//! admissions to its limiter (as `SyncedLimiter` folds them into its state);
//! a leasing server admits from a slice of the window's budget that it
//! takes, at each of its ticks, from one rategate limiter holding the global
//! budget (as `LeasedLimiter` does from Redis). The crate's Redis modes run
//! the same shape against a real Redis (`examples/multi_node.rs`).

use super::{Scenario, max_in_window, per_bucket, row};
use crate::sim::plot::{Body, Figure, Mark, Panel, Series, render};
use crate::sim::{SEC, SimError, SplitMix64};
use crate::{FixedWindow, ManualClock, Quota, RateLimiter};
use plotters::prelude::SeriesLabelPosition;
use std::collections::HashMap;

/// How the servers share the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerMode {
    /// Each server enforces the whole limit alone.
    LocalOnly,
    /// Every request asks one shared counter.
    Central,
    /// Local decisions, synced with the shared store every `interval_ms`.
    Synced {
        /// The sync interval.
        interval_ms: u64,
    },
    /// Local decisions on slices of the window's budget, renewed every
    /// `tick_ms`.
    Leased {
        /// The renewal tick.
        tick_ms: u64,
    },
}

impl ServerMode {
    /// A name for people.
    pub fn label(self) -> String {
        match self {
            ServerMode::LocalOnly => "local counters only".into(),
            ServerMode::Central => "central counter".into(),
            ServerMode::Synced { interval_ms } if interval_ms % 1000 == 0 => {
                format!("batched sync every {} s", interval_ms / 1000)
            }
            ServerMode::Synced { interval_ms } => format!("batched sync every {interval_ms} ms"),
            ServerMode::Leased { tick_ms } => format!("leases (renewed every {tick_ms} ms)"),
        }
    }
}

/// One mode's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServerRow {
    /// The mode.
    pub mode: ServerMode,
    /// Requests admitted by all servers together.
    pub admitted: u64,
    /// What one exact limiter allows over the run (`limit x seconds`).
    pub allowed: u64,
    /// The most admitted in one window (second).
    pub worst_window: u64,
    /// Admitted in each second.
    pub per_second: Vec<u64>,
}

/// Three servers share 100 requests a second, fixed windows, 10 s; each
/// server is offered 100 a second (300 in all, three times the limit).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ThreeServers {
    /// Requests a second the shared key allows.
    pub limit: u64,
    /// Servers.
    pub servers: u64,
    /// Requests offered over the run, all servers.
    pub offered: u64,
    /// Seconds.
    pub seconds: u64,
    /// One row per mode.
    pub rows: Vec<ServerRow>,
}

impl ThreeServers {
    /// The row of a mode.
    pub fn row(&self, mode: ServerMode) -> Option<&ServerRow> {
        self.rows.iter().find(|r| r.mode == mode)
    }
}

const LIMIT: u32 = 100;
const SERVERS: usize = 3;
const SECONDS: u64 = 10;
/// Each server's requests are evenly spaced, 100 a second, at its own phase.
const GAP: u64 = SEC / 100;

pub(crate) const MODES: [ServerMode; 5] = [
    ServerMode::LocalOnly,
    ServerMode::Central,
    ServerMode::Synced { interval_ms: 1000 },
    ServerMode::Synced { interval_ms: 100 },
    ServerMode::Leased { tick_ms: 100 },
];

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// A sync or renewal: before arrivals at the same instant.
    Tick,
    Arrival,
}

/// Runs the scenario; `seed` sets each server's phase and tick offsets.
pub fn three_servers(seed: u64) -> Result<Scenario<ThreeServers>, SimError> {
    let mut rng = SplitMix64::new(seed);
    let phases: Vec<u64> = (0..SERVERS).map(|_| rng.below(GAP)).collect();
    let tick_offsets: Vec<f64> = (0..SERVERS).map(|_| rng.unit()).collect();
    let mut rows = Vec::new();
    let mut inside = Vec::new();
    for (i, mode) in MODES.into_iter().enumerate() {
        let admitted = run_mode(mode, &phases, &tick_offsets)?;
        let per_second = per_bucket(&admitted, SEC);
        let row = ServerRow {
            mode,
            admitted: admitted.len() as u64,
            allowed: u64::from(LIMIT) * SECONDS,
            worst_window: max_in_window(&admitted, SEC),
            per_second,
        };
        inside.push(Series::new(
            format!("{}: worst second {}", mode.label(), row.worst_window),
            Mark::Step,
            i,
            within_windows(&admitted, 2),
        ));
        rows.push(row);
    }
    let offered = SERVERS as u64 * SECONDS * SEC / GAP;
    let mut bars = Panel::new(
        "Admitted per second, all servers (mean of 10 s)",
        "how the servers share the limit",
        "requests admitted per second",
        Body::Bars(
            rows.iter()
                .map(|r| (short(r.mode), r.admitted as f64 / SECONDS as f64))
                .collect(),
        ),
    );
    bars.hlines.push((f64::from(LIMIT), "limit: 100/s".into()));
    bars.hlines
        .push((3.0 * f64::from(LIMIT), "offered: 300/s".into()));
    bars.y_range = Some((0.0, 380.0));
    bars.legend = SeriesLabelPosition::UpperRight;
    let mut window = Panel::new(
        "Inside the first two 1 s windows: admitted so far in the window",
        "time (s)",
        "admitted in the current window",
        Body::Xy(inside),
    );
    window
        .hlines
        .push((f64::from(LIMIT), "limit: 100 per window".into()));
    window.x_range = Some((0.0, 2.0));
    window.y_range = Some((0.0, 440.0));
    window.legend = SeriesLabelPosition::UpperLeft;
    let svg = render(&Figure {
        title: "Three servers sharing 100 requests/s, each offered 100/s (3x the limit in all)"
            .into(),
        note: "The shared store is modelled in process with instant round trips (not Redis); \
               each server's own decisions run on a rategate fixed window."
            .into(),
        panels: vec![bars, window],
        cols: 2,
        width: 1400,
        panel_height: 520,
    })?;
    let mut table = vec![row(&[
        &"mode",
        &"admitted",
        &"one limiter allows",
        &"overshoot",
        &"worst second",
    ])];
    for r in &rows {
        let over = (r.admitted as f64 / r.allowed as f64 - 1.0) * 100.0;
        table.push(row(&[
            &r.mode.label(),
            &r.admitted,
            &r.allowed,
            &format!("{over:+.1}%"),
            &r.worst_window,
        ]));
    }
    Ok(Scenario {
        id: "three_servers",
        title: "Three servers, one limit",
        about: "Three app servers share a limit of 100 requests a second on one key (fixed \
                windows of 1 s); each is offered 100 a second, three times the limit in all, \
                for 10 s. Local counters let each server admit the whole limit; a central \
                counter admits exactly the limit; batched sync admits what the servers cannot \
                see between syncs (a sync as long as the window is no limit at all); leases \
                never exceed the limit. The shared store is modelled in process with instant \
                round trips."
            .into(),
        summary: ThreeServers {
            limit: u64::from(LIMIT),
            servers: SERVERS as u64,
            offered,
            seconds: SECONDS,
            rows,
        },
        table,
        svg,
    })
}

fn short(mode: ServerMode) -> String {
    match mode {
        ServerMode::LocalOnly => "local only".into(),
        ServerMode::Central => "central".into(),
        ServerMode::Synced { interval_ms } if interval_ms % 1000 == 0 => {
            format!("sync {} s", interval_ms / 1000)
        }
        ServerMode::Synced { interval_ms } => format!("sync {interval_ms} ms"),
        ServerMode::Leased { .. } => "leases".into(),
    }
}

/// Admitted so far in the current 1 s window, over the first `windows`
/// windows: (seconds, count), restarting from 0 at each window.
fn within_windows(admitted: &[(u64, u64)], windows: u64) -> Vec<(f64, f64)> {
    let mut pts = Vec::new();
    let mut count = 0;
    let mut current = u64::MAX;
    for &(t, n) in admitted.iter().take_while(|e| e.0 < windows * SEC) {
        let w = t / SEC;
        if w != current {
            pts.push((w as f64, 0.0));
            current = w;
            count = 0;
        }
        count += n;
        pts.push((t as f64 / SEC as f64, count as f64));
    }
    if let Some(&(_, y)) = pts.last() {
        pts.push((windows as f64, y));
    }
    pts
}

/// Arrivals and ticks of every server, in time order.
fn events(phases: &[u64], tick_offsets: &[f64], tick: Option<u64>) -> Vec<(u64, Kind, usize)> {
    let mut ev = Vec::new();
    for (s, &phase) in phases.iter().enumerate() {
        let mut t = phase;
        while t < SECONDS * SEC {
            ev.push((t, Kind::Arrival, s));
            t += GAP;
        }
        if let Some(tick) = tick {
            let mut t = (tick_offsets[s] * tick as f64) as u64;
            while t < SECONDS * SEC {
                ev.push((t, Kind::Tick, s));
                t += tick;
            }
        }
    }
    ev.sort_unstable();
    ev
}

fn window_limiter(clock: &ManualClock) -> Result<RateLimiter<FixedWindow, ManualClock>, SimError> {
    Ok(RateLimiter::with_clock(
        Quota::per_second(LIMIT)?,
        clock.clone(),
    )?)
}

/// One synced server: its limiter and what it has exchanged per window.
struct SyncedServer {
    local: RateLimiter<FixedWindow, ManualClock>,
    /// Own admissions not yet sent, per window.
    unsent: HashMap<u64, u64>,
    /// Own admissions sent, per window.
    sent: HashMap<u64, u64>,
    /// Other servers' admissions already charged, per window.
    folded: HashMap<u64, u64>,
}

/// One leasing server: units held for a window, and demand since its tick.
struct LeasingServer {
    held: u64,
    window: u64,
    demand: u64,
}

/// The admission times of every server, in time order.
fn run_mode(
    mode: ServerMode,
    phases: &[u64],
    tick_offsets: &[f64],
) -> Result<Vec<(u64, u64)>, SimError> {
    let clock = ManualClock::new();
    let mut admitted = Vec::new();
    match mode {
        ServerMode::LocalOnly | ServerMode::Central => {
            let shared = window_limiter(&clock)?;
            let locals = (0..SERVERS)
                .map(|_| window_limiter(&clock))
                .collect::<Result<Vec<_>, _>>()?;
            for (t, _, s) in events(phases, tick_offsets, None) {
                clock.set(t);
                let limiter = if mode == ServerMode::Central {
                    &shared
                } else {
                    &locals[s]
                };
                if limiter.check().is_allowed() {
                    admitted.push((t, 1));
                }
            }
        }
        ServerMode::Synced { interval_ms } => {
            let mut store: HashMap<u64, u64> = HashMap::new();
            let mut servers = (0..SERVERS)
                .map(|_| {
                    Ok(SyncedServer {
                        local: window_limiter(&clock)?,
                        unsent: HashMap::new(),
                        sent: HashMap::new(),
                        folded: HashMap::new(),
                    })
                })
                .collect::<Result<Vec<_>, SimError>>()?;
            for (t, kind, s) in events(phases, tick_offsets, Some(interval_ms * 1_000_000)) {
                clock.set(t);
                let server = &mut servers[s];
                let window = t / SEC;
                match kind {
                    Kind::Arrival => {
                        if server.local.check().is_allowed() {
                            admitted.push((t, 1));
                            *server.unsent.entry(window).or_default() += 1;
                        }
                    }
                    Kind::Tick => {
                        for (w, units) in server.unsent.drain() {
                            *store.entry(w).or_default() += units;
                            *server.sent.entry(w).or_default() += units;
                        }
                        let total = store.get(&window).copied().unwrap_or(0);
                        let others = total - server.sent.get(&window).copied().unwrap_or(0);
                        let folded = server.folded.entry(window).or_default();
                        let news = others - *folded;
                        *folded = others;
                        // The window's count saturates at the limit, as the
                        // synced limiter's fold clamps it.
                        let room = u64::from(server.local.peek().remaining());
                        let charge = news.min(room);
                        if charge > 0 {
                            let charge = u32::try_from(charge).unwrap_or(u32::MAX);
                            server.local.check_n(charge)?;
                        }
                    }
                }
            }
        }
        ServerMode::Leased { tick_ms } => {
            let budget = window_limiter(&clock)?;
            let mut servers: Vec<LeasingServer> = (0..SERVERS)
                .map(|_| LeasingServer {
                    held: 0,
                    window: 0,
                    demand: 0,
                })
                .collect();
            for (t, kind, s) in events(phases, tick_offsets, Some(tick_ms * 1_000_000)) {
                clock.set(t);
                let server = &mut servers[s];
                let window = t / SEC;
                if server.window != window {
                    // A slice dies with its window.
                    server.held = 0;
                    server.window = window;
                }
                match kind {
                    Kind::Arrival => {
                        server.demand += 1;
                        if server.held > 0 {
                            server.held -= 1;
                            admitted.push((t, 1));
                        }
                    }
                    Kind::Tick => {
                        // Ask for one tick's demand (at least 1) beyond what
                        // is held; the budget grants what is left of it.
                        let want = server.demand.max(1).saturating_sub(server.held);
                        server.demand = 0;
                        let room = u64::from(budget.peek().remaining());
                        let grant = want.min(room);
                        if grant > 0 {
                            let grant32 = u32::try_from(grant).unwrap_or(u32::MAX);
                            if budget.check_n(grant32)?.is_allowed() {
                                server.held += grant;
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(admitted)
}
