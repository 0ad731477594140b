//! One turn of a claim loop: sort the claimed rows, append, decide every row exactly one way
//! (the decisions are written by `settle`).
//!
//! Ordering that the invariants rest on:
//! - a row is marked delivered only with the entry id the broker returned for it (invariant 1);
//! - every settle presents claimant + token, so a late settle after a takeover changes nothing
//!   (invariant 2; the count of refused rows is logged and counted);
//! - an unreachable broker releases rows without touching attempts (invariant 6).

use std::time::Instant;

use tracing::{trace, warn};

use super::Relay;
use crate::broker::{AppendOutcome, Entry, EventStream};
use crate::fault::Point;
use crate::reasons::DeadReason;
use crate::relay::config::OnFailure;
use crate::relay::outbox::{ClaimedRow, Deferred, Delivered, Failure, OutboxStore, RowRef, Verdict};
use crate::runtime::backoff::delay;
use crate::telemetry::metrics::FailureReason;
use crate::telemetry::traces::{self, EventSpan};
use opentelemetry::trace::SpanKind;

/// What the loop needs to know about a finished turn.
#[derive(Default)]
pub(super) struct Turn {
    /// The broker was unreachable for every row that went to it (they were released).
    pub stream_outage: bool,
    /// Part of the broker was unreachable (a cluster shard failing over): its rows were
    /// released, the rest delivered.
    pub partial_outage: bool,
    /// The durability gate was not met for some rows (they were released).
    pub gate_missed: bool,
}

/// The longest the rows of a part of the broker that is down step aside (see
/// [`Relay::partial_outage`]): after it comes back they wait at most this long.
const DEFER_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// The longest error text a failed row keeps (`last_error`).
const ERROR_MAX_CHARS: usize = 2000;

/// Rows sorted by what happens to them.
#[derive(Default)]
pub(super) struct Settlement {
    pub delivered: Vec<Delivered>,
    pub failed: Vec<Failure>,
    pub released: Vec<RowRef>,
    /// Rows whose part of the broker is down while the rest answered: due again only later.
    pub deferred: Deferred,
}

impl<S: OutboxStore, P: EventStream> Relay<S, P> {
    pub(super) async fn process(&self, claimant: &str, rows: Vec<ClaimedRow>) -> Turn {
        let started = Instant::now();
        let mut span = EventSpan::root("handoff.relay.batch");
        span.set("handoff.rows", rows.len() as i64);
        let (mut settlement, sendable, entries) = self.sort_claimed(rows);
        let keys: Vec<RowRef> = sendable.iter().map(|row| row.key()).collect();
        let mut turn = Turn::default();
        let prepared = started.elapsed();
        match self.under_lease(claimant, &keys, self.append_entries(&entries, &span)).await {
            Some(outcomes) => {
                turn = self.sort_outcomes(&sendable, &entries, outcomes, started, &mut settlement);
                self.step_aside(&mut turn, &mut settlement).await;
            }
            None => {
                // Rows already judged DEAD are released too: the next claim judges them again.
                warn!(rows = keys.len(), "shutdown drain time spent while appending; releasing rows");
                self.release_now(claimant, &keys_of(&settlement).into_iter().chain(keys).collect::<Vec<_>>()).await;
                return turn;
            }
        }
        let appended = started.elapsed();
        span.set("handoff.delivered", settlement.delivered.len() as i64);
        span.set("handoff.failed", settlement.failed.len() as i64);
        span.event("appended");
        self.settle(claimant, &keys_of(&settlement), settlement).await;
        span.event("settled");
        let settled = started.elapsed();
        self.deps.metrics.cycle.observe(settled.as_secs_f64());
        trace!(
            prepare_ms = prepared.as_secs_f64() * 1e3,
            append_ms = (appended - prepared).as_secs_f64() * 1e3,
            settle_ms = (settled - appended).as_secs_f64() * 1e3,
            "batch done"
        );
        turn
    }

    /// Appends the entries (the fault points around it are for tests), each in a span that is
    /// a child of its producer's trace context and linked to the batch's span.
    pub(super) async fn append_entries(&self, entries: &[Entry], batch: &EventSpan) -> Vec<AppendOutcome> {
        let mut spans: Vec<EventSpan> = if traces::enabled() {
            entries
                .iter()
                .map(|entry| {
                    let mut span = EventSpan::start(
                        "handoff.relay.append",
                        SpanKind::Producer,
                        entry.trace.as_deref(),
                        Some(batch),
                    );
                    span.set("handoff.event_id", entry.event_id.clone());
                    span.set("messaging.destination.name", entry.stream.clone());
                    span
                })
                .collect()
        } else {
            Vec::new()
        };
        self.deps.faults.reach(Point::BeforeAppend).await;
        let outcomes = self.deps.stream.append(entries, &self.options).await;
        self.deps.faults.reach(Point::AfterAppend).await;
        for (span, outcome) in spans.iter_mut().zip(&outcomes) {
            match outcome {
                AppendOutcome::Appended(id) | AppendOutcome::Duplicate(id) => {
                    span.set("messaging.message.id", id.clone())
                }
                AppendOutcome::Skipped => span.fail("not appended: an earlier entry of its run failed"),
                AppendOutcome::Rejected(e) | AppendOutcome::Unavailable(e) | AppendOutcome::Unconfirmed(e) => {
                    span.fail(e.clone())
                }
            }
        }
        outcomes
    }

