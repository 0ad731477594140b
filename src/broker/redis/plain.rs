//! Plain appends (no dedupe, no ordered runs): a batch's `XADD`s for one node encoded into one
//! buffer, followed by that node's durability gate, and sent over one of the relay's own links
//! ([`super::link`]). Nodes are written to in parallel, so a node that is down holds up only
//! its own streams; in a cluster a node whose client is not connected fails at once.

use bytes::BytesMut;
use fred::prelude::*;
use fred::types::config::{Server, ServerConfig};

use super::client::RedisStream;
use super::link::{LinkError, Node};
use super::replies::{ErrorReply, reply_outcome};
use super::resp::{self, Reply};
use super::{durable, shards};
use crate::broker::seam::{AppendOptions, AppendOutcome, Durability, Entry, Trim};

impl RedisStream {
    pub(super) async fn append_plain(&self, entries: &[Entry], options: &AppendOptions) -> Vec<AppendOutcome> {
        let mut outcomes: Vec<Option<AppendOutcome>> = vec![None; entries.len()];
        let mut failed = false;
        // Entries by node, in batch order; each stream key's node looked up once.
        let mut by_node: Vec<(Node, Vec<usize>)> = Vec::new();
        let mut keys: Vec<(&str, Result<Node, LinkError>)> = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let node = match keys.iter().find(|(key, _)| *key == entry.stream) {
                Some((_, node)) => node.clone(),
                None => {
                    let node = self.node_for(&entry.stream).await;
                    keys.push((&entry.stream, node.clone()));
                    node
                }
            };
            match node {
                Ok(node) => match by_node.iter_mut().find(|(n, _)| *n == node) {
                    Some((_, indices)) => indices.push(i),
                    None => by_node.push((node, vec![i])),
                },
                Err(why) => {
                    failed = true;
                    outcomes[i] = Some(AppendOutcome::Unavailable(why.to_string()));
                }
            }
        }
        let cap = cap(options.trim);
        let cap = cap.as_ref().map(|(kind, limit)| (*kind, limit.as_bytes()));
        let sends =
            by_node.iter().map(|(node, indices)| self.append_on(node, entries, indices, cap, options.durability));
        let results = futures_util::future::join_all(sends).await;
        for ((node, indices), result) in by_node.iter().zip(results) {
            match result {
                Ok(node_outcomes) => {
                    for (&i, outcome) in indices.iter().zip(node_outcomes) {
                        failed |= matches!(outcome, AppendOutcome::Unavailable(_));
                        outcomes[i] = Some(outcome);
                    }
                }
                Err(why) => {
                    failed = true;
                    self.links.forget(node);
                    indices.iter().for_each(|&i| outcomes[i] = Some(AppendOutcome::Unavailable(why.to_string())));
                }
            }
        }
        if failed && let Some(shards) = &self.shards {
            // A primary may have moved: learn the new map in the background, for the next batch.
            let (shards, cluster) = (shards.clone(), self.client.clone());
            tokio::spawn(async move { shards.refresh(&cluster).await });
        }
        outcomes.into_iter().map(|o| o.unwrap_or(AppendOutcome::Unavailable("not sent".into()))).collect()
    }

    /// One node's appends and gate in one exchange; `Err` when it failed as a whole.
    async fn append_on(
        &self,
        node: &Node,
        entries: &[Entry],
        indices: &[usize],
        cap: Option<(&[u8], &[u8])>,
        gate: Option<Durability>,
    ) -> Result<Vec<AppendOutcome>, LinkError> {
        let size: usize = indices.iter().map(|&i| encoded_size(&entries[i])).sum();
        let mut out = BytesMut::with_capacity(size + 64);
        for &i in indices {
            resp::xadd(&mut out, entries[i].stream.as_bytes(), cap, &entries[i].fields);
        }
        let mut timeout = self.command_timeout;
        if let Some(gate) = gate {
            let (name, args) = durable::gate_args(gate);
            let mut command: Vec<&[u8]> = vec![name.as_bytes()];
            command.extend(args.iter().map(|a| a.as_bytes()));
            resp::command(&mut out, &command);
            timeout += gate.timeout * 2;
        }
        let count = indices.len() + usize::from(gate.is_some());
        let mut replies = self.links.exchange(node, &out, count, timeout).await?;
        let verdict = match gate {
            Some(gate) => durable::gate_verdict(gate, counts(replies.pop().expect("the gate's reply"))),
            None => Ok(()),
        };
        Ok(replies.into_iter().map(|reply| durable::gated(outcome(reply), &verdict)).collect())
    }

    /// The node serving `stream`: the one primary (standalone: the URL's; sentinel: the one
    /// the client is connected to), or in a cluster the primary of the key's slot.
    async fn node_for(&self, stream: &str) -> Result<Node, LinkError> {
        if let Some(shards) = &self.shards {
            let (server, client) = shards.for_slot(shards::slot(stream)).await.ok_or(LinkError::NoNode)?;
            if !client.is_connected() {
                return Err(LinkError::NodeDown(server.to_string()));
            }
            return Ok(node(&server, shards.tls_name(&server)));
        }
        match &self.client.client_config().server {
            ServerConfig::Centralized { server } => Ok(node(server, None)),
            _ => match self.client.active_connections().into_iter().next() {
                Some(server) => Ok(node(&server, None)),
                None => Err(LinkError::NoPrimary),
            },
        }
    }
}

fn node(server: &Server, tls_name: Option<String>) -> Node {
    let host = server.host.to_string();
    let tls_name = tls_name.or_else(|| server.tls_server_name.as_ref().map(|n| n.to_string())).unwrap_or(host.clone());
    Node { host, port: server.port, tls_name }
}

/// `MAXLEN ~ n`, `MINID ~ <id>` or nothing.
fn cap(trim: Option<Trim>) -> Option<(&'static [u8], String)> {
    match trim? {
        Trim::MaxLen(n) => Some((b"MAXLEN", n.to_string())),
        Trim::MinAge(age) => Some((b"MINID", super::replies::min_id(age))),
    }
}

/// About the bytes an entry's `XADD` takes on the wire.
fn encoded_size(entry: &Entry) -> usize {
    let fields: usize = entry.fields.iter().map(|(n, v)| n.len() + v.len() + 16).sum();
    entry.stream.len() + fields + 64
}

/// An `XADD` reply: the new entry's id, or the server's error.
fn outcome(reply: Reply) -> AppendOutcome {
    match reply {
        Reply::Error(e) => reply_outcome(&e),
        other => match other.text() {
            Some(id) if !id.is_empty() => AppendOutcome::Appended(id),
            _ => AppendOutcome::Rejected(format!("XADD returned {other:?}, not an entry id")),
        },
    }
}

/// WAIT's count, or WAITAOF's pair, as (local fsyncs, replicas).
fn counts(reply: Reply) -> Result<(u64, u64), ErrorReply> {
    let count = |r: Option<&Reply>| r.and_then(Reply::int).unwrap_or(0).max(0) as u64;
    match reply {
        Reply::Error(e) => Err(ErrorReply(e)),
        Reply::Array(Some(items)) => Ok((count(items.first()), count(items.get(1)))),
        Reply::Int(n) => Ok((1, n.max(0) as u64)),
        other => Err(ErrorReply(format!("unexpected reply {other:?}"))),
    }
}
