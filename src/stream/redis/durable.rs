//! One batch's appends as one pipeline (each command routed to its stream's node), and the
//! durability gate in that same pipeline: after the appends, one `WAIT` (replicas) or `WAITAOF`
//! (fsync) per node, on the connection that carried them. WAIT only vouches for the writes of
//! its own connection, so the gated pipeline is never resent on another connection (a cut
//! fails it; its rows are released): a WAIT on a fresh connection to a new primary would
//! confirm appends that went to the old one.

use std::ops::Range;

use fred::clients::Pipeline;
use fred::prelude::*;
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, CustomCommand, Value};

use super::RedisStream;
use crate::stream::{AppendOutcome, Durability};

/// One command of an append: the entries it covers and the slot its key hashes to.
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
    pub gate: Result<(), String>,
}

impl RedisStream {
    /// Sends `calls` in one pipeline, then the gate per node; `None` when the pipeline failed
    /// as a whole (no reply can be trusted to be about its own command).
    pub(super) async fn send(&self, calls: Vec<Call>, gate: Option<Durability>) -> Result<Vec<Sent>, String> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let mut options = Options::default();
        // Node of each call, and one gate per node (routed by one of its calls' slots).
        let mut gated: Vec<(Option<Server>, u16)> = Vec::new();
        if let Some(gate) = gate {
            options.max_attempts = Some(1);
            options.timeout = Some(self.command_timeout + gate.timeout * 2);
            for call in &calls {
                let node = self.node_of(call.slot);
                if !gated.iter().any(|(n, _)| *n == node) {
                    gated.push((node, call.slot));
                }
            }
        }
        let pipeline = Pipeline::from(self.client.with_options(&options));
        for call in &calls {
            // Queuing only buffers the command locally; errors arrive with the results.
            let _: Result<(), _> = pipeline.custom(call.command.clone(), call.args.clone()).await;
        }
        if let Some(gate) = gate {
            for (_, slot) in &gated {
                let (command, args) = gate_command(gate, *slot);
                let _: Result<(), _> = pipeline.custom(command, args).await;
            }
        }
        let mut results: Vec<Result<Value, Error>> = pipeline.try_all().await;
        if results.len() != calls.len() + gated.len() {
            let why = results.into_iter().find_map(Result::err).map(|e| e.details().to_owned());
            return Err(why.unwrap_or_else(|| "no reply from redis".into()));
        }
        let verdicts: Vec<(Option<Server>, Result<(), String>)> = gated
            .iter()
            .zip(results.split_off(calls.len()))
            .map(|((node, _), reply)| (node.clone(), gate.map_or(Ok(()), |g| gate_met(g, reply))))
            .collect();
        Ok(calls
            .iter()
            .zip(results)
            .map(|(call, reply)| {
                let gate = match verdicts.iter().find(|(node, _)| *node == self.node_of(call.slot)) {
                    Some((_, verdict)) => verdict.clone(),
                    None => Ok(()),
                };
                Sent { reply, gate }
            })
            .collect())
    }

    /// The node serving `slot` in a cluster; `None` for the one server otherwise.
    fn node_of(&self, slot: u16) -> Option<Server> {
        if !self.client.is_clustered() {
            return None;
        }
        self.client.cached_cluster_state().and_then(|state| state.get_server(slot).cloned())
    }
}

/// The slot a stream key hashes to (routing of its appends, and of its node's gate).
pub(super) fn slot(key: &str) -> u16 {
    fred::util::redis_keyslot(key.as_bytes())
}

fn gate_command(gate: Durability, slot: u16) -> (CustomCommand, Vec<Value>) {
    let timeout_ms = gate.timeout.as_millis() as i64;
    if gate.aof {
        let args = vec![1.into(), i64::from(gate.replicas).into(), timeout_ms.into()];
        (CustomCommand::new_static("WAITAOF", ClusterHash::Custom(slot), true), args)
    } else {
        let args = vec![i64::from(gate.replicas).into(), timeout_ms.into()];
        (CustomCommand::new_static("WAIT", ClusterHash::Custom(slot), true), args)
    }
}

/// Whether a WAIT / WAITAOF reply meets the gate; `Err` says what was confirmed.
fn gate_met(gate: Durability, reply: Result<Value, Error>) -> Result<(), String> {
    let name = if gate.aof { "WAITAOF" } else { "WAIT" };
    let reply = reply.map_err(|e| format!("{name} failed: {}", e.details()))?;
    let (local, replicas) = match &reply {
        Value::Array(counts) => {
            (counts.first().and_then(|v| v.as_u64()).unwrap_or(0), counts.get(1).and_then(|v| v.as_u64()).unwrap_or(0))
        }
        other => (1, other.as_u64().unwrap_or(0)),
    };
    if (gate.aof && local < 1) || replicas < u64::from(gate.replicas) {
        let fsync = if gate.aof { format!("local fsync {local}, ") } else { String::new() };
        return Err(format!(
            "durability gate not met within {:?}: {name} confirmed {fsync}{replicas} of {} replica(s)",
            gate.timeout, gate.replicas
        ));
    }
    Ok(())
}

/// An appended outcome whose node missed the gate becomes `Unconfirmed`.
pub(super) fn gated(outcome: AppendOutcome, gate: &Result<(), String>) -> AppendOutcome {
    match (outcome, gate) {
        (AppendOutcome::Appended(_) | AppendOutcome::Duplicate(_), Err(why)) => AppendOutcome::Unconfirmed(why.clone()),
        (outcome, _) => outcome,
    }
}
