//! Client keys: who a request counts against.

use super::client_ip::ClientIp;
use crate::sync::Arc;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};

/// Why no key could be taken from a request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The request carries no peer address: the server was not set up to
    /// record it (axum: `into_make_service_with_connect_info::<SocketAddr>()`;
    /// hyper: insert the connection's `SocketAddr` into the request's
    /// extensions; tests: axum's `MockConnectInfo`).
    NoPeerAddress,
    /// The request lacks the header the key is read from.
    MissingHeader(HeaderName),
    /// The header is there but not usable as a key (not visible ASCII,
    /// empty, longer than the extractor's limit, or not `Bearer <token>`).
    InvalidHeader(HeaderName),
    /// A key function of your own found no key; the text says why.
    Custom(String),
    /// The key is not one the application knows (its
    /// [`validate`](KeyExtractor::validate) check refused it): answered
    /// `401 Unauthorized` by default.
    UnknownKey,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::NoPeerAddress => f.write_str(
                "the request carries no peer address to key it by \
                 (the server must record each connection's address)",
            ),
            KeyError::MissingHeader(name) => write!(f, "the request has no {name} header"),
            KeyError::InvalidHeader(name) => {
                write!(f, "the request's {name} header is not a usable key")
            }
            KeyError::Custom(why) => f.write_str(why),
            KeyError::UnknownKey => f.write_str("the request's key is not a known one"),
        }
    }
}

impl std::error::Error for KeyError {}

/// The longest header value taken as a key by default: longer ones are
/// refused rather than stored.
pub const DEFAULT_MAX_KEY_LEN: usize = 256;

/// The longest bearer token taken as a key by default (a JWT is often
/// 500 to 2,000 bytes). A token longer than [`DEFAULT_MAX_KEY_LEN`] is
/// checked whole by [`KeyExtractor::validate`], then kept as `#` and 128
/// bits of its SHA-256, the same in every process, so a keyed limiter
/// holds at most `DEFAULT_MAX_KEY_LEN` bytes per key.
pub const DEFAULT_MAX_TOKEN_LEN: usize = 4096;

type KeyFn = dyn Fn(&Parts) -> Result<String, KeyError> + Send + Sync;
type KnownFn = dyn Fn(&str) -> bool + Send + Sync;

/// Takes a request's key: its client IP, a header, a constant, or anything
/// a function computes.
///
/// Keys from different extractors share one namespace: give each class its
/// own limiters (or prefix keys in a [`from_fn`](KeyExtractor::from_fn)),
/// so that an API key written as `203.0.113.9` cannot spend that IP
/// address's budget.
///
/// # Invented keys
///
/// A header or a bearer token is whatever the client sends: without a
/// check, every made-up API key gets a fresh budget of its own, and an
/// anonymous client escapes the per-IP limit by sending random keys.
/// [`validate`](KeyExtractor::validate) gives the extractor the
/// application's check: a key it refuses falls through to the next class
/// (an anonymous class keyed by IP), or with
/// [`reject_unknown`](KeyExtractor::reject_unknown) is answered
/// `401 Unauthorized` ([`KeyError::UnknownKey`]). The check runs on every
/// request before any limiter is touched, so it must be quick: look the key
/// up in memory (a set or a cache the application keeps fresh), not in a
/// remote store.
///
/// # Examples
///
/// ```
/// use rategate::http::{ClientIp, KeyExtractor};
///
/// let by_ip = KeyExtractor::client_ip(ClientIp::new().trust_proxies(["10.0.0.0/8"])?);
/// let by_api_key = KeyExtractor::header(http::HeaderName::from_static("x-api-key"));
/// let by_token = KeyExtractor::bearer_token();
/// let by_tenant = KeyExtractor::from_fn(|parts| {
///     parts.uri.path().split('/').nth(2).map(str::to_owned)
/// });
/// let request = http::Request::get("/tenants/acme/items").header("x-api-key", "k-1").body(())?;
/// let (parts, ()) = request.into_parts();
/// assert_eq!(by_api_key.extract(&parts)?, "k-1");
/// assert_eq!(by_tenant.extract(&parts)?, "acme");
/// assert!(by_token.extract(&parts).is_err()); // no Authorization header
/// assert!(by_ip.extract(&parts).is_err()); // no peer address recorded
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct KeyExtractor {
    kind: Kind,
    /// The application's check of a key found; `None` takes every key.
    known: Option<Arc<KnownFn>>,
    /// An unknown key is answered 401 rather than left to the next class.
    reject_unknown: bool,
}

