//! [`SyncedLimiterBuilder`]: the settings of a [`SyncedLimiter`], and
//! the limiter it builds (its store, its keys, its background task).

use super::*;

/// Builds a [`SyncedLimiter`]; from [`SyncedLimiter::builder`].
#[must_use]
pub struct SyncedLimiterBuilder<A, C> {
    quota: Quota,
    target: Option<Target>,
    tls: super::super::Tls,
    prefix: String,
    clock: C,
    interval: Duration,
    timeout: Duration,
    local_share: f64,
    background: bool,
    marker: PhantomData<fn() -> A>,
}

impl<A, C> fmt::Debug for SyncedLimiterBuilder<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncedLimiterBuilder")
            .field("quota", &self.quota)
            .field("target", &self.target)
            .field("prefix", &self.prefix)
            .field("interval", &self.interval)
            .field("timeout", &self.timeout)
            .field("local_share", &self.local_share)
            .field("background", &self.background)
            .finish_non_exhaustive()
    }
}

impl<A: SyncAlgorithm> SyncedLimiter<A, UnixClock> {
    /// A builder for `quota` per key. Name the server with
    /// [`url`](SyncedLimiterBuilder::url) or [`cluster`](SyncedLimiterBuilder::cluster).
    pub fn builder(quota: Quota) -> SyncedLimiterBuilder<A, UnixClock> {
        SyncedLimiterBuilder {
            quota,
            target: None,
            tls: super::super::Tls::default(),
            prefix: "rategate".to_owned(),
            clock: UnixClock::new(),
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            local_share: 1.0,
            background: true,
            marker: PhantomData,
        }
    }
}

impl<A: SyncAlgorithm, C: Clock> SyncedLimiterBuilder<A, C> {
    /// A single Redis server, as `redis://host:port/db`.
    pub fn url(mut self, url: &str) -> Self {
        self.target = Some(Target::Url(url.to_owned()));
        self
    }

    /// TLS settings for a `rediss://` server: a private CA, a client
    /// certificate (feature `redis-tls`). Without them a `rediss://` URL
    /// trusts the system's certificates.
    #[cfg(feature = "redis-tls")]
    pub fn tls(mut self, tls: super::super::Tls) -> Self {
        self.tls = tls;
        self
    }

    /// A Redis Cluster, given some of its nodes' URLs.
    pub fn cluster<S: AsRef<str>>(mut self, nodes: &[S]) -> Self {
        let nodes = nodes.iter().map(|s| s.as_ref().to_owned()).collect();
        self.target = Some(Target::Cluster(nodes));
        self
    }

    /// The master that Redis Sentinel names, followed across failovers.
    pub fn sentinel(mut self, sentinel: crate::redis::Sentinel) -> Self {
        self.target = Some(Target::Sentinel(sentinel));
        self
    }

    /// The namespace of the Redis keys (default `rategate`); it may not
    /// contain `{` or `}`. Nodes share a limit when prefix, algorithm and
    /// quota are equal; the algorithm and quota are part of every key, so
    /// limiters of different policies never share counts.
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_owned();
        self
    }

    /// Reads time from `clock` (default [`UnixClock`]). Every node must use
    /// clocks with the same origin.
    pub fn clock<C2: Clock>(self, clock: C2) -> SyncedLimiterBuilder<A, C2> {
        SyncedLimiterBuilder {
            quota: self.quota,
            target: self.target,
            tls: self.tls,
            prefix: self.prefix,
            clock,
            interval: self.interval,
            timeout: self.timeout,
            local_share: self.local_share,
            background: self.background,
            marker: PhantomData,
        }
    }

    /// Time between syncs (default 1 s). The overshoot bound grows with it,
    /// and says nothing once a node can admit a whole period's limit before
    /// it hears from the others: the background task refuses an interval
    /// above half the quota's period ([`RedisError::Config`] from
    /// [`build`](SyncedLimiterBuilder::build) or [`start`](SyncedLimiter::start)).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// The longest one round trip to Redis may take (default 500 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The share (0 < share <= 1) of the quota each key gets locally, on
    /// top of the synced state, while this node has not heard the key's
    /// global usage: before the key's first sync on this node, and while
    /// its Redis node is unreachable (default 1: the synced state alone).
    /// With `N` nodes, `1 / N` keeps the global rate near the limit then:
    /// without it, every node starts a new key with the whole quota (a full
    /// bucket, an empty window), which is where most of the short-window
    /// excess comes from.
    pub fn local_share(mut self, share: f64) -> Self {
        self.local_share = share;
        self
    }

    /// Whether [`build`](SyncedLimiterBuilder::build) starts the background sync
    /// task (default true). Without it, sync with
    /// [`sync_now`](SyncedLimiter::sync_now) or start the task later with
    /// [`start`](SyncedLimiter::start).
    pub fn background(mut self, on: bool) -> Self {
        self.background = on;
        self
    }

    /// Connects, loads the sync script and, unless turned off, starts the
    /// background task on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`RedisError::Config`] without a server, with an interval or
    /// timeout of zero or above a day, or a local share outside (0, 1]; [`RedisError::Quota`]
    /// when the algorithm cannot represent the quota; [`RedisError::Redis`]
    /// or [`RedisError::Timeout`] when the first connection fails.
    pub async fn build(self) -> Result<SyncedLimiter<A, C>, RedisError> {
        let algorithm = A::from_quota(&self.quota)?;
        crate::redis::connection::check_wait(
            self.interval,
            "the sync interval must be above zero and at most a day",
        )?;
        let local = if self.local_share == 1.0 {
            None
        } else {
            Some(share_limiter::<A, C>(
                &self.quota,
                self.local_share,
                self.clock.clone(),
                "the local share must be in (0, 1]",
            )?)
        };
        // The algorithm and quota are part of every key, so that limiters
        // of different policies never share counts by accident.
        let name = match algorithm.shape() {
            Shape::Fixed(_) => "fw",
            Shape::Sliding(_) => "swc",
            Shape::Bucket(_) => "tb",
        };
        let policy = format!("{name}:{}", quota_segment(&self.quota));
        let keys = KeySpace::new(&self.prefix, &policy)?;
        let lua = Lua::new(if algorithm.shape().windowed() {
            include_str!("../scripts/sync_window.lua")
        } else {
            include_str!("../scripts/sync_token_bucket.lua")
        });
        let store = Store::connect(self.target, &self.tls, self.timeout, &[&lua]).await?;
        let inner = Arc::new(Inner {
            limit: u64::from(self.quota.limit()),
            period: self.quota.period_nanos(),
            emission: self.quota.emission_interval_nanos(),
            algorithm,
            quota: self.quota,
            clock: self.clock,
            map: DashMap::new(),
            store,
            lua,
            prefix: self.prefix,
            keys,
            interval: self.interval,
            local,
            degraded: DegradedSlots::default(),
            counters: Counters::default(),
            sync_lock: tokio::sync::Mutex::new(()),
        });
        let limiter = SyncedLimiter {
            handle: Arc::new(Handle {
                inner,
                task: TaskSlot::default(),
            }),
        };
        if self.background {
            limiter.start()?;
        }
        Ok(limiter)
    }
}
