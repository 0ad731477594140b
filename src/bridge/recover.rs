//! What the bridge does besides reading: claim entries left pending by dead consumers, delete
//! long-idle consumers, sample the group's lag and pending gauges.

use std::collections::HashMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::StreamBridge;
use crate::store::inbox::InboxStore;
use crate::stream::read::RawEntry;
use crate::stream::redis::group::GroupError;

impl<S: InboxStore> StreamBridge<S> {
    /// Deliveries so far of this consumer's own pending entries (re-read after a restart), so
    /// an entry that keeps killing the bridge reaches the delivery limit.
    pub(super) async fn deliveries(&self, entries: &[RawEntry]) -> HashMap<String, u64> {
        let (Some(first), Some(last)) = (entries.first(), entries.last()) else { return HashMap::new() };
        let range = (first.id.as_str(), last.id.as_str());
        let count = entries.len() as u32;
        match self.group.pending(Duration::ZERO, range, count, Some(&self.group.consumer)).await {
            Ok(pending) => pending.into_iter().map(|p| (p.id, p.deliveries)).collect(),
            Err(e) => {
                debug!(error = %e, "could not read delivery counts");
                HashMap::new()
            }
        }
    }

    /// Claims entries idle longer than `claim_idle` on any consumer and handles them; deletes
    /// consumers idle for `delete_idle_consumers_after` with nothing pending.
    /// At most `count` entries are claimed at a time (the read budget: claimed entries come
    /// back whole).
    pub(super) async fn recover(&self, shutdown: &CancellationToken, count: u32) {
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            let idle = self.config.claim_idle;
            let pending = match self.group.pending(idle, ("-", "+"), count, None).await {
                Ok(pending) if pending.is_empty() => break,
                Ok(pending) => pending,
                Err(GroupError::NoGroup(_)) => return,
                Err(e) => {
                    debug!(error = %e, "reading the pending list failed");
                    return;
                }
            };
            let deliveries: HashMap<String, u64> = pending.iter().map(|p| (p.id.clone(), p.deliveries)).collect();
            let ids: Vec<String> = pending.iter().map(|p| p.id.clone()).collect();
            match self.group.claim(idle, &ids).await {
                Ok(entries) if entries.is_empty() => break,
                Ok(entries) => {
                    info!(stream = %self.source.key, entries = entries.len(), "claimed entries idle on other consumers");
                    self.deps.metrics.claimed.inc_by(entries.len() as u64);
                    // XCLAIM counted one more delivery.
                    let counted = deliveries.into_iter().map(|(id, n)| (id, n + 1)).collect();
                    self.handle(entries, &counted).await;
                }
                Err(e) => {
                    debug!(error = %e, "claiming idle entries failed");
                    return;
                }
            }
        }
        self.delete_idle_consumers().await;
    }

    async fn delete_idle_consumers(&self) {
        let Ok(idle) = self.group.idle_consumers(self.config.delete_idle_consumers_after).await else { return };
        for name in idle {
            match self.group.delete_consumer(&name).await {
                Ok(()) => info!(stream = %self.source.key, consumer = %name, "deleted an idle consumer"),
                Err(e) => {
                    warn!(stream = %self.source.key, consumer = %name, error = %e, "could not delete an idle consumer")
                }
            }
        }
    }

    /// Samples lag, pending count and the oldest pending entry's idle time; probes the
    /// database so `/readyz` notices an outage while the stream is quiet.
    pub async fn sample(&self, interval: Duration, shutdown: CancellationToken) {
        crate::tasks::every(interval, &shutdown, || self.sample_once()).await
    }

    async fn sample_once(&self) {
        let m = &self.deps.metrics;
        match self.group.info().await {
            Ok(info) => {
                m.pending.set(info.pending as i64);
                m.lag.set(info.lag.unwrap_or(0) as i64);
                self.deps.health.set_stream_ok(true);
            }
            Err(GroupError::NoGroup(_)) => self.deps.health.set_stream_ok(true),
            Err(_) => self.deps.health.set_stream_ok(false),
        }
        if let Ok(oldest) = self.group.oldest_pending_idle().await {
            m.oldest_pending.set(oldest.unwrap_or_default().as_secs_f64());
        }
        self.deps.health.set_source_ok(self.deps.store.ping().await.is_ok());
    }
}
