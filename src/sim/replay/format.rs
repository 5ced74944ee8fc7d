//! nginx `log_format` strings: compiled once into literal text and
//! variables, then matched against each line.
//!
//! A variable's value ends where the text after it in the format next
//! occurs in the line, but the first such place is not always the right
//! one: `$remote_user` comes from the client's `Authorization` header and
//! may hold spaces, `[` and `]`, and a user agent may hold a quote. So the
//! matcher tries each place in turn, checks the variables whose shape is
//! known (`$time_local`, `$msec`, `$status`, ...), and takes the first way
//! through that reads the whole line. The tries per line are bounded, so a
//! hostile line costs at most a few times its length (`SCAN_FACTOR`).

use super::parse;
use crate::sim::SEC;

/// nginx's predefined `combined` format.
pub const COMBINED: &str = "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"";

/// A line's budget of tries and bytes searched is `SCAN_FACTOR x length +
/// MIN_SCAN`: spent, the line is called ambiguous. A line nginx writes
/// takes one try per variable and searches each byte about once.
const SCAN_FACTOR: usize = 16;
const MIN_SCAN: usize = 4_096;

/// A piece of a format.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(Vec<u8>),
    Var(String),
}

/// A compiled `log_format`.
#[derive(Debug, Clone)]
pub(crate) struct Format {
    pieces: Vec<Piece>,
    /// Index among the variables of each one the replay reads.
    key: usize,
    cost: Option<usize>,
    time: TimeVar,
    request_time: Option<usize>,
    status: Option<usize>,
    /// The variables' names, in order.
    names: Vec<String>,
}

/// Where a line's time comes from.
#[derive(Debug, Clone, Copy)]
enum TimeVar {
    Msec(usize),
    Iso(usize),
    Local(usize),
}

/// One line read with a format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Line<'a> {
    /// When the request arrived: `$msec - $request_time` when both are
    /// logged, else the time variable's reading.
    pub(crate) time: u64,
    pub(crate) key: &'a [u8],
    pub(crate) cost: u32,
    pub(crate) status: Option<u16>,
}

/// A format that cannot be used, and why.
pub(crate) type FormatError = String;

