//! A Kafka consumer group behind the consumer-side broker seam (`[[bridge]] broker = "kafka"`).
//! Each takeover loop of a bridge is one member of the group named by the bridge's group, with
//! cooperative rebalancing: the topic's partitions are shared among the members, one member
//! per partition.
//!
//! Offsets are committed only for entries the bridge acknowledged, that is after their inbox
//! transaction committed: a partition's committed offset is its lowest entry read and not yet
//! acknowledged (or the one after the last read), so a commit never passes an entry whose
//! takeover has not committed. A partition revoked in a rebalance is forgotten with what was
//! in flight on it: its new owner starts at the committed offset and reads those entries
//! again, and the inbox recognises the ones already taken over. An entry read and not
//! acknowledged within `claim_idle` (its takeover failed: the inbox database was down) is read
//! again: the member seeks back to it, and it comes back through `read` as redelivered.
//!
//! A message becomes an entry: `partition:offset` is its id, its headers the fields and its
//! value the payload field.

mod owned;
mod recreated;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::FutureExt;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::{Offset, TopicPartitionList};

use super::client::{self, Logged};
use super::config::KafkaConfig;
use super::message::{entry_id, parse_entry_id, readable_headers};
use crate::broker::group::{ConsumerGroup, GroupError, GroupInfo, GroupResult, Read};
use crate::broker::read::RawEntry;
use crate::event::PoisonRecord;
use owned::{Owned, Partition};

/// What one member reads, and where.
#[derive(Debug, Clone)]
pub(crate) struct GroupSettings {
    /// The consumer group (the bridge's group).
    pub group: String,
    /// The topic read (the bridge's stream key).
    pub topic: String,
    /// This member's name (`client.id`, logs).
    pub instance: String,
    /// Where a group without committed offsets starts: "0" (the earliest) or "$" (new messages).
    pub start: String,
    /// The entry field the message value becomes (the envelope's payload).
    pub body_field: String,
    /// How long an entry read and not acknowledged waits before it is read again, and how long a
    /// silent member keeps its partitions (`session.timeout.ms`, at least the broker's 6 s).
    pub claim_idle: Duration,
}

/// The topic as this member knows it (`recreated`).
#[derive(Default)]
struct Incarnation {
    /// The id of the topic this member's positions are in, which its commits carry (`None`
    /// until it is first described).
    id: Option<String>,
    /// The id the cluster gave last, and when.
    described: Option<(String, Instant)>,
    /// The cluster gave another id than `id`: the member is to be replaced.
    recreated: bool,
}

pub(crate) struct KafkaGroup {
    /// The member: replaced by a new one (which joins the group afresh) after the topic is made
    /// again, as librdkafka's cached metadata of the old topic can keep it from fetching.
    consumer: std::sync::RwLock<Arc<StreamConsumer<Owned>>>,
    owned: Owned,
    settings: GroupSettings,
    config: Arc<KafkaConfig>,
    body_field: Bytes,
    subscribed: std::sync::atomic::AtomicBool,
    incarnation: Mutex<Incarnation>,
    /// Reads so far (what tells a partition's first read after its assignment).
    reads: std::sync::atomic::AtomicU64,
    /// Writes dead letters (made on first use).
    producer: std::sync::OnceLock<Result<FutureProducer<Logged>, String>>,
    /// Asks for the partitions' ends (the lag gauge) and the topic's id, on connections of its
    /// own: on the member's, a request waits behind the fetch the broker holds open for new
    /// messages. Made on first use, and again with the member.
    watermarks: Mutex<Option<Arc<BaseConsumer<Logged>>>>,
}

fn unavailable(e: impl std::fmt::Display) -> GroupError {
    GroupError::Unavailable(format!("kafka: {e}"))
}

impl KafkaGroup {
    pub(crate) fn new(config: &KafkaConfig, settings: GroupSettings) -> GroupResult<Self> {
        let owned = Owned::default();
        let consumer = Self::member_of(config, &settings, &owned)?;
        Ok(Self {
            consumer: std::sync::RwLock::new(Arc::new(consumer)),
            owned,
            body_field: Bytes::copy_from_slice(settings.body_field.as_bytes()),
            settings,
            config: Arc::new(config.clone()),
            subscribed: std::sync::atomic::AtomicBool::new(false),
            incarnation: Mutex::default(),
            reads: std::sync::atomic::AtomicU64::new(0),
            producer: std::sync::OnceLock::new(),
            watermarks: Mutex::default(),
        })
    }

