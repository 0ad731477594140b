//! The one TOML file that configures handoff, as typed structs.
//!
//! Every struct rejects unknown keys, every duration carries its unit (`"250ms"`, `"30s"`), and
//! every field documents its default. Each component's section is its own: `relay/config.rs`,
//! `bridge/config.rs`, `worker/config.rs`, `pause/config.rs`, `relay/partitions/config.rs`,
//! `broker/kafka/config.rs`, `broker/nats/config.rs`; they are re-exported here. This module
//! holds the root (`file`), what several share (connections, TLS, secrets, the claim loop,
//! templates), loading (file + environment + `*_file` secrets) in `load`, cross-field checks in
//! `validate`, and the choices `claim = "auto"` and an absent `apply` make (`claim`, `apply`).

pub mod admin;
pub(crate) mod apply;
mod backoff;
mod claim;
pub(crate) mod claim_loop;
mod connections;
mod event_types;
pub(crate) mod file;
pub(crate) mod keep;
mod load;
pub(crate) mod ordered;
pub(crate) mod secret;
mod shards;
mod telemetry;
pub(crate) mod template;
pub(crate) mod tls;
mod validate;

pub use crate::bridge::config::{
    BridgeConfig, EnvelopeNames, EventIdFormat, StreamSource, TakeoverOverrides, UnknownTypes, ValidateConfig,
};
pub use crate::broker::Broker;
pub use crate::broker::nats::config::NatsConfig;
pub use crate::relay::config::{
    BrokerLossConfig, DedupeConfig, DurabilityConfig, NotifyConfig, OnFailure, OrderingConfig, RelayConfig,
    RetentionConfig, SettleMode, SqlOverrides, TrimConfig,
};
pub(crate) use crate::worker::config::never_forwarded;
pub use crate::worker::config::{
    HandlerConfig, HandlerErrors, HandlerVerdict, HttpHandlerConfig, InboxRetention, Unhandled, WorkerConfig,
    WorkerOverrides,
};
pub use backoff::BackoffConfig;
pub use claim_loop::{ClaimLoopConfig, ClaimMode, LoopDefaults, RelayLoop, WorkerLoop};
pub use connections::{DatabaseConfig, Dialect, RedisConfig};
pub(crate) use event_types::type_matches;
pub use file::{Config, ShutdownConfig};
pub use load::{ConfigError, load, load_str};
pub use secret::Secret;
pub use telemetry::{ListenerTls, LogFormat, MetricsAuth, TelemetryConfig, TracingConfig};
pub use tls::{TlsConfig, TlsMode};
