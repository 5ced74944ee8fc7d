//! From a file's text to typed, unchecked descriptors: yaml-rust2's event
//! parser builds a tree ([`YamlNode`]) under caps on depth and size, keys
//! are checked against envoyproxy/ratelimit's whitelist, and the known
//! fields are decoded into [`RawRoot`]. The semantic checks (units,
//! duplicates, replaces) are the caller's, after every file has decoded,
//! in the order envoyproxy/ratelimit reports them.
//!
//! The tree is this module's own rather than yaml-rust2's `Yaml`, for two
//! reasons: it keeps each scalar's text as written beside its resolved
//! kind, so a string field takes the text (`value: 0123` is `"0123"`, as
//! yaml.v2 gives it; `Yaml` keeps only the integer 123), and it is built
//! from the parser's events without recursion, under the caps, where
//! yaml-rust2's loader recurses once per level and expands aliases
//! without a bound.

use super::{BACKEND_KINDS, BackendSpec, BackendValue, MAX_DESCRIPTOR_DEPTH};
use std::collections::{BTreeMap, HashMap, HashSet};
use yaml_rust2::Yaml;
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::TScalarStyle;

/// The deepest nesting of YAML collections a file may have. Bounds every
/// recursion over the tree (key checks, decoding, drop), so no input can
/// overflow the stack; deep enough for [`MAX_DESCRIPTOR_DEPTH`] levels of
/// descriptors (two collections each) and their `rate_limit` blocks.
pub(super) const MAX_YAML_DEPTH: usize = 256;

/// The most YAML nodes a file may build, copies made for anchors and
/// aliases included: an alias of an alias of ... must not grow
/// exponentially.
pub(super) const MAX_YAML_NODES: usize = 1 << 20;

/// envoyproxy/ratelimit's whitelist (config_impl.go `validKeys`) and
/// rategate's extensions (`algorithm`, `burst`, `backend`). Global, as
/// there: a key is checked against it wherever it appears.
const VALID_KEYS: [&str; 19] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "algorithm",
    "burst",
    "backend",
];

/// A problem found in one file; the caller adds the file's name.
#[derive(Debug)]
pub(super) struct Fail {
    pub(super) place: Option<String>,
    pub(super) message: String,
}

impl Fail {
    fn new(place: &str, message: impl Into<String>) -> Fail {
        Fail {
            place: (!place.is_empty()).then(|| place.to_owned()),
            message: message.into(),
        }
    }

    fn load(place: &str, message: impl std::fmt::Display) -> Fail {
        Fail::new(place, format!("error loading config file: {message}"))
    }
}

#[derive(Debug, Clone)]
pub(super) enum YamlNode {
    Scalar(Scalar),
    List(Vec<YamlNode>),
    /// Entries in document order; no two scalar keys are equal.
    Map(Vec<(YamlNode, YamlNode)>),
}

#[derive(Debug, Clone)]
pub(super) struct Scalar {
    /// As written (unquoted, unescaped).
    text: String,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Str,
    Int(i64),
    Bool(bool),
    Float,
    Null,
    /// A core-schema tag whose text does not fit it (`!!int abc`).
    Invalid,
}

impl YamlNode {
    /// The YAML tag, as yaml.v2's type errors name it.
    fn tag(&self) -> &'static str {
        match self {
            YamlNode::Scalar(s) => match s.kind {
                Kind::Str | Kind::Invalid => "!!str",
                Kind::Int(_) => "!!int",
                Kind::Bool(_) => "!!bool",
                Kind::Float => "!!float",
                Kind::Null => "!!null",
            },
            YamlNode::List(_) => "!!seq",
            YamlNode::Map(_) => "!!map",
        }
    }

    fn as_str_key(&self) -> Option<&str> {
        match self {
            YamlNode::Scalar(Scalar {
                text,
                kind: Kind::Str,
            }) => Some(text),
            _ => None,
        }
    }

    /// Go's `%v` of the value yaml.v2 would decode, for the messages that
    /// print a value (`key is not of type string: 0.25`).
    fn go_format(&self, out: &mut String) {
        match self {
            YamlNode::Scalar(s) => match s.kind {
                Kind::Null => out.push_str("<nil>"),
                Kind::Int(i) => out.push_str(&i.to_string()),
                Kind::Bool(b) => out.push_str(if b { "true" } else { "false" }),
                _ => out.push_str(&s.text),
            },
            YamlNode::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    item.go_format(out);
                }
                out.push(']');
            }
            YamlNode::Map(entries) => {
                out.push_str("map[");
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    k.go_format(out);
                    out.push(':');
                    v.go_format(out);
                }
                out.push(']');
            }
        }
    }

    fn go_string(&self) -> String {
        let mut out = String::new();
        self.go_format(&mut out);
        out
    }
}

