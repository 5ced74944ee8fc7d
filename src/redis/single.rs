//! The connection to a single server (a fixed address, or the master
//! Sentinel names) for every call that does not go through the batching
//! socket: redis-rs's multiplexed `ConnectionManager`, replaced when it
//! stops working.
//!
//! redis-rs reconnects by itself when the socket fails (a reset, a
//! close), but not when replies stop coming: a response timeout leaves the
//! same socket in place, and a connection that a partition or a stateful
//! middlebox left silent would time out forever. So each call that ends
//! in connection trouble (an I/O error, a timeout, `READONLY`, or dropped
//! before its reply) counts, and a call that gets any reply resets the
//! count. After such a call the server is looked for again in the
//! background (at most one search at a time; [`SEARCH_SPACING`] apart,
//! doubled after each search that finds nothing new, up to
//! [`MAX_SPACING`], and back to the start after a quiet second): through
//! Sentinel the sentinels are asked again; a new address,
//! or [`REPLACE_AFTER`] troubled calls in a row on the same one, replaces
//! the connection for the calls that follow. The troubled call is not
//! retried: it may have run.
//!
//! Through Sentinel, the sentinels are asked in the order given for the
//! master's address (`SENTINEL GET-MASTER-ADDR-BY-NAME`), and the node
//! they name must say `ROLE` master before it is used: a sentinel cut off
//! from the others may still name the old master. Sentinel closes the
//! clients of a master it turns into a replica (`CLIENT KILL TYPE
//! normal`), and a write to a replica fails with `READONLY`, so both ends
//! of a failover lead to a search.

use super::RedisError;
use super::connection::{Tls, client, manager_config, parse_url};
use super::sentinel::Sentinel;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, RedisFuture,
    ServerErrorKind, Value,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// The least time between two searches, so that a server that hangs
/// costs one search per spacing, not one per failed call.
const SEARCH_SPACING: Duration = Duration::from_millis(50);

/// The most: searches that keep finding the same server (callers that
/// drop their calls early, a server that is down) slow to four a second,
/// and a failover in progress is still seen within this of its end.
const MAX_SPACING: Duration = Duration::from_millis(250);

/// Trouble after this long without any starts the spacing over.
const QUIET: Duration = Duration::from_secs(1);

/// Troubled calls in a row after which the same address gets a new
/// connection: one failure may be the server's (a slow reply), two in a
/// row with no reply between are the connection's.
const REPLACE_AFTER: u32 = 2;

/// Where the server is.
enum Locate {
    /// This address, always.
    Fixed(ConnectionInfo),
    /// The master the sentinels name.
    Sentinel {
        name: String,
        sentinels: Vec<ConnectionInfo>,
        /// The master's credentials and database.
        settings: redis::RedisConnectionInfo,
        /// TLS to the master (the sentinels' URLs are `rediss://`).
        tls_master: bool,
    },
}

/// The single server's connection and the way to replace it. Cheap to
/// clone; clones share the connection.
#[derive(Clone)]
pub(crate) struct Single(Arc<Shared>);

struct Shared {
    locate: Locate,
    tls: Tls,
    timeout: Duration,
    current: parking_lot::Mutex<Current>,
    /// Calls in a row that ended in connection trouble.
    troubled: AtomicU32,
    /// A search is under way (at most one at a time).
    searching: AtomicBool,
    /// When the last search started, and the spacing before the next.
    last_search: parking_lot::Mutex<(Option<Instant>, Duration)>,
    /// When the last troubled call ended: trouble after [`QUIET`]
    /// starts the spacing over at [`SEARCH_SPACING`] (a fresh failover is
    /// followed at once; callers that keep dropping calls on a healthy
    /// server stay at [`MAX_SPACING`]).
    last_trouble: parking_lot::Mutex<Option<Instant>>,
    /// The sentinel that answered last: asked first next time.
    preferred: AtomicUsize,
}

struct Current {
    info: ConnectionInfo,
    manager: ConnectionManager,
}

impl Single {
    /// Connects to `url`.
    pub(crate) async fn fixed(
        url: &str,
        tls: &Tls,
        timeout: Duration,
    ) -> Result<Single, RedisError> {
        let info = parse_url(url)?;
        Single::start(Locate::Fixed(info), tls, timeout).await
    }

