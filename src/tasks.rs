//! Loop shapes shared by the components: work done under a renewed lease, and periodic work.

use std::future::Future;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior, interval, interval_at};
use tokio_util::sync::CancellationToken;

/// Runs `work` while `renew` runs every third of `lease`, so rows held by slow work are not
/// taken over. Returns `None` if `abandon` fires first (the shutdown drain is over); the work
/// is then dropped and its rows are the caller's to release.
pub async fn under_lease<F, R, RF>(lease: Duration, abandon: &CancellationToken, renew: R, work: F) -> Option<F::Output>
where
    F: Future,
    R: Fn() -> RF,
    RF: Future<Output = ()>,
{
    let every = lease / 3;
    let mut ticker = interval_at(Instant::now() + every, every);
    tokio::pin!(work);
    loop {
        tokio::select! {
            biased;
            output = &mut work => return Some(output),
            _ = abandon.cancelled() => return None,
            _ = ticker.tick() => renew().await,
        }
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
