//! Reading a policy file: TOML into [`Policy`] values, field by field, so
//! that every error names its policy and field.

use super::{ConfigError, KeyKind, MAX_MAX_KEYS, Policy, RedisConnection, RedisServer, Store};
use crate::policy::StoreDown;
use crate::{AlgorithmKind, Quota};
use std::path::PathBuf;
use std::time::Duration;
use toml::{Table, Value};

/// The policies of a policy file, in name order. See the
/// [module docs](super) for the format.
///
/// # Examples
///
/// ```
/// use rategate::policy::config::PolicyFile;
///
/// let file = PolicyFile::from_toml(r#"
///     [policies.api]
///     quota = "60/h"
///     key = "ip"
///     [policies.api.tiers]
///     signed_in = "5000/h"
/// "#)?;
/// let api = file.policy("api").unwrap();
/// assert_eq!(api.quota().limit(), 60);
/// assert_eq!(api.tiers[1].0, "signed_in");
///
/// let err = PolicyFile::from_toml("[policies.api]\nquota = \"60/fortnight\"").unwrap_err();
/// assert_eq!((err.policy(), err.field_name()), (Some("api"), Some("quota")));
/// # Ok::<(), rategate::policy::config::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyFile {
    policies: Vec<Policy>,
}

impl PolicyFile {
    /// Reads a policy file's text.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the policy and field of the first problem:
    /// TOML syntax, a missing or unknown field, a value of the wrong type,
    /// a quota or algorithm that does not parse or does not fit together,
    /// an override naming no tier.
    pub fn from_toml(text: &str) -> Result<PolicyFile, ConfigError> {
        let root: Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::file(e.to_string()))?;
        for key in root.keys() {
            if key != "policies" {
                return Err(ConfigError::file(format!(
                    "unknown top-level field {key:?} (expected \"policies\")"
                )));
            }
        }
        let Some(policies) = root.get("policies") else {
            return Err(ConfigError::file("no [policies] table"));
        };
        let Value::Table(policies) = policies else {
            return Err(ConfigError::file("\"policies\" must be a table"));
        };
        let policies = policies
            .iter()
            .map(|(name, value)| match value {
                Value::Table(table) => policy(name, table),
                _ => Err(ConfigError::field(name, "", "a policy must be a table")),
            })
            .collect::<Result<_, _>>()?;
        Ok(PolicyFile { policies })
    }

    /// The policies, in name order.
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    /// The policy named `name`.
    pub fn policy(&self, name: &str) -> Option<&Policy> {
        self.policies.iter().find(|p| p.name == name)
    }
}

const POLICY_FIELDS: [&str; 7] = [
    "algorithm",
    "quota",
    "key",
    "tiers",
    "overrides",
    "backend",
    "shadow",
];

/// One policy's fields, read and checked.
fn policy(name: &str, table: &Table) -> Result<Policy, ConfigError> {
    let err = |field: &str, message: String| ConfigError::field(name, field, message);
    if let Some(unknown) = table.keys().find(|k| !POLICY_FIELDS.contains(&k.as_str())) {
        let expected = POLICY_FIELDS.join(", ");
        return Err(err(
            unknown,
            format!("unknown field (expected one of: {expected})"),
        ));
    }
    let algorithm = match str_field(name, table, "algorithm")? {
        None => AlgorithmKind::default(),
        Some(text) => text.parse().map_err(|e| err("algorithm", format!("{e}")))?,
    };
    let Some(quota) = str_field(name, table, "quota")? else {
        return Err(err(
            "quota",
            "missing (a quota such as \"100/m burst=20\")".into(),
        ));
    };
    let mut tiers = vec![(
        "default".to_owned(),
        parse_quota(name, "quota", quota, algorithm)?,
    )];
    if let Some(value) = table.get("tiers") {
        for (tier, quota) in sub_table(name, "tiers", value)? {
            let field = format!("tiers.{tier}");
            let Value::String(quota) = quota else {
                return Err(err(&field, "a tier's value must be a quota string".into()));
            };
            if tier == "default" {
                return Err(err(&field, "\"default\" is the policy's own quota".into()));
            }
            tiers.push((tier.clone(), parse_quota(name, &field, quota, algorithm)?));
        }
    }
    let mut overrides = Vec::new();
    if let Some(value) = table.get("overrides") {
        for (key, tier) in sub_table(name, "overrides", value)? {
            let field = format!("overrides.{key}");
            let index = match tier {
                Value::String(tier) => tiers.iter().position(|(n, _)| n == tier),
                _ => None,
            };
            let Some(index) = index else {
                let names: Vec<_> = tiers.iter().map(|(n, _)| n.as_str()).collect();
                let names = names.join(", ");
                return Err(err(&field, format!("must name a tier (one of: {names})")));
            };
            overrides.push((key.clone(), index));
        }
    }
    let key = match str_field(name, table, "key")? {
        None => KeyKind::Global,
        Some(text) => KeyKind::parse(text).map_err(|e| err("key", e.into()))?,
    };
    let shadow = match table.get("shadow") {
        None => false,
        Some(Value::Boolean(b)) => *b,
        Some(_) => return Err(err("shadow", "must be true or false".into())),
    };
    let backend = backend(name, table.get("backend"), algorithm)?;
    Ok(Policy {
        name: name.to_owned(),
        algorithm,
        key,
        tiers,
        overrides,
        backend,
        shadow,
    })
}

