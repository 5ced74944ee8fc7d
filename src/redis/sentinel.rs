//! A master found through Redis Sentinel, followed across failovers.
//!
//! The sentinels are asked, in the order given, for the master's address
//! (`SENTINEL GET-MASTER-ADDR-BY-NAME`), and the node they name must say
//! `ROLE` master before it is used: a sentinel cut off from the others
//! may still name the old master. The connection to the master is
//! redis-rs's reconnecting `ConnectionManager`; when a call on it fails or
//! is dropped unanswered (a timeout), the sentinels are asked again in the
//! background, and a new master replaces the old one for the calls that
//! follow. The call that failed is not retried: it may have run.
//! Sentinel closes the clients of a master it turns into a replica
//! (`CLIENT KILL TYPE normal`), and a write to a replica fails with
//! `READONLY`, so both ends of a failover reach the sentinels.

use super::RedisError;
use super::connection::{Tls, client, manager_config, parse_url};
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisFuture, Value};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// A Redis master found through Redis Sentinel: its name as the
/// sentinels know it and some sentinels' URLs. Given to a Redis limiter's
/// builder with `sentinel`; the limiter follows the master across
/// failovers.
///
/// A sentinel's URL carries the sentinels' own password, if they have one
/// (`redis://:password@host:26379`); the master's credentials and
/// database are set here. `rediss://` sentinel URLs mean TLS to the
/// sentinels and to the master (feature `redis-tls`, certificates from
/// the builder's `tls`).
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), rategate::redis::RedisError> {
/// use rategate::redis::{RedisLimiter, Sentinel};
/// use rategate::{Quota, TokenBucket};
///
/// let sentinel = Sentinel::new(
///     "mymaster",
///     &["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
/// )
/// .master_password("secret");
/// let limiter = RedisLimiter::<TokenBucket>::builder(Quota::per_second(100)?)
///     .sentinel(sentinel)
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Sentinel {
    pub(crate) master: String,
    pub(crate) sentinels: Vec<String>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: i64,
}

impl fmt::Debug for Sentinel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URLs may hold the sentinels' password, and the master's is
        // here: neither is printed.
        f.debug_struct("Sentinel")
            .field("master", &self.master)
            .field("sentinels", &self.sentinels.len())
            .field("username", &self.username)
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

impl Sentinel {
    /// The master the sentinels know as `master_name`, asked of
    /// `sentinels` (their URLs) in order.
    pub fn new<S: AsRef<str>>(master_name: &str, sentinels: &[S]) -> Sentinel {
        Sentinel {
            master: master_name.to_owned(),
            sentinels: sentinels.iter().map(|s| s.as_ref().to_owned()).collect(),
            username: None,
            password: None,
            db: 0,
        }
    }

    /// The master's password (`requirepass`).
    pub fn master_password(mut self, password: &str) -> Sentinel {
        self.password = Some(password.to_owned());
        self
    }

    /// The master's ACL user and its password.
    pub fn master_user(mut self, username: &str, password: &str) -> Sentinel {
        self.username = Some(username.to_owned());
        self.password = Some(password.to_owned());
        self
    }

    /// The master's database (default 0).
    pub fn master_db(mut self, db: i64) -> Sentinel {
        self.db = db;
        self
    }
}

/// The current master and the way to find the next one; shared by the
/// limiter's connections.
pub(crate) struct Follow {
    name: String,
    sentinels: Vec<ConnectionInfo>,
    /// The master's credentials and database.
    settings: redis::RedisConnectionInfo,
    /// TLS to the master (the sentinels' URLs are `rediss://`).
    tls_master: bool,
    tls: Tls,
    timeout: Duration,
    current: parking_lot::Mutex<Current>,
    /// A search is under way (at most one at a time).
    searching: AtomicBool,
    /// When the last search started: searches are at least
    /// [`SEARCH_SPACING`] apart, so a master that hangs before the
    /// failover costs one search per spacing, not one per failed call.
    last_search: parking_lot::Mutex<Option<Instant>>,
}

/// The least time between two searches.
const SEARCH_SPACING: Duration = Duration::from_millis(50);

struct Current {
    info: ConnectionInfo,
    manager: ConnectionManager,
}

impl Follow {
    /// Finds the master and connects to it.
    pub(crate) async fn start(
        sentinel: Sentinel,
        tls: &Tls,
        timeout: Duration,
    ) -> Result<Arc<Follow>, RedisError> {
        if sentinel.sentinels.is_empty() {
            return Err(RedisError::Config("sentinel() needs at least one sentinel"));
        }
        if sentinel.master.is_empty() {
            return Err(RedisError::Config("sentinel() needs the master's name"));
        }
        let sentinels = sentinel
            .sentinels
            .iter()
            .map(|url| parse_url(url))
            .collect::<Result<Vec<_>, _>>()?;
        let tls_master = sentinels
            .iter()
            .any(|s| matches!(s.addr(), ConnectionAddr::TcpTls { .. }));
        let mut settings = redis::RedisConnectionInfo::default().set_db(sentinel.db);
        if let Some(user) = &sentinel.username {
            settings = settings.set_username(user);
        }
        if let Some(password) = &sentinel.password {
            settings = settings.set_password(password);
        }
        let follow = FollowParts {
            name: sentinel.master,
            sentinels,
            settings,
            tls_master,
            tls: tls.clone(),
            timeout,
        };
        let info = follow.locate().await?;
        let manager = follow.manager(info.clone()).await?;
        Ok(Arc::new(follow.into_follow(Current { info, manager })))
    }

    /// The current master's connection.
    pub(crate) fn manager(&self) -> ConnectionManager {
        self.current.lock().manager.clone()
    }

    /// The current master's address and settings.
    pub(crate) fn info(&self) -> ConnectionInfo {
        self.current.lock().info.clone()
    }

    /// Asks the sentinels again, in the background, unless a search is
    /// under way or one started less than [`SEARCH_SPACING`] ago; a
    /// different master replaces the current one when found.
    pub(crate) fn search(self: &Arc<Self>) {
        {
            let mut last = self.last_search.lock();
            if last.is_some_and(|at| at.elapsed() < SEARCH_SPACING) {
                return;
            }
            // AcqRel: whoever wins the flag sees the previous search's
            // swap of `current` (published before its Release below).
            if self.searching.swap(true, Ordering::AcqRel) {
                return;
            }
            *last = Some(Instant::now());
        }
        let this = Arc::clone(self);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.searching.store(false, Ordering::Release);
            return;
        };
        runtime.spawn(async move {
            let parts = this.parts();
            if let Ok(info) = parts.locate().await {
                let moved = this.current.lock().info.addr() != info.addr();
                if moved && let Ok(manager) = parts.manager(info.clone()).await {
                    *this.current.lock() = Current { info, manager };
                }
            }
            this.searching.store(false, Ordering::Release);
        });
    }

    fn parts(&self) -> FollowParts {
        FollowParts {
            name: self.name.clone(),
            sentinels: self.sentinels.clone(),
            settings: self.settings.clone(),
            tls_master: self.tls_master,
            tls: self.tls.clone(),
            timeout: self.timeout,
        }
    }
}

