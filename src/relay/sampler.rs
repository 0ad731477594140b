//! Samples a relay's query-backed gauges on an interval and probes both ends for `/readyz`, so
//! an idle relay still notices that Redis or the database went away.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::Relay;
use crate::broker::EventStream;
use crate::error::error_chain;
use crate::relay::outbox::OutboxStore;

impl<S: OutboxStore, P: EventStream> Relay<S, P> {
    /// Runs until `shutdown`.
    pub(crate) async fn sample(&self, interval: Duration, shutdown: CancellationToken) {
        crate::runtime::periodic::every(interval, &shutdown, || self.sample_once()).await
    }

    async fn sample_once(&self) {
        let metrics = &self.deps.metrics;
        match self.deps.store.stats().await {
            Ok(Some(stats)) => {
                metrics.pending_rows.set(stats.pending);
                metrics.in_flight_rows.set(stats.in_flight);
                metrics.dead_rows.set(stats.dead);
                metrics.oldest_pending_age.set(stats.oldest_pending_age);
                self.mark_source(true);
            }
            Ok(None) => {}
            Err(error) => {
                debug!(error = %error_chain(&error), "sampling the outbox failed");
                self.mark_source(false);
            }
        }
        let reachable = self.deps.stream.ping().await.is_ok();
        self.stream_health(reachable);
    }

    fn mark_source(&self, ok: bool) {
        self.deps.metrics.source_up.set(ok.into());
        self.deps.health.set_source_ok(ok);
    }
}