    /// Finds the master through `sentinel` and connects to it.
    pub(crate) async fn sentinel(
        sentinel: Sentinel,
        tls: &Tls,
        timeout: Duration,
    ) -> Result<Single, RedisError> {
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
        let locate = Locate::Sentinel {
            name: sentinel.master,
            sentinels,
            settings,
            tls_master,
        };
        Single::start(locate, tls, timeout).await
    }

    async fn start(locate: Locate, tls: &Tls, timeout: Duration) -> Result<Single, RedisError> {
        let preferred = AtomicUsize::new(0);
        let info = locate.find_with(tls, timeout, &preferred).await?;
        let mut manager = connect(info.clone(), tls, timeout).await?;
        if matches!(locate, Locate::Fixed(_)) {
            // A replica would answer every write with READONLY, forever:
            // refused here, as a master Sentinel names is (`ask`).
            let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut manager).await?;
            if !is_master(&role) {
                return Err(RedisError::Config(
                    "the server is a replica, not a master: give the master's address, or sentinel()",
                ));
            }
        }
        Ok(Single(Arc::new(Shared {
            locate,
            tls: tls.clone(),
            timeout,
            current: parking_lot::Mutex::new(Current { info, manager }),
            troubled: AtomicU32::new(0),
            searching: AtomicBool::new(false),
            last_search: parking_lot::Mutex::new((None, SEARCH_SPACING)),
            last_trouble: parking_lot::Mutex::new(None),
            preferred,
        })))
    }

    /// Whether the server is found through Sentinel (its address can
    /// change).
    pub(crate) fn follows_sentinel(&self) -> bool {
        matches!(self.0.locate, Locate::Sentinel { .. })
    }

    /// The server's address and settings now.
    pub(crate) fn info(&self) -> ConnectionInfo {
        self.0.current.lock().info.clone()
    }

    fn manager(&self) -> ConnectionManager {
        self.0.current.lock().manager.clone()
    }

    /// After a call that ended in connection trouble: looks for the server
    /// again in the background, unless a search is under way or one
    /// started less than [`SEARCH_SPACING`] ago.
    pub(crate) fn search(&self) {
        {
            let mut last = self.0.last_search.lock();
            let (at, spacing) = *last;
            if at.is_some_and(|at| at.elapsed() < spacing) {
                return;
            }
            // Acquire: whoever wins the flag sees the previous search's
            // swap of `current` (made before its Release store, in
            // `Searching`'s drop).
            if self.0.searching.swap(true, Ordering::Acquire) {
                return;
            }
            last.0 = Some(Instant::now());
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.0.searching.store(false, Ordering::Release);
            return;
        };
        let searching = Searching(Arc::clone(&self.0));
        runtime.spawn(async move {
            let shared = &searching.0;
            let mut found = false;
            if let Ok(info) = shared.locate.find(shared).await {
                let moved = shared.current.lock().info.addr() != info.addr();
                // Relaxed: a count read as a hint; a stale read replaces a
                // connection one search early or late.
                let stuck = shared.troubled.load(Ordering::Relaxed) >= REPLACE_AFTER;
                if (moved || stuck)
                    && let Ok(manager) = connect(info.clone(), &shared.tls, shared.timeout).await
                {
                    *shared.current.lock() = Current { info, manager };
                    shared.troubled.store(0, Ordering::Relaxed);
                }
                found = moved;
            }
            let mut last = shared.last_search.lock();
            last.1 = if found {
                SEARCH_SPACING
            } else {
                (last.1 * 2).min(MAX_SPACING)
            };
            // `searching` is cleared when this future ends or is dropped
            // (its runtime shut down mid-search).
        });
    }

    /// Counts a call's outcome (see the module docs).
    fn count<T>(&self, result: &redis::RedisResult<T>) {
        match result {
            Err(e) if trouble(e) => {
                // Relaxed: the count is a hint (see `search`).
                self.0.troubled.fetch_add(1, Ordering::Relaxed);
                let quiet = self
                    .0
                    .last_trouble
                    .lock()
                    .replace(Instant::now())
                    .is_none_or(|at| at.elapsed() >= QUIET);
                if quiet {
                    self.0.last_search.lock().1 = SEARCH_SPACING;
                }
                self.search();
            }
            _ => self.0.troubled.store(0, Ordering::Relaxed),
        }
    }
}

/// Clears the search flag when the search's future ends or is dropped.
struct Searching(Arc<Shared>);

