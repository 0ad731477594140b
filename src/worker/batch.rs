//! One claimed batch: decide each row's effect, apply the SQL effects in one transaction (a
//! savepoint per row), then record the failures. HTTP effects are POSTed first; their rows are
//! then only marked PROCESSED in the same transaction.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::Worker;
use super::handler::Effect;
use super::http::Delivery;
use crate::error::error_chain;
use crate::runtime::backoff::delay;
use crate::runtime::claim_loop::Next;
use crate::telemetry::traces::{self, EventSpan};
use crate::worker::config::Unhandled;
use crate::worker::inbox::{Applied, ApplyError, BoundStatement, InboxRow, MissingField};
use opentelemetry::trace::SpanKind;

/// A row's fate when it is not (or no longer) part of the transaction.
pub(super) enum Failure {
    Retry(String),
    Dead(String),
    /// Its HTTP endpoint gave no verdict (down, overloaded, or no answer: `silent`): not the
    /// row's fault. It goes back untouched, and the batch ends in `Next::Backoff`: the loop waits
    /// out its outage backoff.
    Unavailable {
        error: String,
        silent: bool,
    },
}

impl Failure {
    fn error(&self) -> &str {
        match self {
            Failure::Retry(e) | Failure::Dead(e) | Failure::Unavailable { error: e, .. } => e,
        }
    }
}

