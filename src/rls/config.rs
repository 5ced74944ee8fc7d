//! The configuration of an Envoy rate-limit service (RLS v3) in
//! envoyproxy/ratelimit's YAML format: one domain per file, a tree of
//! descriptors, a `rate_limit` on any node; its validation, with
//! envoyproxy/ratelimit's error messages, and its descriptor matching.
//!
//! ```yaml
//! domain: messaging
//! backend: {kind: redis, url: "redis://127.0.0.1/", store_down: open}  # rategate
//! descriptors:
//!   - key: message_type
//!     value: marketing
//!     descriptors:
//!       - key: to_number
//!         rate_limit:
//!           unit: day
//!           requests_per_unit: 5
//!   - key: to_number
//!     rate_limit:
//!       unit: day
//!       requests_per_unit: 100
//!       algorithm: token_bucket        # rategate; default fixed_window
//!       burst: 20                      # rategate; token and leaky bucket only
//! ```
//!
//! # Examples
//!
//! ```
//! use rategate::rls::config::{Config, Unit};
//!
//! let yaml = "domain: messaging
//! descriptors:
//!   - key: to_number
//!     rate_limit: {unit: day, requests_per_unit: 100}
//! ";
//! let config = Config::from_sources(&[("messaging.yaml", yaml)], false)?;
//! let domain = config.domain("messaging").unwrap();
//! let m = domain.matching(&[("to_number", "2061111111")]).unwrap();
//! assert_eq!((m.rule.requests_per_unit, m.rule.unit), (100, Some(Unit::Day)));
//! assert_eq!(m.counter_key, "to\\_number_2061111111");
//!
//! let err = Config::from_sources(&[("bad.yaml", "domain: d\nratelimit: {}")], false)
//!     .unwrap_err();
//! assert_eq!(err.to_string(), "bad.yaml: config error, unknown key 'ratelimit'");
//! # Ok::<(), rategate::rls::config::ConfigError>(())
//! ```
//!
//! # Loading
//!
//! Each file goes through envoyproxy/ratelimit's steps: YAML syntax, keys
//! checked against its whitelist (anywhere in the document: a known key at
//! the wrong level is ignored, as there), the known fields decoded (a
//! string field takes any scalar's text, so `value: 123` is `"123"`; a
//! float where a key check sees one is `error checking config`). Once every
//! file has decoded, the files are built in order: empty domain, duplicate
//! domain (or, with `merge_domains`, the file's descriptors added to the
//! domain's tree), then each descriptor in document order. The first error
//! in that order is reported, so errors are deterministic (envoyproxy's
//! follow Go's random map order).
//!
//! # Where rategate differs from envoyproxy/ratelimit
//!
//! * A duplicate key in a YAML mapping is refused (`duplicate key 'unit'`):
//!   yaml.v2 keeps the last one, and a silently dropped rule is the kind of
//!   surprise a limiter must not have. So is a second YAML document in a
//!   file (yaml.v2 reads only the first).
//! * Siblings collide by their `(key, value)` pair, not by the joined
//!   `key_value` text: `key: a, value: b_c` and `key: a_b, value: c` are two
//!   descriptors (envoyproxy reports `duplicate descriptor composite key`).
//! * A wildcard (`*`, any number of them, each matching any run of
//!   characters) is in the `value` only and matches the request's value
//!   under the same key; envoyproxy matches `key_value*` against the
//!   request's `key_value`, so `key: a, value: b*` also caught key `a_b`.
//!   A `*` in a `key` is a literal character.
//! * Caps, so that no file can exhaust the stack or memory:
//!   [`MAX_FILE_BYTES`] per file, [`MAX_DESCRIPTOR_DEPTH`] levels of
//!   descriptors, 256 levels of YAML nesting, 2^20 YAML nodes (aliases
//!   expanded). Non-UTF-8 text is refused. YAML merge keys (`<<`) are not
//!   supported (they fail the whitelist).
//! * rategate's keys are strict about their place: `algorithm` and `burst`
//!   only inside `rate_limit`, `backend` only at the top level.
//!
//! # Matching
//!
//! [`Domain::matching`] is envoyproxy/ratelimit's `GetLimit` walk, and the
//! [`Match::counter_key`] names the counter as its cache key does, from the
//! request's entries; see there for the encoding.

