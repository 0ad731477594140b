//! Work done every so often until shutdown (gauge samples, retention, trimming).

use std::future::Future;
use std::time::Duration;

use tokio::time::{MissedTickBehavior, interval};
use tokio_util::sync::CancellationToken;

/// Calls `tick` at once and then every `period` until `shutdown`; a slow tick delays the next
/// instead of piling up. Shutdown abandons a tick under way (a sample waiting on a broker's
/// timeout must not hold the drain): each is work the next period does again, and what it
/// wrote in a transaction is rolled back.
pub(crate) async fn every<F, Fut>(period: Duration, shutdown: &CancellationToken, mut tick: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut ticker = interval(period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // Shutdown first: after a slow tick the next is due at once, and would otherwise
            // win half the time.
            biased;
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = tick() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::Notify;

    use super::*;

    #[tokio::test]
    async fn shutdown_abandons_a_tick_that_never_ends() {
        let (shutdown, started) = (CancellationToken::new(), Arc::new(Notify::new()));
        let runs = {
            let (shutdown, started) = (shutdown.clone(), started.clone());
            tokio::spawn(async move {
                every(Duration::from_secs(1), &shutdown, || {
                    started.notify_one();
                    std::future::pending::<()>()
                })
                .await
            })
        };
        started.notified().await;
        shutdown.cancel();
        runs.await.expect("every returned");
    }
}
