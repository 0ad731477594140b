//! `handoff poison list | retry`: the entries bridges recorded in their poison tables, and the
//! way back after the cause is fixed. `retry` appends a record's original entry (every field,
//! as it was read) to its source stream again, where the bridge reads, validates and takes it
//! over like any new entry (an event already in the inbox is recognised as a duplicate); the
//! record stays, counting the re-drive. On NATS JetStream the entry is published to its subject
//! with the bridge's message mapping, under a message id of the re-drive's own (the event's id
//! would be taken for a duplicate within the stream's window).

use std::time::Duration;

use serde::Serialize;

use bytes::Bytes;

use super::records::{PoisonFilter, StoredPoison};
use super::{mysql, postgres};
use crate::bridge::config::BridgeConfig;
use crate::broker::Broker;
use crate::broker::kafka::KafkaStream;
use crate::broker::kafka::resend::RESEND_KEY_FIELD;
use crate::broker::nats::NatsStream;
use crate::broker::redis::RedisStream;
use crate::broker::{AppendOptions, AppendOutcome, Entry, EventStream};
use crate::config::Config;
use crate::error::error_chain;
use crate::store::Database;
use crate::store::StoreResult;

#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    pub bridge: Option<String>,
    pub records: PoisonFilter,
}

/// One poison record as shown to the operator.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PoisonRow {
    pub bridge: String,
    #[serde(flatten)]
    pub record: StoredPoison,
    /// `retry`: the entry appended again, or why nothing was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub appended: Option<Reappended>,
}

/// What `retry` did with a record's entry.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Reappended {
    /// Appended again, as this entry id.
    Entry(String),
    /// Not appended, and why.
    Failed(String),
}

/// Why a `poison` command did nothing, or stopped part-way.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PoisonError {
    #[error("no bridge in the config matches the filter")]
    NoMatch,
    #[error("bridge {bridge}: {}", error_chain(.error))]
    Store { bridge: String, error: crate::store::StoreError },
    #[error("redis: {0}")]
    Redis(String),
    #[error("bridge {bridge}: nats: {error}")]
    Nats { bridge: String, error: String },
    #[error("bridge {bridge}: {error}")]
    Kafka { bridge: String, error: String },
}

/// Why a record's entry was not appended again.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReappendError {
    #[error(transparent)]
    Fields(#[from] FieldsError),
    #[error("nothing to append: the entry was deleted from the stream before it was read")]
    Deleted,
    #[error("{0}")]
    Refused(String),
    #[error("the broker did not answer")]
    NoAnswer,
    #[error("the broker is unavailable: {0}")]
    Unavailable(String),
}

/// Why a record's fields cannot make an entry again.
#[derive(Debug, thiserror::Error)]
pub(super) enum FieldsError {
    #[error("the record's fields are not an object")]
    NotAnObject,
    #[error("not base64: {0}")]
    NotBase64(String),
    #[error(
        "field `{field}` was kept as a prefix of its {bytes} bytes (too large for the record): the entry cannot be appended again from it; the original may still be in its stream"
    )]
    KeptAsPrefix { field: String, bytes: serde_json::Value },
    #[error(
        "the record keeps only a count of {fields} more fields ({bytes} bytes; too many for the record): the entry cannot be appended again from it; the original may still be in its stream"
    )]
    FieldsLeftOut { fields: serde_json::Value, bytes: serde_json::Value },
}

fn bridges<'a>(config: &'a Config, filter: &Filter) -> Result<Vec<&'a BridgeConfig>, PoisonError> {
    let found: Vec<&BridgeConfig> =
        config.bridges.iter().filter(|b| filter.bridge.as_ref().is_none_or(|n| *n == b.name)).collect();
    if found.is_empty() {
        return Err(PoisonError::NoMatch);
    }
    Ok(found)
}

async fn records(db: &Database, bridge: &BridgeConfig, filter: &Filter) -> Result<Vec<StoredPoison>, PoisonError> {
    poison_records(db, &bridge.poison_table, &bridge.consumer, &filter.records)
        .await
        .map_err(|error| PoisonError::Store { bridge: bridge.name.clone(), error })
}

pub(crate) async fn list(config: &Config, db: &Database, filter: &Filter) -> Result<Vec<PoisonRow>, PoisonError> {
    let mut rows = Vec::new();
    for bridge in bridges(config, filter)? {
        let found = records(db, bridge, filter).await?;
        rows.extend(found.into_iter().map(|record| PoisonRow { bridge: bridge.name.clone(), record, appended: None }));
    }
    Ok(rows)
}

