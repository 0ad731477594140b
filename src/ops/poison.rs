//! `handoff poison list | retry`: the entries bridges recorded in their poison tables, and the
//! way back after the cause is fixed. `retry` appends a record's original entry (every field,
//! as it was read) to its source stream again, where the bridge reads, validates and takes it
//! over like any new entry (an event already in the inbox is recognised as a duplicate); the
//! record stays, counting the re-drive.

use std::time::Duration;

use deadpool_postgres::Pool;
use fred::prelude::*;
use serde::Serialize;

use crate::config::{BridgeConfig, Config};
use crate::stream::redis::RedisStream;

#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub bridge: Option<String>,
    pub reason: Option<String>,
    pub event_id: Option<String>,
    pub limit: u32,
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
    /// `retry`: the id of the entry appended again, or why nothing was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub appended: Option<Result<String, String>>,
}

fn bridges<'a>(config: &'a Config, filter: &Filter) -> Result<Vec<&'a BridgeConfig>, String> {
    let found: Vec<&BridgeConfig> =
        config.bridges.iter().filter(|b| filter.bridge.as_ref().is_none_or(|n| *n == b.name)).collect();
    if found.is_empty() {
        return Err("no bridge in the config matches the filter".into());
    }
    Ok(found)
}

pub async fn list(config: &Config, pool: &Pool, filter: &Filter) -> Result<Vec<PoisonRow>, String> {
    let mut rows = Vec::new();
    for bridge in bridges(config, filter)? {
        rows.extend(select(pool, bridge, filter).await?.into_iter().map(|(row, _)| row));
    }
    Ok(rows)
}

/// Appends each matching record's entry to its stream again and counts the re-drive.
pub async fn retry(config: &Config, pool: &Pool, filter: &Filter, dry_run: bool) -> Result<Vec<PoisonRow>, String> {
    let stream = if dry_run {
        None
    } else {
        let (stream, _) = RedisStream::connect(&config.redis).await.map_err(|e| e.to_string())?;
        Some(stream)
    };
    let mut done = Vec::new();
    for bridge in bridges(config, filter)? {
        for (mut row, fields) in select(pool, bridge, filter).await? {
            if let Some(stream) = &stream {
                let appended = append(stream, &row.stream, &fields).await;
                if appended.is_ok() {
                    mark(pool, bridge, row.id).await?;
                    row.redrives += 1;
                }
                row.appended = Some(appended);
            }
            done.push(row);
        }
    }
    Ok(done)
}

async fn select(
    pool: &Pool,
    bridge: &BridgeConfig,
    filter: &Filter,
) -> Result<Vec<(PoisonRow, serde_json::Value)>, String> {
    let sql = format!(
        "SELECT id, stream, stream_entry_id, event_id, reason, detail,
                extract(epoch FROM now() - received_at)::float8, redrives, fields
         FROM {} WHERE consumer = $1
           AND ($2::text IS NULL OR reason = $2) AND ($3::text IS NULL OR event_id = $3)
         ORDER BY id LIMIT $4",
        bridge.poison_table
    );
    let client = pool.get().await.map_err(|e| format!("cannot connect to the database: {e}"))?;
    let rows = client
        .query(&sql, &[&bridge.consumer, &filter.reason, &filter.event_id, &i64::from(filter.limit)])
        .await
        .map_err(|e| format!("bridge {}: {}", bridge.name, crate::store::postgres::describe(&e)))?;
    Ok(rows
        .iter()
        .map(|r| {
            let row = PoisonRow {
                bridge: bridge.name.clone(),
                id: r.get(0),
                stream: r.get(1),
                entry_id: r.get(2),
                event_id: r.get(3),
                reason: r.get(4),
                detail: r.get(5),
                age_seconds: r.get::<_, Option<f64>>(6).unwrap_or(0.0),
                redrives: r.get(7),
                appended: None,
            };
            (row, r.get(8))
        })
        .collect())
}

async fn mark(pool: &Pool, bridge: &BridgeConfig, id: i64) -> Result<(), String> {
    let sql = format!("UPDATE {} SET redrives = redrives + 1, redriven_at = now() WHERE id = $1", bridge.poison_table);
    let client = pool.get().await.map_err(|e| format!("cannot connect to the database: {e}"))?;
    client.execute(&sql, &[&id]).await.map_err(|e| crate::store::postgres::describe(&e))?;
    Ok(())
}

/// XADD of the record's fields, binary values decoded again. (Their order is not kept: the
/// record stores them as a JSON object; nothing reads entries by position.)
async fn append(stream: &RedisStream, key: &str, fields: &serde_json::Value) -> Result<String, String> {
    let fields: Vec<(fred::types::Key, fred::types::Value)> = entry_fields(fields)?
        .into_iter()
        .map(|(k, v)| (fred::types::Key::from(bytes::Bytes::from(k)), fred::types::Value::Bytes(v.into())))
        .collect();
    if fields.is_empty() {
        return Err("nothing to append: the entry was deleted from the stream before it was read".into());
    }
    let appended = stream.client().xadd::<String, _, _, _, _>(key, false, None::<()>, "*", fields);
    match tokio::time::timeout(Duration::from_secs(10), appended).await {
        Ok(Ok(id)) => Ok(id),
        Ok(Err(e)) => Err(e.details().to_owned()),
        Err(_) => Err("redis did not answer".into()),
    }
}

/// One entry field: name and value bytes.
pub type Field = (Vec<u8>, Vec<u8>);

/// The stored `fields` object back as entry fields: strings as they are, `{"base64": …}` values
/// and `base64:` names decoded.
pub fn entry_fields(fields: &serde_json::Value) -> Result<Vec<Field>, String> {
    let Some(map) = fields.as_object() else { return Err("the record's fields are not an object".into()) };
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
                        return Err(format!(
                            "field `{}` was kept as a prefix of its {bytes} bytes (too large for the record): \
                             the entry cannot be appended again from it; the original may still be in its stream",
                            String::from_utf8_lossy(&name)
                        ));
                    }
                    (None, None) => other.to_string().into_bytes(),
                },
            };
            Ok((name, value))
        })
        .collect()
}

fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    let value = |c: u8| -> Result<u32, String> {
        match c {
            b'A'..=b'Z' => Ok(u32::from(c - b'A')),
            b'a'..=b'z' => Ok(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Ok(u32::from(c - b'0') + 52),
            b'+' => Ok(62),
            b'/' => Ok(63),
            _ => Err(format!("not base64: {text}")),
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
