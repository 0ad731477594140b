//! handoff: relays owner services' outbox tables to Redis Streams, and streams into consumer
//! inboxes, closing each hand-off with a local transaction or a unique key.
#![forbid(unsafe_code)]

pub mod app;
pub mod check;
pub mod cli;
pub mod config;
pub mod fault;
pub mod inbox;
pub mod migrate;
pub mod ops;
pub mod relay;
pub mod shutdown;
pub mod sql;
pub mod store;
pub mod stream;
pub mod tasks;
pub mod telemetry;
pub mod tls;
pub mod worker;
