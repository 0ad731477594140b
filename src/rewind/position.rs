//! Where `handoff bridge rewind` moves a group to, what it reports, and why it refuses.

use serde::Serialize;

use crate::broker::EntryId;
use crate::store::selection::{Moment, MomentError};

/// Where to move the group: just before an entry id, or to a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RewindTo {
    /// The group's last-delivered id becomes this (`<ms>-<seq>`).
    Entry(String),
    /// Entries added from this time on are delivered again.
    Moment(Moment),
}

impl RewindTo {
    /// An entry id (`1700000000000-0`, or milliseconds alone), a duration ago (`1h`) or an RFC
    /// 3339 time.
    pub(crate) fn parse(text: &str) -> Result<Self, NotAPosition> {
        if EntryId::parse(text).is_some() {
            return Ok(RewindTo::Entry(text.to_owned()));
        }
        Moment::parse(text).map(RewindTo::Moment).map_err(NotAPosition)
    }
}

/// `--to` is neither an entry id nor a time.
#[derive(Debug, thiserror::Error)]
#[error("{0}, nor an entry id (\"1700000000000-0\")")]
pub(crate) struct NotAPosition(MomentError);

#[derive(Debug, thiserror::Error)]
pub(crate) enum RewindError {
    #[error("no bridge named `{0}` in the config (configured: {1})")]
    Unknown(String, String),
    #[error("bridge `{0}` has no stream `{1}`")]
    NoStream(String, String),
    #[error(
        "bridge `{0}` reads from NATS JetStream, where rewinding recreates its durable consumers: pause it first \
         (handoff pause --bridge {0}), rewind, then resume it"
    )]
    NotPaused(String),
    #[error("stream {0}: the bridge's durable consumer does not exist yet (the bridge creates it when it starts)")]
    NoConsumer(String),
    #[error("database: {0}")]
    Database(String),
    #[error("nats: {0}")]
    Nats(String),
    #[error("kafka: {0}")]
    Kafka(String),
    #[error("stream {stream}: rewind only moves back: {to} is after the group's position {position}")]
    Forward { stream: String, to: String, position: String },
    #[error("stream {stream}: {error}")]
    Group { stream: String, error: crate::broker::group::GroupError },
    #[error("redis: {0}")]
    Connect(String),
}

/// One stream's move.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Moved {
    pub stream: String,
    /// The group's last-delivered id before.
    pub from: String,
    /// After (with `dry_run`: would be).
    pub to: String,
    /// Entries delivered and not acknowledged at the time (they stay pending).
    pub pending: u64,
}
