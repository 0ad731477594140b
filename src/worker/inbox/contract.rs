//! The worker's SQL contract: the statements `[worker.sql]` may replace, the named parameters
//! each is offered, the columns the claim and the stats must return.

use crate::store::columns::MissingColumns;

/// `[worker.sql]`: the worker's statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkerStatement {
    Claim,
    Processed,
    Retry,
    Dead,
    Renew,
    Release,
    Stats,
    Purge,
}

impl WorkerStatement {
    pub const ALL: [Self; 8] =
        [Self::Claim, Self::Processed, Self::Retry, Self::Dead, Self::Renew, Self::Release, Self::Stats, Self::Purge];

    pub fn name(self) -> &'static str {
        match self {
            Self::Claim => "claim",
            Self::Processed => "processed",
            Self::Retry => "retry",
            Self::Dead => "dead",
            Self::Renew => "renew",
            Self::Release => "release",
            Self::Stats => "stats",
            Self::Purge => "purge",
        }
    }

    /// Parameters offered. Batch steps get arrays (`ids`, `tokens`, one element per row, in the
    /// same order); per-row steps get scalars.
    pub(crate) fn params(self) -> &'static [&'static str] {
        match self {
            // `ids`: in a MySQL claim script, the ids earlier statements returned (JSON array).
            Self::Claim => &["consumer", "claimant", "batch_size", "lease_ms", "ids"],
            Self::Processed | Self::Release => &["claimant", "ids", "tokens"],
            Self::Renew => &["claimant", "ids", "tokens", "lease_ms"],
            Self::Retry => &["claimant", "id", "token", "error", "delay_ms"],
            Self::Dead => &["claimant", "id", "token", "error"],
            Self::Stats => &["consumer"],
            Self::Purge => &["consumer", "age_ms", "batch_size"],
        }
    }

    /// Result columns the statement must return (`claim`: besides the optional ones).
    pub(crate) fn columns(self) -> &'static [&'static str] {
        match self {
            Self::Claim => CLAIM_COLUMNS,
            Self::Stats => STATS_COLUMNS,
            _ => &[],
        }
    }
}

/// Columns the worker's claim must return.
pub(crate) const CLAIM_COLUMNS: &[&str] =
    &["id", "token", "event_id", "event_type", "payload", "attempts", "expired_leases"];

/// Optional claim columns with a meaning of their own; any other column becomes a field
/// (`:fields.<column>` in handlers), as does every key of a JSON object column `fields`.
pub(crate) const OPTIONAL_CLAIM_COLUMNS: &[&str] =
    &["owner", "aggregate_type", "aggregate_id", "headers", "fields", "reclaimed"];

/// Columns the worker's stats statement must return (one row), sampled into its gauges.
pub(crate) const STATS_COLUMNS: &[&str] = &["dead", "pending", "oldest_lease_age_seconds", "oldest_retry_age_seconds"];

/// What a claim or stats result lacks of the columns `statement` must return, as the message
/// to report; `None` when nothing is missing.
pub(crate) fn missing_result_columns(statement: WorkerStatement, names: &[&str]) -> Option<MissingColumns> {
    MissingColumns::of(statement.columns(), names.iter().copied())
}
