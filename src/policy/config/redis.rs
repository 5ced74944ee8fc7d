//! The Redis backends of a policy (features `serde` and `redis`): the
//! existing builders, one limiter per tier, the algorithm chosen by name.

use super::build::{DynResolver, TierLimiters};
use super::{ConfigError, Policy, Store};
use super::{RedisConnection, RedisServer};
use crate::redis::synced::store::TOO_FEW_REPLICAS;
use crate::redis::{
    LeasedLimiter, RedisDecision, RedisError, RedisLimiter, Sentinel, SyncedLimiter, Tls,
};
use crate::{
    AlgorithmKind, CheckError, Decision, FixedWindow, LeakyBucket, Quota, SlidingWindowCounter,
    SlidingWindowLog, TokenBucket,
};

/// A [`RedisLimiter`] of the algorithm a policy names.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyRedisLimiter {
    /// `token_bucket`.
    TokenBucket(RedisLimiter<TokenBucket>),
    /// `leaky_bucket`.
    LeakyBucket(RedisLimiter<LeakyBucket>),
    /// `fixed_window`.
    FixedWindow(RedisLimiter<FixedWindow>),
    /// `sliding_window_log`.
    SlidingWindowLog(RedisLimiter<SlidingWindowLog>),
    /// `sliding_window_counter`.
    SlidingWindowCounter(RedisLimiter<SlidingWindowCounter>),
}

impl AnyRedisLimiter {
    /// As [`RedisLimiter::check_n`].
    ///
    /// # Errors
    ///
    /// As [`RedisLimiter::check_n`].
    pub async fn check_n(&self, key: &str, cost: u32) -> Result<Decision, CheckError> {
        Ok(self.check_n_sourced(key, cost).await?.decision())
    }

    /// As [`check_n`](Self::check_n), with where the decision came from.
    pub(crate) async fn check_n_sourced(
        &self,
        key: &str,
        cost: u32,
    ) -> Result<RedisDecision, CheckError> {
        Ok(match self {
            AnyRedisLimiter::TokenBucket(l) => l.check_n(key, cost).await?,
            AnyRedisLimiter::LeakyBucket(l) => l.check_n(key, cost).await?,
            AnyRedisLimiter::FixedWindow(l) => l.check_n(key, cost).await?,
            AnyRedisLimiter::SlidingWindowLog(l) => l.check_n(key, cost).await?,
            AnyRedisLimiter::SlidingWindowCounter(l) => l.check_n(key, cost).await?,
        })
    }
}

/// A [`SyncedLimiter`] of the algorithm a policy names.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnySyncedLimiter {
    /// `token_bucket`.
    TokenBucket(SyncedLimiter<TokenBucket>),
    /// `fixed_window`.
    FixedWindow(SyncedLimiter<FixedWindow>),
    /// `sliding_window_counter`.
    SlidingWindowCounter(SyncedLimiter<SlidingWindowCounter>),
}

impl AnySyncedLimiter {
    /// As [`SyncedLimiter::check_n`].
    ///
    /// # Errors
    ///
    /// As [`SyncedLimiter::check_n`].
    pub fn check_n(&self, key: &str, cost: u32) -> Result<Decision, CheckError> {
        match self {
            AnySyncedLimiter::TokenBucket(l) => l.check_n(key, cost),
            AnySyncedLimiter::FixedWindow(l) => l.check_n(key, cost),
            AnySyncedLimiter::SlidingWindowCounter(l) => l.check_n(key, cost),
        }
    }

    /// As [`SyncedLimiter::len`].
    pub fn len(&self) -> usize {
        match self {
            AnySyncedLimiter::TokenBucket(l) => l.len(),
            AnySyncedLimiter::FixedWindow(l) => l.len(),
            AnySyncedLimiter::SlidingWindowCounter(l) => l.len(),
        }
    }

    /// As [`SyncedLimiter::is_empty`].
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The field that names `policy`'s Redis, for errors of its connection.
fn server_field(policy: &Policy, error: &RedisError) -> &'static str {
    let connection = match &policy.backend {
        Store::Redis { connection, .. }
        | Store::Synced { connection, .. }
        | Store::Leased { connection, .. } => connection,
        _ => return "backend",
    };
    let text = error.to_string();
    if matches!(error, RedisError::Tls(_))
        || text.contains("certificate")
        || text.contains("private key")
    {
        if connection.tls_client.is_some()
            && (text.contains("private key") || connection.tls_ca.is_none())
        {
            return "backend.tls_cert";
        }
        if connection.tls_ca.is_some() {
            return "backend.tls_ca";
        }
    }
    match &connection.server {
        RedisServer::Url(_) => "backend.url",
        RedisServer::Cluster(_) => "backend.cluster",
        RedisServer::Sentinel { .. } if text.contains("does not know a master named") => {
            "backend.master"
        }
        RedisServer::Sentinel {
            password: Some(_), ..
        } if {
            let lower = text.to_ascii_lowercase();
            lower.contains("wrongpass") || lower.contains("auth")
        } =>
        {
            "backend.master_password"
        }
        RedisServer::Sentinel { .. } => "backend.sentinels",
    }
}

