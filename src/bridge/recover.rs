//! What the bridge does besides reading: claim entries left pending by dead consumers, delete
//! long-idle consumers, sample the group's lag and pending gauges.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::StreamBridge;
use crate::broker::group::{ConsumerGroup, GroupError};

impl<G: ConsumerGroup> StreamBridge<G> {
    /// Claims entries idle longer than `claim_idle` on any consumer and handles them; deletes
    /// consumers idle for `delete_idle_consumers_after` with nothing pending.
    /// At most `count` entries are claimed at a time (the read budget: claimed entries come
    /// back whole).
    pub(super) async fn recover(&self, shutdown: &CancellationToken, count: u32) {
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            match self.group.reclaim(self.config.claim_idle, count).await {
                Ok(entries) if entries.is_empty() => break,
                Ok(entries) => {
                    info!(stream = %self.source.key, entries = entries.len(), "claimed entries idle on other consumers");
                    self.deps.metrics.claimed.inc_by(entries.len() as u64);
                    self.redelivered(entries).await;
                }
                Err(GroupError::NoGroup(_)) => return,
                Err(e) => {
                    debug!(error = %e, "claiming idle entries failed");
                    return;
                }
            }
        }
        self.group.delete_idle_consumers(self.config.delete_idle_consumers_after).await;
        self.forget_old_counts().await;
    }

    /// Delivery counts not raised for `delete_idle_consumers_after` belong to entries that were
    /// acknowledged some other way (an operator, another bridge's version): forgotten, at most
    /// once every ten minutes.
    async fn forget_old_counts(&self) {
        {
            let mut last = self.counts_forgotten_at.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|at| at.elapsed() < Duration::from_secs(600)) {
                return;
            }
            *last = Some(std::time::Instant::now());
        }
        let age = self.config.delete_idle_consumers_after;
        match self.deps.store.forget_deliveries(&self.config.consumer, age).await {
            Ok(0) => {}
            Ok(n) => debug!(stream = %self.source.key, counts = n, "forgot old delivery counts"),
            Err(e) => debug!(error = %crate::error::error_chain(&e), "forgetting old delivery counts failed"),
        }
    }

    /// Samples lag, pending count and the oldest pending entry's idle time; probes the
    /// database so `/readyz` notices an outage while the stream is quiet.
    pub(crate) async fn sample(&self, interval: Duration, shutdown: CancellationToken) {
        crate::runtime::periodic::every(interval, &shutdown, || self.sample_once()).await
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
