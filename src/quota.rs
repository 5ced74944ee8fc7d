//! Quotas: how many requests per period, how many at once, and (for the
//! leaky bucket) when excess requests are delayed.

use crate::clock::duration_to_nanos;
use crate::error::QuotaError;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// When the leaky bucket makes admitted excess requests wait, as nginx's
/// `limit_req` does. Other algorithms ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Delay {
    /// Every request beyond the rate waits its turn (nginx's plain `burst=N`).
    #[default]
    Smooth,
    /// Excess requests within the burst pass at once (nginx's `nodelay`).
    NoDelay,
    /// The first `n` excess requests pass at once, later ones wait (nginx's
    /// `delay=n`, two-stage limiting).
    After(u32),
}

/// A rate limit: `limit` requests per `period`, with a burst capacity.
///
/// The burst is the most requests that may pass at once. Left unset it is
/// the algorithm's natural default: the limit itself for the token bucket
/// and the windows, and zero excess requests for the leaky bucket (nginx's
/// default). For the leaky bucket an explicit burst has nginx's meaning: the
/// number of excess requests queued beyond the rate.
///
/// Quotas parse from the strings users already write: nginx's `10r/s` and
/// `100r/m`, `5000/h`, `60/hour`, `100/1m`, `7/1500ms`, followed by nginx
/// options `burst=20`, `nodelay` or `delay=8`.
///
/// # Examples
///
/// ```
/// use rategate::Quota;
/// use std::time::Duration;
///
/// let github = Quota::per_hour(5000)?;
/// assert_eq!(github.period(), Duration::from_secs(3600));
///
/// let bursty = Quota::per_minute(100)?.burst(20)?;
/// assert_eq!(bursty.burst_or(100), 20);
///
/// let nginx: Quota = "10r/s burst=20 nodelay".parse()?;
/// assert_eq!(nginx.limit(), 10);
/// assert_eq!(nginx.to_string(), "10/1s burst=20 nodelay");
/// # Ok::<(), rategate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    /// Requests per period, at least 1, at most one per nanosecond.
    limit: u32,
    /// Nanoseconds, at least 1.
    period: u64,
    /// `None`: the algorithm's default.
    burst: Option<u32>,
    delay: Delay,
}

impl Quota {
    /// `limit` requests per second.
    pub fn per_second(limit: u32) -> Result<Quota, QuotaError> {
        Quota::from_nanos(limit, NANOS_PER_SEC)
    }

    /// `limit` requests per minute.
    pub fn per_minute(limit: u32) -> Result<Quota, QuotaError> {
        Quota::from_nanos(limit, 60 * NANOS_PER_SEC)
    }

    /// `limit` requests per hour.
    pub fn per_hour(limit: u32) -> Result<Quota, QuotaError> {
        Quota::from_nanos(limit, 3600 * NANOS_PER_SEC)
    }

    /// `limit` requests per `period`.
    ///
    /// # Errors
    ///
    /// [`QuotaError::ZeroLimit`], [`QuotaError::ZeroPeriod`],
    /// [`QuotaError::PeriodOverflow`] beyond `u64` nanoseconds, and
    /// [`QuotaError::RateTooHigh`] above one request per nanosecond.
    pub fn with_period(limit: u32, period: Duration) -> Result<Quota, QuotaError> {
        if period.as_nanos() > u128::from(u64::MAX) {
            return Err(QuotaError::PeriodOverflow);
        }
        Quota::from_nanos(limit, duration_to_nanos(period))
    }

    fn from_nanos(limit: u32, period: u64) -> Result<Quota, QuotaError> {
        if limit == 0 {
            return Err(QuotaError::ZeroLimit);
        }
        if period == 0 {
            return Err(QuotaError::ZeroPeriod);
        }
        if u64::from(limit) > period {
            return Err(QuotaError::RateTooHigh {
                limit: limit.into(),
                period_nanos: period,
            });
        }
        Ok(Quota {
            limit,
            period,
            burst: None,
            delay: Delay::Smooth,
        })
    }

