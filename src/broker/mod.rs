//! The broker: the seam the relay appends through (`seam`), the seam a bridge reads a consumer
//! group through (`group`), entries as read (`read`), the dedupe / ordered-run script
//! (`script`), and the brokers behind both seams: Redis Streams (`redis`) and NATS JetStream
//! (`nats`), and Apache Kafka (`kafka`, owner side only so far).

pub mod group;
pub mod kafka;
pub mod nats;
pub(crate) mod read;
pub mod redis;
pub(crate) mod script;
pub(crate) mod seam;

pub use seam::{
    AppendOptions, AppendOutcome, Dedupe, Durability, Entry, EntryId, EventStream, ServerId, StreamState, Trim,
    Unavailable,
};
