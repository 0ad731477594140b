//! What broker-loss detection asks Redis: which server processes it writes to (a new process id
//! is a restart or a failover), a stream's own counters (`XINFO STREAM`), and whether given
//! entries still exist.

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand, Value};

use super::client::RedisStream;
use super::sweep::Sweep;
use super::trim::pairs;
use crate::broker::read::text;
use crate::broker::seam::EntryId;
use crate::broker::seam::{ServerId, StreamState, Unavailable};

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
            last_entry: get("last-generated-id").and_then(text).and_then(|id| EntryId::parse(&id)),
            incarnation: None,
            partition_ends: Vec::new(),
        })
    }

    /// Reads the stream in ranges from the lowest id not yet answered ([`Sweep`]); one
    /// answer per id, in the order given. An id that is not a stream id is an error, as the
    /// server would say.
    pub(super) async fn exist(&self, stream: &str, entry_ids: &[String]) -> Result<Vec<bool>, Unavailable> {
        let parsed: Vec<EntryId> = entry_ids
            .iter()
            .map(|id| EntryId::parse(id).ok_or_else(|| Unavailable(format!("`{id}` is not a stream entry id"))))
            .collect::<Result<_, _>>()?;
        let xrange = || CustomCommand::new_static("XRANGE", ClusterHash::FirstKey, false);
        let mut sweep = Sweep::new(parsed.clone());
        while let Some(read) = sweep.read() {
            let (start, count) = (read.start.to_string(), read.count.to_string());
            let reply: Value = self
                .client
                .custom(xrange(), vec![stream, start.as_str(), "+", "COUNT", count.as_str()])
                .await
                .map_err(unavailable)?;
            let page: Vec<EntryId> = match reply {
                Value::Array(entries) => entries.into_iter().filter_map(entry_id).collect(),
                Value::Null => Vec::new(),
                other => return Err(Unavailable(format!("XRANGE returned {other:?}"))),
            };
            sweep.take(read, &page);
        }
        Ok(parsed.into_iter().map(|id| sweep.holds(id)).collect())
    }
}

/// The id of one `XRANGE` entry (`[id, [field, value, …]]`).
fn entry_id(entry: Value) -> Option<EntryId> {
    match entry {
        Value::Array(parts) => parts.into_iter().next().and_then(text).and_then(|id| EntryId::parse(&id)),
        _ => None,
    }
}

fn run_id(info: &str) -> String {
    info.lines().find_map(|l| l.strip_prefix("run_id:")).map(|s| s.trim().to_owned()).unwrap_or_default()
}