/// What a search needs, apart from the shared state.
struct FollowParts {
    name: String,
    sentinels: Vec<ConnectionInfo>,
    settings: redis::RedisConnectionInfo,
    tls_master: bool,
    tls: Tls,
    timeout: Duration,
}

impl FollowParts {
    fn into_follow(self, current: Current) -> Follow {
        Follow {
            name: self.name,
            sentinels: self.sentinels,
            settings: self.settings,
            tls_master: self.tls_master,
            tls: self.tls,
            timeout: self.timeout,
            current: parking_lot::Mutex::new(current),
            searching: AtomicBool::new(false),
            last_search: parking_lot::Mutex::new(None),
        }
    }

    /// Each sentinel's call is bounded by the limiter's timeout, at least
    /// one second: a sentinel that hangs costs that, and the next is asked.
    fn bound(&self) -> Duration {
        self.timeout.max(Duration::from_secs(1))
    }

    /// The master as the first sentinel that knows it says, once that
    /// node has said it is a master.
    async fn locate(&self) -> Result<ConnectionInfo, RedisError> {
        let mut why = Vec::new();
        for sentinel in &self.sentinels {
            match tokio::time::timeout(self.bound(), self.ask(sentinel)).await {
                Ok(Ok(info)) => return Ok(info),
                Ok(Err(e)) => why.push(format!("{}: {e}", sentinel.addr())),
                Err(_) => why.push(format!("{}: no answer in time", sentinel.addr())),
            }
        }
        Err(RedisError::Sentinel(format!(
            "no sentinel named a master for {:?} ({})",
            self.name,
            why.join("; ")
        )))
    }

