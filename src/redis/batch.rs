//! Coalescing concurrent decisions into one script call (single server).
//!
//! With one script call per decision, Redis spends most of each call on
//! what every call costs (reading the command, finding the script, entering
//! Lua, writing the reply), not on the decision itself, and the client
//! spends a channel hop and a wake-up per call. So decisions that are
//! waiting at the same moment go to Redis together: a driver task takes
//! queued requests (up to [`MAX_BATCH`]) and sends them as one `EVALSHA` of
//! the algorithm's script wrapped in a loop ([`batch_script`]) on a
//! connection of its own (`wire.rs`). Under many callers, a batch is what
//! queued while the batches before it were on the wire, so batching adds no
//! waiting of its own. Up to `batches_in_flight` batches (default 2) are
//! on the wire at once, their replies read in the order they were sent
//! ([`Call`]). A lone caller skips the driver and calls the single-decision
//! script itself ([`Batcher::enter`]).
//!
//! Redis runs a script atomically, so a batch decides its requests one
//! after the other, exactly as separate calls arriving in that order would:
//! every decision is the algorithm's script on the state the previous one
//! left; and Redis runs one connection's commands in the order they were
//! written, so batches in flight together run in the order they were sent.
//! Only a single server is batched: on a Cluster a script may touch
//! one slot only, and calls there stay one per decision.

use super::RedisError;
use super::key::KeySpace;
use super::wire::{Reply as WireReply, Wire, server_error};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, Sleep};

/// The most requests one script call carries, so that no call holds Redis
/// for long.
pub(crate) const MAX_BATCH: usize = 256;

/// The six integers a decision script returns.
pub(crate) type Reply = [i64; 6];

/// `source` (a decision script over `KEYS`/`ARGV`) as a function called
/// once per record.
///
/// `ARGV[1]` is the number of keys per record and `ARGV[2]` the number of
/// shared parameters, followed by those parameters and then `now, cost` per
/// record; `KEYS` are the records' keys in order. The script's `ARGV` for a
/// record is `now, cost, parameters...`, as for a single call, except that
/// a `now` of `-1` (server time) is replaced by one `TIME` reading for the
/// whole batch (a call of `TIME` per decision was a third of the script's
/// Redis calls).
///
/// Returns one string for the whole batch, a line per record: the six
/// values of the script's reply as decimal integers separated by spaces
/// (`%d`, the same truncation Redis applies when it turns a Lua number into
/// an integer reply), or `!`, the length of an error reply's message, `:`
/// and the message. One bulk string instead of an array of six integers
/// per record: the client's reply parser spent a fifth of the client's time
/// on those arrays (`perf`, 64 tasks), and [`parse`] reads the text
/// directly.
pub(crate) fn batch_script(source: &str) -> String {
    format!(
        "local function decide(KEYS, ARGV)\n{source}\nend\n{}",
        r"local nk = tonumber(ARGV[1])
local np = tonumber(ARGV[2])
local out = {}
local now = nil
local n = #KEYS / nk
for i = 0, n - 1 do
  local keys = {}
  for k = 1, nk do
    keys[k] = KEYS[i * nk + k]
  end
  local args = {ARGV[3 + np + 2 * i], ARGV[4 + np + 2 * i]}
  if args[1] == '-1' then
    -- Server time: read once per batch (the batch is one atomic step, as
    -- if its requests arrived together), passed as the script's own
    -- reading would be: microseconds, an exact integer below 2^53.
    if not now then
      local t = redis.call('TIME')
      now = string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
    end
    args[1] = now
  end
  for p = 1, np do
    args[2 + p] = ARGV[2 + p]
  end
  local r = decide(keys, args)
  if r.err then
    out[#out + 1] = '!' .. #r.err .. ':' .. r.err .. '\n'
  else
    out[#out + 1] = string.format('%d %d %d %d %d %d\n', r[1], r[2], r[3], r[4], r[5], r[6])
  end
end
return table.concat(out)
"
    )
}

/// One queued decision.
struct Job {
    /// The user's key (the driver writes its Redis keys into the command).
    key: String,
    now: i64,
    cost: u32,
    /// When the caller stops waiting: a job still queued then is answered
    /// with a timeout without being sent, and a batch on the wire is
    /// bounded by its oldest job's deadline.
    deadline: Instant,
    reply: oneshot::Sender<Result<Reply, RedisError>>,
}

/// What the limiter's callers and the driver task share.
#[derive(Debug)]
struct Shared {
    /// The connection, held by whoever has a script call on it: the driver
    /// while it has batches on the wire, or a lone caller for its own
    /// decision (see [`Batcher::enter`]). tokio's mutex is fair: a waiting
    /// driver gets it before any later `try_lock`.
    link: tokio::sync::Mutex<Link>,
    /// Callers between [`Batcher::enter`] and their answer (or their
    /// future's drop); the driver also sizes its batches by it.
    active: AtomicUsize,
}

/// A script's source and SHA1.
#[derive(Debug)]
struct Loaded {
    source: String,
    hash: String,
}

impl Loaded {
    fn new(source: String) -> Loaded {
        let hash = redis::Script::new(&source).get_hash().to_owned();
        Loaded { source, hash }
    }
}

/// The connection (see `wire.rs`) and what a script call is written with,
/// its buffers reused from call to call.
struct Link {
    wire: Wire,
    batch: Loaded,
    single: Loaded,
    params: Vec<i64>,
    keys: KeySpace,
    suffixes: &'static [&'static str],
    /// The command.
    command: redis::Cmd,
    /// The command as sent.
    packed: Vec<u8>,
    /// One Redis key at a time, written before it is copied in.
    key: String,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").finish_non_exhaustive()
    }
}

