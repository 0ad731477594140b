//! Registration helpers shared by every component's metrics.

use prometheus::{GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// Registration helpers: build, register, return.
pub(crate) struct Reg<'a>(pub &'a Registry);

impl Reg<'_> {
    pub(crate) fn counter(&self, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<IntCounterVec> {
        let metric = IntCounterVec::new(Opts::new(name, help), labels)?;
        self.0.register(Box::new(metric.clone()))?;
        Ok(metric)
    }

    pub(crate) fn gauge(&self, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<IntGaugeVec> {
        let metric = IntGaugeVec::new(Opts::new(name, help), labels)?;
        self.0.register(Box::new(metric.clone()))?;
        Ok(metric)
    }

    pub(crate) fn float_gauge(&self, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<GaugeVec> {
        let metric = GaugeVec::new(Opts::new(name, help), labels)?;
        self.0.register(Box::new(metric.clone()))?;
        Ok(metric)
    }

    pub(crate) fn histogram(&self, name: &str, help: &str, buckets: &[f64]) -> prometheus::Result<HistogramVec> {
        self.histogram_by(name, help, buckets, &["relay"])
    }

    pub(crate) fn histogram_by(
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
