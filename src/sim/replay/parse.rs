//! Parsing a CSV record and the times and costs of both formats. Every
//! failure is a reason string for the malformed-lines report, never a panic.

use crate::sim::SEC;

/// `(time in ns since the Unix epoch or the log's own origin, key, cost)`.
pub(crate) type Record<'a> = (u64, &'a [u8], u32);

/// A CSV record's fields: `time,key[,cost]`.
pub(crate) fn csv_record<'a>(fields: &[&'a [u8]]) -> Result<Record<'a>, &'static str> {
    if fields.len() < 2 || fields.len() > 3 {
        return Err("expected time,key[,cost]");
    }
    let time = parse_time(fields[0])?;
    let key = trim(fields[1]);
    if key.is_empty() {
        return Err("empty key");
    }
    let cost = match fields.get(2).map(|f| trim(f)) {
        None | Some(b"") => 1,
        Some(c) => parse_cost(c)?,
    };
    Ok((time, key, cost))
}

/// Whether a CSV first record is a header (`time,key,cost`) rather than data.
pub(crate) fn is_header(fields: &[&[u8]]) -> bool {
    fields
        .first()
        .is_some_and(|f| trim(f).first().is_some_and(u8::is_ascii_alphabetic))
        && parse_time(fields[0]).is_err()
}

fn trim(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

pub(crate) fn parse_cost(b: &[u8]) -> Result<u32, &'static str> {
    let s = std::str::from_utf8(b).map_err(|_| "cost is not a number")?;
    s.parse::<u32>()
        .map_err(|_| "cost is not a whole number from 0 to 4294967295")
}

/// Seconds with an optional fraction (`1714557600.250`, `12.5`), or an RFC
/// 3339 time (`2024-05-01T10:00:00.25Z`, `...+02:00`).
pub(crate) fn parse_time(b: &[u8]) -> Result<u64, &'static str> {
    let b = trim(b);
    if b.is_empty() {
        return Err("empty time");
    }
    if b.len() >= 19 && b[4] == b'-' {
        return rfc3339(b);
    }
    let (int, frac) = match b.iter().position(|&c| c == b'.') {
        Some(i) => (&b[..i], &b[i + 1..]),
        None => (b, &b[..0]),
    };
    if int.is_empty() || !int.iter().all(u8::is_ascii_digit) || !frac.iter().all(u8::is_ascii_digit)
    {
        return Err("time is not seconds (12.5) nor an RFC 3339 time");
    }
    let secs = digits(int).ok_or("time is too large")?;
    let nanos = fraction(frac);
    secs.checked_mul(SEC)
        .and_then(|s| s.checked_add(nanos))
        .ok_or("time is too large")
}

fn digits(b: &[u8]) -> Option<u64> {
    b.iter().try_fold(0u64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Up to nine fraction digits as nanoseconds; further digits are dropped.
fn fraction(b: &[u8]) -> u64 {
    let mut n = 0;
    for i in 0..9 {
        n = n * 10 + b.get(i).map_or(0, |&d| u64::from(d - b'0'));
    }
    n
}

fn num(b: &[u8], lo: u64, hi: u64) -> Result<u64, &'static str> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return Err("malformed date or time");
    }
    let v = digits(b).ok_or("malformed date or time")?;
    if v < lo || v > hi {
        return Err("date or time out of range");
    }
    Ok(v)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: u64, d: u64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Nanoseconds since the epoch of a civil UTC time, minus an offset.
fn epoch_nanos(
    (y, mo, d): (u64, u64, u64),
    (h, mi, s): (u64, u64, u64),
    nanos: u64,
    offset_secs: i64,
) -> Result<u64, &'static str> {
    let days = days_from_civil(y as i64, mo, d);
    let secs = days * 86_400 + (h * 3600 + mi * 60 + s) as i64 - offset_secs;
    let secs = u64::try_from(secs).map_err(|_| "time before 1970")?;
    secs.checked_mul(SEC)
        .and_then(|v| v.checked_add(nanos))
        .ok_or("time is too large")
}

