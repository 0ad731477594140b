//! The shard count each family of sharded streams was first written with, in
//! `handoff_stream_shards` of the relay's own database: what keeps a changed `{shard(column, N)}`
//! from moving a key to another shard while its earlier events still wait in the old one.
//! The relay records and compares it at start, `handoff check` compares it, `handoff reshard`
//! changes it on purpose (`agreement.rs`); `postgres.rs` and `mysql.rs` hold the SQL.

mod agreement;
mod mysql;
mod postgres;

pub(crate) use agreement::{Agreement, agree, reshard};
