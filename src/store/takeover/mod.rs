//! The takeover: a stream entry becomes an inbox row (insert-if-absent on `(consumer,
//! event_id)`) or a poison record, in one transaction, before the entry is acknowledged.

pub(crate) mod contract;
pub(crate) mod dialect;
pub(crate) mod mysql;
pub(crate) mod postgres;
pub(crate) mod seam;
pub(crate) mod statements;

pub use dialect::Takeover;
pub use mysql::MyTakeover;
pub use postgres::PgTakeover;
pub use seam::{DeliveryCounts, Effects, InboxEvent, PoisonRecord, Taken, TakenOver, TakeoverStore, Text};
