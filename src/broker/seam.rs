//! The broker seam: what the relay asks of a broker — append a batch of entries and learn each
//! one's fate, trim, tell whether entries it acknowledged are still there — and the entries,
//! outcomes and states it speaks in. Redis Streams implements it (`redis`).

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
    /// The row's headers (JSON), kept only while tracing is on: the event's trace context.
    pub trace: Option<String>,
}

/// How appends are made.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AppendOptions {
    pub trim: Option<Trim>,
    pub dedupe: Option<Dedupe>,
    pub durability: Option<Durability>,
}

/// What "appended" must mean before an entry counts as appended: on `replicas` replicas
/// (`WAIT`), and with `aof` fsynced to the AOF (`WAITAOF`), within `timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durability {
    pub replicas: u32,
    pub aof: bool,
    pub timeout: Duration,
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
    /// Appended, but the durability gate was not met in time: not yet safe to count as
    /// delivered (the row is released and appended again later).
    Unconfirmed(String),
}

/// A server behind the stream client and the id of the process serving it: a new id means a
/// restart or a failover, after which appends it had acknowledged may be gone.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerId {
    pub server: String,
    pub run_id: String,
}

/// What a stream says about itself (`XINFO STREAM`); `None` fields when it does not exist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamState {
    pub exists: bool,
    /// Entries in the stream now.
    pub length: Option<u64>,
    /// Entries ever added (Redis ≥ 7.0); only a lost or recreated stream sees it go down.
    pub entries_added: Option<u64>,
    /// The newest entry ever deleted with XDEL (Redis ≥ 7.0; trimming does not move it).
    pub max_deleted: Option<EntryId>,
    /// The oldest entry still in the stream.
    pub first_entry: Option<EntryId>,
    /// The newest id the stream has given (Redis `last-generated-id`, JetStream's last
    /// sequence): below an entry a relay appended only if the stream lost it.
    pub last_entry: Option<EntryId>,
    /// Which incarnation of the stream this is, where the broker tells (a hash of a Kafka
    /// topic's id): another one means the stream was deleted and made again, whatever its
    /// counters say.
    pub incarnation: Option<u64>,
    /// A partitioned stream's partitions (Kafka's), each with the offset its next message
    /// gets (the high watermark): at or below an offset a relay appended to it only if the
    /// partition lost it (the topic made again, its log truncated). Empty elsewhere.
    pub partition_ends: Vec<(i32, i64)>,
}

impl StreamState {
    /// Whether an entry that is not in the stream was removed on purpose (trimmed or deleted)
    /// rather than lost. Trimming removes the oldest entries, so an absent entry older than the
    /// first one left was trimmed — if this stream ever removed anything (added > length). A
    /// stream lost and recreated has removed nothing: every absent entry of it was lost.
    pub(crate) fn removed_on_purpose(&self, entry: EntryId) -> bool {
        if !self.exists {
            return false;
        }
        if self.max_deleted.is_some_and(|deleted| deleted > EntryId(0, 0) && entry <= deleted) {
            return true;
        }
        let removed_some = match (self.entries_added, self.length) {
            (Some(added), Some(length)) => added > length,
            _ => true, // a server without the counters: trust the first entry alone
        };
        removed_some && self.first_entry.is_none_or(|first| entry < first)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("stream broker unavailable: {0}")]
pub struct Unavailable(pub String);

pub trait EventStream: Send + Sync + 'static {
    /// Appends every entry (pipelined); returns one outcome per entry, in order.
    fn append(&self, entries: &[Entry], options: &AppendOptions) -> impl Future<Output = Vec<AppendOutcome>> + Send;

    /// Whether the broker answers (a cluster: whether any of its primaries does).
    fn ping(&self) -> impl Future<Output = Result<(), Unavailable>> + Send;

    /// After appends failed as unavailable: whether part of the broker still answers (a
    /// cluster with one shard down), so the failure is of that part, not of the broker. A
    /// broker of one server is up or down as a whole: `false`.
    fn partly_up(&self) -> impl Future<Output = bool> + Send {
        async { false }
    }

    /// Trims `stream` below the oldest entry some consumer group has not both received and
    /// acknowledged; a stream without groups is left alone. Returns the entries removed. A
    /// broker whose own retention removes what consumers no longer need (JetStream's limits,
    /// interest or work queue; a Kafka topic's time, size or compaction) leaves nothing for
    /// handoff to trim: the default.
    fn trim_acknowledged(&self, _stream: &str) -> impl Future<Output = Result<u64, Unavailable>> + Send {
        async { Ok(0) }
    }

    /// The oldest entry some consumer group of `stream` still needs; `None` without groups (and
    /// on a broker that trims by its own retention: the default).
    fn acknowledged_floor(&self, _stream: &str) -> impl Future<Output = Result<Option<EntryId>, Unavailable>> + Send {
        async { Ok(None) }
    }

