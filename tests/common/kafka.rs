//! The Kafka broker `scripts/services` starts (a single KRaft node, `HANDOFF_TEST_KAFKA_BOOTSTRAP`),
//! and what tests ask of it through librdkafka's own clients: topics of their own, made and
//! deleted with the admin API, and every message of a topic read back.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(30);

pub fn bootstrap() -> String {
    std::env::var("HANDOFF_TEST_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:19092".into())
}

/// A message as read back.
#[derive(Debug, Clone)]
pub struct Read {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<String>,
    pub value: String,
    pub headers: HashMap<String, String>,
}

fn admin(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("kafka admin client")
}

/// Creates `topic` with `partitions` partitions (replication 1) and the given topic configs.
pub async fn create_topic(topic: &str, partitions: i32, configs: &[(&str, &str)]) {
    create_topic_on(&bootstrap(), topic, (partitions, 1), configs).await
}

/// A topic to create, with its configs.
fn new_topic<'a>(
    topic: &'a str,
    partitions: i32,
    replication: TopicReplication<'a>,
    configs: &[(&'a str, &'a str)],
) -> NewTopic<'a> {
    configs.iter().fold(NewTopic::new(topic, partitions, replication), |new, (key, value)| new.set(key, value))
}

/// Creates `new` on the cluster at `bootstrap`. A cluster just started may time the first
/// request out while its controller settles: asked again until it answers (a topic an earlier,
/// timed-out request made counts).
async fn create(bootstrap: &str, new: &NewTopic<'_>) {
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    super::eventually("the topic created", || async {
        let results = admin(bootstrap).create_topics([new], &options).await.ok()?;
        results
            .into_iter()
            .all(|r| matches!(r, Ok(_) | Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists))))
            .then_some(())
    })
    .await;
}

/// Creates `topic` on the cluster at `bootstrap` with (partitions, replicas).
pub async fn create_topic_on(
    bootstrap: &str,
    topic: &str,
    (partitions, replicas): (i32, i32),
    configs: &[(&str, &str)],
) {
    create(bootstrap, &new_topic(topic, partitions, TopicReplication::Fixed(replicas), configs)).await;
    // The topic's leader is known to every client once its metadata lists the partitions.
    super::eventually("the new topic's partitions have leaders", || async {
        let (topic, bootstrap) = (topic.to_owned(), bootstrap.to_owned());
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", bootstrap).create().ok()?;
            let metadata = consumer.fetch_metadata(Some(&topic), TIMEOUT).ok()?;
            let found = metadata.topics().iter().find(|t| t.name() == topic)?;
            (found.partitions().len() == partitions as usize && found.partitions().iter().all(|p| p.leader() >= 0))
                .then_some(())
        })
        .await
        .unwrap()
    })
    .await;
}

/// Creates `topic` on the cluster at `bootstrap` with one partition on `replicas`, the first of
/// them its preferred leader.
pub async fn create_topic_led_by(bootstrap: &str, topic: &str, replicas: &[i32], configs: &[(&str, &str)]) {
    let assignment = [replicas];
    create(bootstrap, &new_topic(topic, 1, TopicReplication::Variable(&assignment), configs)).await;
    super::eventually("its preferred leader leads it", || async {
        (leader(bootstrap, topic, 0).await == replicas[0]).then_some(())
    })
    .await;
}

/// Deletes `topic` on the cluster at `bootstrap` and makes it again with one partition on
/// `replicas`, led by the first. A client writing to it meanwhile may have the brokers
/// auto-create it (on replicas of their choosing): that one is deleted and made again too.
pub async fn remake_topic_led_by(bootstrap: &str, topic: &str, replicas: &[i32], configs: &[(&str, &str)]) {
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    super::eventually("the topic made again on its replicas", || async {
        let _ = admin(bootstrap).delete_topics(&[topic], &options).await;
        let assignment = [replicas];
        let new = new_topic(topic, 1, TopicReplication::Variable(&assignment), configs);
        let _ = admin(bootstrap).create_topics([&new], &options).await;
        let (topic, bootstrap, replicas) = (topic.to_owned(), bootstrap.to_owned(), replicas.to_vec());
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", bootstrap).create().ok()?;
            let metadata = consumer.fetch_metadata(Some(&topic), TIMEOUT).ok()?;
            let found = metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none())?;
            let partition = found.partitions().first()?;
            (partition.replicas() == replicas.as_slice() && partition.leader() == replicas[0]).then_some(())
        })
        .await
        .unwrap()
    })
    .await;
}

/// Deletes `topic` and waits until the cluster no longer lists it.
pub async fn delete_topic(topic: &str) {
    delete_topic_on(&bootstrap(), topic).await
}

