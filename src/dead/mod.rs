//! DEAD rows, as an operator sees them: the same in an outbox and in an inbox (the reference
//! schemas share the columns), listed, re-driven to PENDING or purged, on either database.
//!
//! - `commands.rs`: `handoff dead list | retry | purge`, for the CLI, the admin API and the page;
//! - `rows.rs`: the tables, the filter and the rows shown;
//! - `postgres.rs`, `mysql.rs`: their SQL.

mod commands;
mod mysql;
mod postgres;
mod rows;

pub(crate) use commands::{Filter, run};
pub(crate) use rows::{DeadAction, DeadFilter};
