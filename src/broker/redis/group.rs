//! One stream's consumer group, as the bridge uses it: read, acknowledge, create the group
//! when it is missing, find and claim what dead consumers left pending, and report lag.

use std::time::Duration;

use fred::prelude::*;
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Value};

use super::replies::is_outage;
use crate::broker::read::{RawEntry, parse_entries, parse_read, text};

use crate::broker::group::{GroupError, GroupInfo, GroupResult};

impl From<Error> for GroupError {
    fn from(e: Error) -> Self {
        let details = e.details().to_owned();
        if details.starts_with("NOGROUP") || details.contains("no such key") {
            GroupError::NoGroup(details)
        } else if is_outage(&e) {
            GroupError::Unavailable(details)
        } else {
            GroupError::Refused(details)
        }
    }
}

/// The most entries the lag gauge counts itself when Redis cannot say (read after a failover).
const LAG_COUNT_LIMIT: u64 = 10_000;

/// An entry waiting in the group's pending list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    pub id: String,
    pub consumer: String,
    pub idle: Duration,
    pub deliveries: u64,
}

pub(crate) struct Group {
    /// Replaced when the stream's node changes (cluster failover): see `StreamBridge::outage`.
    client: std::sync::RwLock<Client>,
    pub key: String,
    pub group: String,
    pub consumer: String,
    command_timeout: Duration,
}

impl Group {
    pub(crate) fn new(client: Client, key: &str, group: &str, consumer: &str, command_timeout: Duration) -> Self {
        let client = std::sync::RwLock::new(client);
        Self { client, key: key.into(), group: group.into(), consumer: consumer.into(), command_timeout }
    }

    /// The client the group's commands go through now.
    pub(crate) fn client(&self) -> Client {
        self.client.read().expect("group client lock").clone()
    }

    /// Uses `client` from now on (the stream moved to another node); the old one is closed.
    pub(crate) fn replace_client(&self, client: Client) {
        let old = std::mem::replace(&mut *self.client.write().expect("group client lock"), client);
        tokio::spawn(async move {
            let _ = old.quit().await;
        });
    }

    /// XREADGROUP of one stream: `">"` for new entries (waiting up to `block`), `"0"` for this
    /// consumer's own pending entries.
    pub(crate) async fn read(&self, id: &str, count: u32, block: Option<Duration>) -> GroupResult<Vec<RawEntry>> {
        let mut args: Vec<Value> = vec!["GROUP".into(), self.group.as_str().into(), self.consumer.as_str().into()];
        args.extend(["COUNT".into(), Value::Integer(count.into())]);
        if let Some(block) = block {
            args.extend(["BLOCK".into(), Value::Integer(block.as_millis() as i64)]);
        }
        let key_at = args.len() + 1;
        args.extend(["STREAMS".into(), self.key.as_str().into(), id.into()]);
        // The key is not the first argument, so route by its position (cluster mode).
        let command = CustomCommand::new_static("XREADGROUP", ClusterHash::Offset(key_at), block.is_some());
        let timeout = self.command_timeout + block.unwrap_or_default();
        let options = Options { timeout: Some(timeout), ..Default::default() };
        let client = self.client();
        let reply: Value = match client.with_options(&options).custom(command, args).await {
            Ok(reply) => reply,
            Err(e) => {
                // A blocking read the server left unanswered past its block: the connection
                // is dead without having said so (a partition, a lost NAT entry). The client
                // exempts a blocked connection from its unresponsive check and queues every
                // later command behind it, so it is remade here, or nothing would get through
                // again.
                if block.is_some() && *e.kind() == ErrorKind::Timeout {
                    let _ = tokio::time::timeout(self.command_timeout, client.force_reconnection()).await;
                }
                return Err(e.into());
            }
        };
        Ok(parse_read(reply))
    }

    /// Creates the group (and the stream) if missing, starting at `start`.
    pub(crate) async fn ensure(&self, start: &str) -> GroupResult<()> {
        match self.client().xgroup_create::<Value, _, _, _>(self.key.as_str(), self.group.as_str(), start, true).await {
            Ok(_) => Ok(()),
            Err(e) if e.details().starts_with("BUSYGROUP") => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) async fn ack(&self, ids: &[String]) -> GroupResult<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        Ok(self.client().xack(self.key.as_str(), self.group.as_str(), ids).await?)
    }

