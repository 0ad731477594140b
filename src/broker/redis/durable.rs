//! Appends through the append script, one pipeline per node (in parallel, so a node that is down
//! holds up only its own streams), and the durability gate in that same pipeline: after the
//! appends, one `WAIT` (replicas) or `WAITAOF` (fsync) per node, on the connection that carried
//! them. WAIT only vouches for the writes of its own connection, so the gated pipeline is never
//! resent on another connection (a cut fails it; its rows are released): a WAIT on a fresh
//! connection to a new primary would confirm appends that went to the old one. Plain appends
//! take the same gate over the relay's own links ([`super::plain`]).

use std::ops::Range;

use fred::clients::Pipeline;
use fred::prelude::*;
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, CustomCommand, Value};

use super::client::RedisStream;
use super::replies::ErrorReply;
use crate::broker::seam::{AppendOutcome, Durability};

/// One script call of an append: the entries it covers and the slot its key hashes to.
pub(super) struct Call {
    pub range: Range<usize>,
    pub command: CustomCommand,
    pub args: Vec<Value>,
    pub slot: u16,
}

/// What came back for one call: its reply, and whether its node met the gate (`Err` says how
/// it did not; always `Ok` without a gate).
pub(super) struct Sent {
    pub reply: Result<Value, Error>,
    pub gate: Result<(), GateMiss>,
}

impl RedisStream {
    /// Sends script `calls`, one pipeline per node (in parallel), each followed by that node's gate.
    /// A node that cannot be reached fails its own calls only.
    pub(super) async fn send(&self, calls: Vec<Call>, gate: Option<Durability>) -> Vec<Sent> {
        if calls.is_empty() {
            return Vec::new();
        }
        let mut targets: Vec<(Client, Vec<usize>)> = Vec::new();
        let mut unrouted = Vec::new();
        match &self.shards {
            None => targets.push((self.client.clone(), (0..calls.len()).collect())),
            Some(shards) => {
                let mut by_node: Vec<(Server, Client, Vec<usize>)> = Vec::new();
                for (i, call) in calls.iter().enumerate() {
                    match shards.for_slot(call.slot).await {
                        Some((server, client)) => match by_node.iter_mut().find(|(s, _, _)| *s == server) {
                            Some((_, _, indices)) => indices.push(i),
                            None => by_node.push((server, client, vec![i])),
                        },
                        None => unrouted.push(i),
                    }
                }
                targets = by_node.into_iter().map(|(_, client, indices)| (client, indices)).collect();
            }
        }
        let fail_fast = self.shards.is_some();
        // Each call moves into its node's pipeline: its arguments are queued, not copied.
        let mut calls: Vec<Option<Call>> = calls.into_iter().map(Some).collect();
        let sends: Vec<_> = targets
            .iter()
            .map(|(client, indices)| {
                let calls: Vec<Call> = indices.iter().filter_map(|&i| calls[i].take()).collect();
                self.send_to(client, calls, gate, fail_fast)
            })
            .collect();
        let results = futures_util::future::join_all(sends).await;
        let mut sent: Vec<Option<Sent>> = (0..calls.len()).map(|_| None).collect();
        let mut failed = !unrouted.is_empty();
        for ((_, indices), result) in targets.iter().zip(results) {
            match result {
                Ok(replies) => {
                    failed |= replies.iter().any(|r| r.reply.as_ref().is_err_and(super::replies::is_outage));
                    for (&i, reply) in indices.iter().zip(replies) {
                        sent[i] = Some(reply);
                    }
                }
                Err(error) => {
                    failed = true;
                    for &i in indices {
                        sent[i] = Some(Sent { reply: Err(error.clone()), gate: Ok(()) });
                    }
                }
            }
        }
        if failed && let Some(shards) = &self.shards {
            // A primary may have moved: learn the new map in the background, for the next batch.
            let (shards, cluster) = (shards.clone(), self.client.clone());
            tokio::spawn(async move { shards.refresh(&cluster).await });
        }
        let no_node =
            || Sent { reply: Err(Error::new(ErrorKind::IO, "no cluster node serves this slot yet")), gate: Ok(()) };
        sent.into_iter().map(|s| s.unwrap_or_else(no_node)).collect()
    }