/// Identity of a scalar key for the duplicate check: equal resolved
/// values are the same key (`1` and `+1`), whatever their text.
fn key_identity(node: &YamlNode) -> Option<String> {
    let YamlNode::Scalar(s) = node else {
        return None;
    };
    Some(match s.kind {
        Kind::Str | Kind::Invalid | Kind::Float => format!("s{}", s.text),
        Kind::Int(i) => format!("i{i}"),
        Kind::Bool(b) => format!("b{b}"),
        Kind::Null => "n".to_owned(),
    })
}

/// A built node with its height (0 for a scalar, 1 + the highest child
/// for a collection) and its number of nodes.
#[derive(Clone)]
struct Built {
    node: YamlNode,
    height: usize,
    count: usize,
}

/// A collection being built.
struct Frame {
    node: YamlNode,
    anchor: usize,
    /// A map's key waiting for its value.
    key: Option<YamlNode>,
    seen: HashSet<String>,
    child_height: usize,
    count: usize,
}

/// The resolved kind of a scalar, as yaml-rust2's loader resolves it
/// (the YAML 1.2 core schema): quoted text is a string; a core tag
/// (`!!int`) forces a kind; other tags are strings.
fn resolve(text: &str, style: TScalarStyle, tag: Option<&Tag>) -> Kind {
    if style != TScalarStyle::Plain {
        return Kind::Str;
    }
    let from_plain = |text: &str| match Yaml::from_str(text) {
        Yaml::Integer(i) => Kind::Int(i),
        Yaml::Real(_) => Kind::Float,
        Yaml::Boolean(b) => Kind::Bool(b),
        Yaml::Null => Kind::Null,
        _ => Kind::Str,
    };
    let Some(tag) = tag else {
        return from_plain(text);
    };
    if tag.handle != "tag:yaml.org,2002:" {
        return Kind::Str;
    }
    let kind = from_plain(text);
    let fits = match tag.suffix.as_str() {
        "str" => return Kind::Str,
        "int" => matches!(kind, Kind::Int(_)),
        "float" => matches!(kind, Kind::Int(_) | Kind::Float),
        "bool" => matches!(kind, Kind::Bool(_)),
        "null" => kind == Kind::Null,
        _ => return Kind::Str,
    };
    match (fits, kind) {
        (true, Kind::Int(_)) if tag.suffix == "float" => Kind::Float,
        (true, kind) => kind,
        (false, _) => Kind::Invalid,
    }
}

/// The dotted place of the collection on top of `stack`
/// (`descriptors[0].rate_limit`): each lower frame names its child in
/// progress.
fn stack_place(stack: &[Frame]) -> String {
    let mut place = String::new();
    for frame in stack.iter().take(stack.len().saturating_sub(1)) {
        match &frame.node {
            YamlNode::List(items) => place.push_str(&format!("[{}]", items.len())),
            _ => {
                if !place.is_empty() {
                    place.push('.');
                }
                if let Some(key) = &frame.key {
                    key.go_format(&mut place);
                }
            }
        }
    }
    place
}