/// Appends each matching record's entry to its stream again and counts the re-drive.
pub(crate) async fn retry(
    config: &Config,
    db: &Database,
    filter: &Filter,
    dry_run: bool,
) -> Result<Vec<PoisonRow>, PoisonError> {
    let bridges = bridges(config, filter)?;
    // Every broker connection before any record is touched: a connection that fails part-way
    // would end the command with re-drives already made and not reported.
    let mut brokers = Vec::new();
    if !dry_run {
        let mut redis = None;
        for bridge in &bridges {
            brokers.push(Reappender::for_bridge(config, bridge, &mut redis).await?);
        }
    }
    let mut done = Vec::new();
    for (i, bridge) in bridges.iter().enumerate() {
        for record in records(db, bridge, filter).await? {
            let mut row = PoisonRow { bridge: bridge.name.clone(), record, appended: None };
            if let Some(broker) = brokers.get(i) {
                let (appended, counted) = match broker.append(bridge, &row.record).await {
                    Ok(Reappend::Appended(id)) => {
                        let counted = mark_redriven(db, &bridge.poison_table, row.record.id, None).await;
                        (Reappended::Entry(id), counted)
                    }
                    // On NATS: this re-drive's message id was published before (a retry whose
                    // count failed, or one running at the same time). Counted once: only if the
                    // count is still the one this re-drive's id was made from.
                    Ok(Reappend::AlreadyThere(id)) => {
                        let expected = Some(row.record.redrives);
                        let counted = mark_redriven(db, &bridge.poison_table, row.record.id, expected).await;
                        (Reappended::Entry(id), counted)
                    }
                    Err(e) => (Reappended::Failed(e.to_string()), Ok(false)),
                };
                if counted.map_err(|error| PoisonError::Store { bridge: bridge.name.clone(), error })? {
                    row.record.redrives += 1;
                }
                row.appended = Some(appended);
            }
            done.push(row);
        }
    }
    Ok(done)
}

/// What the broker did with a record's entry.
enum Reappend {
    /// Appended as this entry id.
    Appended(String),
    /// Already there as this entry id (NATS: the re-drive's message id within the stream's
    /// duplicate window).
    AlreadyThere(String),
}

/// The broker a bridge reads from, to append its records' entries to.
enum Reappender {
    Redis(RedisStream),
    Nats(Box<NatsStream>),
    /// A producer of the bridge's topics, and the header that carries the event id.
    Kafka(Box<KafkaStream>, String),
}

impl Reappender {
    /// One Redis connection serves every bridge on Redis; a NATS client is the bridge's own
    /// (its message mapping names the body's field), once it answers.
    async fn for_bridge(
        config: &Config,
        bridge: &BridgeConfig,
        redis: &mut Option<RedisStream>,
    ) -> Result<Self, PoisonError> {
        let nats_error = |error: String| PoisonError::Nats { bridge: bridge.name.clone(), error };
        match (bridge.broker, &config.nats) {
            (Broker::Nats, Some(nats)) => {
                let stream =
                    NatsStream::connect(nats, &bridge.envelope.payload).await.map_err(|e| nats_error(e.to_string()))?;
                if !stream.connected().await {
                    return Err(nats_error(format!("{} does not answer within {:?}", nats.url, nats.timeout)));
                }
                Ok(Reappender::Nats(Box::new(stream)))
            }
            (Broker::Nats, None) => Err(nats_error("no [nats] section".into())),
            (Broker::Kafka, _) => {
                let kafka_error = |error: String| PoisonError::Kafka { bridge: bridge.name.clone(), error };
                let kafka = config.kafka.as_ref().ok_or_else(|| kafka_error("no [kafka] section".into()))?;
                let stream =
                    KafkaStream::connect(kafka, &bridge.envelope.payload).map_err(|e| kafka_error(e.to_string()))?;
                stream.ping().await.map_err(|e| kafka_error(e.0))?;
                Ok(Reappender::Kafka(Box::new(stream), kafka.event_id_header().to_owned()))
            }
            (Broker::Redis, _) => {
                if redis.is_none() {
                    let (stream, _) =
                        RedisStream::connect(&config.redis).await.map_err(|e| PoisonError::Redis(e.to_string()))?;
                    *redis = Some(stream);
                }
                Ok(Reappender::Redis(redis.clone().expect("connected above")))
            }
        }
    }

