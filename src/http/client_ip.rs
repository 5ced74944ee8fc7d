//! The client's IP address: the peer's, or from a forwarding header when
//! the peer is a trusted proxy, grouped by prefix.

use super::cidr::{Cidr, mask};
use super::key::{Ipv4Text, Key, has_header};
use http::HeaderMap;
use http::header::HeaderName;
use std::net::IpAddr;

/// The forwarding header a trusted proxy writes. Only one is read: a proxy
/// that appends to `X-Forwarded-For` passes a client's own `Forwarded`
/// header through untouched, so reading a second header would let the
/// client pick its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (nginx
    /// `$proxy_add_x_forwarded_for`, most load balancers). The default.
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=192.0.2.60;proto=https, for="[2001:db8::1]"`.
    Forwarded,
    /// `X-Real-IP: client` (nginx `proxy_set_header X-Real-IP $remote_addr`).
    XRealIp,
}

// Built at compile time: `HeaderName::from_static` run on each request
// checks every byte of the name again (about 120 instructions). Statics,
// lent by reference: a name made from a constant on each request is
// dropped after it too (a call through its bytes' vtable).
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
static FORWARDED: HeaderName = http::header::FORWARDED;

impl ForwardedHeader {
    fn name(self) -> &'static HeaderName {
        match self {
            ForwardedHeader::XForwardedFor => &X_FORWARDED_FOR,
            ForwardedHeader::Forwarded => &FORWARDED,
            ForwardedHeader::XRealIp => &X_REAL_IP,
        }
    }
}

/// Most forwarding hops walked; past them the last trusted hop is the key,
/// so a header of thousands of entries costs no more than this many.
const MAX_HOPS: usize = 32;

/// How to find a request's client IP address, and how to turn it into a
/// key.
///
/// The peer address (the TCP connection's) is the client unless the peer
/// is a trusted proxy. Then the configured [`ForwardedHeader`] is walked
/// from the right, skipping trusted proxies: the right-most address that is
/// not a trusted proxy is the client. The header's lines are split on
/// commas (quotes do not group), and each element is parsed on its own,
/// from its bytes. Elements left of the client's were written by the
/// client itself and are ignored, whatever they hold (forged addresses,
/// bytes that are not ASCII, an unterminated quote): a client that sends
/// its own `X-Forwarded-For` can neither pick its key nor hide the address
/// the proxy appended after it.
///
/// Every element the walk parses was written by a trusted proxy, not by
/// the client: the peer appended the address of the connection it
/// received, and so did each trusted hop before it. When such an element
/// cannot be parsed (`unknown`, an obfuscated `_name`, garbage, empty),
/// the last trusted hop is the key: those requests share that proxy's
/// limit rather than choose one. A client cannot cause this; the proxy's
/// configuration does, and it must append the address it saw, e.g.
/// nginx's `proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;`
/// (or `proxy_set_header X-Real-IP $remote_addr;` with
/// [`ForwardedHeader::XRealIp`]). Trust no proxy that passes the client's
/// header on without appending to it: the element read as the client's
/// address would be the client's own.
///
/// IPv6 clients are grouped by their first 64 bits by default (one
/// customer usually holds a whole /64, and can rotate addresses in it at
/// will); IPv4 addresses are keyed whole by default.
///
/// # Examples
///
/// ```
/// use rategate::http::ClientIp;
/// use http::HeaderMap;
///
/// let client_ip = ClientIp::new().trust_proxies(["10.0.0.0/8"])?;
/// let mut headers = HeaderMap::new();
/// headers.insert("x-forwarded-for", "6.6.6.6, 203.0.113.9, 10.0.0.2".parse()?);
/// // From a trusted proxy: the right-most untrusted hop.
/// assert_eq!(client_ip.resolve("10.0.0.1".parse()?, &headers), "203.0.113.9".parse::<std::net::IpAddr>()?);
/// // From anyone else: the peer, whatever the header says.
/// assert_eq!(client_ip.resolve("198.51.100.7".parse()?, &headers), "198.51.100.7".parse::<std::net::IpAddr>()?);
/// assert_eq!(client_ip.key("2001:db8:1:2:3:4:5:6".parse()?), "2001:db8:1:2::/64");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ClientIp {
    trusted: Vec<Cidr>,
    header: ForwardedHeader,
    v4_prefix: u8,
    v6_prefix: u8,
}

