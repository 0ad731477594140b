//! `[[bridge]]`: streams read by a consumer group into the consumer's inbox table.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::bridge::takeover::contract::TakeoverStatement;
use crate::names::{is_identifier, is_label};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BridgeConfig {
    /// Name in metrics labels and logs. Required, unique among bridges.
    pub name: String,
    /// The consuming service; the inbox is unique on (consumer, event_id).
    pub consumer: String,
    /// The broker read: `redis`, `nats` (`[nats]`; a stream is a subject) or `kafka` (`[kafka]`; a
    /// stream is a topic). Default: "redis".
    ///
    /// On NATS each subject is read through a durable pull consumer named after the group and the
    /// subject.
    #[serde(default)]
    pub broker: crate::broker::Broker,
    /// Consumer group (Redis, Kafka's `group.id`) or durable consumer's prefix (NATS). Default: the
    /// consumer.
    pub group: Option<String>,
    /// This instance's consumer name in the group; must be stable across restarts of the same
    /// instance (a pod name). Default: the host name (the pod name in Kubernetes).
    pub instance: Option<String>,
    /// Streams to read, each with the owner its entries must name.
    pub streams: Vec<StreamSource>,
    /// Where a new group starts: "0" (whole stream) or "$" (only new entries). Default: "0".
    #[serde(default = "defaults::start")]
    pub start: String,
    /// Entries per read. Default: 100.
    #[serde(default = "defaults::batch_size")]
    pub batch_size: u32,
    /// Takeover loops per stream (1–16), consumers `instance`, `instance-2`, …; above 1, one key's
    /// events may be taken in either order. Default: 1.
    #[serde(default = "defaults::concurrency")]
    pub concurrency: u32,
    /// Bytes one read may bring in, so memory is bounded by the configuration, not the stream.
    /// Default: 8388608 (8 MiB).
    ///
    /// Estimated from the largest entry of recent reads: a stream of large entries is read a few at
    /// a time.
    #[serde(default = "defaults::batch_bytes")]
    pub batch_bytes: usize,
    /// How long a read waits for new entries. Default: "2s".
    #[serde(default = "defaults::block", with = "humantime_serde")]
    pub block: Duration,
    /// Entries pending this long on any consumer (a dead instance) are claimed. Default: "60s".
    #[serde(default = "defaults::claim_idle", with = "humantime_serde")]
    pub claim_idle: Duration,
    /// Redeliveries that reached the inbox without a verdict before an entry is poison. Default: 5.
    ///
    /// The bridge died handling it. Deliveries that never reached the database (an inbox outage, a
    /// restart before it) do not count.
    #[serde(default = "defaults::max_deliveries")]
    pub max_deliveries: u32,
    /// Consumers of the group idle this long with nothing pending are deleted. Default: "24h".
    #[serde(default = "defaults::consumer_idle", with = "humantime_serde")]
    pub delete_idle_consumers_after: Duration,
    /// Inbox table. Default: "consumer_inbox".
    #[serde(default = "defaults::table")]
    pub table: String,
    /// Poison table (invalid entries and payload conflicts). Default: "consumer_inbox_poison".
    #[serde(default = "defaults::poison_table")]
    pub poison_table: String,
    /// handoff's own table of what `max_deliveries` counts. Default: "consumer_inbox_deliveries".
    #[serde(default = "defaults::deliveries_table")]
    pub deliveries_table: String,
    /// Also append poison entries to this stream (with `reason`, `detail`, `source_stream`,
    /// `source_id` and the original fields). Default: none.
    pub dead_letter_stream: Option<String>,
    /// What makes an entry valid.
    #[serde(default)]
    pub validate: ValidateConfig,
    /// Which entry field carries what. Default: the fields the relay's built-in layout writes.
    #[serde(default)]
    pub envelope: EnvelopeNames,
    /// Statement overrides for an inbox of your own; absent ones use the reference schema's.
    #[serde(default)]
    pub sql: TakeoverOverrides,
    /// A worker of this file (same consumer and inbox) whose SQL handlers the bridge runs in the
    /// take-over transaction; `"off"`: none. Default: the one such worker, where every condition
    /// holds.
    ///
    /// Postgres with the reference inbox statements. Events the handlers serve are inserted
    /// PROCESSED; the worker then only sees retries and events served otherwise.
    // After loading: the worker applied, or `None`.
    pub apply: Option<String>,
    /// Why `apply` is what it is (set when the configuration is loaded).
    #[serde(skip)]
    pub apply_chosen: Option<String>,
}