    /// Sorts claimed rows: those that turn DEAD without an append (a crash loop, a row no entry
    /// can be built from) into a settlement, the others into rows and their entries, in the
    /// order they are appended.
    pub(super) fn sort_claimed(&self, rows: Vec<ClaimedRow>) -> (Settlement, Vec<ClaimedRow>, Vec<Entry>) {
        let metrics = &self.deps.metrics;
        metrics.batch_size.observe(rows.len() as f64);
        let mut settlement = Settlement::default();
        let mut sendable: Vec<(ClaimedRow, Entry)> = Vec::with_capacity(rows.len());
        // Ordered keys that lost a row to DEAD in this batch: (key, position of that row).
        let mut broken: Vec<(Option<String>, Position)> = Vec::new();
        for mut row in rows {
            if row.reclaimed {
                metrics.reclaims.inc();
            }
            if row.expired_claims >= self.config.max_expired_claims {
                let error = format!(
                    "lease expired {} times: the row keeps its claimant from finishing (crash loop?)",
                    row.expired_claims
                );
                settlement.dead(row.key(), error, DeadReason::CrashLoop, metrics);
                broken.push((row.order_key.clone(), position(&row)));
                continue;
            }
            if let Some(unreadable) = row.unreadable.take() {
                metrics.failed(FailureReason::InvalidRow, 1);
                settlement.dead(
                    row.key(),
                    format!("the row cannot be read: {unreadable}"),
                    DeadReason::InvalidRow,
                    metrics,
                );
                broken.push((row.order_key.clone(), position(&row)));
                continue;
            }
            match self.entries.build(&mut row) {
                Ok(entry) => sendable.push((row, entry)),
                Err(refusal) => {
                    let reason = refusal.reason();
                    metrics.failed(FailureReason::InvalidRow, 1);
                    settlement.dead(row.key(), refusal.to_string(), reason, metrics);
                    broken.push((row.order_key.clone(), position(&row)));
                }
            }
        }
        if let Some(ordering) = &self.config.ordering {
            if ordering.on_failure == OnFailure::Hold {
                hold_behind(&mut sendable, &broken, &mut settlement);
            }
            order_runs(&mut sendable);
        }
        // Rows and entries part here (no copy of the payloads): appends take entries alone.
        let (sendable, entries): (Vec<ClaimedRow>, Vec<Entry>) = sendable.into_iter().unzip();
        (settlement, sendable, entries)
    }

    /// Turns append outcomes into settle decisions; says whether the broker was unreachable or
    /// the durability gate was missed.
    pub(super) fn sort_outcomes(
        &self,
        sendable: &[ClaimedRow],
        entries: &[Entry],
        outcomes: Vec<AppendOutcome>,
        started: Instant,
        settlement: &mut Settlement,
    ) -> Turn {
        let metrics = &self.deps.metrics;
        let mut outage = false;
        let mut progress = false;
        let mut gate_missed = false;
        let mut unavailable = Vec::new();
        let elapsed = started.elapsed();
        for ((row, entry), outcome) in sendable.iter().zip(entries).zip(outcomes) {
            match outcome {
                AppendOutcome::Appended(entry_id) => {
                    progress = true;
                    metrics.dwell.observe((row.age + elapsed).as_secs_f64());
                    settlement.delivered.push(Delivered { row: row.key(), entry_id, stream: entry.stream.clone() });
                }
                // Appended before (a crash between append and settle): settle with that entry.
                AppendOutcome::Duplicate(entry_id) => {
                    progress = true;
                    metrics.dedupe_hits.inc();
                    settlement.delivered.push(Delivered { row: row.key(), entry_id, stream: entry.stream.clone() });
                }
                // An earlier event of its key failed: hand it back untouched, order intact.
                AppendOutcome::Skipped => settlement.released.push(row.key()),
                AppendOutcome::Rejected(error) => {
                    metrics.failed(FailureReason::Rejected, 1);
                    let error = format!("stream rejected the entry: {error}");
                    if row.attempts + 1 >= self.config.claim_loop.max_attempts {
                        settlement.dead(row.key(), error, DeadReason::AttemptsExhausted, metrics);
                    } else {
                        metrics.retries.inc();
                        let wait = delay(&self.config.claim_loop.backoff, row.attempts + 1);
                        settlement.failed.push(Failure {
                            row: row.key(),
                            error: crate::error::storable(&error, ERROR_MAX_CHARS),
                            verdict: Verdict::Retry { delay: wait },
                        });
                    }
                }
                AppendOutcome::Unavailable(error) => {
                    if !outage && let Some(suppressed) = self.unavailable_log.lock().expect("log throttle").allow() {
                        warn!(error = %error, suppressed, "stream unavailable; releasing rows without counting an attempt");
                    }
                    outage = true;
                    metrics.failed(FailureReason::Unavailable, 1);
                    unavailable.push(row.key());
                }
                // Appended, not yet durable: released untouched, appended again later.
                AppendOutcome::Unconfirmed(error) => {
                    if !gate_missed {
                        metrics.gate_misses.inc();
                        warn!(error = %error, "durability gate not met; releasing rows to append them again");
                    }
                    gate_missed = true;
                    settlement.released.push(row.key());
                }
            }
        }
        if outage {
            // Perhaps a restart or failover that lost appends: the loss watch verifies.
            self.loss.suspect();
        }
        // What happens to these rows is decided once it is known whether the rest of the
        // broker answers (`step_aside`).
        settlement.deferred = Deferred { rows: unavailable, delay: std::time::Duration::ZERO };
        if !outage || progress {
            self.stream_health(true);
        }
        self.loss.appended(settlement.delivered.iter().map(|d| (d.stream.as_str(), d.entry_id.as_str())));
        Turn { stream_outage: outage && !progress, partial_outage: outage && progress, gate_missed }
    }