impl Default for ClientIp {
    fn default() -> Self {
        ClientIp::new()
    }
}

impl ClientIp {
    /// The peer address, no trusted proxies, IPv6 grouped by /64.
    pub fn new() -> ClientIp {
        ClientIp {
            trusted: Vec::new(),
            header: ForwardedHeader::default(),
            v4_prefix: 32,
            v6_prefix: 64,
        }
    }

    /// Trusts the proxies in these ranges (`"10.0.0.0/8"`, `"::1"`).
    ///
    /// # Errors
    ///
    /// A [`CidrError`](super::CidrError) for a range that does not parse.
    pub fn trust_proxies<I, S>(mut self, ranges: I) -> Result<ClientIp, super::CidrError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for range in ranges {
            self = self.trust(range.as_ref().parse()?);
        }
        Ok(self)
    }

    /// Trusts the proxies in `range`.
    pub fn trust(mut self, range: Cidr) -> ClientIp {
        self.trusted.push(range);
        self
    }

    /// Reads `header` from trusted proxies (default
    /// [`ForwardedHeader::XForwardedFor`]).
    pub fn header(mut self, header: ForwardedHeader) -> ClientIp {
        self.header = header;
        self
    }

    /// Groups IPv6 clients by their first `bits` bits (default 64; at most
    /// 128, larger values count as 128).
    pub fn ipv6_prefix(mut self, bits: u8) -> ClientIp {
        self.v6_prefix = bits.min(128);
        self
    }

    /// Groups IPv4 clients by their first `bits` bits (default 32: each
    /// address alone; at most 32).
    pub fn ipv4_prefix(mut self, bits: u8) -> ClientIp {
        self.v4_prefix = bits.min(32);
        self
    }

    /// Whether `ip` is a trusted proxy.
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusts(ip.to_canonical())
    }

    /// [`is_trusted`](Self::is_trusted) for an address already canonical
    /// (an IPv4-mapped IPv6 address written as IPv4).
    fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted
            .iter()
            .any(|range| range.contains_canonical(ip))
    }

    /// The client's address for a request from `peer` with `headers`.
    ///
    /// Inlined where the layer takes a key: a peer that is no trusted
    /// proxy, or one that sent no forwarding header, is answered without
    /// a call; the header's walk is out of line.
    #[inline]
    pub fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = peer.to_canonical();
        // Most requests a trusted proxy sends on have the header, but
        // one that lacks it is told by comparing names, without hashing
        // the name (see `first_value`).
        if !self.trusts(peer) || !has_header(headers, self.header.name()) {
            return peer;
        }
        self.walk(peer, headers)
    }

    /// The forwarding header's walk, from `peer` (canonical, trusted).
    ///
    /// Each line is split into elements on its bytes and each element is
    /// parsed on its own: what the client wrote (left of the element the
    /// proxy appended) may be anything, non-UTF-8 included, and never
    /// hides the elements right of it.
    fn walk(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut last_trusted = peer;
        let mut hops = 0;
        // Later header lines were appended later (nearer to us): walk the
        // lines from the last, and each line's elements from the right.
        // Commas split elements even inside quotes: a client's unterminated
        // quote must not swallow the element the proxy appended after it.
        for line in headers.get_all(self.header.name()).iter().rev() {
            for element in line.as_bytes().rsplit(|&b| b == b',') {
                hops += 1;
                if hops > MAX_HOPS {
                    return last_trusted;
                }
                let parsed = match self.header {
                    ForwardedHeader::Forwarded => forwarded_for(element),
                    _ => parse_addr(element),
                };
                match parsed {
                    Some(ip) if !self.trusts(ip) => return ip,
                    Some(ip) => last_trusted = ip,
                    // Written by a trusted proxy (the walk has not passed an
                    // untrusted hop): see the type's docs.
                    None => return last_trusted,
                }
            }
        }
        // Every hop is a trusted proxy: the request began inside; the
        // left-most hop is the nearest thing to a client.
        last_trusted
    }

    /// The key for a client at `ip`: the address, or its group
    /// (`2001:db8:1:2::/64`) when the prefix is shorter than the address.
    pub fn key(&self, ip: IpAddr) -> String {
        self.key_of(ip).into_owned()
    }

    /// [`key`](Self::key) without an allocation for a whole IPv4 address
    /// (the common case).
    #[inline]
    pub(crate) fn key_of(&self, ip: IpAddr) -> Key<'static> {
        match ip.to_canonical() {
            // Written on the stack, without the formatting machinery.
            IpAddr::V4(v4) if self.v4_prefix >= 32 => Key::Inline(Ipv4Text::new(v4)),
            ip => self.grouped_key(ip),
        }
    }

    /// [`key_of`](Self::key_of) for an IPv6 address, or an IPv4 address
    /// grouped by a shorter prefix.
    fn grouped_key(&self, ip: IpAddr) -> Key<'static> {
        let (prefix, full) = match ip {
            IpAddr::V4(_) => (self.v4_prefix, 32),
            IpAddr::V6(_) => (self.v6_prefix, 128),
        };
        if prefix >= full {
            // A whole IPv6 address (a whole IPv4 one is `key_of`'s).
            Key::Owned(ip.to_string())
        } else {
            Key::Owned(format!("{}/{prefix}", mask(ip, prefix)))
        }
    }
}