/// `[bridge.envelope]`: the entry field that carries each part of an event. Every other field of
/// an entry is kept with the inbox row as one of its `fields`. An empty name: entries carry no
/// such field (not for `event_id`, `event_type`, `payload`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvelopeNames {
    /// The field carrying the event id (required in every entry). Default: "event_id".
    pub event_id: String,
    /// The field carrying the event type (required). Default: "event_type".
    pub event_type: String,
    /// The field carrying the payload (required). Default: "payload".
    pub payload: String,
    /// The field carrying the owner; "" when entries carry none. Default: "owner".
    pub owner: String,
    /// The field carrying the aggregate type; "" when entries carry none. Default: "aggregate_type".
    pub aggregate_type: String,
    /// The field carrying the aggregate id; "" when entries carry none. Default: "aggregate_id".
    pub aggregate_id: String,
    /// The field carrying the headers (a JSON object); "" when entries carry none. Default: "headers".
    pub headers: String,
}

impl Default for EnvelopeNames {
    fn default() -> Self {
        Self {
            event_id: "event_id".into(),
            event_type: "event_type".into(),
            payload: "payload".into(),
            owner: "owner".into(),
            aggregate_type: "aggregate_type".into(),
            aggregate_id: "aggregate_id".into(),
            headers: "headers".into(),
        }
    }
}

impl EnvelopeNames {
    /// (key, entry field name) for every part, the required ones first.
    pub(crate) fn all(&self) -> [(&'static str, &str); 7] {
        [
            ("event_id", &self.event_id),
            ("event_type", &self.event_type),
            ("payload", &self.payload),
            ("owner", &self.owner),
            ("aggregate_type", &self.aggregate_type),
            ("aggregate_id", &self.aggregate_id),
            ("headers", &self.headers),
        ]
    }

    /// Whether `name` is a mapped field (the rest of an entry are its extra fields).
    pub(crate) fn maps(&self, name: &[u8]) -> bool {
        self.all().iter().any(|(_, field)| !field.is_empty() && field.as_bytes() == name)
    }
}

/// One stream a bridge reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamSource {
    /// Stream key, e.g. "audit:user".
    pub key: String,
    /// The `owner` field every entry must carry; unset accepts any owner.
    pub owner: Option<String>,
    /// Sharded streams: the relay's `{shard(column, N)}` N; the key carries `{shard}`. Expanded
    /// into one stream per shard.
    #[serde(default)]
    pub shard_count: Option<u32>,
    /// The shards this bridge reads: "all", or "0-7", "0,4,8-11". Default: "all".
    #[serde(default)]
    pub shards: Option<String>,
}

