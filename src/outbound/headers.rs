//! What an upstream says about its own limit, read from a response's status
//! and headers: `Retry-After` (delta-seconds or HTTP date),
//! `X-RateLimit-Remaining` / `X-RateLimit-Reset` (Unix time, GitHub's style,
//! or seconds), and the IETF draft fields `RateLimit` / `RateLimit-Policy`
//! (draft-ietf-httpapi-ratelimit-headers: the structured form of drafts 08
//! and later, `"default";r=0;t=30` and `"default";q=100;w=60`, the
//! dictionary form of draft 07, `limit=100, remaining=0, reset=30`, and the
//! separate `RateLimit-Remaining` / `RateLimit-Reset` of earlier drafts).
//!
//! Parsing never panics and never trusts a value: a field that does not
//! parse is skipped and reported as a [`HeaderError`] in
//! [`UpstreamSignal::errors`]; numbers too large to represent saturate, and
//! the guard caps every pause it takes from them
//! ([`OutboundLimiterBuilder::max_pause`](crate::outbound::OutboundLimiterBuilder::max_pause)).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A header value that could not be used; the field is ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderError {
    /// A negative number where only non-negative ones make sense.
    Negative {
        /// The header's name, lower-case.
        name: &'static str,
    },
    /// Not a number, not a date, or not the field's syntax.
    Invalid {
        /// The header's name, lower-case.
        name: &'static str,
        /// The value, cut to 64 bytes.
        value: String,
    },
    /// The value is not visible ASCII (a `HeaderMap` value that is not a
    /// string).
    NotText {
        /// The header's name, lower-case.
        name: &'static str,
    },
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::Negative { name } => write!(f, "{name}: negative value ignored"),
            HeaderError::Invalid { name, value } => write!(f, "{name}: cannot parse {value:?}"),
            HeaderError::NotText { name } => write!(f, "{name}: value is not text"),
        }
    }
}

impl std::error::Error for HeaderError {}

/// What one response said about the upstream's limit.
///
/// # Examples
///
/// GitHub's answer once the hourly quota is spent:
///
/// ```
/// use rategate::outbound::UpstreamSignal;
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
///
/// let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// let signal = UpstreamSignal::from_pairs(
///     403,
///     [
///         ("x-ratelimit-limit", "5000"),
///         ("x-ratelimit-remaining", "0"),
///         ("x-ratelimit-reset", "1700000600"),
///     ],
///     now,
/// );
/// assert_eq!(signal.remaining(), Some(0));
/// assert_eq!(signal.reset_after(), Some(Duration::from_secs(600)));
/// assert!(signal.errors().is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamSignal {
    status: u16,
    retry_after: Option<Duration>,
    remaining: Option<u64>,
    reset_after: Option<Duration>,
    policy: Option<(u64, Duration)>,
    errors: Vec<HeaderError>,
}

/// Values of `X-RateLimit-Reset` at or above this are Unix times (after
/// September 2001); below, seconds from now. No upstream asks a client to
/// wait 31 years, and no reset lies before 2001.
pub const UNIX_TIME_THRESHOLD: u64 = 1_000_000_000;

/// Unix times at or above this are in milliseconds: in seconds it would
/// be a date past the year 5000, in milliseconds one after March 1973.
const UNIX_MILLIS_THRESHOLD: u64 = 100_000_000_000;

const NAMES: [&str; 9] = [
    "retry-after",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "ratelimit-remaining",
    "ratelimit-reset",
    "ratelimit",
    "ratelimit-policy",
    "x-rate-limit-remaining",
    "x-rate-limit-reset",
];

