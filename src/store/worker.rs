//! The worker's seam: the inbox rows it claims, how a batch is applied, and the statements a
//! dialect implements for it. The decisions above the SQL (which savepoint to keep, what a
//! failed commit means) are here once, for every dialect.

use std::future::Future;
use std::time::Duration;

use super::StoreResult;

/// A claimed inbox row for the worker.
#[derive(Debug, Clone)]
pub struct InboxRow {
    pub id: i64,
    pub token: i64,
    pub event_id: String,
    pub event_type: String,
    pub owner: Option<String>,
    pub aggregate_type: Option<String>,
    pub aggregate_id: Option<String>,
    pub payload: serde_json::Value,
    pub headers: serde_json::Value,
    pub attempts: u32,
    pub expired_leases: u32,
    pub reclaimed: bool,
}

/// Sampled worker gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct InboxStats {
    pub dead: i64,
    pub pending: i64,
    /// Seconds the oldest PROCESSING lease has been held; 0 if none.
    pub oldest_lease_age: f64,
    /// Seconds the oldest row waiting after a failure has waited since it failed; 0 if none.
    pub oldest_retry_age: f64,
}

/// A value bound to a handler statement's parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum BindValue {
    Null,
    Text(String),
    /// JSON text, for json / jsonb parameters (and as text elsewhere).
    Json(String),
}

/// A handler statement with its values for one row.
#[derive(Debug, Clone)]
pub struct BoundStatement<'a> {
    /// Index of the statement in the handler's list (for error messages).
    pub index: usize,
    pub sql: &'a str,
    pub values: Vec<BindValue>,
}

/// What became of an attempt to apply a row's effect.
#[derive(Debug)]
pub enum Applied {
    /// Effect and PROCESSED committed together.
    Processed,
    /// Another worker owns the row now: the effect was rolled back.
    Fenced,
}

/// Why applying failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A handler statement refused the row's data (a constraint or data exception): retrying
    /// cannot help, the row goes DEAD at once. Any other failure is an outage of the store.
    #[error("handler statement {index} refused the row's data: {message}")]
    Handler { index: usize, message: String },
    #[error(transparent)]
    Store(#[from] super::StoreError),
}

impl ApplyError {
    /// A handler statement's error, classified by the dialect: the row's data at fault (the
    /// row goes DEAD) or an outage of the store.
    pub fn from_handler(index: usize, error: super::StoreError) -> Self {
        match error {
            e @ super::StoreError::Rejected { .. } => {
                ApplyError::Handler { index, message: crate::error::error_chain(&e) }
            }
            e => ApplyError::Store(e),
        }
    }
}

/// A dialect's open transaction for applying a batch row by row.
pub trait RowTransaction: Send {
    /// Runs a savepoint statement (`SAVEPOINT`, `RELEASE SAVEPOINT`, `ROLLBACK TO SAVEPOINT`).
    fn savepoint(&mut self, sql: &'static str) -> impl Future<Output = super::StoreResult<()>> + Send;

    /// A row's statements, then its fenced mark to PROCESSED.
    fn apply(
        &mut self,
        owner: &str,
        row: &InboxRow,
        statements: &[BoundStatement<'_>],
    ) -> impl Future<Output = Result<Applied, ApplyError>> + Send;

    fn commit(self) -> impl Future<Output = super::StoreResult<()>> + Send;
}

/// Applies `items` in `tx`, each row in its own savepoint, for every dialect: a row whose data
/// is refused or whose fence refuses is rolled back alone, the others commit together; an
/// outage fails the whole batch (nothing committed).
pub async fn apply_row_by_row<T: RowTransaction>(
    mut tx: T,
    owner: &str,
    items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
) -> super::StoreResult<Vec<Result<Applied, ApplyError>>> {
    let mut results = Vec::with_capacity(items.len());
    for (row, statements) in items {
        tx.savepoint("SAVEPOINT handoff_row").await?;
        let outcome = match tx.apply(owner, row, statements).await {
            Err(ApplyError::Store(e)) => return Err(e),
            other => other,
        };
        let end =
            if keep_row(&outcome) { "RELEASE SAVEPOINT handoff_row" } else { "ROLLBACK TO SAVEPOINT handoff_row" };
        tx.savepoint(end).await?;
        results.push(outcome);
    }
    match tx.commit().await {
        Ok(()) => Ok(results),
        Err(e) => commit_failed(items.len(), e),
    }
}

/// Whether a row's savepoint is kept (its effect and PROCESSED commit with the batch) or rolled
/// back (the fence refused, or a handler statement refused the row's data: undo this row only).
/// An outage never gets here: it fails the whole batch.
fn keep_row(outcome: &Result<Applied, ApplyError>) -> bool {
    matches!(outcome, Ok(Applied::Processed))
}

/// What a failed commit of a handler batch means, for every dialect: with one row, that row's
/// data (a deferred constraint, say), so it goes DEAD; with several the batch fails as a refusal
/// and the worker retries the rows one by one to find it; anything else is an outage.
pub fn commit_failed(rows: usize, error: super::StoreError) -> super::StoreResult<Vec<Result<Applied, ApplyError>>> {
    match ApplyError::from_handler(usize::MAX, error) {
        handler @ ApplyError::Handler { .. } if rows == 1 => Ok(vec![Err(handler)]),
        ApplyError::Handler { message, .. } => {
            Err(super::StoreError::Rejected { statement: "commit", source: message.into() })
        }
        ApplyError::Store(e) => Err(e),
    }
}

/// The worker's statements; every transition is fenced by lease owner + token.
pub trait WorkerStore: Send + Sync + 'static {
    /// Prepares the store's statements and the handlers' (`(label, sql)`), naming what fails.
    fn check(&self, handler_sql: &[(String, String)]) -> impl Future<Output = Result<(), super::PrepareError>> + Send;

    fn claim(
        &self,
        owner: &str,
        batch_size: u32,
        lease: Duration,
    ) -> impl Future<Output = StoreResult<Vec<InboxRow>>> + Send;

    /// In one transaction: each item's statements and its fenced mark to PROCESSED. An item
    /// whose statements refuse its data or whose fence refuses is not applied (rolled back to
    /// its savepoint); the others commit together (one commit for the batch). A dialect may
    /// first try the batch without savepoints and isolate rows only when one fails. `Err` when
    /// the transaction as a whole failed: nothing committed.
    fn apply_batch(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> impl Future<Output = StoreResult<Vec<Result<Applied, ApplyError>>>> + Send;

    /// Records a failure: back to PENDING after `retry_in`, or DEAD when `None`. False if fenced.
    fn fail(
        &self,
        owner: &str,
        row: &InboxRow,
        error: &str,
        retry_in: Option<Duration>,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    fn renew(&self, owner: &str, rows: &[(i64, i64)], lease: Duration)
    -> impl Future<Output = StoreResult<u64>> + Send;

    /// Hands rows (id, token) back to PENDING without counting an attempt (shutdown).
    fn release(&self, owner: &str, rows: &[(i64, i64)]) -> impl Future<Output = StoreResult<u64>> + Send;

    fn stats(&self) -> impl Future<Output = StoreResult<InboxStats>> + Send;

    /// Retention: deletes up to `batch` PROCESSED / IGNORED rows older than `age`; returns how many.
    fn purge(&self, age: Duration, batch: u32) -> impl Future<Output = StoreResult<u64>> + Send;
}
