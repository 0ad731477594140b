//! Relay metrics, registered once on the app's registry and bound per relay.

use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry,
};

use super::registry::Reg;
use crate::reasons::DeadReason;

/// Metric families shared by all relays of a process.
#[derive(Clone)]
pub(crate) struct RelayMetrics {
    info: IntGaugeVec,
    published: IntCounterVec,
    publish_failures: IntCounterVec,
    retries: IntCounterVec,
    dead: IntCounterVec,
    reclaims: IntCounterVec,
    released: IntCounterVec,
    fenced: IntCounterVec,
    dedupe_hits: IntCounterVec,
    purged: IntCounterVec,
    trimmed: IntCounterVec,
    dwell: HistogramVec,
    batch_size: HistogramVec,
    cycle: HistogramVec,
    pending_rows: IntGaugeVec,
    oldest_pending_age: GaugeVec,
    dead_rows: IntGaugeVec,
    in_flight_rows: IntGaugeVec,
    source_up: IntGaugeVec,
    settle_refused: IntCounterVec,
    statement_failures: IntCounterVec,
    stream_up: IntGaugeVec,
    gate_misses: IntCounterVec,
    loss_events: IntCounterVec,
    lost_entries: IntCounterVec,
    redriven: IntCounterVec,
    partitions_created: IntCounterVec,
    partitions_dropped: IntCounterVec,
    partitions_held: IntGaugeVec,
}

/// Why an append did not deliver a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailureReason {
    /// The broker refused the entry (the row's fault).
    Rejected,
    /// The broker was unreachable or not accepting writes (not the row's fault).
    Unavailable,
    /// The row could not be turned into an entry.
    InvalidRow,
}

impl FailureReason {
    pub(crate) fn label(self) -> &'static str {
        match self {
            FailureReason::Rejected => "rejected",
            FailureReason::Unavailable => "unavailable",
            FailureReason::InvalidRow => "invalid_row",
        }
    }
}

/// Seconds from a row's `created_at` to the stream's acknowledgement.
const DWELL_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];
const BATCH_BUCKETS: &[f64] = &[1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0];
const CYCLE_BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

impl RelayMetrics {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<Self> {
        let r = Reg(registry);
        Ok(Self {
            info: r.gauge(
                "handoff_relay_info",
                "1 for each relay, labelled with its broker (redis or nats): join on relay for a broker label.",
                &["relay", "broker"],
            )?,
            published: r.counter("handoff_relay_published_total", "Rows appended to a stream and settled as delivered.", &["relay"])?,
            publish_failures: r.counter(
                "handoff_relay_publish_failures_total",
                "Rows a batch did not deliver, by reason: rejected (the row's fault), unavailable (broker outage), invalid_row.",
                &["relay", "reason"],
            )?,
            retries: r.counter("handoff_relay_retries_total", "Rows scheduled for another attempt after a failure of their own.", &["relay"])?,
            dead: r.counter("handoff_relay_dead_total", "Rows turned DEAD, by reason.", &["relay", "reason"])?,
            reclaims: r.counter("handoff_relay_lease_reclaims_total", "Rows claimed after another claimant's lease expired.", &["relay"])?,
            released: r.counter("handoff_relay_released_total", "Claimed rows handed back untouched (outage or shutdown).", &["relay"])?,
            fenced: r.counter("handoff_relay_fenced_settles_total", "Settles refused because another claimant owns the row now.", &["relay"])?,
            dedupe_hits: r.counter(
                "handoff_relay_dedupe_hits_total",
                "Rows whose event was already appended within the dedupe window (nothing appended again).",
                &["relay"],
            )?,
            purged: r.counter("handoff_relay_purged_total", "Delivered rows deleted by retention.", &["relay"])?,
            trimmed: r.counter(
                "handoff_relay_trimmed_entries_total",
                "Stream entries removed by the acknowledged-only trim.",
                &["relay"],
            )?,
            dwell: r.histogram("handoff_relay_dwell_seconds", "Time from the row's created_at to the stream's acknowledgement.", DWELL_BUCKETS)?,
            batch_size: r.histogram("handoff_relay_batch_rows", "Rows per non-empty claim.", BATCH_BUCKETS)?,
            cycle: r.histogram("handoff_relay_cycle_seconds", "Duration of one claim → append → settle cycle.", CYCLE_BUCKETS)?,
            pending_rows: r.gauge("handoff_relay_pending_rows", "Rows waiting to be relayed (sampled).", &["relay"])?,
            oldest_pending_age: r.float_gauge(
                "handoff_relay_oldest_pending_age_seconds",
                "Age of the oldest row waiting to be relayed, 0 when none (sampled).",
                &["relay"],
            )?,
            dead_rows: r.gauge("handoff_relay_dead_rows", "Rows in the DEAD state (sampled).", &["relay"])?,
            in_flight_rows: r.gauge("handoff_relay_in_flight_rows", "Rows claimed under a lease (sampled).", &["relay"])?,
            source_up: r.gauge("handoff_relay_source_up", "1 when the relay's last database statement succeeded.", &["relay"])?,
            settle_refused: r.counter(
                "handoff_relay_settle_refused_total",
                "Settles given up because the database refused their data again and again (their rows' leases lapse).",
                &["relay"],
            )?,
            statement_failures: r.counter(
                "handoff_relay_statement_failures_total",
                "Database statements of the relay that failed, by statement and kind: connection, conflict (pass by themselves), schema, permission, read_only, data, contract, other (need someone).",
                &["relay", "statement", "kind"],
            )?,
            stream_up: r.gauge("handoff_relay_stream_up", "1 when the relay's last append or ping reached the broker.", &["relay"])?,
            gate_misses: r.counter(
                "handoff_relay_durability_gate_misses_total",
                "Batches whose appends the broker did not confirm durable in time (rows released, appended again later).",
                &["relay"],
            )?,
            loss_events: r.counter(
                "handoff_relay_broker_loss_events_total",
                "Verifications that found entries the broker had acknowledged missing from a stream.",
                &["relay"],
            )?,
            lost_entries: r.counter(
                "handoff_relay_broker_lost_entries_total",
                "Entries of delivered rows found missing from their stream (lost by the broker, not trimmed).",
                &["relay"],
            )?,
            redriven: r.counter(
                "handoff_relay_broker_redriven_total",
                "Delivered rows moved back to PENDING because the broker lost their entries.",
                &["relay"],
            )?,
            partitions_created: r.counter(
                "handoff_relay_partitions_created_total",
                "Outbox partitions created ahead of time (relay.partitions).",
                &["relay"],
            )?,
            partitions_dropped: r.counter(
                "handoff_relay_partitions_dropped_total",
                "Outbox partitions dropped because every row in them was delivered (relay.partitions).",
                &["relay"],
            )?,
            partitions_held: r.gauge(
                "handoff_relay_partitions_held",
                "Outbox partitions past drop_after kept because rows in them are PENDING, IN_FLIGHT, DEAD or recently delivered.",
                &["relay"],
            )?,
        })
    }

