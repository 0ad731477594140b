//! Metrics, registered once on the app's registry and bound per component.
//!
//! Labels are component names and small fixed enums (`reason`), never row or event ids. The
//! metrics reference in docs/operations.md lists every name; a test encodes a fresh registry against it.

mod bridge;
pub mod process;
mod relay;
mod worker;

pub use bridge::{BridgeHandles, BridgeMetrics};
pub use relay::{DeadReason, FailureReason, RelayHandles, RelayMetrics};
pub use worker::{WorkerHandles, WorkerMetrics};

use prometheus::{GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// Every family of every component, for the reference test and `handoff metrics`.
pub fn register_all(registry: &Registry) -> prometheus::Result<(RelayMetrics, BridgeMetrics, WorkerMetrics)> {
    process::register(registry)?;
    Ok((RelayMetrics::register(registry)?, BridgeMetrics::register(registry)?, WorkerMetrics::register(registry)?))
}

/// Registration helpers: build, register, return.
pub(crate) struct Reg<'a>(pub &'a Registry);

impl Reg<'_> {
    fn counter(&self, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<IntCounterVec> {
        let metric = IntCounterVec::new(Opts::new(name, help), labels)?;
        self.0.register(Box::new(metric.clone()))?;
        Ok(metric)
    }

    fn gauge(&self, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<IntGaugeVec> {
        let metric = IntGaugeVec::new(Opts::new(name, help), labels)?;
        self.0.register(Box::new(metric.clone()))?;
        Ok(metric)
    }

    fn float_gauge(&self, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<GaugeVec> {
        let metric = GaugeVec::new(Opts::new(name, help), labels)?;
        self.0.register(Box::new(metric.clone()))?;
        Ok(metric)
    }

    fn histogram(&self, name: &str, help: &str, buckets: &[f64]) -> prometheus::Result<HistogramVec> {
        self.histogram_by(name, help, buckets, &["relay"])
    }

    fn histogram_by(
        &self,
        name: &str,
        help: &str,
        buckets: &[f64],
        labels: &[&str],
    ) -> prometheus::Result<HistogramVec> {
        let metric = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets.to_vec()), labels)?;
        self.0.register(Box::new(metric.clone()))?;
        Ok(metric)
    }
}
