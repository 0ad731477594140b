//! The takeover: a stream entry becomes an inbox row (insert-if-absent on `(consumer,
//! event_id)`) or a poison record, in one transaction, before the entry is acknowledged.

pub mod contract;
pub mod mysql;
pub mod postgres;
pub mod seam;
pub mod statements;

pub use mysql::MyTakeover;
pub use postgres::PgTakeover;
pub use seam::{DeliveryCounts, InboxEvent, PoisonRecord, Takeover, TakeoverStore, Text};