#[derive(Clone)]
enum Kind {
    Ip(ClientIp),
    Header {
        name: HeaderName,
        bearer: bool,
        max_len: usize,
    },
    Global,
    Custom(Arc<KeyFn>),
}

impl fmt::Debug for KeyExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Ip(ip) => f.debug_tuple("ClientIp").field(ip).finish(),
            Kind::Header { name, bearer, .. } => f
                .debug_struct("Header")
                .field("name", name)
                .field("bearer", bearer)
                .finish(),
            Kind::Global => f.write_str("Global"),
            Kind::Custom(_) => f.write_str("Custom"),
        }?;
        if self.known.is_some() {
            f.write_str(" (validated)")?;
        }
        Ok(())
    }
}

impl KeyExtractor {
    fn of(kind: Kind) -> KeyExtractor {
        KeyExtractor {
            kind,
            known: None,
            reject_unknown: false,
        }
    }

    /// A key of at most [`DEFAULT_MAX_KEY_LEN`] bytes: `key` itself, or
    /// for a longer one (and for one that starts with `#`, the digests'
    /// mark, so that no plain key spells a digest) `#` and the first 128
    /// bits of its SHA-256 in hex: one key in every extractor, process and
    /// replica, and no client can make a token of its own land on
    /// another's.
    fn stored<'a>(&self, key: Key<'a>) -> Key<'a> {
        let text = key.as_str();
        if text.len() <= DEFAULT_MAX_KEY_LEN && !text.starts_with('#') {
            return key;
        }
        use sha2::Digest;
        use std::fmt::Write;
        let digest = sha2::Sha256::digest(text.as_bytes());
        let mut out = String::with_capacity(33);
        out.push('#');
        for byte in &digest[..16] {
            let _ = write!(out, "{byte:02x}");
        }
        Key::Owned(out)
    }

    /// Takes only keys `known` accepts (an API key or token the
    /// application issued); see [Invented keys](KeyExtractor#invented-keys).
    ///
    /// # Examples
    ///
    /// ```
    /// use rategate::http::{KeyError, KeyExtractor};
    /// use std::collections::HashSet;
    ///
    /// let issued: HashSet<String> = ["k-1".to_string()].into();
    /// let by_api_key = KeyExtractor::header(http::HeaderName::from_static("x-api-key"))
    ///     .validate(move |key| issued.contains(key));
    /// let request = |key: &str| {
    ///     let (parts, ()) = http::Request::get("/").header("x-api-key", key).body(()).unwrap().into_parts();
    ///     parts
    /// };
    /// assert_eq!(by_api_key.extract(&request("k-1"))?, "k-1");
    /// assert_eq!(by_api_key.extract(&request("made-up")), Err(KeyError::UnknownKey));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn validate(mut self, known: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.known = Some(Arc::new(known));
        self
    }

    /// Answers a request whose key [`validate`](Self::validate) refused
    /// with `401 Unauthorized` and a problem body, instead of trying the
    /// next class.
    pub fn reject_unknown(mut self) -> Self {
        self.reject_unknown = true;
        self
    }

    /// Whether the application's check accepts `key`.
    fn is_known(&self, key: &str) -> bool {
        self.known.as_ref().is_none_or(|known| known(key))
    }

    /// The client's IP address, as [`ClientIp`] finds and groups it.
    pub fn client_ip(client_ip: ClientIp) -> KeyExtractor {
        KeyExtractor::of(Kind::Ip(client_ip))
    }

    /// The peer's IP address, IPv6 grouped by /64, no proxies trusted.
    pub fn peer_ip() -> KeyExtractor {
        Self::client_ip(ClientIp::new())
    }

    /// The value of header `name` (an API key), at most
    /// [`DEFAULT_MAX_KEY_LEN`] bytes of visible ASCII.
    pub fn header(name: HeaderName) -> KeyExtractor {
        KeyExtractor::of(Kind::Header {
            name,
            bearer: false,
            max_len: DEFAULT_MAX_KEY_LEN,
        })
    }

    /// The token of `Authorization: Bearer <token>`, at most
    /// [`DEFAULT_MAX_TOKEN_LEN`] bytes of visible ASCII (a JWT), kept as a
    /// digest past [`DEFAULT_MAX_KEY_LEN`].
    pub fn bearer_token() -> KeyExtractor {
        KeyExtractor::of(Kind::Header {
            name: http::header::AUTHORIZATION,
            bearer: true,
            max_len: DEFAULT_MAX_TOKEN_LEN,
        })
    }

    /// One key for every request: a limit on the whole service.
    pub fn global() -> KeyExtractor {
        KeyExtractor::of(Kind::Global)
    }

    /// The key `f` computes; `None` means the request has none
    /// ([`KeyError::Custom`]).
    pub fn from_fn<F>(f: F) -> KeyExtractor
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        let f = move |parts: &Parts| {
            f(parts).ok_or_else(|| KeyError::Custom("the request has no key".to_string()))
        };
        KeyExtractor::of(Kind::Custom(Arc::new(f)))
    }

    /// The key `f` computes, or the error it gives.
    pub fn try_from_fn<F>(f: F) -> KeyExtractor
    where
        F: Fn(&Parts) -> Result<String, KeyError> + Send + Sync + 'static,
    {
        KeyExtractor::of(Kind::Custom(Arc::new(f)))
    }

    /// For a header extractor, takes values of up to `max_len` bytes
    /// (default [`DEFAULT_MAX_KEY_LEN`], [`DEFAULT_MAX_TOKEN_LEN`] for a
    /// bearer token; a key past [`DEFAULT_MAX_KEY_LEN`] is kept as a
    /// digest); other extractors are unchanged.
    pub fn max_len(mut self, max_len: usize) -> KeyExtractor {
        if let Kind::Header { max_len: m, .. } = &mut self.kind {
            *m = max_len;
        }
        self
    }

    /// The key of the request whose head is `parts`.
    ///
    /// # Errors
    ///
    /// A [`KeyError`] saying what was missing.
    pub fn extract(&self, parts: &Parts) -> Result<String, KeyError> {
        self.extract_key(parts).map(Key::into_owned)
    }

    /// [`extract`](Self::extract), borrowing the key from the request
    /// where it can (a header's value), else on the stack (an IPv4
    /// address), else allocated.
    pub(crate) fn extract_key<'a>(&self, parts: &'a Parts) -> Result<Key<'a>, KeyError> {
        let key = self.extract_unchecked(parts)?;
        if self.is_known(key.as_str()) {
            Ok(self.stored(key))
        } else {
            Err(KeyError::UnknownKey)
        }
    }

    fn extract_unchecked<'a>(&self, parts: &'a Parts) -> Result<Key<'a>, KeyError> {
        match &self.kind {
            Kind::Ip(client_ip) => {
                let peer = peer_addr(parts).ok_or(KeyError::NoPeerAddress)?;
                Ok(client_ip.key_of(client_ip.resolve(peer.ip(), &parts.headers)))
            }
            Kind::Header {
                name,
                bearer,
                max_len,
            } => header_key(parts, name, *bearer, *max_len)
                .map(Key::Borrowed)
                .map_err(|problem| problem.error(name)),
            Kind::Global => Ok(Key::Borrowed("global")),
            Kind::Custom(f) => f(parts).map(Key::Owned),
        }
    }

    /// [`extract_key`](Self::extract_key) without the error: `None` where
    /// it would fail. The layer tries its classes in turn and shows only the
    /// last one's error, if every class fails; the error a signed-in class
    /// finds on each anonymous request (the header's name cloned into it,
    /// then dropped) is code each such request would run for nothing.
    /// A key function of the application's own is called once: its error
    /// goes to `custom_error` (the built-in extractors give the same
    /// error when asked again; a function might not).
    ///
    /// A key the application's check refuses is `Ok(None)` (the next class
    /// decides), or with [`reject_unknown`](Self::reject_unknown)
    /// [`KeyError::UnknownKey`] (the request is answered at once).
    pub(crate) fn find_key<'a>(
        &self,
        parts: &'a Parts,
        custom_error: &mut Option<KeyError>,
    ) -> Result<Option<Key<'a>>, KeyError> {
        let Some(key) = self.find_unchecked(parts, custom_error) else {
            return Ok(None);
        };
        match (self.is_known(key.as_str()), self.reject_unknown) {
            (true, _) => Ok(Some(self.stored(key))),
            (false, false) => Ok(None),
            (false, true) => Err(KeyError::UnknownKey),
        }
    }

    fn find_unchecked<'a>(
        &self,
        parts: &'a Parts,
        custom_error: &mut Option<KeyError>,
    ) -> Option<Key<'a>> {
        match &self.kind {
            Kind::Ip(client_ip) => {
                let peer = peer_addr(parts)?;
                Some(client_ip.key_of(client_ip.resolve(peer.ip(), &parts.headers)))
            }
            Kind::Header {
                name,
                bearer,
                max_len,
            } => header_key(parts, name, *bearer, *max_len)
                .ok()
                .map(Key::Borrowed),
            Kind::Global => Some(Key::Borrowed("global")),
            Kind::Custom(f) => match f(parts) {
                Ok(key) => Some(Key::Owned(key)),
                Err(error) => {
                    *custom_error = Some(error);
                    None
                }
            },
        }
    }

    /// Whether the key comes from a function of the application's own.
    pub(crate) fn is_custom(&self) -> bool {
        matches!(self.kind, Kind::Custom(_))
    }
}

