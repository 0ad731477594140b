//! `handoff bridge rewind`, the whole feature: a bridge's consumer group moved back so entries
//! are delivered again, on Redis (`commands.rs`), NATS JetStream (`nats.rs`) or Kafka
//! (`kafka.rs`); `position.rs` parses where to and says what moved.

mod commands;
mod kafka;
mod nats;
mod position;

pub(crate) use commands::rewind;
pub(crate) use position::RewindTo;
