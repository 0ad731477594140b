//! Apache Kafka behind the owner-side broker seam (`[[relay]] broker = "kafka"`). An entry is a
//! message on the topic the relay's template gives (the seam's "stream"): the payload field its
//! value, the key field its key (so one aggregate's events share a partition, in order), every
//! other field a header and the event id in its own header (`message`). The producer is
//! idempotent with `acks=all` (`client`); a batch's messages are all handed to librdkafka before
//! any delivery report is awaited, and each row is settled from its own report, gathered with the
//! batch's others (`reports`). The entry id is
//! `partition:offset`. The entries of an ordered run are produced one after the other, each
//! after the previous one's report, and stop at the first failure (the rest `Skipped`).
//!
//! Kafka keeps no dedupe window: a relay that dies between the produce and the settle produces
//! the row again on restart, a second message with the same event id header, which the inbox's
//! insert-if-absent on `(consumer, event_id)` collapses (docs/explanation/delivery-guarantees.md).

pub(crate) mod client;
pub(crate) mod config;
pub(crate) mod group;
mod lookup;
mod message;
pub(crate) mod offsets;
mod replaceable;
mod reports;
pub(crate) mod resend;
#[allow(unsafe_code)]
mod topic_id;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};

pub(crate) use client::KafkaSetupError;
use client::Logged;
pub(crate) use config::KafkaConfig;
pub(crate) use message::parse_entry_id;
use message::{Mapping, delivered, failed};
use replaceable::Replaceable;
use reports::Batch;

use crate::broker::seam::{AppendOptions, AppendOutcome, Entry, EventStream, ServerId, StreamState, Unavailable};

/// A Kafka cluster the relay produces to.
#[derive(Clone)]
pub(crate) struct KafkaStream {
    /// The producer (replaced by a new one when it cannot be trusted: `replaceable`).
    producer: Arc<Replaceable>,
    /// Sends one message per request (made on first use): a message too large goes again on it,
    /// so no other message can share its request.
    single: Arc<Replaceable>,
    /// Reads single offsets for loss checks (made on first use: most relays never need it).
    /// Replaced after a read that got no answer (see `replaceable` for why a librdkafka client
    /// can stay wedged while the cluster answers).
    reader: Arc<std::sync::Mutex<Option<Arc<BaseConsumer<Logged>>>>>,
    /// Held while a read assigns partitions on the reader: the relays of one process share it,
    /// and another relay's assignment would move this one's position (what it wanted would
    /// look compacted away, and its rows re-driven).
    reading: Arc<std::sync::Mutex<()>>,
    config: Arc<KafkaConfig>,
    mapping: Mapping,
}

impl KafkaStream {
    /// A producer for `config`'s cluster (it connects in the background: an unreachable
    /// cluster is an outage the relay waits out); `body_field` is the entry field carried as
    /// the message value.
    pub(crate) fn connect(config: &KafkaConfig, body_field: &str) -> Result<Self, KafkaSetupError> {
        let producer = replaceable::make(config, false)?;
        Ok(Self {
            producer: Arc::new(Replaceable::new(false, Some(producer))),
            single: Arc::new(Replaceable::new(true, None)),
            reader: Arc::default(),
            reading: Arc::default(),
            config: Arc::new(config.clone()),
            mapping: Mapping {
                body_field: Bytes::copy_from_slice(body_field.as_bytes()),
                key_field: Bytes::copy_from_slice(config.key_field.as_bytes()),
                event_id_header: config.event_id_header().to_owned(),
                event_id_only: config.layout == config::Layout::Debezium,
                key_header: true,
            },
        })
    }