impl Format {
    /// Compiles `format` (nginx's syntax: `$name` or `${name}`), keyed by
    /// the variable `key` and costed by `cost` (names with or without `$`).
    pub(crate) fn new(format: &str, key: &str, cost: Option<&str>) -> Result<Format, FormatError> {
        // Lines are read without their trailing white space: so is the
        // format (nginx configurations often end a format in a space).
        let pieces = pieces(format.trim_end())?;
        let names: Vec<String> = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Var(name) => Some(name.clone()),
                Piece::Text(_) => None,
            })
            .collect();
        let bare = |name: &str| {
            let name = name.trim().trim_start_matches('$');
            name.strip_prefix('{')
                .and_then(|n| n.strip_suffix('}'))
                .unwrap_or(name)
                .to_string()
        };
        let find = |name: &str| {
            let name = bare(name);
            names.iter().position(|n| *n == name)
        };
        let key_at = find(key).ok_or_else(|| {
            format!(
                "the key variable ${} is not in the log format",
                key.trim_start_matches('$')
            )
        })?;
        let cost_at = match cost {
            None => None,
            Some(c) => Some(find(c).ok_or_else(|| {
                format!(
                    "the cost variable ${} is not in the log format",
                    c.trim_start_matches('$')
                )
            })?),
        };
        let time = if let Some(i) = find("msec") {
            TimeVar::Msec(i)
        } else if let Some(i) = find("time_iso8601") {
            TimeVar::Iso(i)
        } else if let Some(i) = find("time_local") {
            TimeVar::Local(i)
        } else {
            return Err("the log format has no time: $msec, $time_iso8601 or $time_local".into());
        };
        let request_time = match time {
            TimeVar::Msec(_) => find("request_time"),
            _ => None,
        };
        Ok(Format {
            key: key_at,
            cost: cost_at,
            time,
            request_time,
            status: find("status"),
            pieces,
            names,
        })
    }

    /// Whether the line's time comes from `$msec` (millisecond times).
    pub(crate) fn has_msec(&self) -> bool {
        matches!(self.time, TimeVar::Msec(_))
    }

    /// Reads `line`, or says which variable failed.
    pub(crate) fn read<'a>(&self, line: &'a [u8]) -> Result<Line<'a>, String> {
        let mut values: Vec<&[u8]> = Vec::with_capacity(self.names.len());
        // Tries and bytes searched together: each search charges the bytes
        // it passed, so a line costs at most about `SCAN_FACTOR` times its
        // length.
        let mut budget = SCAN_FACTOR
            .saturating_mul(line.len())
            .saturating_add(MIN_SCAN);
        let mut failed = None;
        if !self.walk(line, 0, 0, &mut values, &mut budget, &mut failed) {
            if budget == 0 {
                return Err(
                    "too many ways to split the line between the format's variables".into(),
                );
            }
            return Err(match failed {
                Some((_, Failure::Text(text, Some(i)))) => format!(
                    "expected {:?} after ${}",
                    String::from_utf8_lossy(&text),
                    self.names[i]
                ),
                Some((_, Failure::Text(text, None))) => {
                    format!("expected {:?}", String::from_utf8_lossy(&text))
                }
                Some((_, Failure::Var(i, reason))) => format!("${}: {reason}", self.names[i]),
                None => "does not match the log format".into(),
            });
        }
        let (time_at, when) = match self.time {
            TimeVar::Msec(i) => (i, parse::parse_time(values[i])),
            TimeVar::Iso(i) => (i, parse::parse_time(values[i])),
            TimeVar::Local(i) => (i, parse::nginx_time(values[i])),
        };
        let mut time = when.map_err(|e| format!("${}: {e}", self.names[time_at]))?;
        if let Some(i) = self.request_time {
            let took =
                parse::parse_time(values[i]).map_err(|e| format!("${}: {e}", self.names[i]))?;
            time = time.checked_sub(took).ok_or_else(|| {
                format!("${} is longer than ${}", self.names[i], self.names[time_at])
            })?;
        }
        let key = values[self.key];
        if key.is_empty() || key == b"-" {
            return Err(format!("${}: no key (empty or -)", self.names[self.key]));
        }
        let cost = match self.cost {
            None => 1,
            Some(i) => match values[i] {
                b"" | b"-" => 1,
                v => parse::parse_cost(v).map_err(|e| format!("${}: {e}", self.names[i]))?,
            },
        };
        let status = self
            .status
            .and_then(|i| std::str::from_utf8(values[i]).ok()?.parse::<u16>().ok());
        Ok(Line {
            time,
            key,
            cost,
            status,
        })
    }

    /// Matches pieces from `piece` on at `pos`, pushing each variable's
    /// value; false (with the furthest failure) when no way through reads
    /// the whole line.
    fn walk<'a>(
        &self,
        line: &'a [u8],
        piece: usize,
        pos: usize,
        values: &mut Vec<&'a [u8]>,
        budget: &mut usize,
        failed: &mut Option<(usize, Failure)>,
    ) -> bool {
        *budget = budget.saturating_sub(1);
        if *budget == 0 {
            return false;
        }
        match self.pieces.get(piece) {
            None => {
                if pos == line.len() {
                    return true;
                }
                let last = values.len().checked_sub(1);
                note(
                    failed,
                    pos,
                    Failure::Text(b"the end of the line".to_vec(), last),
                );
                false
            }
            Some(Piece::Text(text)) => {
                if line[pos..].starts_with(text) {
                    return self.walk(line, piece + 1, pos + text.len(), values, budget, failed);
                }
                let last = values.len().checked_sub(1);
                note(failed, pos, Failure::Text(text.clone(), last));
                false
            }
            Some(Piece::Var(name)) => {
                let var = values.len();
                let next = match self.pieces.get(piece + 1) {
                    Some(Piece::Text(text)) => Some(text.as_slice()),
                    _ => None,
                };
                let Some(next) = next else {
                    // The last piece: the rest of the line.
                    let value = &line[pos..];
                    if let Err(reason) = check(name, value) {
                        note(failed, pos, Failure::Var(var, reason));
                        return false;
                    }
                    values.push(value);
                    return true;
                };
                if let Some(width) = fixed_width(name) {
                    // One place only: the value's own width.
                    let end = pos + width;
                    let Some(value) = line.get(pos..end) else {
                        note(failed, pos, Failure::Var(var, "the line ends inside it"));
                        return false;
                    };
                    if let Err(reason) = check(name, value) {
                        note(failed, pos, Failure::Var(var, reason));
                        return false;
                    }
                    if !line[end..].starts_with(next) {
                        note(failed, end, Failure::Text(next.to_vec(), Some(var)));
                        return false;
                    }
                    values.push(value);
                    if self.walk(line, piece + 2, end + next.len(), values, budget, failed) {
                        return true;
                    }
                    values.truncate(var);
                    return false;
                }
                let mut from = pos;
                loop {
                    let found = find(&line[from..], next);
                    // Charged for the bytes this search passed.
                    *budget = budget.saturating_sub(found.unwrap_or(line.len() - from));
                    if *budget == 0 {
                        return false;
                    }
                    let Some(at) = found else { break };
                    let end = from + at;
                    let value = &line[pos..end];
                    match check(name, value) {
                        Ok(()) => {
                            values.push(value);
                            if self.walk(line, piece + 2, end + next.len(), values, budget, failed)
                            {
                                return true;
                            }
                            values.truncate(var);
                            if *budget == 0 {
                                return false;
                            }
                        }
                        Err(reason) => {
                            note(failed, pos, Failure::Var(var, reason));
                            // A longer value holds the same bad byte.
                            if never_in(name, value) {
                                return false;
                            }
                        }
                    }
                    from = end + 1;
                    if from > line.len() {
                        break;
                    }
                }
                note(failed, pos, Failure::Text(next.to_vec(), Some(var)));
                false
            }
        }
    }

    /// The variables' names, in order.
    #[cfg(test)]
    fn names(&self) -> &[String] {
        &self.names
    }
}

