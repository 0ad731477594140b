//! Apache Kafka behind the owner-side broker seam (`[[relay]] broker = "kafka"`). An entry is a
//! message on the topic the relay's template gives (the seam's "stream"): the payload field its
//! value, the key field its key (so one aggregate's events share a partition, in order), every
//! other field a header and the event id in its own header (`message`). The producer is
//! idempotent with `acks=all` (`client`); a batch's messages are all handed to librdkafka before
//! any delivery report is awaited, and each row is settled from its own report. The entry id is
//! `partition:offset`. The entries of an ordered run are produced one after the other, each
//! after the previous one's report, and stop at the first failure (the rest `Skipped`).
//!
//! Kafka keeps no dedupe window: a relay that dies between the produce and the settle produces
//! the row again on restart, a second message with the same event id header, which the inbox's
//! insert-if-absent on `(consumer, event_id)` collapses (docs/explanation/delivery-guarantees.md).

mod client;
pub mod config;
mod message;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message as _};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;
use rdkafka::{Offset, TopicPartitionList};

pub use client::KafkaSetupError;
use client::Logged;
pub use config::KafkaConfig;
use message::{Mapping, entry_id, failed, parse_entry_id};

use crate::broker::seam::{
    AppendOptions, AppendOutcome, Entry, EntryId, EventStream, ServerId, StreamState, Unavailable,
};

/// A Kafka cluster the relay produces to.
#[derive(Clone)]
pub struct KafkaStream {
    producer: FutureProducer<Logged>,
    /// Reads single offsets for loss checks (made on first use: most relays never need it).
    reader: Arc<std::sync::OnceLock<Result<BaseConsumer<Logged>, String>>>,
    config: Arc<KafkaConfig>,
    mapping: Mapping,
}

impl KafkaStream {
    /// A producer for `config`'s cluster (it connects in the background: an unreachable
    /// cluster is an outage the relay waits out); `body_field` is the entry field carried as
    /// the message value.
    pub fn connect(config: &KafkaConfig, body_field: &str) -> Result<Self, KafkaSetupError> {
        let producer = client::producer_config(config)?
            .create_with_context(Logged)
            .map_err(|e| KafkaSetupError::Client(e.to_string()))?;
        Ok(Self {
            producer,
            reader: Arc::default(),
            config: Arc::new(config.clone()),
            mapping: Mapping {
                body_field: Bytes::copy_from_slice(body_field.as_bytes()),
                key_field: Bytes::copy_from_slice(config.key_field.as_bytes()),
                event_id_header: config.event_id_header.clone(),
            },
        })
    }

    /// The same producer, sending `field` as the message value (a relay's payload field, which
    /// `[relay.envelope]` may rename; `None`: every field a header, the value empty).
    pub fn with_body_field(&self, field: Option<&str>) -> Self {
        let mapping = Mapping {
            body_field: Bytes::copy_from_slice(field.unwrap_or_default().as_bytes()),
            ..self.mapping.clone()
        };
        Self { mapping, ..self.clone() }
    }

    /// Produces one entry and awaits its delivery report: its outcome.
    async fn produce(&self, entry: &Entry) -> AppendOutcome {
        if let Some(problem) = config::topic_problem(&entry.stream) {
            return AppendOutcome::Rejected(problem);
        }
        let message = self.mapping.message(entry);
        let mut record =
            FutureRecord::<[u8], [u8]>::to(&entry.stream).payload(message.value.as_ref()).headers(message.headers);
        if let Some(key) = &message.key {
            record = record.key(key.as_ref());
        }
        // Waits for room in librdkafka's queue up to the delivery timeout, then for the report.
        match self.producer.send(record, Timeout::After(self.config.delivery_timeout)).await {
            Ok(delivery) => AppendOutcome::Appended(entry_id(delivery.partition, delivery.offset)),
            Err((error, _)) => failed(&error),
        }
    }

