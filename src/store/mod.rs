//! What every database statement of handoff shares: `[database]` and its dialect (`config`),
//! the connection of each database (`database`, `postgres`, `mysql`), error classification
//! (`error`), parameter values, result rows and the row filters operators use. The statements
//! themselves are their components': the relay's in `relay/outbox`, the bridge's takeover in
//! `bridge/takeover`, the worker's inbox in `worker/inbox`.

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