    /// Pending entries idle at least `min_idle` between ids `from` and `to` (`-`/`+` for all),
    /// of every consumer or only of `consumer`, oldest first.
    pub(crate) async fn pending(
        &self,
        min_idle: Duration,
        (from, to): (&str, &str),
        count: u32,
        consumer: Option<&str>,
    ) -> GroupResult<Vec<Pending>> {
        let mut args: Vec<Value> = vec![
            self.key.as_str().into(),
            self.group.as_str().into(),
            "IDLE".into(),
            Value::Integer(min_idle.as_millis() as i64),
            from.into(),
            to.into(),
            Value::Integer(count.into()),
        ];
        args.extend(consumer.map(Value::from));
        let reply: Value =
            self.client().custom(CustomCommand::new_static("XPENDING", ClusterHash::FirstKey, false), args).await?;
        let Value::Array(items) = reply else { return Ok(Vec::new()) };
        Ok(items.into_iter().filter_map(parse_pending).collect())
    }

    /// XCLAIM to this consumer; entries deleted meanwhile come back without fields.
    pub(crate) async fn claim(&self, min_idle: Duration, ids: &[String]) -> GroupResult<Vec<RawEntry>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut args: Vec<Value> = vec![
            self.key.as_str().into(),
            self.group.as_str().into(),
            self.consumer.as_str().into(),
            Value::Integer(min_idle.as_millis() as i64),
        ];
        args.extend(ids.iter().map(|id| Value::from(id.as_str())));
        let reply: Value =
            self.client().custom(CustomCommand::new_static("XCLAIM", ClusterHash::FirstKey, false), args).await?;
        Ok(parse_entries(reply))
    }

    /// Pending count and lag. The lag is Redis's own (`entries-added` − `entries-read`) only
    /// when the stream confirms there is something beyond the group's last-delivered id: a
    /// replica promoted by a failover can hold a stale or undefined `entries-read`, which would
    /// report a lag forever though every entry was read. Nothing beyond → 0; something beyond
    /// and no usable figure → the entries beyond, counted (up to `LAG_COUNT_LIMIT`).
    pub(crate) async fn info(&self) -> GroupResult<GroupInfo> {
        let (pending, redis_lag, last_delivered) = self.group_fields().await?;
        let beyond = |count: u64| {
            let args: Vec<Value> = vec![
                self.key.as_str().into(),
                format!("({last_delivered}").into(),
                "+".into(),
                "COUNT".into(),
                Value::Integer(count as i64),
            ];
            async move {
                let reply: Value = self
                    .client()
                    .custom(CustomCommand::new_static("XRANGE", ClusterHash::FirstKey, false), args)
                    .await?;
                GroupResult::Ok(match reply {
                    Value::Array(items) => items.len() as u64,
                    _ => 0,
                })
            }
        };
        let lag = match beyond(1).await? {
            0 => 0,
            _ => match redis_lag {
                Some(lag) if lag > 0 => lag,
                _ => beyond(LAG_COUNT_LIMIT).await?,
            },
        };
        Ok(GroupInfo { pending, lag: Some(lag) })
    }

    /// The id of the last entry delivered to the group (`last-delivered-id`).
    pub(crate) async fn position(&self) -> GroupResult<String> {
        Ok(self.group_fields().await?.2)
    }

    /// XGROUP SETID: the group's next `>` read starts after `id`. Its pending entries stay
    /// pending (an entry read again is handed to the reader, and the inbox deduplicates it).
    pub(crate) async fn set_position(&self, id: &str) -> GroupResult<()> {
        let args: Vec<Value> = vec!["SETID".into(), self.key.as_str().into(), self.group.as_str().into(), id.into()];
        let _: Value =
            self.client().custom(CustomCommand::new_static("XGROUP", ClusterHash::Offset(1), false), args).await?;
        Ok(())
    }

    /// The server's clock, in Unix milliseconds (entry ids are made from it).
    pub(crate) async fn server_millis(&self) -> GroupResult<i64> {
        let command = CustomCommand::new_static("TIME", ClusterHash::Random, false);
        let reply: Vec<String> = self.client().custom(command, Vec::<Value>::new()).await?;
        let n = |i: usize| reply.get(i).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        Ok(n(0) * 1000 + n(1) / 1000)
    }

    /// `pending`, `lag` and `last-delivered-id` of this group in `XINFO GROUPS`.
    async fn group_fields(&self) -> GroupResult<(u64, Option<u64>, String)> {
        let reply: Value = self
            .client()
            .custom(
                CustomCommand::new_static("XINFO", ClusterHash::Offset(1), false),
                vec!["GROUPS", self.key.as_str()],
            )
            .await?;
        let Value::Array(groups) = reply else { return Ok((0, Some(0), "0-0".into())) };
        for group in groups {
            let fields = pairs(group);
            if fields.iter().any(|(k, v)| k == "name" && text(v.clone()).as_deref() == Some(self.group.as_str())) {
                let number = |name: &str| fields.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.as_u64());
                let last = fields.iter().find(|(k, _)| k == "last-delivered-id").and_then(|(_, v)| text(v.clone()));
                return Ok((number("pending").unwrap_or(0), number("lag"), last.unwrap_or_else(|| "0-0".into())));
            }
        }
        Err(GroupError::NoGroup(format!("group {} not on {}", self.group, self.key)))
    }

    /// Idle time of the oldest pending entry of the group, if any.
    pub(crate) async fn oldest_pending_idle(&self) -> GroupResult<Option<Duration>> {
        let args: Vec<Value> =
            vec![self.key.as_str().into(), self.group.as_str().into(), "-".into(), "+".into(), Value::Integer(1)];
        let reply: Value =
            self.client().custom(CustomCommand::new_static("XPENDING", ClusterHash::FirstKey, false), args).await?;
        let Value::Array(items) = reply else { return Ok(None) };
        Ok(items.into_iter().filter_map(parse_pending).next().map(|p| p.idle))
    }

    /// Consumers other than this one, idle longer than `older_than` with nothing pending.
    pub(crate) async fn idle_consumers(&self, older_than: Duration) -> GroupResult<Vec<String>> {
        let reply: Value = self
            .client()
            .custom(
                CustomCommand::new_static("XINFO", ClusterHash::Offset(1), false),
                vec!["CONSUMERS", self.key.as_str(), self.group.as_str()],
            )
            .await?;
        let Value::Array(consumers) = reply else { return Ok(Vec::new()) };
        Ok(consumers
            .into_iter()
            .filter_map(|c| {
                let fields = pairs(c);
                let get = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
                let name = text(get("name")?)?;
                let pending = get("pending").and_then(|v| v.as_u64()).unwrap_or(1);
                let idle = get("idle").and_then(|v| v.as_u64()).unwrap_or(0);
                (name != self.consumer && pending == 0 && Duration::from_millis(idle) > older_than).then_some(name)
            })
            .collect())
    }

    pub(crate) async fn delete_consumer(&self, name: &str) -> GroupResult<()> {
        let _: Value = self.client().xgroup_delconsumer(self.key.as_str(), self.group.as_str(), name).await?;
        Ok(())
    }
}