/// `[bridge.validate]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ValidateConfig {
    /// Longest accepted event id. Default: 128.
    pub event_id_max_len: usize,
    /// `any` (non-empty, printable), `token` ([A-Za-z0-9._:-]) or `uuid`. Default: "token".
    pub event_id_format: EventIdFormat,
    /// Accepted event types; empty accepts every type. Default: empty.
    pub event_types: Vec<String>,
    /// What happens to a type outside `event_types`: `poison` or `ignore` (kept in the inbox as
    /// IGNORED, never handled). Default: "poison".
    pub unknown_types: UnknownTypes,
    /// Largest accepted payload in bytes. Default: 262144.
    pub payload_max_bytes: usize,
    /// A payload field that must equal the event id (the seed's `auditId == eventId`). Default: none.
    pub payload_id_field: Option<String>,
    /// JSON Schema file per event type; the payload must validate. Default: none.
    pub schemas: BTreeMap<String, PathBuf>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventIdFormat {
    Any,
    #[default]
    Token,
    Uuid,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownTypes {
    #[default]
    Poison,
    Ignore,
}

impl Default for ValidateConfig {
    fn default() -> Self {
        Self {
            event_id_max_len: 128,
            event_id_format: EventIdFormat::default(),
            event_types: Vec::new(),
            unknown_types: UnknownTypes::default(),
            payload_max_bytes: 256 * 1024,
            payload_id_field: None,
            schemas: BTreeMap::new(),
        }
    }
}

impl BridgeConfig {
    pub(crate) fn group(&self) -> &str {
        self.group.as_deref().unwrap_or(&self.consumer)
    }

    /// The consumer names of this instance's takeover loops (`concurrency` of them): the
    /// instance's own name first, so one loop keeps the name an instance always had.
    pub(crate) fn consumer_names(&self, instance: &str) -> Vec<String> {
        (1..=self.concurrency.max(1))
            .map(|k| if k == 1 { instance.to_owned() } else { format!("{instance}-{k}") })
            .collect()
    }

    /// Every problem of this section alone, each naming its key under `path` (statements, apply
    /// and names used twice read other sections: the root configuration checks those).
    pub(crate) fn problems(&self, path: &str) -> Vec<String> {
        let mut errors = Vec::new();
        let mut check = |ok: bool, message: &str| {
            if !ok {
                errors.push(format!("{path}.{message}"));
            }
        };
        check(is_label(&self.name), "name must be 1-64 characters of [A-Za-z0-9_.-]");
        check(!self.consumer.is_empty(), "consumer must not be empty");
        check(!self.streams.is_empty(), "streams must name at least one stream");
        check(self.streams.iter().all(|s| !s.key.is_empty()), "streams: every key must be non-empty");
        check(self.start == "0" || self.start == "$", "start must be \"0\" or \"$\"");
        check((1..=10_000).contains(&self.batch_size), "batch_size must be between 1 and 10000");
        check((1..=16).contains(&self.concurrency), "concurrency must be between 1 and 16");
        check(self.batch_bytes >= 1024, "batch_bytes must be at least 1024");
        check(!self.block.is_zero(), "block must be > 0");
        check(self.claim_idle >= Duration::from_millis(100), "claim_idle must be at least 100ms");
        check(self.max_deliveries >= 1, "max_deliveries must be >= 1");
        let tables = [&self.table, &self.poison_table, &self.deliveries_table];
        for (key, table) in ["table", "poison_table", "deliveries_table"].into_iter().zip(tables) {
            check(is_identifier(table), &format!("{key} must be a plain or schema-qualified identifier"));
        }
        check(self.validate.event_id_max_len >= 1, "validate.event_id_max_len must be >= 1");
        check(self.validate.payload_max_bytes >= 2, "validate.payload_max_bytes must be >= 2");
        let mut fields = HashSet::new();
        for (i, (key, field)) in self.envelope.all().into_iter().enumerate() {
            if field.is_empty() {
                check(i >= 3, &format!("envelope.{key} must name an entry field"));
            } else {
                check(fields.insert(field), &format!("envelope.{key}: field `{field}` is mapped twice"));
            }
        }
        if self.envelope.owner.is_empty() {
            check(
                self.streams.iter().all(|s| s.owner.is_none()),
                "streams: an owner to check is set, but envelope.owner says entries carry none",
            );
        }
        errors
    }
}

/// `[bridge.sql]`: statement overrides for an inbox of your own; absent ones use the reference
/// schema's. What each is offered and must return: `bridge/takeover/contract.rs`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TakeoverOverrides {
    /// Insert one event unless the inbox holds its id already; one row changed = taken over.
    pub insert: Option<String>,
    /// The content hash of an event already there (column `content_hash`); without it, with a
    /// custom `insert`, an event already there is a duplicate, never a conflict.
    pub existing: Option<String>,
    /// Record one poison entry.
    pub poison: Option<String>,
}