    /// Children bound to one relay's label, so the hot path does no label lookups. Every reason
    /// series starts at 0, so rates and alerts work before the first failure.
    /// The handles of a relay publishing to `broker` ("redis", "nats").
    pub(crate) fn for_relay(&self, relay: &str, broker: &str) -> RelayHandles {
        let l = &[relay];
        self.info.with_label_values(&[relay, broker]).set(1);
        for reason in [FailureReason::Rejected, FailureReason::Unavailable, FailureReason::InvalidRow] {
            self.publish_failures.with_label_values(&[relay, reason.label()]);
        }
        for reason in DeadReason::ALL {
            self.dead.with_label_values(&[relay, reason.as_str()]);
        }
        for kind in crate::store::StoreError::KIND_LABELS {
            self.statement_failures.with_label_values(&[relay, "claim", kind]);
        }
        RelayHandles {
            relay: relay.to_owned(),
            families: self.clone(),
            published: self.published.with_label_values(l),
            retries: self.retries.with_label_values(l),
            reclaims: self.reclaims.with_label_values(l),
            released: self.released.with_label_values(l),
            fenced: self.fenced.with_label_values(l),
            dedupe_hits: self.dedupe_hits.with_label_values(l),
            purged: self.purged.with_label_values(l),
            trimmed: self.trimmed.with_label_values(l),
            dwell: self.dwell.with_label_values(l),
            batch_size: self.batch_size.with_label_values(l),
            cycle: self.cycle.with_label_values(l),
            pending_rows: self.pending_rows.with_label_values(l),
            oldest_pending_age: self.oldest_pending_age.with_label_values(l),
            dead_rows: self.dead_rows.with_label_values(l),
            in_flight_rows: self.in_flight_rows.with_label_values(l),
            source_up: self.source_up.with_label_values(l),
            settle_refused: self.settle_refused.with_label_values(l),
            stream_up: self.stream_up.with_label_values(l),
            gate_misses: self.gate_misses.with_label_values(l),
            loss_events: self.loss_events.with_label_values(l),
            lost_entries: self.lost_entries.with_label_values(l),
            redriven: self.redriven.with_label_values(l),
            partitions_created: self.partitions_created.with_label_values(l),
            partitions_dropped: self.partitions_dropped.with_label_values(l),
            partitions_held: self.partitions_held.with_label_values(l),
        }
    }
}

/// One relay's metrics.
#[derive(Clone)]
pub(crate) struct RelayHandles {
    relay: String,
    families: RelayMetrics,
    pub published: IntCounter,
    pub retries: IntCounter,
    pub reclaims: IntCounter,
    pub released: IntCounter,
    pub fenced: IntCounter,
    pub dedupe_hits: IntCounter,
    pub purged: IntCounter,
    pub trimmed: IntCounter,
    pub dwell: Histogram,
    pub batch_size: Histogram,
    pub cycle: Histogram,
    pub pending_rows: IntGauge,
    pub oldest_pending_age: Gauge,
    pub dead_rows: IntGauge,
    pub in_flight_rows: IntGauge,
    pub source_up: IntGauge,
    pub settle_refused: IntCounter,
    pub stream_up: IntGauge,
    pub gate_misses: IntCounter,
    pub loss_events: IntCounter,
    pub lost_entries: IntCounter,
    pub redriven: IntCounter,
    pub partitions_created: IntCounter,
    pub partitions_dropped: IntCounter,
    pub partitions_held: IntGauge,
}

impl RelayHandles {
    /// A database statement failed (`error` says which and why).
    pub(crate) fn statement_failed(&self, error: &crate::store::StoreError) {
        let labels = [self.relay.as_str(), error.statement(), error.kind_label()];
        self.families.statement_failures.with_label_values(&labels).inc();
    }

    pub(crate) fn failed(&self, reason: FailureReason, n: u64) {
        self.families.publish_failures.with_label_values(&[&self.relay, reason.label()]).inc_by(n);
    }

    pub(crate) fn dead(&self, reason: DeadReason) {
        self.families.dead.with_label_values(&[&self.relay, reason.as_str()]).inc();
    }
}
