//! Forwarding headers whose client-written part is anything at all (bytes
//! that are not ASCII, commas, quotes, `for=` fragments): behind a trusted
//! proxy the client is the address the proxy appended, over real HTTP
//! through the layer and as a property of `ClientIp::resolve`.

#[path = "support/http.rs"]
mod support;

use axum::Router;
use axum::routing::get;
use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;
use rategate::http::{ClientIp, ForwardedHeader, KeyExtractor, RateLimitLayer, Rule};
use rategate::{FixedWindow, KeyedRateLimiter};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use support::serve;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type Keyed = KeyedRateLimiter<String, FixedWindow>;

fn app(client_ip: ClientIp, limiter: Arc<Keyed>) -> Router {
    let layer = RateLimitLayer::new(KeyExtractor::client_ip(client_ip), Rule::new("ip", limiter));
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

/// The status of `GET /` sent with header `name: value`, the value's bytes
/// written as they are, on a connection of its own.
async fn status(addr: SocketAddr, name: &str, value: &[u8]) -> u16 {
    let mut request =
        format!("GET / HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n{name}: ").into_bytes();
    request.extend_from_slice(value);
    request.extend_from_slice(b"\r\n\r\n");
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(&request).await.expect("write");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.expect("read");
    // "HTTP/1.1 200 OK"
    let code = response
        .get(9..12)
        .unwrap_or_else(|| panic!("no status line: {:?}", response.escape_ascii().to_string()));
    std::str::from_utf8(code)
        .unwrap()
        .parse()
        .expect("a status")
}

#[tokio::test]
async fn a_client_written_prefix_that_is_not_ascii_does_not_hide_the_client() {
    let limits = Arc::new(Keyed::new("1/h".parse().unwrap()).unwrap());
    // The test's own connection (127.0.0.1) is the trusted proxy.
    let client_ip = ClientIp::new().trust_proxies(["127.0.0.1"]).unwrap();
    let addr = serve(app(client_ip, limits.clone())).await;
    let xff = "x-forwarded-for";
    assert_eq!(status(addr, xff, b"203.0.113.9").await, 200);
    assert_eq!(status(addr, xff, b"203.0.113.9").await, 429);
    // The client sent `\xff` (or `café`) and the proxy appended its
    // address: still that client.
    assert_eq!(status(addr, xff, b"\xff, 203.0.113.9").await, 429);
    assert_eq!(status(addr, xff, "café, 203.0.113.9".as_bytes()).await, 429);
    assert_eq!(status(addr, xff, b"\"1.2.3.4, 203.0.113.9").await, 429);
    // Another client with such a prefix has a budget of its own.
    assert_eq!(status(addr, xff, b"\xff, 203.0.113.10").await, 200);
    assert_eq!(status(addr, xff, b"\xff, 203.0.113.10").await, 429);
    // The proxy's own address was never charged.
    assert_eq!(limits.peek_n("127.0.0.1", 0).unwrap().remaining(), 1);
    assert_eq!(limits.len(), 2);

    let limits = Arc::new(Keyed::new("1/h".parse().unwrap()).unwrap());
    let client_ip = ClientIp::new()
        .trust_proxies(["127.0.0.1"])
        .unwrap()
        .header(ForwardedHeader::Forwarded);
    let addr = serve(app(client_ip, limits.clone())).await;
    let fwd = "forwarded";
    assert_eq!(status(addr, fwd, b"for=203.0.113.9").await, 200);
    assert_eq!(status(addr, fwd, b"for=\xff, for=203.0.113.9").await, 429);
    assert_eq!(
        status(addr, fwd, b"for=\"1.2.3.4, for=203.0.113.9").await,
        429
    );
    assert_eq!(limits.peek_n("127.0.0.1", 0).unwrap().remaining(), 1);
    assert_eq!(limits.len(), 1);
}

/// The proxies the properties trust; the test's peer is `10.0.0.1`.
const TRUSTED: [&str; 2] = ["10.0.0.0/8", "2001:db8::/32"];
const PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));

fn client_ip(kind: ForwardedHeader) -> ClientIp {
    ClientIp::new().trust_proxies(TRUSTED).unwrap().header(kind)
}

fn name(kind: ForwardedHeader) -> &'static str {
    match kind {
        ForwardedHeader::XForwardedFor => "x-forwarded-for",
        ForwardedHeader::Forwarded => "forwarded",
        ForwardedHeader::XRealIp => "x-real-ip",
    }
}

fn kind() -> impl Strategy<Value = ForwardedHeader> {
    prop_oneof![
        Just(ForwardedHeader::XForwardedFor),
        Just(ForwardedHeader::Forwarded),
        Just(ForwardedHeader::XRealIp),
    ]
}

/// Any address: IPv4, IPv6, IPv4-mapped, in the trusted ranges or not.
fn any_addr() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|b| IpAddr::V4(b.into())),
        any::<u128>().prop_map(|b| IpAddr::V6(b.into())),
        any::<[u8; 4]>().prop_map(|b| IpAddr::V6(Ipv4Addr::from(b).to_ipv6_mapped())),
        trusted_addr(),
    ]
}

/// An address of a trusted proxy.
fn trusted_addr() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|b| IpAddr::V4((0x0a00_0000 | b >> 8).into())),
        any::<u32>()
            .prop_map(|b| IpAddr::V6(Ipv4Addr::from(0x0a00_0000 | b >> 8).to_ipv6_mapped())),
        any::<u128>().prop_map(|b| IpAddr::V6(Ipv6Addr::from(0x2001_0db8 << 96 | b >> 32))),
    ]
}

