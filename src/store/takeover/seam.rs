//! The takeover seam: what the bridge asks of the consumer's inbox — take a batch of entries
//! over in one transaction, record the ones it cannot accept, count redeliveries — and the
//! events and records it speaks in. The bridge sees only this.

use std::collections::HashMap;
use std::future::Future;

use crate::config::HandlerErrors;
use crate::reasons::PoisonReason;
use crate::store::error::{StoreError, StoreResult};
use crate::store::inbox::rows::BoundStatement;

/// Text known to be UTF-8, kept as the bytes it was read as (a payload is not copied on its way
/// from the stream reply to the database).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text(bytes::Bytes);

impl Text {
    /// `None` unless `bytes` is UTF-8.
    pub fn new(bytes: bytes::Bytes) -> Option<Self> {
        std::str::from_utf8(&bytes).is_ok().then_some(Self(bytes))
    }

    pub fn from_static(text: &'static str) -> Self {
        Self(bytes::Bytes::from_static(text.as_bytes()))
    }

    pub(crate) fn as_str(&self) -> &str {
        // Checked once in `new`; checking again is cheaper than a copy and needs no `unsafe`.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A valid entry, ready to be taken over into the inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxEvent {
    pub event_id: String,
    pub event_type: String,
    pub owner: Option<String>,
    pub aggregate_type: Option<String>,
    pub aggregate_id: Option<String>,
    /// JSON object text.
    pub payload: Text,
    /// JSON object text.
    pub headers: Text,
    /// The entry's fields beyond the mapped ones: a JSON object of strings (`{}` when none).
    pub fields: Text,
    pub content_hash: String,
    pub stream: String,
    pub entry_id: String,
    /// Kept as IGNORED: an event type this consumer does not handle, recorded, never processed.
    pub ignored: bool,
}

impl InboxEvent {
    /// The inbox status the event starts in (`:status`).
    pub(crate) fn status(&self) -> &'static str {
        if self.ignored { "IGNORED" } else { "PENDING" }
    }
}

/// An entry that could not be taken over, recorded with why.
#[derive(Debug, Clone, PartialEq)]
pub struct PoisonRecord {
    pub stream: String,
    pub entry_id: String,
    pub event_id: Option<String>,
    pub reason: PoisonReason,
    pub detail: String,
    pub fields: serde_json::Value,
}

impl PoisonRecord {
    /// `event`'s id was already taken over with other content (`existing_hash`, if still there).
    pub(crate) fn taken_over_with_other_content(event: &InboxEvent, existing_hash: Option<&str>) -> Self {
        let detail = format!(
            "event id already taken over with content hash {}, this entry hashes to {}",
            existing_hash.unwrap_or("(unknown)"),
            event.content_hash
        );
        Self::conflict(event, detail)
    }

    /// `event`'s id appears earlier in the same batch with other content (`first_hash`).
    pub(crate) fn earlier_in_batch_with_other_content(event: &InboxEvent, first_hash: &str) -> Self {
        let detail = format!(
            "event id appears earlier in the batch with content hash {first_hash}; this entry hashes to {}",
            event.content_hash
        );
        Self::conflict(event, detail)
    }

    fn conflict(event: &InboxEvent, detail: String) -> Self {
        Self {
            stream: event.stream.clone(),
            entry_id: event.entry_id.clone(),
            event_id: Some(event.event_id.clone()),
            reason: PoisonReason::PayloadConflict,
            detail,
            fields: serde_json::json!({
                "event_type": event.event_type,
                "aggregate_type": event.aggregate_type,
                "aggregate_id": event.aggregate_id,
                "payload": event.payload.as_str(),
                "headers": event.headers.as_str(),
                "fields": event.fields.as_str(),
            }),
        }
    }
}

/// What the takeover made of one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakenOver {
    Inserted,
    /// Inserted as PROCESSED, its handler statements run in the same transaction (apply at
    /// take-over).
    Applied,
    /// Already in the inbox with the same content (a redelivery or a republish).
    Duplicate,
    /// Already in the inbox with other content; recorded in the poison table as a conflict.
    Conflict,
}