fn parse_pending(item: Value) -> Option<Pending> {
    let Value::Array(parts) = item else { return None };
    let mut parts = parts.into_iter();
    let id = text(parts.next()?)?;
    let consumer = text(parts.next()?)?;
    let idle = parts.next()?.as_u64()?;
    let deliveries = parts.next()?.as_u64()?;
    Some(Pending { id, consumer, idle: Duration::from_millis(idle), deliveries })
}

/// `[k1, v1, k2, v2, …]` (RESP2) or a map (RESP3) as key/value pairs.
fn pairs(value: Value) -> Vec<(String, Value)> {
    match value {
        Value::Array(flat) => {
            let mut out = Vec::new();
            let mut items = flat.into_iter();
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                if let Some(k) = text(k) {
                    out.push((k, v));
                }
            }
            out
        }
        Value::Map(map) => map.inner().into_iter().filter_map(|(k, v)| Some((k.as_str()?.to_string(), v))).collect(),
        _ => Vec::new(),
    }
}

impl super::client::RedisStream {
    /// Appends poison records to a dead-letter stream, one entry each; true only if every
    /// append succeeded. Through the shared client: the dead-letter stream may live on another
    /// cluster node than the stream the records came from.
    pub(crate) async fn append_dead_letters(&self, key: &str, records: &[crate::event::PoisonRecord]) -> bool {
        let pipeline = self.client().pipeline();
        for p in records {
            let fields: Vec<(&str, String)> = vec![
                ("reason", p.reason.as_str().to_owned()),
                ("detail", p.detail.clone()),
                ("source_stream", p.stream.clone()),
                ("source_id", p.entry_id.clone()),
                ("event_id", p.event_id.clone().unwrap_or_default()),
                ("fields", p.fields.to_string()),
            ];
            let _: Result<(), _> = pipeline.xadd(key, false, None::<()>, "*", fields).await;
        }
        let results: Vec<Result<String, Error>> = pipeline.try_all().await;
        results.len() == records.len() && results.iter().all(Result::is_ok)
    }

    /// Appends one entry of raw fields to `key` again (`handoff poison retry`): its new id, or
    /// what Redis said.
    pub(crate) async fn reappend(&self, key: &str, fields: Vec<(Vec<u8>, Vec<u8>)>) -> Result<String, Error> {
        let fields: Vec<(fred::types::Key, fred::types::Value)> = fields
            .into_iter()
            .map(|(k, v)| (fred::types::Key::from(bytes::Bytes::from(k)), fred::types::Value::Bytes(v.into())))
            .collect();
        self.client().xadd::<String, _, _, _, _>(key, false, None::<()>, "*", fields).await
    }
}