    /// A new member of the group (not subscribed yet).
    fn member_of(config: &KafkaConfig, settings: &GroupSettings, owned: &Owned) -> GroupResult<StreamConsumer<Owned>> {
        let session = settings.claim_idle.max(Duration::from_secs(6)).as_millis().min(i32::MAX as u128);
        let mut client = client::consumer_config(config).map_err(unavailable)?;
        client
            .set("group.id", &settings.group)
            .set("client.id", &settings.instance)
            .set("partition.assignment.strategy", "cooperative-sticky")
            // Also where a committed offset fell out of retention: the earliest left, never the
            // end (which would skip what is still there). `start = "$"` is applied once, to a
            // group that has committed nothing (`offsets::start_at_end_if_new`).
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", session.to_string())
            .set("heartbeat.interval.ms", (session / 3).to_string())
            // A member that does not read for this long (paused, or its inbox down) leaves the
            // group; at least librdkafka's default, and never below the session timeout.
            .set("max.poll.interval.ms", (session * 2).max(300_000).to_string());
        client.create_with_context(owned.clone()).map_err(unavailable)
    }

    /// The member now.
    fn consumer(&self) -> Arc<StreamConsumer<Owned>> {
        self.consumer.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Joins the group (once): the topic's partitions are then assigned by the group. With
    /// `start = "$"`, a group that has committed nothing first gets the topic's end committed.
    async fn subscribe(&self) -> GroupResult<()> {
        use std::sync::atomic::Ordering;
        if self.subscribed.load(Ordering::Relaxed) {
            return Ok(());
        }
        if self.settings.start == "$" {
            super::offsets::start_at_end_if_new(&self.config, &self.settings.group, &self.settings.topic)
                .await
                .map_err(GroupError::Unavailable)?;
        }
        self.consumer().subscribe(&[&self.settings.topic]).map_err(unavailable)?;
        self.subscribed.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// The entry a message carries (recorded as in flight), and whether it may have been
    /// delivered before: read again by this member, or read in the first read of its partition
    /// after the partition was assigned — from the group's committed offset, where a member that
    /// died (maybe killed by one of these entries) left off. Those are counted in the inbox
    /// database before they are handled, as redeliveries are on the other brokers, so an entry
    /// that kills every bridge reading it reaches `max_deliveries` (one delivery sooner than on
    /// Redis and NATS, which know a first delivery from a second).
    fn entry(&self, message: &BorrowedMessage<'_>, read: u64) -> (RawEntry, bool) {
        let (partition, offset) = (message.partition(), message.offset());
        let redelivered = {
            let mut owned = self.owned.lock();
            let state = owned.entry(partition).or_insert_with(|| Partition {
                committed: -1,
                first_read: read,
                ..Partition::default()
            });
            state.in_flight.insert(offset, (Instant::now(), read));
            state.next = state.next.max(offset + 1);
            let again = offset < state.seen || state.first_read == read;
            state.seen = state.seen.max(offset + 1);
            again
        };
        // The value first, and no header of its name: a field is read by its first match, so a
        // header cannot pose as the payload.
        let payload = message.payload().map(Bytes::copy_from_slice).unwrap_or_default();
        let mut fields = vec![(self.body_field.clone(), payload)];
        match readable_headers(message.headers()) {
            Some(headers) => fields.extend(headers.into_iter().filter(|(name, _)| *name != self.body_field)),
            // Only the value: the entry lacks its fields and goes to poison as such.
            None => {
                tracing::warn!(topic = %self.settings.topic, partition, offset, "a header name is not UTF-8; the entry is read without its headers")
            }
        }
        (RawEntry::new(entry_id(partition, offset), Some(fields)), redelivered)
    }

    /// Where each partition's committed offset may move now: its lowest entry in flight, or the
    /// one after the last read; only forward.
    /// Each carries the topic's id as its metadata: a member that later finds another id there
    /// knows the offset belongs to a topic since deleted.
    fn commit_points(&self) -> TopicPartitionList {
        let id = self.incarnation().id.clone().unwrap_or_default();
        let unchecked = self.owned.assigned().clone();
        let mut list = TopicPartitionList::new();
        // Not a partition whose committed offset is still to be checked (`recreated`).
        for (partition, state) in self.owned.lock().iter().filter(|(p, _)| !unchecked.contains(p)) {
            let point = state.in_flight.keys().next().copied().unwrap_or(state.next);
            if point > state.committed {
                let mut element = list.add_partition(&self.settings.topic, *partition);
                let _ = element.set_offset(Offset::Offset(point));
                element.set_metadata(id.clone());
            }
        }
        list
    }

    fn producer(&self) -> Result<&FutureProducer<Logged>, String> {
        let made = self.producer.get_or_init(|| {
            client::producer_config(&self.config)
                .map_err(|e| e.to_string())
                .and_then(|c| c.create_with_context(Logged).map_err(|e| e.to_string()))
        });
        made.as_ref().map_err(Clone::clone)
    }

    fn watermarks(&self) -> Result<Arc<BaseConsumer<Logged>>, String> {
        client::reader(&self.watermarks, &self.config)
    }
}

impl ConsumerGroup for KafkaGroup {
    fn consumer(&self) -> &str {
        &self.settings.instance
    }

    async fn own_pending(&self, _count: u32) -> GroupResult<Vec<RawEntry>> {
        // What this member left unacknowledged is read again from the committed offset.
        Ok(Vec::new())
    }

    async fn read(&self, count: u32, block: Option<Duration>) -> GroupResult<Read> {
        self.subscribe().await?;
        self.topic_id(false).await;
        if !self.replace_if_recreated(block).await? {
            return Ok(Read::default());
        }
        let this_read = self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let consumer = self.consumer();
        let mut read = Read::default();
        let first = match block {
            // Nothing came: the partitions assigned meanwhile are still checked (their committed
            // offset may lie at the end of a topic since made again).
            Some(block) => tokio::time::timeout(block, consumer.recv()).await.ok(),
            None => consumer.recv().now_or_never(),
        };
        let mut next = first;
        while let Some(message) = next {
            match message {
                Ok(message) => {
                    let (entry, again) = self.entry(&message, this_read);
                    if again { read.redelivered.push(entry) } else { read.entries.push(entry) }
                }
                // What was received stays read (it is acknowledged or read again).
                Err(e) if !read.is_empty() => {
                    tracing::debug!(topic = %self.settings.topic, error = %e, "a read ended early");
                    break;
                }
                Err(e) => return Err(unavailable(e)),
            }
            if read.entries.len() + read.redelivered.len() >= count as usize {
                break;
            }
            next = consumer.recv().now_or_never();
        }
        self.check_assigned(&mut read).await;
        Ok(read)
    }

    /// Commits each partition up to its lowest entry still in flight (after the inbox
    /// transaction of `entry_ids` committed). An entry of a partition this member no longer
    /// owns is let go: its new owner reads it again.
    async fn ack(&self, entry_ids: &[String]) -> GroupResult<()> {
        {
            let (mut owned, mut retired) = (self.owned.lock(), self.owned.retired());
            for (partition, offset) in entry_ids.iter().filter_map(|id| parse_entry_id(id)) {
                // One a replaced member read: not the new member's entry at that offset.
                if retired.remove(&(partition, offset)) {
                    continue;
                }
                if let Some(state) = owned.get_mut(&partition) {
                    state.in_flight.remove(&offset);
                }
            }
        }
        let points = self.commit_points();
        if points.count() == 0 {
            return Ok(());
        }
        let consumer = self.consumer();
        let committed = points.clone();
        tokio::task::spawn_blocking(move || consumer.commit(&committed, CommitMode::Sync))
            .await
            .map_err(unavailable)?
            .map_err(unavailable)?;
        let mut owned = self.owned.lock();
        for element in points.elements() {
            if let (Some(state), Offset::Offset(offset)) = (owned.get_mut(&element.partition()), element.offset()) {
                state.committed = state.committed.max(offset);
            }
        }
        Ok(())
    }

    async fn ensure(&self, _start: &str) -> GroupResult<()> {
        self.subscribe().await
    }

    /// Entries read and not acknowledged for `idle` (their takeover failed): the member seeks
    /// back to the oldest of each partition, and `read` returns them again as redelivered. The
    /// bridge recovers between batches, having acknowledged what committed, so what is still in
    /// flight then is either failed or the batch it read ahead, not yet taken over: the latest
    /// read is never sought back over.
    async fn reclaim(&self, idle: Duration, _count: u32) -> GroupResult<Vec<RawEntry>> {
        let latest = self.reads.load(std::sync::atomic::Ordering::Relaxed).saturating_sub(1);
        let stale: Vec<(i32, i64)> = {
            let mut owned = self.owned.lock();
            owned
                .iter_mut()
                .filter_map(|(partition, state)| {
                    let (&offset, &(read_at, read)) = state.in_flight.iter().next()?;
                    (read_at.elapsed() >= idle && read < latest).then(|| {
                        // They stay in flight, so no commit passes them whatever the seek does;
                        // their clocks start again from this seek.
                        state.in_flight.values_mut().for_each(|entry| *entry = (Instant::now(), latest));
                        (*partition, offset)
                    })
                })
                .collect()
        };
        if stale.is_empty() {
            return Ok(Vec::new());
        }
        let (consumer, topic, timeout) = (self.consumer(), self.settings.topic.clone(), self.config.timeout);
        let failed = tokio::task::spawn_blocking(move || {
            let seek = |(partition, offset): (i32, i64)| {
                consumer
                    .seek(&topic, partition, Offset::Offset(offset), timeout)
                    .err()
                    .map(|e| format!("{partition}: {e}"))
            };
            stale.into_iter().filter_map(seek).collect::<Vec<_>>()
        })
        .await
        .map_err(unavailable)?;
        if !failed.is_empty() {
            // Not lost: still in flight, they hold the commit back until a seek succeeds.
            tracing::warn!(topic = %self.settings.topic, partitions = %failed.join(", "), "seeking back to unacknowledged entries failed; trying again at the next recovery");
        }
        Ok(Vec::new())
    }

    async fn delete_idle_consumers(&self, _idle: Duration) {}

    /// Entries in flight on this member, and what its partitions hold past its position.
    async fn info(&self) -> GroupResult<GroupInfo> {
        let pending = self.owned.lock().values().map(|s| s.in_flight.len() as u64).sum();
        let (consumer, ends) = (self.consumer(), self.watermarks().map_err(unavailable)?);
        let (timeout, topic) = (self.config.timeout, self.settings.topic.clone());
        let lag = tokio::task::spawn_blocking(move || -> Result<u64, KafkaError> {
            let mut lag = 0;
            for element in consumer.position()?.elements().iter().filter(|e| e.topic() == topic) {
                let (_, high) = ends.fetch_watermarks(&topic, element.partition(), timeout)?;
                if let Offset::Offset(position) = element.offset() {
                    lag += (high - position).max(0) as u64;
                }
            }
            Ok(lag)
        });
        let lag = lag.await.map_err(unavailable)?.map_err(unavailable)?;
        Ok(GroupInfo { pending, lag: Some(lag) })
    }

    async fn oldest_pending_idle(&self) -> GroupResult<Option<Duration>> {
        let owned = self.owned.lock();
        Ok(owned.values().filter_map(|s| s.in_flight.values().map(|(at, _)| *at).min()).min().map(|at| at.elapsed()))
    }

    /// Produces each record to the topic `key` as one JSON value (reason, detail, source topic
    /// and entry, event id, the entry's fields; nothing of the entry's content in a header) keyed
    /// by its source entry, and awaits every delivery report; true only if each was stored.
    async fn dead_letters(&self, key: &str, records: &[PoisonRecord]) -> bool {
        let Ok(producer) = self.producer() else { return false };
        let sends = records.iter().map(|p| {
            let body = p.json().to_string();
            let source = format!("{}:{}", p.stream, p.entry_id);
            async move {
                let record = FutureRecord::to(key).key(&source).payload(&body);
                producer.send(record, Timeout::After(self.config.delivery_timeout)).await.is_ok()
            }
        });
        futures_util::future::join_all(sends).await.into_iter().all(|stored| stored)
    }
}
