//! [`LeasedLimiterBuilder`]: the settings of a [`LeasedLimiter`], and the
//! limiter it builds.

use super::*;

/// Builds a [`LeasedLimiter`]; from [`LeasedLimiter::builder`].
#[must_use]
pub struct LeasedLimiterBuilder<C> {
    quota: Quota,
    target: Option<Target>,
    tls: super::super::Tls,
    prefix: String,
    clock: C,
    interval: Duration,
    timeout: Duration,
    min_slice: Option<u32>,
    max_slice: Option<u32>,
    background: bool,
    wait_replicas: u32,
}

impl<C> fmt::Debug for LeasedLimiterBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeasedLimiterBuilder")
            .field("quota", &self.quota)
            .field("target", &self.target)
            .field("prefix", &self.prefix)
            .field("interval", &self.interval)
            .field("timeout", &self.timeout)
            .field("min_slice", &self.min_slice)
            .field("max_slice", &self.max_slice)
            .field("background", &self.background)
            .finish_non_exhaustive()
    }
}

impl LeasedLimiter<UnixClock> {
    /// A builder for `quota` per key: `limit` units per fixed window of the
    /// quota's period (its burst is not used). Name the server with
    /// [`url`](LeasedLimiterBuilder::url) or [`cluster`](LeasedLimiterBuilder::cluster).
    pub fn builder(quota: Quota) -> LeasedLimiterBuilder<UnixClock> {
        LeasedLimiterBuilder {
            quota,
            target: None,
            tls: super::super::Tls::default(),
            prefix: "rategate".to_owned(),
            clock: UnixClock::new(),
            interval: Duration::from_millis(100),
            timeout: Duration::from_millis(500),
            min_slice: None,
            max_slice: None,
            background: true,
            wait_replicas: 0,
        }
    }
}

impl<C: Clock> LeasedLimiterBuilder<C> {
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
    /// contain `{` or `}`. Nodes share a key's budget when prefix, limit and
    /// period are equal; the limit and period are part of every key.
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_owned();
        self
    }

    /// Reads time from `clock` (default [`UnixClock`]). Every node must use
    /// clocks with the same origin.
    pub fn clock<C2: Clock>(self, clock: C2) -> LeasedLimiterBuilder<C2> {
        LeasedLimiterBuilder {
            quota: self.quota,
            target: self.target,
            tls: self.tls,
            prefix: self.prefix,
            clock,
            interval: self.interval,
            timeout: self.timeout,
            min_slice: self.min_slice,
            max_slice: self.max_slice,
            background: self.background,
            wait_replicas: self.wait_replicas,
        }
    }

    /// Time between regular renewal rounds (default 100 ms): slices are
    /// sized to about two ticks of demand, and a key idle for a whole tick
    /// gives its slices back.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// The longest one round trip to Redis may take (default 500 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The smallest slice asked for (default 1% of the limit, at least 1).
    pub fn min_slice(mut self, units: u32) -> Self {
        self.min_slice = Some(units);
        self
    }

    /// The largest slice asked for (default a quarter of the limit, at
    /// least the smallest). Smaller slices share a contended budget more
    /// evenly between nodes and strand less of it at a window's end; larger
    /// ones mean fewer renewals.
    pub fn max_slice(mut self, units: u32) -> Self {
        self.max_slice = Some(units);
        self
    }

    /// Whether [`build`](LeasedLimiterBuilder::build) starts the background task
    /// (default true). Without it, checks that need a renewal only mark it,
    /// and [`sync_now`](LeasedLimiter::sync_now) or
    /// [`acquire_n`](LeasedLimiter::acquire_n) make it.
    pub fn background(mut self, on: bool) -> Self {
        self.background = on;
        self
    }

    /// Uses a grant only once `replicas` replicas of its Redis node hold it
    /// (`WAIT`, bounded by half the timeout; default 0: as soon as the
    /// master answers). Replication is asynchronous: a master that fails
    /// over loses the grants it made since its replicas last caught up,
    /// the new master grants those units again, and the global bound is
    /// exceeded by them. With `replicas` equal to the number of replicas
    /// a master has, any replica that is promoted holds every grant in
    /// use, and the bound holds across the failover, a split brain
    /// included: a master that hangs and comes back after a replica was
    /// promoted has lost that replica, so nothing it grants then is
    /// acknowledged. A smaller `replicas` keeps the bound when the master
    /// is gone for good (Sentinel and Cluster promote the replica with the
    /// most data), but not across a split brain: a replica can acknowledge
    /// the old master's grants and then follow the new one, dropping them.
    /// A grant that too few replicas
    /// acknowledged in time is not used (under-admission, never over); the
    /// round fails with [`RedisError::NotReplicated`], counted in
    /// [`stats`](LeasedLimiter::stats)' errors. `build` refuses a number
    /// above the replicas a master has connected then
    /// ([`RedisError::Config`]); one that falls below it later (a replica
    /// down, a failover that left a master without one) grants nothing
    /// until enough are back.
    pub fn wait_for_replicas(mut self, replicas: u32) -> Self {
        self.wait_replicas = replicas;
        self
    }

    /// Connects, loads the lease script and, unless turned off, starts the
    /// background task on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`RedisError::Config`] without a server, with an interval or
    /// timeout of zero or above a day, or a smallest slice of 0; [`RedisError::Redis`] or
    /// [`RedisError::Timeout`] when the first connection fails.
    pub async fn build(self) -> Result<LeasedLimiter<C>, RedisError> {
        crate::redis::connection::check_wait(
            self.interval,
            "the lease interval must be above zero and at most a day",
        )?;
        let limit = self.quota.limit();
        let min_slice = self.min_slice.unwrap_or((limit / 100).max(1));
        if min_slice == 0 {
            return Err(RedisError::Config("the smallest slice must be at least 1"));
        }
        let max_slice = self.max_slice.unwrap_or(limit / 4).max(min_slice);
        // The budget (limit and period: the burst is not used) is part of
        // every key, so that leases of different quotas never share one.
        let budget = Quota::with_period(limit, self.quota.period())?;
        let keys = KeySpace::new(&self.prefix, &quota_segment(&budget))?;
        let lua = Lua::new(include_str!("../scripts/lease.lua"));
        let mut store = Store::connect(self.target, &self.tls, self.timeout, &[&lua]).await?;
        store.check_replicas(self.wait_replicas).await?;
        store.wait_for_replicas(self.wait_replicas);
        let limiter = LeasedLimiter {
            handle: Arc::new(Handle {
                inner: Arc::new(Inner {
                    limit: u64::from(limit),
                    period: self.quota.period_nanos(),
                    quota: self.quota,
                    clock: self.clock,
                    map: DashMap::new(),
                    store,
                    lua,
                    prefix: self.prefix,
                    keys,
                    interval: self.interval,
                    min_slice: u64::from(min_slice),
                    max_slice: u64::from(max_slice),
                    counters: Counters::default(),
                    control: Arc::new(Control::default()),
                    round_lock: tokio::sync::Mutex::new(super::RoundState::default()),
                }),
                task: TaskSlot::default(),
            }),
        };
        if self.background {
            limiter.start()?;
        }
        Ok(limiter)
    }
}
