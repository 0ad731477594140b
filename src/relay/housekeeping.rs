//! Periodic work beside the claim loops: retention of delivered rows, and trimming streams only
//! below what every consumer group has acknowledged.

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::Relay;
use crate::broker::EventStream;
use crate::error::error_chain;
use crate::relay::outbox::OutboxStore;

impl<S: OutboxStore, P: EventStream> Relay<S, P> {
    /// Deletes delivered rows older than `retention.delivered_after` in batches of
    /// `retention.batch`, every `retention.interval`. DEAD rows are never purged here.
    pub(crate) async fn purge(&self, shutdown: CancellationToken) {
        let Some(retention) = self.config.retention.clone() else { return };
        loop {
            let mut total = 0;
            loop {
                match self.deps.store.purge(retention.delivered_after, retention.batch).await {
                    Ok(n) => {
                        total += n;
                        self.deps.metrics.purged.inc_by(n);
                        if n < u64::from(retention.batch) || shutdown.is_cancelled() {
                            break;
                        }
                    }
                    Err(e) => {
                        warn!(relay = %self.config.name, error = %error_chain(&e), "purging delivered rows failed");
                        break;
                    }
                }
            }
            if total > 0 {
                info!(relay = %self.config.name, rows = total, "purged delivered rows");
            }
            tokio::select! {
                _ = tokio::time::sleep(retention.interval) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// Every `trim.interval`, trims each stream this relay appended to below the oldest entry
    /// any consumer group still needs (pending, or not yet delivered to it).
    pub(crate) async fn trim_acknowledged(&self, shutdown: CancellationToken) {
        let Some(interval) = self.config.trim.as_ref().filter(|t| t.acknowledged()).map(|t| t.interval) else { return };
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = shutdown.cancelled() => return,
            }
            let streams = self.loss.streams(self.config.broker_loss.max_window.max(interval * 4));
            for stream in streams {
                match self.deps.stream.trim_acknowledged(&stream).await {
                    Ok(removed) => {
                        self.deps.metrics.trimmed.inc_by(removed);
                        debug!(%stream, removed, "trimmed below what every group acknowledged");
                    }
                    Err(e) => debug!(%stream, error = %e, "trim skipped"),
                }
            }
        }
    }
}
