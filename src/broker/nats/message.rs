//! What an entry becomes on NATS, and what JetStream's answer means for it: the message (the
//! payload field as the body, every other field a header, `Nats-Msg-Id` the event id), the
//! subjects a row may not reach, and a PubAck or a failed publish as the entry's outcome.

use std::str::FromStr;

use async_nats::header::{HeaderMap, HeaderName, HeaderValue, NATS_MESSAGE_ID};
use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use bytes::Bytes;

use crate::broker::seam::{AppendOutcome, Entry};

/// Why an entry's fields cannot travel as a NATS message: its own data, so it is rejected.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unsendable {
    #[error("a field name is not UTF-8")]
    FieldName,
    #[error("field {0} is not UTF-8")]
    NotText(String),
    #[error("field {0} cannot be a NATS header name: {1}")]
    HeaderName(String, String),
    #[error("field {0} cannot be a NATS header value: {1}")]
    HeaderValue(String, String),
    #[error("the event id cannot be a NATS header value: {0}")]
    EventId(String),
}

/// The message for `entry`: its body and headers, or why its fields cannot travel as NATS
/// headers (the entry's own data: it is rejected, its neighbours go on).
pub(super) fn message(body_field: &Bytes, entry: &Entry) -> Result<(HeaderMap, Bytes), Unsendable> {
    let mut headers = HeaderMap::new();
    let mut body = Bytes::new();
    for (name, value) in &entry.fields {
        if name == body_field {
            body = value.clone();
            continue;
        }
        let name = std::str::from_utf8(name).map_err(|_| Unsendable::FieldName)?;
        let value = std::str::from_utf8(value).map_err(|_| Unsendable::NotText(name.to_owned()))?;
        let header = HeaderName::from_str(name).map_err(|e| Unsendable::HeaderName(name.to_owned(), e.to_string()))?;
        let value =
            HeaderValue::from_str(value).map_err(|e| Unsendable::HeaderValue(name.to_owned(), e.to_string()))?;
        headers.insert(header, value);
    }
    let id = HeaderValue::from_str(&entry.event_id).map_err(|e| Unsendable::EventId(e.to_string()))?;
    headers.insert(NATS_MESSAGE_ID, id);
    Ok((headers, body))
}

/// Why `subject` (rendered from a row's values) cannot be published to: a row must not reach
/// subjects it was not meant for through a wildcard, nor break the protocol with whitespace.
pub(super) fn subject_problem(subject: &str) -> Option<String> {
    let bad_token = subject.split('.').any(|t| t.is_empty() || t == "*" || t == ">");
    let bad_char = subject.chars().any(|c| c.is_whitespace() || c.is_control());
    (bad_token || bad_char).then(|| {
        format!(
            "subject `{}` is not a NATS subject (empty tokens, wildcards and whitespace are refused)",
            subject.escape_debug()
        )
    })
}

/// A failed publish: the entry's own fault when it is too large for the server (`max_payload`)
/// or for the stream (`max_msg_size`, or headers over the stream's limit) — no retry can store
/// it, so the row is not held as if the broker were down; anything else is an outage.
pub(super) fn failed(error: &PublishError) -> AppendOutcome {
    use async_nats::jetstream::ErrorCode;
    let too_large_for_stream = std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<async_nats::jetstream::Error>())
        .is_some_and(|e| {
            matches!(
                e.error_code(),
                ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM | ErrorCode::STREAM_HEADER_EXCEEDS_MAXIMUM
            )
        });
    match error.kind() {
        PublishErrorKind::MaxPayloadExceeded => AppendOutcome::Rejected(error.to_string()),
        PublishErrorKind::Other if too_large_for_stream => AppendOutcome::Rejected(error.to_string()),
        _ => AppendOutcome::Unavailable(error.to_string()),
    }
}

/// The outcome a PubAck (or its failure) gives the entry.
pub(super) fn acknowledged(ack: Result<async_nats::jetstream::publish::PublishAck, PublishError>) -> AppendOutcome {
    match ack {
        Ok(ack) if ack.duplicate => AppendOutcome::Duplicate(ack.sequence.to_string()),
        Ok(ack) => AppendOutcome::Appended(ack.sequence.to_string()),
        Err(e) => failed(&e),
    }
}
