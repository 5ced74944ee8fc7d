//! `ClientIp::resolve` on arbitrary forwarding headers, for each
//! `ForwardedHeader` kind: never panics, and whatever a client wrote, the
//! address a trusted proxy appended after it is the client.
//!
//! The input is the client-written part: its lines split on `\n`, bytes a
//! header value cannot hold (controls but the tab) left out. Then:
//!
//! 1. the lines alone from a trusted peer, and from an untrusted peer (the
//!    peer, whatever the header says);
//! 2. the proxy's element (`203.0.113.9`, `for=203.0.113.9`) appended
//!    after a comma on the last line, or on a line of its own, with or
//!    without trusted hops after it: always `203.0.113.9`.

#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use rategate::http::{ClientIp, ForwardedHeader};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::LazyLock;

const PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const UNTRUSTED_PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));
const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9));

/// Each kind: the resolver, its header, the element the proxy appends
/// for `CLIENT`, and a trusted hop's element.
struct Kind {
    client_ip: ClientIp,
    name: HeaderName,
    element: &'static [u8],
    trusted_hop: &'static [u8],
}

static KINDS: LazyLock<[Kind; 3]> = LazyLock::new(|| {
    let base = ClientIp::new()
        .trust_proxies(["10.0.0.0/8", "2001:db8::/32"])
        .unwrap();
    [
        Kind {
            client_ip: base.clone().header(ForwardedHeader::XForwardedFor),
            name: HeaderName::from_static("x-forwarded-for"),
            element: b"203.0.113.9",
            trusted_hop: b"10.0.0.6",
        },
        Kind {
            client_ip: base.clone().header(ForwardedHeader::Forwarded),
            name: http::header::FORWARDED,
            element: b"for=203.0.113.9",
            trusted_hop: b"for=\"[2001:db8::6]:4711\";proto=https",
        },
        Kind {
            client_ip: base.header(ForwardedHeader::XRealIp),
            name: HeaderName::from_static("x-real-ip"),
            element: b"203.0.113.9",
            trusted_hop: b"10.0.0.6",
        },
    ]
});

fn header_map(name: &HeaderName, lines: &[Vec<u8>]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for line in lines {
        let value = HeaderValue::from_bytes(line).expect("header value bytes");
        map.append(name.clone(), value);
    }
    map
}

fn appended(lines: &[Vec<u8>], element: &[u8], own_line: bool) -> Vec<Vec<u8>> {
    let mut lines = lines.to_vec();
    match lines.last_mut() {
        Some(line) if !own_line => {
            line.extend_from_slice(b", ");
            line.extend_from_slice(element);
        }
        _ => lines.push(element.to_vec()),
    }
    lines
}

fuzz_target!(|data: &[u8]| {
    let lines: Vec<Vec<u8>> = data
        .split(|&b| b == b'\n')
        .map(|line| {
            line.iter()
                .copied()
                .filter(|&b| !((b < 0x20 && b != b'\t') || b == 0x7f))
                .collect()
        })
        .collect();
    for kind in KINDS.iter() {
        let resolve =
            |peer, lines: &[Vec<u8>]| kind.client_ip.resolve(peer, &header_map(&kind.name, lines));
        let _ = resolve(PEER, &lines);
        assert_eq!(resolve(UNTRUSTED_PEER, &lines), UNTRUSTED_PEER);
        for own_line in [false, true] {
            let with_client = appended(&lines, kind.element, own_line);
            assert_eq!(
                resolve(PEER, &with_client),
                CLIENT,
                "{:?}: {:?}",
                kind.name,
                with_client
                    .iter()
                    .map(|l| l.escape_ascii().to_string())
                    .collect::<Vec<_>>()
            );
            let with_hops = appended(&with_client, kind.trusted_hop, false);
            let with_hops = appended(&with_hops, kind.trusted_hop, true);
            assert_eq!(resolve(PEER, &with_hops), CLIENT, "{:?}", kind.name);
        }
    }
});
