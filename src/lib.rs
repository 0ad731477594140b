//! handoff: relays owner services' outbox tables to a broker (Redis Streams, NATS JetStream,
//! Kafka), and takes events over from the broker into consumer inboxes, closing each hand-off
//! with a local transaction or a unique key.
//!
//! The library exists for the `handoff` binary. Every module is private; what is public is
//! the short list below, re-exported at the root, which the binary, the benchmark
//! (`handoff-bench`), the fuzz targets and the integration tests use:
//!
//! - the command line: [`main`], [`Cli`];
//! - configuration: [`load`], [`load_str`], [`Config`] and the sections the tests build by hand;
//! - the metrics registry: [`register_metrics`];
//! - databases: [`Database`], [`postgres_pool`], the reference schema ([`migrate()`],
//!   [`migrate_postgres`]);
//! - the relay's outbox statements and seam ([`Outbox`], [`OutboxStore`], the reference SQL),
//!   which the benchmark and the claim-plan tests run directly;
//! - the inbox and takeover statements ([`Inbox`], [`Takeover`]), for the consumer benchmark;
//! - appending to a broker ([`EventStream`], [`RedisStream`], [`NatsStream`]);
//! - TLS's crypto provider, fault injection's switches, and the fuzz targets' entry points.
//!
//! Anything else is `pub(crate)`, and `unreachable_pub` keeps it so; so are the methods of
//! those types that no binary, benchmark or test calls (`scripts/lib/surface.py`
//! holds the count of `pub` items under 300).
// `deny`, not `forbid`: one module may allow it, `broker/kafka/topic_id.rs`, which calls a
// function of librdkafka's C API the Rust client does not wrap.
#![deny(unsafe_code)]
// Whatever the binaries and the tests do not reach from here is crate-internal; the lint keeps it
// so (a `pub` item nothing outside can name must say `pub(crate)`).
#![warn(unreachable_pub)]

mod admin;
mod app;
mod base64;
mod bridge;
mod broker;
mod check;
mod cli;
mod config;
mod dead;
mod error;
mod event;
mod event_types;
mod fault;
#[cfg(fuzzing)]
pub mod fuzzing;
mod migrate;
mod names;
mod ops;
mod pause;
mod percent;
mod poison;
mod reasons;
mod relay;
mod replay;
mod reprocess;
mod rewind;
mod runtime;
mod secret;
mod shards;
mod sql;
mod store;
mod telemetry;
mod template;
mod tls;
mod worker;

// The command line.
pub use cli::{Cli, main};

// Configuration.
pub use broker::nats::config::NatsConfig;
pub use config::file::Config;
pub use config::load::{load, load_str};
pub use relay::config::SettleMode;
pub use store::config::DatabaseConfig;
pub use worker::config::HandlerErrors;

// Metrics.
pub use app::register_metrics;

// Databases and the reference schema.
pub use migrate::parts::Part;
pub use migrate::{
    OutboxLayout, apply as migrate, postgres as migrate_postgres, postgres_with as migrate_postgres_with,
};
pub use store::database::Database;
pub use store::postgres::connect::pool as postgres_pool;

// The relay's outbox: its seam and its reference statements.
pub use relay::outbox::contract::StatementKind;
pub use relay::outbox::database::Outbox;
pub use relay::outbox::mysql_sql::default_sql as mysql_outbox_sql;
pub use relay::outbox::postgres_locked::{LockedSql, delivered_sql};
pub use relay::outbox::postgres_sql::default_sql as postgres_outbox_sql;
pub use relay::outbox::rows::{ClaimedRow, Delivered};
pub use relay::outbox::seam::OutboxStore;
pub use relay::partitions::PartitionedOutbox;
pub use relay::partitions::plan::Span;

// The inbox and takeover statements, and the handler SQL the worker binds.
pub use bridge::takeover::database::Takeover;
pub use bridge::takeover::outcome::Effects;
pub use event::{InboxEvent, Text};
pub use sql::params::{Placeholder, rewrite as rewrite_placeholders};
pub use worker::inbox::contract::WorkerStatement;
pub use worker::inbox::database::Inbox;
pub use worker::inbox::handler_sql::{EventInput, HandlerSql};
pub use worker::inbox::mysql::reference as mysql_worker_sql;
pub use worker::inbox::rows::{BindValue, BoundStatement, InboxRow};

// Brokers: appending, and Kafka's committed offsets.
pub use broker::kafka::config::KafkaConfig;
pub use broker::kafka::offsets::committed_lag as kafka_committed_lag;
pub use broker::nats::NatsStream;
pub use broker::redis::client::RedisStream;
pub use broker::seam::{AppendOptions, AppendOutcome, Entry, EventStream};

// TLS's crypto provider, and fault injection's switches.
pub use fault::Faults;
pub use tls::provider as tls_provider;
