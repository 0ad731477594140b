//! The worker's statements written once for every dialect: which statement each transition
//! runs, with which parameters, and what its result rows mean. A dialect ([`InboxSql`]) only
//! runs a named statement and applies batches.

use std::future::Future;
use std::time::Duration;

use super::bindings as binding;
use super::contract::WorkerStatement;
use super::seam::{Applied, ApplyError, BoundStatement, InboxRow, InboxStats, InboxStore, LockedRows};
use crate::config::WorkerOverrides;
use crate::store::error::{PrepareError, StoreError, StoreResult};
use crate::store::param::Param;
use crate::store::rows::TextRow;

/// What a dialect provides: the worker's named statements, run with their bindings, and the
/// batch transaction.
pub trait InboxSql: Send + Sync + 'static {
    /// Whose inbox rows (`:consumer`).
    fn consumer(&self) -> &str;

    /// Prepares the store's statements and the handlers' (`(label, sql)`), naming what fails.
    fn check(&self, handler_sql: &[(String, String)]) -> impl Future<Output = Result<(), PrepareError>> + Send;

    /// Runs `statement` (on MySQL a claim or renew may be a script): the rows its last
    /// statement returned, as text, and the rows it changed.
    fn run(
        &self,
        statement: WorkerStatement,
        bind: impl Fn(&str) -> Param + Send + Sync,
    ) -> impl Future<Output = StoreResult<(Vec<TextRow>, u64)>> + Send;

    /// See [`InboxStore::apply_batch`].
    fn apply_batch(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> impl Future<Output = StoreResult<Vec<Result<Applied, ApplyError>>>> + Send;

    /// See [`InboxStore::lock`]. Only Postgres with the reference statements has it; the
    /// configuration never asks another store for it.
    fn lock(&self, _batch_size: u32, _lease: Duration) -> impl Future<Output = StoreResult<LockedRows>> + Send {
        async { Err(StoreError::Contract("this inbox store has no locked claim".into())) }
    }
}

impl<S: InboxSql> InboxStore for S {
    async fn check(&self, handler_sql: &[(String, String)]) -> Result<(), PrepareError> {
        InboxSql::check(self, handler_sql).await
    }

    async fn claim(&self, owner: &str, batch_size: u32, lease: Duration) -> StoreResult<Vec<InboxRow>> {
        let (rows, _) =
            self.run(WorkerStatement::Claim, binding::claim(self.consumer(), owner, batch_size, lease)).await?;
        rows.iter().map(InboxRow::from_text).collect()
    }

    async fn apply_batch(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> StoreResult<Vec<Result<Applied, ApplyError>>> {
        InboxSql::apply_batch(self, owner, items).await
    }

    async fn fail(&self, owner: &str, row: &InboxRow, error: &str, retry_in: Option<Duration>) -> StoreResult<bool> {
        let (statement, delay) = match retry_in {
            Some(delay) => (WorkerStatement::Retry, delay),
            None => (WorkerStatement::Dead, Duration::ZERO),
        };
        let (_, changed) = self.run(statement, binding::failure(owner, row, error, delay)).await?;
        Ok(changed == 1)
    }

    async fn renew(&self, owner: &str, rows: &[(String, i64)], lease: Duration) -> StoreResult<u64> {
        Ok(self.run(WorkerStatement::Renew, binding::held(owner, rows, lease)).await?.1)
    }

    async fn release(&self, owner: &str, rows: &[(String, i64)]) -> StoreResult<u64> {
        Ok(self.run(WorkerStatement::Release, binding::held(owner, rows, Duration::ZERO)).await?.1)
    }

    async fn lock(&self, batch_size: u32, lease: Duration) -> StoreResult<LockedRows> {
        InboxSql::lock(self, batch_size, lease).await
    }

    async fn stats(&self) -> StoreResult<InboxStats> {
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

    async fn purge(&self, age: Duration, batch: u32) -> StoreResult<u64> {
        Ok(self.run(WorkerStatement::Purge, binding::consumer(self.consumer(), age, batch)).await?.1)
    }
}

/// The texts of the statements a worker runs: each `[worker.sql]` override, else
/// `reference(statement)`; `purge` only with retention.
pub fn statement_texts(
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