mod yaml;

use crate::AlgorithmKind;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Read;
use std::path::Path;
use yaml::{Fail, RawDescriptor, RawRateLimit, RawRoot};

/// The largest config file read, in bytes.
pub const MAX_FILE_BYTES: usize = 4 << 20;

/// The deepest nesting of descriptors (the domain's own list is level 1).
/// Requests carry one entry per level, and Envoy's actions make a handful.
pub const MAX_DESCRIPTOR_DEPTH: usize = 64;

/// The backend kinds a domain's `backend:` may name (the policy files'
/// kinds).
pub const BACKEND_KINDS: [&str; 4] = ["memory", "redis", "synced", "leased"];

/// A rate limit's unit: the length of its fixed window, epoch-aligned
/// (so a week, month or year is not a calendar one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// 1 second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3,600 seconds.
    Hour,
    /// 86,400 seconds.
    Day,
    /// 604,800 seconds.
    Week,
    /// 30 days: 2,592,000 seconds.
    Month,
    /// 365 days: 31,536,000 seconds.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The window's length in seconds (envoyproxy's `UnitToDivider`).
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The number of `RateLimitResponse.RateLimit.Unit` in the RLS v3
    /// protocol (`WEEK` came last, so it is 7).
    pub fn number(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit of a protocol number; `None` for `UNKNOWN` (0) and numbers
    /// no unit has.
    pub fn from_number(number: i32) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.number() == number)
    }

    /// The name, lower case (`"second"`).
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// The unit named `name`, in any case (`"second"`, `"SECOND"`), as
    /// envoyproxy upper-cases it against the protocol's names.
    pub fn from_name(name: &str) -> Option<Unit> {
        let upper = name.to_uppercase();
        Unit::ALL
            .into_iter()
            .find(|u| u.name().eq_ignore_ascii_case(&upper))
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One `rate_limit` block, with the flags of the descriptor that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `rate_limit.name`; `None` when absent or empty. Names need not be
    /// unique; `replaces` refers to them.
    pub name: Option<String>,
    /// Requests allowed per window; 0 (the default) denies every request.
    pub requests_per_unit: u32,
    /// `None` only when `unlimited`.
    pub unit: Option<Unit>,
    /// Never counted, never limited.
    pub unlimited: bool,
    /// The descriptor's `shadow_mode`: counted, never denied. Not
    /// inherited by the descriptors below it.
    pub shadow_mode: bool,
    /// The descriptor's `quota_mode`. Not inherited.
    pub quota_mode: bool,
    /// The names of the rules this one replaces when both match one
    /// request (non-empty, never this rule's own name).
    pub replaces: Vec<String>,
    /// The descriptor's `detailed_metric`: metrics per request value.
    pub detailed_metric: bool,
    /// rategate's `algorithm` (any name [`AlgorithmKind`] parses); fixed
    /// window, envoyproxy's, by default.
    pub algorithm: AlgorithmKind,
    /// rategate's `burst`, at least 1; only with the token or leaky
    /// bucket.
    pub burst: Option<u32>,
    /// The rule's place for logs and metrics: the domain and each level's
    /// `key` or `key_value`, dotted (`test-domain.key1_value1.subkey1`), as
    /// envoyproxy's stats name it. Two rules may share a place (key `a_b`
    /// and key `a` with value `b`; domain `x` with key `y.z` and domain
    /// `x.y` with key `z`): [`id`](Self::id) tells them apart.
    pub path: String,
    /// The rule's identity, unique in the configuration: the domain
    /// (length-prefixed), then for each level `_`, its key and `_`, its
    /// value, with `\` and `_` in them escaped as in a counter key
    /// ([`Match::counter_key`]). What the service keys a rule's limiter
    /// and its Redis counters on.
    pub id: String,
}