    /// The same producer, laying out a relay's entries: `body_field` the message value (its
    /// payload field, which `[relay.envelope]` may rename; none: every field a header, the
    /// value empty); `key`, when given, the field that is the key instead of `key_field`, and
    /// whether it is also a header (a CloudEvents relay's: `RelayConfig::kafka_key`).
    pub(crate) fn laying_out(&self, body_field: Option<&str>, key: Option<(&'static str, bool)>) -> Self {
        let mut mapping = Mapping {
            body_field: Bytes::copy_from_slice(body_field.unwrap_or_default().as_bytes()),
            ..self.mapping.clone()
        };
        if let Some((field, header)) = key {
            (mapping.key_field, mapping.key_header) = (Bytes::from_static(field.as_bytes()), header);
        }
        Self { mapping, ..self.clone() }
    }

    /// Produces `entries` and gathers their outcomes. The broker judges a record batch's size,
    /// not a message's: one message too large fails the whole batch librdkafka put it in, with
    /// other messages too. Each message refused so goes again alone, on a producer that sends one
    /// message per request, so only a message too large by itself is refused.
    async fn send(&self, entries: &[&Entry]) -> Vec<AppendOutcome> {
        let mut outcomes = self.produce(entries, false).await;
        let too_large: Vec<usize> = (0..entries.len())
            .filter(|&i| matches!(&outcomes[i], AppendOutcome::Rejected(e) if message::too_large(e)))
            .collect();
        if !too_large.is_empty() {
            let again: Vec<&Entry> = too_large.iter().map(|&i| entries[i]).collect();
            for (i, outcome) in too_large.into_iter().zip(self.produce(&again, true).await) {
                outcomes[i] = outcome;
            }
        }
        outcomes
    }

    /// The producer in use (its client also answers metadata and offset requests).
    fn current(&self) -> Result<Arc<ThreadedProducer<Logged>>, Unavailable> {
        let made = self.producer.get(&self.config).map_err(|e| Unavailable(format!("kafka: {e}")))?;
        Ok(made.1)
    }

    /// Hands every one of `entries` to librdkafka, then awaits their delivery reports, woken once
    /// for the batch: their outcomes, in order. `alone`: each in a request of its own.
    async fn produce(&self, entries: &[&Entry], alone: bool) -> Vec<AppendOutcome> {
        // Outcomes known before any report: a topic no row may reach (whatever the cluster's
        // state), a message librdkafka would not take.
        let known: Vec<Option<AppendOutcome>> =
            entries.iter().map(|e| config::topic_problem(&e.stream).map(AppendOutcome::Rejected)).collect();
        if known.iter().all(Option::is_some) {
            return known.into_iter().flatten().collect();
        }
        let slot = if alone { &self.single } else { &self.producer };
        let (generation, producer) = match slot.get(&self.config) {
            Ok(made) => made,
            Err(e) => {
                let outage = AppendOutcome::Unavailable(format!("kafka: {e}"));
                return known.into_iter().map(|k| k.unwrap_or_else(|| outage.clone())).collect();
            }
        };
        let batch = Batch::new(entries.len());
        let queue_until = tokio::time::Instant::now() + self.config.delivery_timeout;
        for (i, entry) in entries.iter().enumerate() {
            if known[i].is_some() {
                batch.settle(i, None);
                continue;
            }
            let message = self.mapping.message(entry);
            let mut record = BaseRecord::with_opaque_to(&entry.stream, batch.place(i))
                .payload(message.value.as_ref())
                .headers(message.headers);
            if let Some(key) = &message.key {
                record = record.key(key.as_ref());
            }
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    // librdkafka's queue is full: room comes as reports come in (up to the
                    // delivery timeout, as rdkafka's own producer waits).
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                        if tokio::time::Instant::now() < queue_until =>
                    {
                        record = back;
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                    Err((error, _)) => {
                        batch.settle(i, Some(Err(error)));
                        break;
                    }
                }
            }
        }
        let reports = batch.reports(self.config.delivery_timeout + self.config.timeout).await;
        let outcomes = reports.into_iter().zip(known).map(|(report, known)| match (report, known) {
            (_, Some(outcome)) => outcome,
            (Some(Ok((partition, offset))), None) => delivered(partition, offset),
            (Some(Err(error)), None) => {
                slot.after(&self.config, generation, &error);
                failed(&error)
            }
            // As a message timed out: the producer is replaced (see `replaceable`).
            (None, None) => {
                slot.after(&self.config, generation, &KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut));
                AppendOutcome::Unavailable("kafka: no delivery report within the delivery timeout".into())
            }
        });
        let outcomes = outcomes.collect();
        // The last copy of a replaced producer closes it (joining its threads, flushing): off
        // the async threads.
        if slot.retired(generation) {
            tokio::task::spawn_blocking(move || drop(producer));
        }
        outcomes
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
}