    /// One node's calls as one pipeline, then its gate; `Err` when the pipeline failed as a
    /// whole (no reply can be trusted to be about its own command).
    async fn send_to(
        &self,
        client: &Client,
        calls: Vec<Call>,
        gate: Option<Durability>,
        fail_fast: bool,
    ) -> Result<Vec<Sent>, Error> {
        let mut options = Options { fail_fast, ..Options::default() };
        if fail_fast {
            // A shard's own connection: an append cut off by its node's death fails now rather
            // than waiting for a reconnection that only the promotion will bring.
            options.max_attempts = Some(1);
        }
        if let Some(gate) = gate {
            options.max_attempts = Some(1);
            options.timeout = Some(self.command_timeout + gate.timeout * 2);
        }
        let pipeline = Pipeline::from(client.with_options(&options));
        let (count, first_slot) = (calls.len(), calls[0].slot);
        for call in calls {
            // Queuing only buffers the command locally; errors arrive with the results.
            let _: Result<(), _> = pipeline.custom(call.command, call.args).await;
        }
        if let Some(gate) = gate {
            let (name, args) = gate_args(gate);
            let command = CustomCommand::new_static(name, ClusterHash::Custom(first_slot), true);
            let _: Result<(), _> = pipeline.custom(command, args).await;
        }
        let mut results = pipeline.try_all::<Value>().await;
        if results.len() != count + usize::from(gate.is_some()) {
            let error = results.into_iter().find_map(Result::err);
            return Err(error.unwrap_or_else(|| Error::new(ErrorKind::IO, "no reply from redis")));
        }
        let verdict = match gate {
            Some(g) => gate_met(g, results.pop().expect("the gate's reply")),
            None => Ok(()),
        };
        Ok(results.into_iter().map(|reply| Sent { reply, gate: verdict.clone() }).collect())
    }
}

/// The gate's command: `WAIT replicas timeout` or `WAITAOF 1 replicas timeout`.
pub(super) fn gate_args(gate: Durability) -> (&'static str, Vec<String>) {
    let timeout_ms = gate.timeout.as_millis().to_string();
    if gate.aof {
        ("WAITAOF", vec!["1".into(), gate.replicas.to_string(), timeout_ms])
    } else {
        ("WAIT", vec![gate.replicas.to_string(), timeout_ms])
    }
}

/// A node whose appends were not confirmed durable in time: they are appended again later.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum GateMiss {
    #[error("{command} failed: {detail}")]
    Failed { command: &'static str, detail: String },
    #[error("durability gate not met within {timeout:?}: {command} confirmed {fsync}{replicas} of {wanted} replica(s)")]
    NotMet { command: &'static str, timeout: std::time::Duration, fsync: String, replicas: u64, wanted: u32 },
}

/// Whether a WAIT / WAITAOF reply (through the Redis client) meets the gate.
fn gate_met(gate: Durability, reply: Result<Value, Error>) -> Result<(), GateMiss> {
    let counts = reply.map_err(|e| ErrorReply(e.details().to_owned())).map(|reply| match &reply {
        Value::Array(counts) => {
            (counts.first().and_then(|v| v.as_u64()).unwrap_or(0), counts.get(1).and_then(|v| v.as_u64()).unwrap_or(0))
        }
        other => (1, other.as_u64().unwrap_or(0)),
    });
    gate_verdict(gate, counts)
}

/// Whether the gate's counts — (local fsyncs, replicas), or the error its command got — meet
/// it; `Err` says what was confirmed.
pub(super) fn gate_verdict(gate: Durability, counts: Result<(u64, u64), ErrorReply>) -> Result<(), GateMiss> {
    let command = if gate.aof { "WAITAOF" } else { "WAIT" };
    let (local, replicas) = counts.map_err(|ErrorReply(detail)| GateMiss::Failed { command, detail })?;
    if (gate.aof && local < 1) || replicas < u64::from(gate.replicas) {
        let fsync = if gate.aof { format!("local fsync {local}, ") } else { String::new() };
        return Err(GateMiss::NotMet { command, timeout: gate.timeout, fsync, replicas, wanted: gate.replicas });
    }
    Ok(())
}

/// An appended outcome whose node missed the gate becomes `Unconfirmed`.
pub(super) fn gated(outcome: AppendOutcome, gate: &Result<(), GateMiss>) -> AppendOutcome {
    match (outcome, gate) {
        (AppendOutcome::Appended(_) | AppendOutcome::Duplicate(_), Err(why)) => {
            AppendOutcome::Unconfirmed(why.to_string())
        }
        (outcome, _) => outcome,
    }
}
