//! The outbox: the table the relay claims due rows from and settles them in. One seam
//! ([`OutboxStore`]), written once over the dialect's statements ([`statements::OutboxSql`]);
//! Postgres and MySQL only run their SQL.

pub mod bindings;
pub mod contract;
pub mod dialect;
pub mod mysql;
pub mod mysql_sql;
pub mod postgres;
pub mod postgres_listen;
pub mod postgres_locked;
pub mod postgres_sql;
pub mod seam;
pub mod shape;
pub mod statements;

pub use dialect::Outbox;
pub use mysql::MyOutbox;
pub use postgres::PgOutbox;
pub use postgres_listen::notifications;
pub use seam::{
    ClaimedRow, Deferred, Delivered, DeliveredPages, DeliveredRow, Failure, Locked, LockedBatch, OutboxStats,
    OutboxStore, RowRef, Verdict,
};
