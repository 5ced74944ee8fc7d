//! The background task of a synced or leased limiter: at most one per
//! limiter, woken or stopped through its [`Control`].

use super::RedisError;
use crate::sync::{Arc, AtomicU64, Mutex, Ordering};

/// The background task's handle.
struct Task {
    control: Arc<Control>,
    join: tokio::task::JoinHandle<()>,
}

/// Where a limiter keeps its background task (the synced limiter's and the
/// leased limiter's alike): at most one runs; dropping the slot stops it.
#[derive(Default)]
pub(crate) struct TaskSlot(Mutex<Option<Task>>);

impl TaskSlot {
    /// Spawns `run(control)` on the current tokio runtime unless a task is
    /// running; `control` is made only when one is spawned.
    pub(crate) fn start<F>(
        &self,
        control: impl FnOnce() -> Arc<Control>,
        run: impl FnOnce(Arc<Control>) -> F,
    ) -> Result<(), RedisError>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut task = self.0.lock();
        if task.as_ref().is_some_and(|t| !t.join.is_finished()) {
            return Ok(());
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| RedisError::Config("start() needs a tokio runtime"))?;
        let control = control();
        let join = runtime.spawn(run(Arc::clone(&control)));
        *task = Some(Task { control, join });
        Ok(())
    }

    /// Stops the task and waits for it (a round in progress finishes).
    pub(crate) async fn stop(&self) {
        let task = self.0.lock().take();
        if let Some(task) = task {
            task.control.stop();
            // A task that panicked or was cancelled has stopped as well.
            let _ = task.join.await;
        }
    }
}

impl Drop for TaskSlot {
    fn drop(&mut self) {
        if let Some(task) = self.0.lock().take() {
            task.control.stop();
        }
    }
}

/// Wakes or stops a background task.
#[derive(Debug, Default)]
pub(crate) struct Control {
    pub(crate) wake: tokio::sync::Notify,
    stop: AtomicU64,
}

impl Control {
    pub(crate) fn stop(&self) {
        // Relaxed: the task reads the flag after `notified` returns, and
        // Notify's permit orders the two (it synchronizes like a lock).
        self.stop.store(1, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// Clears a stop, for a task started again after `stop` has joined
    /// the previous one.
    pub(crate) fn reset(&self) {
        self.stop.store(0, Ordering::Relaxed);
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed) == 1
    }
}
