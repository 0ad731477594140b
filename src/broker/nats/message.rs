//! What an entry becomes on NATS: the message (the payload field as the body, every other field
//! a header, `Nats-Msg-Id` the event id), and the subjects a row may not reach.

use std::str::FromStr;

use async_nats::header::{HeaderMap, HeaderName, HeaderValue, NATS_MESSAGE_ID};
use bytes::Bytes;

use crate::broker::seam::Entry;

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
