//! The texts of the worker's statements: its `[worker.sql]` overrides, the reference schema's
//! otherwise.

use super::contract::WorkerStatement;
use crate::worker::config::WorkerOverrides;

/// The texts of the statements a worker runs: each `[worker.sql]` override, else
/// `reference(statement)`; `purge` only with retention.
pub(crate) fn statement_texts(
    overrides: &WorkerOverrides,
    retention: bool,
    reference: impl Fn(WorkerStatement) -> String,
) -> Vec<(WorkerStatement, String)> {
    WorkerStatement::ALL
        .iter()
        .filter(|s| **s != WorkerStatement::Purge || retention)
        .map(|s| (*s, overrides.get(*s).map(str::to_owned).unwrap_or_else(|| reference(*s))))
        .collect()
}