    /// Appends the record's entry.
    async fn append(&self, bridge: &BridgeConfig, record: &StoredPoison) -> Result<Reappend, ReappendError> {
        let fields = entry_fields(&record.fields)?;
        if fields.is_empty() {
            return Err(ReappendError::Deleted);
        }
        const WAIT: Duration = Duration::from_secs(10);
        match self {
            Reappender::Redis(stream) => {
                match tokio::time::timeout(WAIT, stream.reappend(&record.stream, fields)).await {
                    Ok(Ok(id)) => Ok(Reappend::Appended(id)),
                    Ok(Err(e)) => Err(ReappendError::Refused(e.details().to_owned())),
                    Err(_) => Err(ReappendError::NoAnswer),
                }
            }
            Reappender::Nats(stream) => {
                // The message id: one per record and re-drive, so the same re-drive is published
                // once (within the stream's duplicate window) and the next one is not taken for
                // a duplicate.
                let id = format!("poison-retry:{}:{}:{}", bridge.consumer, record.id, record.redrives + 1);
                append_entry(stream.as_ref(), record, encode_cloudevents(fields), id).await
            }
            Reappender::Kafka(stream, header) => {
                // Kafka keeps no dedupe window: the message carries the event's own id in its
                // header, as the relay sent it, and the inbox recognises a repeat by it.
                let own = fields.iter().find(|(name, _)| name == header.as_bytes());
                let id = own.map(|(_, value)| String::from_utf8_lossy(value).into_owned());
                let id =
                    id.or_else(|| record.event_id.clone()).unwrap_or_else(|| format!("poison-retry:{}", record.id));
                // The key the message had, so the event goes back to its aggregate's partition;
                // if the message is gone, keyed as the relay keys (`[kafka] key_field`).
                match stream.key_of(&record.stream, &record.entry_id, record.event_id.as_deref()).await {
                    Some(key) => {
                        let mut fields = fields;
                        fields.push((RESEND_KEY_FIELD.as_bytes().to_vec(), key.to_vec()));
                        append_entry(&stream.keyed_by_resend_field(), record, fields, id).await
                    }
                    None => append_entry(stream.as_ref(), record, fields, id).await,
                }
            }
        }
    }
}

/// Appends `fields` to the record's stream through a broker that takes one entry per call.
async fn append_entry<P: EventStream>(
    stream: &P,
    record: &StoredPoison,
    fields: Vec<Field>,
    event_id: String,
) -> Result<Reappend, ReappendError> {
    let entry = Entry {
        stream: record.stream.clone(),
        fields: fields.into_iter().map(|(name, value)| (Bytes::from(name), Bytes::from(value))).collect(),
        event_id,
        run: None,
        trace: None,
    };
    let options = AppendOptions::default();
    let appending = stream.append(std::slice::from_ref(&entry), &options);
    let Ok(outcomes) = tokio::time::timeout(Duration::from_secs(10), appending).await else {
        return Err(ReappendError::NoAnswer);
    };
    match outcomes.into_iter().next() {
        Some(AppendOutcome::Appended(id)) => Ok(Reappend::Appended(id)),
        Some(AppendOutcome::Duplicate(id)) => Ok(Reappend::AlreadyThere(id)),
        Some(AppendOutcome::Rejected(why)) => Err(ReappendError::Refused(why)),
        Some(AppendOutcome::Unavailable(why)) => Err(ReappendError::Unavailable(why)),
        other => Err(ReappendError::Refused(format!("{other:?}"))),
    }
}

/// One entry field: name and value bytes.
pub(super) type Field = (Vec<u8>, Vec<u8>);

/// The stored `fields` object back as entry fields: strings as they are, `{"base64": …}` values
/// and `base64:` names decoded.
/// The bridge keeps `ce-` header values decoded (CloudEvents' NATS binding percent-encodes
/// them); published to NATS again, they are encoded again.
fn encode_cloudevents(fields: Vec<Field>) -> Vec<Field> {
    fields
        .into_iter()
        .map(|(name, value)| {
            if !crate::percent::encoded_header(&name) {
                return (name, value);
            }
            let mut encoded = String::new();
            crate::percent::encode_header_value(&String::from_utf8_lossy(&value), &mut encoded);
            (name, encoded.into_bytes())
        })
        .collect()
}

