//! Work done every so often until shutdown (gauge samples, retention, trimming).

use std::future::Future;
use std::time::Duration;

use tokio::time::{MissedTickBehavior, interval};
use tokio_util::sync::CancellationToken;

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
