//! Waiting that shutdown cuts short.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Sleeps for `duration`, or until `shutdown`, whichever comes first.
pub(crate) async fn sleep_or(duration: Duration, shutdown: &CancellationToken) {
    tokio::select! {
        _ = tokio::time::sleep(duration) => {}
        _ = shutdown.cancelled() => {}
    }
}
