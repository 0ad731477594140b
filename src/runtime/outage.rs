//! Waiting out an outage of the database while holding work that must not be dropped: a failure
//! to record, rows to hand back, entries to take over. The wait beats (waiting out an outage is
//! not being stuck: invariant 12) and backs off, until the work goes through or the shutdown
//! drain is over.

use std::future::Future;

use tokio_util::sync::CancellationToken;

use super::backoff::Retrier;
use crate::runtime::backoff::BackoffConfig;
use crate::telemetry::health::Component;

/// What to do after a failed attempt.
pub(crate) enum Failed<T> {
    /// Try again after the backoff.
    Retry,
    /// Stop trying, with this result.
    GiveUp(T),
}

/// Runs `attempt` until it succeeds, beating `health` before each try and backing off between
/// them; `failed` says, for each error, whether to try again. `None` if `abandon` fired while
/// it waited (the drain is over).
pub(crate) async fn retry_through<T, E, F, Fut>(
    health: &Component,
    abandon: &CancellationToken,
    backoff: &BackoffConfig,
    mut attempt: F,
    mut failed: impl FnMut(E) -> Failed<T>,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut retrier = Retrier::new(backoff.clone());
    loop {
        health.beat();
        match attempt().await {
            Ok(done) => return Some(done),
            Err(error) => match failed(error) {
                Failed::GiveUp(result) => return Some(result),
                Failed::Retry => {
                    tokio::select! {
                        _ = health.sleep(retrier.failed()) => {}
                        _ = abandon.cancelled() => return None,
                    }
                }
            },
        }
    }
}