/// A domain's `backend:` (rategate's): where its counters live. Kept as
/// written, for the service to build; nothing is connected here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendSpec {
    /// One of [`BACKEND_KINDS`].
    pub kind: String,
    /// Every other field, a scalar's text or a list of them.
    pub fields: BTreeMap<String, BackendValue>,
}

/// A field of a [`BackendSpec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendValue {
    /// A scalar, as written (`url: "redis://h/"`, `timeout_ms: 50`).
    Text(String),
    /// A list of scalars (`cluster: [a, b]`).
    List(Vec<String>),
}

impl BackendSpec {
    /// The scalar field `name`.
    pub fn text(&self, name: &str) -> Option<&str> {
        match self.fields.get(name)? {
            BackendValue::Text(text) => Some(text),
            BackendValue::List(_) => None,
        }
    }

    /// The list field `name`.
    pub fn list(&self, name: &str) -> Option<&[String]> {
        match self.fields.get(name)? {
            BackendValue::List(list) => Some(list),
            BackendValue::Text(_) => None,
        }
    }
}

/// One domain: its descriptor tree, built from one file or, with
/// `merge_domains`, several.
#[derive(Debug, Clone)]
pub struct Domain {
    /// The `domain:` a request names.
    pub name: String,
    /// rategate's `backend:`, if a file of the domain gave one.
    pub backend: Option<BackendSpec>,
    /// Every rule of the domain, in load order; nodes refer to them by
    /// index.
    rules: Vec<Rule>,
    root: Level,
}

/// The descriptors under one node (or the domain).
#[derive(Debug, Clone, Default)]
struct Level {
    nodes: Vec<Node>,
    by_key: HashMap<String, KeyNodes>,
    /// The nodes whose value has a `*`, in document order: the first that
    /// matches wins.
    wildcards: Vec<Wildcard>,
}

/// The nodes of one key at one level.
#[derive(Debug, Clone, Default)]
struct KeyNodes {
    /// The node without a value (the key's default).
    key_only: Option<usize>,
    /// The nodes with a value (wildcards too, so that a request carrying
    /// the pattern's own text finds it exactly), by value.
    by_value: HashMap<String, usize>,
}

#[derive(Debug, Clone)]
struct Wildcard {
    key: String,
    /// The value split at each `*`.
    parts: Vec<String>,
    node: usize,
}

#[derive(Debug, Clone)]
struct Node {
    rule: Option<usize>,
    /// With `share_threshold`, the value pattern that replaces the request's
    /// value in the counter key when this node matched by wildcard.
    share_pattern: Option<String>,
    children: Level,
}

impl Level {
    fn contains(&self, key: &str, value: &str) -> bool {
        self.by_key.get(key).is_some_and(|nodes| {
            if value.is_empty() {
                nodes.key_only.is_some()
            } else {
                nodes.by_value.contains_key(value)
            }
        })
    }

    fn insert(&mut self, key: String, value: String, node: Node) {
        let index = self.nodes.len();
        self.nodes.push(node);
        if value.contains('*') {
            self.wildcards.push(Wildcard {
                key: key.clone(),
                parts: value.split('*').map(str::to_owned).collect(),
                node: index,
            });
        }
        let nodes = self.by_key.entry(key).or_default();
        if value.is_empty() {
            nodes.key_only = Some(index);
        } else {
            nodes.by_value.insert(value, index);
        }
    }

    /// The node an entry leads to, and whether by wildcard: the exact
    /// value, else the first wildcard that matches, else the key alone.
    fn find(&self, key: &str, value: &str) -> Option<(&Node, bool)> {
        let nodes = self.by_key.get(key);
        if let Some(&i) = nodes.and_then(|n| n.by_value.get(value)) {
            return Some((&self.nodes[i], false));
        }
        let wildcard = self
            .wildcards
            .iter()
            .find(|w| w.key == key && wildcard_match(&w.parts, value));
        if let Some(w) = wildcard {
            return Some((&self.nodes[w.node], true));
        }
        let i = nodes?.key_only?;
        Some((&self.nodes[i], false))
    }
}