    /// Rows whose appends found the broker unavailable: when part of it answers (a batch went
    /// partly through, or a cluster's other primaries answer a ping), the part that is down is
    /// what failed, and its rows step aside for a while — due at once they would be the oldest
    /// due rows of every claim and crowd out the streams that do flow. With the whole broker
    /// down they are released as they are: the loop waits for it, and they go first when it is
    /// back.
    pub(super) async fn step_aside(&self, turn: &mut Turn, settlement: &mut Settlement) {
        if settlement.deferred.rows.is_empty() {
            self.partial_outage(false);
            return;
        }
        let partial = turn.partial_outage || self.deps.stream.partly_up().await;
        match self.partial_outage(partial) {
            Some(delay) => {
                settlement.deferred.delay = delay;
                // Not an outage of the broker: the loop goes on claiming the other streams' rows.
                if turn.stream_outage {
                    (turn.stream_outage, turn.partial_outage) = (false, true);
                }
            }
            None => settlement.released.append(&mut settlement.deferred.rows),
        }
    }

    /// How long the rows of the part of the broker that is down step aside, when `partial`
    /// (part of a batch went through, part did not): the time the partial outage has lasted,
    /// from `outage_backoff.initial` up to [`DEFER_MAX`] (and `outage_backoff.max`); `None`
    /// when it is over (the next rows of those streams are due at once).
    fn partial_outage(&self, partial: bool) -> Option<std::time::Duration> {
        let mut since = self.partial_since.lock().unwrap_or_else(|e| e.into_inner());
        if !partial {
            *since = None;
            return None;
        }
        let lasted = since.get_or_insert_with(Instant::now).elapsed();
        let backoff = &self.config.claim_loop.outage_backoff;
        Some(lasted.clamp(backoff.initial, DEFER_MAX.min(backoff.max).max(backoff.initial)))
    }
}

impl Settlement {
    fn dead(
        &mut self,
        row: RowRef,
        error: String,
        reason: DeadReason,
        metrics: &crate::telemetry::metrics::RelayHandles,
    ) {
        metrics.dead(reason);
        let error = crate::error::storable(&error, ERROR_MAX_CHARS);
        self.failed.push(Failure { row, error, verdict: Verdict::Dead });
    }
}

/// Every row the settlement still holds a claim on (for lease renewal while settling).
fn keys_of(s: &Settlement) -> Vec<RowRef> {
    s.delivered
        .iter()
        .map(|d| d.row.clone())
        .chain(s.failed.iter().map(|f| f.row.clone()))
        .chain(s.released.iter().cloned())
        .chain(s.deferred.rows.iter().cloned())
        .collect()
}

/// A row's place in its key's order: numeric ids compare as numbers, others as text.
type Position = (Option<i64>, String);

fn position(row: &ClaimedRow) -> Position {
    (row.id.parse::<i64>().ok(), row.id.clone())
}

/// `hold`: rows of a key behind one that just turned DEAD are released untouched, not appended.
fn hold_behind(
    sendable: &mut Vec<(ClaimedRow, Entry)>,
    broken: &[(Option<String>, Position)],
    settlement: &mut Settlement,
) {
    let is_held = |row: &ClaimedRow| broken.iter().any(|(key, at)| *key == row.order_key && position(row) > *at);
    let (held, go): (Vec<_>, Vec<_>) = std::mem::take(sendable).into_iter().partition(|(row, _)| is_held(row));
    settlement.released.extend(held.iter().map(|(row, _)| row.key()));
    *sendable = go;
}

/// Ordered relaying: rows of one key in id order, each key's rows one run (appended in order,
/// stopping at the first failure).
fn order_runs(sendable: &mut [(ClaimedRow, Entry)]) {
    sendable.sort_by(|(a, _), (b, _)| (&a.order_key, position(a)).cmp(&(&b.order_key, position(b))));
    let mut run = 0;
    for i in 0..sendable.len() {
        if i > 0 && sendable[i].0.order_key != sendable[i - 1].0.order_key {
            run += 1;
        }
        sendable[i].1.run = Some(run);
    }
}