/// An address as proxies write it in `X-Forwarded-For`: `1.2.3.4`,
/// `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]:80`, with ASCII whitespace
/// around; `None` for anything else (bytes that are not ASCII included).
fn parse_addr(entry: &[u8]) -> Option<IpAddr> {
    // An address is ASCII: anything else is a malformed element.
    let entry = std::str::from_utf8(entry.trim_ascii()).ok()?;
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Some(rest) = entry.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.starts_with(':')) {
            return None;
        }
        return inside.parse::<IpAddr>().ok().map(|ip| ip.to_canonical());
    }
    // IPv4 with a port; an IPv6 address with a port is always bracketed.
    let (host, port) = entry.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// The `for=` address of one RFC 7239 `Forwarded` element
/// (`for=192.0.2.60;proto=http;by=203.0.113.43`), `None` when it has none
/// or it is `unknown`, an obfuscated identifier or not an address. Read
/// from the bytes: another parameter's value that is not ASCII does not
/// hide `for=`.
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    element.split(|&b| b == b';').find_map(|pair| {
        let eq = pair.iter().position(|&b| b == b'=')?;
        let (name, value) = (&pair[..eq], &pair[eq + 1..]);
        if !name.trim_ascii().eq_ignore_ascii_case(b"for") {
            return None;
        }
        let value = value.trim_ascii();
        let value = value
            .strip_prefix(b"\"")
            .and_then(|v| v.strip_suffix(b"\""))
            .unwrap_or(value);
        parse_addr(value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: &'static str, values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append(name, v.parse().unwrap());
        }
        map
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn trusted_ranges_by_family_decide_as_the_ranges() {
        let ranges = [
            "10.0.0.0/8",
            "192.168.1.7",
            "0.0.0.0/0",
            "172.16.0.0/12",
            "2001:db8::/32",
            "::1",
            "::/0",
            "fe80::/10",
            "2001:db8:1:2::/64",
        ];
        let mut ips = vec![
            ip("10.0.0.1"),
            ip("11.0.0.1"),
            ip("192.168.1.7"),
            ip("192.168.1.8"),
            ip("172.31.255.255"),
            ip("172.32.0.0"),
            ip("::ffff:10.1.2.3"),
            ip("::ffff:192.168.1.7"),
            ip("::1"),
            ip("::2"),
            ip("2001:db8:1:2::9"),
            ip("2001:db8:1:3::9"),
            ip("2001:db9::1"),
            ip("fe80::1"),
            ip("fec0::1"),
        ];
        // Every bit of an IPv4 and an IPv6 address flipped in turn.
        for bit in 0..32 {
            ips.push(IpAddr::V4(
                (u32::from_be_bytes([10, 0, 0, 1]) ^ 1 << bit).into(),
            ));
        }
        for bit in 0..128 {
            ips.push(IpAddr::V6(
                (u128::from(ip_v6("2001:db8:1:2::9")) ^ 1 << bit).into(),
            ));
        }
        for range in ranges {
            let cidr: Cidr = range.parse().unwrap();
            let client_ip = ClientIp::new().trust_proxies([range]).unwrap();
            for &address in &ips {
                assert_eq!(
                    client_ip.is_trusted(address),
                    cidr.contains(address),
                    "{address} in {range}"
                );
            }
        }
        // Several ranges: trusted by any of them.
        let client_ip = ClientIp::new()
            .trust_proxies(ranges[..2].iter().chain(&ranges[4..6]))
            .unwrap();
        for &address in &ips {
            let any = [0, 1, 4, 5]
                .iter()
                .any(|&i| ranges[i].parse::<Cidr>().unwrap().contains(address));
            assert_eq!(client_ip.is_trusted(address), any, "{address}");
        }
    }

    fn ip_v6(s: &str) -> std::net::Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn parse_addr_forms() {
        assert_eq!(parse_addr(b" 1.2.3.4 "), Some(ip("1.2.3.4")));
        assert_eq!(parse_addr(b"1.2.3.4:8080"), Some(ip("1.2.3.4")));
        assert_eq!(parse_addr(b"[2001:db8::1]:443"), Some(ip("2001:db8::1")));
        assert_eq!(parse_addr(b"[2001:db8::1]"), Some(ip("2001:db8::1")));
        assert_eq!(parse_addr(b"::ffff:1.2.3.4"), Some(ip("1.2.3.4")));
        for bad in [
            "",
            "unknown",
            "_hidden",
            "1.2.3.4:99999",
            "[::1]x",
            "[::1",
            "1.2.3",
            "café",
            "1.2.3.4\u{a0}",
            "\"1.2.3.4",
        ] {
            assert_eq!(parse_addr(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(parse_addr(b"\xff"), None);
        assert_eq!(parse_addr(b"1.2.3.4\xff"), None);
        assert_eq!(parse_addr(b"\t1.2.3.4 "), Some(ip("1.2.3.4")));
    }

    #[test]
    fn forwarded_elements() {
        assert_eq!(
            forwarded_for(br#"proto=https;For="[2001:db8:cafe::17]:4711""#),
            Some(ip("2001:db8:cafe::17"))
        );
        assert_eq!(
            forwarded_for(b"for=192.0.2.60;by=10.0.0.1"),
            Some(ip("192.0.2.60"))
        );
        assert_eq!(forwarded_for(b"for=unknown"), None);
        assert_eq!(forwarded_for(b"by=10.0.0.1"), None);
        assert_eq!(forwarded_for(b"for=\xff"), None);
        assert_eq!(forwarded_for(br#"for="1.2.3.4"#), None);
        // Another parameter's bytes do not hide `for=`.
        assert_eq!(
            forwarded_for(b"by=\xff;for=192.0.2.60;x=caf\xc3\xa9"),
            Some(ip("192.0.2.60"))
        );
    }

    /// A header of raw lines, bytes as a client may send them.
    fn raw(name: &'static str, lines: &[&[u8]]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for line in lines {
            map.append(name, http::HeaderValue::from_bytes(line).unwrap());
        }
        map
    }

    #[test]
    fn client_written_bytes_never_hide_the_proxys_element() {
        let peer = ip("10.0.0.1");
        let client = ip("203.0.113.9");
        let xff = ClientIp::new().trust_proxies(["10.0.0.0/8"]).unwrap();
        let fwd = xff.clone().header(ForwardedHeader::Forwarded);
        let real = xff.clone().header(ForwardedHeader::XRealIp);
        let cases: [(&ClientIp, &str, &[&[u8]]); 16] = [
            (&xff, "x-forwarded-for", &[b"\xff, 203.0.113.9"]),
            (&xff, "x-forwarded-for", &["café, 203.0.113.9".as_bytes()]),
            (&xff, "x-forwarded-for", &[b"\xff,203.0.113.9, 10.0.0.6"]),
            (&xff, "x-forwarded-for", &[b"\"1.2.3.4, 203.0.113.9"]),
            (
                &xff,
                "x-forwarded-for",
                &[b"6.6.6.6, , \xff\xfe, 203.0.113.9"],
            ),
            (&xff, "x-forwarded-for", &[b"\xff", b"203.0.113.9"]),
            (
                &xff,
                "x-forwarded-for",
                &[
                    b"6.6.6.6, caf\xc3\xa9",
                    b"203.0.113.9, 10.0.0.6",
                    b"10.0.0.7",
                ],
            ),
            (&fwd, "forwarded", &[b"for=\xff, for=203.0.113.9"]),
            (&fwd, "forwarded", &[b"for=\"1.2.3.4, for=203.0.113.9"]),
            (
                &fwd,
                "forwarded",
                &[b"for=\"[2001:db8::1, for=203.0.113.9;proto=https"],
            ),
            (
                &fwd,
                "forwarded",
                &[b"for=\"\xff\", for=\"203.0.113.9:4711\""],
            ),
            (
                &fwd,
                "forwarded",
                &[b"for=\"1.2.3.4", b"for=203.0.113.9, for=10.0.0.6"],
            ),
            (
                &fwd,
                "forwarded",
                &[b"for=1.2.3.4;by=\xff, for=203.0.113.9"],
            ),
            (&real, "x-real-ip", &[b"\xff", b"203.0.113.9"]),
            (&real, "x-real-ip", &[b"caf\xc3\xa9, 203.0.113.9"]),
            (&real, "x-real-ip", &[b"203.0.113.9"]),
        ];
        for (client_ip, name, lines) in cases {
            assert_eq!(
                client_ip.resolve(peer, &raw(name, lines)),
                client,
                "{name}: {:?}",
                lines
                    .iter()
                    .map(|l| l.escape_ascii().to_string())
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn a_malformed_element_from_the_proxy_is_the_last_trusted_hop() {
        let peer = ip("10.0.0.1");
        let xff = ClientIp::new().trust_proxies(["10.0.0.0/8"]).unwrap();
        let fwd = xff.clone().header(ForwardedHeader::Forwarded);
        let cases: [(&ClientIp, &str, &[&[u8]], &str); 10] = [
            (&xff, "x-forwarded-for", &[b"203.0.113.9, \xff"], "10.0.0.1"),
            (
                &xff,
                "x-forwarded-for",
                &[b"203.0.113.9, unknown, 10.0.0.6"],
                "10.0.0.6",
            ),
            (&xff, "x-forwarded-for", &[b"203.0.113.9,"], "10.0.0.1"),
            (&xff, "x-forwarded-for", &[b"203.0.113.9", b""], "10.0.0.1"),
            (
                &xff,
                "x-forwarded-for",
                &[b"203.0.113.9", b"_x, 10.0.0.6"],
                "10.0.0.6",
            ),
            (
                &fwd,
                "forwarded",
                &[b"for=203.0.113.9, for=unknown"],
                "10.0.0.1",
            ),
            (
                &fwd,
                "forwarded",
                &[b"for=203.0.113.9, for=_hidden"],
                "10.0.0.1",
            ),
            (
                &fwd,
                "forwarded",
                &[b"for=203.0.113.9, by=10.0.0.6"],
                "10.0.0.1",
            ),
            (
                &fwd,
                "forwarded",
                &[b"for=203.0.113.9, for=\"1.2.3.4"],
                "10.0.0.1",
            ),
            (
                &fwd,
                "forwarded",
                &[b"for=203.0.113.9, for=\xff, for=10.0.0.6"],
                "10.0.0.6",
            ),
        ];
        for (client_ip, name, lines, want) in cases {
            assert_eq!(
                client_ip.resolve(peer, &raw(name, lines)),
                ip(want),
                "{name}: {:?}",
                lines
                    .iter()
                    .map(|l| l.escape_ascii().to_string())
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn walks_from_the_right_over_trusted_hops() {
        let c = ClientIp::new().trust_proxies(["10.0.0.0/8"]).unwrap();
        let h = headers(
            "x-forwarded-for",
            &["1.1.1.1, 2.2.2.2", "10.0.0.5, 10.0.0.6"],
        );
        assert_eq!(c.resolve(ip("10.0.0.1"), &h), ip("2.2.2.2"));
        // Garbage written by a trusted hop: the last trusted hop.
        let h = headers("x-forwarded-for", &["1.1.1.1, unknown, 10.0.0.6"]);
        assert_eq!(c.resolve(ip("10.0.0.1"), &h), ip("10.0.0.6"));
        // All trusted: the left-most.
        let h = headers("x-forwarded-for", &["10.9.9.9, 10.0.0.6"]);
        assert_eq!(c.resolve(ip("10.0.0.1"), &h), ip("10.9.9.9"));
        // No header: the peer.
        assert_eq!(c.resolve(ip("10.0.0.1"), &HeaderMap::new()), ip("10.0.0.1"));
        // Untrusted peer: the header is ignored.
        let h = headers("x-forwarded-for", &["1.1.1.1"]);
        assert_eq!(c.resolve(ip("9.9.9.9"), &h), ip("9.9.9.9"));
        // Another header than the configured one is ignored.
        let h = headers("forwarded", &["for=1.1.1.1"]);
        assert_eq!(c.resolve(ip("10.0.0.1"), &h), ip("10.0.0.1"));
    }

    #[test]
    fn hop_limit_bounds_the_walk() {
        let c = ClientIp::new().trust_proxies(["10.0.0.0/8"]).unwrap();
        let long = vec!["10.1.1.1"; 100].join(",");
        let h = headers("x-forwarded-for", &[&format!("1.1.1.1,{long}")]);
        assert_eq!(c.resolve(ip("10.0.0.1"), &h), ip("10.1.1.1"));
    }

    #[test]
    fn keys_group_ipv6() {
        let c = ClientIp::new();
        assert_eq!(c.key(ip("1.2.3.4")), "1.2.3.4");
        assert_eq!(c.key(ip("2001:db8::1")), "2001:db8::/64");
        assert_eq!(c.ipv6_prefix(128).key(ip("2001:db8::1")), "2001:db8::1");
        let c = ClientIp::new().ipv4_prefix(24).ipv6_prefix(48);
        assert_eq!(c.key(ip("1.2.3.4")), "1.2.3.0/24");
        assert_eq!(c.key(ip("2001:db8:aa:bb::1")), "2001:db8:aa::/48");
    }

    #[test]
    fn ipv4_keys_are_the_dotted_quad() {
        let c = ClientIp::new();
        for text in [
            "0.0.0.0",
            "10.0.0.1",
            "192.168.100.9",
            "255.255.255.255",
            "1.20.100.109",
        ] {
            assert_eq!(c.key(ip(text)), text);
        }
        assert_eq!(c.key(ip("::ffff:1.2.3.4")), "1.2.3.4");
    }
}
