//! Appends through the append script (dedupe and ordered runs), pipelined: one EVALSHA per run
//! of entries (or per entry when they are independent).

use std::ops::Range;

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand, Value};

use super::client::RedisStream;
use super::replies::{min_id, reply_outcome};
use super::{durable, shards};
use crate::broker::script::{self, Untaggable, marker_key};
use crate::broker::seam::{AppendOptions, AppendOutcome, Entry, Trim};

impl RedisStream {
    pub(super) async fn append_scripted(&self, entries: &[Entry], options: &AppendOptions) -> Vec<AppendOutcome> {
        let sha = match self.script().await {
            Ok(sha) => sha,
            Err(e) => {
                return vec![AppendOutcome::Unavailable(format!("loading the append script: {e}")); entries.len()];
            }
        };
        let mut outcomes: Vec<Option<AppendOutcome>> = vec![None; entries.len()];
        let mut calls = Vec::new();
        for range in runs(entries) {
            match call_args(&entries[range.clone()], options) {
                Ok((keys, args)) => {
                    let mut call: Vec<Value> = vec![sha.as_str().into(), (keys.len() as i64).into()];
                    call.extend(keys.into_iter().map(Value::from));
                    call.extend(args);
                    // EVALSHA sha numkeys key…: routed by the first key (the stream).
                    let command = CustomCommand::new_static("EVALSHA", ClusterHash::Offset(2), false);
                    let slot = shards::slot(&entries[range.start].stream);
                    calls.push(durable::Call { range, command, args: call, slot });
                }
                Err(reason) => range.for_each(|i| outcomes[i] = Some(AppendOutcome::Rejected(reason.to_string()))),
            }
        }
        let ranges: Vec<Range<usize>> = calls.iter().map(|c| c.range.clone()).collect();
        let sent = self.send(calls, options.durability).await;
        let mut forgotten = false;
        for (range, sent) in ranges.into_iter().zip(sent) {
            let results = match sent.reply {
                Ok(value) => parse_reply(value, range.len()),
                Err(e) if e.details().starts_with("NOSCRIPT") => {
                    forgotten = true;
                    vec![AppendOutcome::Unavailable("redis forgot the append script; reloading".into()); range.len()]
                }
                Err(e) => vec![super::replies::outcome(Err(e)); range.len()],
            };
            for (i, outcome) in range.zip(results) {
                outcomes[i] = Some(durable::gated(outcome, &sent.gate));
            }
        }
        if forgotten {
            *self.script_sha.lock().await = None;
        }
        outcomes.into_iter().map(|o| o.unwrap_or(AppendOutcome::Unavailable("not sent".into()))).collect()
    }

    /// The script's SHA, loading it (on every primary, in cluster mode) the first time.
    async fn script(&self) -> Result<String, Error> {
        let mut sha = self.script_sha.lock().await;
        if let Some(sha) = sha.as_ref() {
            return Ok(sha.clone());
        }
        let loaded: String = if let Some(shards) = &self.shards {
            // On every primary that answers, through its own client: one that is down gets it
            // when it answers NOSCRIPT later.
            let options = fred::types::config::Options { fail_fast: true, ..Default::default() };
            let loads = shards.primaries().await.into_iter().map(|client| {
                let options = options.clone();
                async move { client.with_options(&options).script_load::<String, _>(script::SOURCE).await }
            });
            let results = futures_util::future::join_all(loads).await;
            let first_error = results.iter().find_map(|r| r.as_ref().err().cloned());
            match results.into_iter().find_map(Result::ok) {
                Some(sha) => sha,
                None => {
                    return Err(first_error.unwrap_or_else(|| Error::new(ErrorKind::IO, "no cluster node known yet")));
                }
            }
        } else if self.client.is_clustered() {
            self.client.script_load_cluster(script::SOURCE).await?
        } else {
            self.client.script_load(script::SOURCE).await?
        };
        *sha = Some(loaded.clone());
        Ok(loaded)
    }
}

/// Index ranges of the calls: a run of consecutive entries sharing `run` (and stream), or one
/// independent entry.
fn runs(entries: &[Entry]) -> Vec<Range<usize>> {
    let mut calls = Vec::new();
    let mut start = 0;
    for i in 1..=entries.len() {
        let boundary = i == entries.len()
            || entries[i].run.is_none()
            || entries[i].run != entries[start].run
            || entries[i].stream != entries[start].stream;
        if boundary {
            calls.push(start..i);
            start = i;
        }
    }
    calls
}

fn call_args(run: &[Entry], options: &AppendOptions) -> Result<(Vec<String>, Vec<Value>), Untaggable> {
    let stream = &run[0].stream;
    let mut keys = vec![stream.clone()];
    if let Some(dedupe) = &options.dedupe {
        for entry in run {
            keys.push(marker_key(&dedupe.key_prefix, stream, &entry.event_id)?);
        }
    }
    let window = options.dedupe.as_ref().map_or(0, |d| d.window.as_millis() as i64);
    let (kind, value) = match options.trim {
        None => (String::new(), String::new()),
        Some(Trim::MaxLen(n)) => ("MAXLEN".to_owned(), n.to_string()),
        Some(Trim::MinAge(age)) => ("MINID".to_owned(), min_id(age)),
    };
    let stop_on_failure = if run[0].run.is_some() { "1" } else { "0" };
    let mut args: Vec<Value> =
        vec![window.into(), stop_on_failure.into(), kind.into(), value.into(), (run.len() as i64).into()];
    for entry in run {
        args.push(((entry.fields.len() * 2) as i64).into());
        for (name, value) in &entry.fields {
            args.push(name.clone().into());
            args.push(value.clone().into());
        }
    }
    Ok((keys, args))
}

/// `[status, value, status, value, …]` → one outcome per entry.
fn parse_reply(value: Value, expected: usize) -> Vec<AppendOutcome> {
    let Value::Array(items) = value else {
        return vec![AppendOutcome::Unavailable("unexpected reply from the append script".into()); expected];
    };
    let text = |v: &Value| v.as_string().unwrap_or_default();
    let mut outcomes: Vec<AppendOutcome> = items
        .chunks(2)
        .map(|pair| match (text(&pair[0]).as_str(), pair.get(1).map(text).unwrap_or_default()) {
            ("ok", id) => AppendOutcome::Appended(id),
            ("dup", id) => AppendOutcome::Duplicate(id),
            ("skip", _) => AppendOutcome::Skipped,
            (_, error) => reply_outcome(&error),
        })
        .collect();
    outcomes.resize(expected, AppendOutcome::Unavailable("short reply from the append script".into()));
    outcomes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(stream: &str, run: Option<u32>) -> Entry {
        Entry { stream: stream.into(), fields: vec![], event_id: "e".into(), run, trace: None }
    }

    #[test]
    fn runs_group_consecutive_entries_of_one_key_and_stream() {
        let entries =
            [entry("a", Some(1)), entry("a", Some(1)), entry("a", None), entry("a", Some(2)), entry("b", Some(2))];
        assert_eq!(runs(&entries), vec![0..2, 2..3, 3..4, 4..5]);
        assert!(runs(&[]).is_empty());
    }
}
