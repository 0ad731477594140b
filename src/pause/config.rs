//! `[pause]`: how components learn of `handoff pause` and `handoff resume`.

use std::time::Duration;

use serde::Deserialize;

/// `[pause]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PauseConfig {
    /// How often every replica reads the pauses in force: a pause or resume takes effect
    /// within this long. Default: "1s".
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Exported as `handoff_pause_alert_after_seconds`: the shipped alert fires when something
    /// has been paused longer. Default: "1h".
    #[serde(with = "humantime_serde")]
    pub alert_after: Duration,
}

impl Default for PauseConfig {
    fn default() -> Self {
        Self { poll_interval: Duration::from_secs(1), alert_after: Duration::from_secs(3600) }
    }
}

impl PauseConfig {
    /// What is wrong with the section, one line each.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.poll_interval.is_zero() {
            problems.push("pause.poll_interval must be > 0".into());
        }
        problems
    }
}
