//! The shard count each family of sharded streams was first written with, in
//! `handoff_stream_shards` of the relay's own database: what keeps a changed `{shard(column, N)}`
//! from moving a key to another shard while its earlier events still wait in the old one.

pub(crate) mod dialect;
pub(crate) mod mysql;
pub(crate) mod postgres;
pub(crate) mod seam;

pub use dialect::{record, recorded, replace};
pub use seam::Recorded;
