//! The connection every Redis-backed limiter uses: a single server through
//! a reconnecting `ConnectionManager`, or a Redis Cluster through the async
//! cluster client; and the local limiter that stands in for Redis while it
//! is unreachable.

use super::RedisError;
use crate::algorithm::Algorithm;
use crate::{Clock, KeyedRateLimiter, Quota};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use std::time::Duration;

/// Where a limiter connects.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// One server, `redis://host:port/db`.
    Url(String),
    /// Some nodes of a Redis Cluster.
    Cluster(Vec<String>),
}

/// A live connection; cheap to clone (both kinds multiplex one socket per
/// node).
#[derive(Clone)]
pub(crate) enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// Connects to `target` with `timeout` on every call and reconnection, and
/// on a single server loads `scripts` (calls go by SHA and reload after
/// `NOSCRIPT`). The whole connect is bounded by `timeout`, at least 5 s.
pub(crate) async fn connect(
    target: Option<Target>,
    timeout: Duration,
    scripts: &[&redis::Script],
) -> Result<Connection, RedisError> {
    let connect = async {
        match target {
            None => Err(RedisError::Config(
                "no Redis server: call url() or cluster()",
            )),
            Some(Target::Url(url)) => {
                let client = redis::Client::open(url)?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_secs(1));
                let mut manager = client.get_connection_manager_with_config(config).await?;
                for script in scripts {
                    script.prepare_invoke().load_async(&mut manager).await?;
                }
                Ok(Connection::Single(manager))
            }
            Some(Target::Cluster(nodes)) => {
                let client = redis::cluster::ClusterClient::builder(nodes)
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .build()?;
                Ok(Connection::Cluster(client.get_async_connection().await?))
            }
        }
    };
    tokio::time::timeout(timeout.max(Duration::from_secs(5)), connect)
        .await
        .map_err(|_| RedisError::Timeout)?
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
