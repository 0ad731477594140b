//! Inbox bridge metrics, labelled by bridge and stream (and a bounded `reason`).

use prometheus::{Gauge, GaugeVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};

use super::registry::Reg;
use crate::reasons::PoisonReason;
use crate::store::OutageKind;

#[derive(Clone)]
pub(crate) struct BridgeMetrics {
    received: IntCounterVec,
    inserted: IntCounterVec,
    applied: IntCounterVec,
    apply_fallbacks: IntCounterVec,
    duplicates: IntCounterVec,
    ignored: IntCounterVec,
    poison: IntCounterVec,
    conflicts: IntCounterVec,
    ack_failures: IntCounterVec,
    claimed: IntCounterVec,
    lag: IntGaugeVec,
    pending: IntGaugeVec,
    oldest_pending: GaugeVec,
    unavailable: IntCounterVec,
    info: IntGaugeVec,
}

impl BridgeMetrics {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<Self> {
        let r = Reg(registry);
        let l = &["bridge", "stream"];
        Ok(Self {
            info: r.gauge(
                "handoff_bridge_info",
                "1 for each stream a bridge reads, labelled with its broker (redis, nats or kafka): join on bridge and stream for a broker label.",
                &["bridge", "stream", "broker"],
            )?,
            received: r.counter(
                "handoff_bridge_received_total",
                "Stream entries read (new, redelivered or claimed).",
                l,
            )?,
            inserted: r.counter("handoff_bridge_inserted_total", "Events taken over into the inbox.", l)?,
            applied: r.counter(
                "handoff_bridge_applied_total",
                "Events taken over and applied by their handler in the same transaction (apply at take-over).",
                l,
            )?,
            apply_fallbacks: r.counter(
                "handoff_bridge_apply_fallbacks_total",
                "Batches whose handler failed at take-over, taken over PENDING for the worker instead.",
                l,
            )?,
            duplicates: r.counter(
                "handoff_bridge_duplicates_total",
                "Entries whose event was already in the inbox with the same content (acknowledged).",
                l,
            )?,
            ignored: r.counter("handoff_bridge_ignored_total", "Events of unaccepted types kept as IGNORED.", l)?,
            poison: r.counter(
                "handoff_bridge_poison_total",
                "Entries recorded in the poison table, by reason.",
                &["bridge", "stream", "reason"],
            )?,
            conflicts: r.counter(
                "handoff_bridge_conflicts_total",
                "Replays of an event id with other content (recorded as payload_conflict).",
                l,
            )?,
            ack_failures: r.counter(
                "handoff_bridge_ack_failures_total",
                "XACK calls that failed (entries are redelivered).",
                l,
            )?,
            claimed: r.counter(
                "handoff_bridge_claimed_total",
                "Entries claimed from idle consumers' pending lists.",
                l,
            )?,
            lag: r.gauge(
                "handoff_bridge_lag_entries",
                "Entries not yet delivered to the group, by broker (Redis: XINFO GROUPS lag; NATS: the consumer's pending messages; Kafka: the partitions' ends past the committed offsets).",
                &["bridge", "stream", "broker"],
            )?,
            pending: r.gauge("handoff_bridge_pending_entries", "Entries delivered but not acknowledged.", l)?,
            oldest_pending: r.float_gauge(
                "handoff_bridge_oldest_pending_entry_age_seconds",
                "Idle time of the group's oldest unacknowledged entry, 0 when none.",
                l,
            )?,
            unavailable: r.counter(
                "handoff_bridge_inbox_unavailable_total",
                "Takeovers that failed for a reason not of the entries' data (nothing acknowledged), by kind.",
                &["bridge", "stream", "kind"],
            )?,
        })
    }

    /// The handles of one stream a bridge reads from `broker` ("redis", "nats", "kafka").
    pub(crate) fn for_stream(&self, bridge: &str, stream: &str, broker: &str) -> BridgeHandles {
        let l = &[bridge, stream];
        self.info.with_label_values(&[bridge, stream, broker]).set(1);
        for reason in PoisonReason::ALL {
            self.poison.with_label_values(&[bridge, stream, reason.as_str()]);
        }
        for kind in OutageKind::ALL {
            self.unavailable.with_label_values(&[bridge, stream, kind.label()]);
        }
        BridgeHandles {
            labels: [bridge.to_owned(), stream.to_owned()],
            poison_family: self.poison.clone(),
            unavailable_family: self.unavailable.clone(),
            received: self.received.with_label_values(l),
            inserted: self.inserted.with_label_values(l),
            applied: self.applied.with_label_values(l),
            apply_fallbacks: self.apply_fallbacks.with_label_values(l),
            duplicates: self.duplicates.with_label_values(l),
            ignored: self.ignored.with_label_values(l),
            conflicts: self.conflicts.with_label_values(l),
            ack_failures: self.ack_failures.with_label_values(l),
            claimed: self.claimed.with_label_values(l),
            lag: self.lag.with_label_values(&[bridge, stream, broker]),
            pending: self.pending.with_label_values(l),
            oldest_pending: self.oldest_pending.with_label_values(l),
        }
    }
}

#[derive(Clone)]
pub(crate) struct BridgeHandles {
    labels: [String; 2],
    poison_family: IntCounterVec,
    unavailable_family: IntCounterVec,
    pub received: IntCounter,
    pub inserted: IntCounter,
    pub applied: IntCounter,
    pub apply_fallbacks: IntCounter,
    pub duplicates: IntCounter,
    pub ignored: IntCounter,
    pub conflicts: IntCounter,
    pub ack_failures: IntCounter,
    pub claimed: IntCounter,
    pub lag: IntGauge,
    pub pending: IntGauge,
    pub oldest_pending: Gauge,
}

impl BridgeHandles {
    pub(crate) fn poison(&self, reason: PoisonReason) {
        self.poison_family.with_label_values(&[&self.labels[0], &self.labels[1], reason.as_str()]).inc();
    }

    pub(crate) fn unavailable(&self, kind: OutageKind) {
        self.unavailable_family.with_label_values(&[&self.labels[0], &self.labels[1], kind.label()]).inc();
    }
}
