//! One locked turn (`claim = "locked"`): the batch's rows are locked by an open transaction
//! while they are appended; their settles run in that transaction, which then commits. Nothing
//! is written before the append, so a turn that ends early — the broker down for the whole
//! batch, the drain time spent, the relay killed or hung — leaves every row as it was.

use std::time::Instant;

use tracing::{trace, warn};

use super::Relay;
use super::batch::Turn;
use crate::broker::EventStream;
use crate::error::error_chain;
use crate::relay::outbox::{ClaimedRow, LockedBatch, OutboxStore};
use crate::telemetry::traces::EventSpan;

impl<S: OutboxStore, P: EventStream> Relay<S, P> {
    pub(super) async fn process_locked(&self, claimant: &str, rows: Vec<ClaimedRow>, batch: LockedBatch) -> Turn {
        let started = Instant::now();
        let metrics = &self.deps.metrics;
        let mut span = EventSpan::root("handoff.relay.batch");
        span.set("handoff.rows", rows.len() as i64);
        let (mut settlement, sendable, entries) = self.sort_claimed(rows);
        let outcomes = tokio::select! {
            outcomes = self.append_entries(&entries, &span) => outcomes,
            _ = self.deps.abandon.cancelled() => {
                // Dropping the batch rolls its transaction back: the rows are untouched.
                warn!(rows = sendable.len(), "shutdown drain time spent while appending; rolling the locked batch back");
                drop(batch);
                return Turn::default();
            }
        };
        let mut turn = self.sort_outcomes(&sendable, &entries, outcomes, started, &mut settlement);
        self.step_aside(&mut turn, &mut settlement).await;
        let appended = started.elapsed();
        let (delivered, failed, deferred) = (&settlement.delivered, &settlement.failed, &settlement.deferred);
        let released = settlement.released.len() + deferred.rows.len();
        span.event("appended");
        match batch.commit(claimant, delivered, failed, deferred).await {
            Ok(()) => {
                metrics.published.inc_by(delivered.len() as u64);
                metrics.released.inc_by(released as u64);
            }
            // The transaction is gone and took every settle with it: the rows are as they were
            // before the turn, due again, and are appended again (deduplication covers that).
            Err(error) => {
                metrics.source_up.set(0);
                self.deps.health.set_source_ok(false);
                warn!(error = %error_chain(&error), rows = sendable.len(), "the locked batch did not commit; its rows stay pending and are appended again");
            }
        }
        span.event("settled");
        let settled = started.elapsed();
        metrics.cycle.observe(settled.as_secs_f64());
        trace!(
            append_ms = appended.as_secs_f64() * 1e3,
            settle_ms = (settled - appended).as_secs_f64() * 1e3,
            "locked batch done"
        );
        turn
    }
}