impl Link {
    /// Writes the `EVALSHA` of the batch script for `jobs`: the keys
    /// straight from each job's user key, the integers without an
    /// allocation per argument.
    fn encode_batch(&mut self, jobs: &[Job]) {
        let command = &mut self.command;
        command.clear();
        command
            .arg("EVALSHA")
            .arg(self.batch.hash.as_str())
            .arg(jobs.len() * self.suffixes.len());
        for job in jobs {
            for suffix in self.suffixes {
                self.key.clear();
                self.keys.write(&job.key, suffix, &mut self.key);
                command.arg(self.key.as_bytes());
            }
        }
        command.arg(self.suffixes.len()).arg(self.params.len());
        for param in &self.params {
            command.arg(*param);
        }
        for job in jobs {
            command.arg(job.now).arg(job.cost);
        }
    }

    /// Writes the `EVALSHA` of the algorithm's own script for one decision
    /// (keys, then `now, cost, parameters...`, as on a Cluster).
    fn encode_single(&mut self, key: &str, now: i64, cost: u32) {
        let command = &mut self.command;
        command.clear();
        command
            .arg("EVALSHA")
            .arg(self.single.hash.as_str())
            .arg(self.suffixes.len());
        for suffix in self.suffixes {
            self.key.clear();
            self.keys.write(key, suffix, &mut self.key);
            command.arg(self.key.as_bytes());
        }
        command.arg(now).arg(cost);
        for param in &self.params {
            command.arg(*param);
        }
    }

    /// Runs the encoded single-decision command, loading the script once if
    /// Redis lost it (`NOSCRIPT`, after a restart or `SCRIPT FLUSH`).
    async fn query(&mut self) -> redis::RedisResult<WireReply> {
        self.packed.clear();
        self.command.write_packed_command(&mut self.packed);
        let reply = self.wire.request(&self.packed).await?;
        if !matches!(&reply, WireReply::Error(m) if m.starts_with("NOSCRIPT")) {
            return Ok(reply);
        }
        let load = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(self.single.source.as_str())
            .get_packed_command();
        if let WireReply::Error(message) = self.wire.request(&load).await? {
            return Err(server_error(message));
        }
        self.wire.request(&self.packed).await
    }
}