    /// Sets the burst: how many requests may pass at once (for the leaky
    /// bucket, nginx's `burst`: excess requests beyond the rate).
    ///
    /// # Errors
    ///
    /// [`QuotaError::ZeroBurst`] for zero.
    pub fn burst(self, burst: u32) -> Result<Quota, QuotaError> {
        if burst == 0 {
            return Err(QuotaError::ZeroBurst);
        }
        Ok(Quota {
            burst: Some(burst),
            ..self
        })
    }

    /// Sets the leaky bucket's delay mode (nginx's `nodelay` / `delay=N`).
    pub fn delay(self, delay: Delay) -> Quota {
        Quota { delay, ..self }
    }

    /// Requests per period.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The period.
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period)
    }

    /// The period in nanoseconds.
    pub fn period_nanos(&self) -> u64 {
        self.period
    }

    /// The burst if one was set.
    pub fn explicit_burst(&self) -> Option<u32> {
        self.burst
    }

    /// The burst if one was set, else `default`.
    pub fn burst_or(&self, default: u32) -> u32 {
        self.burst.unwrap_or(default)
    }

    /// The leaky bucket's delay mode.
    pub fn delay_mode(&self) -> Delay {
        self.delay
    }

    /// Nanoseconds between two requests at the steady rate, `period /
    /// limit` rounded *up* to a whole nanosecond (at least 1), so that a
    /// limiter spacing requests by it never runs faster than the quota: `limit`
    /// intervals span at least the period (167 per minute: 359,281,438 ns,
    /// 167 of them 60.000000146 s).
    pub fn emission_interval_nanos(&self) -> u64 {
        self.period.div_ceil(u64::from(self.limit))
    }
}

impl fmt::Display for Quota {
    /// The canonical form, which parses back to an equal quota:
    /// `{limit}/{n}{unit}` with the largest unit that divides the period,
    /// then the options.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 7] = [
            ("d", 86_400 * NANOS_PER_SEC),
            ("h", 3_600 * NANOS_PER_SEC),
            ("m", 60 * NANOS_PER_SEC),
            ("s", NANOS_PER_SEC),
            ("ms", 1_000_000),
            ("us", 1_000),
            ("ns", 1),
        ];
        let (unit, size) = UNITS
            .iter()
            .copied()
            .find(|(_, size)| self.period % size == 0)
            .unwrap_or(("ns", 1));
        write!(f, "{}/{}{}", self.limit, self.period / size, unit)?;
        if let Some(burst) = self.burst {
            write!(f, " burst={burst}")?;
        }
        match self.delay {
            Delay::Smooth => Ok(()),
            Delay::NoDelay => f.write_str(" nodelay"),
            Delay::After(n) => write!(f, " delay={n}"),
        }
    }
}

impl FromStr for Quota {
    type Err = QuotaError;

    /// Parses `RATE [OPTION]...`.
    ///
    /// `RATE` is `N[r]/[M]UNIT`: `N` requests per `M` units (M defaults to
    /// 1). Units: `ns`, `us`, `ms`, `s`/`sec`/`second(s)`,
    /// `m`/`min`/`minute(s)`, `h`/`hr`/`hour(s)`, `d`/`day(s)`. Options,
    /// separated by spaces: `burst=N`, `nodelay`, `delay=N`.
    fn from_str(input: &str) -> Result<Quota, QuotaError> {
        let fail = |reason: &'static str| QuotaError::Parse {
            input: input.to_owned(),
            reason,
        };
        let mut words = input.split_ascii_whitespace();
        let rate = words.next().ok_or_else(|| fail("empty quota"))?;
        let (count, per) = rate
            .split_once('/')
            .ok_or_else(|| fail("expected a rate such as 10r/s or 100/1m"))?;
        let count = count.strip_suffix('r').unwrap_or(count);
        let limit = parse_u32(count).map_err(fail)?;