/// Whether `value` matches a pattern split at its `*`s, each of which
/// matches any run of characters (envoyproxy's `wildcardMatch`): the first
/// part is a prefix, the last a suffix, the middle ones appear in order
/// between them without overlapping.
fn wildcard_match(parts: &[String], value: &str) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    if parts.len() == 1 {
        return first == value;
    }
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed || !value.starts_with(first.as_str()) || !value.ends_with(last.as_str())
    {
        return false;
    }
    // Prefix and suffix do not overlap (fixed <= len), and both end on
    // character boundaries, so the slice is valid.
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// The counter key of `entries` (key and value pairs), encoded as
/// [`Match::counter_key`] is, with every value as given: the key of a
/// descriptor's `limit` override.
pub(crate) fn counter_key<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut key = String::new();
    for (k, v) in entries {
        push_entry(&mut key, k, v);
    }
    key
}

/// Appends one entry to a counter key: `_` between entries, then the key
/// and value escaped, joined by `_`.
fn push_entry(out: &mut String, key: &str, value: &str) {
    if !out.is_empty() {
        out.push('_');
    }
    push_escaped(out, key);
    out.push('_');
    push_escaped(out, value);
}

/// Appends `text` to a counter key with `\` and `_` escaped by a `\`, so
/// that the unescaped `_` separators split the key back into its parts.
fn push_escaped(out: &mut String, text: &str) {
    for c in text.chars() {
        if c == '\\' || c == '_' {
            out.push('\\');
        }
        out.push(c);
    }
}

/// The rule a request's descriptor matched, and its counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match<'a> {
    /// The matched rule.
    pub rule: &'a Rule,
    /// The counter's key within the domain, from the request's entries:
    /// each entry's key and value, all joined by `_`, with `\` and `_`
    /// inside a key or value escaped by a `\` (`key1_value1_subkey1_x`;
    /// key `a`, value `b_c` gives `a_b\_c`). So a key-only or wildcard
    /// rule gives each distinct value its own counter. Where a node with
    /// `share_threshold` matched by wildcard, its pattern stands for the
    /// value (`files_files/*`), so all its matches share one counter.
    /// Neither the domain nor the window's start is part of it.
    /// (envoyproxy joins the parts with `_` unescaped, where `a`/`b_c` and
    /// `a_b`/`c` share a counter.)
    pub counter_key: String,
}

impl Domain {
    /// The rule for a request descriptor's entries (`(key, value)` pairs),
    /// by envoyproxy/ratelimit's `GetLimit` walk: at each level, the node
    /// of the exact key and value, else the first wildcard node (document
    /// order) whose pattern matches, else the key's node without a value;
    /// then the next entry among that node's children. The rule is the
    /// last entry's node's: the request must be exactly as deep as the
    /// rule. A miss, or a node without children before the last entry,
    /// ends the walk with `None`; there is no backtracking (a node found
    /// by value whose subtree misses does not fall back to the key-only
    /// sibling). `None` too for no entries, and for a node without a rule
    /// (a whitelisted value).
    pub fn matching(&self, entries: &[(&str, &str)]) -> Option<Match<'_>> {
        let mut level = &self.root;
        let mut counter_key = String::new();
        for (i, &(key, value)) in entries.iter().enumerate() {
            let (node, by_wildcard) = level.find(key, value)?;
            let shown = match &node.share_pattern {
                Some(pattern) if by_wildcard => pattern.as_str(),
                _ => value,
            };
            push_entry(&mut counter_key, key, shown);
            if i + 1 == entries.len() {
                let rule = &self.rules[node.rule?];
                return Some(Match { rule, counter_key });
            }
            if node.children.nodes.is_empty() {
                return None;
            }
            level = &node.children;
        }
        None
    }

    /// The domain's rules, in load order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
}