/// The queue in front of the driver task; dropping it ends the task.
#[derive(Debug)]
pub(crate) struct Batcher {
    queue: mpsc::UnboundedSender<Job>,
    shared: Arc<Shared>,
}

/// A caller counted in [`Shared::active`] until dropped.
pub(crate) struct Active<'a> {
    shared: &'a Shared,
    /// The connection, when this caller was alone and calls directly.
    link: Option<tokio::sync::MutexGuard<'a, Link>>,
}

impl Active<'_> {
    /// Whether this caller holds the connection: it was the only caller
    /// and no call was on the wire, so it calls Redis itself
    /// ([`call`](Active::call)), without the driver's hop.
    pub(crate) fn direct(&self) -> bool {
        self.link.is_some()
    }

    /// The lone caller's decision: the algorithm's own script, on the
    /// driver's connection, in the caller's task, at most `timeout`.
    ///
    /// # Errors
    ///
    /// As a batched call; [`RedisError::Config`] when this caller is not
    /// [`direct`](Active::direct).
    pub(crate) async fn call(
        &mut self,
        key: &str,
        now: i64,
        cost: u32,
        timeout: Duration,
    ) -> Result<Reply, RedisError> {
        let Some(link) = self.link.as_deref_mut() else {
            return Err(RedisError::Config("only a lone caller calls directly"));
        };
        link.encode_single(key, now, cost);
        let sent = tokio::time::timeout(timeout, link.query()).await;
        let reply = match sent {
            Err(_) => {
                // The reply may still come: not on this socket.
                link.wire.fail();
                return Err(RedisError::Timeout);
            }
            Ok(Err(e)) if e.is_timeout() => return Err(RedisError::Timeout),
            Ok(Err(e)) => return Err(RedisError::Redis(e)),
            Ok(Ok(reply)) => reply,
        };
        match reply {
            WireReply::Ints(values, 6) => Ok(values),
            WireReply::Error(message) => Err(RedisError::Redis(server_error(message))),
            other => Err(RedisError::BadReply(format!("{other:?}"))),
        }
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        // Relaxed: a count read as a hint, ordering nothing (the wire lock
        // orders the calls).
        self.shared.active.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Batcher {
    /// Starts the driver task on the current tokio runtime, on `wire`, its
    /// own connection to the server (see `wire.rs`). `single` is
    /// the algorithm's script and `batch` its looped form (see
    /// [`batch_script`]); `keys` and `suffixes` name each decision's Redis
    /// keys.
    ///
    /// # Errors
    ///
    /// [`RedisError::Config`] for a `depth` outside 1 to 64.
    pub(crate) fn start(
        wire: Wire,
        single: &str,
        batch: String,
        params: Vec<i64>,
        keys: KeySpace,
        suffixes: &'static [&'static str],
        depth: usize,
    ) -> Result<Batcher, RedisError> {
        if depth == 0 {
            return Err(RedisError::Config("at least one batch must be in flight"));
        }
        if depth > MAX_BATCHES_IN_FLIGHT {
            return Err(RedisError::Config(
                "at most 64 batches in flight (batches_in_flight)",
            ));
        }
        let (queue, jobs) = mpsc::unbounded_channel();
        let link = Link {
            wire,
            batch: Loaded::new(batch),
            single: Loaded::new(single.to_owned()),
            params,
            keys,
            suffixes,
            command: redis::Cmd::new(),
            packed: Vec::new(),
            key: String::new(),
        };
        let shared = Arc::new(Shared {
            link: tokio::sync::Mutex::new(link),
            active: AtomicUsize::new(0),
        });
        let call = Call::new(Arc::clone(&shared), depth);
        tokio::spawn(call.run(jobs));
        Ok(Batcher { queue, shared })
    }

    /// Counts a caller in. When it is the only one and nothing is on the
    /// wire, the returned guard holds the connection
    /// ([`direct`](Active::direct)): a lone caller gains nothing from
    /// batching and would pay the driver's hop (two task wake-ups) per
    /// decision. Under concurrent callers they all queue, so that batches
    /// do not fragment into one-decision direct calls.
    pub(crate) fn enter(&self) -> Active<'_> {
        let before = self.shared.active.fetch_add(1, Ordering::Relaxed);
        let link = if before == 0 {
            self.shared.link.try_lock().ok()
        } else {
            None
        };
        Active {
            shared: &self.shared,
            link,
        }
    }

    /// Queues one decision and waits for its reply, at most `timeout`
    /// (the driver answers a timeout; the caller sets no timer of its own).
    pub(crate) async fn call(
        &self,
        key: &str,
        now: i64,
        cost: u32,
        timeout: Duration,
    ) -> Result<Reply, RedisError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            key: key.to_owned(),
            now,
            cost,
            deadline: Instant::now() + timeout,
            reply,
        };
        let stopped = || RedisError::Config("the batching task stopped");
        self.queue.send(job).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// A command on the wire; replies come back in the order the commands were
