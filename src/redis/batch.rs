//! Coalescing concurrent decisions into one script call (single server).
//!
//! With one script call per decision, Redis spends most of each call on
//! what every call costs (reading the command, finding the script, entering
//! Lua, writing the reply), not on the decision itself, and the client
//! spends a channel hop and a wake-up per call. So decisions that are
//! waiting at the same moment go to Redis together: a driver task takes
//! every queued request (up to [`MAX_BATCH`]) and sends them as one
//! `EVALSHA` of the algorithm's script wrapped in a loop ([`batch_script`]).
//! Under one caller a batch is one request, as before; under many, a batch
//! is whatever queued while the previous one was on the wire, so batching
//! adds no waiting of its own.
//!
//! Redis runs a script atomically, so a batch decides its requests one
//! after the other, exactly as separate calls arriving in that order would:
//! every decision is the algorithm's script on the state the previous one
//! left. Only a single server is batched: on a Cluster a script may touch
//! one slot only, and calls there stay one per decision.

use super::RedisError;
use redis::Value;
use redis::aio::ConnectionManager;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

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
/// Redis calls). Returns six
/// values per record: the script's reply, or `-1` and the message of an
/// error reply followed by four zeros.
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
    out[#out + 1] = -1
    out[#out + 1] = r.err
    for j = 1, 4 do
      out[#out + 1] = 0
    end
  else
    for j = 1, 6 do
      out[#out + 1] = r[j]
    end
  end
end
return out
"
    )
}

/// One queued decision.
struct Job {
    keys: Vec<String>,
    now: i64,
    cost: u32,
    reply: oneshot::Sender<Result<Reply, RedisError>>,
}

/// The queue in front of the driver task; dropping it ends the task.
#[derive(Debug)]
pub(crate) struct Batcher {
    queue: mpsc::UnboundedSender<Job>,
}

impl Batcher {
    /// Starts the driver task on the current tokio runtime.
    pub(crate) fn start(
        connection: ConnectionManager,
        script: redis::Script,
        params: Vec<i64>,
        timeout: Duration,
    ) -> Batcher {
        let (queue, jobs) = mpsc::unbounded_channel();
        let call = Call {
            connection,
            script,
            params: params.into(),
            timeout,
        };
        tokio::spawn(call.run(jobs));
        Batcher { queue }
    }

    /// Queues one decision and waits for its reply (the caller bounds the
    /// wait with its timeout).
    pub(crate) async fn call(
        &self,
        keys: Vec<String>,
        now: i64,
        cost: u32,
    ) -> Result<Reply, RedisError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            keys,
            now,
            cost,
            reply,
        };
        let stopped = || RedisError::Config("the batching task stopped");
        self.queue.send(job).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// The driver: one batch on the wire at a time. While it is, new requests
/// queue and form the next batch, so batches grow with the load (a second
/// batch in flight halved the batch size and lowered throughput, measured
/// with `examples/redis_throughput.rs`).
struct Call {
    connection: ConnectionManager,
    script: redis::Script,
    params: Arc<[i64]>,
    timeout: Duration,
}

impl Call {
    async fn run(mut self, mut jobs: mpsc::UnboundedReceiver<Job>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        // Zero: every limiter clone (every sender) is gone.
        while jobs.recv_many(&mut batch, MAX_BATCH).await > 0 {
            self.send(&mut batch).await;
            // The callers just answered are runnable and about to ask
            // again: let them queue before the next batch is taken, or the
            // batches fragment into ones of a request or two.
            tokio::task::yield_now().await;
        }
    }

    /// Sends `batch` as one script call and hands out the replies,
    /// leaving `batch` empty.
    async fn send(&mut self, batch: &mut Vec<Job>) {
        let mut invocation = self.script.prepare_invoke();
        let per_record = batch.first().map_or(0, |job| job.keys.len());
        for job in batch.iter() {
            for key in &job.keys {
                invocation.key(key.as_str());
            }
        }
        invocation.arg(per_record).arg(self.params.len());
        for param in self.params.iter() {
            invocation.arg(*param);
        }
        for job in batch.iter() {
            invocation.arg(job.now).arg(job.cost);
        }
        let sent = tokio::time::timeout(
            self.timeout,
            invocation.invoke_async::<Value>(&mut self.connection),
        )
        .await;
        let replies = match sent {
            Err(_) => Err(RedisError::Timeout),
            Ok(Err(e)) if e.is_timeout() => Err(RedisError::Timeout),
            Ok(Err(e)) => Err(RedisError::Redis(e)),
            Ok(Ok(value)) => split(value, batch.len()),
        };
        match replies {
            Ok(replies) => {
                for (job, reply) in batch.drain(..).zip(replies) {
                    // The caller may have timed out and gone: nothing to do.
                    let _ = job.reply.send(reply);
                }
            }
            Err(error) => {
                for job in batch.drain(..) {
                    let _ = job.reply.send(Err(copy(&error)));
                }
            }
        }
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

/// Six values per record: the decision, or an error reply's message.
fn split(value: Value, records: usize) -> Result<Vec<Result<Reply, RedisError>>, RedisError> {
    let bad = |what: &str| RedisError::BadReply(format!("batch reply: {what}"));
    let Value::Array(values) = value else {
        return Err(bad("not an array"));
    };
    if values.len() != records * 6 {
        return Err(bad("wrong length"));
    }
    let int = |v: &Value| match v {
        Value::Int(n) => Some(*n),
        _ => None,
    };
    Ok(values
        .chunks(6)
        .map(|chunk| {
            if let [Value::Int(-1), message, ..] = chunk {
                let text = match message {
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    other => format!("{other:?}"),
                };
                return Err(RedisError::BadReply(format!("script error: {text}")));
            }
            let mut reply = [0; 6];
            for (slot, v) in reply.iter_mut().zip(chunk) {
                *slot = int(v).ok_or_else(|| bad("not an integer"))?;
            }
            Ok(reply)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_and_error_replies_go_to_their_requests() {
        let ints = |v: &[i64]| v.iter().map(|&n| Value::Int(n)).collect::<Vec<_>>();
        let mut values = ints(&[1, 5, 4, 10, 0, 0]);
        values.push(Value::Int(-1));
        values.push(Value::BulkString(b"ERR cost exceeds capacity".to_vec()));
        values.extend(ints(&[0, 0, 0, 0]));
        values.extend(ints(&[0, 5, 0, 7, 3, 0]));
        let replies = split(Value::Array(values), 3).unwrap();
        assert_eq!(replies[0].as_ref().unwrap(), &[1, 5, 4, 10, 0, 0]);
        assert!(matches!(&replies[1], Err(RedisError::BadReply(m)) if m.contains("exceeds")));
        assert_eq!(replies[2].as_ref().unwrap(), &[0, 5, 0, 7, 3, 0]);
        assert!(split(Value::Array(ints(&[1, 2, 3])), 1).is_err());
        assert!(split(Value::Int(1), 1).is_err());
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