impl UpstreamSignal {
    /// Reads `status` and the headers as name/value pairs (names in any
    /// case). `now` is the wall-clock time the response arrived, used for
    /// HTTP dates and Unix times.
    pub fn from_pairs<'a>(
        status: u16,
        headers: impl IntoIterator<Item = (&'a str, &'a str)>,
        now: SystemTime,
    ) -> Self {
        let mut signal = UpstreamSignal {
            status,
            ..Default::default()
        };
        let mut reports = Reports::default();
        for (name, value) in headers {
            if let Some(&name) = NAMES.iter().find(|n| n.eq_ignore_ascii_case(name)) {
                signal.read(&mut reports, name, value.trim(), now);
            }
        }
        signal.settle(reports);
        signal
    }

    /// Reads an [`http::HeaderMap`] (reqwest's and hyper's responses).
    /// Feature `http`.
    #[cfg(feature = "http")]
    pub fn from_http(status: http::StatusCode, headers: &http::HeaderMap, now: SystemTime) -> Self {
        let mut signal = UpstreamSignal {
            status: status.as_u16(),
            ..Default::default()
        };
        let mut reports = Reports::default();
        for name in NAMES {
            for value in headers.get_all(name) {
                match value.to_str() {
                    Ok(v) => signal.read(&mut reports, name, v.trim(), now),
                    Err(_) => signal.errors.push(HeaderError::NotText { name }),
                }
            }
        }
        signal.settle(reports);
        signal
    }

    fn read(&mut self, reports: &mut Reports, name: &'static str, value: &str, now: SystemTime) {
        let result = match name {
            // Several fields: the longest wait, the most conservative.
            "retry-after" => parse_retry_after(value, now)
                .map(|d| self.retry_after = Some(self.retry_after.map_or(d, |r| r.max(d)))),
            // A value that does not parse keeps its place (as `None`), so
            // that later fields still pair with their own.
            "x-ratelimit-remaining" | "ratelimit-remaining" | "x-rate-limit-remaining" => {
                let n = parse_count(name, value);
                reports.family(name).0.push(n.as_ref().ok().copied());
                n.map(drop)
            }
            "x-ratelimit-reset" | "x-rate-limit-reset" => {
                let d = parse_reset(name, value, now);
                reports.family(name).1.push(d.as_ref().ok().copied());
                d.map(drop)
            }
            "ratelimit-reset" => {
                let d = parse_seconds(name, value);
                reports.family(name).1.push(d.as_ref().ok().copied());
                d.map(drop)
            }
            "ratelimit" => read_ratelimit(value, &mut reports.items, &mut self.errors),
            "ratelimit-policy" => self.read_policy(value),
            _ => Ok(()),
        };
        if let Err(e) = result {
            self.errors.push(e);
        }
    }

    /// Pairs each reported limit's remaining with its own reset, and keeps
    /// the limit that binds: a spent one first (the latest of their
    /// resets), else the one with the fewest requests left per second
    /// until its reset. A family's remaining and reset fields pair in order
    /// (a proxy's and the origin's both sent; a value that does not parse
    /// keeps its place). Without any complete pair, the fewest remaining
    /// and the latest reset.
    fn settle(&mut self, reports: Reports) {
        let mut pairs = reports.items;
        for (remaining, resets) in reports.families {
            let n = remaining.len().max(resets.len());
            pairs.extend((0..n).map(|i| {
                (
                    remaining.get(i).copied().flatten(),
                    resets.get(i).copied().flatten(),
                )
            }));
        }
        if pairs.iter().any(|p| p.0 == Some(0)) {
            self.remaining = Some(0);
            self.reset_after = pairs
                .iter()
                .filter(|p| p.0 == Some(0))
                .filter_map(|p| p.1)
                .max();
            return;
        }
        let binding =
            pairs
                .iter()
                .filter_map(|&(r, t)| Some((r?, t?)))
                .min_by(|&(r1, t1), &(r2, t2)| {
                    // r1 / t1 < r2 / t2  <=>  r1 * t2 < r2 * t1, saturating (a
                    // tie between absurd values is harmless); ties: the later
                    // reset.
                    (u128::from(r1).saturating_mul(t2.as_nanos()))
                        .cmp(&u128::from(r2).saturating_mul(t1.as_nanos()))
                        .then(t2.cmp(&t1))
                });
        if let Some((r, t)) = binding {
            self.remaining = Some(r);
            self.reset_after = Some(t);
        } else {
            self.remaining = pairs.iter().filter_map(|p| p.0).min();
            self.reset_after = pairs.iter().filter_map(|p| p.1).max();
        }
    }

    /// `RateLimit-Policy`: `q` requests (quota units) per `w` seconds per
    /// listed policy (draft 07: a bare number then `w`). The slowest wins.
    fn read_policy(&mut self, value: &str) -> Result<(), HeaderError> {
        const NAME: &str = "ratelimit-policy";
        let mut found = false;
        for item in value.split(',') {
            let mut q = None;
            let mut w = None;
            let mut parsed = || -> Result<(), HeaderError> {
                for (i, param) in item.split(';').map(str::trim).enumerate() {
                    match param.split_once('=') {
                        Some(("q", v)) => q = Some(parse_count(NAME, v)?),
                        Some(("w", v)) => w = Some(parse_seconds(NAME, v)?),
                        Some(_) => {}
                        None if i == 0 && param.bytes().all(|b| b.is_ascii_digit()) => {
                            q = Some(parse_count(NAME, param)?);
                        }
                        None => {}
                    }
                }
                Ok(())
            };
            // An item with a bad parameter is skipped (and reported); the
            // others still count.
            if let Err(e) = parsed() {
                self.errors.push(e);
                continue;
            }
            // The draft's default window is one second... only in some
            // revisions; without a window the policy says nothing usable.
            if let (Some(q), Some(w)) = (q, w) {
                if q > 0 && !w.is_zero() {
                    found = true;
                    let slower = match self.policy {
                        None => true,
                        // q/w < q0/w0  <=>  q * w0 < q0 * w
                        Some((q0, w0)) => {
                            u128::from(q).saturating_mul(w0.as_nanos())
                                < u128::from(q0).saturating_mul(w.as_nanos())
                        }
                    };
                    if slower {
                        self.policy = Some((q, w));
                    }
                }
            }
        }
        if found {
            Ok(())
        } else {
            Err(invalid(NAME, value))
        }
    }

    /// The response's status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// Whether the upstream refused the request for its rate limit: 429;
    /// 503 with a `Retry-After`; or 403 with a `Retry-After` or 0 remaining
    /// (GitHub's secondary and primary limits).
    pub fn is_limited(&self) -> bool {
        match self.status {
            429 => true,
            503 => self.retry_after.is_some(),
            403 => self.retry_after.is_some() || self.remaining == Some(0),
            _ => false,
        }
    }

    /// Whether the answer is an outage (503) rather than a limit: the
    /// guard pauses for it without lowering its rate.
    pub fn is_outage(&self) -> bool {
        self.status == 503
    }

    /// `Retry-After`, as a wait from the response's arrival (zero for a
    /// date in the past).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The requests left in the reported limit that binds: the fewest left
    /// per second until its reset (see [`reset_after`](Self::reset_after)).
    pub fn remaining(&self) -> Option<u64> {
        self.remaining
    }

    /// When the binding limit resets, from the response's arrival: with
    /// several limits reported (`RateLimit` items, or a proxy's and the
    /// origin's fields), each remaining pairs with its own reset, and the
    /// one with the fewest requests left per second wins.
    pub fn reset_after(&self) -> Option<Duration> {
        self.reset_after
    }

    /// The slowest advertised policy: `(quota, window)`.
    pub fn policy(&self) -> Option<(u64, Duration)> {
        self.policy
    }

    /// Fields that were present but ignored, and why.
    pub fn errors(&self) -> &[HeaderError] {
        &self.errors
    }
}