/// written, so the oldest is answered by the next reply.
enum Sent {
    /// A batch's jobs; `retried` once sent again after a `NOSCRIPT`.
    Batch { jobs: Vec<Job>, retried: bool },
    /// `SCRIPT LOAD` of the batch script, after a `NOSCRIPT`.
    Load,
}

/// What the driver waits for while batches are on the wire.
enum Event {
    /// The oldest command's reply (or the failure that dropped the socket).
    Reply(redis::RedisResult<WireReply>),
    /// The oldest deadline on the wire passed first.
    Late,
    /// Requests queued (0: every sender is gone).
    Queued(usize),
}

/// The most batches a driver keeps on the wire: beyond a few, more only
/// splits the waiting callers into smaller batches (and a larger value
/// would overflow the driver's bounds, `depth * MAX_BATCH`).
const MAX_BATCHES_IN_FLIGHT: usize = 64;

/// The driver: up to `depth` batches on the wire at a time, on one
/// connection. With one, Redis and the client take turns: Redis idles
/// while the client answers a batch's callers and they ask again, and the
/// client idles while Redis runs the next batch. With two, one batch runs
/// in Redis while the callers of the other are answered and queue again.
/// To keep batches from fragmenting (a request or two sent as soon as it
/// queues, with the rest of the callers in one big batch), a further batch
/// is sent only once `active / depth` requests are waiting, or every
/// active caller is either waiting or on the wire; with nothing on the
/// wire, whatever waits is sent at once.
struct Call {
    shared: Arc<Shared>,
    /// The most batches on the wire at once.
    depth: usize,
    /// Requests taken from the queue and not yet sent, in arrival order.
    pending: Vec<Job>,
    /// What is on the wire, oldest first.
    sent: VecDeque<Sent>,
    /// The batches in `sent`.
    batches: usize,
    /// Their requests.
    on_wire: usize,
    /// Job vectors of answered batches, reused.
    spare: Vec<Vec<Job>>,
    replies: Vec<Result<Reply, RedisError>>,
    /// The message of a failed `SCRIPT LOAD`, for the batch it was for.
    load_error: Option<String>,
    /// Bounds the wait for replies by the oldest deadline on the wire (one
    /// timer, moved as the deadline changes).
    late: Pin<Box<Sleep>>,
    late_at: Instant,
}

impl Call {
    fn new(shared: Arc<Shared>, depth: usize) -> Call {
        let far = Instant::now() + Duration::from_secs(86_400);
        Call {
            shared,
            depth,
            pending: Vec::with_capacity(MAX_BATCH),
            sent: VecDeque::with_capacity(2 * depth),
            batches: 0,
            on_wire: 0,
            spare: Vec::new(),
            replies: Vec::with_capacity(MAX_BATCH),
            load_error: None,
            late: Box::pin(tokio::time::sleep_until(far)),
            late_at: far,
        }
    }

