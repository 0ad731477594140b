//! Pause and resume, the whole feature: a paused relay, bridge or worker is one row in
//! `handoff_pauses`, in the database the component already uses. `handoff pause` and the admin
//! API upsert it, `handoff resume` deletes it ([`commands`]); every running replica polls the
//! pauses in force and each component waits between two batches while it is paused
//! ([`watch`]); `handoff_paused` says so ([`metrics`]).
//!
//! - `target.rs`: what a pause names and holds;
//! - `commands.rs`: pause, resume and the pauses in force, on either database;
//! - `postgres.rs`, `mysql.rs`: their SQL;
//! - `watch.rs`: how running components see them;
//! - `config.rs`: the `[pause]` section; `metrics.rs`: its gauges.

mod commands;
pub(crate) mod config;
mod metrics;
mod mysql;
mod postgres;
pub(crate) mod target;
mod watch;

pub(crate) use commands::{PauseError, active, cli_user, known, pause, resume};
pub(crate) use metrics::PauseMetrics;
pub(crate) use target::{ComponentKind, Pause, Target};
pub(crate) use watch::{PauseSwitch, Pauses, watch};
