//! `poison retry` on Kafka: an entry produced again keeps the key its message had. The entry's
//! fields may not hold it: a CloudEvents or Debezium layout keys by a field that is no header,
//! and a producer other than handoff keys as it likes. Without its key, a re-driven event could
//! land on another partition than its aggregate's other events.

use std::time::Instant;

use bytes::Bytes;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message as _;
use rdkafka::{Offset, TopicPartitionList};

use super::message::{parse_entry_id, readable_headers};
use super::{KafkaStream, unavailable};
use crate::broker::seam::Unavailable;

/// The entry field a re-sent message's key travels in (never a header; no real field has a NUL
/// in its name).
pub(crate) const RESEND_KEY_FIELD: &str = "\0key";

impl KafkaStream {
    /// The key of the message at `entry_id` of `topic`, if that message is still there and
    /// carries `event_id` (a topic made again reuses offsets); `None` otherwise, or when it
    /// cannot be read within the timeout.
    pub(crate) async fn key_of(&self, topic: &str, entry_id: &str, event_id: Option<&str>) -> Option<Bytes> {
        let (partition, offset) = parse_entry_id(entry_id)?;
        let (topic, event_id) = (topic.to_owned(), event_id.map(str::to_owned));
        let read = self.blocking(move |this| this.read_key(&topic, partition, offset, event_id.as_deref())).await;
        read.unwrap_or_else(|e| {
            tracing::warn!(error = %e.0, "the message's own key could not be read; keying it as the relay would");
            None
        })
    }

    fn read_key(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        event_id: Option<&str>,
    ) -> Result<Option<Bytes>, Unavailable> {
        let reader = self.reader()?;
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(topic, partition, Offset::Offset(offset)).map_err(unavailable)?;
        reader.assign(&assignment).map_err(unavailable)?;
        let header = self.config.event_id_header();
        let deadline = Instant::now() + self.config.timeout;
        let found = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break None;
            }
            let Some(Ok(message)) = reader.poll(left) else { continue };
            if message.topic() != topic || message.partition() != partition {
                continue;
            }
            // Another offset: the message is gone (retention, compaction).
            if message.offset() != offset {
                break None;
            }
            let headers = readable_headers(message.headers()).unwrap_or_default();
            let carries = |id: &str| headers.iter().any(|(n, v)| n == header.as_bytes() && v == id.as_bytes());
            break event_id.is_none_or(carries).then(|| message.key().map(Bytes::copy_from_slice)).flatten();
        };
        // Nothing more is fetched for this partition while the reader waits for the next look.
        let _ = reader.unassign();
        Ok(found)
    }

    /// This producer keying each message by its [`RESEND_KEY_FIELD`] field.
    pub(crate) fn keyed_by_resend_field(&self) -> Self {
        let mut stream = self.clone();
        stream.mapping.key_field = Bytes::from_static(RESEND_KEY_FIELD.as_bytes());
        stream.mapping.key_header = false;
        stream
    }
}
