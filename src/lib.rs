//! handoff: relays owner services' outbox tables to Redis Streams, and streams into consumer
//! inboxes, closing each hand-off with a local transaction or a unique key.
//!
//! The library is the `handoff` binary's: what is public here is what the binaries (`handoff`,
//! `handoff-bench`, `handoff-chaos`) and the integration tests need — the command line, the
//! configuration, the store's seams and dialects, the broker seam and its Redis client, the
//! metrics registry, TLS. The components (relay, bridge, worker), their runtime, the wiring and
//! the operator commands are inside.
#![forbid(unsafe_code)]

mod admin;
pub mod app;
mod base64;
mod bridge;
pub mod broker;
mod check;
mod checklist;
pub mod cli;
pub mod config;
mod dead;
mod error;
pub mod fault;
#[cfg(fuzzing)]
pub mod fuzzing;
mod ops;
mod pause;
mod percent;
mod poison;
pub mod reasons;
pub mod relay;
mod replay;
mod reprocess;
mod rewind;
mod runtime;
mod shards;
pub mod sql;
pub mod store;
pub mod telemetry;
pub mod tls;
mod worker;