fn unavailable(e: rdkafka::error::KafkaError) -> Unavailable {
    Unavailable(format!("kafka: {e}"))
}

impl EventStream for KafkaStream {
    /// Every message outside runs handed over, then every report awaited; a run's, each after
    /// the previous one's delivery report.
    async fn append(&self, entries: &[Entry], _options: &AppendOptions) -> Vec<AppendOutcome> {
        crate::broker::seam::append_in_runs(entries, |batch| async move { self.send(&batch).await }).await
    }

    async fn ping(&self) -> Result<(), Unavailable> {
        self.blocking(|this| {
            let metadata = this.current()?.client().fetch_metadata(None, this.config.timeout).map_err(unavailable)?;
            if metadata.brokers().is_empty() {
                return Err(Unavailable("kafka: the cluster lists no broker".into()));
            }
            Ok(())
        })
        .await
    }

    /// The cluster, by its id: a cluster replaced under the same addresses shows as a new id.
    /// (A broker restarting or a leader moving is routine in Kafka and loses nothing written
    /// with `acks=all`; the high watermarks going back shows what does.)
    async fn servers(&self) -> Result<Vec<ServerId>, Unavailable> {
        self.blocking(|this| {
            let id = this.current()?.client().fetch_cluster_id(this.config.timeout);
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
            // The topic's id: a topic made again may be refilled past the old counts before
            // the next look, but never has the old id.
            let id = topic_id::describe(this.reader()?.client(), &topic, this.config.timeout).ok();
            let incarnation = id.map(|id| {
                use std::hash::{Hash, Hasher};
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                id.hash(&mut hasher);
                hasher.finish()
            });
            Ok(StreamState {
                exists: true,
                length: Some(length.max(0) as u64),
                entries_added: Some(added.max(0) as u64),
                incarnation,
                partition_ends: marks.iter().map(|&(partition, _, high)| (partition, high)).collect(),
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
            // Where each entry stands against its partition's watermarks; the messages whose
            // event ids must be read, by partition.
            let mut to_read: HashMap<i32, BTreeSet<i64>> = HashMap::new();
            let places: Vec<Option<(i32, i64)>> = entries
                .iter()
                .map(|(id, event_id)| {
                    let (partition, offset) = parse_entry_id(id)?;
                    let (low, high) = *marks.get(&partition)?;
                    if offset >= high {
                        return None;
                    }
                    if offset >= low && event_id.is_some() {
                        to_read.entry(partition).or_default().insert(offset);
                    }
                    Some((partition, offset))
                })
                .collect();
            let mut read = HashMap::new();
            for (partition, offsets) in &to_read {
                let high = marks[partition].1;
                read.insert(*partition, this.event_ids_at(&topic, (*partition, high), offsets)?);
            }
            let found = places.iter().zip(&entries).map(|(place, (_, event_id))| {
                let Some((partition, offset)) = place else { return false };
                match (event_id, to_read.get(partition).is_some_and(|read| read.contains(offset))) {
                    (Some(event_id), true) => read[partition].get(offset).is_some_and(|id| id == event_id),
                    // Below the low watermark (removed by retention), or no event id to compare.
                    _ => true,
                }
            });
            Ok(found.collect())
        })
        .await
    }

    /// librdkafka reconnects on its own and says nothing a relay could wait on; a cluster
    /// replaced or a log truncated shows in `servers` and `stream_state` at the next check.
    async fn reconnected(&self) {
        std::future::pending::<()>().await
    }
}