pub(super) fn entry_fields(fields: &serde_json::Value) -> Result<Vec<Field>, FieldsError> {
    let Some(map) = fields.as_object() else { return Err(FieldsError::NotAnObject) };
    if let Some(more) = map.get(crate::broker::read::MORE_FIELDS).filter(|v| v.get("fields").is_some()) {
        let count = |key: &str| more.get(key).cloned().unwrap_or_default();
        return Err(FieldsError::FieldsLeftOut { fields: count("fields"), bytes: count("bytes") });
    }
    map.iter()
        .map(|(name, value)| {
            let name = match name.strip_prefix("base64:") {
                Some(encoded) => {
                    crate::base64::decode(encoded).ok_or_else(|| FieldsError::NotBase64(encoded.to_owned()))?
                }
                None => name.as_bytes().to_vec(),
            };
            let value = match value {
                serde_json::Value::String(text) => text.as_bytes().to_vec(),
                other => match (other.get("base64").and_then(|v| v.as_str()), other.get("bytes")) {
                    (Some(encoded), _) => {
                        crate::base64::decode(encoded).ok_or_else(|| FieldsError::NotBase64(encoded.to_owned()))?
                    }
                    (None, Some(bytes)) => {
                        let field = String::from_utf8_lossy(&name).into_owned();
                        return Err(FieldsError::KeptAsPrefix { field, bytes: bytes.clone() });
                    }
                    (None, None) => other.to_string().into_bytes(),
                },
            };
            Ok((name, value))
        })
        .collect()
}

/// The records of `consumer` in the poison table `table` that `filter` selects, oldest first.
async fn poison_records(
    db: &Database,
    table: &str,
    consumer: &str,
    filter: &PoisonFilter,
) -> StoreResult<Vec<StoredPoison>> {
    match db {
        Database::Postgres(pool) => postgres::poison_records(pool, table, consumer, filter).await,
        Database::Mysql(pool) => mysql::poison_records(pool, table, consumer, filter).await,
    }
}

/// Counts a re-drive of record `id` of the poison table `table`; with `expected`, only while
/// the count is still that (a re-drive counted by another run is not counted twice). Whether it
/// counted.
async fn mark_redriven(db: &Database, table: &str, id: i64, expected: Option<i32>) -> StoreResult<bool> {
    match db {
        Database::Postgres(pool) => postgres::mark_redriven(pool, table, id, expected).await,
        Database::Mysql(pool) => mysql::mark_redriven(pool, table, id, expected).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloudevents_attributes_go_back_to_nats_percent_encoded_and_nothing_else_does() {
        let field = |n: &str, v: &str| (n.as_bytes().to_vec(), v.as_bytes().to_vec());
        let fields = vec![field("ce-subject", "Zürich \"7\""), field("CE-ID", "a%b"), field("event_id", "e 1")];
        let sent = encode_cloudevents(fields);
        assert_eq!(
            sent,
            vec![field("ce-subject", "Z%C3%BCrich%20%227%22"), field("CE-ID", "a%25b"), field("event_id", "e 1")]
        );
    }

    #[test]
    fn stored_fields_come_back_as_they_were_read() {
        let stored = serde_json::json!({
            "event_id": "e-1",
            "payload": {"base64": "//4A"},
            "base64:/w==": "x",
        });
        let fields = entry_fields(&stored).unwrap();
        assert!(fields.contains(&(b"event_id".to_vec(), b"e-1".to_vec())));
        assert!(fields.contains(&(b"payload".to_vec(), vec![0xff, 0xfe, 0x00])));
        assert!(fields.contains(&(vec![0xff], b"x".to_vec())));
    }

    #[test]
    fn a_record_that_kept_only_part_of_its_entry_is_not_appended_again() {
        let prefix = serde_json::json!({"event_id": "e-1", "payload": {"prefix": "{\"a\"", "bytes": 9_000_000}});
        assert!(matches!(entry_fields(&prefix), Err(FieldsError::KeptAsPrefix { .. })));
        let counted = serde_json::json!({"event_id": "e-1", "(more fields)": {"fields": 40_000, "bytes": 80_000}});
        let error = entry_fields(&counted).unwrap_err();
        assert!(matches!(error, FieldsError::FieldsLeftOut { .. }), "{error}");
        assert!(error.to_string().contains("40000 more fields"), "{error}");
    }
}
