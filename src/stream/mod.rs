//! The seam between the relay and the broker: append a batch of entries, learn each one's fate.
//!
//! Redis Streams is the first broker; another is a sibling module implementing [`EventStream`].

pub mod redis;

use std::future::Future;
use std::time::Duration;

/// One stream entry to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub stream: String,
    pub fields: Vec<(String, String)>,
}

/// Approximate trimming applied with each append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trim {
    MaxLen(u64),
    MinAge(Duration),
}

/// The fate of one entry of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendOutcome {
    /// The broker stored it and returned this entry id.
    Appended(String),
    /// The broker refused this entry for a reason of its own (e.g. the key holds another type).
    Rejected(String),
    /// The broker could not be reached or is not accepting writes; not the entry's fault.
    Unavailable(String),
}

#[derive(Debug, thiserror::Error)]
#[error("stream broker unavailable: {0}")]
pub struct Unavailable(pub String);

pub trait EventStream: Send + Sync + 'static {
    /// Appends every entry (pipelined); returns one outcome per entry, in order.
    fn append(&self, entries: &[Entry], trim: Option<Trim>) -> impl Future<Output = Vec<AppendOutcome>> + Send;

    /// Whether the broker answers.
    fn ping(&self) -> impl Future<Output = Result<(), Unavailable>> + Send;
}
