//! The one TOML file that configures handoff, as typed structs.
//!
//! Every struct rejects unknown keys, every duration carries its unit (`"250ms"`, `"30s"`), and
//! every field documents its default. Loading (file + environment + `*_file` secrets) lives in
//! `load`, cross-field checks in `validate`, the choice `claim = "auto"` makes in `claim`.

pub mod admin;
pub(crate) mod apply;
mod backoff;
mod bridge;
mod claim;
mod claim_loop;
mod connections;
pub(crate) mod consumer_sql;
mod event_types;
pub(crate) mod file;
pub(crate) mod keep;
mod load;
pub(crate) mod ordered;
mod relay;
pub(crate) mod secret;
mod shards;
mod telemetry;
pub(crate) mod template;
pub(crate) mod tls;
mod validate;
mod worker;

pub use crate::broker::Broker;
pub use crate::broker::nats::config::NatsConfig;
pub use backoff::BackoffConfig;
pub use bridge::{BridgeConfig, EnvelopeNames, EventIdFormat, StreamSource, UnknownTypes, ValidateConfig};
pub use claim_loop::{ClaimLoopConfig, ClaimMode, LoopDefaults, RelayLoop, WorkerLoop};
pub use connections::{DatabaseConfig, Dialect, RedisConfig};
pub use consumer_sql::{TakeoverOverrides, WorkerOverrides};
pub(crate) use event_types::type_matches;
pub use file::{Config, ShutdownConfig};
pub use load::{ConfigError, load, load_str};
pub use relay::{
    BrokerLossConfig, DedupeConfig, DurabilityConfig, NotifyConfig, OnFailure, OrderingConfig, RelayConfig,
    RetentionConfig, SettleMode, SqlOverrides, TrimConfig,
};
pub use secret::Secret;
pub use telemetry::{ListenerTls, LogFormat, MetricsAuth, TelemetryConfig, TracingConfig};
pub use tls::{TlsConfig, TlsMode};
pub(crate) use worker::never_forwarded;
pub use worker::{
    HandlerConfig, HandlerErrors, HandlerVerdict, HttpHandlerConfig, InboxRetention, Unhandled, WorkerConfig,
};
