//! `[bridge.sql]` and `[worker.sql]`: statement overrides for an inbox of your own. What each
//! statement is offered and must return is the SQL contract, in `store/takeover/contract.rs`
//! and `store/inbox/contract.rs`.

use serde::Deserialize;

use crate::store::inbox::contract::WorkerStatement;
use crate::store::takeover::contract::TakeoverStatement;

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
