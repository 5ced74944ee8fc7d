//! Replay = nginx: logs written by a real nginx 1.22 with `limit_req`
//! (`scripts/record-nginx.py`: five configurations, seeded bursty traffic
//! from twelve loopback addresses) replayed under the matching policy,
//! request by request.
//!
//! nginx decides on its own millisecond clock (cached per event loop
//! turn), while the log's `$msec` is the wall clock when the line was
//! written; so of two requests of one client, the first can find a slot
//! free on one clock and not on the other, and the second then the
//! opposite. Every request on which the replay and nginx disagree must be
//! one of such a pair: the same client, the opposite disagreement, next
//! to each other among that client's requests, arrivals at most
//! [`SWAP_MS`] apart. A disagreement with no such partner (the client's
//! last request, or one after which the difference drained away) must be
//! on the clock's edge: moved by [`EDGE_MS`], the replay decides it as
//! nginx did.

#![cfg(feature = "sim")]

use rategate::sim::replay::{ReplayOptions, replay_file};
use std::collections::HashMap;
use std::path::PathBuf;

const LOG_FORMAT: &str = "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" $msec $request_time";

/// The most two swapped requests' arrivals are apart.
const SWAP_MS: f64 = 1_000.0;

/// How far a lone disagreement's time may be from a time at which the
/// replay decides as nginx did.
const EDGE_MS: u64 = 5;

/// One request on which the replay and nginx disagree.
#[derive(Debug, Clone)]
struct Disagreement {
    line: u64,
    key: String,
    time: f64,
    /// What the replay did (nginx did the opposite).
    replay_allowed: bool,
}

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/nginx")
        .join(format!("{name}.log"))
}

/// nginx's decision per line: 503 is `limit_req`'s rejection.
fn nginx_decisions(name: &str) -> HashMap<u64, bool> {
    let text = std::fs::read_to_string(data(name)).unwrap();
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let status = if line.contains("\" 503 ") {
                false
            } else {
                assert!(line.contains("\" 200 "), "line {}: {line}", i + 1);
                true
            };
            (i as u64 + 1, status)
        })
        .collect()
}

/// Replays `name`'s log (or `log`, a changed copy) under `policy` and
/// returns the requests, the disagreements with nginx and each client's
/// lines in arrival order.
fn compare(
    name: &str,
    policy: &str,
    log: Option<&str>,
) -> (usize, Vec<Disagreement>, HashMap<String, Vec<u64>>) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "rategate-nginx-{name}-{}-{run}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = match log {
        Some(text) => {
            let path = dir.join("log");
            std::fs::write(&path, text).unwrap();
            path
        }
        None => data(name),
    };
    let decisions = dir.join("decisions.csv");
    let mut opts = ReplayOptions::new(vec![policy.parse().unwrap()]);
    opts.log_format = Some(LOG_FORMAT.into());
    // The longest delay: a burst of 5 at 30 r/m, 10 s.
    opts.reorder_secs = 15.0;
    opts.decisions = Some(decisions.clone());
    let report = replay_file(&path, &opts).unwrap();
    assert_eq!(report.malformed, 0, "{:?}", report.malformed_lines);
    assert_eq!(report.steps_back, 0);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let nginx = nginx_decisions(name);
    let text = std::fs::read_to_string(&decisions).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let mut disagreements = Vec::new();
    let mut requests = 0;
    // The decisions come in arrival order.
    let mut order: HashMap<String, Vec<u64>> = HashMap::new();
    for row in text.lines().skip(1) {
        let fields: Vec<&str> = row.split(',').collect();
        let [line, time, key, _cost, decision] = fields[..] else {
            panic!("a decisions row: {row}");
        };
        let line: u64 = line.parse().unwrap();
        let replay_allowed = decision == "allowed";
        requests += 1;
        order.entry(key.to_string()).or_default().push(line);
        if replay_allowed != nginx[&line] {
            disagreements.push(Disagreement {
                line,
                key: key.to_string(),
                time: time.parse().unwrap(),
                replay_allowed,
            });
        }
    }
    assert_eq!(requests, nginx.len(), "every line replayed once");
    (requests, disagreements, order)
}