    async fn run(mut self, mut jobs: mpsc::UnboundedReceiver<Job>) {
        let shared = Arc::clone(&self.shared);
        let mut open = true;
        loop {
            // Zero: every limiter clone (every sender) is gone.
            if self.pending.is_empty()
                && (!open || jobs.recv_many(&mut self.pending, MAX_BATCH).await == 0)
            {
                return;
            }
            let Some(deadline) = self.pending.first().map(|job| job.deadline) else {
                continue;
            };
            // A lone caller holds the connection for its call, bounded by
            // its timeout; but a caller's future may also sit unpolled and
            // undropped. Queued callers set no timer of their own, so the
            // wait for the connection is bounded by their deadlines too.
            let Ok(mut link) = tokio::time::timeout_at(deadline, shared.link.lock()).await else {
                let now = Instant::now();
                self.pending.retain_mut(|job| {
                    if job.deadline > now {
                        return true;
                    }
                    let (gone, _) = oneshot::channel();
                    let reply = std::mem::replace(&mut job.reply, gone);
                    let _ = reply.send(Err(RedisError::Timeout));
                    false
                });
                continue;
            };
            // A lone caller's call dropped mid-way leaves its reply owed.
            link.wire.claim(Some(deadline)).await;
            open = self.drive(&mut link, &mut jobs, open).await;
            drop(link);
            // The callers just answered are runnable and about to ask
            // again: let them queue before the next batch is taken, or the
            // batches fragment into ones of a request or two.
            tokio::task::yield_now().await;
        }
    }

