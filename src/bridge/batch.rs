//! One batch of entries: validate, take over in one transaction, then acknowledge.
//!
//! Invariant 3: an entry is acknowledged only after its inbox row or poison record committed.
//! If the transaction fails, nothing of the batch is acknowledged and it is read again.

use std::collections::{HashMap, HashSet};

use tracing::{error, trace, warn};

use super::validate::Verdict;
use super::{Committed, Sorted, StreamBridge};
use crate::bridge::takeover::{InboxEvent, PoisonRecord, TakenOver};
use crate::broker::group::ConsumerGroup;
use crate::broker::read::RawEntry;
use crate::error::error_chain;
use crate::fault::Point;
use crate::reasons::PoisonReason;
use crate::runtime::outage::{Failed, retry_through};
use crate::store::{OutageKind, StoreError};
use crate::telemetry::throttle::Throttle;
use crate::telemetry::traces::{self, EventSpan};
use opentelemetry::trace::SpanKind;

/// How the bridge backs off while the inbox is down (the backoff grows to 30 s).
static OUTAGE: std::sync::LazyLock<crate::runtime::backoff::BackoffConfig> =
    std::sync::LazyLock::new(crate::runtime::backoff::BackoffConfig::outage_default);

impl<G: ConsumerGroup> StreamBridge<G> {
    /// Entries delivered before and never acknowledged: this consumer's own pending entries
    /// after a restart, or entries claimed from a dead consumer. Each delivery is counted in
    /// the inbox database before the entry is handled, in a transaction of its own, so only
    /// deliveries that reached it count towards `max_deliveries` (invariant 12): while the inbox
    /// is down nothing is counted (nor handled, nor acknowledged), however often the bridge is
    /// restarted, and a bridge that dies handling an entry has counted that delivery.
    ///
    /// An entry already counted (an earlier delivery reached the database and still ended
    /// without a verdict: it may be what killed the bridge) is a suspect: it is counted and
    /// taken over alone, one after the other, so a bridge that dies again dies on that entry,
    /// and only its count grows towards the limit, not its batch neighbours'.
    pub(super) async fn redelivered(&self, entries: Vec<RawEntry>) {
        let ids: Vec<String> = entries.iter().map(|e| e.id.clone()).collect();
        let Some(known) = self.deliveries(&ids, false).await else { return };
        let (suspects, others): (Vec<RawEntry>, Vec<RawEntry>) =
            entries.into_iter().partition(|e| known.contains_key(&e.id));
        if !others.is_empty() {
            let ids: Vec<String> = others.iter().map(|e| e.id.clone()).collect();
            let Some(counts) = self.deliveries(&ids, true).await else { return };
            let sorted = self.sort(&others, &counts);
            self.take_over_and_ack(others, sorted).await;
        }
        for entry in suspects {
            let Some(counts) = self.deliveries(std::slice::from_ref(&entry.id), true).await else { return };
            let alone = vec![entry];
            let sorted = self.sort(&alone, &counts);
            self.take_over_and_ack(alone, sorted).await;
        }
    }

    /// The entries' delivery counts — after counting one more delivery of each, with `count` —
    /// waiting out an inbox outage (beating: waiting is not being stuck). `None` if the shutdown
    /// drain ended first.
    async fn deliveries(&self, ids: &[String], count: bool) -> Option<HashMap<String, u32>> {
        let (store, consumer, stream) = (&self.deps.store, &self.config.consumer, &self.source.key);
        let read = || async {
            if count {
                store.count_deliveries(consumer, stream, ids).await
            } else {
                store.deliveries(consumer, stream, ids).await
            }
        };
        let mut errors = Throttle::new(std::time::Duration::from_secs(30));
        let failed = |e: StoreError| {
            self.inbox_down(&e);
            if let Some(suppressed) = errors.allow() {
                warn!(stream = %self.source.key, entries = ids.len(), error = %error_chain(&e), suppressed, "inbox unavailable; redelivered entries wait, their deliveries not counted");
            }
            Failed::Retry
        };
        let counts = retry_through(&self.deps.health, &self.deps.abandon, &OUTAGE, read, failed).await?;
        self.deps.health.set_work_ok(true);
        Some(counts)
    }

