//! What an entry becomes on Kafka, and what a delivery report means for it: the message (the
//! payload field as the value, the key field as the key, every other field a header, the event
//! id in its own header), and a stored offset or a failed produce as the entry's outcome.

use bytes::Bytes;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};

use crate::broker::seam::{AppendOutcome, Entry};

/// How entries map onto messages (from `[kafka]` and the relay's payload field).
#[derive(Debug, Clone)]
pub(super) struct Mapping {
    /// The field carried as the value; every other field is a header.
    pub body_field: Bytes,
    /// The field whose value is the key (also kept as a header).
    pub key_field: Bytes,
    /// The header holding the event id (a field of that name is replaced by it).
    pub event_id_header: String,
    /// Only the event id as a header (Debezium's outbox event router's layout).
    pub event_id_only: bool,
    /// Whether the key field is also a header.
    pub key_header: bool,
}

/// One entry as a message's parts.
pub(super) struct Message {
    pub key: Option<Bytes>,
    pub value: Bytes,
    pub headers: OwnedHeaders,
}

impl Mapping {
    pub(super) fn message(&self, entry: &Entry) -> Message {
        let mut headers = OwnedHeaders::new_with_capacity(entry.fields.len() + 1);
        let (mut key, mut value) = (None, Bytes::new());
        for (name, field) in &entry.fields {
            if name == &self.key_field {
                key = Some(field.clone());
                if !self.key_header {
                    continue;
                }
            }
            if name == &self.body_field {
                value = field.clone();
                continue;
            }
            // Header names are strings in Kafka's protocol; a field name that is not UTF-8 is
            // carried with its invalid bytes replaced (names come from the configuration, not
            // from rows).
            let name = String::from_utf8_lossy(name);
            if self.event_id_only || name == self.event_id_header {
                continue;
            }
            headers = headers.insert(Header { key: &name, value: Some(field.as_ref()) });
        }
        headers = headers.insert(Header { key: &self.event_id_header, value: Some(entry.event_id.as_bytes()) });
        Message { key, value, headers }
    }
}

/// A read message's headers as (name, value) pairs; `None` when a name is not UTF-8. The rdkafka
/// crate panics reading such a name (any producer can write one): caught here, so a message's
/// bytes cannot stop the process or wedge a partition. A value that is null reads as empty.
pub(super) fn readable_headers(headers: Option<&rdkafka::message::BorrowedHeaders>) -> Option<Vec<(Bytes, Bytes)>> {
    use rdkafka::message::Headers;
    let Some(headers) = headers else { return Some(Vec::new()) };
    let read = || {
        let pairs = headers.iter().map(|h| {
            (Bytes::copy_from_slice(h.key.as_bytes()), h.value.map(Bytes::copy_from_slice).unwrap_or_default())
        });
        pairs.collect()
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).ok()
}

/// The entry id a stored message gets: `partition:offset`.
pub(super) fn entry_id(partition: i32, offset: i64) -> String {
    format!("{partition}:{offset}")
}

/// A delivery report's outcome. A report without an offset is no proof the message is stored:
/// librdkafka's idempotent producer reports a retried message the broker calls a duplicate
/// (DUPLICATE_SEQUENCE_NUMBER) as delivered at offset -1001, and the copy the broker had may
/// be gone (its topic deleted in between: a chaos run lost 57 rows so, never re-driven, their
/// entry id `0:-1001` naming nothing to look up). Such a row goes back to the outbox untouched
/// and is produced again; the inbox drops the copy if the first one was stored after all.
pub(super) fn delivered(partition: i32, offset: i64) -> AppendOutcome {
    if offset < 0 {
        return AppendOutcome::Unavailable(format!(
            "kafka: delivered to partition {partition} without an offset ({offset}): produced again"
        ));
    }
    AppendOutcome::Appended(entry_id(partition, offset))
}

/// `partition:offset` back into its parts.
pub(crate) fn parse_entry_id(id: &str) -> Option<(i32, i64)> {
    let (partition, offset) = id.split_once(':')?;
    Some((partition.parse().ok()?, offset.parse().ok()?))
}

/// The words [`failed`] refuses a message too large with (the broker judges a whole record
/// batch: see the append).
const TOO_LARGE: &str = "kafka: too large: ";

/// Whether a refusal is [`failed`]'s for a message (or its batch) too large.
pub(super) fn too_large(refusal: &str) -> bool {
    refusal.starts_with(TOO_LARGE)
}