    /// Sends batches and hands out their replies until nothing is on the
    /// wire or waiting. Returns whether the queue is still open.
    async fn drive(
        &mut self,
        link: &mut Link,
        jobs: &mut mpsc::UnboundedReceiver<Job>,
        mut open: bool,
    ) -> bool {
        loop {
            // What queued joins the requests waiting.
            while open && self.pending.len() < self.depth * MAX_BATCH {
                match jobs.try_recv() {
                    Ok(job) => self.pending.push(job),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => open = false,
                }
            }
            self.send_ready(link).await;
            if self.sent.is_empty() && self.pending.is_empty() {
                return open;
            }
            if self.sent.is_empty() {
                // Every send failed; the rest goes out on a new socket.
                continue;
            }
            let oldest = self
                .sent
                .iter()
                .filter_map(|sent| match sent {
                    Sent::Batch { jobs, .. } => jobs.first().map(|job| job.deadline),
                    Sent::Load => None,
                })
                .min();
            if let Some(oldest) = oldest
                && oldest != self.late_at
            {
                self.late.as_mut().reset(oldest);
                self.late_at = oldest;
            }
            // Queued requests are only worth a wake-up while another batch
            // may go out.
            let listen = open && self.batches < self.depth;
            let event = {
                let mut read = std::pin::pin!(link.wire.read());
                let late = &mut self.late;
                let pending = &mut self.pending;
                std::future::poll_fn(|cx| {
                    // `read` is cancel safe (`Wire::read`): dropped when
                    // another event comes first, it loses nothing.
                    if let Poll::Ready(reply) = read.as_mut().poll(cx) {
                        return Poll::Ready(Event::Reply(reply));
                    }
                    if late.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Event::Late);
                    }
                    if listen && let Poll::Ready(n) = jobs.poll_recv_many(cx, pending, MAX_BATCH) {
                        return Poll::Ready(Event::Queued(n));
                    }
                    Poll::Pending
                })
                .await
            };
            match event {
                Event::Queued(0) => open = false,
                Event::Queued(_) => {}
                Event::Late => {
                    // The replies may still come: not on this socket.
                    link.wire.fail();
                    self.fail_all(&RedisError::Timeout);
                }
                // The socket is dropped (`Wire::read`): every reply owed
                // on it is lost.
                Event::Reply(Err(e)) if e.is_timeout() => self.fail_all(&RedisError::Timeout),
                Event::Reply(Err(e)) => self.fail_all(&RedisError::Redis(e)),
                Event::Reply(Ok(reply)) => {
                    if self.answer(link, reply).await {
                        // As in `run`: the callers answered queue again
                        // before the next batch is taken.
                        tokio::task::yield_now().await;
                    }
                }
            }
        }
    }

    /// Sends what waits: at once when nothing is on the wire, and as a
    /// further batch (below `depth`) once `active / depth` requests wait or
    /// no other caller is left to wait for.
    async fn send_ready(&mut self, link: &mut Link) {
        // Relaxed: a count read as a hint that sizes the batches; a stale
        // value only makes one batch larger or smaller, or sends it sooner
        // or later (never later than the reply of a batch on the wire).
        let active = self.shared.active.load(Ordering::Relaxed);
        let share = if self.depth == 1 {
            MAX_BATCH
        } else {
            active.div_ceil(self.depth).clamp(1, MAX_BATCH)
        };
        while self.batches < self.depth
            && !self.pending.is_empty()
            && (self.batches == 0
                || self.pending.len() >= share
                || self.on_wire + self.pending.len() >= active)
        {
            let take = self.pending.len().min(share);
            let mut batch = self
                .spare
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(MAX_BATCH));
            let now = Instant::now();
            for job in self.pending.drain(..take) {
                // A caller that is gone is not sent (no quota spent on a
                // decision nobody reads); one past its deadline is
                // answered with a timeout unsent.
                if job.reply.is_closed() {
                    continue;
                }
                if job.deadline <= now {
                    let _ = job.reply.send(Err(RedisError::Timeout));
                    continue;
                }
                batch.push(job);
            }
            let Some(deadline) = batch.first().map(|job| job.deadline) else {
                self.spare.push(batch);
                continue;
            };
            link.encode_batch(&batch);
            link.packed.clear();
            link.command.write_packed_command(&mut link.packed);
            let written = tokio::time::timeout_at(deadline, link.wire.write(&link.packed)).await;
            self.batches += 1;
            self.on_wire += batch.len();
            self.sent.push_back(Sent::Batch {
                jobs: batch,
                retried: false,
            });
            self.after_write(link, written);
        }
    }

    /// What a write to the wire left: on a failure (the socket dropped by
    /// `Wire::write`, or a deadline passed mid-write) every command on the
    /// wire fails, since the replies owed on it will never come.
    fn after_write(
        &mut self,
        link: &mut Link,
        written: Result<Result<(), redis::RedisError>, tokio::time::error::Elapsed>,
    ) {
        match written {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.fail_all(&RedisError::Redis(e)),
            Err(_) => {
                link.wire.fail();
                self.fail_all(&RedisError::Timeout);
            }
        }
    }

    /// Hands `reply` to the oldest command on the wire. Returns whether
    /// callers were answered.
    async fn answer(&mut self, link: &mut Link, reply: WireReply) -> bool {
        let Some(sent) = self.sent.pop_front() else {
            return false;
        };
        let (jobs, retried) = match sent {
            Sent::Load => {
                self.load_error = match reply {
                    WireReply::Error(message) => Some(message),
                    _ => None,
                };
                return false;
            }
            Sent::Batch { jobs, retried } => (jobs, retried),
        };
        self.batches -= 1;
        self.on_wire -= jobs.len();
        let result = match reply {
            WireReply::Bulk { start, len } => {
                parse(link.wire.bulk(start, len), jobs.len(), &mut self.replies)
            }
            WireReply::Error(message) if message.starts_with("NOSCRIPT") && !retried => {
                // Redis lost the script (a restart, `SCRIPT FLUSH`): load
                // it and send the batch again, behind whatever is on the
                // wire. Those batches met the same missing script and are
                // sent again in their turn, so the order holds (unless
                // another client loaded the script in between, when a
                // later batch may run before this one's second sending:
                // all of them were waiting at once, either order is one
                // they could have arrived in).
                self.resend(link, jobs).await;
                return false;
            }
            WireReply::Error(message) => {
                let message = match self.load_error.take() {
                    Some(load) if message.starts_with("NOSCRIPT") => load,
                    _ => message,
                };
                Err(RedisError::Redis(server_error(message)))
            }
            other => Err(RedisError::BadReply(format!("batch reply: {other:?}"))),
        };
        self.finish(jobs, result);
        true
    }

    /// `SCRIPT LOAD`, then `jobs` again.
    async fn resend(&mut self, link: &mut Link, jobs: Vec<Job>) {
        let Some(deadline) = jobs.first().map(|job| job.deadline) else {
            self.spare.push(jobs);
            return;
        };
        let load = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(link.batch.source.as_str())
            .get_packed_command();
        link.encode_batch(&jobs);
        link.packed.clear();
        link.command.write_packed_command(&mut link.packed);
        let written = tokio::time::timeout_at(deadline, async {
            link.wire.write(&load).await?;
            link.wire.write(&link.packed).await
        })
        .await;
        self.batches += 1;
        self.on_wire += jobs.len();
        self.sent.push_back(Sent::Load);
        self.sent.push_back(Sent::Batch {
            jobs,
            retried: true,
        });
        self.after_write(link, written);
    }

    /// Answers a batch's callers with `result`'s replies, or all with its
    /// error.
    fn finish(&mut self, mut jobs: Vec<Job>, result: Result<(), RedisError>) {
        match result {
            Ok(()) => {
                for (job, reply) in jobs.drain(..).zip(self.replies.drain(..)) {
                    // The caller may have timed out and gone: nothing to do.
                    let _ = job.reply.send(reply);
                }
            }
            Err(error) => {
                for job in jobs.drain(..) {
                    let _ = job.reply.send(Err(copy(&error)));
                }
            }
        }
        self.replies.clear();
        self.spare.push(jobs);
    }

    /// The socket was dropped: every batch on it fails with `error` (a
    /// batch whose reply is lost may or may not have run; it is not sent
    /// again, which could decide it twice).
    fn fail_all(&mut self, error: &RedisError) {
        while let Some(sent) = self.sent.pop_front() {
            if let Sent::Batch { jobs, .. } = sent {
                self.finish(jobs, Err(copy(error)));
            }
        }
        self.batches = 0;
        self.on_wire = 0;
        self.load_error = None;
    }
}