fn parse_quota(
    policy: &str,
    field: &str,
    text: &str,
    algorithm: AlgorithmKind,
) -> Result<Quota, ConfigError> {
    let quota: Quota = text
        .parse()
        .map_err(|e| ConfigError::field(policy, field, format!("{e}")))?;
    // The algorithm must accept it, or building would fail later.
    crate::AnyAlgorithm::new(algorithm, &quota)
        .map_err(|e| ConfigError::field(policy, field, format!("{algorithm}: {e}")))?;
    Ok(quota)
}

fn str_field<'a>(
    policy: &str,
    table: &'a Table,
    field: &str,
) -> Result<Option<&'a str>, ConfigError> {
    match table.get(field) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ConfigError::field(policy, field, "must be a string")),
    }
}

fn sub_table<'a>(policy: &str, field: &str, value: &'a Value) -> Result<&'a Table, ConfigError> {
    match value {
        Value::Table(t) => Ok(t),
        _ => Err(ConfigError::field(policy, field, "must be a table")),
    }
}

/// A backend table (`kind` and its fields) read as a policy file's
/// `backend` is, for a limiter named `name` of `algorithm`: errors name
/// `name` and the field (`backend.url`).
#[cfg(feature = "rls")]
pub(crate) fn store_of(
    name: &str,
    table: &Table,
    algorithm: AlgorithmKind,
) -> Result<Store, ConfigError> {
    backend(name, Some(&Value::Table(table.clone())), algorithm)
}

