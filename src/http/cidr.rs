//! Address ranges (`10.0.0.0/8`, `2001:db8::/32`) for trusted proxies and
//! for grouping IPv6 clients by prefix.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP address range: an address and a prefix length.
///
/// IPv4-mapped IPv6 addresses (`::ffff:10.1.2.3`, which a dual-stack
/// socket reports for IPv4 peers) are compared as the IPv4 address they
/// carry. An IPv4-mapped range is the IPv4 range it maps:
/// `::ffff:10.0.0.0/104` is `10.0.0.0/8` (its prefix counts all 128 bits,
/// the 96 of `::ffff:` first, so it is 96 to 128). A mapped address with a
/// shorter prefix is refused: that range would reach past the IPv4-mapped
/// block into IPv6 addresses that are not IPv4 ones.
///
/// # Examples
///
/// ```
/// use rategate::http::Cidr;
///
/// let private: Cidr = "10.0.0.0/8".parse()?;
/// assert!(private.contains("10.20.30.40".parse()?));
/// assert!(private.contains("::ffff:10.1.2.3".parse()?));
/// assert!(!private.contains("11.0.0.1".parse()?));
/// // An IPv4-mapped range is the IPv4 range it maps.
/// let mapped: Cidr = "::ffff:10.0.0.0/104".parse()?;
/// assert_eq!(mapped, private);
/// assert!(mapped.contains("10.1.2.3".parse()?));
/// let one: Cidr = "2001:db8::1".parse()?; // a bare address is /128
/// assert_eq!(one.prefix(), 128);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// Masked to `prefix` bits, canonical (no IPv4-mapped IPv6).
    addr: IpAddr,
    prefix: u8,
}

/// Why a [`Cidr`] did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CidrError {
    /// The part before `/` is not an IP address.
    BadAddress(String),
    /// The prefix is not a number, or longer than the address (32 bits for
    /// IPv4, 128 for IPv6), or shorter than 96 for an IPv4-mapped IPv6
    /// address (`::ffff:a.b.c.d`).
    BadPrefix(String),
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CidrError::BadAddress(s) => write!(f, "not an IP address: {s:?}"),
            CidrError::BadPrefix(s) => write!(
                f,
                "bad prefix length {s:?} (at most 32 for IPv4 and 128 for IPv6; \
                 96 to 128 for an IPv4-mapped IPv6 address, ::ffff:a.b.c.d, \
                 which is the IPv4 range of the prefix less 96)"
            ),
        }
    }
}

impl std::error::Error for CidrError {}

impl Cidr {
    /// The range of `addr`'s first `prefix` bits.
    ///
    /// An IPv4-mapped IPv6 `addr` (`::ffff:10.0.0.0`) with `prefix` 96 to
    /// 128 is the IPv4 range of its last `prefix - 96` bits
    /// (`10.0.0.0/8` for 104).
    ///
    /// # Errors
    ///
    /// [`CidrError::BadPrefix`] when `prefix` is longer than the address,
    /// or shorter than 96 for an IPv4-mapped IPv6 address.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Cidr, CidrError> {
        let (addr, prefix) = match addr {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                // The mapped block's 96 bits, then an IPv4 prefix.
                Some(v4) if (96..=128).contains(&prefix) => (IpAddr::V4(v4), prefix - 96),
                Some(_) => return Err(CidrError::BadPrefix(prefix.to_string())),
                None => (addr, prefix),
            },
            IpAddr::V4(_) => (addr, prefix),
        };
        if prefix > max_prefix(addr) {
            return Err(CidrError::BadPrefix(prefix.to_string()));
        }
        Ok(Cidr {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// The first address of the range.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length in bits.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.contains_canonical(ip.to_canonical())
    }

    /// [`contains`](Self::contains) for an address already canonical (an
    /// IPv4-mapped IPv6 address written as IPv4): one AND and one compare
    /// of words, for the trusted-proxy test each request makes.
    #[inline]
    pub(crate) fn contains_canonical(&self, ip: IpAddr) -> bool {
        match (ip, self.addr) {
            (IpAddr::V4(ip), IpAddr::V4(net)) => {
                u32::from(ip) & keep_v4(self.prefix) == u32::from(net)
            }
            (IpAddr::V6(ip), IpAddr::V6(net)) => {
                u128::from(ip) & keep_v6(self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let (addr, prefix) = match s.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| CidrError::BadAddress(addr.to_string()))?;
        let prefix = match prefix {
            // All of the address as written (128 for an IPv4-mapped one).
            None => max_prefix(addr),
            Some(p) => p
                .trim()
                .parse()
                .map_err(|_| CidrError::BadPrefix(p.to_string()))?,
        };
        Cidr::new(addr, prefix)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn max_prefix(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

/// `addr` with all but its first `prefix` bits cleared (`prefix` at most
/// the address length).
pub(crate) fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) & keep_v4(prefix))),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & keep_v6(prefix))),
    }
}