/// Builds one limiter per tier with `make`, naming the tier's field in
/// errors (`backend.url` for a connection that failed).
async fn per_tier<L, F, Fut>(policy: &Policy, mut make: F) -> Result<Vec<(String, L)>, ConfigError>
where
    F: FnMut(Quota) -> Fut,
    Fut: std::future::Future<Output = Result<L, RedisError>>,
{
    let mut tiers = Vec::with_capacity(policy.tiers.len());
    for (name, quota) in &policy.tiers {
        let limiter = make(*quota).await.map_err(|e| match e {
            RedisError::Quota(q) => policy.field_error(name, q.to_string()),
            RedisError::Config(what) if what == TOO_FEW_REPLICAS => {
                ConfigError::field(&policy.name, "backend.wait_for_replicas", what)
            }
            RedisError::Config(what) => ConfigError::field(&policy.name, "backend", what),
            other => ConfigError::field(
                &policy.name,
                server_field(policy, &other),
                other.to_string(),
            ),
        })?;
        tiers.push((name.clone(), limiter));
    }
    Ok(tiers)
}

/// The TLS settings `connection`'s files give, read now (feature
/// `redis-tls`).
fn tls_of(policy: &Policy, connection: &RedisConnection) -> Result<Option<Tls>, ConfigError> {
    if connection.tls_ca.is_none() && connection.tls_client.is_none() {
        return Ok(None);
    }
    let field = if connection.tls_ca.is_some() {
        "backend.tls_ca"
    } else {
        "backend.tls_cert"
    };
    if !cfg!(feature = "redis-tls") {
        return Err(ConfigError::field(
            &policy.name,
            field,
            "TLS files need rategate's feature \"redis-tls\"",
        ));
    }
    let read = |path: &std::path::Path, field: &str| {
        read_pem(path).map_err(|e| {
            ConfigError::field(
                &policy.name,
                field,
                format!("cannot read {}: {e}", path.display()),
            )
        })
    };
    let mut tls = Tls::new();
    if let Some(ca) = &connection.tls_ca {
        tls = tls.root_certificate(read(ca, "backend.tls_ca")?);
    }
    if let Some((cert, key)) = &connection.tls_client {
        tls = tls.client_certificate(
            read(cert, "backend.tls_cert")?,
            read(key, "backend.tls_key")?,
        );
    }
    Ok(Some(tls))
}

