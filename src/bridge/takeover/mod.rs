//! The takeover: a stream entry becomes an inbox row (insert-if-absent on `(consumer,
//! event_id)`) or a poison record, in one transaction, before the entry is acknowledged.
//!
//! - `seam.rs`: what the bridge asks ([`TakeoverStore`]) and the events and records it speaks in;
//! - `database.rs`: [`Takeover`], that seam on either database, the decision written once;
//! - `statements.rs`: the statements (reference or `[bridge.sql]`), checked against the catalog,
//!   and their parameters; `contract.rs`: what each is offered and must return;
//! - `postgres.rs`, `mysql.rs`: running them.

pub(crate) mod contract;
pub(crate) mod database;
pub(crate) mod mysql;
pub(crate) mod postgres;
pub(crate) mod seam;
pub(crate) mod statements;

pub(crate) use database::Takeover;
pub(crate) use seam::{Effects, InboxEvent};
pub(crate) use seam::{PoisonRecord, TakenOver};
pub(crate) use seam::{TakeoverStore, Text};
