//! Seeded generators of access logs to replay: the README's sample log and
//! the 10-million-line streaming test are made here, not copied from
//! anywhere. Addresses are from the documentation ranges (RFC 5737).
//!
//! Traffic, per second from 2024-05-01 10:00:00 UTC: about 20 requests from
//! 500 ordinary clients (a few much busier than most), one crawler
//! (203.0.113.7) sending 12 a second for 90 s of every 10 minutes, and one
//! bursty client (203.0.113.99) sending 40 at once every 45 s.

use super::SplitMix64;
use std::io::{self, Write};

/// 2024-05-01T10:00:00Z.
const START: u64 = 1_714_557_600;

const PATHS: [&str; 8] = [
    "/",
    "/api/v1/items",
    "/api/v1/items/42",
    "/api/v1/search?q=rate",
    "/login",
    "/static/app.js",
    "/api/v1/orders",
    "/healthz",
];
const AGENTS: [&str; 4] = [
    "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
    "curl/8.5.0",
    "python-requests/2.31.0",
    "ExampleCrawler/1.0 (+https://example.com/bot)",
];

/// One request: second since the start, client, path index, agent index.
struct Request {
    second: u64,
    client: String,
    path: usize,
    agent: usize,
    cost: u32,
    millis: u64,
}

/// Calls `emit` for each request, in time order, until it returns false.
fn generate(seed: u64, mut emit: impl FnMut(&Request) -> io::Result<bool>) -> io::Result<()> {
    let mut rng = SplitMix64::new(seed);
    let mut second = 0u64;
    let mut batch: Vec<Request> = Vec::new();
    loop {
        batch.clear();
        // Poisson(20) by summing exponential gaps over one second.
        let mut t = rng.exponential(1.0 / 20.0);
        while t < 1.0 {
            // Log-uniform rank over 500 clients: a few are far busier.
            let rank = (500f64.powf(rng.unit()) as u64).min(499);
            batch.push(Request {
                second,
                client: ordinary(rank),
                path: rng.below(PATHS.len() as u64) as usize,
                agent: rng.below(3) as usize,
                cost: 1 + (rng.unit().powi(3) * 10.0) as u32,
                millis: (t * 1000.0) as u64,
            });
            t += rng.exponential(1.0 / 20.0);
        }
        if (60..150).contains(&(second % 600)) {
            for i in 0..12 {
                batch.push(Request {
                    second,
                    client: "203.0.113.7".into(),
                    path: (i % 3) as usize,
                    agent: 3,
                    cost: 1,
                    millis: i * 83,
                });
            }
        }
        if second % 45 == 30 {
            for i in 0..40 {
                batch.push(Request {
                    second,
                    client: "203.0.113.99".into(),
                    path: 1,
                    agent: 2,
                    cost: 1,
                    millis: 500 + i,
                });
            }
        }
        batch.sort_by_key(|r| r.millis);
        for r in &batch {
            if !emit(r)? {
                return Ok(());
            }
        }
        second += 1;
    }
}

/// Ordinary clients: ranks 0-249 in 192.0.2.0/24, 250-499 in
/// 198.51.100.0/24 (the crawler and the bursty client are in 203.0.113.0/24).
fn ordinary(rank: u64) -> String {
    if rank < 250 {
        format!("192.0.2.{}", rank + 1)
    } else {
        format!("198.51.100.{}", rank - 249)
    }
}

/// `y, m, d` of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u64, u64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u64;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn nginx_time(unix: u64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, m, d) = civil_from_days((unix / 86_400) as i64);
    let s = unix % 86_400;
    format!(
        "{d:02}/{}/{y}:{:02}:{:02}:{:02} +0000",
        MONTHS[(m - 1) as usize],
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Writes `lines` lines of nginx's `combined` format.
pub fn write_nginx_log<W: Write>(mut out: W, lines: u64, seed: u64) -> io::Result<()> {
    let mut n = 0;
    let mut last = (u64::MAX, String::new());
    generate(seed, |r| {
        if n == lines {
            return Ok(false);
        }
        n += 1;
        if last.0 != r.second {
            last = (r.second, nginx_time(START + r.second));
        }
        let status = if r.path == 4 { 302 } else { 200 };
        writeln!(
            out,
            "{} - - [{}] \"GET {} HTTP/1.1\" {} {} \"-\" \"{}\"",
            r.client,
            last.1,
            PATHS[r.path],
            status,
            200 + r.millis * 7,
            AGENTS[r.agent]
        )?;
        Ok(true)
    })?;
    out.flush()
}

/// Writes a header and `lines` lines of `time,key,cost`: seconds from the
/// start with milliseconds, the client address, and a cost of 1 to 10.
pub fn write_csv_log<W: Write>(mut out: W, lines: u64, seed: u64) -> io::Result<()> {
    writeln!(out, "time,key,cost")?;
    let mut n = 0;
    generate(seed, |r| {
        if n == lines {
            return Ok(false);
        }
        n += 1;
        writeln!(out, "{}.{:03},{},{}", r.second, r.millis, r.client, r.cost)?;
        Ok(true)
    })?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(nginx_time(START), "01/May/2024:10:00:00 +0000");
        assert_eq!(nginx_time(951_782_400), "29/Feb/2000:00:00:00 +0000");
    }
}
