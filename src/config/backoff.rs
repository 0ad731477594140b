//! How long to wait before trying again.

use std::time::Duration;

use serde::Deserialize;

/// Exponential backoff: `initial × multiplier^(n-1)`, capped at `max`, ± `jitter` (a fraction).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackoffConfig {
    /// The first delay.
    #[serde(with = "humantime_serde")]
    pub initial: Duration,
    /// The longest delay.
    #[serde(with = "humantime_serde")]
    pub max: Duration,
    /// Each delay is the one before times this.
    pub multiplier: f64,
    /// Each delay is moved at random by up to this fraction of it, so replicas spread out.
    pub jitter: f64,
}

impl BackoffConfig {
    /// Row failures: 1s, 2s, 4s … capped at 10m, ±20%.
    pub(crate) fn row_default() -> Self {
        Self { initial: Duration::from_secs(1), max: Duration::from_secs(600), multiplier: 2.0, jitter: 0.2 }
    }

    /// Outages: 200ms, 400ms … capped at 30s, ±20%.
    pub(crate) fn outage_default() -> Self {
        Self { initial: Duration::from_millis(200), max: Duration::from_secs(30), multiplier: 2.0, jitter: 0.2 }
    }
}
