//! Inbox worker metrics, labelled by worker and, for outcomes, by the handler that served the
//! row (its configured name or event type patterns; `none` when no handler serves the row).
//! Never by event type: producers choose those, and one writing ids into the type would grow
//! a series per event.

use prometheus::{Gauge, GaugeVec, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Registry};

use super::registry::Reg;
use crate::store::OutageKind;

const HANDLER_BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

#[derive(Clone)]
pub(crate) struct WorkerMetrics {
    processed: IntCounterVec,
    failed: IntCounterVec,
    dead: IntCounterVec,
    fenced: IntCounterVec,
    reclaims: IntCounterVec,
    settle_refused: IntCounterVec,
    handler: HistogramVec,
    dead_rows: IntGaugeVec,
    pending_rows: IntGaugeVec,
    oldest_lease: GaugeVec,
    oldest_retry: GaugeVec,
    unavailable: IntCounterVec,
    endpoint_unavailable: IntCounterVec,
}

impl WorkerMetrics {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<Self> {
        let r = Reg(registry);
        let by_type = &["worker", "handler"];
        let w = &["worker"];
        Ok(Self {
            processed: r.counter(
                "handoff_worker_processed_total",
                "Inbox rows whose effect committed with PROCESSED.",
                by_type,
            )?,
            failed: r.counter("handoff_worker_failed_total", "Handler failures scheduled for a retry.", by_type)?,
            dead: r.counter("handoff_worker_dead_total", "Inbox rows turned DEAD.", by_type)?,
            fenced: r.counter(
                "handoff_worker_fenced_total",
                "Commits refused because another worker took the row over (effect rolled back).",
                w,
            )?,
            reclaims: r.counter("handoff_worker_lease_reclaims_total", "Rows taken over after a lease expired.", w)?,
            settle_refused: r.counter(
                "handoff_worker_settle_refused_total",
                "Failure records the database refused for their data even with a minimal error text (the row's lease lapses).",
                w,
            )?,
            handler: r.histogram_by(
                "handoff_worker_handler_seconds",
                "Time to apply one row: handler plus the PROCESSED commit.",
                HANDLER_BUCKETS,
                by_type,
            )?,
            dead_rows: r.gauge("handoff_worker_dead_rows", "Inbox rows in DEAD (sampled).", w)?,
            pending_rows: r.gauge("handoff_worker_pending_rows", "Inbox rows waiting to be processed (sampled).", w)?,
            oldest_lease: r.float_gauge(
                "handoff_worker_oldest_lease_age_seconds",
                "How long the oldest PROCESSING lease has been held, 0 when none (sampled).",
                w,
            )?,
            oldest_retry: r.float_gauge(
                "handoff_worker_oldest_retry_age_seconds",
                "How long the oldest row waiting after a failure has waited, 0 when none (sampled).",
                w,
            )?,
            unavailable: r.counter(
                "handoff_worker_inbox_unavailable_total",
                "Batches handed back untouched because the inbox database failed for a reason not of the rows' data, by kind.",
                &["worker", "kind"],
            )?,
            endpoint_unavailable: r.counter(
                "handoff_worker_endpoint_unavailable_total",
                "Rows handed back untouched because their HTTP endpoint gave no verdict (no connection, no answer in time, 429, 502, 503, 504).",
                by_type,
            )?,
        })
    }

    pub(crate) fn for_worker(&self, worker: &str) -> WorkerHandles {
        let l = &[worker];
        for kind in OutageKind::ALL {
            self.unavailable.with_label_values(&[worker, kind.label()]);
        }
        WorkerHandles {
            worker: worker.to_owned(),
            families: self.clone(),
            fenced: self.fenced.with_label_values(l),
            reclaims: self.reclaims.with_label_values(l),
            settle_refused: self.settle_refused.with_label_values(l),
            dead_rows: self.dead_rows.with_label_values(l),
            pending_rows: self.pending_rows.with_label_values(l),
            oldest_lease: self.oldest_lease.with_label_values(l),
            oldest_retry: self.oldest_retry.with_label_values(l),
        }
    }
}

#[derive(Clone)]
pub(crate) struct WorkerHandles {
    worker: String,
    families: WorkerMetrics,
    pub fenced: prometheus::IntCounter,
    pub reclaims: prometheus::IntCounter,
    pub settle_refused: prometheus::IntCounter,
    pub dead_rows: IntGauge,
    pub pending_rows: IntGauge,
    pub oldest_lease: Gauge,
    pub oldest_retry: Gauge,
}

impl WorkerHandles {
    pub(crate) fn processed(&self, handler: &str, seconds: f64) {
        self.families.processed.with_label_values(&[&self.worker, handler]).inc();
        self.families.handler.with_label_values(&[&self.worker, handler]).observe(seconds);
    }

    pub(crate) fn failed(&self, handler: &str) {
        self.families.failed.with_label_values(&[&self.worker, handler]).inc();
    }

    pub(crate) fn endpoint_unavailable(&self, handler: &str) {
        self.families.endpoint_unavailable.with_label_values(&[&self.worker, handler]).inc();
    }

    pub(crate) fn dead(&self, handler: &str) {
        self.families.dead.with_label_values(&[&self.worker, handler]).inc();
    }

    pub(crate) fn unavailable(&self, kind: OutageKind) {
        self.families.unavailable.with_label_values(&[&self.worker, kind.label()]).inc();
    }
}