/// Every domain of a service's configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    domains: Vec<Domain>,
    by_name: HashMap<String, usize>,
    /// (domain, rule) in file order, across merged domains.
    rule_order: Vec<(usize, usize)>,
}

impl Config {
    /// Loads `path`: one file, or a directory's regular files (symbolic
    /// links followed, as in a Kubernetes config map) whose names end in
    /// `.yaml` or `.yml`, not recursively, in name order. Errors name a
    /// file as given for a single file, and by its file name alone for a
    /// directory's entry (`basic.yaml`); an I/O error names the path.
    ///
    /// # Errors
    ///
    /// The first [`ConfigError`] in load order (see the module docs).
    pub fn load(path: impl AsRef<Path>, merge_domains: bool) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let metadata = std::fs::metadata(path).map_err(|e| ConfigError::io(path, e))?;
        let mut files = Vec::new();
        if metadata.is_dir() {
            let mut entries = Vec::new();
            for entry in std::fs::read_dir(path).map_err(|e| ConfigError::io(path, e))? {
                let entry = entry.map_err(|e| ConfigError::io(path, e))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if !(name.ends_with(".yaml") || name.ends_with(".yml")) {
                    continue;
                }
                let entry_path = entry.path();
                // `metadata` follows links; one that dangles is an error.
                let meta =
                    std::fs::metadata(&entry_path).map_err(|e| ConfigError::io(&entry_path, e))?;
                if meta.is_file() {
                    entries.push((name, entry_path));
                }
            }
            entries.sort();
            for (name, entry_path) in entries {
                files.push((name, read_capped(&entry_path)?));
            }
        } else {
            files.push((path.display().to_string(), read_capped(path)?));
        }
        let mut texts = Vec::with_capacity(files.len());
        for (name, bytes) in &files {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| ConfigError::new(name, None, "config file is not valid UTF-8"))?;
            texts.push((name.as_str(), text));
        }
        Config::from_sources(&texts, merge_domains)
    }

    /// Builds a configuration from `(file name, content)` pairs, in order;
    /// the names are for errors only.
    ///
    /// # Errors
    ///
    /// The first [`ConfigError`] in load order (see the module docs).
    pub fn from_sources(
        sources: &[(&str, &str)],
        merge_domains: bool,
    ) -> Result<Config, ConfigError> {
        let mut roots = Vec::with_capacity(sources.len());
        for &(name, text) in sources {
            roots.push((
                name,
                decode_file(text).map_err(|f| ConfigError::from_fail(name, f))?,
            ));
        }
        let mut config = Config::default();
        for (name, root) in roots {
            config.add(name, root, merge_domains)?;
        }
        Ok(config)
    }

    /// The domain named `name`.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.by_name.get(name).map(|&i| &self.domains[i])
    }

    /// Every domain, in load order.
    pub fn domains(&self) -> impl Iterator<Item = &Domain> {
        self.domains.iter()
    }

    /// Every rule, in file order (then document order), for a debug
    /// endpoint.
    pub fn rules(&self) -> Vec<&Rule> {
        let rules = self.rule_order.iter();
        rules.map(|&(d, r)| &self.domains[d].rules[r]).collect()
    }

    fn add(&mut self, file: &str, root: RawRoot, merge: bool) -> Result<(), ConfigError> {
        let err = |place: Option<&str>, message: String| ConfigError::new(file, place, message);
        if root.domain.is_empty() {
            return Err(err(None, "config file cannot have empty domain".into()));
        }
        let index = match self.by_name.get(&root.domain) {
            Some(&index) => {
                if !merge {
                    let message = format!("duplicate domain '{}' in config file", root.domain);
                    return Err(err(None, message));
                }
                let domain = &mut self.domains[index];
                match (&domain.backend, root.backend) {
                    (Some(old), Some(new)) if *old != new => {
                        let message = format!("conflicting backend for domain '{}'", domain.name);
                        return Err(err(Some("backend"), message));
                    }
                    (None, Some(new)) => domain.backend = Some(new),
                    _ => {}
                }
                index
            }
            None => {
                self.by_name.insert(root.domain.clone(), self.domains.len());
                self.domains.push(Domain {
                    name: root.domain.clone(),
                    backend: root.backend,
                    rules: Vec::new(),
                    root: Level::default(),
                });
                self.domains.len() - 1
            }
        };
        let domain = &mut self.domains[index];
        let mut tree = Tree {
            file,
            domain: index,
            rules: &mut domain.rules,
            order: &mut self.rule_order,
        };
        tree.load(
            &mut domain.root,
            &format!("{}.", root.domain),
            &format!("{}:{}:", root.domain.len(), root.domain),
            root.descriptors,
        )
    }
}

