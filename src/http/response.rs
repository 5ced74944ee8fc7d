//! What the layer answers itself (429, no key, a cost that never passes),
//! and the rate-limit headers it adds to 429s (and, when asked, to every
//! limited response).

use super::decide::Report;
use super::key::KeyError;
use crate::CheckError;
use crate::headers::*;
use crate::sync::Arc;
use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use std::fmt::Write;

/// A request the layer answers instead of the service, passed to the
/// [`responder`](super::RateLimitLayerBuilder::responder) that writes the
/// answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum Rejection<'a> {
    /// A limit denied the request: answered `429 Too Many Requests`. The
    /// layer adds `retry-after` and the rate-limit headers to whatever the
    /// responder returns.
    Limited {
        /// The class the request was keyed in.
        class: &'a str,
        /// The rule that denied it (the one with the longest wait).
        policy: &'a str,
        /// Whole seconds until a retry would pass, at least 1.
        retry_after_secs: u64,
        /// That rule's header values.
        fields: &'a RateLimitFields,
    },
    /// No class found a key: by default `500` when the server records no
    /// peer address (a setup error), `401` for a key the application's
    /// check refused ([`KeyError::UnknownKey`]), `400` when a header is
    /// missing or unusable.
    NoKey {
        /// What was missing.
        error: &'a KeyError,
    },
    /// The request's cost is more than the limit can ever admit: waiting
    /// will not help, so by default `400 Bad Request`, with no
    /// `retry-after`.
    CostTooHigh {
        /// The rule whose capacity is exceeded.
        policy: &'a str,
        /// The cost and the capacity.
        error: &'a CheckError,
    },
}

