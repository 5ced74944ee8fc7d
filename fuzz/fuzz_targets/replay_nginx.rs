//! The replay's nginx log reader on arbitrary input: never panics, and
//! every line is counted once, as a request, a malformed line, a skipped
//! status or a blank line.
//!
//! Then a line nginx could have written: the fuzzer's bytes as
//! `$remote_user`, `$request` and `$http_user_agent`, escaped as nginx
//! escapes them (`"`, `\` and bytes outside printable ASCII as `\xHH`),
//! between real fixed fields. However hostile the values, the line reads
//! with its own address, time and status.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rategate::sim::LimitSpec;
use rategate::sim::replay::{COMBINED, ReplayOptions, replay};
use std::sync::LazyLock;

static COMBINED_OPTS: LazyLock<ReplayOptions> = LazyLock::new(|| options(None));
static TIMED_OPTS: LazyLock<ReplayOptions> =
    LazyLock::new(|| options(Some(format!("{COMBINED} $msec $request_time"))));

fn options(log_format: Option<String>) -> ReplayOptions {
    let policy: LimitSpec = "leaky:10r/s burst=5".parse().expect("a policy");
    let mut opts = ReplayOptions::new(vec![policy]);
    opts.log_format = log_format;
    opts.format = Some(rategate::sim::replay::LogFormat::Nginx);
    opts.reorder_secs = 1.0;
    opts
}

/// nginx's default escaping of a logged variable.
fn escape(bytes: &[u8]) -> String {
    let mut out = String::new();
    for &b in bytes {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.push_str(&format!("\\x{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    for opts in [&*COMBINED_OPTS, &*TIMED_OPTS] {
        let report = replay(data, None, opts).expect("reading a slice cannot fail");
        let blank = data
            .split(|&b| b == b'\n')
            .filter(|l| l.trim_ascii().is_empty())
            .count() as u64;
        let counted = report.requests + report.malformed + report.skipped_status;
        assert!(counted <= report.lines, "{counted} > {} lines", report.lines);
        assert!(counted + blank >= report.lines, "a line went uncounted");
    }
    // Three values from the input, split at the first two 0xFF bytes.
    let mut parts = data.splitn(3, |&b| b == 0xFF);
    let user = escape(parts.next().unwrap_or_default());
    let request = escape(parts.next().unwrap_or_default());
    let agent = escape(parts.next().unwrap_or_default());
    let user = if user.is_empty() { "-".into() } else { user };
    let line = format!(
        "2001:db8::7 - {user} [10/Oct/2000:13:55:36 -0700] \"{request}\" 503 5 \"-\" \"{agent}\" 971211336.750 0.250\n"
    );
    let report = replay(line.as_bytes(), None, &TIMED_OPTS).expect("reading a slice cannot fail");
    assert_eq!(
        (report.requests, report.malformed),
        (1, 0),
        "{line:?}: {:?}",
        report.malformed_lines
    );
    assert_eq!(report.first_time, 971_211_336.5, "{line:?}");
    assert_eq!(report.policies[0].top_denied.len(), 0, "{line:?}");
});