/// [`delete_topic`] on the cluster at `bootstrap`.
pub async fn delete_topic_on(bootstrap: &str, topic: &str) {
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    let results = admin(bootstrap).delete_topics(&[topic], &options).await.expect("delete_topics");
    for result in results {
        result.unwrap_or_else(|(name, code)| panic!("deleting topic {name}: {code:?}"));
    }
    super::eventually("the topic is gone", || async {
        let (topic, bootstrap) = (topic.to_owned(), bootstrap.to_owned());
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", bootstrap).create().ok()?;
            let metadata = consumer.fetch_metadata(Some(&topic), TIMEOUT).ok()?;
            let listed = metadata.topics().iter().any(|t| t.name() == topic && t.error().is_none());
            (!listed).then_some(())
        })
        .await
        .unwrap()
    })
    .await;
}

/// Every message of `topic` now (from each partition's start to its high watermark), in
/// partition and offset order.
pub async fn read_all(topic: &str) -> Vec<Read> {
    read_all_on(&bootstrap(), topic).await
}

/// [`read_all`] on the cluster at `bootstrap`.
pub async fn read_all_on(bootstrap: &str, topic: &str) -> Vec<Read> {
    let (topic, bootstrap) = (topic.to_owned(), bootstrap.to_owned());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "handoff-tests")
            .set("enable.auto.commit", "false")
            .create()
            .expect("kafka consumer");
        let metadata = consumer.fetch_metadata(Some(&topic), TIMEOUT).expect("metadata");
        let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else { return Vec::new() };
        let mut ends = HashMap::new();
        let mut assignment = TopicPartitionList::new();
        for partition in found.partitions() {
            // A partition whose leader was just killed has none for a moment: asked again.
            let deadline = std::time::Instant::now() + TIMEOUT;
            let (low, high) = loop {
                match consumer.fetch_watermarks(&topic, partition.id(), Duration::from_secs(5)) {
                    Ok(marks) => break marks,
                    Err(e) if std::time::Instant::now() > deadline => panic!("watermarks of {topic}: {e}"),
                    Err(_) => std::thread::sleep(Duration::from_millis(200)),
                }
            };
            if high > low {
                ends.insert(partition.id(), high);
                assignment.add_partition_offset(&topic, partition.id(), Offset::Offset(low)).unwrap();
            }
        }
        consumer.assign(&assignment).unwrap();
        let mut read = Vec::new();
        let deadline = std::time::Instant::now() + TIMEOUT;
        while read.len() < ends.values().sum::<i64>() as usize && std::time::Instant::now() < deadline {
            let Some(message) = consumer.poll(Duration::from_millis(500)) else { continue };
            // A node of a cluster that is down shows as transport errors: the rest still answer.
            let Ok(message) = message else { continue };
            let text = |bytes: Option<&[u8]>| bytes.map(|b| String::from_utf8_lossy(b).into_owned());
            let headers = message
                .headers()
                .map(|h| h.iter().map(|h| (h.key.to_owned(), text(h.value).unwrap_or_default())).collect())
                .unwrap_or_default();
            read.push(Read {
                partition: message.partition(),
                offset: message.offset(),
                key: text(message.key()),
                value: text(message.payload()).unwrap_or_default(),
                headers,
            });
        }
        read.sort_by_key(|m| (m.partition, m.offset));
        read
    })
    .await
    .unwrap()
}

/// The leader and in-sync replicas of `partition` of `topic` on the cluster at `bootstrap`,
/// `None` while the metadata does not list them (a node stopping or starting, a leader being
/// elected): callers wait for what they need.
async fn partition_state(bootstrap: &str, topic: &str, partition: i32) -> Option<(i32, Vec<i32>)> {
    let (topic, bootstrap) = (topic.to_owned(), bootstrap.to_owned());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
        let metadata = consumer.fetch_metadata(Some(&topic), TIMEOUT).ok()?;
        let found = metadata.topics().iter().find(|t| t.name() == topic)?;
        let state = found.partitions().iter().find(|p| p.id() == partition)?;
        (state.leader() >= 0).then(|| (state.leader(), state.isr().to_vec()))
    })
    .await
    .unwrap()
}

/// The broker id leading `partition` of `topic` on the cluster at `bootstrap`, once one does.
pub async fn leader(bootstrap: &str, topic: &str, partition: i32) -> i32 {
    let what = format!("a leader of {topic}-{partition}");
    super::eventually(&what, || async { partition_state(bootstrap, topic, partition).await.map(|(l, _)| l) }).await
}

/// The broker ids in sync for `partition` of `topic` on the cluster at `bootstrap` (none while
/// the metadata does not say).
pub async fn in_sync(bootstrap: &str, topic: &str, partition: i32) -> Vec<i32> {
    partition_state(bootstrap, topic, partition).await.map(|(_, isr)| isr).unwrap_or_default()
}

/// Three KRaft nodes of the test's own (`scripts/services kafka-cluster`): replication factor 3
/// and `min.insync.replicas = 2` by default; a node can be killed and started again.
pub struct KafkaCluster {
    dir: tempfile::TempDir,
    pub bootstrap: String,
}