/// Why a header gave no key; [`KeyError`] once the header's name is added.
#[derive(Clone, Copy)]
enum HeaderProblem {
    Missing,
    Invalid,
}

impl HeaderProblem {
    fn error(self, name: &HeaderName) -> KeyError {
        match self {
            HeaderProblem::Missing => KeyError::MissingHeader(name.clone()),
            HeaderProblem::Invalid => KeyError::InvalidHeader(name.clone()),
        }
    }
}

/// A request's key: borrowed from the request, on the stack, or owned.
pub(crate) enum Key<'a> {
    Borrowed(&'a str),
    /// A dotted-quad IPv4 address.
    Inline(Ipv4Text),
    Owned(String),
}

/// An IPv4 address written out on the stack (`203.0.113.9`), without the
/// formatting machinery and without validating the text again each time
/// it is read: only [`Ipv4Text::new`] writes it, digits and dots.
pub(crate) struct Ipv4Text {
    /// Invariant: `text` is ASCII (digits, dots and zeros; `text[..len]`
    /// digits and dots) and `len <= 15`.
    text: [u8; 15],
    len: u8,
}

impl Ipv4Text {
    pub(crate) fn new(ip: Ipv4Addr) -> Ipv4Text {
        let mut text = [0u8; 15];
        let mut len = 0;
        let mut push = |byte: u8| {
            text[len] = byte;
            len += 1;
        };
        for (i, octet) in ip.octets().into_iter().enumerate() {
            if i > 0 {
                push(b'.');
            }
            if octet >= 100 {
                push(b'0' + octet / 100);
            }
            if octet >= 10 {
                push(b'0' + octet / 10 % 10);
            }
            push(b'0' + octet % 10);
        }
        // At most 4 * 3 digits and 3 dots: 15.
        Ipv4Text {
            text,
            len: len as u8,
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        let bytes = &self.text[..usize::from(self.len)];
        // SAFETY: only `new` writes `text`, and only ASCII digits and dots
        // into `text[..len]` (see `OCTETS`): valid UTF-8. (`from_utf8` would check it
        // again on every request; for a short key that costs more than the
        // rest of the key's extraction.)
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }
}

impl Key<'_> {
    /// The key's text.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(key) => key,
            Key::Inline(text) => text.as_str(),
            Key::Owned(key) => key,
        }
    }

    /// The key as a `String`.
    pub(crate) fn into_owned(self) -> String {
        match self {
            Key::Owned(key) => key,
            other => other.as_str().to_owned(),
        }
    }
}

