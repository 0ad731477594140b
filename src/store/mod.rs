//! The databases handoff writes: the bridge's takeover into the inbox (`takeover`) and the
//! worker's inbox state machine (`inbox`), each with one trait, its SQL contract and its Postgres
//! and MySQL statements inside (the relay's outbox is `relay/outbox`). Below them, what every
//! seam shares: the connection of each database (`postgres`, `mysql`), error classification,
//! parameter values and result rows.

pub(crate) mod columns;
pub(crate) mod config;
pub(crate) mod database;
pub(crate) mod error;
pub(crate) mod mysql;
pub(crate) mod net;
pub(crate) mod param;
pub(crate) mod postgres;
pub(crate) mod rows;
pub(crate) mod selection;

pub(crate) use error::{OutageKind, PrepareError, StatementError, StoreError, StoreResult};

pub(crate) use database::Database;