/// The limits a response reports, before they are paired: `RateLimit`'s
/// items, and per field family (`X-RateLimit-*`, `RateLimit-*`,
/// `X-Rate-Limit-*`) its remaining and reset values in order.
#[derive(Default)]
struct Reports {
    items: Vec<(Option<u64>, Option<Duration>)>,
    families: [Family; 3],
}

/// One field family's remaining and reset values, in order (`None`: a
/// value that did not parse).
type Family = (Vec<Option<u64>>, Vec<Option<Duration>>);

impl Reports {
    fn family(&mut self, name: &str) -> &mut Family {
        let i = if name.starts_with("x-ratelimit") {
            0
        } else if name.starts_with("ratelimit") {
            1
        } else {
            2
        };
        &mut self.families[i]
    }
}

/// `RateLimit`: for each listed limit, its remaining quota (`r`, or draft
/// 07's `remaining`) and reset (`t`, or `reset`), into `items`. An item
/// with a bad parameter is skipped (and reported); the others still count.
fn read_ratelimit(
    value: &str,
    items: &mut Vec<(Option<u64>, Option<Duration>)>,
    errors: &mut Vec<HeaderError>,
) -> Result<(), HeaderError> {
    const NAME: &str = "ratelimit";
    let before = items.len();
    let mut draft7 = (None, None);
    for item in value.split(',') {
        let mut r = None;
        let mut t = None;
        let mut parsed = || -> Result<(), HeaderError> {
            for param in item.split(';').map(str::trim) {
                let Some((key, v)) = param.split_once('=') else {
                    continue; // the limit's name
                };
                match key.trim() {
                    "r" => r = Some(parse_count(NAME, v)?),
                    "t" => t = Some(parse_seconds(NAME, v)?),
                    "remaining" => draft7.0 = Some(parse_count(NAME, v)?),
                    "reset" => draft7.1 = Some(parse_seconds(NAME, v)?),
                    _ => {}
                }
            }
            Ok(())
        };
        match parsed() {
            Ok(()) if r.is_some() || t.is_some() => items.push((r, t)),
            Ok(()) => {}
            Err(e) => errors.push(e),
        }
    }
    if draft7 != (None, None) {
        items.push(draft7);
    }
    if items.len() == before {
        return Err(invalid(NAME, value));
    }
    Ok(())
}

