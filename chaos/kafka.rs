//! The Kafka topic of a chaos run: made before the processes start (3 partitions, on all three
//! nodes), lost on purpose (deleted and made again empty), and read whole at the end.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(30);

fn admin(bootstrap: &str) -> anyhow::Result<AdminClient<DefaultClientContext>> {
    Ok(ClientConfig::new().set("bootstrap.servers", bootstrap).create()?)
}

/// Makes `topic` with three partitions. After a deletion, a relay's produce may make it first
/// (the brokers create topics on first use, with one partition): such a topic is given three, so
/// both bridges still have partitions to take over.
pub async fn create_topic(bootstrap: &str, topic: &str) -> anyhow::Result<()> {
    let admin = admin(bootstrap)?;
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    let started = Instant::now();
    loop {
        let results = admin.create_topics(&[NewTopic::new(topic, 3, TopicReplication::Fixed(3))], &options).await?;
        let results = match results.into_iter().next() {
            Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => {
                admin.create_partitions(&[NewPartitions::new(topic, 3)], &options).await?.into_iter().next()
            }
            other => other,
        };
        match results {
            // Already three (`InvalidPartitions`: a count not above the topic's own).
            Some(Ok(_)) | Some(Err((_, RDKafkaErrorCode::InvalidPartitions))) => return Ok(()),
            // A node restarting: not all three replicas can be placed yet.
            Some(Err((_, code))) if started.elapsed() > TIMEOUT => anyhow::bail!("creating {topic}: {code}"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The topic deleted (its messages and the bridges' committed offsets with it) and made again
/// empty: the relays must notice the high watermarks going back and deliver the rows again.
pub async fn lose_topic(bootstrap: &str, topic: &str) -> anyhow::Result<()> {
    let admin = admin(bootstrap)?;
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    for result in admin.delete_topics(&[topic], &options).await? {
        result.map_err(|(_, code)| anyhow::anyhow!("deleting {topic}: {code}"))?;
    }
    create_topic(bootstrap, topic).await
}

/// The `event_id` header of every message the topic holds, partition by partition.
pub async fn event_ids(bootstrap: &str, topic: &str) -> anyhow::Result<Vec<String>> {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || read_all(&bootstrap, &topic)).await?
}

fn read_all(bootstrap: &str, topic: &str) -> anyhow::Result<Vec<String>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "handoff-chaos-reader")
        .set("enable.auto.commit", "false")
        .create()?;
    let metadata = consumer.fetch_metadata(Some(topic), TIMEOUT)?;
    let partitions = metadata.topics().first().map(|t| t.partitions().len()).unwrap_or(0);
    let mut assignment = TopicPartitionList::new();
    let mut ends: HashMap<i32, i64> = HashMap::new();
    for partition in 0..partitions as i32 {
        let (low, high) = consumer.fetch_watermarks(topic, partition, TIMEOUT)?;
        if high > low {
            assignment.add_partition_offset(topic, partition, Offset::Offset(low))?;
            ends.insert(partition, high);
        }
    }
    consumer.assign(&assignment)?;
    let mut ids = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ends.is_empty() {
        anyhow::ensure!(Instant::now() < deadline, "reading {topic}: partitions {:?} not read to their end", ends);
        let Some(message) = consumer.poll(Duration::from_secs(1)) else { continue };
        let message = message?;
        let id = message.headers().and_then(|headers| {
            headers
                .iter()
                .find(|h| h.key == "event_id")
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        });
        ids.push(id.unwrap_or_default());
        if ends.get(&message.partition()).is_some_and(|end| message.offset() + 1 >= *end) {
            ends.remove(&message.partition());
        }
    }
    Ok(ids)
}