/// Pairs each disagreement with an opposite one of the same client that
/// is that client's next request, at most [`SWAP_MS`] later; returns those
/// left unpaired. `order` is each client's lines in arrival order.
fn unpaired(mut left: Vec<Disagreement>, order: &HashMap<String, Vec<u64>>) -> Vec<Disagreement> {
    left.sort_by(|a, b| a.time.total_cmp(&b.time));
    let next_of = |d: &Disagreement| {
        let lines = &order[&d.key];
        let at = lines.iter().position(|&l| l == d.line)?;
        lines.get(at + 1).copied()
    };
    let mut lone = Vec::new();
    while !left.is_empty() {
        let first = left.remove(0);
        let next = next_of(&first);
        let partner = left.iter().position(|d| {
            Some(d.line) == next
                && d.replay_allowed != first.replay_allowed
                && (d.time - first.time) * 1000.0 <= SWAP_MS
        });
        match partner {
            Some(i) => {
                left.remove(i);
            }
            None => lone.push(first),
        }
    }
    lone
}

/// Whether moving line `line`'s time by up to [`EDGE_MS`] either way
/// makes the replay decide it as nginx did.
fn on_the_edge(name: &str, policy: &str, line: u64) -> bool {
    let text = std::fs::read_to_string(data(name)).unwrap();
    [-(EDGE_MS as i64), EDGE_MS as i64]
        .into_iter()
        .any(|shift| {
            let moved: String = text
                .lines()
                .enumerate()
                .map(|(i, l)| {
                    if i as u64 + 1 != line {
                        return format!("{l}\n");
                    }
                    // `... $msec $request_time`: move the end, so the arrival.
                    let mut fields: Vec<&str> = l.rsplitn(3, ' ').collect();
                    fields.reverse();
                    let [head, msec, took] = fields[..] else {
                        panic!("line {line}: {l}");
                    };
                    let (secs, ms) = msec.split_once('.').unwrap();
                    let ms =
                        (secs.parse::<i64>().unwrap() * 1000 + ms.parse::<i64>().unwrap()) + shift;
                    format!("{head} {}.{:03} {took}\n", ms / 1000, ms % 1000)
                })
                .collect();
            let (_, disagreements, _) = compare(name, policy, Some(&moved));
            !disagreements.iter().any(|d| d.line == line)
        })
}

fn agrees(name: &str, policy: &str) {
    let (requests, disagreements, order) = compare(name, policy, None);
    let swapped = disagreements.len();
    let unpaired = unpaired(disagreements, &order);
    let edge = unpaired.len();
    let lone: Vec<Disagreement> = unpaired
        .into_iter()
        .filter(|d| !on_the_edge(name, policy, d.line))
        .collect();
    eprintln!(
        "{name} under {policy}: {requests} requests, {swapped} disagree with nginx \
         ({} in swapped pairs, {} on the clock's edge)",
        swapped - edge,
        edge - lone.len()
    );
    assert!(
        lone.is_empty(),
        "{name} under {policy}: {} of {requests} requests disagree with nginx, \
         neither in a swapped pair nor on the clock's edge: {lone:?}",
        lone.len()
    );
    // Swaps are the exception: a few in a hundred at most.
    assert!(
        swapped * 20 <= requests,
        "{name}: {swapped} of {requests} requests swapped"
    );
}

#[test]
fn nodelay() {
    agrees("nodelay", "leaky:10r/s burst=5 nodelay");
}

#[test]
fn delay() {
    agrees("delay", "leaky:5r/s burst=10");
}

#[test]
fn delay_n() {
    agrees("delay3", "leaky:5r/s burst=10 delay=3");
}

#[test]
fn per_minute() {
    agrees("per-minute", "leaky:30r/m burst=5");
}

#[test]
fn no_burst() {
    agrees("no-burst", "leaky:2r/s");
}

/// The same logs read as the default `combined` format (whole seconds, the
/// time a request ended) are replayed with a warning that says so.
#[test]
fn the_combined_part_alone_is_warned_about() {
    let mut opts = ReplayOptions::new(vec!["leaky:10r/s burst=5 nodelay".parse().unwrap()]);
    // The combined format does not read the two fields after it: give it
    // the lines cut back to the combined part.
    let text = std::fs::read_to_string(data("nodelay")).unwrap();
    let combined: String = text
        .lines()
        .map(|l| {
            let cut = l.rfind(" \"record-nginx\"").unwrap() + " \"record-nginx\"".len();
            format!("{}\n", &l[..cut])
        })
        .collect();
    opts.progress = false;
    let report = rategate::sim::replay::replay(combined.as_bytes(), None, &opts).unwrap();
    assert_eq!(report.malformed, 0);
    assert_eq!(report.time_resolution_secs, 1.0);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("steps of 1 s") && w.contains("$msec")),
        "{:?}",
        report.warnings
    );
}