/// The same failure for every request of a failed batch.
fn copy(error: &RedisError) -> RedisError {
    match error {
        RedisError::Timeout => RedisError::Timeout,
        RedisError::Redis(e) => RedisError::Redis(e.clone()),
        other => RedisError::BadReply(other.to_string()),
    }
}

/// Reads the batch script's reply (see [`batch_script`]) into `out`, one
/// entry per record: the decision, or an error reply's message.
fn parse(
    text: &[u8],
    records: usize,
    out: &mut Vec<Result<Reply, RedisError>>,
) -> Result<(), RedisError> {
    let bad = |what: &str| RedisError::BadReply(format!("batch reply: {what}"));
    let mut rest = text;
    for _ in 0..records {
        if let Some(error) = rest.strip_prefix(b"!") {
            let colon = error
                .iter()
                .position(|&b| b == b':')
                .ok_or_else(|| bad("no length"))?;
            let len = std::str::from_utf8(&error[..colon])
                .ok()
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| bad("bad length"))?;
            let message = error
                .get(colon + 1..colon + 1 + len)
                .ok_or_else(|| bad("short message"))?;
            out.push(Err(RedisError::BadReply(format!(
                "script error: {}",
                String::from_utf8_lossy(message)
            ))));
            rest = error
                .get(colon + 1 + len..)
                .and_then(|r| r.strip_prefix(b"\n"))
                .ok_or_else(|| bad("no line end"))?;
            continue;
        }
        let mut reply = [0; 6];
        for (i, slot) in reply.iter_mut().enumerate() {
            let end = if i == 5 { b'\n' } else { b' ' };
            let (value, after) = integer(rest, end).ok_or_else(|| bad("not an integer"))?;
            *slot = value;
            rest = after;
        }
        out.push(Ok(reply));
    }
    if !rest.is_empty() {
        return Err(bad("wrong length"));
    }
    Ok(())
}