impl Worker {
    /// Applies a leased batch: `Next::Backoff` when an HTTP endpoint gave no verdict (its rows
    /// went back untouched), else `Next::Continue`.
    pub(super) async fn process_batch(&self, owner: &str, rows: Vec<InboxRow>, shutdown: &CancellationToken) -> Next {
        let started = Instant::now();
        let held: Vec<(String, i64)> = rows.iter().map(InboxRow::held).collect();
        // One span per row, a child of the producer's trace context: what an HTTP handler
        // forwards as `traceparent`. They end when the batch is settled.
        let mut spans: Vec<EventSpan> =
            if traces::enabled() { rows.iter().map(|row| self.handler_span(row)).collect() } else { Vec::new() };
        let parents: Vec<Option<String>> =
            rows.iter().enumerate().map(|(i, _)| spans.get(i).and_then(EventSpan::traceparent)).collect();
        let work = async {
            let mut failures: Vec<(&InboxRow, Failure)> = Vec::new();
            let mut items: Vec<(&InboxRow, Vec<BoundStatement<'_>>)> = Vec::new();
            // Every row at once: an HTTP handler bounds its own requests in flight; SQL
            // handlers only bind values here.
            let prepared = futures_util::future::join_all(
                rows.iter().zip(&parents).map(|(row, trace)| self.prepare(row, trace.as_deref())),
            )
            .await;
            // A handler whose endpoint answered some of this batch's events is up: a row it did
            // not answer at all (a payload that hangs or crashes the receiver) counts an attempt,
            // so one such row cannot hold the worker in its outage backoff for ever. An answer
            // that the endpoint is down or overloaded (503, 429, …) never counts one.
            let answered: HashSet<&str> = rows
                .iter()
                .zip(&prepared)
                .filter(|(_, outcome)| matches!(outcome, Ok(_) | Err(Failure::Retry(_))))
                .map(|(row, _)| self.handler_label(&row.event_type))
                .collect();
            for (row, outcome) in rows.iter().zip(prepared) {
                if row.reclaimed {
                    self.deps.metrics.reclaims.inc();
                }
                match outcome {
                    Ok(statements) => items.push((row, statements)),
                    Err(Failure::Unavailable { error, silent: true })
                        if answered.contains(self.handler_label(&row.event_type)) =>
                    {
                        failures.push((row, Failure::Retry(format!("{error} (the endpoint answered other events)"))))
                    }
                    Err(failure) => failures.push((row, failure)),
                }
            }
            let applied = self.apply(owner, &items).await;
            (items, applied, failures)
        };
        if shutdown.is_cancelled() {
            self.release(owner, &held).await;
            return Next::Continue;
        }
        let Some((items, applied, failures)) = self.under_lease(owner, &held, work).await else {
            self.release(owner, &held).await;
            return Next::Continue;
        };
        let seconds = started.elapsed().as_secs_f64() / rows.len().max(1) as f64;
        // Rows whose HTTP endpoint gave no verdict: handed back untouched, below.
        let (waiting, mut failures): (Vec<_>, Vec<_>) =
            failures.into_iter().partition(|(_, failure)| matches!(failure, Failure::Unavailable { .. }));
        match applied {
            Ok(results) => {
                self.deps.health.set_work_ok(waiting.is_empty());
                for ((row, _), result) in items.iter().zip(results) {
                    match result {
                        Ok(Applied::Processed) => {
                            self.deps.metrics.processed(self.handler_label(&row.event_type), seconds)
                        }
                        Ok(Applied::Fenced) => {
                            self.deps.metrics.fenced.inc();
                            warn!(event_id = %row.event_id, "commit refused by the fence: another worker owns the row; effect rolled back");
                        }
                        Err(ApplyError::Handler { message, retry: true, .. }) => {
                            failures.push((row, Failure::Retry(message)))
                        }
                        Err(ApplyError::Handler { message, retry: false, .. }) => {
                            failures.push((row, Failure::Dead(message)))
                        }
                        // apply_batch fails as a whole on an outage; a row never carries one.
                        Err(ApplyError::Store(e)) => failures.push((row, Failure::Retry(e.to_string()))),
                    }
                }
            }
            // Not the rows' fault (the database is unreachable, read-only, missing a table or a
            // privilege): hand them back untouched, no attempt counted.
            Err(e) => {
                warn!(error = %error_chain(&e), rows = items.len(), "the inbox database failed the batch; releasing its rows");
                self.deps.metrics.unavailable(e.outage_kind().unwrap_or(crate::store::OutageKind::Other));
                self.deps.health.set_work_ok(false);
                let back: Vec<(String, i64)> = items.iter().map(|(r, _)| r.held()).collect();
                self.release(owner, &back).await;
            }
        }
        for (row, failure) in failures.iter().chain(&waiting) {
            if let Some(span) = rows.iter().position(|r| r.id == row.id).and_then(|i| spans.get_mut(i)) {
                span.fail(failure.error().to_owned());
            }
        }
        for (row, failure) in failures {
            self.record(owner, row, failure).await;
        }
        let Some((first, failure)) = waiting.first() else {
            return Next::Continue;
        };
        // Like an outage of the inbox: no attempt counted, readiness shows it (set above), and
        // the claim loop waits out its outage backoff before it claims (and posts) again.
        warn!(event_id = %first.event_id, error = %failure.error(), rows = waiting.len(), "an HTTP endpoint gave no verdict; its rows go back untouched and the worker backs off");
        for (row, _) in &waiting {
            self.deps.metrics.endpoint_unavailable(self.handler_label(&row.event_type));
        }
        let back: Vec<(String, i64)> = waiting.iter().map(|(row, _)| row.held()).collect();
        self.release(owner, &back).await;
        Next::Backoff
    }

    pub(super) fn handler_span(&self, row: &InboxRow) -> EventSpan {
        let headers = row.headers.to_string();
        let mut span = EventSpan::start("handoff.worker.handle", SpanKind::Consumer, Some(&headers), None);
        span.set("handoff.event_id", row.event_id.clone());
        span.set("handoff.event_type", row.event_type.clone());
        span.set("handoff.attempt", i64::from(row.attempts) + 1);
        span
    }

    /// The statements to run for `row` (none: only mark it), or why it fails without them.
    pub(super) async fn prepare<'a>(
        &'a self,
        row: &InboxRow,
        trace: Option<&str>,
    ) -> Result<Vec<BoundStatement<'a>>, Failure> {
        if row.expired_leases >= self.config.max_expired_leases {
            return Err(Failure::Dead(format!(
                "lease expired {} times: the row keeps its worker from finishing",
                row.expired_leases
            )));
        }
        let Some(handler) = self.handlers.iter().find(|h| h.serves(&row.event_type)) else {
            return match self.config.unhandled {
                Unhandled::Dead => Err(Failure::Dead(format!("no handler serves event type `{}`", row.event_type))),
                Unhandled::Skip => Ok(Vec::new()),
            };
        };
        match &handler.effect {
            Effect::Sql(statements) => statements
                .iter()
                .enumerate()
                .map(|(i, s)| s.bind(i, row))
                .collect::<Result<Vec<_>, MissingField>>()
                .map_err(|MissingField(name)| Failure::Dead(format!("the event has no value for :{name}"))),
            Effect::Http(http) => {
                let delivery = http.deliver(row, trace).await;
                // Each answer (or timeout) is progress: a batch of posts to a slow or silent
                // endpoint may outlast the loop's `stall_after`, and must not fail liveness.
                self.deps.health.beat();
                match delivery {
                    Delivery::Done => Ok(Vec::new()),
                    Delivery::Refused(e) => Err(Failure::Dead(e)),
                    Delivery::Failed(e) => Err(Failure::Retry(e)),
                    Delivery::Unavailable(error) => Err(Failure::Unavailable { error, silent: false }),
                    Delivery::NoAnswer(error) => Err(Failure::Unavailable { error, silent: true }),
                }
            }
        }
    }

    /// Applies the batch; if the database refuses it as a whole, row by row so the row at
    /// fault gets the error and the others still commit.
    async fn apply(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> crate::store::StoreResult<Vec<Result<Applied, ApplyError>>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        match self.deps.store.apply_batch(owner, items).await {
            Err(e) if e.is_about_the_data() && items.len() > 1 => {
                debug!(error = %error_chain(&e), "batch refused; applying row by row");
                let mut results = Vec::with_capacity(items.len());
                for item in items {
                    results.extend(self.deps.store.apply_batch(owner, std::slice::from_ref(item)).await?);
                }
                Ok(results)
            }
            other => other,
        }
    }

    async fn record(&self, owner: &str, row: &InboxRow, failure: Failure) {
        let (error, retry_in): (String, Option<Duration>) = match failure {
            Failure::Retry(error) if row.attempts + 1 < self.config.claim_loop.max_attempts => {
                self.deps.metrics.failed(self.handler_label(&row.event_type));
                (error, Some(delay(&self.config.claim_loop.backoff, row.attempts + 1)))
            }
            Failure::Retry(error) | Failure::Dead(error) => {
                self.deps.metrics.dead(self.handler_label(&row.event_type));
                (error, None)
            }
            // Not a failure of the row (`process_batch` hands these back together).
            Failure::Unavailable { .. } => {
                self.release(owner, &[row.held()]).await;
                return;
            }
        };
        let error = crate::error::storable(&error, self.config.error_max_len);
        debug!(event_id = %row.event_id, error = %error, dead = retry_in.is_none(), "handler failed");
        self.persist_failure(owner, row, &error, retry_in).await;
    }
}