/// The `backend` field: a kind's name or a table with `kind`.
fn backend(
    policy: &str,
    value: Option<&Value>,
    algorithm: AlgorithmKind,
) -> Result<Store, ConfigError> {
    let empty = Table::new();
    let (kind, table) = match value {
        None => ("memory", &empty),
        Some(Value::String(kind)) => (kind.as_str(), &empty),
        Some(Value::Table(table)) => match table.get("kind") {
            Some(Value::String(kind)) => (kind.as_str(), table),
            _ => {
                return Err(ConfigError::field(
                    policy,
                    "backend.kind",
                    "missing or not a string (memory, redis, synced or leased)",
                ));
            }
        },
        Some(_) => {
            return Err(ConfigError::field(
                policy,
                "backend",
                "must be a string or a table",
            ));
        }
    };
    let fields = Fields { policy, table };
    let allowed: &[&str] = match kind {
        "memory" => &["kind", "max_keys", "sweep_interval_ms"],
        "redis" => &["kind", "prefix", "timeout_ms", "store_down", "share"],
        "synced" => &["kind", "prefix", "interval_ms", "timeout_ms", "share"],
        "leased" => &[
            "kind",
            "prefix",
            "interval_ms",
            "timeout_ms",
            "wait_for_replicas",
        ],
        _ => {
            let field = if value.is_some_and(Value::is_table) {
                "backend.kind"
            } else {
                "backend"
            };
            return Err(ConfigError::field(
                policy,
                field,
                format!("unknown backend {kind:?} (expected memory, redis, synced or leased)"),
            ));
        }
    };
    let connection_fields: &[&str] = if kind == "memory" {
        &[]
    } else {
        CONNECTION_FIELDS
    };
    if let Some(unknown) = table
        .keys()
        .find(|k| !allowed.contains(&k.as_str()) && !connection_fields.contains(&k.as_str()))
    {
        let expected = [allowed, connection_fields].concat().join(", ");
        return Err(fields.error(
            unknown,
            format!("not a field of a {kind} backend ({expected})"),
        ));
    }
    let prefix = || -> Result<String, ConfigError> {
        Ok(fields
            .string("prefix")?
            .unwrap_or_else(|| policy.to_owned()))
    };
    let url = || fields.connection();
    Ok(match kind {
        "memory" => Store::Memory {
            max_keys: fields.max_keys()?,
            sweep_interval: fields.millis("sweep_interval_ms")?,
        },
        "redis" => {
            let share = fields.share()?;
            let store_down = match (fields.string("store_down")?.as_deref(), share) {
                (None | Some("open"), None) => StoreDown::FailOpen,
                (Some("closed"), None) => StoreDown::FailClosed,
                (Some("local_share"), Some(share)) => StoreDown::LocalShare(share),
                (Some("local_share"), None) => {
                    return Err(
                        fields.error("share", "local_share needs a share (0 < share <= 1)".into())
                    );
                }
                (None | Some("open" | "closed"), Some(_)) => {
                    return Err(fields.error(
                        "share",
                        "only store_down = \"local_share\" takes a share".into(),
                    ));
                }
                (Some(other), _) => {
                    return Err(fields.error(
                        "store_down",
                        format!("unknown policy {other:?} (expected open, closed or local_share)"),
                    ));
                }
            };
            Store::Redis {
                connection: url()?,
                prefix: prefix()?,
                timeout: fields.millis("timeout_ms")?,
                store_down,
            }
        }
        "synced" => {
            if !matches!(
                algorithm,
                AlgorithmKind::TokenBucket
                    | AlgorithmKind::FixedWindow
                    | AlgorithmKind::SlidingWindowCounter
            ) {
                return Err(ConfigError::field(
                    policy,
                    "algorithm",
                    format!(
                        "{algorithm} cannot be synced (token_bucket, fixed_window or sliding_window_counter)"
                    ),
                ));
            }
            Store::Synced {
                connection: url()?,
                prefix: prefix()?,
                interval: fields.millis("interval_ms")?,
                timeout: fields.millis("timeout_ms")?,
                local_share: fields.share()?,
            }
        }
        _ => Store::Leased {
            connection: url()?,
            prefix: prefix()?,
            interval: fields.millis("interval_ms")?,
            timeout: fields.millis("timeout_ms")?,
            wait_for_replicas: fields.replicas()?,
        },
    })
}

/// The fields that say how a Redis backend reaches Redis.
const CONNECTION_FIELDS: &[&str] = &[
    "url",
    "cluster",
    "sentinels",
    "master",
    "master_username",
    "master_password",
    "master_db",
    "tls_ca",
    "tls_cert",
    "tls_key",
];

/// A backend table's fields, read with errors named `backend.FIELD`.
struct Fields<'a> {
    policy: &'a str,
    table: &'a Table,
}

