//! The whole configuration file and `[shutdown]`; each component's section is its own.

use std::time::Duration;

use serde::Deserialize;

use crate::bridge::config::BridgeConfig;
use crate::broker::redis::config::RedisConfig;
use crate::relay::config::RelayConfig;
use crate::store::config::DatabaseConfig;
use crate::telemetry::config::TelemetryConfig;
use crate::worker::config::WorkerConfig;

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
    /// The Kafka cluster for relays and bridges with `broker = "kafka"`. Default: none.
    pub kafka: Option<crate::broker::kafka::KafkaConfig>,
    /// Metrics, health endpoints and logs.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// How SIGTERM / SIGINT drain the process.
    #[serde(default)]
    pub shutdown: ShutdownConfig,
    /// How components learn of `handoff pause` / `resume`.
    #[serde(default)]
    pub pause: crate::pause::config::PauseConfig,
    /// The admin API and status page. Default: off.
    pub admin: Option<super::admin::AdminConfig>,
    /// Outbox relays: each moves one table's rows to its broker.
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
    pub(crate) fn uses(&self, broker: crate::broker::Broker) -> bool {
        self.relays.iter().any(|r| r.broker == broker) || self.bridges.iter().any(|b| b.broker == broker)
    }

    /// Every configured component, as a pause names it.
    pub(crate) fn pause_targets(&self) -> Vec<crate::pause::target::Target> {
        use crate::pause::target::{ComponentKind, Target};
        let target = |component, name: &String| Target { component, name: name.clone() };
        let relays = self.relays.iter().map(|r| target(ComponentKind::Relay, &r.name));
        let bridges = self.bridges.iter().map(|b| target(ComponentKind::Bridge, &b.name));
        relays.chain(bridges).chain(self.workers.iter().map(|w| target(ComponentKind::Worker, &w.name))).collect()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownConfig {
    /// After SIGTERM, in-flight batches get this long to finish or be released before the process
    /// exits. Keep it below the orchestrator's kill timeout. Default: "20s".
    #[serde(with = "humantime_serde")]
    pub grace_period: Duration,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self { grace_period: Duration::from_secs(20) }
    }
}
