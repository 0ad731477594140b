//! The inbox state machine's store: PENDING rows claimed, their handlers' effects and PROCESSED
//! committed together, failures recorded.

pub(crate) mod apply;
pub(crate) mod bindings;
pub mod contract;
pub(crate) mod dialect;
pub(crate) mod handler_sql;
pub mod mysql;
pub(crate) mod postgres;
pub(crate) mod postgres_handlers;
mod postgres_locked;
pub(crate) mod seam;
pub(crate) mod statements;

pub use dialect::{Inbox, counts};
pub use handler_sql::{EventInput, Form, HandlerInput, HandlerSql, HandlerSqlError, MissingField};
pub use mysql::MyInbox;
pub use postgres::PgInbox;
pub use seam::{
    Applied, ApplyError, BindValue, BoundStatement, InboxCounts, InboxRow, InboxStats, InboxStore, LockedInbox,
    LockedRows, Merged, merged,
};
