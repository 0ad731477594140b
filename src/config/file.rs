//! The whole configuration file, `[shutdown]`, and the sections each component reads.

use std::time::Duration;

use serde::Deserialize;

use super::bridge::BridgeConfig;
use super::connections::{DatabaseConfig, RedisConfig};
use super::relay::RelayConfig;
use super::telemetry::TelemetryConfig;
use super::worker::WorkerConfig;

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The SQL database handoff reads and settles rows in (the owner's, for a relay).
    pub database: DatabaseConfig,
    /// The Redis deployment that carries the streams.
    #[serde(default)]
    pub redis: RedisConfig,
    /// The NATS server for relays and bridges with `broker = "nats"`. Default: none.
    pub nats: Option<crate::broker::nats::config::NatsConfig>,
    /// The Kafka cluster for relays with `broker = "kafka"`. Default: none.
    pub kafka: Option<crate::broker::kafka::KafkaConfig>,
    /// Metrics, health endpoints and logs.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// How SIGTERM / SIGINT drain the process.
    #[serde(default)]
    pub shutdown: ShutdownConfig,
    /// How components learn of `handoff pause` / `resume`.
    #[serde(default)]
    pub pause: PauseConfig,
    /// The admin API and status page. Default: off.
    pub admin: Option<super::admin::AdminConfig>,
    /// Outbox relays: each moves one table's rows to Redis Streams.
    #[serde(default, rename = "relay")]
    pub relays: Vec<RelayConfig>,
    /// Inbox bridges: each reads streams into a consumer's inbox table.
    #[serde(default, rename = "bridge")]
    pub bridges: Vec<BridgeConfig>,
    /// Inbox workers: each applies handlers to a consumer's inbox rows.
    #[serde(default, rename = "worker")]
    pub workers: Vec<WorkerConfig>,
}

impl Config {
    /// Whether some relay or bridge uses `broker` (only those get a client of it).
    pub fn uses(&self, broker: crate::broker::Broker) -> bool {
        self.relays.iter().any(|r| r.broker == broker) || self.bridges.iter().any(|b| b.broker == broker)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    /// After SIGTERM, in-flight batches get this long to finish or be released before the process
    /// exits. Keep it below the orchestrator's kill timeout. Default: "20s".
    #[serde(default = "defaults::grace_period", with = "humantime_serde")]
    pub grace_period: Duration,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self { grace_period: defaults::grace_period() }
    }
}

/// `[pause]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PauseConfig {
    /// How often every replica reads the pauses in force: a pause or resume takes effect
    /// within this long. Default: "1s".
    #[serde(default = "defaults::pause_poll", with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Exported as `handoff_pause_alert_after_seconds`: the shipped alert fires when something
    /// has been paused longer. Default: "1h".
    #[serde(default = "defaults::pause_alert_after", with = "humantime_serde")]
    pub alert_after: Duration,
}

impl Default for PauseConfig {
    fn default() -> Self {
        Self { poll_interval: defaults::pause_poll(), alert_after: defaults::pause_alert_after() }
    }
}

mod defaults {
    use std::time::Duration;

    pub fn grace_period() -> Duration {
        Duration::from_secs(20)
    }
    pub fn pause_poll() -> Duration {
        Duration::from_secs(1)
    }
    pub fn pause_alert_after() -> Duration {
        Duration::from_secs(3600)
    }
}