fn services(args: &[&str]) -> std::process::Output {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/services");
    std::process::Command::new(script).args(args).output().expect("scripts/services")
}

impl KafkaCluster {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_str().unwrap().to_owned();
        tokio::task::spawn_blocking(move || {
            // Six ports from a base: another base if any of them is taken.
            for _ in 0..10 {
                let base = 20000 + (rand::random::<u16>() % 12000);
                let out = services(&["kafka-cluster", &path, &base.to_string()]);
                if out.status.success() {
                    let stdout = String::from_utf8_lossy(&out.stdout);
                    return stdout.lines().last().unwrap_or_default().trim().to_owned();
                }
                eprintln!("kafka cluster on base port {base}: {}", String::from_utf8_lossy(&out.stderr));
            }
            panic!("no Kafka cluster could start");
        })
        .await
        .map(|bootstrap| Self { dir, bootstrap })
        .unwrap()
    }

    /// Kills node `id` (1, 2 or 3) with SIGKILL, or starts it again on its data.
    pub async fn node(&self, id: i32, action: &'static str) {
        let dir = self.dir.path().to_str().unwrap().to_owned();
        let out = tokio::task::spawn_blocking(move || services(&["kafka-node", &dir, &id.to_string(), action]));
        let out = out.await.unwrap();
        assert!(out.status.success(), "kafka-node {id} {action}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for KafkaCluster {
    fn drop(&mut self) {
        services(&["kafka-cluster-stop", self.dir.path().to_str().unwrap()]);
    }
}

/// A message's fields, as [`produce`] lays them out.
pub type Fields = Vec<(bytes::Bytes, bytes::Bytes)>;

/// Produces one message per entry to `topic`: its `payload` field the value, `aggregate_id` the
/// key, every other field a header, exactly as given (an entry may lack its event id).
pub async fn produce(topic: &str, entries: Vec<Fields>) {
    produce_keyed(topic, entries.into_iter().map(|fields| (None, fields)).collect()).await
}

/// [`produce`], each message keyed by the key given with it, where one is (rather than by its
/// `aggregate_id`).
pub async fn produce_keyed(topic: &str, entries: Vec<(Option<&str>, Fields)>) {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = ClientConfig::new().set("bootstrap.servers", bootstrap()).create().unwrap();
    for (own_key, fields) in entries {
        let mut headers = OwnedHeaders::new();
        let (mut key, mut value) = (None, Vec::new());
        for (name, field) in &fields {
            match &name[..] {
                b"payload" => value = field.to_vec(),
                name => {
                    if name == b"aggregate_id" {
                        key = Some(field.to_vec());
                    }
                    let name = String::from_utf8_lossy(name).into_owned();
                    headers = headers.insert(Header { key: &name, value: Some(&field[..]) });
                }
            }
        }
        if let Some(own) = own_key {
            key = Some(own.as_bytes().to_vec());
        }
        let mut record = FutureRecord::<Vec<u8>, Vec<u8>>::to(topic).payload(&value).headers(headers);
        if let Some(key) = &key {
            record = record.key(key);
        }
        producer.send(record, TIMEOUT).await.map_err(|(e, _)| e).expect("produced");
    }
}

/// `group`'s committed offsets on `topic`'s partitions, each with its metadata.
pub async fn committed(group: &str, topic: &str, partitions: i32) -> Vec<(i32, i64, String)> {
    let (group, topic) = (group.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer =
            ClientConfig::new().set("bootstrap.servers", bootstrap()).set("group.id", &group).create().unwrap();
        let mut list = TopicPartitionList::new();
        (0..partitions).for_each(|p| _ = list.add_partition(&topic, p));
        let committed = consumer.committed_offsets(list, TIMEOUT).expect("committed offsets");
        let elements = committed.elements();
        let offsets = elements.iter().filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o, e.metadata().to_owned())),
            _ => None,
        });
        offsets.collect()
    })
    .await
    .unwrap()
}

/// Commits these offsets (with their metadata) for `group` on `topic`, as one of its members
/// would (the group must have none now).
pub async fn commit(group: &str, topic: &str, offsets: Vec<(i32, i64, String)>) {
    use rdkafka::consumer::CommitMode;
    let (group, topic) = (group.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer =
            ClientConfig::new().set("bootstrap.servers", bootstrap()).set("group.id", &group).create().unwrap();
        let mut list = TopicPartitionList::new();
        for (partition, offset, metadata) in offsets {
            let mut element = list.add_partition(&topic, partition);
            element.set_offset(Offset::Offset(offset)).unwrap();
            element.set_metadata(metadata);
        }
        consumer.commit(&list, CommitMode::Sync).expect("committed");
    })
    .await
    .unwrap()
}
