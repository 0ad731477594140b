//! Work done under a lease that is renewed while it lasts.

use std::future::Future;
use std::time::Duration;

use tokio::time::{Instant, interval_at};
use tokio_util::sync::CancellationToken;

/// Runs `work` while `renew` runs every third of `lease`, so rows held by slow work are not
/// taken over. Returns `None` if `abandon` fires first (the shutdown drain is over); the work
/// is then dropped and its rows are the caller's to release.
///
/// The renewals run beside the work, never in its way: a renewal may wait for row locks the
/// work's own open transaction holds, and that transaction must be able to go on and commit
/// (found by the chaos run: a renewal awaited in line deadlocked a worker against itself).
pub(crate) async fn under_lease<F, R, RF>(
    lease: Duration,
    abandon: &CancellationToken,
    renew: R,
    work: F,
) -> Option<F::Output>
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use tokio::sync::Notify;

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
