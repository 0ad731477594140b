//! The seam between the relay and the broker: append a batch of entries, learn each one's fate.
//!
//! Redis Streams is the first broker; another is a sibling module implementing [`EventStream`].

pub mod redis;
pub mod script;

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;

/// One stream entry to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub stream: String,
    /// Names and values as shared bytes: the pipeline and the script take them without copying.
    pub fields: Vec<(Bytes, Bytes)>,
    /// The event id (names the dedupe marker).
    pub event_id: String,
    /// Entries sharing a run (consecutive, same stream) are appended in order by one atomic
    /// call that stops at the first failure: the rest come back `Skipped`.
    pub run: Option<u32>,
}

/// How appends are made.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AppendOptions {
    pub trim: Option<Trim>,
    pub dedupe: Option<Dedupe>,
}

/// Remember appended event ids for `window` and skip them when they come again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dedupe {
    pub window: Duration,
    pub key_prefix: String,
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
    /// Already appended within the dedupe window, as this entry id; nothing was added.
    Duplicate(String),
    /// Not attempted: an earlier entry of its run failed (ordering must not be broken).
    Skipped,
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
    fn append(&self, entries: &[Entry], options: &AppendOptions) -> impl Future<Output = Vec<AppendOutcome>> + Send;

    /// Whether the broker answers.
    fn ping(&self) -> impl Future<Output = Result<(), Unavailable>> + Send;

    /// Trims `stream` below the oldest entry some consumer group has not both received and
    /// acknowledged; a stream without groups is left alone. Returns the entries removed.
    fn trim_acknowledged(&self, stream: &str) -> impl Future<Output = Result<u64, Unavailable>> + Send;
}
