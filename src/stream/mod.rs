//! The broker: the seam the relay appends through (`seam`), reading entries back (`read`), the
//! dedupe / ordered-run script (`script`), and Redis Streams behind it (`redis`); NATS JetStream
//! (`nats`) implements the owner side so far (a relay's `broker = "nats"`).

pub mod nats;
pub(crate) mod read;
pub mod redis;
pub(crate) mod script;
pub(crate) mod seam;

pub use seam::{
    AppendOptions, AppendOutcome, Dedupe, Durability, Entry, EntryId, EventStream, ServerId, StreamState, Trim,
    Unavailable,
};
