//! The inbox state machine's store: PENDING rows claimed, their handlers' effects and PROCESSED
//! committed together, failures recorded.

pub mod apply;
pub mod bindings;
pub mod contract;
pub mod dialect;
pub mod mysql;
pub mod postgres;
mod postgres_handlers;
mod postgres_locked;
pub mod seam;
pub mod statements;

pub use dialect::{Inbox, counts};
pub use mysql::MyInbox;
pub use postgres::PgInbox;
pub use seam::{
    Applied, ApplyError, BindValue, BoundStatement, InboxCounts, InboxRow, InboxStats, InboxStore, LockedInbox,
    LockedRows,
};