/// Why a line did not match: text missing (after the variable at that
/// index), or a variable's value of the wrong shape.
#[derive(Debug)]
enum Failure {
    Text(Vec<u8>, Option<usize>),
    Var(usize, &'static str),
}

/// Keeps the failure furthest into the line (the way through that read
/// the most is the one the line was meant to follow); at one place, a
/// value of the wrong shape says more than the text missing after it.
fn note(failed: &mut Option<(usize, Failure)>, at: usize, failure: Failure) {
    let replace = match failed {
        None => true,
        Some((was, old)) => {
            at > *was
                || (at == *was
                    && !(matches!(old, Failure::Var(..)) && matches!(failure, Failure::Text(..))))
        }
    };
    if replace {
        *failed = Some((at, failure));
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Splits a format into text and variables.
fn pieces(format: &str) -> Result<Vec<Piece>, FormatError> {
    let bytes = format.as_bytes();
    let mut pieces = Vec::new();
    let mut text = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'$' {
            text.push(bytes[i]);
            i += 1;
            continue;
        }
        let (name, end) = if bytes.get(i + 1) == Some(&b'{') {
            let close = format[i + 2..]
                .find('}')
                .ok_or("an unclosed ${ in the log format")?;
            (&format[i + 2..i + 2 + close], i + 3 + close)
        } else {
            let len = bytes[i + 1..]
                .iter()
                .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
                .count();
            (&format[i + 1..i + 1 + len], i + 1 + len)
        };
        if name.is_empty() {
            return Err(format!(
                "a $ without a variable name at byte {i} of the log format"
            ));
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text)));
        } else if matches!(pieces.last(), Some(Piece::Var(_))) {
            return Err(format!(
                "${name} follows another variable with no text between them: \
                 the line cannot be split there"
            ));
        }
        pieces.push(Piece::Var(name.to_string()));
        i = end;
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    if pieces.is_empty() {
        return Err("the log format is empty".into());
    }
    Ok(pieces)
}

/// The width of every value of the variable `name`, where it has one.
fn fixed_width(name: &str) -> Option<usize> {
    match name {
        // `10/Oct/2000:13:55:36 -0700`.
        "time_local" => Some(26),
        "status" => Some(3),
        _ => None,
    }
}

/// Whether `value` holds a byte that no value of the variable `name` can
/// hold: then no longer value from the same start can be valid either.
fn never_in(name: &str, value: &[u8]) -> bool {
    let any = |ok: fn(u8) -> bool| value.iter().any(|&b| !ok(b));
    match name {
        "time_local" => any(|b| b.is_ascii_alphanumeric() || b"/: +-".contains(&b)),
        "time_iso8601" => any(|b| b.is_ascii_alphanumeric() || b"-:+.".contains(&b)),
        "msec"
        | "request_time"
        | "status"
        | "body_bytes_sent"
        | "bytes_sent"
        | "request_length"
        | "remote_port"
        | "server_port"
        | "connection"
        | "connection_requests" => any(|b| b.is_ascii_digit() || b == b'.'),
        "remote_addr" => value.iter().any(u8::is_ascii_whitespace),
        _ => false,
    }
}

