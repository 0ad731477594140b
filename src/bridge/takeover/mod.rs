//! The takeover: a stream entry becomes an inbox row (insert-if-absent on `(consumer,
//! event_id)`) or a poison record, in one transaction, before the entry is acknowledged.
//!
//! - `database.rs`: [`Takeover`], what the bridge asks of the inbox, on either database, the
//!   decision written once; `outcome.rs`: what a takeover is given and returns;
//! - `statements.rs`: the statements (reference or `[bridge.sql]`), checked against the catalog,
//!   and their parameters; `contract.rs`: what each is offered and must return;
//! - `postgres.rs`, `mysql.rs`: running them.

pub(crate) mod contract;
pub(crate) mod database;
pub(crate) mod mysql;
pub(crate) mod outcome;
pub(crate) mod postgres;
pub(crate) mod statements;

pub(crate) use crate::event::{InboxEvent, PoisonRecord, Text};
pub(crate) use database::Takeover;
pub(crate) use outcome::{Effects, TakenOver};
