//! The consumer side's statements — the bridge's takeover and the worker's state machine — with
//! the named parameters each is offered and the result columns it must return. Like the relay's
//! `[relay.sql]`, each has a default for the reference schema and can be replaced in
//! `[bridge.sql]` / `[worker.sql]` to adopt an inbox table of your own.

use serde::Deserialize;

use crate::sql::params::{self, Placeholder};

/// `[bridge.sql]`: the takeover's statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TakeoverStatement {
    Insert,
    Existing,
    Poison,
}

impl TakeoverStatement {
    pub const ALL: [Self; 3] = [Self::Insert, Self::Existing, Self::Poison];

    pub fn name(self) -> &'static str {
        match self {
            Self::Insert => "insert",
            Self::Existing => "existing",
            Self::Poison => "poison",
        }
    }

    /// Parameters offered, one event (or poison record) at a time. `insert` is also offered
    /// `:fields.<name>`, an entry field beyond the mapped ones (NULL when the entry lacks it).
    pub fn params(self) -> &'static [&'static str] {
        match self {
            Self::Insert => &[
                "consumer",
                "event_id",
                "event_type",
                "owner",
                "aggregate_type",
                "aggregate_id",
                "payload",
                "headers",
                "fields",
                "content_hash",
                "stream",
                "entry_id",
                "status",
            ],
            // The content and its hash too: an inbox without a hash column can compare the
            // payload it stored with this one and answer `:content_hash` when they match.
            Self::Existing => &["consumer", "event_id", "event_type", "payload", "content_hash"],
            Self::Poison => &["consumer", "stream", "entry_id", "event_id", "reason", "detail", "fields"],
        }
    }

    fn dotted(self) -> &'static [&'static str] {
        match self {
            Self::Insert => &["fields"],
            _ => &[],
        }
    }
}

/// Column the `existing` statement returns: the content hash of the event already taken over.
pub const EXISTING_COLUMNS: &[&str] = &["content_hash"];

/// `[bridge.sql]` overrides; absent ones use the reference schema's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TakeoverOverrides {
    /// Insert one event unless the inbox holds its id already; one row changed = taken over.
    pub insert: Option<String>,
    /// The content hash of an event already there (column `content_hash`); without it, with a
    /// custom `insert`, an event already there is a duplicate, never a conflict.
    pub existing: Option<String>,
    /// Record one poison entry.
    pub poison: Option<String>,
}

impl TakeoverOverrides {
    pub fn get(&self, statement: TakeoverStatement) -> Option<&str> {
        match statement {
            TakeoverStatement::Insert => self.insert.as_deref(),
            TakeoverStatement::Existing => self.existing.as_deref(),
            TakeoverStatement::Poison => self.poison.as_deref(),
        }
    }
}

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
    pub fn params(self) -> &'static [&'static str] {
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
    pub fn columns(self) -> &'static [&'static str] {
        match self {
            Self::Claim => CLAIM_COLUMNS,
            Self::Stats => STATS_COLUMNS,
            _ => &[],
        }
    }
}

/// Columns the worker's claim must return.
pub const CLAIM_COLUMNS: &[&str] = &["id", "token", "event_id", "event_type", "payload", "attempts", "expired_leases"];

/// Optional claim columns with a meaning of their own; any other column becomes a field
/// (`:fields.<column>` in handlers), as does every key of a JSON object column `fields`.
pub const OPTIONAL_CLAIM_COLUMNS: &[&str] =
    &["owner", "aggregate_type", "aggregate_id", "headers", "fields", "reclaimed"];

/// Columns the worker's stats statement must return (one row), sampled into its gauges.
pub const STATS_COLUMNS: &[&str] = &["dead", "pending", "oldest_lease_age_seconds", "oldest_retry_age_seconds"];

/// `[worker.sql]` overrides; absent ones use the reference schema's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerOverrides {
    pub claim: Option<String>,
    pub processed: Option<String>,
    pub retry: Option<String>,
    pub dead: Option<String>,
    pub renew: Option<String>,
    pub release: Option<String>,
    pub stats: Option<String>,
    pub purge: Option<String>,
}

impl WorkerOverrides {
    pub fn get(&self, statement: WorkerStatement) -> Option<&str> {
        match statement {
            WorkerStatement::Claim => self.claim.as_deref(),
            WorkerStatement::Processed => self.processed.as_deref(),
            WorkerStatement::Retry => self.retry.as_deref(),
            WorkerStatement::Dead => self.dead.as_deref(),
            WorkerStatement::Renew => self.renew.as_deref(),
            WorkerStatement::Release => self.release.as_deref(),
            WorkerStatement::Stats => self.stats.as_deref(),
            WorkerStatement::Purge => self.purge.as_deref(),
        }
    }

    pub fn any(&self) -> bool {
        WorkerStatement::ALL.iter().any(|s| self.get(*s).is_some())
    }
}

/// Checks that `sql` scans and uses only the parameters `offered` (and `<root>.<name>` for a
/// root in `dotted`); the error names the unknown one and lists the offered ones.
pub fn check_offered(sql: &str, style: Placeholder, offered: &[&str], dotted: &[&str]) -> Result<(), String> {
    let named = params::rewrite(sql, style).map_err(|e| e.to_string())?;
    let known = |n: &str| offered.contains(&n) || n.split_once('.').is_some_and(|(root, _)| dotted.contains(&root));
    match named.names.iter().find(|n| !known(n)) {
        Some(unknown) => Err(format!(
            "unknown parameter :{unknown} (this statement is offered: {}{})",
            offered.iter().map(|p| format!(":{p}")).collect::<Vec<_>>().join(", "),
            dotted.iter().map(|d| format!(", :{d}.<name>")).collect::<String>()
        )),
        None => Ok(()),
    }
}

/// [`check_offered`] for a takeover statement.
pub fn check_takeover(statement: TakeoverStatement, sql: &str, style: Placeholder) -> Result<(), String> {
    check_offered(sql, style, statement.params(), statement.dotted())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_is_offered_extra_fields_by_name() {
        let sql = "insert into t (id, v) values (:event_id, :fields.aggregateVersion)";
        assert!(check_takeover(TakeoverStatement::Insert, sql, Placeholder::Numbered).is_ok());
        let err = check_takeover(TakeoverStatement::Poison, "select :fields.x", Placeholder::Numbered).unwrap_err();
        assert!(err.contains(":fields.x") && err.contains(":reason"), "{err}");
    }
}