/// Tests a value of a variable whose shape is known.
fn check(name: &str, value: &[u8]) -> Result<(), &'static str> {
    let digits = |v: &[u8]| !v.is_empty() && v.iter().all(u8::is_ascii_digit);
    let decimal = |v: &[u8]| match v.iter().position(|&b| b == b'.') {
        Some(dot) => digits(&v[..dot]) && digits(&v[dot + 1..]),
        None => digits(v),
    };
    match name {
        "time_local" => parse::nginx_time(value).map(drop),
        "time_iso8601" => parse::parse_time(value).map(drop),
        "msec" | "request_time" => {
            if decimal(value) {
                Ok(())
            } else {
                Err("not seconds like 1714557600.123")
            }
        }
        "status" => {
            if value.len() == 3 && digits(value) {
                Ok(())
            } else {
                Err("not a three-digit status")
            }
        }
        "body_bytes_sent"
        | "bytes_sent"
        | "request_length"
        | "remote_port"
        | "server_port"
        | "connection"
        | "connection_requests" => {
            if digits(value) {
                Ok(())
            } else {
                Err("not a whole number")
            }
        }
        "remote_addr" => {
            if value.is_empty() || value.iter().any(|b| b.is_ascii_whitespace()) {
                Err("not an address")
            } else {
                Ok(())
            }
        }
        "pipe" => {
            if value == b"p" || value == b"." {
                Ok(())
            } else {
                Err("not p or .")
            }
        }
        _ => Ok(()),
    }
}

