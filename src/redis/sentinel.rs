//! A master found through Redis Sentinel: the settings. The connection
//! that follows it is in `single.rs`.

use std::fmt;

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
