//! The databases handoff writes: the bridge's takeover into the inbox (`takeover`) and the
//! worker's inbox state machine (`inbox`), each with one trait, its SQL contract and its Postgres
//! and MySQL statements inside (the relay's outbox is `relay/outbox`). Below them, what every
//! seam shares: the connection of each database (`postgres`, `mysql`), error classification,
//! parameter values and result rows.

pub(crate) mod columns;
pub mod database;
pub(crate) mod error;
pub mod inbox;
pub mod migrate;
pub(crate) mod mysql;
pub(crate) mod net;
pub(crate) mod param;
pub mod postgres;
pub(crate) mod rows;
pub mod selection;
pub mod takeover;

pub use database::{Database, Dialect};
pub use error::{Fault, OutageKind, PrepareError, StatementError, StoreError, StoreResult};