/// The time resolution of a reading: 1 s, 1 ms, 1 µs or 1 ns.
pub(crate) fn resolution(t: u64) -> u64 {
    if t % SEC == 0 {
        SEC
    } else if t % 1_000_000 == 0 {
        1_000_000
    } else if t % 1_000 == 0 {
        1_000
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn combined() -> Format {
        Format::new(COMBINED, "remote_addr", None).unwrap()
    }

    const T: u64 = 971_211_336 * SEC;

    #[test]
    fn the_combined_format_reads_real_lines() {
        let f = combined();
        assert_eq!(
            f.names(),
            [
                "remote_addr",
                "remote_user",
                "time_local",
                "request",
                "status",
                "body_bytes_sent",
                "http_referer",
                "http_user_agent"
            ]
        );
        let l = br#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /a.gif HTTP/1.0" 200 2326 "-" "curl""#;
        let line = f.read(l).unwrap();
        assert_eq!(
            (line.time, line.key, line.cost, line.status),
            (T, &b"127.0.0.1"[..], 1, Some(200))
        );
    }

    #[test]
    fn quirks_of_real_logs_parse() {
        let f = combined();
        for (l, key, status) in [
            // A user with brackets and spaces (any client can send one).
            (&br#"1.2.3.4 - a [b] [c [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 5 "-" "x""#[..], &b"1.2.3.4"[..], 200),
            // Escaped and raw quotes in the user agent.
            (br#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 5 "-" "a \"b\" c""#, b"1.2.3.4", 200),
            (br#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 5 "-" "a "b" c""#, b"1.2.3.4", 200),
            // Garbage request lines, a bare "-" request, an IPv6 client.
            (br#"::1 - - [10/Oct/2000:13:55:36 -0700] "\x16\x03\x01 garbage" 400 157 "-" "-""#, b"::1", 400),
            (br#"2001:db8::7 - - [10/Oct/2000:13:55:36 -0700] "-" 408 0 "-" "-""#, b"2001:db8::7", 408),
            (br#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET /a b c HTTP/1.1" 200 5 "-" "-""#, b"1.2.3.4", 200),
        ] {
            let line = f.read(l).unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(l)));
            assert_eq!((line.time, line.key, line.status), (T, key, Some(status)));
        }
        // Time zones.
        let l = br#"1.2.3.4 - - [10/Oct/2000:20:55:36 +0000] "GET / HTTP/1.1" 200 5 "-" "-""#;
        assert_eq!(f.read(l).unwrap().time, T);
        // A 14k-character request.
        let long = format!(
            r#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET /{} HTTP/1.1" 414 0 "-" "-""#,
            "a".repeat(14_000)
        );
        assert_eq!(f.read(long.as_bytes()).unwrap().status, Some(414));
    }

    #[test]
    fn msec_minus_request_time_is_the_arrival() {
        let f = Format::new(
            &format!("{COMBINED} $msec $request_time"),
            "$remote_addr",
            None,
        )
        .unwrap();
        assert!(f.has_msec());
        let l = br#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 5 "-" "-" 971211336.750 0.250"#;
        assert_eq!(f.read(l).unwrap().time, T + SEC / 2);
    }

    #[test]
    fn key_and_cost_from_any_variable() {
        let f = Format::new(
            "$msec $http_x_api_key ${upstream_http_x_cost}",
            "http_x_api_key",
            Some("$upstream_http_x_cost"),
        )
        .unwrap();
        let line = f.read(b"12.5 k1 7").unwrap();
        assert_eq!(
            (line.time, line.key, line.cost),
            (12 * SEC + SEC / 2, &b"k1"[..], 7)
        );
        assert_eq!(f.read(b"12.5 k1 -").unwrap().cost, 1);
        let e = f.read(b"12.5 - 7").unwrap_err();
        assert!(e.contains("$http_x_api_key"), "{e}");
        let e = f.read(b"12.5 k1 x").unwrap_err();
        assert!(e.contains("$upstream_http_x_cost"), "{e}");
    }

    #[test]
    fn failures_name_the_field() {
        let f = combined();
        let e = f
            .read(br#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 2x0 5 "-" "-""#)
            .unwrap_err();
        assert!(e.contains("$status"), "{e}");
        let e = f
            .read(br#"1.2.3.4 - - [10/Foo/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 5 "-" "-""#)
            .unwrap_err();
        assert!(e.contains("$time_local"), "{e}");
        // Cut mid-line.
        let e = f
            .read(br#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HT"#)
            .unwrap_err();
        assert!(!e.is_empty());
    }

    #[test]
    fn bad_formats_are_refused() {
        assert!(Format::new("$remote_addr$msec", "remote_addr", None).is_err());
        assert!(Format::new("$remote_addr ${msec", "remote_addr", None).is_err());
        assert!(Format::new("$remote_addr [$time_local]", "http_x_key", None).is_err());
        assert!(Format::new("$remote_addr", "remote_addr", None).is_err());
        assert!(Format::new("", "remote_addr", None).is_err());
        assert!(Format::new("$ $msec", "msec", None).is_err());
    }

    #[test]
    fn lines_built_to_be_slow_stay_linear() {
        let f = Format::new(
            &format!("{COMBINED} $msec $request_time"),
            "remote_addr",
            None,
        )
        .unwrap();
        for (user, request) in [
            (" [".repeat(50_000), "GET / HTTP/1.1".to_string()),
            ("-".to_string(), "\" 200 5 \"".repeat(10_000)),
            ("] \" [".repeat(20_000), "\" [] \"".repeat(10_000)),
        ] {
            let line = format!(
                r#"1.2.3.4 - {user} [10/Oct/2000:13:55:36 -0700] "{request}" 200 5 "-" "-" 971211336.750 0.250"#
            );
            let start = std::time::Instant::now();
            let _ = f.read(line.as_bytes());
            // Linear work is a few ms even unoptimised; the quadratic
            // search this bounds took seconds.
            assert!(
                start.elapsed() < std::time::Duration::from_millis(500),
                "{:?}",
                start.elapsed()
            );
        }
        // A `$request_time` longer than `$msec` is malformed, not 1970.
        let e = f
            .read(br#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET /" 200 5 "-" "-" 1.000 5.000"#)
            .unwrap_err();
        assert!(e.contains("$request_time is longer than $msec"), "{e}");
    }

    #[test]
    fn formats_end_as_lines_do_and_names_take_braces() {
        let f = Format::new("$msec $remote_addr $status ", "${remote_addr}", None).unwrap();
        assert_eq!(f.read(b"1.5 a 200").unwrap().key, b"a");
    }

    #[test]
    fn a_hostile_line_is_bounded() {
        // Many candidate splits for several free variables in a row.
        let f = Format::new("$msec $a $b $c $d $e $status", "a", None).unwrap();
        let line = format!("1.5 {} 2x0", "x ".repeat(2_000));
        let e = f.read(line.as_bytes()).unwrap_err();
        assert!(!e.is_empty());
    }
}