        let digits = per.bytes().take_while(u8::is_ascii_digit).count();
        let (amount, unit) = per.split_at(digits);
        let amount = if amount.is_empty() {
            1
        } else {
            amount
                .parse::<u64>()
                .map_err(|_| fail("the period's number is too large"))?
        };
        let unit_nanos = match unit {
            "ns" => 1,
            "us" => 1_000,
            "ms" => 1_000_000,
            "s" | "sec" | "second" | "seconds" => NANOS_PER_SEC,
            "m" | "min" | "minute" | "minutes" => 60 * NANOS_PER_SEC,
            "h" | "hr" | "hour" | "hours" => 3_600 * NANOS_PER_SEC,
            "d" | "day" | "days" => 86_400 * NANOS_PER_SEC,
            "" => return Err(fail("missing a time unit after '/'")),
            _ => return Err(fail("unknown time unit (use ns, us, ms, s, m, h or d)")),
        };
        let period = amount
            .checked_mul(unit_nanos)
            .ok_or(QuotaError::PeriodOverflow)?;
        let mut quota = Quota::from_nanos(limit, period)?;

        let mut seen_burst = false;
        let mut seen_delay = false;
        for word in words {
            if let Some(n) = word.strip_prefix("burst=") {
                if std::mem::replace(&mut seen_burst, true) {
                    return Err(fail("burst given twice"));
                }
                quota = quota.burst(parse_u32(n).map_err(fail)?)?;
            } else if word == "nodelay" || word.starts_with("delay=") {
                if std::mem::replace(&mut seen_delay, true) {
                    return Err(fail("nodelay and delay= are exclusive and given once"));
                }
                quota.delay = match word.strip_prefix("delay=") {
                    None => Delay::NoDelay,
                    Some(n) => Delay::After(parse_u32(n).map_err(fail)?),
                };
            } else {
                return Err(fail(
                    "unknown option (expected burst=N, nodelay or delay=N)",
                ));
            }
        }
        Ok(quota)
    }
}

