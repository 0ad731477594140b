//! `handoff poison list | retry`: the entries bridges recorded in their poison tables, and the
//! way back after the cause is fixed. `retry` appends a record's original entry (every field,
//! as it was read) to its source stream again, where the bridge reads, validates and takes it
//! over like any new entry (an event already in the inbox is recognised as a duplicate); the
//! record stays, counting the re-drive. The SQL is the store's (`store::takeover`).

use std::time::Duration;

use serde::Serialize;

use crate::config::{BridgeConfig, Config};
use crate::error::error_chain;
use crate::store::Database;
use crate::store::takeover::{self, PoisonFilter, StoredPoison};
use crate::stream::redis::RedisStream;

#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub bridge: Option<String>,
    pub records: PoisonFilter,
}

/// One poison record as shown to the operator.
#[derive(Debug, Clone, Serialize)]
pub struct PoisonRow {
    pub bridge: String,
    pub id: i64,
    pub stream: String,
    pub entry_id: String,
    pub event_id: Option<String>,
    pub reason: String,
    pub detail: String,
    pub age_seconds: f64,
    pub redrives: i32,
    /// `retry`: the entry appended again, or why nothing was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub appended: Option<Reappended>,
}

impl PoisonRow {
    fn new(bridge: &str, record: &StoredPoison) -> Self {
        Self {
            bridge: bridge.to_owned(),
            id: record.id,
            stream: record.stream.clone(),
            entry_id: record.entry_id.clone(),
            event_id: record.event_id.clone(),
            reason: record.reason.clone(),
            detail: record.detail.clone(),
            age_seconds: record.age_seconds,
            redrives: record.redrives,
            appended: None,
        }
    }
}

/// What `retry` did with a record's entry.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reappended {
    /// Appended again, as this entry id.
    Entry(String),
    /// Not appended, and why.
    Failed(String),
}

/// Why a `poison` command did nothing, or stopped part-way.
#[derive(Debug, thiserror::Error)]
pub enum PoisonError {
    #[error("no bridge in the config matches the filter")]
    NoMatch,
    #[error("bridge {bridge}: {}", error_chain(.error))]
    Store { bridge: String, error: crate::store::StoreError },
    #[error("redis: {0}")]
    Redis(String),
}

/// Why a record's entry was not appended again.
#[derive(Debug, thiserror::Error)]
pub enum ReappendError {
    #[error(transparent)]
    Fields(#[from] FieldsError),
    #[error("nothing to append: the entry was deleted from the stream before it was read")]
    Deleted,
    #[error("{0}")]
    Refused(String),
    #[error("redis did not answer")]
    NoAnswer,
}

/// Why a record's fields cannot make an entry again.
#[derive(Debug, thiserror::Error)]
pub enum FieldsError {
    #[error("the record's fields are not an object")]
    NotAnObject,
    #[error("not base64: {0}")]
    NotBase64(String),
    #[error(
        "field `{field}` was kept as a prefix of its {bytes} bytes (too large for the record): the entry cannot be appended again from it; the original may still be in its stream"
    )]
    KeptAsPrefix { field: String, bytes: serde_json::Value },
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
    takeover::poison_records(db, &bridge.poison_table, &bridge.consumer, &filter.records)
        .await
        .map_err(|error| PoisonError::Store { bridge: bridge.name.clone(), error })
}

pub async fn list(config: &Config, db: &Database, filter: &Filter) -> Result<Vec<PoisonRow>, PoisonError> {
    let mut rows = Vec::new();
    for bridge in bridges(config, filter)? {
        rows.extend(records(db, bridge, filter).await?.iter().map(|r| PoisonRow::new(&bridge.name, r)));
    }
    Ok(rows)
}

/// Appends each matching record's entry to its stream again and counts the re-drive.
pub async fn retry(
    config: &Config,
    db: &Database,
    filter: &Filter,
    dry_run: bool,
) -> Result<Vec<PoisonRow>, PoisonError> {
    let stream = if dry_run {
        None
    } else {
        let (stream, _) = RedisStream::connect(&config.redis).await.map_err(|e| PoisonError::Redis(e.to_string()))?;
        Some(stream)
    };
    let mut done = Vec::new();
    for bridge in bridges(config, filter)? {
        for record in records(db, bridge, filter).await? {
            let mut row = PoisonRow::new(&bridge.name, &record);
            if let Some(stream) = &stream {
                let appended = match append(stream, &row.stream, &record.fields).await {
                    Ok(id) => Reappended::Entry(id),
                    Err(e) => Reappended::Failed(e.to_string()),
                };
                if matches!(appended, Reappended::Entry(_)) {
                    takeover::mark_redriven(db, &bridge.poison_table, row.id)
                        .await
                        .map_err(|error| PoisonError::Store { bridge: bridge.name.clone(), error })?;
                    row.redrives += 1;
                }
                row.appended = Some(appended);
            }
            done.push(row);
        }
    }
    Ok(done)
}

/// XADD of the record's fields, binary values decoded again. (Their order is not kept: the
/// record stores them as a JSON object; nothing reads entries by position.)
async fn append(stream: &RedisStream, key: &str, fields: &serde_json::Value) -> Result<String, ReappendError> {
    let fields = entry_fields(fields)?;
    if fields.is_empty() {
        return Err(ReappendError::Deleted);
    }
    match tokio::time::timeout(Duration::from_secs(10), stream.reappend(key, fields)).await {
        Ok(Ok(id)) => Ok(id),
        Ok(Err(e)) => Err(ReappendError::Refused(e.details().to_owned())),
        Err(_) => Err(ReappendError::NoAnswer),
    }
}

/// One entry field: name and value bytes.
pub type Field = (Vec<u8>, Vec<u8>);

/// The stored `fields` object back as entry fields: strings as they are, `{"base64": …}` values
/// and `base64:` names decoded.
pub fn entry_fields(fields: &serde_json::Value) -> Result<Vec<Field>, FieldsError> {
    let Some(map) = fields.as_object() else { return Err(FieldsError::NotAnObject) };
    map.iter()
        .map(|(name, value)| {
            let name = match name.strip_prefix("base64:") {
                Some(encoded) => decode_base64(encoded)?,
                None => name.as_bytes().to_vec(),
            };
            let value = match value {
                serde_json::Value::String(text) => text.as_bytes().to_vec(),
                other => match (other.get("base64").and_then(|v| v.as_str()), other.get("bytes")) {
                    (Some(encoded), _) => decode_base64(encoded)?,
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

fn decode_base64(text: &str) -> Result<Vec<u8>, FieldsError> {
    let value = |c: u8| -> Result<u32, FieldsError> {
        match c {
            b'A'..=b'Z' => Ok(u32::from(c - b'A')),
            b'a'..=b'z' => Ok(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Ok(u32::from(c - b'0') + 52),
            b'+' => Ok(62),
            b'/' => Ok(63),
            _ => Err(FieldsError::NotBase64(text.to_owned())),
        }
    };
    let clean: Vec<u8> = text.bytes().filter(|b| *b != b'=').collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= value(*c)? << (18 - 6 * i);
        }
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(decode_base64("Zm9v").unwrap(), b"foo");
        assert_eq!(decode_base64("Zg==").unwrap(), b"f");
    }
}
