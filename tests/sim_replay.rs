//! Replay: both formats, malformed lines, bounded memory, and the shipped
//! sample log.

#![cfg(feature = "sim")]

use rategate::sim::replay::{LogFormat, ReplayOptions, ReplayReport, replay, replay_file};
use rategate::sim::{LimitSpec, SplitMix64, sample};
use std::path::Path;

fn policies(list: &[&str]) -> Vec<LimitSpec> {
    list.iter().map(|p| p.parse().unwrap()).collect()
}

fn run(text: &str, list: &[&str]) -> ReplayReport {
    replay(text.as_bytes(), None, &ReplayOptions::new(policies(list))).unwrap()
}

const NGINX: &str = r#"10.0.0.1 - - [01/May/2024:10:00:00 +0000] "GET / HTTP/1.1" 200 12 "-" "curl/8"
10.0.0.1 - - [01/May/2024:10:00:00 +0000] "GET / HTTP/1.1" 200 12 "-" "curl/8"
this line is not an access log line
10.0.0.1 - - [01/May/2024:10:00:01 +0000] "GET / HTTP/1.1" 200 12 "-" "curl/8"

10.0.0.2 - - [01/May/2024:10:00:01 +0000] "GET / HTTP/1.1" 200 12 "-" "curl/8"
10.0.0.1 - - [31/Foo/2024:10:00:01 +0000] "GET / HTTP/1.1" 200 12 "-" "curl/8"
10.0.0.1 - - [01/May/2024:10:00:02 +0000] "GET / HTTP/1.1" 200 12 "-" "curl/8"
10.0.0.1 - - [01/May/2024:10:01:00 +0000] "GET / HTTP/1.1" 200 12 "-" "curl/8"
"#;

#[test]
fn nginx_log_with_malformed_lines() {
    let r = run(NGINX, &["fixed:3/m", "token:1/s burst=1"]);
    assert_eq!(r.format, LogFormat::Nginx);
    assert_eq!((r.lines, r.requests, r.malformed), (9, 6, 2));
    let lines: Vec<(u64, &str)> = r
        .malformed_lines
        .iter()
        .map(|m| (m.line, m.reason.as_str()))
        .collect();
    assert_eq!(
        lines,
        vec![
            (3, "expected \" - \" after $remote_addr"),
            (7, "$time_local: unknown month")
        ]
    );
    assert_eq!(r.first_time, 1_714_557_600.0);
    assert_eq!(r.last_time, 1_714_557_660.0);
    // fixed 3 per minute per client: 10.0.0.1 sends 4 in the first minute
    // (one denied) and 1 in the next; 10.0.0.2 sends 1.
    let fixed = &r.policies[0];
    assert_eq!(fixed.policy, "fixed:3/1m");
    assert_eq!((fixed.requests, fixed.admitted, fixed.denied), (6, 5, 1));
    assert_eq!(fixed.top_denied[0].key, "10.0.0.1");
    assert_eq!(
        (fixed.top_denied[0].denied, fixed.top_denied[0].overcount),
        (1, 0)
    );
    // token 1/s, burst 1: 10.0.0.1 at 0 s, 0 s, 1 s, 2 s, 60 s: one denied.
    let token = &r.policies[1];
    assert_eq!((token.admitted, token.denied), (5, 1));
    // The series: one bucket per second over 61 s, summing to the totals.
    assert_eq!(r.bucket_secs, 1.0);
    assert_eq!(r.offered_per_bucket.len(), 61);
    assert_eq!(r.offered_per_bucket.iter().sum::<u64>(), 6);
    assert_eq!(fixed.admitted_per_bucket.iter().sum::<u64>(), 5);
    assert!(
        r.text()
            .contains("line 3: expected \" - \" after $remote_addr")
    );
}

