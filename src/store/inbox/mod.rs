//! The inbox state machine's store: PENDING rows claimed, their handlers' effects and PROCESSED
//! committed together, failures recorded.
//!
//! - `seam.rs`: what the worker asks ([`InboxStore`]); `rows.rs`: the rows and outcomes;
//! - `database.rs`: [`Inbox`], that seam on either database, written once;
//! - `statements.rs`, `bindings.rs`, `contract.rs`: the statements' texts, their parameters,
//!   what each is offered and must return; `handler_sql.rs`, `apply.rs`: handler statements and
//!   applying them row by row; `postgres*.rs`, `mysql.rs`: running them.

pub(crate) mod apply;
pub(crate) mod bindings;
pub mod contract;
mod database;
pub(crate) mod handler_sql;
pub mod mysql;
pub(crate) mod postgres;
pub(crate) mod postgres_handlers;
mod postgres_locked;
pub(crate) mod rows;
pub(crate) mod seam;
pub(crate) mod statements;

pub use database::{Inbox, counts};
pub use handler_sql::{EventInput, Form, HandlerInput, HandlerSql, HandlerSqlError, MissingField};
pub use mysql::MyInbox;
pub use postgres::PgInbox;
pub use postgres_locked::{LockedInbox, LockedRows};
pub use rows::{Applied, ApplyError, BindValue, BoundStatement, InboxCounts, InboxRow, InboxStats, Merged, merged};
pub use seam::InboxStore;
