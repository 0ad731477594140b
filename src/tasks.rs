//! Loop shapes shared by the components: work done under a renewed lease, periodic work, and
//! the supervisor every long-running task is spawned through.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior, interval, interval_at};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::error;

/// Spawns the app's long-running tasks, each by name, and notices when one panics.
///
/// A panicked loop is not restarted: a panic is a bug, and a loop restarted in place would meet
/// the same state again, perhaps in a tight loop, while the process looked healthy. Instead the
/// first panic is recorded and [`failed`](Supervisor::failed) fires: the app drains the other
/// tasks (whatever they hold is released or left to lapse, as on SIGTERM) and exits with an
/// error naming the task, so the orchestrator restarts the process and the crash is seen
/// (invariant 13).
#[derive(Clone, Default)]
pub struct Supervisor {
    tracker: TaskTracker,
    failed: CancellationToken,
    first: Arc<Mutex<Option<String>>>,
}

impl Supervisor {
    /// Spawns `task` (tracked: the drain waits for it); a panic in it fails the supervisor.
    pub fn spawn<F>(&self, name: impl Into<String>, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (name, supervisor) = (name.into(), self.clone());
        self.tracker.spawn(async move {
            if let Err(e) = tokio::spawn(task).await
                && e.is_panic()
            {
                supervisor.fail(&name, &panic_message(e.into_panic()));
            }
        });
    }

    /// Records that `name` failed beyond recovery (the first failure is kept) and fires `failed`.
    pub fn fail(&self, name: &str, why: &str) {
        let message = format!("{name} panicked: {why}");
        error!(task = name, error = why, "a task panicked; stopping the process");
        self.first.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(message);
        self.failed.cancel();
    }

    /// Resolves once a task has panicked.
    pub async fn failed(&self) {
        self.failed.cancelled().await
    }

    /// The first failure, if any.
    pub fn failure(&self) -> Option<String> {
        self.first.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// No more tasks will be spawned.
    pub fn close(&self) {
        self.tracker.close();
    }

    /// Waits for every task.
    pub async fn wait(&self) {
        self.tracker.wait().await
    }

    /// Tasks still running.
    pub fn len(&self) -> usize {
        self.tracker.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tracker.is_empty()
    }
}

/// A panic's message, when it carried one.
pub fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(text) => *text,
        Err(payload) => payload.downcast_ref::<&str>().map_or_else(|| "(no message)".to_owned(), |s| (*s).to_owned()),
    }
}

/// Waits for every task of `set`; a task that panicked panics the caller with its message, so
/// a component's supervisor sees it (a loop of a relay or worker must not end silently).
pub async fn join_loops(set: &mut tokio::task::JoinSet<()>) {
    while let Some(result) = set.join_next().await {
        if let Err(e) = result
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

/// Runs `work` while `renew` runs every third of `lease`, so rows held by slow work are not
/// taken over. Returns `None` if `abandon` fires first (the shutdown drain is over); the work
/// is then dropped and its rows are the caller's to release.
///
/// The renewals run beside the work, never in its way: a renewal may wait for row locks the
/// work's own open transaction holds, and that transaction must be able to go on and commit
/// (found by the chaos run: a renewal awaited in line deadlocked a worker against itself).
pub async fn under_lease<F, R, RF>(lease: Duration, abandon: &CancellationToken, renew: R, work: F) -> Option<F::Output>
where
    F: Future,
    R: Fn() -> RF,
    RF: Future<Output = ()>,
{
    let every = lease / 3;
    let renewals = async {
        let mut ticker = interval_at(Instant::now() + every, every);
        loop {
            ticker.tick().await;
            renew().await;
        }
    };
    tokio::pin!(work, renewals);
    tokio::select! {
        biased;
        output = &mut work => Some(output),
        _ = abandon.cancelled() => None,
        _ = &mut renewals => unreachable!("renewals never end"),
    }
}

/// Calls `tick` at once and then every `period` until `shutdown`; a slow tick delays the next
/// instead of piling up.
pub async fn every<F, Fut>(period: Duration, shutdown: &CancellationToken, mut tick: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut ticker = interval(period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => tick().await,
            _ = shutdown.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::Notify;

    #[tokio::test]
    async fn a_panicking_task_fails_the_supervisor_with_its_name_and_message() {
        let supervisor = Supervisor::default();
        supervisor.spawn("relay audit", async {});
        supervisor.spawn("worker w", async {
            let mut loops = tokio::task::JoinSet::new();
            loops.spawn(async { panic!("a loop broke") });
            join_loops(&mut loops).await;
        });
        supervisor.failed().await;
        assert_eq!(supervisor.failure().as_deref(), Some("worker w panicked: a loop broke"));
        supervisor.close();
        supervisor.wait().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_waits_does_not_hold_up_the_work() {
        // The renewal blocks until the work finishes (as on a row lock the work holds).
        let done = Arc::new(Notify::new());
        let renew = || {
            let done = done.clone();
            async move { done.notified().await }
        };
        let work = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            done.notify_waiters();
            42
        };
        let out = under_lease(Duration::from_secs(3), &CancellationToken::new(), renew, work).await;
        assert_eq!(out, Some(42));
    }
}