#[test]
fn csv_with_header_costs_and_malformed_lines() {
    let csv = "time,key,cost\n\
               0,alice,2\n\
               0.5,alice,2\n\
               1,bob\n\
               2024-05-01T10:00:00Z,carol,1\n\
               x,alice,1\n\
               1,alice,-1\n\
               1,alice,1,extra\n\
               1,,1\n\
               1.5,alice,50\n\
               \"2\",\"alice, the second\",1\n";
    let r = run(csv, &["token:4/s"]);
    assert_eq!(r.format, LogFormat::Csv);
    assert_eq!((r.requests, r.malformed), (6, 4));
    let lines: Vec<u64> = r.malformed_lines.iter().map(|m| m.line).collect();
    assert_eq!(lines, vec![6, 7, 8, 9]);
    let p = &r.policies[0];
    // alice: 2 + 2 at 0 s and 0.5 s (4 tokens, 2 refilled by 0.5 s: both
    // pass), cost 50 can never pass under a capacity of 4.
    assert_eq!((p.admitted, p.denied, p.never_pass), (5, 1, 1));
    assert_eq!((p.cost_admitted, p.cost_denied), (2 + 2 + 1 + 1 + 1, 50));
    assert_eq!(p.top_denied[0].key, "alice");
    // A quoted key with a comma is one key.
    assert_eq!(p.requests, 6);
}

#[test]
fn format_can_be_forced_and_wrong_formats_are_malformed_not_panics() {
    let mut opts = ReplayOptions::new(policies(&["fixed:1/s"]));
    opts.format = Some(LogFormat::Csv);
    let r = replay(NGINX.as_bytes(), None, &opts).unwrap();
    assert_eq!(r.requests, 0);
    assert_eq!(r.malformed, 8);
    // Bytes that are not text, long lines, lone quotes: counted, no panic.
    let mut rng = SplitMix64::new(7);
    let mut junk = Vec::new();
    for _ in 0..2000 {
        let len = rng.below(300);
        for _ in 0..len {
            junk.push(rng.below(256) as u8);
        }
        junk.push(b'\n');
    }
    for format in [LogFormat::Csv, LogFormat::Nginx] {
        opts.format = Some(format);
        let r = replay(&junk[..], None, &opts).unwrap();
        assert!(
            r.malformed > 0 && r.malformed_lines.len() == 20,
            "{format:?}"
        );
    }
}

#[test]
fn bad_policies_are_typed_errors() {
    for bad in [
        "",
        "quick:10/s",
        "leaky:10r/s burst=20 delay=x",
        "token:0/s",
        "counter:2000000/m",
        "leaky:1/2000s",
    ] {
        let e = bad.parse::<LimitSpec>().unwrap_err();
        assert!(!e.to_string().is_empty(), "{bad}");
    }
    let e = replay(&b""[..], None, &ReplayOptions::new(vec![])).unwrap_err();
    assert!(e.to_string().contains("no policy"));
    assert!(
        replay_file(
            Path::new("/no/such/file.log"),
            &ReplayOptions::new(policies(&["5000/h"]))
        )
        .is_err()
    );
}

#[test]
fn long_spans_widen_the_buckets_and_the_key_cap_holds() {
    // 3 hours, one request every 2 s from 200 rotating keys.
    let mut csv = String::new();
    for i in 0..5400u64 {
        csv.push_str(&format!("{},k{},1\n", i * 2, i % 200));
    }
    let mut opts = ReplayOptions::new(policies(&["log:1/h"]));
    opts.max_keys = 10;
    let r = replay(csv.as_bytes(), None, &opts).unwrap();
    assert!(
        r.bucket_secs >= 8.0 && r.offered_per_bucket.len() <= 2048,
        "{}",
        r.bucket_secs
    );
    assert_eq!(r.offered_per_bucket.iter().sum::<u64>(), 5400);
    let p = &r.policies[0];
    assert!(p.keys_at_end <= 10);
    assert!(p.overflowed > 0);
    assert_eq!(p.admitted_per_bucket.iter().sum::<u64>(), p.admitted);
}