impl Fields<'_> {
    fn error(&self, field: &str, message: String) -> ConfigError {
        ConfigError::field(self.policy, &format!("backend.{field}"), message)
    }

    fn string(&self, field: &str) -> Result<Option<String>, ConfigError> {
        match self.table.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.error(field, "must be a string".into())),
        }
    }

    fn integer(&self, field: &str) -> Result<Option<u64>, ConfigError> {
        match self.table.get(field) {
            None => Ok(None),
            Some(Value::Integer(n)) if *n >= 0 => Ok(Some(*n as u64)),
            Some(_) => Err(self.error(field, "must be a whole number, at least 0".into())),
        }
    }

    /// A duration in milliseconds: at least 1 ms, at most a day (every
    /// timeout and interval; above a day is a mistake, not a setting).
    fn millis(&self, field: &str) -> Result<Option<Duration>, ConfigError> {
        match self.integer(field)? {
            Some(0) => Err(self.error(field, "must be at least 1 ms".into())),
            Some(ms) if ms > 86_400_000 => {
                Err(self.error(field, "must be at most 86400000 (a day)".into()))
            }
            ms => Ok(ms.map(Duration::from_millis)),
        }
    }

    /// `max_keys`: at least 1 (0 would put every client in the one
    /// overflow state) and at most [`MAX_MAX_KEYS`].
    fn max_keys(&self) -> Result<Option<usize>, ConfigError> {
        let Some(n) = self.integer("max_keys")? else {
            return Ok(None);
        };
        match n {
            0 => Err(self.error("max_keys", super::ZERO_MAX_KEYS.into())),
            // At most u32::MAX: a usize on every target Rust supports.
            1..=MAX_MAX_KEYS => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            _ => Err(self.error(
                "max_keys",
                format!(
                    "must be at most {MAX_MAX_KEYS} (the default is {})",
                    super::DEFAULT_MAX_KEYS
                ),
            )),
        }
    }

    fn strings(&self, field: &str) -> Result<Option<Vec<String>>, ConfigError> {
        let Some(value) = self.table.get(field) else {
            return Ok(None);
        };
        let list = match value {
            Value::Array(items) if !items.is_empty() => items
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>(),
            _ => None,
        };
        list.map(Some)
            .ok_or_else(|| self.error(field, "must be a list of strings, not empty".into()))
    }

    /// `url`, `cluster` or `sentinels` (exactly one), the Sentinel master's
    /// fields, and the TLS files.
    fn connection(&self) -> Result<RedisConnection, ConfigError> {
        let url = self.string("url")?;
        let cluster = self.strings("cluster")?;
        let sentinels = self.strings("sentinels")?;
        let master_fields = ["master", "master_username", "master_password", "master_db"];
        if sentinels.is_none()
            && let Some(field) = master_fields.iter().find(|f| self.table.contains_key(**f))
        {
            return Err(self.error(field, "only a Sentinel backend (sentinels) takes it".into()));
        }
        let empty = |field: &str, value: &Option<String>| match value {
            Some(v) if v.is_empty() => Err(self.error(field, "must not be empty".into())),
            _ => Ok(()),
        };
        empty("url", &url)?;
        for (field, list) in [("cluster", &cluster), ("sentinels", &sentinels)] {
            if list
                .as_ref()
                .is_some_and(|l| l.iter().any(String::is_empty))
            {
                return Err(self.error(field, "holds an empty URL".into()));
            }
        }
        let server = match (url, cluster, sentinels) {
            (Some(url), None, None) => RedisServer::Url(url),
            (None, Some(nodes), None) => RedisServer::Cluster(nodes),
            (None, None, Some(sentinels)) => RedisServer::Sentinel {
                master: self
                    .string("master")?
                    .filter(|m| !m.is_empty())
                    .ok_or_else(|| {
                        self.error(
                            "master",
                            "missing: the master's name as the sentinels know it".into(),
                        )
                    })?,
                sentinels,
                username: self.string("master_username")?,
                password: match self.string("master_password")? {
                    Some(p) if p.is_empty() => {
                        return Err(self.error("master_password", "must not be empty".into()));
                    }
                    password => {
                        if password.is_none() && self.table.contains_key("master_username") {
                            return Err(self.error(
                                "master_password",
                                "missing: master_username needs its password".into(),
                            ));
                        }
                        password
                    }
                },
                db: match self.integer("master_db")? {
                    None => 0,
                    Some(db) => i64::try_from(db)
                        .map_err(|_| self.error("master_db", "too large".into()))?,
                },
            },
            (None, None, None) => {
                return Err(self.error("url", "missing: give url, cluster or sentinels".into()));
            }
            _ => {
                return Err(self.error(
                    "url",
                    "give one of url, cluster and sentinels, not several".into(),
                ));
            }
        };
        let path = |field: &str| match self.string(field)? {
            Some(p) if p.is_empty() => Err(self.error(field, "must not be empty".into())),
            p => Ok(p.map(PathBuf::from)),
        };
        let tls_client = match (path("tls_cert")?, path("tls_key")?) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(self.error("tls_key", "missing: tls_cert needs its key".into()));
            }
            (None, Some(_)) => {
                return Err(self.error("tls_cert", "missing: tls_key needs its certificate".into()));
            }
        };
        Ok(RedisConnection {
            server,
            tls_ca: path("tls_ca")?,
            tls_client,
        })
    }

    /// `wait_for_replicas`: 0 (the default) to the number of replicas.
    fn replicas(&self) -> Result<u32, ConfigError> {
        match self.integer("wait_for_replicas")? {
            None => Ok(0),
            Some(n) => u32::try_from(n).map_err(|_| {
                self.error("wait_for_replicas", format!("{n} is not a replica count"))
            }),
        }
    }

    fn share(&self) -> Result<Option<f64>, ConfigError> {
        match self.table.get("share") {
            None => Ok(None),
            Some(Value::Float(f)) if *f > 0.0 && *f <= 1.0 => Ok(Some(*f)),
            Some(Value::Integer(1)) => Ok(Some(1.0)),
            Some(_) => Err(self.error("share", "must be a number, 0 < share <= 1".into())),
        }
    }
}