/// Reads at most [`MAX_FILE_BYTES`] (and one more, to tell).
fn read_capped(path: &Path) -> Result<Vec<u8>, ConfigError> {
    // A FIFO or a device would block the open or never end: only regular
    // files (symlinks followed) are read.
    let meta = std::fs::metadata(path).map_err(|e| ConfigError::io(path, e))?;
    if !meta.is_file() {
        return Err(ConfigError::io(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
        ));
    }
    let file = std::fs::File::open(path).map_err(|e| ConfigError::io(path, e))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ConfigError::io(path, e))?;
    Ok(bytes)
}

/// One file's text to its decoded root: size, YAML, keys, fields.
fn decode_file(text: &str) -> Result<RawRoot, Fail> {
    if text.len() > MAX_FILE_BYTES {
        return Err(Fail {
            place: None,
            message: format!("config file larger than {MAX_FILE_BYTES} bytes"),
        });
    }
    let root = yaml::parse(text)?;
    if let Some(yaml::YamlNode::Map(entries)) = &root {
        yaml::validate_keys(entries, "")?;
    }
    yaml::decode(root.as_ref())
}

/// Builds one file's descriptors into a domain's tree (envoyproxy's
/// `loadDescriptors`).
struct Tree<'a> {
    file: &'a str,
    domain: usize,
    rules: &'a mut Vec<Rule>,
    order: &'a mut Vec<(usize, usize)>,
}