#[test]
fn shipped_samples_are_the_generators_output_and_replay_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sim");
    let mut nginx = Vec::new();
    sample::write_nginx_log(&mut nginx, 3000, 0x5EED_2024).unwrap();
    assert_eq!(
        std::fs::read(root.join("sample-access.log")).unwrap(),
        nginx
    );
    let mut csv = Vec::new();
    sample::write_csv_log(&mut csv, 2000, 0x5EED_2024).unwrap();
    assert_eq!(
        std::fs::read(root.join("sample-requests.csv")).unwrap(),
        csv
    );

    let opts = ReplayOptions::new(policies(&["leaky:10r/s burst=20 nodelay", "fixed:300/m"]));
    let r = replay_file(&root.join("sample-access.log"), &opts).unwrap();
    assert_eq!((r.requests, r.malformed), (3000, 0));
    // The crawler (12/s) is the one a 10r/s limit stops.
    assert_eq!(r.policies[0].top_denied[0].key, "203.0.113.7");
    let svg = r.svg().unwrap();
    assert!(svg.contains("leaky:10/1s burst=20 nodelay"));
}

/// 10 million nginx lines through two policies, in bounded memory. Slow
/// (about a minute in release); run with
/// `cargo test --release --features sim --test sim_replay -- --ignored --nocapture`.
#[test]
#[ignore]
fn ten_million_lines_stream_in_bounded_memory() {
    let dir = std::env::temp_dir().join(format!("rategate-10m-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("access.log");
    let bin = env!("CARGO_BIN_EXE_rategate-sim");
    let ok = std::process::Command::new(bin)
        .args(["sample-log", "--lines", "10000000", "--out"])
        .arg(&log)
        .status()
        .unwrap();
    assert!(ok.success());
    let size = std::fs::metadata(&log).unwrap().len();
    let started = std::time::Instant::now();
    let out = std::process::Command::new(bin)
        .args([
            "replay",
            "--quiet",
            "-p",
            "leaky:10r/s burst=20 nodelay",
            "-p",
            "fixed:300/m",
            "--out",
        ])
        .arg(&dir)
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("replay.json")).unwrap()).unwrap();
    let rss = report["peak_rss_bytes"].as_u64().unwrap();
    println!(
        "10M lines, {:.0} MiB of log: replayed in {:.1} s, peak RSS {:.1} MiB",
        size as f64 / 1048576.0,
        started.elapsed().as_secs_f64(),
        rss as f64 / 1048576.0
    );
    assert_eq!(report["requests"], 10_000_000);
    assert_eq!(report["malformed"], 0);
    // Far below the log's size: nothing grows with the line count.
    assert!(rss < 64 << 20, "peak RSS {rss}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A combined log of whole-second times: a warning with the step, the
/// policy's interval and the share of requests that share their time.
#[test]
fn coarse_times_are_warned_about_with_figures() {
    let mut log = String::new();
    for i in 0..20 {
        log.push_str(&format!(
            "10.0.0.1 - - [01/May/2024:10:00:{:02} +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"\n",
            i / 4
        ));
    }
    let r = run(&log, &["leaky:10r/s burst=5 nodelay"]);
    assert_eq!(r.time_resolution_secs, 1.0);
    assert_eq!(r.same_time, 15);
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    let w = &r.warnings[0];
    assert!(w.contains("steps of 1 s"), "{w}");
    assert!(w.contains("every 100 ms"), "{w}");
    assert!(w.contains("75.0%"), "{w}");
    assert!(w.contains("$msec"), "{w}");
    assert!(
        r.text()
            .contains("warning: the log's times are steps of 1 s")
    );
    // A per-minute policy is coarser than the log: no warning.
    assert!(run(&log, &["fixed:60/m"]).warnings.is_empty());
}

const MSEC_FORMAT: &str = "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" $msec $request_time";

fn msec_line(addr: &str, end_ms: u64, took_ms: u64, status: u16) -> String {
    format!(
        "{addr} - - [01/May/2024:10:00:00 +0000] \"GET / HTTP/1.1\" {status} 1 \"-\" \"-\" {}.{:03} {}.{:03}\n",
        end_ms / 1000,
        end_ms % 1000,
        took_ms / 1000,
        took_ms % 1000
    )
}

/// `$msec - $request_time` is the arrival; lines out of arrival order are
/// counted and warned about, and `--reorder` decides them in time order.
#[test]
fn steps_back_are_warned_about_and_reordered() {
    // Arrivals 0, 100 (ended at 900), 200, 300 ms, logged as they end.
    let log = [
        msec_line("10.0.0.1", 1_700_000_000_000, 0, 200),
        msec_line("10.0.0.1", 1_700_000_000_200, 0, 200),
        msec_line("10.0.0.1", 1_700_000_000_300, 0, 200),
        msec_line("10.0.0.1", 1_700_000_000_900, 800, 200),
    ]
    .concat();
    let mut opts = ReplayOptions::new(policies(&["leaky:10r/s"]));
    opts.log_format = Some(MSEC_FORMAT.into());
    let r = replay(log.as_bytes(), None, &opts).unwrap();
    assert_eq!(r.format, LogFormat::Nginx);
    assert_eq!(r.time_resolution_secs, 0.001);
    assert_eq!((r.steps_back, r.largest_step_back_secs), (1, 0.2));
    assert!(r.warnings[0].contains("--reorder 1"), "{:?}", r.warnings);
    opts.reorder_secs = 1.0;
    let r = replay(log.as_bytes(), None, &opts).unwrap();
    assert_eq!(r.steps_back, 0);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    // 10 r/s, no burst: 0, 100, 200, 300 ms all pass in arrival order.
    assert_eq!(r.policies[0].admitted, 4);
}

/// 400, 408, 414 and 494 are skipped by default; `skip_status` chooses.
#[test]
fn statuses_limit_req_never_saw_are_skipped() {
    let log = [
        msec_line("10.0.0.1", 1_700_000_000_000, 0, 400),
        msec_line("10.0.0.1", 1_700_000_000_001, 0, 408),
        msec_line("10.0.0.1", 1_700_000_000_002, 0, 414),
        msec_line("10.0.0.1", 1_700_000_000_003, 0, 200),
        msec_line("10.0.0.1", 1_700_000_000_004, 0, 503),
    ]
    .concat();
    let mut opts = ReplayOptions::new(policies(&["leaky:1r/s"]));
    opts.log_format = Some(MSEC_FORMAT.into());
    let r = replay(log.as_bytes(), None, &opts).unwrap();
    assert_eq!((r.requests, r.skipped_status), (2, 3));
    assert_eq!(r.policies[0].admitted, 1);
    opts.skip_status.clear();
    let r = replay(log.as_bytes(), None, &opts).unwrap();
    assert_eq!((r.requests, r.skipped_status), (5, 0));
}

/// Every request's decisions, one column per policy, with its line.
#[test]
fn decisions_are_written_per_request() {
    let dir = std::env::temp_dir().join(format!("rategate-decisions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("d.csv");
    let mut opts = ReplayOptions::new(policies(&["fixed:1/s", "fixed:2/s"]));
    opts.decisions = Some(path.clone());
    replay(
        &b"time,key\n0.1,\"a,b\"\n0.2,\"a,b\"\n\n0.3,\"a,b\"\n"[..],
        None,
        &opts,
    )
    .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text,
        "line,time,key,cost,fixed:1/1s,fixed:2/1s\n\
         2,0.100000000,\"a,b\",1,allowed,allowed\n\
         3,0.200000000,\"a,b\",1,denied,allowed\n\
         5,0.300000000,\"a,b\",1,denied,denied\n"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A CSV whose third column is a status, a log cut mid-line, blank lines.
#[test]
fn hints_for_the_wrong_columns_and_the_wrong_format() {
    let r = run("1.0,a,200\n2.0,a,404\n3.0,b,200\n", &["fixed:10/s"]);
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("looks like HTTP statuses")),
        "{:?}",
        r.warnings
    );
    // Cut mid-line: the first line is a fragment, the rest is nginx.
    let cut = "0 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"\n\
               10.0.0.1 - - [01/May/2024:10:00:01 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"\n\
               10.0.0.2 - - [01/May/2024:10:00:01 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"\n";
    let r = run(cut, &["fixed:60/m"]);
    assert_eq!(
        (r.format, r.requests, r.malformed),
        (LogFormat::Nginx, 2, 1)
    );
    // Forced to CSV, most lines fail, and the report says what to try.
    let mut opts = ReplayOptions::new(policies(&["fixed:60/m"]));
    opts.format = Some(LogFormat::Csv);
    let r = replay(cut.as_bytes(), None, &opts).unwrap();
    assert!(
        r.warnings.iter().any(|w| w.contains("--format nginx")),
        "{:?}",
        r.warnings
    );
    // Blank lines count.
    let r = run("\n\n\n", &["fixed:60/m"]);
    assert_eq!((r.lines, r.requests), (3, 0));
    // A malformed CSV line is shown whole.
    let r = run("1,a,1,x,y\n", &["fixed:60/m"]);
    assert_eq!(r.malformed_lines[0].text, "1,a,1,x,y");
}

/// What a hostile review found: each is a typed error or a right answer.
#[test]
fn options_and_inputs_that_used_to_mislead() {
    let dir = std::env::temp_dir().join(format!("rategate-replay-opts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log.csv");
    std::fs::write(&log, "1,a\n2,a\n").unwrap();
    // The decisions file may not be the log (it would be truncated).
    let mut opts = ReplayOptions::new(policies(&["fixed:1/s"]));
    opts.decisions = Some(log.clone());
    let e = replay_file(&log, &opts).unwrap_err();
    assert!(e.to_string().contains("is the log being replayed"), "{e}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "1,a\n2,a\n");
    // A decisions file that cannot be written names itself, not the log.
    opts.decisions = Some(dir.join("no/such/dir/d.csv"));
    let e = replay_file(&log, &opts).unwrap_err();
    assert!(e.to_string().contains("no/such/dir/d.csv"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
    // A reorder window that is not a number of seconds.
    for bad in [f64::NAN, -1.0] {
        let mut opts = ReplayOptions::new(policies(&["fixed:1/s"]));
        opts.reorder_secs = bad;
        assert!(replay(&b"1,a\n"[..], None, &opts).is_err());
    }
    // An infinite one sorts the whole log.
    let mut opts = ReplayOptions::new(policies(&["fixed:1/s"]));
    opts.reorder_secs = f64::INFINITY;
    let r = replay(&b"10,a\n5,a\n1,a\n"[..], None, &opts).unwrap();
    assert_eq!((r.steps_back, r.first_time, r.last_time), (0, 1.0, 10.0));
    // Without it, the span is still from the earliest request.
    let r = run("10,a\n5,a\n1,a\n", &["fixed:1/s"]);
    assert_eq!((r.steps_back, r.first_time, r.last_time), (2, 1.0, 10.0));
    // nginx options with CSV input.
    let mut opts = ReplayOptions::new(policies(&["fixed:1/s"]));
    opts.format = Some(LogFormat::Csv);
    opts.key = "$http_x_key".into();
    assert!(replay(&b"1,a\n"[..], None, &opts).is_err());
    // A huge --top.
    let mut opts = ReplayOptions::new(policies(&["fixed:1/s"]));
    opts.top = usize::MAX;
    assert_eq!(replay(&b"1,a\n"[..], None, &opts).unwrap().requests, 1);
}

/// Keys that are not UTF-8 keep budgets of their own.
#[test]
fn keys_that_are_not_utf8_do_not_share_a_budget() {
    let log = b"1,\xff\n1,\xfe\n1,\\xFF\n1,\xff\n";
    let r = replay(
        &log[..],
        None,
        &ReplayOptions::new(policies(&["fixed:1/m"])),
    )
    .unwrap();
    // Three keys, one request each admitted; the second \xff is denied.
    assert_eq!((r.policies[0].admitted, r.policies[0].denied), (3, 1));
    assert_eq!(r.policies[0].top_denied[0].key, "\\xFF");
}
