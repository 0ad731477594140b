//! An event on its way into the inbox, and the record of one that could not go in: what the
//! brokers' consumer groups, the bridge's takeover and the worker's handler statements all speak.

use crate::reasons::PoisonReason;

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
    /// The record as the one JSON body a dead letter carries on NATS and Kafka (nothing of the
    /// entry's content goes into a header there: a hostile value cannot break the message).
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "reason": self.reason.as_str(),
            "detail": self.detail,
            "source_stream": self.stream,
            "source_id": self.entry_id,
            "event_id": self.event_id,
            "fields": self.fields,
        })
    }

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