    /// Runs a blocking librdkafka call (metadata, offsets) off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        call: impl FnOnce(&KafkaStream) -> Result<T, Unavailable> + Send + 'static,
    ) -> Result<T, Unavailable> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || call(&this))
            .await
            .unwrap_or_else(|e| Err(Unavailable(format!("kafka: the lookup task failed: {e}"))))
    }

    /// The partitions of `topic` with their low and high watermarks; `None` if it does not exist.
    fn watermarks(&self, topic: &str) -> Result<Option<Vec<Watermarks>>, Unavailable> {
        let timeout = self.config.timeout;
        let metadata = self.producer.client().fetch_metadata(Some(topic), timeout).map_err(unavailable)?;
        let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else { return Ok(None) };
        if found.error().is_some() || found.partitions().is_empty() {
            return Ok(None);
        }
        let mut marks = Vec::with_capacity(found.partitions().len());
        for partition in found.partitions() {
            let (low, high) =
                self.producer.client().fetch_watermarks(topic, partition.id(), timeout).map_err(unavailable)?;
            marks.push((partition.id(), low, high));
        }
        Ok(Some(marks))
    }

    /// The event id header of the message at `offset` of `topic`'s `partition`, if a message is
    /// there (a compacted-away offset, or a transaction marker, holds none).
    fn event_id_at(&self, topic: &str, partition: i32, offset: i64) -> Result<Option<String>, Unavailable> {
        let reader = self.reader.get_or_init(|| {
            client::reader_config(&self.config)
                .map_err(|e| e.to_string())
                .and_then(|c| c.create_with_context(Logged).map_err(|e| e.to_string()))
        });
        let reader = reader.as_ref().map_err(|e| Unavailable(format!("kafka: {e}")))?;
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(topic, partition, Offset::Offset(offset)).map_err(unavailable)?;
        reader.assign(&assignment).map_err(unavailable)?;
        let deadline = std::time::Instant::now() + self.config.timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(Unavailable(format!("kafka: no answer reading {topic} [{partition}] at {offset}")));
            }
            match reader.poll(left) {
                Some(Ok(m)) if m.topic() == topic && m.partition() == partition && m.offset() >= offset => {
                    if m.offset() > offset {
                        return Ok(None);
                    }
                    let header = self.config.event_id_header.as_str();
                    let id = m.headers().and_then(|h| h.iter().find(|h| h.key == header)).and_then(|h| h.value);
                    return Ok(Some(id.map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default()));
                }
                Some(Ok(_)) | None => continue,
                Some(Err(e)) => return Err(unavailable(e)),
            }
        }
    }
}

/// A partition with its low and high watermarks.
type Watermarks = (i32, i64, i64);

fn unavailable(e: rdkafka::error::KafkaError) -> Unavailable {
    Unavailable(format!("kafka: {e}"))
}

impl EventStream for KafkaStream {
    async fn append(&self, entries: &[Entry], _options: &AppendOptions) -> Vec<AppendOutcome> {
        let mut outcomes: Vec<Option<AppendOutcome>> = vec![None; entries.len()];
        // Entries outside runs: every message handed over (in order, so one key's messages keep
        // it), then every report awaited.
        let loose = entries.iter().enumerate().filter(|(_, e)| e.run.is_none());
        let reports =
            futures_util::future::join_all(loose.map(|(i, entry)| async move { (i, self.produce(entry).await) }));
        for (i, outcome) in reports.await {
            // The broker judges a record batch's size, not a message's: one message too large
            // fails the whole batch librdkafka put it in. Each of those goes again on its own
            // (a batch of one), so only a message too large by itself is refused.
            let outcome = match outcome {
                AppendOutcome::Rejected(e) if message::too_large(&e) => self.produce(&entries[i]).await,
                outcome => outcome,
            };
            outcomes[i] = Some(outcome);
        }
        // Ordered runs: each message after the previous one's report; the first failure skips
        // the rest of its run.
        let mut failed_run: Option<u32> = None;
        for (i, entry) in entries.iter().enumerate() {
            let Some(run) = entry.run else { continue };
            if failed_run == Some(run) {
                outcomes[i] = Some(AppendOutcome::Skipped);
                continue;
            }
            let outcome = self.produce(entry).await;
            if !matches!(outcome, AppendOutcome::Appended(_)) {
                failed_run = Some(run);
            }
            outcomes[i] = Some(outcome);
        }
        outcomes.into_iter().map(|o| o.unwrap_or(AppendOutcome::Skipped)).collect()
    }

