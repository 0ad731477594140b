//! `handoff poison list | retry`, the whole feature: the entries bridges recorded in their poison
//! tables, and the way back after the cause is fixed.
//!
//! - `commands.rs`: list and retry, for the CLI, the admin API and the status page;
//! - `records.rs`: what a poison table holds and which records a command reads;
//! - `postgres.rs`, `mysql.rs`: their SQL (the bridge writes the records: `bridge::takeover`).

mod commands;
mod mysql;
mod postgres;
mod records;

pub(crate) use commands::{Filter, Reappended, list, retry};
pub(crate) use records::PoisonFilter;