impl TakeoverOverrides {
    pub(crate) fn get(&self, statement: TakeoverStatement) -> Option<&str> {
        match statement {
            TakeoverStatement::Insert => self.insert.as_deref(),
            TakeoverStatement::Existing => self.existing.as_deref(),
            TakeoverStatement::Poison => self.poison.as_deref(),
        }
    }
}

mod defaults {
    use std::time::Duration;

    pub(super) fn start() -> String {
        "0".into()
    }
    pub(super) fn batch_bytes() -> usize {
        8 * 1024 * 1024
    }
    pub(super) fn batch_size() -> u32 {
        100
    }
    pub(super) fn concurrency() -> u32 {
        1
    }
    pub(super) fn block() -> Duration {
        Duration::from_secs(2)
    }
    pub(super) fn claim_idle() -> Duration {
        Duration::from_secs(60)
    }
    pub(super) fn max_deliveries() -> u32 {
        5
    }
    pub(super) fn consumer_idle() -> Duration {
        Duration::from_secs(24 * 3600)
    }
    pub(super) fn table() -> String {
        "consumer_inbox".into()
    }
    pub(super) fn poison_table() -> String {
        "consumer_inbox_poison".into()
    }
    pub(super) fn deliveries_table() -> String {
        "consumer_inbox_deliveries".into()
    }
}

/// The broker-side settings a bridge's section gives its consumer group.
impl BridgeConfig {
    /// The settings of `bridge`'s durable consumer for `subject`, read by `instance`.
    pub(crate) fn nats_group(&self, subject: &str, instance: &str) -> crate::broker::nats::group::GroupSettings {
        let bridge = self;
        crate::broker::nats::group::GroupSettings {
            group: bridge.group().to_owned(),
            subject: subject.to_owned(),
            instance: instance.to_owned(),
            start: bridge.start.clone(),
            body_field: bridge.envelope.payload.clone(),
            ack_wait: bridge.claim_idle,
            // Each takeover loop holds a batch being taken in and one read ahead.
            max_ack_pending: i64::from(bridge.batch_size)
                .saturating_mul(4)
                .saturating_mul(i64::from(bridge.concurrency.max(1)))
                .max(1000),
        }
    }

    /// The settings of `bridge`'s member `instance` reading `topic`.
    pub(crate) fn kafka_group(&self, topic: &str, instance: &str) -> crate::broker::kafka::group::GroupSettings {
        let bridge = self;
        crate::broker::kafka::group::GroupSettings {
            group: bridge.group().to_owned(),
            topic: topic.to_owned(),
            instance: instance.to_owned(),
            start: bridge.start.clone(),
            body_field: bridge.envelope.payload.clone(),
            claim_idle: bridge.claim_idle,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::load_str;

    const BASE: &str = "[database]\nurl = \"postgres://x@h/db\"\n[redis]\nurl = \"redis://h\"\n\
                        [[bridge]]\nname = \"b\"\nconsumer = \"c\"\nstreams = [{ key = \"s\", owner = \"o\" }]\n";

    #[test]
    fn takeover_loops_are_named_after_the_instance_and_their_number_is_bounded() {
        let config = load_str(&format!("{BASE}concurrency = 3\n")).unwrap();
        assert_eq!(config.bridges[0].consumer_names("pod-a"), ["pod-a", "pod-a-2", "pod-a-3"]);
        assert_eq!(load_str(BASE).unwrap().bridges[0].consumer_names("pod-a"), ["pod-a"], "one loop by default");
        for n in [0, 17] {
            let error = format!("{:#}", load_str(&format!("{BASE}concurrency = {n}\n")).unwrap_err());
            assert!(error.contains("bridge[0].concurrency must be between 1 and 16"), "{error}");
        }
    }
}