impl TakenOver {
    /// The one decision of a takeover, for every dialect: the insert took the event
    /// (`inserted`), or the inbox already holds it with `existing_hash` — the same content (a
    /// redelivery, a republish) or other content, which is recorded in `poison` as a conflict.
    pub(crate) fn judge(
        event: &InboxEvent,
        inserted: bool,
        existing_hash: Option<&str>,
        poison: &mut Vec<PoisonRecord>,
    ) -> Self {
        if inserted {
            TakenOver::Inserted
        } else if existing_hash == Some(event.content_hash.as_str()) {
            TakenOver::Duplicate
        } else {
            poison.push(PoisonRecord::taken_over_with_other_content(event, existing_hash));
            TakenOver::Conflict
        }
    }
}

/// Apply at take-over: the handler statements of each event of a batch, in the events' order
/// (`None`: the event is inserted PENDING for the worker), and what handler errors mean.
pub struct Effects<'a> {
    pub statements: Vec<Option<Vec<BoundStatement<'a>>>>,
    pub errors: &'a HandlerErrors,
}

/// What a takeover applying effects made of a batch.
#[derive(Debug)]
pub struct Taken {
    /// One per event, in order.
    pub outcomes: Vec<TakenOver>,
    /// Why the batch's effects were not applied (it was taken over PENDING instead).
    pub left_to_worker: Option<StoreError>,
}

/// The bridge's inbox: the takeover, and handoff's own count of the redeliveries that reached
/// the inbox database (invariant 12).
pub trait TakeoverStore: Send + Sync + 'static {
    /// In one transaction: inserts the events that are new for `consumer`, records `poison` and
    /// any payload conflicts, and — when the entries' deliveries were `counted` — forgets their
    /// counts (they have a verdict now). Returns one outcome per event, in order. Nothing is
    /// recorded if it fails, so the caller must not acknowledge anything then.
    fn take_over(
        &self,
        consumer: &str,
        events: &[InboxEvent],
        poison: &[PoisonRecord],
        counted: bool,
    ) -> impl Future<Output = StoreResult<Vec<TakenOver>>> + Send;

    /// [`take_over`](Self::take_over), and in the same transaction each new event's `effects`,
    /// the event inserted as PROCESSED ([`TakenOver::Applied`]). If a handler statement (or the
    /// commit) fails — refuses the batch's data, or names a table or grant that is missing —
    /// nothing of it is applied: the batch is taken over as by `take_over`, its events PENDING
    /// for the worker (which finds the row at fault, or waits out the broken handler), and
    /// [`Taken::left_to_worker`] says why. `Err` only when that takeover fails too.
    fn take_over_applying(
        &self,
        consumer: &str,
        events: &[InboxEvent],
        effects: &Effects<'_>,
        poison: &[PoisonRecord],
        counted: bool,
    ) -> impl Future<Output = StoreResult<Taken>> + Send;

    /// Counts one more delivery that reached the database for each of `entry_ids` of `stream`,
    /// in a transaction of its own that commits before the entries are handled (so a bridge
    /// that dies handling them has still counted it): each entry's count so far.
    fn count_deliveries(
        &self,
        consumer: &str,
        stream: &str,
        entry_ids: &[String],
    ) -> impl Future<Output = StoreResult<HashMap<String, u32>>> + Send;

    /// The delivery counts of those of `entry_ids` counted before (the others are absent).
    fn deliveries(
        &self,
        consumer: &str,
        stream: &str,
        entry_ids: &[String],
    ) -> impl Future<Output = StoreResult<HashMap<String, u32>>> + Send;

    /// Forgets counts not raised for `age` (their entries were acknowledged some other way).
    fn forget_deliveries(
        &self,
        consumer: &str,
        age: std::time::Duration,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Whether the database answers.
    fn ping(&self) -> impl Future<Output = StoreResult<()>> + Send;
}