/// A failed produce: the entry's own fault when no retry could store it (too large for the
/// broker or the topic, a record the topic refuses, a topic name the broker refuses); anything
/// else — an unreachable or unwilling cluster, a missing topic, a refused authorisation, the
/// delivery timeout — is an outage, and burns no attempt.
pub(super) fn failed(error: &KafkaError) -> AppendOutcome {
    let code = match error {
        KafkaError::MessageProduction(code) => Some(*code),
        _ => error.rdkafka_error_code(),
    };
    match code {
        Some(RDKafkaErrorCode::MessageSizeTooLarge) => AppendOutcome::Rejected(format!("{TOO_LARGE}{error}")),
        Some(
            RDKafkaErrorCode::InvalidMessageSize
            | RDKafkaErrorCode::InvalidRecord
            | RDKafkaErrorCode::InvalidMessage
            | RDKafkaErrorCode::InvalidTopic,
        ) => AppendOutcome::Rejected(format!("kafka: {error}")),
        _ => AppendOutcome::Unavailable(format!("kafka: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::message::Headers;

    use super::*;

    fn entry(fields: &[(&str, &str)]) -> Entry {
        Entry {
            stream: "audit.order".into(),
            fields: fields.iter().map(|(n, v)| (Bytes::from(n.to_string()), Bytes::from(v.to_string()))).collect(),
            event_id: "e-1".into(),
            run: None,
            trace: None,
        }
    }

    fn mapping() -> Mapping {
        Mapping {
            body_field: "payload".into(),
            key_field: "aggregate_id".into(),
            event_id_header: "event_id".into(),
            event_id_only: false,
            key_header: true,
        }
    }

    #[test]
    fn the_debezium_layout_carries_the_event_id_as_header_id_and_nothing_else() {
        let debezium = Mapping { event_id_header: "id".into(), event_id_only: true, ..mapping() };
        let fields = [("event_id", "e-1"), ("event_type", "Created"), ("aggregate_id", "o-7"), ("payload", "{}")];
        let message = debezium.message(&entry(&fields));
        assert_eq!((message.key.as_deref(), message.value.as_ref()), (Some(&b"o-7"[..]), &b"{}"[..]));
        let headers: Vec<(&str, Option<&[u8]>)> = message.headers.iter().map(|h| (h.key, h.value)).collect();
        assert_eq!(headers, [("id", Some(&b"e-1"[..]))]);
    }

    #[test]
    fn the_payload_is_the_value_the_key_field_the_key_and_every_other_field_a_header() {
        let fields = [("event_id", "e-1"), ("event_type", "Created"), ("aggregate_id", "o-7"), ("payload", "{}")];
        let message = mapping().message(&entry(&fields));
        assert_eq!(message.key.as_deref(), Some(&b"o-7"[..]));
        assert_eq!(message.value.as_ref(), b"{}");
        let headers: Vec<(String, Vec<u8>)> =
            message.headers.iter().map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec())).collect();
        let expected = [("event_type", "Created"), ("aggregate_id", "o-7"), ("event_id", "e-1")];
        let expected: Vec<(String, Vec<u8>)> =
            expected.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect();
        assert_eq!(headers, expected, "the event id once, last");
    }

    #[test]
    fn a_key_field_that_is_not_a_header_is_the_key_only() {
        let keyed = Mapping { key_field: "partitionkey".into(), key_header: false, ..mapping() };
        let message = keyed.message(&entry(&[("event_id", "e-1"), ("partitionkey", "o-7"), ("payload", "{}")]));
        assert_eq!(message.key.as_deref(), Some(&b"o-7"[..]));
        let headers: Vec<&str> = message.headers.iter().map(|h| h.key).collect();
        assert_eq!(headers, ["event_id"]);
    }

    #[test]
    fn an_entry_without_the_key_field_has_no_key() {
        assert_eq!(mapping().message(&entry(&[("payload", "{}")])).key, None);
    }

    #[test]
    fn only_what_no_retry_can_store_is_the_entrys_fault() {
        let too_large = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        assert!(matches!(failed(&too_large), AppendOutcome::Rejected(e) if super::too_large(&e)));
        for outage in [
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::UnknownTopicOrPartition,
            RDKafkaErrorCode::TopicAuthorizationFailed,
            RDKafkaErrorCode::NotEnoughReplicas,
            RDKafkaErrorCode::AllBrokersDown,
        ] {
            let outcome = failed(&KafkaError::MessageProduction(outage));
            assert!(matches!(outcome, AppendOutcome::Unavailable(_)), "{outage:?}: {outcome:?}");
        }
    }

    #[test]
    fn entry_ids_are_partition_and_offset() {
        assert_eq!(entry_id(3, 17), "3:17");
        assert!(matches!(delivered(3, 17), AppendOutcome::Appended(id) if id == "3:17"));
        assert!(matches!(delivered(0, 0), AppendOutcome::Appended(id) if id == "0:0"));
        assert!(
            matches!(delivered(0, -1001), AppendOutcome::Unavailable(e) if e.contains("without an offset")),
            "a report without an offset is no delivery"
        );
        assert_eq!(parse_entry_id("3:17"), Some((3, 17)));
        assert_eq!(parse_entry_id("17"), None);
        assert_eq!(parse_entry_id("1700000000000-0"), None);
    }
}
