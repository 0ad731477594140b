//! Low-latency wake-up: a dedicated connection LISTENs on the relay's channel and rings the
//! relay's claim loops on every notification. Polling stays as the fallback; after a reconnect
//! the listener rings once, since notifications sent while it was away are gone.

use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::relay::outbox::notifications;
use crate::runtime::backoff::BackoffConfig;
use crate::runtime::backoff::Retrier;
use crate::store::config::DatabaseConfig;
use crate::telemetry::throttle::Throttle;

/// Wakes one idle claim loop per ring: one claim picks up what the inserts brought (a full
/// batch makes that loop claim again at once), and the other loops are not stirred into empty
/// claims that compete for the same rows. A ring while every loop is busy is kept, so the next
/// loop to go idle claims at once: no notification falls between two claims.
#[derive(Default)]
pub(crate) struct Wake {
    notify: Notify,
}

impl Wake {
    pub(crate) fn ring(&self) {
        self.notify.notify_one();
    }

    /// Returns at the next ring, or at once if one came while no loop was waiting.
    pub(crate) async fn wait(&self) {
        self.notify.notified().await
    }
}

/// Keeps a LISTEN connection up until `shutdown`, ringing `wake` on each notification.
pub(crate) async fn listen(
    database: DatabaseConfig,
    channel: String,
    wake: std::sync::Arc<Wake>,
    shutdown: CancellationToken,
) {
    let mut retrier = Retrier::new(BackoffConfig::outage_default());
    let mut errors = Throttle::new(Duration::from_secs(30));
    while !shutdown.is_cancelled() {
        let listening = || {
            info!(%channel, "listening for outbox inserts");
            // Rows inserted while no one listened: claim once after (re)connecting.
            wake.ring();
        };
        match notifications(&database, &channel, listening, || wake.ring(), &shutdown).await {
            Ok(()) => retrier.succeeded(),
            Err(error) => {
                if let Some(suppressed) = errors.allow() {
                    let error = crate::error::error_chain(&error);
                    warn!(%channel, %error, suppressed, "LISTEN connection lost; polling until it is back");
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(retrier.failed()) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_ring_between_claims_is_not_lost() {
        let wake = Wake::default();
        wake.ring();
        // No waiter at the time of the ring, yet the wait returns at once.
        tokio::time::timeout(Duration::from_secs(5), wake.wait()).await.expect("wait returned");
    }
}