    /// The inbox failed a piece of work (not the entries' fault): readiness and the outage
    /// counter say so.
    fn inbox_down(&self, error: &StoreError) {
        self.deps.health.set_work_ok(false);
        self.deps.metrics.unavailable(error.outage_kind().unwrap_or(OutageKind::Other));
    }

    /// Validates a batch (CPU only: the bridge runs it for the next batch while the current one
    /// commits). `deliveries`: the counts of redelivered entries (empty for first deliveries);
    /// one at `max_deliveries` goes to the poison path.
    pub(super) fn sort(&self, entries: &[RawEntry], deliveries: &HashMap<String, u32>) -> Sorted {
        let metrics = &self.deps.metrics;
        metrics.received.inc_by(entries.len() as u64);
        let mut events: Vec<InboxEvent> = Vec::new();
        let mut poison: Vec<PoisonRecord> = Vec::new();
        let mut repeats: Vec<String> = Vec::new();
        let mut first_seen: HashMap<String, String> = HashMap::new();
        for entry in entries {
            if deliveries.get(&entry.id).is_some_and(|n| *n >= self.config.max_deliveries) {
                poison.push(self.over_delivered(entry, deliveries[&entry.id]));
                continue;
            }
            match self.validator.check(&self.source, entry) {
                Verdict::Poison(record) => poison.push(record),
                // The same event twice in one batch (a relay retry): compare with the first.
                Verdict::Take(event) => match first_seen.get(&event.event_id) {
                    Some(hash) if *hash == event.content_hash => {
                        metrics.duplicates.inc();
                        repeats.push(event.entry_id);
                    }
                    Some(hash) => poison.push(PoisonRecord::earlier_in_batch_with_other_content(&event, hash)),
                    None => {
                        first_seen.insert(event.event_id.clone(), event.content_hash.clone());
                        events.push(event);
                    }
                },
            }
        }
        Sorted { events, poison, repeats, counted: !deliveries.is_empty() }
    }

    /// Takes a sorted batch over in one transaction, then acknowledges it.
    pub(super) async fn take_over_and_ack(&self, entries: Vec<RawEntry>, sorted: Sorted) {
        let committed = self.commit(entries, sorted).await;
        self.ack(committed).await;
    }

    /// Takes a sorted batch over in one transaction (and appends its poison records to the
    /// dead-letter stream): what may be acknowledged now. Empty if the drain ended first.
    pub(super) async fn commit(&self, entries: Vec<RawEntry>, sorted: Sorted) -> Committed {
        let started = std::time::Instant::now();
        let Sorted { events, poison, repeats, counted } = sorted;
        // One span per event, a child of the producer's trace context; ends once acknowledged.
        let mut spans: Vec<EventSpan> =
            if traces::enabled() { events.iter().map(|e| self.takeover_span(e)).collect() } else { Vec::new() };
        // Entries of a type the bridge keeps but never handles, counted once inserted.
        let ignored: HashSet<String> = events.iter().filter(|e| e.ignored).map(|e| e.entry_id.clone()).collect();
        self.deps.faults.reach(Point::BridgeBeforeCommit).await;
        let Some((outcomes, poison)) = self.take_over(events, poison, &entries, counted).await else {
            return Committed::default();
        };
        for (span, (_, outcome)) in spans.iter_mut().zip(&outcomes) {
            span.set("handoff.takeover", format!("{outcome:?}").to_lowercase());
        }
        self.count(&outcomes, &poison, &ignored);
        self.deps.faults.reach(Point::BridgeBeforeAck).await;
        let mut ack: Vec<String> = outcomes.into_iter().map(|(entry_id, _)| entry_id).chain(repeats).collect();
        if self.dead_letter(&poison).await {
            ack.extend(poison.into_iter().map(|p| p.entry_id));
        }
        trace!(entries = entries.len(), commit_ms = started.elapsed().as_secs_f64() * 1e3, "batch committed");
        Committed { entry_ids: ack, spans }
    }

