//! The one TOML file that configures handoff, as typed structs.
//!
//! Every struct rejects unknown keys, every duration carries its unit (`"250ms"`, `"30s"`), and
//! every field documents its default. Each component's section is its own: `relay/config.rs`,
//! `bridge/config.rs`, `worker/config.rs`, `pause/config.rs`, `relay/partitions/config.rs`,
//! `broker/kafka/config.rs`, `broker/nats/config.rs`; they are re-exported here. This module
//! holds the root (`file`), what several share (connections, TLS, secrets, the claim loop,
//! templates), loading (file + environment + `*_file` secrets) in `load`, cross-field checks in
//! `validate`, and the choices `claim = "auto"` and an absent `apply` make (`claim`, `apply`).

pub(crate) mod admin;
pub(crate) mod apply;
mod backoff;
mod claim;
pub(crate) mod claim_loop;
pub(crate) mod connections;
mod event_types;
pub(crate) mod file;
pub(crate) mod keep;
pub(crate) mod load;
pub(crate) mod ordered;
pub(crate) mod secret;
mod shards;
mod telemetry;
pub(crate) mod template;
pub(crate) mod tls;
mod validate;

pub(crate) use crate::bridge::config::{
    BridgeConfig, EnvelopeNames, EventIdFormat, StreamSource, UnknownTypes, ValidateConfig,
};
pub(crate) use crate::broker::Broker;
pub(crate) use crate::relay::config::{OnFailure, RelayConfig};
pub(crate) use crate::worker::config::never_forwarded;
pub(crate) use crate::worker::config::{
    HandlerConfig, HandlerVerdict, HttpHandlerConfig, Unhandled, WorkerConfig, WorkerOverrides,
};
pub(crate) use backoff::BackoffConfig;
pub(crate) use claim_loop::{ClaimLoopConfig, ClaimMode, LoopDefaults};
pub(crate) use connections::{Dialect, RedisConfig};
pub(crate) use event_types::type_matches;
pub(crate) use secret::Secret;
pub(crate) use telemetry::{ListenerTls, LogFormat, MetricsAuth, TelemetryConfig, TracingConfig};
pub(crate) use tls::{TlsConfig, TlsMode};

pub(crate) use crate::broker::nats::config::NatsConfig;
pub(crate) use crate::relay::config::SettleMode;
pub(crate) use crate::worker::config::HandlerErrors;
pub(crate) use connections::DatabaseConfig;
pub(crate) use file::Config;
pub(crate) use load::load;
#[cfg(test)]
pub(crate) use load::load_str;