impl Drop for Searching {
    fn drop(&mut self) {
        // Release: publishes the search's swap of `current` to whoever
        // wins the flag next (Acquire in `search`).
        self.0.searching.store(false, Ordering::Release);
    }
}

/// Whether `e` says the connection (or the server behind it) is not
/// serving: an I/O error, a timeout, a dropped connection, `READONLY` (a
/// master turned replica). A server's answer of any other error is a
/// working connection.
fn trouble(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

async fn connect(
    info: ConnectionInfo,
    tls: &Tls,
    timeout: Duration,
) -> Result<ConnectionManager, RedisError> {
    Ok(client(info, tls)?
        .get_connection_manager_with_config(manager_config(timeout))
        .await?)
}

impl Locate {
    /// The server now: a fixed address, or the master the first sentinel
    /// that answers names (starting with the one that answered last).
    async fn find(&self, shared: &Shared) -> Result<ConnectionInfo, RedisError> {
        self.find_with(&shared.tls, shared.timeout, &shared.preferred)
            .await
    }

    async fn find_with(
        &self,
        tls: &Tls,
        timeout: Duration,
        preferred: &AtomicUsize,
    ) -> Result<ConnectionInfo, RedisError> {
        let (name, sentinels) = match self {
            Locate::Fixed(info) => return Ok(info.clone()),
            Locate::Sentinel {
                name, sentinels, ..
            } => (name, sentinels),
        };
        // Each sentinel's call is bounded by the limiter's timeout (at
        // least 50 ms): a sentinel that hangs costs that, and the next is
        // asked.
        let bound = timeout.max(Duration::from_millis(50));
        let mut why = Vec::new();
        // Relaxed: which sentinel to ask first is a hint.
        let first = preferred.load(Ordering::Relaxed);
        for i in 0..sentinels.len() {
            let index = (first + i) % sentinels.len();
            let sentinel = &sentinels[index];
            match tokio::time::timeout(bound, self.ask(sentinel, tls, bound)).await {
                Ok(Ok(info)) => {
                    preferred.store(index, Ordering::Relaxed);
                    return Ok(info);
                }
                Ok(Err(e)) => why.push(format!("{}: {e}", sentinel.addr())),
                Err(_) => why.push(format!("{}: no answer in time", sentinel.addr())),
            }
        }
        Err(RedisError::Sentinel(format!(
            "no sentinel named a master for {name:?} ({})",
            why.join("; ")
        )))
    }

    /// The master `sentinel` names, once that node has said it is one.
    async fn ask(
        &self,
        sentinel: &ConnectionInfo,
        tls: &Tls,
        bound: Duration,
    ) -> Result<ConnectionInfo, RedisError> {
        let Locate::Sentinel {
            name,
            settings,
            tls_master,
            ..
        } = self
        else {
            return Err(RedisError::Config("not a Sentinel address"));
        };
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(bound))
            .set_response_timeout(Some(bound));
        let mut connection = client(sentinel.clone(), tls)?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(name)
            .query_async(&mut connection)
            .await?;
        let Some((host, port)) = addr else {
            return Err(RedisError::Sentinel(format!(
                "the sentinel does not know a master named {name:?}"
            )));
        };
        let addr = if *tls_master {
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
            .set_redis_settings(settings.clone());
        let mut master = client(info.clone(), tls)?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut master).await?;
        if is_master(&role) {
            Ok(info)
        } else {
            Err(RedisError::Sentinel(format!(
                "{addr} is named master but is not one (yet)"
            )))
        }
    }
}

/// Whether a `ROLE` reply says master.
fn is_master(role: &[Value]) -> bool {
    matches!(role.first(), Some(Value::BulkString(role)) if role.as_slice() == b"master")
}

/// Counts the call when dropped: a call dropped before its reply (its
/// caller's timeout) is connection trouble.
struct Counted<'a> {
    single: &'a Single,
    answered: bool,
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        if !self.answered {
            let dropped: redis::RedisResult<()> =
                Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into());
            self.single.count(&dropped);
        }
    }
}

impl ConnectionLike for Single {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut counted = Counted {
                single: self,
                answered: false,
            };
            let result = self.manager().req_packed_command(cmd).await;
            counted.answered = true;
            self.count(&result);
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut counted = Counted {
                single: self,
                answered: false,
            };
            let result = self
                .manager()
                .req_packed_commands(pipeline, offset, count)
                .await;
            counted.answered = true;
            self.count(&result);
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.0.current.lock().info.redis_settings().db()
    }
}
