//! The outbox: the table the relay claims due rows from and settles them in. One seam
//! ([`OutboxStore`], `seam.rs`), implemented once for both databases by [`Outbox`]
//! (`database.rs`); Postgres and MySQL only run their SQL (`postgres*.rs`, `mysql*.rs`).
//!
//! - `rows.rs`: the rows and outcomes the relay speaks in;
//! - `contract.rs`: the statements `[relay.sql]` may replace, their parameters and columns;
//!   `overrides.rs`: `[relay.sql]` itself;
//!   `bindings.rs`: each parameter's value; `shape.rs`: reading a claimed row;
//!   `prepared.rs`: what a prepared outbox knows and which statements a relay runs;
//! - `postgres_sql.rs`, `mysql_sql.rs`: the reference statements; `postgres_locked.rs`: the
//!   locked claim; `postgres_listen.rs`: wake-ups by LISTEN / NOTIFY.

pub(crate) mod bindings;
pub(crate) mod contract;
pub(crate) mod database;
pub(crate) mod mysql;
pub(crate) mod mysql_sql;
pub(crate) mod overrides;
pub(crate) mod postgres;
pub(crate) mod postgres_listen;
pub(crate) mod postgres_locked;
pub(crate) mod postgres_sql;
pub(crate) mod prepared;
pub(crate) mod rows;
pub(crate) mod seam;
pub(crate) mod shape;

pub(crate) use database::Outbox;
pub(crate) use postgres_listen::notifications;
pub(crate) use postgres_locked::LockedBatch;
pub(crate) use rows::{ClaimedRow, Deferred, Delivered};
pub(crate) use rows::{DeliveredRow, Failure, OutboxStats, RowRef, Verdict};
pub(crate) use seam::OutboxStore;