fn rfc3339(b: &[u8]) -> Result<u64, &'static str> {
    let sep = b[10];
    if b[7] != b'-' || (sep != b'T' && sep != b't' && sep != b' ') || b[13] != b':' || b[16] != b':'
    {
        return Err("malformed RFC 3339 time");
    }
    let y = num(&b[0..4], 1970, 9999)?;
    let mo = num(&b[5..7], 1, 12)?;
    let d = num(&b[8..10], 1, 31)?;
    let h = num(&b[11..13], 0, 23)?;
    let mi = num(&b[14..16], 0, 59)?;
    let s = num(&b[17..19], 0, 60)?;
    let mut rest = &b[19..];
    let mut nanos = 0;
    if let Some(r) = rest.strip_prefix(b".") {
        let n = r.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return Err("malformed RFC 3339 fraction");
        }
        nanos = fraction(&r[..n]);
        rest = &r[n..];
    }
    let offset = match rest {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), hh @ ..] if hh.len() == 5 && hh[2] == b':' => {
            let v = (num(&hh[0..2], 0, 23)? * 3600 + num(&hh[3..5], 0, 59)? * 60) as i64;
            if *sign == b'-' { -v } else { v }
        }
        _ => return Err("RFC 3339 time needs Z or an offset such as +02:00"),
    };
    epoch_nanos((y, mo, d), (h, mi, s), nanos, offset)
}

/// nginx's `$time_local`: `10/Oct/2000:13:55:36 -0700`.
pub(crate) fn nginx_time(b: &[u8]) -> Result<u64, &'static str> {
    if b.len() != 26
        || b[2] != b'/'
        || b[6] != b'/'
        || b[11] != b':'
        || b[14] != b':'
        || b[17] != b':'
        || b[20] != b' '
    {
        return Err("time is not like 10/Oct/2000:13:55:36 -0700");
    }
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let mo = MONTHS
        .iter()
        .position(|m| &b[3..6] == m.as_slice())
        .ok_or("unknown month")? as u64
        + 1;
    let d = num(&b[0..2], 1, 31)?;
    let y = num(&b[7..11], 1970, 9999)?;
    let h = num(&b[12..14], 0, 23)?;
    let mi = num(&b[15..17], 0, 59)?;
    let s = num(&b[18..20], 0, 60)?;
    let sign = b[21];
    if sign != b'+' && sign != b'-' {
        return Err("time zone is not like -0700");
    }
    let off = (num(&b[22..24], 0, 23)? * 3600 + num(&b[24..26], 0, 59)? * 60) as i64;
    epoch_nanos(
        (y, mo, d),
        (h, mi, s),
        0,
        if sign == b'-' { -off } else { off },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(parse_time(b"12.5"), Ok(12 * SEC + SEC / 2));
        assert_eq!(parse_time(b" 3 "), Ok(3 * SEC));
        assert_eq!(parse_time(b"2000-10-10T20:55:36Z"), Ok(971_211_336 * SEC));
        assert_eq!(
            parse_time(b"2000-10-10T13:55:36.5-07:00"),
            Ok(971_211_336 * SEC + SEC / 2)
        );
        assert_eq!(
            nginx_time(b"10/Oct/2000:13:55:36 -0700"),
            Ok(971_211_336 * SEC)
        );
        assert!(parse_time(b"-1").is_err());
        assert!(parse_time(b"1e3").is_err());
        assert!(parse_time(b"99999999999999999999").is_err());
        assert!(nginx_time(b"10/Foo/2000:13:55:36 -0700").is_err());
        assert!(nginx_time("10/Oct/2000:13:55:36 -07€".as_bytes()).is_err());
        assert!(rfc3339(b"2000-13-10T20:55:36Z").is_err());
    }

    #[test]
    fn lines() {
        assert_eq!(
            csv_record(&[b"1.5", b"k", b"3"]),
            Ok((SEC + SEC / 2, &b"k"[..], 3))
        );
        assert_eq!(csv_record(&[b"1", b"k"]), Ok((SEC, &b"k"[..], 1)));
        assert!(csv_record(&[b"1", b"k", b"-3"]).is_err());
        assert!(csv_record(&[b"1", b""]).is_err());
        assert!(is_header(&[b"time", b"key", b"cost"]));
        assert!(!is_header(&[b"1", b"key"]));
    }
}