    /// Acknowledges committed entries (their spans end here).
    pub(super) async fn ack(&self, committed: Committed) {
        let Committed { entry_ids, spans } = committed;
        if entry_ids.is_empty() {
            return;
        }
        if let Err(e) = self.group.ack(&entry_ids).await {
            self.deps.metrics.ack_failures.inc();
            warn!(stream = %self.source.key, entries = entry_ids.len(), error = %e, "acknowledging failed; the entries will be redelivered and recognised");
        }
        drop(spans);
    }

    fn takeover_span(&self, event: &InboxEvent) -> EventSpan {
        let mut span =
            EventSpan::start("handoff.bridge.take_over", SpanKind::Consumer, Some(event.headers.as_str()), None);
        span.set("handoff.event_id", event.event_id.clone());
        span.set("handoff.consumer", self.config.consumer.clone());
        span.set("messaging.destination.name", event.stream.clone());
        span.set("messaging.message.id", event.entry_id.clone());
        span
    }

    fn over_delivered(&self, entry: &RawEntry, deliveries: u32) -> PoisonRecord {
        PoisonRecord {
            stream: self.source.key.clone(),
            entry_id: entry.id.clone(),
            event_id: self.validator.event_id_of(entry),
            reason: PoisonReason::DeliveryLimit,
            detail: format!(
                "redelivered {deliveries} times after reaching the inbox, each time without a verdict (the bridge died handling it?); limit {}",
                self.config.max_deliveries
            ),
            fields: entry.fields_json(self.config.validate.payload_max_bytes),
        }
    }

    /// Commits the batch. Only a refusal of the entries' data sends entries to poison (then one
    /// by one, to find which); any other failure — unreachable, read-only, a missing table or
    /// column, a permission — is an outage of the inbox: nothing is acknowledged, the bridge
    /// backs off and tries the batch again until the shutdown drain ends (`None`).
    async fn take_over(
        &self,
        events: Vec<InboxEvent>,
        poison: Vec<PoisonRecord>,
        entries: &[RawEntry],
        counted: bool,
    ) -> Option<(Vec<(String, TakenOver)>, Vec<PoisonRecord>)> {
        // Apply at take-over, if configured: the statements are bound once, for every attempt.
        let effects =
            self.deps.apply.as_ref().filter(|apply| !apply.worker_paused()).map(|apply| apply.effects(&events));
        let store = &self.deps.store;
        // Waiting out an outage is not being stuck: liveness must not restart the bridge for it
        // (a restart would only deliver the entries again; invariant 12).
        let attempt = || async {
            let consumer = &self.config.consumer;
            let taken = match &effects {
                Some(effects) => {
                    store.take_over_applying(consumer, &events, effects, &poison, counted).await.map(|t| {
                        if let Some(e) = &t.left_to_worker {
                            self.left_to_worker(e);
                        }
                        t.outcomes
                    })
                }
                None => store.take_over(consumer, &events, &poison, counted).await,
            };
            match taken {
                Ok(outcomes) => Ok((events.iter().map(|e| e.entry_id.clone()).zip(outcomes).collect(), poison.clone())),
                Err(e) if e.is_about_the_data() => self.one_by_one(&events, &poison, entries, &e, counted).await,
                Err(e) => Err(e),
            }
        };
        let mut errors = Throttle::new(std::time::Duration::from_secs(30));
        let failed = |e: StoreError| {
            self.inbox_down(&e);
            if let Some(suppressed) = errors.allow() {
                warn!(stream = %self.source.key, error = %error_chain(&e), suppressed, "inbox unavailable; nothing acknowledged, retrying");
            }
            Failed::Retry
        };
        let taken = retry_through(&self.deps.health, &self.deps.abandon, &OUTAGE, attempt, failed).await?;
        self.deps.health.set_work_ok(true);
        Some(taken)
    }