/// Parses one YAML document into a tree; `None` for an empty one.
///
/// Refuses, where yaml.v2 would accept: a duplicate key in a mapping
/// (yaml.v2 keeps the last, silently dropping the first), a second
/// document (yaml.v2 reads the first only), nesting deeper than
/// [`MAX_YAML_DEPTH`], more than [`MAX_YAML_NODES`] nodes.
pub(super) fn parse(text: &str) -> Result<Option<YamlNode>, Fail> {
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, Built> = HashMap::new();
    let mut root: Option<YamlNode> = None;
    let mut documents = 0;
    let mut nodes = 0usize;
    let mut spend = |n: usize| {
        nodes = nodes.saturating_add(n);
        if nodes > MAX_YAML_NODES {
            Err(Fail::load(
                "",
                format!("more than {MAX_YAML_NODES} YAML nodes (aliases expanded)"),
            ))
        } else {
            Ok(())
        }
    };
    // Iterative on purpose: yaml-rust2's own loader recurses once per
    // level of nesting.
    loop {
        let (event, _) = parser.next_token().map_err(|e| {
            // The scanner's own cap on flow nesting (`[[[...`), below ours.
            if e.info() == "recursion limit exceeded" {
                let line = e.marker().line();
                Fail::new("", format!("{} (line {line})", too_deep_message()))
            } else {
                Fail::load("", e)
            }
        })?;
        let built = match event {
            Event::StreamEnd => break,
            Event::Nothing | Event::StreamStart | Event::DocumentEnd => continue,
            Event::DocumentStart => {
                documents += 1;
                if documents > 1 {
                    return Err(Fail::load("", "more than one YAML document"));
                }
                continue;
            }
            Event::Alias(id) => {
                let Some(built) = anchors.get(&id) else {
                    return Err(Fail::load(&stack_place(&stack), "unknown alias"));
                };
                spend(built.count)?;
                built.clone()
            }
            Event::Scalar(text, style, anchor, tag) => {
                let kind = resolve(&text, style, tag.as_ref());
                let built = Built {
                    node: YamlNode::Scalar(Scalar { text, kind }),
                    height: 0,
                    count: 1,
                };
                spend(1)?;
                if anchor > 0 {
                    spend(1)?;
                    anchors.insert(anchor, built.clone());
                }
                built
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if stack.len() >= MAX_YAML_DEPTH {
                    return Err(too_deep(&stack));
                }
                spend(1)?;
                let node = if matches!(event, Event::SequenceStart(..)) {
                    YamlNode::List(Vec::new())
                } else {
                    YamlNode::Map(Vec::new())
                };
                stack.push(Frame {
                    node,
                    anchor,
                    key: None,
                    seen: HashSet::new(),
                    child_height: 0,
                    count: 1,
                });
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(frame) = stack.pop() else {
                    return Err(Fail::load("", "unbalanced collection end"));
                };
                let built = Built {
                    node: frame.node,
                    height: frame.child_height + 1,
                    count: frame.count,
                };
                if frame.anchor > 0 {
                    spend(built.count)?;
                    anchors.insert(frame.anchor, built.clone());
                }
                built
            }
        };
        if stack.len() + built.height > MAX_YAML_DEPTH {
            return Err(too_deep(&stack));
        }
        let Some(parent) = stack.last_mut() else {
            root = Some(built.node);
            continue;
        };
        parent.child_height = parent.child_height.max(built.height);
        parent.count += built.count;
        match &mut parent.node {
            YamlNode::List(items) => items.push(built.node),
            YamlNode::Map(entries) => match parent.key.take() {
                None => parent.key = Some(built.node),
                Some(key) => {
                    if let Some(identity) = key_identity(&key) {
                        if !parent.seen.insert(identity) {
                            let place = stack_place(&stack);
                            let key = key.go_string();
                            return Err(Fail::new(&place, format!("duplicate key '{key}'")));
                        }
                    }
                    entries.push((key, built.node));
                }
            },
            YamlNode::Scalar(_) => unreachable!("only collections are pushed"),
        }
    }
    Ok(root)
}

fn too_deep(stack: &[Frame]) -> Fail {
    Fail::new(&stack_place(stack), too_deep_message())
}

fn too_deep_message() -> String {
    format!(
        "config error, nesting deeper than {MAX_YAML_DEPTH} levels \
         (at most {MAX_DESCRIPTOR_DEPTH} levels of descriptors)"
    )
}

fn join(place: &str, key: &str) -> String {
    if place.is_empty() {
        key.to_owned()
    } else {
        format!("{place}.{key}")
    }
}