/// Writes the layer's own answers; see
/// [`RateLimitLayerBuilder::responder`](super::RateLimitLayerBuilder::responder).
pub type Responder = Arc<dyn Fn(&Rejection<'_>) -> Response<Bytes> + Send + Sync>;

/// The default answer: an RFC 9457 `application/problem+json` body.
///
/// ```text
/// HTTP/1.1 429 Too Many Requests
/// content-type: application/problem+json
///
/// {"type":"about:blank","title":"Too Many Requests","status":429,
///  "detail":"Rate limit \"hourly\" exceeded; retry after 3 seconds.",
///  "policy":"hourly","retry_after":3}
/// ```
pub fn problem_response(rejection: &Rejection<'_>) -> Response<Bytes> {
    let (status, detail, extra) = match rejection {
        Rejection::Limited {
            policy,
            retry_after_secs,
            ..
        } => {
            let unit = if *retry_after_secs == 1 {
                "second"
            } else {
                "seconds"
            };
            let detail =
                format!("Rate limit \"{policy}\" exceeded; retry after {retry_after_secs} {unit}.");
            let extra = format!(
                ",\"policy\":{},\"retry_after\":{retry_after_secs}",
                json_string(policy)
            );
            (StatusCode::TOO_MANY_REQUESTS, detail, extra)
        }
        Rejection::NoKey { error } => {
            let status = match error {
                KeyError::NoPeerAddress => StatusCode::INTERNAL_SERVER_ERROR,
                KeyError::UnknownKey => StatusCode::UNAUTHORIZED,
                _ => StatusCode::BAD_REQUEST,
            };
            let detail = format!("The rate limiter could not identify the client: {error}.");
            (status, detail, String::new())
        }
        Rejection::CostTooHigh { policy, error } => {
            let detail = format!("Rate limit \"{policy}\": {error}.");
            let extra = format!(",\"policy\":{}", json_string(policy));
            (StatusCode::BAD_REQUEST, detail, extra)
        }
    };
    let title = status.canonical_reason().unwrap_or("Error");
    let body = format!(
        "{{\"type\":\"about:blank\",\"title\":{},\"status\":{},\"detail\":{}{extra}}}",
        json_string(title),
        status.as_u16(),
        json_string(&detail),
    );
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Which rate-limit headers the layer writes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeaderOptions {
    pub(crate) x_ratelimit: bool,
    pub(crate) ietf: bool,
    /// On served requests that no limit denied too, not only on 429s (and
    /// shadow-mode would-be 429s). Off by default.
    pub(crate) on_allowed: bool,
    pub(crate) reset: ResetFormat,
}

impl Default for HeaderOptions {
    fn default() -> Self {
        HeaderOptions {
            x_ratelimit: true,
            ietf: true,
            on_allowed: false,
            reset: ResetFormat::UnixSeconds,
        }
    }
}

// Built at compile time: `from_static` is const, so no name is parsed per
// response.
const LIMIT: HeaderName = HeaderName::from_static(X_RATELIMIT_LIMIT);
const REMAINING: HeaderName = HeaderName::from_static(X_RATELIMIT_REMAINING);
const RESET: HeaderName = HeaderName::from_static(X_RATELIMIT_RESET);
const USED: HeaderName = HeaderName::from_static(X_RATELIMIT_USED);
const POLICY: HeaderName = HeaderName::from_static(RATELIMIT_POLICY);
const STATE: HeaderName = HeaderName::from_static(RATELIMIT);

/// Adds `report`'s headers to `headers`; `retry-after` too when `denied`
/// (a 429 is being sent, not a shadow-mode pass).
///
/// Every value is written into one buffer on the stack, moved into one
/// allocation, and each header value is a slice of it: one allocation per
/// response, not one per value. `ratelimit-policy` of one rule is the
/// rule's own, built once.
pub(crate) fn write_headers(
    headers: &mut HeaderMap,
    report: &Report,
    options: &HeaderOptions,
    denied: bool,
) {
    let binding = &report.binding().fields;
    let mut buf = Buf::new();
    let mut numbers = [0..0, 0..0, 0..0, 0..0];
    if options.x_ratelimit {
        let unix_now = match options.reset {
            ResetFormat::DeltaSeconds => 0,
            ResetFormat::UnixSeconds => crate::headers::unix_now_nanos(),
        };
        let values = [
            u64::from(binding.limit()),
            u64::from(binding.remaining()),
            binding.reset_value(options.reset, unix_now),
            u64::from(binding.used()),
        ];
        for (range, value) in numbers.iter_mut().zip(values) {
            *range = buf.number(value);
        }
    }
    let (mut policy, mut state) = (0..0, 0..0);
    if options.ietf {
        // One rule: its policy item was built with the rule (a shared
        // buffer, nothing copied); several are joined.
        if report.policies.len() > 1 {
            policy = buf.list(report, |p, out| out.put(p.policy.as_bytes()));
        }
        state = buf.list(report, |p, out| {
            // The quoted name, as the policy item starts with it.
            match p.policy.as_bytes().get(..p.name_len) {
                Some(quoted) => {
                    out.put(quoted);
                    p.fields.write_state_params(out);
                }
                None => p.fields.write_state_item(out, &p.name),
            }
        });
    }
    let retry = if denied {
        buf.number(report.retry_after_secs.unwrap_or(1).max(1))
    } else {
        0..0
    };
    let buf = buf.freeze();
    // Every value is visible ASCII by construction (names are escaped); one
    // that still fails is left out, not a panic.
    let value = |range: std::ops::Range<usize>| HeaderValue::from_maybe_shared(buf.slice(range));
    // Up to seven fields: one growth of the map instead of several.
    headers.reserve(7);
    if options.x_ratelimit {
        for (name, range) in [LIMIT, REMAINING, RESET, USED].into_iter().zip(numbers) {
            if let Ok(v) = value(range) {
                headers.insert(name, v);
            }
        }
    }
    if options.ietf {
        let policy = match &*report.policies {
            [only] => Ok(only.policy.clone()),
            _ => value(policy),
        };
        if let Ok(v) = policy {
            headers.insert(POLICY, v);
        }
        if let Ok(v) = value(state) {
            headers.insert(STATE, v);
        }
    }
    if denied {
        if let Ok(v) = value(retry) {
            headers.insert(http::header::RETRY_AFTER, v);
        }
    }
}

/// Bytes a response's header values take on the stack: one or two rules
/// with names of usual length; more move to the heap.
const INLINE_BYTES: usize = 192;

/// The header values written on the stack.
struct Inline {
    bytes: [u8; INLINE_BYTES],
    len: usize,
}

impl AsRef<[u8]> for Inline {
    fn as_ref(&self) -> &[u8] {
        &self.bytes[..self.len.min(INLINE_BYTES)]
    }
}

/// The response's header values, written one after another.
struct Buf {
    inline: Inline,
    /// Everything, once the values outgrow `inline`.
    spill: Option<Vec<u8>>,
}

impl Buf {
    fn new() -> Buf {
        Buf {
            inline: Inline {
                bytes: [0; INLINE_BYTES],
                len: 0,
            },
            spill: None,
        }
    }

    fn len(&self) -> usize {
        self.spill.as_ref().map_or(self.inline.len, Vec::len)
    }

    /// Appends `n`; returns where it lies.
    fn number(&mut self, n: u64) -> std::ops::Range<usize> {
        let start = self.len();
        self.put_u64(n);
        start..self.len()
    }

    /// Appends the policies' items, `, `-separated (a Structured Field
    /// list); returns where they lie.
    fn list(
        &mut self,
        report: &Report,
        item: impl Fn(&super::decide::PolicyState, &mut Buf),
    ) -> std::ops::Range<usize> {
        let start = self.len();
        for (i, policy) in report.policies.iter().enumerate() {
            if i > 0 {
                self.put(b", ");
            }
            item(policy, self);
        }
        start..self.len()
    }

    /// The values in one shared allocation: the stack buffer moved into
    /// it, or the heap one.
    fn freeze(self) -> Bytes {
        match self.spill {
            Some(spill) => Bytes::from(spill),
            None => Bytes::from_owner(self.inline),
        }
    }
}

impl AsciiSink for Buf {
    #[inline]
    fn put(&mut self, ascii: &[u8]) {
        let Inline { bytes, len } = &mut self.inline;
        match bytes.get_mut(*len..*len + ascii.len()) {
            Some(free) if self.spill.is_none() => {
                free.copy_from_slice(ascii);
                *len += ascii.len();
            }
            _ => self.put_spilled(ascii),
        }
    }

    /// Formats `n` in place, copying nothing.
    #[inline]
    fn put_u64(&mut self, n: u64) {
        let digits = decimal_len(n);
        let Inline { bytes, len } = &mut self.inline;
        match bytes.get_mut(*len..*len + digits) {
            Some(free) if self.spill.is_none() => {
                format_u64(n, free);
                *len += digits;
            }
            _ => write_u64(self, n),
        }
    }
}

impl Buf {
    /// Appends `ascii` on the heap, moving what the stack holds there
    /// first.
    #[cold]
    fn put_spilled(&mut self, ascii: &[u8]) {
        let inline = &self.inline;
        let spill = self.spill.get_or_insert_with(|| {
            let mut spill = Vec::with_capacity(2 * INLINE_BYTES);
            spill.extend_from_slice(inline.as_ref());
            spill
        });
        spill.extend_from_slice(ascii);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_escape() {
        assert_eq!(json_string("a\"b\\c\n"), r#""a\"b\\c\u000a""#);
    }

    #[test]
    fn problem_bodies() {
        let fields = RateLimitFields::new(
            &crate::Decision::deny(1, 0, 0, 0),
            &crate::Quota::per_second(1).unwrap(),
        );
        let r = problem_response(&Rejection::Limited {
            class: "t",
            policy: "p\"",
            retry_after_secs: 1,
            fields: &fields,
        });
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()[CONTENT_TYPE], "application/problem+json");
        assert_eq!(
            r.body(),
            r#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"Rate limit \"p\"\" exceeded; retry after 1 second.","policy":"p\"","retry_after":1}"#
        );
        let r = problem_response(&Rejection::NoKey {
            error: &KeyError::NoPeerAddress,
        });
        assert_eq!(r.status(), 500);
        let r = problem_response(&Rejection::NoKey {
            error: &KeyError::MissingHeader(http::header::AUTHORIZATION),
        });
        assert_eq!(r.status(), 400);
    }
}