fn parse_u32(digits: &str) -> Result<u32, &'static str> {
    if digits.is_empty() {
        return Err("expected a number");
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("expected a whole number of digits");
    }
    digits
        .parse::<u32>()
        .map_err(|_| "number too large (at most 4294967295)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quota {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn constructors() {
        assert_eq!(
            Quota::per_second(10).unwrap().period(),
            Duration::from_secs(1)
        );
        assert_eq!(
            Quota::per_minute(100).unwrap().period(),
            Duration::from_secs(60)
        );
        let h = Quota::per_hour(5000).unwrap();
        assert_eq!((h.limit(), h.period_nanos()), (5000, 3_600_000_000_000));
        assert_eq!(h.emission_interval_nanos(), 720_000_000);
        let w = Quota::with_period(7, Duration::from_millis(1500)).unwrap();
        assert_eq!(w.period_nanos(), 1_500_000_000);
        assert_eq!(w.explicit_burst(), None);
        assert_eq!(w.burst_or(7), 7);
        assert_eq!(w.burst(3).unwrap().burst_or(7), 3);
    }

    #[test]
    fn constructor_errors() {
        assert_eq!(Quota::per_second(0), Err(QuotaError::ZeroLimit));
        assert_eq!(
            Quota::with_period(1, Duration::ZERO),
            Err(QuotaError::ZeroPeriod)
        );
        assert_eq!(
            Quota::with_period(1, Duration::MAX),
            Err(QuotaError::PeriodOverflow)
        );
        assert_eq!(
            Quota::with_period(11, Duration::from_nanos(10)),
            Err(QuotaError::RateTooHigh {
                limit: 11,
                period_nanos: 10
            })
        );
        assert!(Quota::with_period(10, Duration::from_nanos(10)).is_ok());
        assert_eq!(
            Quota::per_second(1).unwrap().burst(0),
            Err(QuotaError::ZeroBurst)
        );
    }

    #[test]
    fn parses_the_usual_forms() {
        assert_eq!(q("10r/s"), Quota::per_second(10).unwrap());
        assert_eq!(q("100r/m"), Quota::per_minute(100).unwrap());
        assert_eq!(q("5000/h"), Quota::per_hour(5000).unwrap());
        assert_eq!(q("60/hour"), Quota::per_hour(60).unwrap());
        assert_eq!(q("100/1m"), Quota::per_minute(100).unwrap());
        assert_eq!(q("  100/minutes "), Quota::per_minute(100).unwrap());
        assert_eq!(q("3/2d").period(), Duration::from_secs(2 * 86_400));
        assert_eq!(q("7/1500ms").period(), Duration::from_millis(1500));
        assert_eq!(q("1/250us").period(), Duration::from_micros(250));
        assert_eq!(q("1/3ns").period(), Duration::from_nanos(3));
        assert_eq!(q("10/30sec").period(), Duration::from_secs(30));
    }

    #[test]
    fn parses_nginx_options() {
        let a = q("10r/s burst=20 nodelay");
        assert_eq!(a.explicit_burst(), Some(20));
        assert_eq!(a.delay_mode(), Delay::NoDelay);
        let b = q("10r/s burst=12 delay=8");
        assert_eq!(
            (b.explicit_burst(), b.delay_mode()),
            (Some(12), Delay::After(8))
        );
        let c = q("1r/m burst=5");
        assert_eq!(c.delay_mode(), Delay::Smooth);
    }

    #[test]
    fn rejects_bad_strings_with_reasons() {
        let cases: &[(&str, &str)] = &[
            ("", "empty quota"),
            ("   ", "empty quota"),
            ("10", "expected a rate"),
            ("r/s", "expected a number"),
            ("-1/s", "whole number"),
            ("1.5/s", "whole number"),
            ("10/", "missing a time unit"),
            ("10/5", "missing a time unit"),
            ("10/fortnight", "unknown time unit"),
            ("10r/s burst=", "expected a number"),
            ("10r/s burst=x", "whole number"),
            ("10r/s burst=1 burst=2", "burst given twice"),
            ("10r/s nodelay delay=3", "exclusive"),
            ("10r/s fast", "unknown option"),
            ("99999999999/s", "too large"),
            ("1/99999999999999999999s", "too large"),
        ];
        for (input, needle) in cases {
            match input.parse::<Quota>() {
                Err(QuotaError::Parse { reason, .. }) => {
                    assert!(
                        reason.contains(needle),
                        "{input:?}: {reason:?} lacks {needle:?}"
                    )
                }
                other => panic!("{input:?} gave {other:?}"),
            }
        }
        assert_eq!("0r/s".parse::<Quota>(), Err(QuotaError::ZeroLimit));
        assert_eq!("1/0s".parse::<Quota>(), Err(QuotaError::ZeroPeriod));
        assert_eq!(
            "1/9999999999d".parse::<Quota>(),
            Err(QuotaError::PeriodOverflow)
        );
        assert_eq!("10r/s burst=0".parse::<Quota>(), Err(QuotaError::ZeroBurst));
        assert!(matches!(
            "2/1ns".parse::<Quota>(),
            Err(QuotaError::RateTooHigh { .. })
        ));
        let message = "10/fortnight".parse::<Quota>().unwrap_err().to_string();
        assert!(message.contains("10/fortnight") && message.contains("unknown time unit"));
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "10r/s",
            "100r/m",
            "5000/h",
            "7/1500ms",
            "1/3ns",
            "2/90s",
            "3/2d",
            "10r/s burst=20 nodelay",
            "10r/s burst=12 delay=8",
            "1/1000001us burst=3",
        ] {
            let quota = q(s);
            assert_eq!(q(&quota.to_string()), quota, "{s} -> {quota}");
        }
        assert_eq!(q("100r/m").to_string(), "100/1m");
        assert_eq!(q("2/90s").to_string(), "2/90s");
    }
}
