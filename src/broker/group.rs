//! The broker seam, consumer side: what a bridge needs of a consumer group, whatever the broker.
//! Redis Streams (`redis::RedisGroup`) and NATS JetStream (`nats::NatsGroup`) implement it; the
//! bridge imports neither.

use std::future::Future;
use std::time::Duration;

use super::read::RawEntry;

#[derive(Debug, thiserror::Error)]
pub(crate) enum GroupError {
    /// The group (or the whole stream) does not exist (anymore).
    #[error("consumer group or stream missing: {0}")]
    NoGroup(String),
    #[error("broker unavailable: {0}")]
    Unavailable(String),
    #[error("broker refused: {0}")]
    Refused(String),
}

pub(crate) type GroupResult<T> = Result<T, GroupError>;

/// Figures for the lag and pending gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct GroupInfo {
    /// Delivered to the group and not acknowledged.
    pub pending: u64,
    /// Entries not yet delivered to the group; `None` when the broker cannot tell.
    pub lag: Option<u64>,
}

/// What one read brought: entries delivered for the first time, and entries the broker says it
/// delivered before (their deliveries are counted in the inbox database before they are handled).
#[derive(Debug, Default)]
pub(crate) struct Read {
    pub entries: Vec<RawEntry>,
    pub redelivered: Vec<RawEntry>,
}

impl Read {
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.redelivered.is_empty()
    }
}

/// One stream's consumer group as one instance of a bridge reads it.
pub(crate) trait ConsumerGroup: Send + Sync + 'static {
    /// This instance's name in logs.
    fn consumer(&self) -> &str;

    /// Entries delivered to this instance before (a previous run under the same name) and never
    /// acknowledged. A broker that redelivers them by itself after its acknowledgement wait
    /// returns none (they come back through `read`).
    fn own_pending(&self, count: u32) -> impl Future<Output = GroupResult<Vec<RawEntry>>> + Send;

    /// The group's next entries, at most `count`, waiting up to `block` for some.
    fn read(&self, count: u32, block: Option<Duration>) -> impl Future<Output = GroupResult<Read>> + Send;

    /// Acknowledges entries whose takeover committed.
    fn ack(&self, entry_ids: &[String]) -> impl Future<Output = GroupResult<()>> + Send;

    /// Creates the group if it is missing, starting at `start` ("0": the whole stream, "$": only
    /// new entries).
    fn ensure(&self, start: &str) -> impl Future<Output = GroupResult<()>> + Send;

    /// Entries idle longer than `idle` on other instances (dead ones), now this instance's; at
    /// most `count`. A broker that redelivers them by itself returns none.
    fn reclaim(&self, idle: Duration, count: u32) -> impl Future<Output = GroupResult<Vec<RawEntry>>> + Send;

    /// Deletes instances idle this long with nothing pending, where the broker keeps them.
    fn delete_idle_consumers(&self, idle: Duration) -> impl Future<Output = ()> + Send;

    fn info(&self) -> impl Future<Output = GroupResult<GroupInfo>> + Send;

    /// How long the oldest unacknowledged entry has waited, where the broker can tell.
    fn oldest_pending_idle(&self) -> impl Future<Output = GroupResult<Option<Duration>>> + Send;

    /// Appends poison records to a dead-letter stream `key`; true only if all were appended.
    fn dead_letters(&self, key: &str, records: &[crate::event::PoisonRecord]) -> impl Future<Output = bool> + Send;

    /// A read failed as unavailable: follow the stream if it moved (a cluster failover).
    fn after_outage(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// The stream is quiet after large reads: give the read buffer back.
    fn release_buffers(&self) {}
}
