//! `handoff dead list | retry | purge`: the DEAD rows of relays' outboxes and workers' inboxes,
//! filtered by event id, age and error text; the CLI, the admin API and the status page call it.

use super::rows::{DeadAction, DeadFilter, DeadRow, DeadTable};
use super::{mysql, postgres};
use crate::config::Config;
use crate::error::error_chain;
use crate::store::Database;

/// Which tables a command touches, and which rows of them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    pub relay: Option<String>,
    pub worker: Option<String>,
    pub rows: DeadFilter,
}

/// Why a `dead` command did nothing, or stopped part-way.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeadError {
    #[error("no relay or worker in the config matches the filter")]
    NoMatch,
    #[error("relay `{0}` uses its own statements; dead-letter commands serve the reference schema")]
    CustomStatements(String),
    #[error("{source_name}: {}", error_chain(.error))]
    Store { source_name: String, error: crate::store::StoreError },
}

fn tables(config: &Config, filter: &Filter) -> Result<Vec<DeadTable>, DeadError> {
    let mut tables = Vec::new();
    for relay in &config.relays {
        if filter.worker.is_none() && filter.relay.as_ref().is_none_or(|r| *r == relay.name) {
            if relay.sql.claim.is_some() {
                return Err(DeadError::CustomStatements(relay.name.clone()));
            }
            tables.push(DeadTable::outbox(&relay.name, &relay.table));
        }
    }
    for worker in &config.workers {
        if filter.relay.is_none() && filter.worker.as_ref().is_none_or(|w| *w == worker.name) {
            tables.push(DeadTable::inbox(&worker.name, &worker.table, &worker.consumer));
        }
    }
    if tables.is_empty() {
        return Err(DeadError::NoMatch);
    }
    Ok(tables)
}

/// Runs `action` (or, with `dry_run`, lists what it would touch); returns the rows concerned.
pub(crate) async fn run(
    config: &Config,
    db: &Database,
    filter: &Filter,
    action: DeadAction,
    dry_run: bool,
) -> Result<Vec<DeadRow>, DeadError> {
    let mut rows = Vec::new();
    let action = if dry_run { DeadAction::List } else { action };
    for table in tables(config, filter)? {
        let found = match db {
            Database::Postgres(pool) => postgres::run(pool, &table, &filter.rows, action).await,
            Database::Mysql(pool) => mysql::run(pool, &table, &filter.rows, action).await,
        };
        rows.extend(found.map_err(|error| DeadError::Store { source_name: table.source.clone(), error })?);
    }
    Ok(rows)
}
