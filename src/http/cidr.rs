//! Address ranges (`10.0.0.0/8`, `2001:db8::/32`) for trusted proxies and
//! for grouping IPv6 clients by prefix.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP address range: an address and a prefix length.
///
/// IPv4-mapped IPv6 addresses (`::ffff:10.1.2.3`, which a dual-stack
/// socket reports for IPv4 peers) are compared as the IPv4 address they
/// carry.
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
pub enum CidrError {
    /// The part before `/` is not an IP address.
    BadAddress(String),
    /// The prefix is not a number, or longer than the address (32 bits for
    /// IPv4, 128 for IPv6).
    BadPrefix(String),
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CidrError::BadAddress(s) => write!(f, "not an IP address: {s:?}"),
            CidrError::BadPrefix(s) => write!(
                f,
                "bad prefix length {s:?} (at most 32 for IPv4, 128 for IPv6)"
            ),
        }
    }
}

impl std::error::Error for CidrError {}

impl Cidr {
    /// The range of `addr`'s first `prefix` bits.
    ///
    /// # Errors
    ///
    /// [`CidrError::BadPrefix`] when `prefix` is longer than the address.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Cidr, CidrError> {
        let addr = addr.to_canonical();
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
            None => max_prefix(addr.to_canonical()),
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
