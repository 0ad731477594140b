//! The outbox: the table the relay claims due rows from and settles them in. One seam
//! ([`OutboxStore`]), written once over the dialect's statements ([`statements::OutboxSql`]);
//! Postgres and MySQL only run their SQL.

pub(crate) mod bindings;
pub mod contract;
pub(crate) mod dialect;
pub(crate) mod mysql;
pub mod mysql_sql;
pub(crate) mod postgres;
pub(crate) mod postgres_listen;
pub mod postgres_locked;
pub mod postgres_sql;
pub(crate) mod seam;
pub(crate) mod shape;
pub(crate) mod statements;

pub use dialect::Outbox;
pub use mysql::MyOutbox;
pub use postgres::PgOutbox;
pub(crate) use postgres_listen::notifications;
pub use seam::{
    ClaimedRow, Deferred, Delivered, DeliveredPages, DeliveredRow, Failure, Locked, LockedBatch, OutboxClaims,
    OutboxStats, OutboxStore, RowRef, Verdict,
};