/// The connection's peer address: with feature `axum`, axum's
/// `ConnectInfo<SocketAddr>`, else its `MockConnectInfo<SocketAddr>` (as
/// axum's own extractor falls back to it in tests); else a plain
/// `SocketAddr` extension (what a hyper server inserts itself).
pub fn peer_addr(parts: &Parts) -> Option<SocketAddr> {
    #[cfg(feature = "axum")]
    {
        use axum::extract::ConnectInfo;
        use axum::extract::connect_info::MockConnectInfo;
        if let Some(ConnectInfo(addr)) = parts.extensions.get::<ConnectInfo<SocketAddr>>() {
            return Some(*addr);
        }
        if let Some(MockConnectInfo(addr)) = parts.extensions.get::<MockConnectInfo<SocketAddr>>() {
            return Some(*addr);
        }
    }
    parts.extensions.get::<SocketAddr>().copied()
}

#[inline]
fn header_key<'a>(
    parts: &'a Parts,
    name: &HeaderName,
    bearer: bool,
    max_len: usize,
) -> Result<&'a str, HeaderProblem> {
    // The first value only: a client that repeats the header gets no say
    // over which one counts.
    let value = first_value(&parts.headers, name).ok_or(HeaderProblem::Missing)?;
    let mut key = value.as_bytes().trim_ascii();
    if bearer {
        // RFC 6750: `Bearer` is case-insensitive, followed by one or more
        // spaces.
        if !is_bearer_scheme(key) {
            return Err(HeaderProblem::Invalid);
        }
        // The end was trimmed above.
        key = key[BEARER.len()..].trim_ascii_start();
    }
    // A plain byte loop: keys are short (a token, an API key), and at
    // saturation the code a request runs costs more than its instructions
    // (each cache line of it is fetched again per request), so the
    // vectorized count this replaced, with its scalar tails, cost more
    // than it saved.
    if key.is_empty() || key.len() > max_len || !key.iter().all(u8::is_ascii_graphic) {
        return Err(HeaderProblem::Invalid);
    }
    // SAFETY: every byte of `key` was just checked to be visible ASCII, so
    // it is valid UTF-8 (`from_utf8` would check it a second time on every
    // request).
    Ok(unsafe { std::str::from_utf8_unchecked(key) })
}