/// One element naming `ip` as a proxy writes it for `kind`, in the form
/// `style` picks (a port, brackets, quotes, other parameters).
fn element(kind: ForwardedHeader, ip: IpAddr, style: u8, port: u16) -> String {
    let with_port = match ip {
        IpAddr::V4(_) => format!("{ip}:{port}"),
        IpAddr::V6(_) => format!("[{ip}]:{port}"),
    };
    let bracketed = match ip {
        IpAddr::V4(_) => ip.to_string(),
        IpAddr::V6(_) => format!("[{ip}]"),
    };
    match kind {
        ForwardedHeader::Forwarded => match style % 5 {
            0 if ip.is_ipv4() => format!("for={ip}"),
            0 | 1 => format!("for=\"{bracketed}\""),
            2 => format!("for=\"{with_port}\";proto=https"),
            3 => format!("proto=http;For={bracketed};by=\"{with_port}\""),
            _ => format!(" for = \"{with_port}\" "),
        },
        _ => match style % 4 {
            0 => ip.to_string(),
            1 => with_port,
            2 => bracketed,
            _ => format!(" {ip}\t"),
        },
    }
}

/// What a client may write: arbitrary bytes mixed with the pieces a
/// forwarding header is made of, addresses (trusted or not) included.
fn client_written() -> impl Strategy<Value = Vec<u8>> {
    let fragment = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..6),
        prop::sample::select(vec![
            &b","[..],
            b", ",
            b"\"",
            b"for=",
            b"for=\"",
            b"For=\"[",
            b";",
            b"[",
            b"]",
            b":",
            b" ",
            b"\xff",
            "café".as_bytes(),
            b"unknown",
            b"_hidden",
        ])
        .prop_map(<[u8]>::to_vec),
        (kind(), any_addr(), any::<u8>(), any::<u16>())
            .prop_map(|(k, ip, style, port)| element(k, ip, style, port).into_bytes()),
    ];
    prop::collection::vec(fragment, 0..8).prop_map(|fragments| {
        // Only what a header value may hold (`HeaderValue::from_bytes`):
        // no control bytes but the tab.
        fragments
            .concat()
            .into_iter()
            .map(|b| {
                if (b < 0x20 && b != b'\t') || b == 0x7f {
                    b'?'
                } else {
                    b
                }
            })
            .collect()
    })
}

/// The header's lines: the client's lines first, then each element the
/// proxies appended, on a line of its own (`true`) or after a comma on the
/// last line.
fn lines(client_lines: &[Vec<u8>], appended: &[(String, bool, &str)]) -> Vec<Vec<u8>> {
    let mut lines = client_lines.to_vec();
    for (element, own_line, comma) in appended {
        match lines.last_mut() {
            Some(line) if !own_line => {
                line.extend_from_slice(comma.as_bytes());
                line.extend_from_slice(element.as_bytes());
            }
            _ => lines.push(element.clone().into_bytes()),
        }
    }
    lines
}

fn header_map(kind: ForwardedHeader, lines: &[Vec<u8>]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for line in lines {
        map.append(
            name(kind),
            HeaderValue::from_bytes(line).expect("header bytes"),
        );
    }
    map
}

fn shown(lines: &[Vec<u8>]) -> Vec<String> {
    lines.iter().map(|l| l.escape_ascii().to_string()).collect()
}

/// An element the proxies appended: the address, its form, its port,
/// whether it starts a line of its own, the comma before it otherwise.
fn appended(addr: impl Strategy<Value = IpAddr>) -> impl Strategy<Value = Appended> {
    (
        addr,
        any::<u8>(),
        any::<u16>(),
        any::<bool>(),
        prop::sample::select(vec![",", ", ", " , ", ",\t"]),
    )
}

type Appended = (IpAddr, u8, u16, bool, &'static str);

fn written(kind: ForwardedHeader, hops: &[Appended]) -> Vec<(String, bool, &'static str)> {
    hops.iter()
        .map(|&(ip, style, port, own_line, comma)| {
            (element(kind, ip, style, port), own_line, comma)
        })
        .collect()
}

proptest! {
    /// Whatever the client wrote, the client is the right-most untrusted
    /// address: the one the proxy appended, never the proxy's own.
    #[test]
    fn the_client_is_the_address_the_proxy_appended(
        kind in kind(),
        client_lines in prop::collection::vec(client_written(), 0..3),
        client in appended(any_addr().prop_filter("untrusted", |&ip| {
            !client_ip(ForwardedHeader::XForwardedFor).is_trusted(ip)
        })),
        hops in prop::collection::vec(appended(trusted_addr()), 0..4),
    ) {
        let all: Vec<Appended> = std::iter::once(client).chain(hops).collect();
        let lines = lines(&client_lines, &written(kind, &all));
        let resolved = client_ip(kind).resolve(PEER, &header_map(kind, &lines));
        prop_assert_eq!(resolved, client.0.to_canonical(), "{:?}: {:?}", kind, shown(&lines));
    }

    /// Every hop trusted: the request began inside, and the left-most hop
    /// is the client.
    #[test]
    fn every_hop_trusted_is_the_left_most_hop(
        kind in kind(),
        hops in prop::collection::vec(appended(trusted_addr()), 1..6),
    ) {
        let lines = lines(&[], &written(kind, &hops));
        let resolved = client_ip(kind).resolve(PEER, &header_map(kind, &lines));
        prop_assert_eq!(resolved, hops[0].0.to_canonical(), "{:?}: {:?}", kind, shown(&lines));
    }
}
