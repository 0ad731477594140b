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

/// The header names of a batch's messages, each checked and made once: a relay's entries
/// share their field names (they come from its configuration, not from rows), and a name made
/// again is cloned, not checked and copied per message.
#[derive(Default)]
pub(super) struct HeaderNames(Vec<(Bytes, HeaderName)>);

impl HeaderNames {
    fn get(&mut self, name: &Bytes) -> Result<HeaderName, Unsendable> {
        if let Some((_, made)) = self.0.iter().find(|(known, _)| known == name) {
            return Ok(made.clone());
        }
        let text = std::str::from_utf8(name).map_err(|_| Unsendable::FieldName)?;
        let made = HeaderName::from_str(text).map_err(|e| Unsendable::HeaderName(text.to_owned(), e.to_string()))?;
        self.0.push((name.clone(), made.clone()));
        Ok(made)
    }
}

/// The message for `entry`: its body and headers, or why its fields cannot travel as NATS
/// headers (the entry's own data: it is rejected, its neighbours go on).
pub(super) fn message(
    body_field: &Bytes,
    entry: &Entry,
    names: &mut HeaderNames,
) -> Result<(HeaderMap, Bytes), Unsendable> {
    let mut headers = HeaderMap::new();
    let mut body = Bytes::new();
    for (name, value) in &entry.fields {
        if name == body_field {
            body = value.clone();
            continue;
        }
        let header = names.get(name)?;
        let value = std::str::from_utf8(value).map_err(|_| Unsendable::NotText(header.to_string()))?;
        let value =
            HeaderValue::from_str(value).map_err(|e| Unsendable::HeaderValue(header.to_string(), e.to_string()))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(fields: &[(&'static str, &'static str)]) -> Entry {
        let fields = fields.iter().map(|(n, v)| (Bytes::from_static(n.as_bytes()), Bytes::from_static(v.as_bytes())));
        Entry { stream: "audit.user".into(), fields: fields.collect(), event_id: "e-1".into(), run: None, trace: None }
    }

    #[test]
    fn a_batch_makes_each_header_name_once_and_a_bad_name_is_still_the_entrys_fault() {
        let body = Bytes::from_static(b"payload");
        let mut names = HeaderNames::default();
        for _ in 0..3 {
            let good = entry(&[("event_type", "user.changed"), ("payload", "{}"), ("Nats-Msg-Id", "spoofed")]);
            let (headers, value) = message(&body, &good, &mut names).unwrap();
            assert_eq!(&value[..], b"{}");
            assert_eq!(headers.get("event_type").map(|v| v.as_str()), Some("user.changed"));
            assert_eq!(headers.get("Nats-Msg-Id").map(|v| v.as_str()), Some("e-1"), "the event id, not a field");
        }
        assert_eq!(names.0.len(), 2, "event_type and Nats-Msg-Id, made once each");
        let bad = message(&body, &entry(&[("a:b", "x")]), &mut names).unwrap_err();
        assert!(bad.to_string().contains("a:b"), "{bad}");
        let bad = message(&body, &entry(&[("note", "line\r\nbreak")]), &mut names).unwrap_err();
        assert!(bad.to_string().contains("note"), "{bad}");
    }
}
