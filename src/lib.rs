//! handoff: relays owner services' outbox tables to Redis Streams, and streams into consumer
//! inboxes, closing each hand-off with a local transaction or a unique key.
#![forbid(unsafe_code)]

pub mod app;
pub mod bridge;
pub mod check;
pub mod cli;
pub mod config;
pub mod error;
pub mod fault;
pub mod ops;
pub mod reasons;
pub mod relay;
pub mod runtime;
pub mod sql;
pub mod store;
pub mod stream;
pub mod telemetry;
pub mod tls;
pub mod worker;

/// The reference schema's migrations (they belong to the store; kept at this path for the CLI).
pub use store::migrate;
