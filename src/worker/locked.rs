//! One locked turn (`claim = "locked"`): the batch's rows are locked by an open transaction in
//! which their handler statements run and they are marked PROCESSED before it commits. Nothing
//! is written until then, so a turn that ends early — the worker killed or hung, the drain time
//! spent, the database gone — leaves every row as it was. A batch with a row at fault (a value
//! the handler refuses, a missing field, no handler) is rolled back whole and taken again by a
//! leased turn at once, whose savepoints find that row and record its failure as usual.

use std::time::Instant;

use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{LockedOutcome as Outcome, Worker};
use crate::error::error_chain;
use crate::telemetry::traces::{self, EventSpan};
use crate::worker::inbox::{InboxRow, LockedInbox};

impl Worker {
    pub(super) async fn process_locked(
        &self,
        owner: &str,
        rows: Vec<InboxRow>,
        batch: LockedInbox,
        shutdown: &CancellationToken,
    ) -> Outcome {
        let started = Instant::now();
        // Dropping the batch rolls its transaction back: the rows are untouched.
        if shutdown.is_cancelled() {
            return Outcome::Abandoned;
        }
        let spans: Vec<EventSpan> =
            if traces::enabled() { rows.iter().map(|row| self.handler_span(row)).collect() } else { Vec::new() };
        let mut items = Vec::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            let trace = spans.get(i).and_then(EventSpan::traceparent);
            // SQL handlers only bind values here (a worker with an HTTP handler is never locked).
            match self.prepare(row, trace.as_deref()).await {
                Ok(statements) => items.push((row, statements)),
                Err(_) => {
                    debug!(event_id = %row.event_id, "a row of the locked batch cannot be applied; leaving the batch to a leased turn");
                    return Outcome::Refused;
                }
            }
        }
        let applied = tokio::select! {
            applied = batch.apply(owner, &items) => applied,
            _ = self.deps.abandon.cancelled() => {
                warn!(rows = items.len(), "shutdown drain time spent while applying; rolling the locked batch back");
                return Outcome::Abandoned;
            }
        };
        match applied {
            Ok(true) => {
                self.deps.health.set_work_ok(true);
                let seconds = started.elapsed().as_secs_f64() / rows.len().max(1) as f64;
                for row in &rows {
                    self.deps.metrics.processed(self.handler_label(&row.event_type), seconds);
                }
                Outcome::Committed
            }
            Ok(false) => {
                debug!(
                    rows = items.len(),
                    "a handler refused a row of the locked batch; leaving the batch to a leased turn"
                );
                Outcome::Refused
            }
            Err(e) => {
                warn!(error = %error_chain(&e), rows = items.len(), "the inbox database failed the locked batch; its rows stay pending");
                self.deps.metrics.unavailable(e.outage_kind().unwrap_or(crate::store::OutageKind::Other));
                self.deps.health.set_work_ok(false);
                Outcome::Outage
            }
        }
    }
}