/// A decimal `i64` at the start of `text`, ended by `end`, and what follows
/// `end`.
fn integer(text: &[u8], end: u8) -> Option<(i64, &[u8])> {
    let stop = text.iter().position(|&b| b == end)?;
    let (digits, negative) = match text[..stop].strip_prefix(b"-") {
        Some(digits) => (digits, true),
        None => (&text[..stop], false),
    };
    if digits.is_empty() {
        return None;
    }
    let mut value: i64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        // Negative accumulation reaches i64::MIN too.
        value = value.checked_mul(10)?.checked_sub(i64::from(b - b'0'))?;
    }
    let value = if negative {
        value
    } else {
        value.checked_neg()?
    };
    Some((value, &text[stop + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str, records: usize) -> Result<Vec<Result<Reply, RedisError>>, RedisError> {
        let mut out = Vec::new();
        parse(text.as_bytes(), records, &mut out).map(|()| out)
    }

    #[test]
    fn replies_and_error_replies_go_to_their_requests() {
        let text = "1 5 4 10 0 0\n!25:ERR cost exceeds capacity\n0 5 0 7 3 0\n-1 9223372036854775807 -9223372036854775808 0 0 0\n";
        let replies = parsed(text, 4).unwrap();
        assert_eq!(replies[0].as_ref().unwrap(), &[1, 5, 4, 10, 0, 0]);
        assert!(
            matches!(&replies[1], Err(RedisError::BadReply(m)) if m.ends_with("ERR cost exceeds capacity"))
        );
        assert_eq!(replies[2].as_ref().unwrap(), &[0, 5, 0, 7, 3, 0]);
        assert_eq!(
            replies[3].as_ref().unwrap(),
            &[-1, i64::MAX, i64::MIN, 0, 0, 0]
        );
        // A message may hold the separators.
        let replies = parsed("!6:a:\n1 2\n", 1).unwrap();
        assert!(matches!(&replies[0], Err(RedisError::BadReply(m)) if m.ends_with("a:\n1 2")));
    }

    #[test]
    fn malformed_replies_are_refused() {
        for (text, records) in [
            ("1 2 3\n", 1),
            ("1 2 3 4 5 6\n", 2),
            ("1 2 3 4 5 6\n1 2 3 4 5 6\n", 1),
            ("1 2 3 4 5 6", 1),
            ("1 2 x 4 5 6\n", 1),
            ("1 2  4 5 6\n", 1),
            ("1 2 - 4 5 6\n", 1),
            ("9223372036854775808 2 3 4 5 6\n", 1),
            ("!9:short\n", 1),
            ("!x:message\n", 1),
            ("!3:abc", 1),
        ] {
            assert!(parsed(text, records).is_err(), "{text:?}");
        }
    }

    #[test]
    fn the_wrapper_keeps_the_script_whole() {
        let wrapped = batch_script("return {1, 2, 3, 4, 5, 6}");
        assert!(
            wrapped
                .starts_with("local function decide(KEYS, ARGV)\nreturn {1, 2, 3, 4, 5, 6}\nend\n")
        );
    }
}
