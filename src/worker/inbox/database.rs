//! The inbox on the configured database, one type for the worker and `check`: which statement
//! each transition runs, with which parameters, and what its result rows mean, written once
//! here; Postgres and MySQL (`postgres.rs`, `mysql.rs`) only run a named statement and apply
//! batches, reached by one `match` each.

use std::time::Duration;

use super::bindings as binding;
use super::contract::WorkerStatement;
use super::mysql::{self, MyInbox};
use super::postgres::{self, PgInbox};
use super::postgres_locked::LockedRows;
use super::rows::{Applied, ApplyError, BoundStatement, InboxCounts, InboxRow, InboxStats};
use crate::fault::Faults;
use crate::sql::params::Placeholder;
use crate::store::database::Database;
use crate::store::error::{PrepareError, StatementError, StoreError, StoreResult};
use crate::store::param::Param;
use crate::store::rows::TextRow;
use crate::worker::config::WorkerConfig;

pub enum Inbox {
    Postgres(PgInbox),
    Mysql(MyInbox),
}

impl Inbox {
    /// The worker's statements: its `[worker.sql]` overrides, the reference schema's otherwise.
    pub fn new(db: &Database, worker: &WorkerConfig, faults: Faults) -> Result<Self, StatementError> {
        Ok(match db {
            Database::Postgres(pool) => Inbox::Postgres(PgInbox::new(pool.clone(), worker, faults)?),
            Database::Mysql(pool) => Inbox::Mysql(MyInbox::new(pool.clone(), worker, faults)?),
        })
    }

    /// How the dialect's placeholders look (the handlers' statements are rewritten to them).
    pub(crate) fn placeholder(&self) -> Placeholder {
        match self {
            Inbox::Postgres(_) => Placeholder::Numbered,
            Inbox::Mysql(_) => Placeholder::Positional,
        }
    }

    /// Whose inbox rows (`:consumer`).
    fn consumer(&self) -> &str {
        match self {
            Inbox::Postgres(s) => s.consumer(),
            Inbox::Mysql(s) => s.consumer(),
        }
    }

    /// Runs `statement` (on MySQL a claim or renew may be a script): the rows its last
    /// statement returned, as text, and the rows it changed.
    async fn run(
        &self,
        statement: WorkerStatement,
        bind: impl Fn(&str) -> Param + Send + Sync,
    ) -> StoreResult<(Vec<TextRow>, u64)> {
        match self {
            Inbox::Postgres(s) => s.run(statement, bind).await,
            Inbox::Mysql(s) => s.run(statement, bind).await,
        }
    }

    /// Prepares the store's statements and the handlers' (`(label, sql)`), naming what fails.
    pub async fn check(&self, handler_sql: &[(String, String)]) -> Result<(), PrepareError> {
        match self {
            Inbox::Postgres(s) => s.check(handler_sql).await,
            Inbox::Mysql(s) => s.check(handler_sql).await,
        }
    }

    pub async fn claim(&self, owner: &str, batch_size: u32, lease: Duration) -> StoreResult<Vec<InboxRow>> {
        let (rows, _) =
            self.run(WorkerStatement::Claim, binding::claim(self.consumer(), owner, batch_size, lease)).await?;
        rows.iter().map(InboxRow::from_text).collect()
    }

    /// In one transaction: each item's statements and its fenced mark to PROCESSED. An item
    /// whose statements refuse its data or whose fence refuses is not applied (rolled back to
    /// its savepoint); the others commit together (one commit for the batch). A dialect may
    /// first try the batch without savepoints and isolate rows only when one fails. `Err` when
    /// the transaction as a whole failed: nothing committed.
    pub async fn apply_batch(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> StoreResult<Vec<Result<Applied, ApplyError>>> {
        match self {
            Inbox::Postgres(s) => s.apply_batch(owner, items).await,
            Inbox::Mysql(s) => s.apply_batch(owner, items).await,
        }
    }

    /// Records a failure: back to PENDING after `retry_in`, or DEAD when `None`. False if fenced.
    pub async fn fail(
        &self,
        owner: &str,
        row: &InboxRow,
        error: &str,
        retry_in: Option<Duration>,
    ) -> StoreResult<bool> {
        let (statement, delay) = match retry_in {
            Some(delay) => (WorkerStatement::Retry, delay),
            None => (WorkerStatement::Dead, Duration::ZERO),
        };
        let (_, changed) = self.run(statement, binding::failure(owner, row, error, delay)).await?;
        Ok(changed == 1)
    }

    pub async fn renew(&self, owner: &str, rows: &[(String, i64)], lease: Duration) -> StoreResult<u64> {
        Ok(self.run(WorkerStatement::Renew, binding::held(owner, rows, lease)).await?.1)
    }

    /// Hands rows (id, token) back to PENDING without counting an attempt (shutdown).
    pub async fn release(&self, owner: &str, rows: &[(String, i64)]) -> StoreResult<u64> {
        Ok(self.run(WorkerStatement::Release, binding::held(owner, rows, Duration::ZERO)).await?.1)
    }

    /// `claim = "locked"`: locks up to `batch_size` PENDING due rows in a transaction the server
    /// ends if it sits idle longer than `lease`, and changes none of them.
    pub async fn lock(&self, batch_size: u32, lease: Duration) -> StoreResult<LockedRows> {
        match self {
            Inbox::Postgres(s) => s.lock(batch_size, lease).await,
            // The configuration never asks MySQL for a locked claim.
            Inbox::Mysql(_) => Err(StoreError::Contract("this inbox store has no locked claim".into())),
        }
    }

    pub async fn stats(&self) -> StoreResult<InboxStats> {
        let (rows, _) = self.run(WorkerStatement::Stats, binding::consumer(self.consumer(), Duration::ZERO, 0)).await?;
        let row = rows.first().ok_or_else(|| StoreError::Contract("worker sql.stats returned no row".into()))?;
        let number = |name: &str| -> f64 {
            let value = row.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.as_deref());
            value.and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0)
        };
        Ok(InboxStats {
            dead: number("dead") as i64,
            pending: number("pending") as i64,
            oldest_lease_age: number("oldest_lease_age_seconds"),
            oldest_retry_age: number("oldest_retry_age_seconds"),
        })
    }

    /// Retention: deletes up to `batch` PROCESSED / IGNORED rows older than `age`; returns how many.
    pub async fn purge(&self, age: Duration, batch: u32) -> StoreResult<u64> {
        Ok(self.run(WorkerStatement::Purge, binding::consumer(self.consumer(), age, batch)).await?.1)
    }
}

/// `consumer`'s rows of the inbox `table`, as `handoff status` shows them.
pub(crate) async fn counts(db: &Database, table: &str, consumer: &str) -> StoreResult<InboxCounts> {
    match db {
        Database::Postgres(pool) => postgres::counts(pool, table, consumer).await,
        Database::Mysql(pool) => mysql::counts(pool, table, consumer).await,
    }
}