    async fn ping(&self) -> Result<(), Unavailable> {
        self.blocking(|this| {
            let metadata = this.producer.client().fetch_metadata(None, this.config.timeout).map_err(unavailable)?;
            if metadata.brokers().is_empty() {
                return Err(Unavailable("kafka: the cluster lists no broker".into()));
            }
            Ok(())
        })
        .await
    }

    /// The topic's retention (time, size, compaction) removes what consumers no longer need:
    /// nothing for handoff to trim.
    async fn trim_acknowledged(&self, _topic: &str) -> Result<u64, Unavailable> {
        Ok(0)
    }

    async fn acknowledged_floor(&self, _topic: &str) -> Result<Option<EntryId>, Unavailable> {
        Ok(None)
    }

    /// The cluster, by its id: a cluster replaced under the same addresses shows as a new id.
    /// (A broker restarting or a leader moving is routine in Kafka and loses nothing written
    /// with `acks=all`; the high watermarks going back shows what does.)
    async fn servers(&self) -> Result<Vec<ServerId>, Unavailable> {
        self.blocking(|this| {
            let id = this.producer.client().fetch_cluster_id(this.config.timeout);
            let id = id.ok_or_else(|| Unavailable("kafka: no cluster id within the timeout".into()))?;
            Ok(vec![ServerId { server: this.config.bootstrap_servers.clone(), run_id: id }])
        })
        .await
    }

    /// A topic's state over its partitions: "ever added" is the sum of the high watermarks (it
    /// goes back only when a topic is recreated or a partition's log is truncated, after an
    /// unclean leader election), the length what lies between the low and high ones.
    async fn stream_state(&self, topic: &str) -> Result<StreamState, Unavailable> {
        let topic = topic.to_owned();
        self.blocking(move |this| {
            let Some(marks) = this.watermarks(&topic)? else { return Ok(StreamState::default()) };
            let added: i64 = marks.iter().map(|(_, _, high)| high).sum();
            let length: i64 = marks.iter().map(|(_, low, high)| high - low).sum();
            Ok(StreamState {
                exists: true,
                length: Some(length.max(0) as u64),
                entries_added: Some(added.max(0) as u64),
                ..StreamState::default()
            })
        })
        .await
    }

    async fn entries_exist(&self, topic: &str, entry_ids: &[String]) -> Result<Vec<bool>, Unavailable> {
        let entries: Vec<(String, Option<String>)> = entry_ids.iter().map(|id| (id.clone(), None)).collect();
        self.entries_of_events(topic, &entries).await
    }

    /// An offset holds the entry while it lies below its partition's high watermark and, where
    /// an event id is given, its message carries that id: a topic deleted and recreated, or a
    /// log truncated, hands the same offsets to other messages. An offset below the low
    /// watermark was removed by the topic's retention, on purpose: it counts as there (not lost).
    async fn entries_of_events(
        &self,
        topic: &str,
        entries: &[(String, Option<String>)],
    ) -> Result<Vec<bool>, Unavailable> {
        let (topic, entries) = (topic.to_owned(), entries.to_vec());
        self.blocking(move |this| {
            let Some(marks) = this.watermarks(&topic)? else { return Ok(vec![false; entries.len()]) };
            let marks: HashMap<i32, (i64, i64)> = marks.into_iter().map(|(p, low, high)| (p, (low, high))).collect();
            let mut found = Vec::with_capacity(entries.len());
            for (id, event_id) in &entries {
                let here = match parse_entry_id(id).and_then(|(p, o)| marks.get(&p).map(|m| (p, o, *m))) {
                    None => false,
                    Some((_, offset, (_, high))) if offset >= high => false,
                    Some((_, offset, (low, _))) if offset < low => true,
                    Some((partition, offset, _)) => match event_id {
                        None => true,
                        Some(event_id) => this.event_id_at(&topic, partition, offset)?.as_deref() == Some(event_id),
                    },
                };
                found.push(here);
            }
            Ok(found)
        })
        .await
    }

    /// librdkafka reconnects on its own and says nothing a relay could wait on; a cluster
    /// replaced or a log truncated shows in `servers` and `stream_state` at the next check.
    async fn reconnected(&self) {
        std::future::pending::<()>().await
    }
}
