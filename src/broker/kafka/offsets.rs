//! A bridge's group seen from outside it: what its partitions hold past its committed offsets
//! (`handoff status`), and its committed offsets moved back to a time (`handoff bridge rewind`).
//! Kafka takes offsets committed from outside a group only while the group has no members: a
//! rewind needs the bridge's processes stopped, not only paused.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::client::{self, Logged};
use super::config::KafkaConfig;

/// A partition's committed offset moved (or, in a dry run, that would move).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reset {
    pub partition: i32,
    /// The committed offset before (`None`: the group had committed nothing there).
    pub from: Option<i64>,
    pub to: i64,
}

/// A client of `group` that joins nothing: it reads and commits the group's offsets.
fn outsider(config: &KafkaConfig, group: &str) -> Result<BaseConsumer<Logged>, String> {
    let mut client = client::consumer_config(config).map_err(|e| e.to_string())?;
    client.set("group.id", group);
    client.create_with_context(Logged).map_err(|e| e.to_string())
}

/// Adds `partition` at `offset` to a list to commit, with the topic's id as its metadata (what
/// tells a bridge the offset is not one of a topic since deleted and made again; `""` if it
/// could not be read).
fn add_offset(list: &mut TopicPartitionList, topic: &str, partition: i32, offset: i64, id: &str) -> Result<(), String> {
    let mut element = list.add_partition(topic, partition);
    element.set_offset(Offset::Offset(offset)).map_err(|e| e.to_string())?;
    element.set_metadata(id);
    Ok(())
}

/// Every partition of `topic` with the group's committed offset (`None` where it has none).
fn committed(
    consumer: &BaseConsumer<Logged>,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<(i32, Option<i64>)>, String> {
    let metadata = consumer.fetch_metadata(Some(topic), timeout).map_err(|e| e.to_string())?;
    let found = metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none());
    let partitions = found.ok_or_else(|| format!("topic {topic} does not exist"))?.partitions();
    let mut list = TopicPartitionList::new();
    for partition in partitions {
        list.add_partition(topic, partition.id());
    }
    let committed = consumer.committed_offsets(list, timeout).map_err(|e| e.to_string())?;
    Ok(committed
        .elements()
        .iter()
        .map(|e| (e.partition(), if let Offset::Offset(o) = e.offset() { Some(o) } else { None }))
        .collect())
}

/// What the partitions of `topic` hold past `group`'s committed offsets (all of a partition
/// where it committed nothing).
pub async fn committed_lag(config: &KafkaConfig, group: &str, topic: &str) -> Result<u64, String> {
    let (consumer, timeout, topic) = (outsider(config, group)?, config.timeout, topic.to_owned());
    tokio::task::spawn_blocking(move || -> Result<u64, String> {
        let mut lag = 0;
        for (partition, committed) in committed(&consumer, &topic, timeout)? {
            let (low, high) = consumer.fetch_watermarks(&topic, partition, timeout).map_err(|e| e.to_string())?;
            lag += (high - committed.unwrap_or(low)).max(0) as u64;
        }
        Ok(lag)
    })
    .await
    .map_err(|e| e.to_string())?
}

/// For `start = "$"`: commits the end of each partition of `topic` for a group that has
/// committed nothing there yet, before its first member joins, so it begins with new messages.
/// A group with offsets, or with members already (Kafka then refuses the commit), is left alone.
pub(crate) async fn start_at_end_if_new(config: &KafkaConfig, group: &str, topic: &str) -> Result<(), String> {
    let (consumer, timeout, topic) = (outsider(config, group)?, config.timeout, topic.to_owned());
    tokio::task::spawn_blocking(move || -> Result<(), String> {
        let before = committed(&consumer, &topic, timeout)?;
        if before.iter().any(|(_, offset)| offset.is_some()) {
            return Ok(());
        }
        let id = super::topic_id::describe(consumer.client(), &topic, timeout).unwrap_or_default();
        let mut ends = TopicPartitionList::new();
        for (partition, _) in before {
            let (_, high) = consumer.fetch_watermarks(&topic, partition, timeout).map_err(|e| e.to_string())?;
            add_offset(&mut ends, &topic, partition, high, &id)?;
        }
        if let Err(e) = consumer.commit(&ends, CommitMode::Sync) {
            tracing::debug!(error = %e, "the group's start was set by another member");
        }
        Ok(())
    })
    .await
    .map_err(|e| e.to_string())?
}

/// Moves `group`'s committed offset on each partition of `topic` back to the first message at
/// or after `unix_ms` (the partition's end if none is). Never forward: a partition whose
/// committed offset is already there or before keeps it. With `dry_run`, commits nothing.
pub(crate) async fn rewind_to_time(
    config: &KafkaConfig,
    group: &str,
    topic: &str,
    unix_ms: i64,
    dry_run: bool,
) -> Result<Vec<Reset>, String> {
    let (consumer, timeout, topic) = (outsider(config, group)?, config.timeout, topic.to_owned());
    tokio::task::spawn_blocking(move || -> Result<Vec<Reset>, String> {
        let before = committed(&consumer, &topic, timeout)?;
        let mut times = TopicPartitionList::new();
        for (partition, _) in &before {
            times.add_partition_offset(&topic, *partition, Offset::Offset(unix_ms)).map_err(|e| e.to_string())?;
        }
        let found = consumer.offsets_for_times(times, timeout).map_err(|e| e.to_string())?;
        let id = super::topic_id::describe(consumer.client(), &topic, timeout).unwrap_or_default();
        let mut resets = Vec::new();
        let mut commit = TopicPartitionList::new();
        for (partition, from) in before {
            let to = match found.find_partition(&topic, partition).map(|e| e.offset()) {
                Some(Offset::Offset(offset)) => offset,
                _ => consumer.fetch_watermarks(&topic, partition, timeout).map_err(|e| e.to_string())?.1,
            };
            // A partition with nothing committed is read from its start: as far back as it goes.
            let position = match from {
                Some(from) => from,
                None => consumer.fetch_watermarks(&topic, partition, timeout).map_err(|e| e.to_string())?.0,
            };
            if position <= to {
                continue;
            }
            add_offset(&mut commit, &topic, partition, to, &id)?;
            resets.push(Reset { partition, from, to });
        }
        if !dry_run && commit.count() > 0 {
            consumer.commit(&commit, CommitMode::Sync).map_err(|e| {
                format!("{e} (Kafka takes a group's offsets from outside only while it has no members: stop the bridge's processes, rewind, start them)")
            })?;
        }
        Ok(resets)
    })
    .await
    .map_err(|e| e.to_string())?
}
