//! The connection every Redis-backed limiter uses: a single server through
//! a reconnecting `ConnectionManager`, or a Redis Cluster through the async
//! cluster client; and the local limiter that stands in for Redis while it
//! is unreachable.

use super::RedisError;
use super::sentinel::Sentinel;
use super::single::Single;
use crate::algorithm::Algorithm;
use crate::{Clock, KeyedRateLimiter, Quota};
use redis::aio::ConnectionManagerConfig;
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionInfo, IntoConnectionInfo};
use std::time::Duration;

/// Where a limiter connects.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// One server, `redis://host:port/db`.
    Url(String),
    /// Some nodes of a Redis Cluster.
    Cluster(Vec<String>),
    /// The master that Sentinel names.
    Sentinel(Sentinel),
}

/// TLS settings beyond what a `rediss://` URL says: by default the
/// system's trusted certificates and no client certificate. Given to a
/// Redis limiter's builder with `tls`.
///
/// # Examples
///
/// ```no_run
/// # #[cfg(feature = "redis-tls")]
/// # async fn run() -> Result<(), rategate::redis::RedisError> {
/// use rategate::redis::{RedisLimiter, Tls};
/// use rategate::{Quota, TokenBucket};
///
/// let ca = std::fs::read("ca.pem").map_err(|e| rategate::redis::RedisError::Tls(e.to_string()))?;
/// let limiter = RedisLimiter::<TokenBucket>::builder(Quota::per_second(100)?)
///     .url("rediss://redis.internal:6380")
///     .tls(Tls::new().root_certificate(ca))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct Tls {
    /// Trust these CA certificates (PEM) instead of the system's.
    pub(crate) root_cert: Option<Vec<u8>>,
    /// Present this certificate chain and key (PEM) to the server.
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

/// Says which parts are set; never prints a certificate or the key.
impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("root_certificate", &self.root_cert.is_some())
            .field("client_certificate", &self.client.is_some())
            .finish()
    }
}

impl Tls {
    /// The system's trusted certificates, no client certificate.
    pub fn new() -> Tls {
        Tls::default()
    }

    /// Trusts the CA certificates in `pem` (one or more) instead of the
    /// system's: a server with a private CA.
    pub fn root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Tls {
        self.root_cert = Some(pem.into());
        self
    }

    /// Presents `certificate` (a PEM chain) and its private `key` (PEM) to
    /// the server: `tls-auth-clients yes`.
    pub fn client_certificate(
        mut self,
        certificate: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Tls {
        self.client = Some((certificate.into(), key.into()));
        self
    }
}

/// `url`'s address and settings; a `rediss://` URL without the
/// `redis-tls` feature is a [`RedisError::Tls`] that says so.
/// The longest timeout or interval a builder takes: a day. Deadlines are
/// instants plus these, and an instant plus `Duration::MAX` overflows.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// `duration` if it is above zero and at most [`MAX_WAIT`]; else a
/// [`RedisError::Config`] saying `what` must be.
pub(crate) fn check_wait(duration: Duration, what: &'static str) -> Result<(), RedisError> {
    if duration.is_zero() || duration > MAX_WAIT {
        return Err(RedisError::Config(what));
    }
    Ok(())
}

pub(crate) fn parse_url(url: &str) -> Result<ConnectionInfo, RedisError> {
    url.into_connection_info().map_err(|e| {
        if url.starts_with("rediss://") && !cfg!(feature = "redis-tls") {
            RedisError::Tls("a rediss:// URL needs the crate's `redis-tls` feature".into())
        } else {
            RedisError::Redis(e)
        }
    })
}

/// A redis-rs client for `info`, with `tls`'s certificates when set.
pub(crate) fn client(info: ConnectionInfo, tls: &Tls) -> Result<redis::Client, RedisError> {
    #[cfg(feature = "redis-tls")]
    if tls.root_cert.is_some() || tls.client.is_some() {
        return Ok(redis::Client::build_with_tls(info, certificates(tls))?);
    }
    let _ = tls;
    Ok(redis::Client::open(info)?)
}

/// How every single-server connection reconnects: `timeout` on each call
/// and connection, two retries, at most a second between them.
pub(crate) fn manager_config(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_secs(1))
}

#[cfg(feature = "redis-tls")]
fn certificates(tls: &Tls) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls
            .client
            .clone()
            .map(|(client_cert, client_key)| redis::ClientTlsConfig {
                client_cert,
                client_key,
            }),
        root_cert: tls.root_cert.clone(),
    }
}

/// A live connection; cheap to clone (both kinds multiplex one socket per
/// node).
#[derive(Clone)]
pub(crate) enum Connection {
    /// One server: a fixed address or the master Sentinel names.
    Single(Single),
    Cluster(ClusterConnection),
}

/// Connects to `target` with `timeout` on every call and reconnection, and
/// on a single server loads `scripts` (calls go by SHA and reload after
/// `NOSCRIPT`). The whole connect is bounded by `timeout`, at least 5 s.
pub(crate) async fn connect(
    target: Option<Target>,
    tls: &Tls,
    timeout: Duration,
    scripts: &[&redis::Script],
) -> Result<Connection, RedisError> {
    let connect = async {
        match target {
            None => Err(RedisError::Config(
                "no Redis server: call url(), cluster() or sentinel()",
            )),
            Some(Target::Url(url)) => Ok(Connection::Single(
                loaded(Single::fixed(&url, tls, timeout).await?, scripts).await?,
            )),
            Some(Target::Sentinel(sentinel)) => Ok(Connection::Single(
                loaded(Single::sentinel(sentinel, tls, timeout).await?, scripts).await?,
            )),
            Some(Target::Cluster(nodes)) => {
                let builder = redis::cluster::ClusterClient::builder(nodes)
                    .connection_timeout(timeout)
                    .response_timeout(timeout);
                #[cfg(feature = "redis-tls")]
                let builder = if tls.root_cert.is_some() || tls.client.is_some() {
                    builder.certs(certificates(tls))
                } else {
                    builder
                };
                let client = builder.build()?;
                Ok(Connection::Cluster(client.get_async_connection().await?))
            }
        }
    };
    tokio::time::timeout(timeout.max(Duration::from_secs(5)), connect)
        .await
        .map_err(|_| RedisError::Timeout)?
}

/// `single` once `scripts` are loaded on it.
async fn loaded(mut single: Single, scripts: &[&redis::Script]) -> Result<Single, RedisError> {
    for script in scripts {
        script.prepare_invoke().load_async(&mut single).await?;
    }
    Ok(single)
}

/// A local keyed limiter for `share` (0 < share <= 1) of `quota`: limit and
/// burst scaled down, at least 1 each. It decides while Redis is
/// unreachable; `what` names the setting in the error for a bad share.
pub(crate) fn share_limiter<A: Algorithm, C: Clock>(
    quota: &Quota,
    share: f64,
    clock: C,
    what: &'static str,
) -> Result<KeyedRateLimiter<String, A, C>, RedisError> {
    if !(share > 0.0 && share <= 1.0) {
        return Err(RedisError::Config(what));
    }
    // Truncation after floor: the product is at most the u32 it scales.
    let scale = |n: u32| ((f64::from(n) * share).floor() as u32).max(1);
    let mut local =
        Quota::with_period(scale(quota.limit()), quota.period())?.delay(quota.delay_mode());
    if let Some(burst) = quota.explicit_burst() {
        local = local.burst(scale(burst))?;
    }
    Ok(KeyedRateLimiter::<String, A>::builder(local)
        .clock(clock)
        .max_keys(100_000)
        .auto_sweep(Duration::from_secs(10))
        .build()?)
}