    /// The servers the client writes to, with their process ids.
    fn servers(&self) -> impl Future<Output = Result<Vec<ServerId>, Unavailable>> + Send;

    fn stream_state(&self, stream: &str) -> impl Future<Output = Result<StreamState, Unavailable>> + Send;

    /// Which of `entry_ids` (of `stream`) the stream holds, one answer per id, in order.
    fn entries_exist(
        &self,
        stream: &str,
        entry_ids: &[String],
    ) -> impl Future<Output = Result<Vec<bool>, Unavailable>> + Send;

    /// Like `entries_exist` for `(entry id, event id)` pairs: where an event id is given, an entry
    /// counts only if it is that event's. A broker that can hand an id out again after losing the
    /// entry that held it (JetStream's sequences, after a crash lost the stream's tail) answers
    /// for both; one whose ids are never reused need not look (the default).
    fn entries_of_events(
        &self,
        stream: &str,
        entries: &[(String, Option<String>)],
    ) -> impl Future<Output = Result<Vec<bool>, Unavailable>> + Send {
        let ids: Vec<String> = entries.iter().map(|(id, _)| id.clone()).collect();
        async move { self.entries_exist(stream, &ids).await }
    }

    /// Resolves when the client reconnected to a server (after a restart, a failover, a cut).
    fn reconnected(&self) -> impl Future<Output = ()> + Send;
}

/// Appends `entries` with `send`, which sends a batch and gathers its outcomes, for brokers
/// that cannot append a run in one call (NATS, Kafka; Redis appends a run in one script). The
/// entries outside runs go as one batch (in order, so one key's messages keep it); then each
/// entry of an ordered run alone, after the previous one's outcome: the first failure of a run
/// skips the rest of it, so a run lands in order or its tail comes back for the next batch.
pub(crate) async fn append_in_runs<'a, F, Fut>(entries: &'a [Entry], send: F) -> Vec<AppendOutcome>
where
    F: Fn(Vec<&'a Entry>) -> Fut,
    Fut: Future<Output = Vec<AppendOutcome>>,
{
    let mut loose = send(entries.iter().filter(|e| e.run.is_none()).collect()).await.into_iter();
    let mut outcomes: Vec<Option<AppendOutcome>> =
        entries.iter().map(|e| if e.run.is_none() { loose.next() } else { None }).collect();
    let mut failed_run: Option<u32> = None;
    for (i, entry) in entries.iter().enumerate() {
        let Some(run) = entry.run else { continue };
        if failed_run == Some(run) {
            outcomes[i] = Some(AppendOutcome::Skipped);
            continue;
        }
        let outcome = send(vec![entry]).await.pop().unwrap_or(AppendOutcome::Skipped);
        if !matches!(outcome, AppendOutcome::Appended(_) | AppendOutcome::Duplicate(_)) {
            failed_run = Some(run);
        }
        outcomes[i] = Some(outcome);
    }
    outcomes.into_iter().map(|o| o.unwrap_or(AppendOutcome::Skipped)).collect()
}

/// A stream entry id, ordered as Redis orders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct EntryId(pub u64, pub u64);

impl EntryId {
    pub(crate) fn parse(id: &str) -> Option<Self> {
        let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
        Some(EntryId(ms.parse().ok()?, seq.parse().ok()?))
    }

    /// The id right after this one.
    pub(crate) fn next(self) -> Self {
        match self.1.checked_add(1) {
            Some(seq) => EntryId(self.0, seq),
            None => EntryId(self.0 + 1, 0),
        }
    }
}

impl std::fmt::Display for EntryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_the_stream_removed_itself_is_trimmed_not_lost() {
        // 20 entries added, the 10 oldest trimmed.
        let trimmed = StreamState {
            exists: true,
            length: Some(10),
            entries_added: Some(20),
            max_deleted: Some(EntryId(0, 0)),
            first_entry: Some(EntryId(100, 10)),
            last_entry: Some(EntryId(100, 19)),
            incarnation: None,
            partition_ends: Vec::new(),
        };
        assert!(trimmed.removed_on_purpose(EntryId(100, 3)));
        assert!(!trimmed.removed_on_purpose(EntryId(100, 12)), "newer than what is left: lost");
        // Lost and recreated: new entries only, nothing ever removed.
        let recreated =
            StreamState { length: Some(5), entries_added: Some(5), first_entry: Some(EntryId(500, 0)), ..trimmed };
        assert!(!recreated.removed_on_purpose(EntryId(100, 3)), "older than the first entry, yet lost");
        let deleted = StreamState { max_deleted: Some(EntryId(600, 1)), ..recreated };
        assert!(deleted.removed_on_purpose(EntryId(600, 0)), "XDEL'd");
        assert!(!StreamState::default().removed_on_purpose(EntryId(1, 0)), "a stream that is gone lost everything");
    }
}
