//! Pauses: which components are paused and for how long, and after how long the shipped alert
//! says so.

use prometheus::{Gauge, GaugeVec, IntGaugeVec, Opts, Registry};

use crate::telemetry::metrics::Reg;

#[derive(Clone)]
pub(crate) struct PauseMetrics {
    paused: IntGaugeVec,
    paused_seconds: GaugeVec,
    alert_after: Gauge,
}

impl PauseMetrics {
    pub(crate) fn register(registry: &Registry) -> prometheus::Result<Self> {
        let r = Reg(registry);
        let alert_after = Gauge::with_opts(Opts::new(
            "handoff_pause_alert_after_seconds",
            "pause.alert_after: HandoffPausedTooLong fires when a component has been paused longer.",
        ))?;
        registry.register(Box::new(alert_after.clone()))?;
        Ok(Self {
            paused: r.gauge(
                "handoff_paused",
                "1 while the component is paused (handoff pause), else 0; as this replica last read it.",
                &["component", "name"],
            )?,
            paused_seconds: r.float_gauge(
                "handoff_paused_seconds",
                "How long the component has been paused, by the database's clock; 0 when it is not.",
                &["component", "name"],
            )?,
            alert_after,
        })
    }

    pub(crate) fn set_alert_after(&self, seconds: f64) {
        self.alert_after.set(seconds);
    }

    /// `component` is paused since `seconds`, or not (`None`).
    pub(crate) fn set(&self, component: &str, name: &str, paused_for: Option<f64>) {
        self.paused.with_label_values(&[component, name]).set(i64::from(paused_for.is_some()));
        self.paused_seconds.with_label_values(&[component, name]).set(paused_for.unwrap_or(0.0));
    }
}