impl Tree<'_> {
    /// `parent` is the dotted path of the level, with a trailing `.`;
    /// `parent_id` the identity of the level (see [`Rule::id`]).
    fn load(
        &mut self,
        level: &mut Level,
        parent: &str,
        parent_id: &str,
        descriptors: Vec<RawDescriptor>,
    ) -> Result<(), ConfigError> {
        for d in descriptors {
            let err = |message: String| ConfigError::new(self.file, Some(&d.place), message);
            if d.key.is_empty() {
                return Err(err("descriptor has empty key".into()));
            }
            let final_key = if d.value.is_empty() {
                d.key.clone()
            } else {
                format!("{}_{}", d.key, d.value)
            };
            let path = format!("{parent}{final_key}");
            // After the domain's part (length-prefixed), each level adds
            // `_`, its escaped key, `_` and its escaped value.
            let mut id = parent_id.to_owned();
            id.push('_');
            push_escaped(&mut id, &d.key);
            id.push('_');
            push_escaped(&mut id, &d.value);
            if level.contains(&d.key, &d.value) {
                return Err(err(format!("duplicate descriptor composite key '{path}'")));
            }
            let rule = match &d.rate_limit {
                Some(rate_limit) => Some(self.rule(rate_limit, &path, &id, &d)?),
                None => None,
            };
            if d.share_threshold && !d.value.contains('*') {
                return Err(err(format!(
                    "share_threshold can only be used with wildcard values (containing '*'), \
                     but found key '{final_key}'"
                )));
            }
            let rule = rule.map(|rule| {
                self.rules.push(rule);
                self.order.push((self.domain, self.rules.len() - 1));
                self.rules.len() - 1
            });
            let mut node = Node {
                rule,
                share_pattern: d.share_threshold.then(|| d.value.clone()),
                children: Level::default(),
            };
            self.load(&mut node.children, &format!("{path}."), &id, d.descriptors)?;
            level.insert(d.key, d.value, node);
        }
        Ok(())
    }

    /// A `rate_limit` block's checks, in envoyproxy's order (unit, then
    /// replaces), then rategate's (algorithm, burst).
    fn rule(
        &self,
        raw: &RawRateLimit,
        path: &str,
        id: &str,
        d: &RawDescriptor,
    ) -> Result<Rule, ConfigError> {
        let err = |message: String| ConfigError::new(self.file, Some(&raw.place), message);
        let unit = Unit::from_name(&raw.unit);
        if raw.unlimited {
            if unit.is_some() {
                return Err(err(
                    "should not specify rate limit unit when unlimited".into()
                ));
            }
        } else if unit.is_none() {
            return Err(err(format!("invalid rate limit unit '{}'", raw.unit)));
        }
        for name in &raw.replaces {
            if name.is_empty() {
                return Err(err("should not have an empty replaces entry".into()));
            }
            if *name == raw.name {
                return Err(err(
                    "replaces should not contain name of same descriptor".into()
                ));
            }
        }
        let algorithm = match &raw.algorithm {
            None => AlgorithmKind::FixedWindow,
            Some(text) => text.parse().map_err(|_| {
                let expected = AlgorithmKind::NAMES.join(", ");
                ConfigError::new(
                    self.file,
                    Some(&format!("{}.algorithm", raw.place)),
                    format!("unknown algorithm '{text}' (expected one of {expected})"),
                )
            })?,
        };
        if let Some(burst) = raw.burst {
            let burst_err = |message: String| {
                let place = format!("{}.burst", raw.place);
                ConfigError::new(self.file, Some(&place), message)
            };
            if burst == 0 {
                return Err(burst_err("burst must be at least 1".into()));
            }
            if !matches!(
                algorithm,
                AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket
            ) {
                return Err(burst_err(format!(
                    "burst applies only to token_bucket and leaky_bucket, not {algorithm}"
                )));
            }
        }
        Ok(Rule {
            name: (!raw.name.is_empty()).then(|| raw.name.clone()),
            requests_per_unit: raw.requests_per_unit,
            unit,
            unlimited: raw.unlimited,
            shadow_mode: d.shadow_mode,
            quota_mode: d.quota_mode,
            replaces: raw.replaces.clone(),
            detailed_metric: d.detailed_metric,
            algorithm,
            burst: raw.burst,
            path: path.to_owned(),
            id: id.to_owned(),
        })
    }
}

/// Why a configuration did not load: the file, the place in it where
/// known, and the message. Displays as `<file>: <message>`, with
/// envoyproxy/ratelimit's message texts where it has the case
/// (`bad_limit_unit.yaml: invalid rate limit unit 'foo'`).
#[derive(Debug)]
pub struct ConfigError {
    file: String,
    place: Option<String>,
    message: String,
    io: Option<std::io::Error>,
}

impl ConfigError {
    fn new(file: &str, place: Option<&str>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            place: place.map(str::to_owned),
            message: message.into(),
            io: None,
        }
    }

    fn from_fail(file: &str, fail: Fail) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            place: fail.place,
            message: fail.message,
            io: None,
        }
    }

    fn io(path: &Path, error: std::io::Error) -> ConfigError {
        ConfigError {
            file: path.display().to_string(),
            place: None,
            message: format!("cannot read: {error}"),
            io: Some(error),
        }
    }

    /// The file (or, for an I/O error, the path) at fault.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Where in the file, when known: a YAML place for the syntax, key and
    /// type checks (`descriptors[0].rate_limit.unit`), the descriptor's
    /// YAML place for a descriptor's checks.
    pub fn place(&self) -> Option<&str> {
        self.place.as_deref()
    }

    /// Why.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the file or directory could not be read.
    pub fn is_io(&self) -> bool {
        self.io.is_some()
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.message)
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.io.as_ref().map(|e| e as _)
    }
}

#[cfg(test)]
mod tests;