/// Most distinct header names a request may have for [`first_value`] and
/// [`has_header`] to compare names in turn; past them they look the name
/// up by its hash.
const SCAN_NAMES: usize = 16;

/// The first value of header `name`: `headers.get(name)`, found by
/// comparing the request's header names in turn (most requests have a
/// handful) rather than by hashing `name` and probing. Under load a
/// server runs each line of code on a request's path again per request,
/// and the hashed lookup (the name's hash, the probe) took about a dozen
/// lines of code that the server's own path does not run, where the
/// comparison takes a loop of a few.
#[inline]
pub(crate) fn first_value<'h>(
    headers: &'h HeaderMap,
    name: &HeaderName,
) -> Option<&'h HeaderValue> {
    if headers.keys_len() > SCAN_NAMES {
        return headers.get(name);
    }
    // A name's first value comes first among its values.
    headers
        .iter()
        .find_map(|(key, value)| (key == name).then_some(value))
}

/// Whether the request has header `name`, comparing names as
/// [`first_value`] does.
#[inline]
pub(crate) fn has_header(headers: &HeaderMap, name: &HeaderName) -> bool {
    if headers.keys_len() > SCAN_NAMES {
        return headers.contains_key(name);
    }
    headers.keys().any(|key| key == name)
}

/// `Bearer` and the space after it.
const BEARER: &[u8; 7] = b"bearer ";