/// envoyproxy/ratelimit's `validateYamlKeys`, in document order: every key
/// a string from the whitelist, every list a list of maps, every leaf a
/// string, integer, boolean or null. `metadata` is free-form and
/// `backend` is checked by its decoder.
pub(super) fn validate_keys(entries: &[(YamlNode, YamlNode)], place: &str) -> Result<(), Fail> {
    for (key, value) in entries {
        let Some(name) = key.as_str_key() else {
            let shown = key.go_string();
            return Err(Fail::new(
                place,
                format!("config error, key is not of type string: {shown}"),
            ));
        };
        if !VALID_KEYS.contains(&name) {
            return Err(Fail::new(
                place,
                format!("config error, unknown key '{name}'"),
            ));
        }
        if name == "metadata" || name == "backend" {
            continue;
        }
        let here = join(place, name);
        match value {
            YamlNode::List(items) => {
                for (i, item) in items.iter().enumerate() {
                    let YamlNode::Map(entries) = item else {
                        let shown = item.go_string();
                        return Err(Fail::new(
                            &here,
                            format!(
                                "config error, yaml file contains list of type other than map: {shown}"
                            ),
                        ));
                    };
                    validate_keys(entries, &format!("{here}[{i}]"))?;
                }
            }
            YamlNode::Map(entries) => validate_keys(entries, &here)?,
            YamlNode::Scalar(s) => match s.kind {
                Kind::Str | Kind::Int(_) | Kind::Bool(_) | Kind::Null => {}
                Kind::Float | Kind::Invalid => {
                    return Err(Fail::new(&here, "error checking config"));
                }
            },
        }
    }
    Ok(())
}

/// One file, decoded: envoyproxy/ratelimit's `YamlRoot` and rategate's
/// `backend`.
#[derive(Debug)]
pub(super) struct RawRoot {
    pub(super) domain: String,
    pub(super) descriptors: Vec<RawDescriptor>,
    pub(super) backend: Option<BackendSpec>,
}

#[derive(Debug)]
pub(super) struct RawDescriptor {
    /// The YAML place (`descriptors[0].descriptors[1]`).
    pub(super) place: String,
    pub(super) key: String,
    pub(super) value: String,
    pub(super) rate_limit: Option<RawRateLimit>,
    pub(super) descriptors: Vec<RawDescriptor>,
    pub(super) shadow_mode: bool,
    pub(super) quota_mode: bool,
    pub(super) detailed_metric: bool,
    pub(super) share_threshold: bool,
}

#[derive(Debug)]
pub(super) struct RawRateLimit {
    pub(super) place: String,
    pub(super) requests_per_unit: u32,
    pub(super) unit: String,
    pub(super) unlimited: bool,
    pub(super) name: String,
    pub(super) replaces: Vec<String>,
    pub(super) algorithm: Option<String>,
    pub(super) burst: Option<u32>,
}
/// Decodes a validated document: the typed pass of yaml.v2's non-strict
/// `Unmarshal` (whitelisted keys of another level ignored, null as the
/// zero value, a scalar's text for a string), plus the placement of
/// rategate's keys, which is strict. Fields are read in document order,
/// so the first error is the first in the file.
pub(super) fn decode(root: Option<&YamlNode>) -> Result<RawRoot, Fail> {
    let entries: &[(YamlNode, YamlNode)] = match root {
        None => &[],
        Some(YamlNode::Map(entries)) => entries,
        Some(node) if is_null(node) => &[],
        Some(other) => {
            return Err(Fail::load(
                "",
                format!("cannot unmarshal {} into a mapping", shown(other)),
            ));
        }
    };
    let mut root = RawRoot {
        domain: String::new(),
        descriptors: Vec::new(),
        backend: None,
    };
    for (name, value) in fields(entries) {
        match name {
            "domain" => root.domain = string(value, "", name)?,
            "descriptors" => root.descriptors = descriptors(value, "", 1)?,
            "backend" => root.backend = backend(value)?,
            "algorithm" | "burst" => return Err(misplaced("", name, "inside rate_limit")),
            _ => {}
        }
    }
    Ok(root)
}

/// A validated map's entries by name (every key is a string).
fn fields(entries: &[(YamlNode, YamlNode)]) -> impl Iterator<Item = (&str, &YamlNode)> {
    entries
        .iter()
        .filter_map(|(k, v)| Some((k.as_str_key()?, v)))
}