fn invalid(name: &'static str, value: &str) -> HeaderError {
    let mut cut = value.len().min(64);
    while !value.is_char_boundary(cut) {
        cut -= 1;
    }
    HeaderError::Invalid {
        name,
        value: value[..cut].to_string(),
    }
}

/// A non-negative integer, saturating at `u64::MAX`.
fn parse_count(name: &'static str, value: &str) -> Result<u64, HeaderError> {
    let value = value.trim();
    if value.starts_with('-') {
        return Err(HeaderError::Negative { name });
    }
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(name, value));
    }
    Ok(value.bytes().fold(0u64, |n, b| {
        n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

/// Seconds, whole or decimal (`1.5`), saturating at `u64::MAX` seconds.
fn parse_seconds(name: &'static str, value: &str) -> Result<Duration, HeaderError> {
    let value = value.trim();
    if value.starts_with('-') {
        return Err(HeaderError::Negative { name });
    }
    let (whole, frac) = value.split_once('.').unwrap_or((value, ""));
    if whole.is_empty() && frac.is_empty() {
        return Err(invalid(name, value));
    }
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(frac) {
        return Err(invalid(name, value));
    }
    let secs = if whole.is_empty() {
        0
    } else {
        parse_count(name, whole)?
    };
    // Nine fractional digits at most (nanoseconds); the rest truncated.
    let nanos = frac
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(9)
        .fold(0u32, |n, b| n * 10 + u32::from(b - b'0'));
    Ok(Duration::new(secs, nanos))
}

/// `X-RateLimit-Reset`: a Unix time in seconds (at or above
/// [`UNIX_TIME_THRESHOLD`]) or milliseconds (at or above
/// `UNIX_MILLIS_THRESHOLD`), or seconds from now. A time in the past is a
/// reset already passed: zero.
fn parse_reset(name: &'static str, value: &str, now: SystemTime) -> Result<Duration, HeaderError> {
    let mut secs = parse_seconds(name, value)?;
    if secs.as_secs() >= UNIX_MILLIS_THRESHOLD {
        secs /= 1000;
    }
    if secs.as_secs() >= UNIX_TIME_THRESHOLD {
        let at = UNIX_EPOCH
            .checked_add(secs)
            .ok_or_else(|| invalid(name, value))?;
        Ok(at.duration_since(now).unwrap_or(Duration::ZERO))
    } else {
        Ok(secs)
    }
}

/// Parses a `Retry-After` value: delta-seconds, or an HTTP date (a date in
/// the past gives zero). Decimal seconds are accepted, though RFC 9110 has
/// only whole ones.
///
/// # Errors
///
/// [`HeaderError::Negative`] for a negative number,
/// [`HeaderError::Invalid`] for anything else that is neither.
///
/// # Examples
///
/// ```
/// use rategate::outbound::parse_retry_after;
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let now = UNIX_EPOCH + Duration::from_secs(784_111_767); // Sun, 06 Nov 1994 08:49:27 GMT
/// assert_eq!(parse_retry_after("120", now), Ok(Duration::from_secs(120)));
/// assert_eq!(
///     parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
///     Ok(Duration::from_secs(10))
/// );
/// assert!(parse_retry_after("-1", now).is_err());
/// assert!(parse_retry_after("soon", now).is_err());
/// ```
pub fn parse_retry_after(value: &str, now: SystemTime) -> Result<Duration, HeaderError> {
    const NAME: &str = "retry-after";
    let value = value.trim();
    if value.starts_with('-') {
        return Err(HeaderError::Negative { name: NAME });
    }
    if value
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_digit() || b == b'.')
    {
        return parse_seconds(NAME, value);
    }
    let at = parse_http_date(value).ok_or_else(|| invalid(NAME, value))?;
    Ok(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Parses the three HTTP date formats RFC 9110 (section 5.6.7) requires
/// recipients to accept: IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`),
/// RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime
/// (`Sun Nov  6 08:49:37 1994`). The weekday is not checked.
fn parse_http_date(value: &str) -> Option<SystemTime> {
    let cleaned: String = value
        .chars()
        .map(|c| if c == ',' || c == '-' { ' ' } else { c })
        .collect();
    let tokens: Vec<&str> = cleaned.split_whitespace().collect();
    let (day, month, year, time) = match tokens.as_slice() {
        // asctime: weekday month day time year
        [_, month, day, time, year] if month_number(month).is_some() => {
            (*day, *month, *year, *time)
        }
        // IMF-fixdate and RFC 850: weekday day month year time GMT
        [_, day, month, year, time, zone] if zone.eq_ignore_ascii_case("GMT") => {
            (*day, *month, *year, *time)
        }
        _ => return None,
    };
    let month = month_number(month)?;
    let day: u64 = small_number(day, 2)?;
    let mut year: u64 = small_number(year, 4)?;
    if year < 100 {
        // RFC 850's two-digit year: RFC 9110 says a year that would be
        // more than 50 years ahead is in the past century; for years after
        // 2000 that is 00-49 -> 20xx, 50-99 -> 19xx, close enough for
        // Retry-After, which only ever names the near future.
        year += if year < 50 { 2000 } else { 1900 };
    }
    let mut hms = time.split(':');
    let h: u64 = small_number(hms.next()?, 2)?;
    let m: u64 = small_number(hms.next()?, 2)?;
    let s: u64 = small_number(hms.next()?, 2)?;
    if hms.next().is_some() || !(1..=31).contains(&day) || year < 1970 || h > 23 || m > 59 || s > 60
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + h * 3600 + m * 60 + s;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

fn small_number(s: &str, max_digits: usize) -> Option<u64> {
    if s.is_empty() || s.len() > max_digits || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn month_number(s: &str) -> Option<u64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    MONTHS
        .iter()
        .position(|m| m.eq_ignore_ascii_case(s))
        .map(|i| i as u64 + 1)
}

/// Days from 1970-01-01 to a civil date (Howard Hinnant's algorithm), for
/// years from 1970 on.
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(all(test, not(rategate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn http_dates_in_all_three_formats() {
        let expected = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(expected)
        );
        assert_eq!(
            parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(expected)
        );
        assert_eq!(parse_http_date("Sun Nov  6 08:49:37 1994"), Some(expected));
        assert_eq!(
            parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(UNIX_EPOCH)
        );
        assert_eq!(
            parse_http_date("Tue, 29 Feb 2028 12:00:00 GMT"),
            Some(UNIX_EPOCH + Duration::from_secs(1_835_438_400))
        );
        for bad in [
            "",
            "GMT",
            "Sun, 06 Nov 1994 08:49:37 PST",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            "Sun, 06 Nov 99999999999999999999 08:49:37 GMT",
            "Sun, 06 Nov 1900 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn seconds_saturate_instead_of_overflowing() {
        assert_eq!(
            parse_seconds("t", "99999999999999999999999999")
                .unwrap()
                .as_secs(),
            u64::MAX
        );
        assert_eq!(
            parse_seconds("t", "1.5").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            parse_seconds("t", ".25").unwrap(),
            Duration::from_millis(250)
        );
        assert_eq!(
            parse_seconds("t", "0.1234567891").unwrap(),
            Duration::from_nanos(123_456_789)
        );
        assert!(parse_seconds("t", ".").is_err());
        assert!(parse_seconds("t", "1e3").is_err());
        assert!(parse_seconds("t", "").is_err());
    }
}