    async fn ask(&self, sentinel: &ConnectionInfo) -> Result<ConnectionInfo, RedisError> {
        let mut connection = client(sentinel.clone(), &self.tls)?
            .get_multiplexed_async_connection_with_config(&self.async_config())
            .await?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.name)
            .query_async(&mut connection)
            .await?;
        let Some((host, port)) = addr else {
            return Err(RedisError::Sentinel(format!(
                "the sentinel does not know a master named {:?}",
                self.name
            )));
        };
        let addr = if self.tls_master {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host, port)
        };
        let info = addr
            .clone()
            .into_connection_info()?
            .set_redis_settings(self.settings.clone());
        let mut master = client(info.clone(), &self.tls)?
            .get_multiplexed_async_connection_with_config(&self.async_config())
            .await?;
        let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut master).await?;
        match role.first() {
            Some(Value::BulkString(role)) if role.as_slice() == b"master" => Ok(info),
            _ => Err(RedisError::Sentinel(format!(
                "{addr} is named master but is not one (yet)"
            ))),
        }
    }

    fn async_config(&self) -> redis::AsyncConnectionConfig {
        redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.bound()))
            .set_response_timeout(Some(self.bound()))
    }

    async fn manager(&self, info: ConnectionInfo) -> Result<ConnectionManager, RedisError> {
        Ok(client(info, &self.tls)?
            .get_connection_manager_with_config(manager_config(self.timeout))
            .await?)
    }
}

/// A single server's connection: a fixed address, or the master Sentinel
/// names. Cheap to clone.
#[derive(Clone)]
pub(crate) enum Single {
    Fixed(ConnectionManager),
    Follow(Arc<Follow>),
}

impl Single {
    /// The master's follower, for a connection that goes through Sentinel.
    pub(crate) fn follow(&self) -> Option<&Arc<Follow>> {
        match self {
            Single::Fixed(_) => None,
            Single::Follow(follow) => Some(follow),
        }
    }
}

/// Asks the sentinels again when dropped before [`done`](Searching::done):
/// a call that failed, or that its caller stopped waiting for.
struct Searching<'a>(Option<&'a Arc<Follow>>);

impl Searching<'_> {
    fn done<T>(mut self, result: &redis::RedisResult<T>) {
        if result.is_ok() {
            self.0 = None;
        }
    }
}

impl Drop for Searching<'_> {
    fn drop(&mut self) {
        if let Some(follow) = self.0 {
            follow.search();
        }
    }
}

impl ConnectionLike for Single {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Single::Fixed(manager) => manager.req_packed_command(cmd),
            Single::Follow(follow) => Box::pin(async move {
                let searching = Searching(Some(follow));
                let result = follow.manager().req_packed_command(cmd).await;
                searching.done(&result);
                result
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Single::Fixed(manager) => manager.req_packed_commands(pipeline, offset, count),
            Single::Follow(follow) => Box::pin(async move {
                let searching = Searching(Some(follow));
                let result = follow
                    .manager()
                    .req_packed_commands(pipeline, offset, count)
                    .await;
                searching.done(&result);
                result
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Single::Fixed(manager) => manager.get_db(),
            Single::Follow(follow) => follow.settings.db(),
        }
    }
}
