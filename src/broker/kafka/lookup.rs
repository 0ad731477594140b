//! Reading back what the relay produced, for loss checks: a topic's watermarks, and the event
//! id header of the messages at given offsets. Asked of a reader of its own (`KafkaStream`'s
//! `reader`), never the producer, and replaced after a look that got no answer.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message as _;
use rdkafka::{Offset, TopicPartitionList};

use super::client::{self, Logged};
use super::{KafkaStream, message, unavailable};
use crate::broker::seam::Unavailable;

/// A partition with its low and high watermarks.
pub(super) type Watermarks = (i32, i64, i64);

impl KafkaStream {
    /// The partitions of `topic` with their low and high watermarks; `None` if it does not exist.
    /// Asked of the reader, not the producer: a client can stay wedged on what it cached of a
    /// topic while the cluster answers (see `replaceable`), and a look that gets no answer
    /// replaces the reader, so the next one asks with a client that knows nothing yet.
    pub(super) fn watermarks(&self, topic: &str) -> Result<Option<Vec<Watermarks>>, Unavailable> {
        let timeout = self.config.timeout;
        let reader = self.reader()?;
        let looked = (|| {
            let metadata = reader.fetch_metadata(Some(topic), timeout)?;
            let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else { return Ok(None) };
            if found.error().is_some() || found.partitions().is_empty() {
                return Ok(None);
            }
            let mut marks = Vec::with_capacity(found.partitions().len());
            for partition in found.partitions() {
                let (low, high) = reader.fetch_watermarks(topic, partition.id(), timeout)?;
                marks.push((partition.id(), low, high));
            }
            Ok(Some(marks))
        })();
        looked.map_err(|e: rdkafka::error::KafkaError| {
            self.reader.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            unavailable(e)
        })
    }

    /// The client that reads single offsets (made on first use: most relays never need it).
    pub(super) fn reader(&self) -> Result<Arc<BaseConsumer<Logged>>, Unavailable> {
        client::reader(&self.reader, &self.config).map_err(|e| Unavailable(format!("kafka: {e}")))
    }

    /// The event id header of each message at `offsets` of `topic`'s `partition` that holds one
    /// (a compacted-away offset holds none). Reads forward from the lowest offset, seeking ahead
    /// over long gaps: a page of a relay's rows lies close together in a partition.
    pub(super) fn event_ids_at(
        &self,
        topic: &str,
        (partition, high): (i32, i64),
        offsets: &BTreeSet<i64>,
    ) -> Result<HashMap<i64, String>, Unavailable> {
        /// Read through a gap this long rather than seek over it.
        const SEEK_OVER: i64 = 1000;
        let _reading = self.reading.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let reader = self.reader()?;
        let seek = |offset: i64| -> Result<(), Unavailable> {
            let mut assignment = TopicPartitionList::new();
            assignment.add_partition_offset(topic, partition, Offset::Offset(offset)).map_err(unavailable)?;
            reader.assign(&assignment).map_err(unavailable)
        };
        let mut found = HashMap::new();
        let mut wanted = offsets.iter().copied().peekable();
        let Some(&first) = wanted.peek() else { return Ok(found) };
        seek(first)?;
        let header = self.config.event_id_header();
        let mut last_error = String::new();
        let mut deadline = std::time::Instant::now() + self.config.timeout;
        while let Some(&next) = wanted.peek() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                // The next look reads with a new client.
                self.reader.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
                return Err(Unavailable(format!(
                    "kafka: no answer reading {topic} [{partition}] at {next}{last_error}"
                )));
            }
            let message = match reader.poll(left) {
                Some(Ok(m)) if m.topic() == topic && m.partition() == partition => m,
                Some(Ok(_)) | None => continue,
                // A broker of the cluster that is down shows here too (a node restarting, a
                // leader moving): the partition's new leader may still answer in time.
                Some(Err(e)) => {
                    last_error = format!(" ({e})");
                    continue;
                }
            };
            deadline = std::time::Instant::now() + self.config.timeout;
            let at = message.offset();
            // Offsets passed over hold no message (compacted away); none lies past the end.
            while wanted.next_if(|&o| o < at).is_some() {}
            if wanted.next_if_eq(&at).is_some() {
                let headers = message::readable_headers(message.headers()).unwrap_or_default();
                let id = headers.iter().find(|(name, _)| name == header.as_bytes()).map(|(_, value)| value);
                found.insert(at, id.map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default());
            }
            if at + 1 >= high {
                wanted.by_ref().for_each(drop);
            }
            if let Some(&next) = wanted.peek()
                && next - at > SEEK_OVER
            {
                seek(next)?;
            }
        }
        // Nothing more is fetched for this partition while the reader waits for the next look.
        let _ = reader.unassign();
        Ok(found)
    }
}