    /// The database refused the batch's data: take the entries over one at a time so the one it
    /// refuses lands in the poison table (with every field of its entry) and its neighbours go
    /// on. An outage meanwhile ends the attempt (`Err`): the batch is tried again as a whole.
    async fn one_by_one(
        &self,
        events: &[InboxEvent],
        poison: &[PoisonRecord],
        entries: &[RawEntry],
        cause: &StoreError,
        counted: bool,
    ) -> Result<(Vec<(String, TakenOver)>, Vec<PoisonRecord>), StoreError> {
        warn!(stream = %self.source.key, error = %error_chain(cause), "the inbox refused a batch's data; taking it over entry by entry");
        let store = &self.deps.store;
        let consumer = &self.config.consumer;
        let mut outcomes = Vec::new();
        let mut refused = poison.to_vec();
        for event in events {
            match store.take_over(consumer, std::slice::from_ref(event), &[], counted).await {
                Ok(mut o) => outcomes.push((event.entry_id.clone(), o.remove(0))),
                Err(e) if e.is_about_the_data() => refused.push(PoisonRecord {
                    stream: event.stream.clone(),
                    entry_id: event.entry_id.clone(),
                    event_id: Some(event.event_id.clone()),
                    reason: PoisonReason::RejectedByDatabase,
                    detail: error_chain(&e).replace('\0', "\\0"),
                    fields: entries
                        .iter()
                        .find(|r| r.id == event.entry_id)
                        .map(|r| r.fields_json(self.config.validate.payload_max_bytes))
                        .unwrap_or_default(),
                }),
                Err(e) => return Err(e),
            }
        }
        let mut recorded = Vec::new();
        for record in refused {
            match store.take_over(consumer, &[], std::slice::from_ref(&record), counted).await {
                Ok(_) => recorded.push(record),
                // The poison table refuses even the record (its fields?): keep the record
                // without them rather than lose the entry's trace.
                Err(e) if e.is_about_the_data() => {
                    let bare = PoisonRecord { fields: serde_json::json!({}), ..record };
                    match store.take_over(consumer, &[], std::slice::from_ref(&bare), counted).await {
                        Ok(_) => recorded.push(bare),
                        Err(e) if e.is_about_the_data() => {
                            error!(stream = %self.source.key, entry = %bare.entry_id, "the poison table refuses this entry's record; it stays pending")
                        }
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok((outcomes, recorded))
    }

    /// Apply at take-over failed a batch, which went in PENDING for the worker: say why (at most
    /// every 30 s), and count it.
    fn left_to_worker(&self, error: &StoreError) {
        self.deps.metrics.apply_fallbacks.inc();
        let mut throttle = self.apply_errors.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(suppressed) = throttle.allow() {
            warn!(stream = %self.source.key, error = %error_chain(error), suppressed, "a handler failed the batch at take-over; its events are left PENDING to the worker");
        }
    }

    fn count(&self, outcomes: &[(String, TakenOver)], poison: &[PoisonRecord], ignored: &HashSet<String>) {
        let m = &self.deps.metrics;
        for (entry_id, outcome) in outcomes {
            match outcome {
                TakenOver::Inserted => {
                    m.inserted.inc();
                    if ignored.contains(entry_id) {
                        m.ignored.inc();
                    }
                }
                TakenOver::Applied => {
                    m.inserted.inc();
                    m.applied.inc();
                }
                TakenOver::Duplicate => m.duplicates.inc(),
                TakenOver::Conflict => {
                    m.conflicts.inc();
                    m.poison(PoisonReason::PayloadConflict);
                }
            }
        }
        for record in poison {
            if record.reason == PoisonReason::PayloadConflict {
                m.conflicts.inc();
            }
            m.poison(record.reason);
        }
    }

    /// Appends poison records to the dead-letter stream, if one is configured. False if that
    /// failed: the entries then stay pending (their records are already committed, and are
    /// recorded once however often they come back).
    async fn dead_letter(&self, poison: &[PoisonRecord]) -> bool {
        let Some(key) = &self.config.dead_letter_stream else { return true };
        if poison.is_empty() {
            return true;
        }
        let ok = self.group.dead_letters(key, poison).await;
        if !ok {
            warn!(stream = %self.source.key, dead_letter = %key, "dead-letter append failed; poison entries stay pending");
        }
        ok
    }
}
