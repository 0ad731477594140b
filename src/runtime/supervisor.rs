//! The supervisor every long-running task is spawned through.

use std::future::Future;
use std::sync::{Arc, Mutex};

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
pub(crate) struct Supervisor {
    tracker: TaskTracker,
    failed: CancellationToken,
    first: Arc<Mutex<Option<String>>>,
}

impl Supervisor {
    /// Spawns `task` (tracked: the drain waits for it); a panic in it fails the supervisor.
    pub(crate) fn spawn<F>(&self, name: impl Into<String>, task: F)
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
    pub(crate) fn fail(&self, name: &str, why: &str) {
        let message = format!("{name} panicked: {why}");
        error!(task = name, error = why, "a task panicked; stopping the process");
        self.first.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(message);
        self.failed.cancel();
    }

    /// Resolves once a task has panicked.
    pub(crate) async fn failed(&self) {
        self.failed.cancelled().await
    }

    /// The first failure, if any.
    pub(crate) fn failure(&self) -> Option<String> {
        self.first.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// No more tasks will be spawned.
    pub(crate) fn close(&self) {
        self.tracker.close();
    }

    /// Waits for every task.
    pub(crate) async fn wait(&self) {
        self.tracker.wait().await
    }

    /// Tasks still running.
    pub(crate) fn len(&self) -> usize {
        self.tracker.len()
    }
}

/// A panic's message, when it carried one.
pub(crate) fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(text) => *text,
        Err(payload) => payload.downcast_ref::<&str>().map_or_else(|| "(no message)".to_owned(), |s| (*s).to_owned()),
    }
}

/// Waits for every task of `set`; a task that panicked panics the caller with its message, so
/// a component's supervisor sees it (a loop of a relay or worker must not end silently).
pub(crate) async fn join_loops(set: &mut tokio::task::JoinSet<()>) {
    while let Some(result) = set.join_next().await {
        if let Err(e) = result
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
