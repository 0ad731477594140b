//! What broker-loss detection asks Redis: which server processes it writes to (a new process id
//! is a restart or a failover), a stream's own counters (`XINFO STREAM`), and whether given
//! entries still exist.

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand, Value};

use super::RedisStream;
use super::trim::{EntryId, pairs};
use crate::stream::read::text;
use crate::stream::{ServerId, StreamState, Unavailable};

/// Entries looked up per round trip.
const LOOKUP_CHUNK: usize = 1000;

fn unavailable(e: Error) -> Unavailable {
    Unavailable(e.details().to_owned())
}

impl RedisStream {
    pub(super) async fn server_ids(&self) -> Result<Vec<ServerId>, Unavailable> {
        let info = || CustomCommand::new_static("INFO", ClusterHash::Random, false);
        let mut ids = Vec::new();
        if self.client.is_clustered() {
            let primaries = self.client.cached_cluster_state().map(|s| s.unique_primary_nodes()).unwrap_or_default();
            for server in primaries {
                let reply: String = self
                    .client
                    .with_cluster_node(server.clone())
                    .custom(info(), vec!["server"])
                    .await
                    .map_err(unavailable)?;
                ids.push(ServerId { server: server.to_string(), run_id: run_id(&reply) });
            }
        } else {
            let reply: String = self.client.custom(info(), vec!["server"]).await.map_err(unavailable)?;
            ids.push(ServerId { server: "primary".into(), run_id: run_id(&reply) });
        }
        ids.sort();
        Ok(ids)
    }

    pub(super) async fn state_of(&self, stream: &str) -> Result<StreamState, Unavailable> {
        let xinfo = CustomCommand::new_static("XINFO", ClusterHash::Offset(1), false);
        let reply: Value = match self.client.custom(xinfo, vec!["STREAM", stream]).await {
            Ok(reply) => reply,
            Err(e) if e.details().contains("no such key") => return Ok(StreamState::default()),
            Err(e) => return Err(unavailable(e)),
        };
        let fields = pairs(reply);
        let get = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let first_entry = match get("first-entry") {
            Some(Value::Array(entry)) => entry.first().cloned().and_then(text).and_then(|id| EntryId::parse(&id)),
            _ => None,
        };
        let max_deleted = get("max-deleted-entry-id").and_then(text).and_then(|id| EntryId::parse(&id));
        Ok(StreamState {
            exists: true,
            length: get("length").and_then(|v| v.as_u64()),
            entries_added: get("entries-added").and_then(|v| v.as_u64()),
            max_deleted,
            first_entry,
        })
    }

    /// `XRANGE stream id id` per entry, pipelined in chunks (every command of one stream goes to
    /// the same node, also in a cluster).
    pub(super) async fn exist(&self, stream: &str, entry_ids: &[String]) -> Result<Vec<bool>, Unavailable> {
        let xrange = || CustomCommand::new_static("XRANGE", ClusterHash::FirstKey, false);
        let mut found = Vec::with_capacity(entry_ids.len());
        for chunk in entry_ids.chunks(LOOKUP_CHUNK) {
            let replies: Vec<Result<Value, Error>> = if self.client.is_clustered() {
                let calls = chunk.iter().map(|id| {
                    self.client.custom::<Value, _>(xrange(), vec![stream, id.as_str(), id.as_str(), "COUNT", "1"])
                });
                futures_util::future::join_all(calls).await
            } else {
                let pipeline = self.client.pipeline();
                for id in chunk {
                    let _: Result<(), _> =
                        pipeline.custom(xrange(), vec![stream, id.as_str(), id.as_str(), "COUNT", "1"]).await;
                }
                pipeline.try_all().await
            };
            if replies.len() != chunk.len() {
                return Err(Unavailable("no reply from redis".into()));
            }
            for reply in replies {
                match reply.map_err(unavailable)? {
                    Value::Array(items) => found.push(!items.is_empty()),
                    _ => found.push(false),
                }
            }
        }
        Ok(found)
    }
}

fn run_id(info: &str) -> String {
    info.lines().find_map(|l| l.strip_prefix("run_id:")).map(|s| s.trim().to_owned()).unwrap_or_default()
}