/// Whether `value` starts with `Bearer ` in any case, as one comparison of
/// eight bytes rather than six of letters: setting bit 5 of a byte lowers
/// an ASCII capital and leaves a small letter, and only those two bytes of
/// each letter match a small letter after it (the space is compared as it
/// is).
fn is_bearer_scheme(value: &[u8]) -> bool {
    let Some(scheme) = value.get(..BEARER.len()) else {
        return false;
    };
    let mut word = [0u8; 8];
    word[..BEARER.len()].copy_from_slice(scheme);
    // `BEARER` as a word, its eighth byte zero as `word`'s is.
    const EXPECTED: u64 = {
        let [b, e, a, r, e2, r2, space] = *BEARER;
        u64::from_le_bytes([b, e, a, r, e2, r2, space, 0])
    };
    // Bit 5 of the six letters' bytes.
    const LOWER: u64 = 0x0000_2020_2020_2020;
    u64::from_le_bytes(word) | LOWER == EXPECTED
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, &[u8])]) -> Parts {
        let mut request = http::Request::get("/").body(()).unwrap();
        for (name, value) in headers {
            request.headers_mut().append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_bytes(value).unwrap(),
            );
        }
        request.into_parts().0
    }

    #[test]
    fn bearer_tokens() {
        let x = KeyExtractor::bearer_token();
        assert_eq!(
            x.extract(&parts(&[("authorization", b"Bearer abc")]))
                .unwrap(),
            "abc"
        );
        assert_eq!(
            x.extract(&parts(&[("authorization", b"bEaReR   abc ")]))
                .unwrap(),
            "abc"
        );
        for bad in [
            &b"Bearer"[..],
            b"Bearer ",
            b"Basic abc",
            b"Bearerabc",
            b"Bearer a b",
            b"Bearer \xff",
        ] {
            assert_eq!(
                x.extract(&parts(&[("authorization", bad)])),
                Err(KeyError::InvalidHeader(http::header::AUTHORIZATION)),
                "{bad:?}"
            );
        }
        assert_eq!(
            x.extract(&parts(&[])),
            Err(KeyError::MissingHeader(http::header::AUTHORIZATION))
        );
    }

    #[test]
    fn the_bearer_scheme_in_any_case_and_nothing_else() {
        for yes in [&b"Bearer x"[..], b"bearer x", b"BEARER x", b"bEaReR "] {
            assert!(is_bearer_scheme(yes), "{yes:?}");
        }
        // Each letter's byte with bit 5 set is the small letter; so is
        // another byte for none of them but its capital. The space is exact.
        for no in [
            &b"Bearer"[..],
            b"Bearerx",
            b"Bearer\x00",
            b"Basic x",
            b"Bearer\t",
            b"Bea\x12er ",
            b"\x02earer ",
            b"bearer\x00",
        ] {
            assert!(!is_bearer_scheme(no), "{no:?}");
        }
        for byte in 0..=255u8 {
            for at in 0..7 {
                let mut value = *b"bearer x";
                let same = byte == value[at] || (at < 6 && byte == value[at].to_ascii_uppercase());
                value[at] = byte;
                assert_eq!(is_bearer_scheme(&value), same, "{value:?}");
            }
        }
    }

    #[test]
    fn header_values_are_bounded() {
        let x = KeyExtractor::header(HeaderName::from_static("x-api-key")).max_len(4);
        assert_eq!(
            x.extract(&parts(&[("x-api-key", b"abcd")])).unwrap(),
            "abcd"
        );
        assert!(x.extract(&parts(&[("x-api-key", b"abcde")])).is_err());
        assert!(x.extract(&parts(&[("x-api-key", b"")])).is_err());
        // The first of repeated headers.
        let two = parts(&[("x-api-key", b"one"), ("x-api-key", b"two")]);
        assert_eq!(x.extract(&two).unwrap(), "one");
    }

    #[test]
    fn names_compared_in_turn_find_what_the_hashed_lookup_finds() {
        let wanted = HeaderName::from_static("x-api-key");
        // Up to and past the scan's limit of distinct names, the wanted
        // name absent, first, last or repeated among them, with other
        // names of its length (compared byte by byte) and standard names.
        for others in [0, 1, SCAN_NAMES - 1, SCAN_NAMES, SCAN_NAMES + 1, 40] {
            for at in [None, Some(0), Some(others / 2), Some(others)] {
                let mut headers = HeaderMap::new();
                for i in 0..others {
                    if at == Some(i) {
                        headers.append(&wanted, HeaderValue::from_static("one"));
                    }
                    let name = match i % 3 {
                        0 => format!("x-api-ke{}", i % 10),
                        1 => format!("x-other-{i}"),
                        _ => ["host", "accept", "user-agent"][i % 9 / 3].to_string(),
                    };
                    headers.append(
                        HeaderName::from_bytes(name.as_bytes()).unwrap(),
                        HeaderValue::from_static("v"),
                    );
                    if at == Some(i) {
                        headers.append(&wanted, HeaderValue::from_static("two"));
                    }
                }
                if at == Some(others) {
                    headers.append(&wanted, HeaderValue::from_static("one"));
                }
                let case = format!("{others} other names, the wanted one at {at:?}");
                assert_eq!(
                    first_value(&headers, &wanted),
                    headers.get(&wanted),
                    "{case}"
                );
                assert_eq!(
                    has_header(&headers, &wanted),
                    headers.contains_key(&wanted),
                    "{case}"
                );
                assert_eq!(has_header(&headers, &wanted), at.is_some(), "{case}");
                if at.is_some() {
                    assert_eq!(first_value(&headers, &wanted).unwrap(), "one", "{case}");
                }
            }
        }
    }

    #[test]
    fn find_key_finds_what_extract_key_finds() {
        let extractors = [
            KeyExtractor::bearer_token(),
            KeyExtractor::header(HeaderName::from_static("x-api-key")).max_len(4),
            KeyExtractor::global(),
            KeyExtractor::from_fn(|parts| parts.headers.get("x-user").map(|v| format!("{v:?}"))),
            KeyExtractor::peer_ip(),
        ];
        let mut with_peer = parts(&[("x-api-key", b"abc")]);
        with_peer
            .extensions
            .insert(SocketAddr::from(([203, 0, 113, 9], 443)));
        let requests = [
            parts(&[]),
            parts(&[("authorization", b"Bearer abc"), ("x-user", b"u")]),
            parts(&[("authorization", b"Basic abc"), ("x-api-key", b"abcde")]),
            with_peer,
        ];
        for extractor in &extractors {
            for request in &requests {
                let mut custom_error = None;
                let found = extractor.find_key(request, &mut custom_error);
                let extracted = extractor.extract(request);
                assert_eq!(
                    found.map(|key| key.map(Key::into_owned)).ok().flatten(),
                    extracted.clone().ok(),
                    "{extractor:?}"
                );
                // A key function's error is kept (it is not asked twice).
                let kept = extracted.err().filter(|_| extractor.is_custom());
                assert_eq!(custom_error, kept, "{extractor:?}");
            }
        }
    }

    #[test]
    fn ipv4_text_is_the_dotted_quad() {
        for octet in 0..=255u8 {
            for ip in [
                Ipv4Addr::new(octet, 0, 9, 255),
                Ipv4Addr::new(7, octet, 100, 0),
                Ipv4Addr::new(1, 22, octet, 133),
                Ipv4Addr::new(255, 255, 255, octet),
            ] {
                assert_eq!(Ipv4Text::new(ip).as_str(), ip.to_string());
            }
        }
    }

    #[test]
    fn peer_from_socket_addr_extension() {
        let mut p = parts(&[]);
        assert_eq!(
            KeyExtractor::peer_ip().extract(&p),
            Err(KeyError::NoPeerAddress)
        );
        p.extensions
            .insert("[2001:db8::7]:80".parse::<SocketAddr>().unwrap());
        assert_eq!(
            KeyExtractor::peer_ip().extract(&p).unwrap(),
            "2001:db8::/64"
        );
        assert_eq!(KeyExtractor::global().extract(&p).unwrap(), "global");
    }
}