fn is_null(node: &YamlNode) -> bool {
    matches!(node, YamlNode::Scalar(s) if s.kind == Kind::Null)
}

/// A value as yaml.v2's type errors show it: the tag, and a scalar's text.
fn shown(node: &YamlNode) -> String {
    match node {
        YamlNode::Scalar(s) => format!("{} `{}`", node.tag(), s.text),
        _ => node.tag().to_owned(),
    }
}

fn type_error(place: &str, name: &str, node: &YamlNode, into: &str) -> Fail {
    let here = join(place, name);
    Fail::load(
        &here,
        format!("{here}: cannot unmarshal {} into {into}", shown(node)),
    )
}

fn misplaced(place: &str, name: &str, belongs: &str) -> Fail {
    Fail::new(
        &join(place, name),
        format!("'{name}' is only allowed {belongs}"),
    )
}

fn string(node: &YamlNode, place: &str, name: &str) -> Result<String, Fail> {
    match node {
        YamlNode::Scalar(s) if s.kind == Kind::Null => Ok(String::new()),
        YamlNode::Scalar(s) => Ok(s.text.clone()),
        _ => Err(type_error(place, name, node, "string")),
    }
}

fn boolean(node: &YamlNode, place: &str, name: &str) -> Result<bool, Fail> {
    match node {
        YamlNode::Scalar(s) if s.kind == Kind::Null => Ok(false),
        YamlNode::Scalar(Scalar {
            kind: Kind::Bool(b),
            ..
        }) => Ok(*b),
        _ => Err(type_error(place, name, node, "bool")),
    }
}

fn uint32(node: &YamlNode, place: &str, name: &str) -> Result<Option<u32>, Fail> {
    match node {
        YamlNode::Scalar(s) if s.kind == Kind::Null => Ok(None),
        YamlNode::Scalar(Scalar {
            kind: Kind::Int(i), ..
        }) => u32::try_from(*i)
            .map(Some)
            .map_err(|_| type_error(place, name, node, "uint32")),
        _ => Err(type_error(place, name, node, "uint32")),
    }
}

/// A list of maps (validated) or null.
fn maps<'a>(
    node: &'a YamlNode,
    place: &str,
    name: &str,
) -> Result<Vec<&'a [(YamlNode, YamlNode)]>, Fail> {
    match node {
        YamlNode::List(items) => Ok(items
            .iter()
            .filter_map(|item| match item {
                YamlNode::Map(entries) => Some(entries.as_slice()),
                _ => None,
            })
            .collect()),
        _ if is_null(node) => Ok(Vec::new()),
        _ => Err(type_error(place, name, node, "a list")),
    }
}

