//! The inbox state machine's store: PENDING rows claimed, their handlers' effects and PROCESSED
//! committed together, failures recorded.
//!
//! - `database.rs`: [`Inbox`], what the worker asks of its inbox, on either database, written
//!   once (one `match` per statement run); `rows.rs`: the rows and outcomes;
//! - `statements.rs`, `bindings.rs`, `contract.rs`: the statements' texts, their parameters,
//!   what each is offered and must return; `handler_sql.rs`, `apply.rs`: handler statements and
//!   applying them row by row; `postgres*.rs`, `mysql.rs`: running them.

pub(crate) mod apply;
pub(crate) mod bindings;
pub(crate) mod contract;
pub(crate) mod database;
pub(crate) mod handler_sql;
pub(crate) mod mysql;
pub(crate) mod postgres;
pub(crate) mod postgres_handlers;
mod postgres_locked;
pub(crate) mod rows;
pub(crate) mod statements;

pub(crate) use database::{Inbox, counts};
pub(crate) use handler_sql::{EventInput, HandlerSql};
pub(crate) use handler_sql::{HandlerSqlError, MissingField};
pub(crate) use postgres_locked::LockedInbox;
pub(crate) use rows::{Applied, ApplyError};
pub(crate) use rows::{BoundStatement, InboxRow};
