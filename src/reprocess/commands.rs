//! `handoff inbox reprocess`: a worker's PROCESSED (or DEAD) inbox rows back to PENDING, chosen
//! by a selection, so its handlers run them again (after a handler bug is fixed). Handlers must
//! be idempotent for this: they run on events they have already applied.

use serde::Serialize;

use super::database::{self as reprocess, Reprocess, Settled};
use crate::config::Config;
use crate::error::error_chain;
use crate::store::Database;
use crate::store::selection::Selection;

/// Which time a reprocess's `--since` / `--until` look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum InboxTime {
    /// When the bridge took the event over.
    Received,
    /// When the handler applied it (DEAD rows have none).
    Processed,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ReprocessError {
    #[error("no worker named `{0}` in the config (configured: {1})")]
    Unknown(String, String),
    #[error("choose the rows: a time range, an event type, an aggregate, an event or an id range (or --all)")]
    NoFilter,
    #[error("worker `{worker}`: {}", error_chain(.error))]
    Store { worker: String, error: crate::store::StoreError },
}

/// What was asked and what was done.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub worker: String,
    pub dry_run: bool,
    pub from: Vec<Settled>,
    pub time: InboxTime,
    pub selection: Selection,
    pub limit: u32,
    /// Rows matching the selection now.
    pub matching: i64,
    /// Rows moved back to PENDING (with `dry_run`: that would be).
    pub reprocessed: i64,
}

/// The request, as the CLI and the admin API give it.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub worker: String,
    pub from: Vec<Settled>,
    pub time: InboxTime,
    pub selection: Selection,
    /// Every row of the states in `from` (no filter): must be said.
    pub all: bool,
    pub limit: u32,
    pub dry_run: bool,
}

pub(crate) async fn run(config: &Config, db: &Database, request: Request) -> Result<Report, ReprocessError> {
    let Some(worker) = config.workers.iter().find(|w| w.name == request.worker) else {
        let names: Vec<&str> = config.workers.iter().map(|w| w.name.as_str()).collect();
        let names = if names.is_empty() { "none".to_owned() } else { names.join(", ") };
        return Err(ReprocessError::Unknown(request.worker, names));
    };
    let s = &request.selection;
    let filtered = s.since.is_some()
        || s.until.is_some()
        || s.event_type.is_some()
        || s.aggregate_type.is_some()
        || s.aggregate_id.is_some()
        || s.event_id.is_some()
        || s.from_id.is_some()
        || s.to_id.is_some();
    if !filtered && !request.all {
        return Err(ReprocessError::NoFilter);
    }
    let time_column = match request.time {
        InboxTime::Received => "received_at",
        InboxTime::Processed => "processed_at",
    };
    let from = if request.from.is_empty() { vec![Settled::Processed] } else { request.from.clone() };
    let store_request = Reprocess {
        table: &worker.table,
        consumer: &worker.consumer,
        from: &from,
        time_column,
        selection: &request.selection,
        limit: request.limit,
    };
    let done = reprocess::reprocess(db, &store_request, request.dry_run)
        .await
        .map_err(|error| ReprocessError::Store { worker: worker.name.clone(), error })?;
    Ok(Report {
        worker: worker.name.clone(),
        dry_run: request.dry_run,
        from,
        time: request.time,
        selection: request.selection,
        limit: request.limit,
        matching: done.matching,
        reprocessed: done.reprocessed,
    })
}