/// The most a certificate or key file may hold: a bundle of a few hundred
/// PEM certificates.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// A PEM file's bytes: a regular file of at most [`MAX_PEM_BYTES`] (not a
/// device or a pipe, whose reads would never end).
pub(crate) fn read_pem(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    // The path's kind before opening it: opening a FIFO blocks until a
    // writer comes. (Swapped for one between the two calls, it is caught
    // by the open file's own metadata below.)
    if !std::fs::metadata(path)?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    if meta.len() > MAX_PEM_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("larger than {MAX_PEM_BYTES} bytes"),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// `builder` (any Redis limiter's) pointed at `connection`'s server, with
/// `tls`.
macro_rules! connect {
    ($builder:expr, $connection:expr, $tls:expr) => {{
        let builder = match &$connection.server {
            RedisServer::Url(url) => $builder.url(url),
            RedisServer::Cluster(nodes) => $builder.cluster(nodes),
            RedisServer::Sentinel {
                master,
                sentinels,
                username,
                password,
                db,
            } => {
                let mut sentinel = Sentinel::new(master, sentinels).master_db(*db);
                match (username, password) {
                    (Some(user), Some(password)) => sentinel = sentinel.master_user(user, password),
                    (None, Some(password)) => sentinel = sentinel.master_password(password),
                    _ => {}
                }
                $builder.sentinel(sentinel)
            }
        };
        #[cfg(feature = "redis-tls")]
        let builder = match $tls {
            Some(tls) => builder.tls(tls.clone()),
            None => builder,
        };
        #[cfg(not(feature = "redis-tls"))]
        let _ = $tls;
        builder
    }};
}

macro_rules! redis_limiter {
    ($variant:ident, $alg:ty, $c:expr, $tls:expr, $prefix:expr, $timeout:expr, $down:expr) => {
        |quota| async move {
            let builder = RedisLimiter::<$alg>::builder(quota);
            let builder = connect!(builder, $c, $tls)
                .prefix($prefix)
                .store_down($down);
            let builder = match $timeout {
                Some(t) => builder.timeout(t),
                None => builder,
            };
            builder.build().await.map(AnyRedisLimiter::$variant)
        }
    };
}

macro_rules! synced_limiter {
    ($variant:ident, $alg:ty, $c:expr, $tls:expr, $prefix:expr, $interval:expr, $timeout:expr, $share:expr) => {
        |quota| async move {
            let builder = SyncedLimiter::<$alg>::builder(quota);
            let mut builder = connect!(builder, $c, $tls).prefix($prefix);
            if let Some(i) = $interval {
                builder = builder.interval(i);
            }
            if let Some(t) = $timeout {
                builder = builder.timeout(t);
            }
            if let Some(s) = $share {
                builder = builder.local_share(s);
            }
            builder.build().await.map(AnySyncedLimiter::$variant)
        }
    };
}

/// The Redis, synced or leased limiters of `policy`.
pub(super) async fn build(
    policy: &Policy,
    backend: &Store,
    resolver: DynResolver,
) -> Result<TierLimiters, ConfigError> {
    Ok(match backend {
        Store::Memory { .. } => {
            TierLimiters::Memory(policy.memory_tiers(crate::QuantaClock::new(), resolver)?)
        }
        Store::Redis {
            connection,
            prefix,
            timeout,
            store_down,
        } => {
            let down = *store_down;
            let tls = tls_of(policy, connection)?;
            let (u, tls, p, t) = (connection, tls.as_ref(), prefix.as_str(), *timeout);
            let tiers = match policy.algorithm {
                AlgorithmKind::LeakyBucket => {
                    per_tier(
                        policy,
                        redis_limiter!(LeakyBucket, LeakyBucket, u, tls, p, t, down),
                    )
                    .await?
                }
                AlgorithmKind::FixedWindow => {
                    per_tier(
                        policy,
                        redis_limiter!(FixedWindow, FixedWindow, u, tls, p, t, down),
                    )
                    .await?
                }
                AlgorithmKind::SlidingWindowLog => {
                    let make =
                        redis_limiter!(SlidingWindowLog, SlidingWindowLog, u, tls, p, t, down);
                    per_tier(policy, make).await?
                }
                AlgorithmKind::SlidingWindowCounter => {
                    let make = redis_limiter!(
                        SlidingWindowCounter,
                        SlidingWindowCounter,
                        u,
                        tls,
                        p,
                        t,
                        down
                    );
                    per_tier(policy, make).await?
                }
                _ => {
                    per_tier(
                        policy,
                        redis_limiter!(TokenBucket, TokenBucket, u, tls, p, t, down),
                    )
                    .await?
                }
            };
            TierLimiters::Redis(policy.with_overrides(tiers, resolver)?)
        }
        Store::Synced {
            connection,
            prefix,
            interval,
            timeout,
            local_share,
        } => {
            let tls = tls_of(policy, connection)?;
            let tls = tls.as_ref();
            let (u, p, i, t, s) = (
                connection,
                prefix.as_str(),
                *interval,
                *timeout,
                *local_share,
            );
            let tiers = match policy.algorithm {
                AlgorithmKind::FixedWindow => {
                    per_tier(
                        policy,
                        synced_limiter!(FixedWindow, FixedWindow, u, tls, p, i, t, s),
                    )
                    .await?
                }
                AlgorithmKind::SlidingWindowCounter => {
                    let make = synced_limiter!(
                        SlidingWindowCounter,
                        SlidingWindowCounter,
                        u,
                        tls,
                        p,
                        i,
                        t,
                        s
                    );
                    per_tier(policy, make).await?
                }
                AlgorithmKind::TokenBucket => {
                    per_tier(
                        policy,
                        synced_limiter!(TokenBucket, TokenBucket, u, tls, p, i, t, s),
                    )
                    .await?
                }
                other => {
                    return Err(ConfigError::field(
                        &policy.name,
                        "algorithm",
                        format!("{other} cannot be synced"),
                    ));
                }
            };
            TierLimiters::Synced(policy.with_overrides(tiers, resolver)?)
        }
        Store::Leased {
            connection,
            prefix,
            interval,
            timeout,
            wait_for_replicas,
        } => {
            let tls = tls_of(policy, connection)?;
            let tls = tls.as_ref();
            let make = |quota| async move {
                let builder = LeasedLimiter::builder(quota);
                let mut builder = connect!(builder, connection, tls)
                    .prefix(prefix)
                    .wait_for_replicas(*wait_for_replicas);
                if let Some(i) = *interval {
                    builder = builder.interval(i);
                }
                if let Some(t) = *timeout {
                    builder = builder.timeout(t);
                }
                builder.build().await
            };
            let tiers = per_tier(policy, make).await?;
            TierLimiters::Leased(policy.with_overrides(tiers, resolver)?)
        }
    })
}
