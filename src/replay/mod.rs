//! `handoff replay`, the whole feature: DELIVERED rows of a reference outbox, chosen by a
//! selection, appended again a page at a time in id order (plain reads: nothing the live relay
//! claims or settles is locked), with the job's checkpoint in `handoff_replays`.
//!
//! - `job.rs`: a job, from the request to its last page, for the CLI and the admin API;
//! - `rows.rs`: what it reads and keeps; `database.rs`: those reads and writes on either
//!   database; `postgres.rs`, `mysql.rs`: their SQL.

mod database;
mod job;
mod mysql;
mod postgres;
mod rows;

pub(crate) use database::load;
pub(crate) use job::{OutboxTime, Progress, Request, plan, run};