fn descriptors(node: &YamlNode, place: &str, depth: usize) -> Result<Vec<RawDescriptor>, Fail> {
    let list = maps(node, place, "descriptors")?;
    let at = join(place, "descriptors");
    if !list.is_empty() && depth > MAX_DESCRIPTOR_DEPTH {
        return Err(Fail::new(
            &at,
            format!("descriptors nested deeper than {MAX_DESCRIPTOR_DEPTH} levels"),
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, entries) in list.into_iter().enumerate() {
        let here = format!("{at}[{i}]");
        let mut d = RawDescriptor {
            place: here.clone(),
            key: String::new(),
            value: String::new(),
            rate_limit: None,
            descriptors: Vec::new(),
            shadow_mode: false,
            quota_mode: false,
            detailed_metric: false,
            share_threshold: false,
        };
        for (name, value) in fields(entries) {
            match name {
                "key" => d.key = string(value, &here, name)?,
                "value" => d.value = string(value, &here, name)?,
                "rate_limit" => d.rate_limit = rate_limit(value, &here)?,
                "descriptors" => d.descriptors = descriptors(value, &here, depth + 1)?,
                "shadow_mode" => d.shadow_mode = boolean(value, &here, name)?,
                "quota_mode" => d.quota_mode = boolean(value, &here, name)?,
                "detailed_metric" => d.detailed_metric = boolean(value, &here, name)?,
                "share_threshold" => d.share_threshold = boolean(value, &here, name)?,
                // `value_to_metric` names metrics only; `metadata` is
                // free-form.
                "value_to_metric" => {
                    boolean(value, &here, name)?;
                }
                "algorithm" | "burst" => return Err(misplaced(&here, name, "inside rate_limit")),
                "backend" => return Err(misplaced(&here, name, "at the top level")),
                _ => {}
            }
        }
        out.push(d);
    }
    Ok(out)
}

/// A `rate_limit:`; null is no rate limit, `{}` one with every field zero.
fn rate_limit(node: &YamlNode, parent: &str) -> Result<Option<RawRateLimit>, Fail> {
    let entries = match node {
        YamlNode::Map(entries) => entries,
        _ if is_null(node) => return Ok(None),
        _ => return Err(type_error(parent, "rate_limit", node, "a mapping")),
    };
    let place = join(parent, "rate_limit");
    let mut raw = RawRateLimit {
        place: place.clone(),
        requests_per_unit: 0,
        unit: String::new(),
        unlimited: false,
        name: String::new(),
        replaces: Vec::new(),
        algorithm: None,
        burst: None,
    };
    for (name, value) in fields(entries) {
        match name {
            "requests_per_unit" => {
                raw.requests_per_unit = uint32(value, &place, name)?.unwrap_or(0);
            }
            "unit" => raw.unit = string(value, &place, name)?,
            "unlimited" => raw.unlimited = boolean(value, &place, name)?,
            "name" => raw.name = string(value, &place, name)?,
            "replaces" => {
                for (i, entry) in maps(value, &place, name)?.into_iter().enumerate() {
                    let here = format!("{place}.replaces[{i}]");
                    let mut replaced = String::new();
                    for (field, value) in fields(entry) {
                        if field == "name" {
                            replaced = string(value, &here, field)?;
                        }
                    }
                    raw.replaces.push(replaced);
                }
            }
            "algorithm" if !is_null(value) => raw.algorithm = Some(string(value, &place, name)?),
            "burst" => raw.burst = uint32(value, &place, name)?,
            "backend" => return Err(misplaced(&place, name, "at the top level")),
            _ => {}
        }
    }
    Ok(Some(raw))
}

/// rategate's `backend:` map: `kind` (one of [`BACKEND_KINDS`]) and any
/// other fields, each a scalar or a list of scalars, kept as text.
fn backend(node: &YamlNode) -> Result<Option<BackendSpec>, Fail> {
    let entries = match node {
        YamlNode::Scalar(s) if s.kind == Kind::Null => return Ok(None),
        YamlNode::Map(entries) => entries,
        _ => return Err(Fail::new("backend", "backend must be a mapping")),
    };
    let mut kind = None;
    let mut fields = BTreeMap::new();
    for (key, value) in entries {
        let Some(name) = key.as_str_key() else {
            let shown = key.go_string();
            return Err(Fail::new(
                "backend",
                format!("config error, key is not of type string: {shown}"),
            ));
        };
        let here = join("backend", name);
        let text = |node: &YamlNode| match node {
            YamlNode::Scalar(s) if !matches!(s.kind, Kind::Null | Kind::Invalid) => {
                Some(s.text.clone())
            }
            _ => None,
        };
        let value = match value {
            YamlNode::List(items) => items
                .iter()
                .map(text)
                .collect::<Option<Vec<_>>>()
                .map(BackendValue::List),
            scalar => text(scalar).map(BackendValue::Text),
        };
        let Some(value) = value else {
            return Err(Fail::new(
                &here,
                format!("backend field '{name}' must be a scalar or a list of scalars"),
            ));
        };
        if name == "kind" {
            let BackendValue::Text(text) = value else {
                return Err(Fail::new(&here, "backend kind must be a scalar"));
            };
            if !BACKEND_KINDS.contains(&text.as_str()) {
                let expected = BACKEND_KINDS.join(", ");
                return Err(Fail::new(
                    &here,
                    format!("unknown backend kind '{text}' (expected one of {expected})"),
                ));
            }
            kind = Some(text);
        } else {
            fields.insert(name.to_owned(), value);
        }
    }
    let Some(kind) = kind else {
        let expected = BACKEND_KINDS.join(", ");
        return Err(Fail::new(
            "backend",
            format!("backend has no kind (expected one of {expected})"),
        ));
    };
    Ok(Some(BackendSpec { kind, fields }))
}