/// The bits an IPv4 prefix of `prefix` bits keeps (at most 32).
#[inline]
fn keep_v4(prefix: u8) -> u32 {
    // A shift by the full width (prefix 0) keeps nothing.
    u32::MAX
        .checked_shl(32 - u32::from(prefix.min(32)))
        .unwrap_or(0)
}

/// The bits an IPv6 prefix of `prefix` bits keeps (at most 128).
#[inline]
fn keep_v6(prefix: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(prefix.min(128)))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_matches() {
        let c: Cidr = "192.168.1.77/24".parse().unwrap();
        assert_eq!(c.to_string(), "192.168.1.0/24");
        assert!(c.contains("192.168.1.1".parse().unwrap()));
        assert!(!c.contains("192.168.2.1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        assert!(!all.contains("::1".parse().unwrap()));
        let v6: Cidr = "2001:db8:1:2:3:4:5:6/64".parse().unwrap();
        assert_eq!(v6.to_string(), "2001:db8:1:2::/64");
        assert!(v6.contains("2001:db8:1:2:ffff::1".parse().unwrap()));
        assert!(!v6.contains("2001:db8:1:3::1".parse().unwrap()));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "/",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/x",
            "banana",
            "1.2.3.4/-1",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn ipv4_mapped_ranges_are_their_ipv4_range() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mapped: Cidr = "::ffff:10.0.0.0/104".parse().unwrap();
        assert_eq!(mapped, "10.0.0.0/8".parse().unwrap());
        assert_eq!(mapped.to_string(), "10.0.0.0/8");
        assert_eq!(mapped.prefix(), 8);
        assert!(mapped.contains(ip("10.1.2.3")));
        assert!(mapped.contains(ip("::ffff:10.1.2.3")));
        assert!(!mapped.contains(ip("11.0.0.1")));
        assert!(!mapped.contains(ip("::ffff:11.0.0.1")));
        assert!(!mapped.contains(ip("::a01:203")));
        for (text, v4) in [
            ("::ffff:10.1.2.3", "10.1.2.3/32"),
            ("::ffff:10.1.2.3/128", "10.1.2.3/32"),
            ("::ffff:10.1.2.3/120", "10.1.2.0/24"),
            ("::ffff:255.255.255.255/96", "0.0.0.0/0"),
            ("::FFFF:0a01:0203/112", "10.1.0.0/16"),
        ] {
            assert_eq!(
                text.parse::<Cidr>().unwrap(),
                v4.parse::<Cidr>().unwrap(),
                "{text}"
            );
        }
        assert_eq!(
            Cidr::new(ip("::ffff:192.168.1.7"), 120).unwrap(),
            "192.168.1.0/24".parse().unwrap()
        );
        // Shorter than the mapped block: refused, and the message says why.
        for bad in [
            "::ffff:10.0.0.0/95",
            "::ffff:10.0.0.0/8",
            "::ffff:0.0.0.0/0",
        ] {
            let err = bad.parse::<Cidr>().unwrap_err();
            assert!(matches!(err, CidrError::BadPrefix(_)), "{bad}");
            assert!(err.to_string().contains("96 to 128"), "{bad}: {err}");
        }
        assert!("::ffff:10.0.0.0/129".parse::<Cidr>().is_err());
        assert!(Cidr::new(ip("::ffff:10.0.0.0"), 8).is_err());
        // Not mapped: IPv6 ranges as before (`::/96` holds IPv4-compatible
        // addresses, which are not canonicalised).
        let compat: Cidr = "::10.0.0.0/104".parse().unwrap();
        assert_eq!(compat.to_string(), "::a00:0/104");
        assert!(!compat.contains(ip("10.1.2.3")));
    }

    #[test]
    fn mask_edges() {
        let ip: IpAddr = "255.255.255.255".parse().unwrap();
        assert_eq!(mask(ip, 0).to_string(), "0.0.0.0");
        assert_eq!(mask(ip, 32), ip);
        assert_eq!(mask(ip, 1).to_string(), "128.0.0.0");
        let ip6: IpAddr = "ffff::ffff".parse().unwrap();
        assert_eq!(mask(ip6, 0).to_string(), "::");
        assert_eq!(mask(ip6, 128), ip6);
    }
}
