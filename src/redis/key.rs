//! Redis key names: `<namespace>{<tag>}:<suffix>`, where the namespace is
//! the limiter's prefix (and, see [`KeySpace`], its policy) and the tag is
//! the user's key, encoded.
//!
//! Redis Cluster hashes a key by the text between its first `{` and the
//! next `}` when that text is not empty, else by the whole key. User keys
//! are client-chosen (API keys, header values, IP addresses), so they must
//! never choose their own slot layout: a key `""` or `"}evil"` left raw
//! would give an empty or broken tag, spread one limiter key's Redis keys
//! over several slots, and make every multi-key script fail with
//! `CROSSSLOT` (which the default fail-open policy turns into "admit
//! everything"). The encoding therefore guarantees:
//!
//! * the tag is never empty: the empty key encodes as a lone `%`;
//! * the tag never contains `}` (nor `{`): `%`, `{` and `}` are written as
//!   `%25`, `%7B` and `%7D`;
//! * distinct keys give distinct tags: the escape is reversible, and a lone
//!   `%` is not the encoding of any non-empty key (there every `%` starts a
//!   three-character escape).
//!
//! Every other byte (colons, NUL, any UTF-8) is kept as it is: Redis keys
//! are binary-safe, and ordinary keys stay readable (`api:...{user-42}:tat`).
//! The namespace may not contain a brace ([`KeySpace::new`] refuses it), so
//! the tag's `{` is the key's first.

use super::RedisError;
use crate::Quota;

/// A quota as a key segment: its canonical text (which parses back to an
/// equal quota, so distinct quotas give distinct segments) with commas for
/// spaces: `100/1m`, `10/1s,burst=20,nodelay`.
pub(crate) fn quota_segment(quota: &Quota) -> String {
    quota.to_string().replace(' ', ",")
}

/// The tag of the empty key: not the encoding of any other key.
const EMPTY_TAG: &str = "%";

/// Appends the hash tag of `key` (without the braces) to `out`.
pub(crate) fn encode_tag(key: &str, out: &mut String) {
    if key.is_empty() {
        out.push_str(EMPTY_TAG);
        return;
    }
    // Copy runs of plain bytes at once: most keys have no byte to escape.
    let mut plain = 0;
    for (i, byte) in key.bytes().enumerate() {
        let escape = match byte {
            b'%' => "%25",
            b'{' => "%7B",
            b'}' => "%7D",
            _ => continue,
        };
        // `i` is at an ASCII byte, so a char boundary.
        out.push_str(&key[plain..i]);
        out.push_str(escape);
        plain = i + 1;
    }
    out.push_str(&key[plain..]);
}

/// The Redis key names of one limiter: `<head>{<tag>}:<suffix>` with a
/// fixed head (`<prefix>:` and the policy, see the limiters) and the user
/// key's encoded tag.
#[derive(Debug, Clone)]
pub(crate) struct KeySpace {
    /// Everything before the tag, the opening brace included.
    head: String,
}

impl KeySpace {
    /// The key space `<prefix>:<policy>:{...}`, or `<prefix>:{...}` for an
    /// empty policy.
    ///
    /// # Errors
    ///
    /// [`RedisError::Config`] when `prefix` contains `{` or `}` (it would
    /// take the place of the hash tag).
    pub(crate) fn new(prefix: &str, policy: &str) -> Result<KeySpace, RedisError> {
        if prefix.contains(['{', '}']) {
            return Err(RedisError::Config(
                "the key prefix must not contain '{' or '}' (the key's hash tag follows it)",
            ));
        }
        // The policy is built by the limiters from names and quotas: no
        // braces, but checked all the same.
        if policy.contains(['{', '}']) {
            return Err(RedisError::Config("the key policy must not contain braces"));
        }
        let mut head = String::with_capacity(prefix.len() + policy.len() + 3);
        head.push_str(prefix);
        head.push(':');
        if !policy.is_empty() {
            head.push_str(policy);
            head.push(':');
        }
        head.push('{');
        Ok(KeySpace { head })
    }

    /// Appends the Redis key of `key` with `suffix` to `out`.
    pub(crate) fn write(&self, key: &str, suffix: &str, out: &mut String) {
        out.reserve(self.head.len() + key.len() + suffix.len() + 2);
        out.push_str(&self.head);
        encode_tag(key, out);
        out.push_str("}:");
        out.push_str(suffix);
    }

    /// The Redis key of `key` with `suffix`.
    pub(crate) fn key(&self, key: &str, suffix: &str) -> String {
        let mut out = String::new();
        self.write(key, suffix, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::synced::store::key_slot;

    fn tag(key: &str) -> String {
        let mut out = String::new();
        encode_tag(key, &mut out);
        out
    }

    #[test]
    fn tags_are_never_empty_nor_broken() {
        assert_eq!(tag(""), "%");
        assert_eq!(tag("user-42"), "user-42");
        assert_eq!(tag("}evil"), "%7Devil");
        assert_eq!(tag("{a}%"), "%7Ba%7D%25");
        assert_eq!(tag("%"), "%25");
        assert_eq!(tag("é:\0}"), "é:\0%7D");
        let space = KeySpace::new("p", "").unwrap();
        for key in ["", "}", "}evil", "{", "{}", "a}b{c", "%", "x"] {
            let a = space.key(key, "w0");
            let b = space.key(key, "w1");
            assert_eq!(key_slot(a.as_bytes()), key_slot(b.as_bytes()), "{key:?}");
            assert_eq!(
                key_slot(a.as_bytes()),
                key_slot(tag(key).as_bytes()),
                "{key:?}"
            );
        }
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert!(KeySpace::new("a{b", "").is_err());
        assert!(KeySpace::new("a}b", "").is_err());
        assert_eq!(KeySpace::new("", "").unwrap().key("k", "s"), ":{k}:s");
        assert_eq!(
            KeySpace::new("api", "tb").unwrap().key("k", "s"),
            "api:tb:{k}:s"
        );
    }
}
