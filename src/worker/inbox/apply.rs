//! Applying a batch row by row, for every dialect: a savepoint per row, so a row whose data is
//! refused is rolled back alone and its neighbours commit together.

use std::future::Future;

use super::rows::{Applied, ApplyError, BoundStatement, InboxRow};
use crate::fault::{Faults, Point};
use crate::store::error::{StoreError, StoreResult};
use crate::worker::config::HandlerErrors;

/// A dialect's open transaction for applying a batch row by row.
pub(crate) trait RowTransaction: Send {
    /// Runs a savepoint statement (`SAVEPOINT`, `RELEASE SAVEPOINT`, `ROLLBACK TO SAVEPOINT`).
    fn savepoint(&mut self, sql: &'static str) -> impl Future<Output = StoreResult<()>> + Send;

    /// Runs one handler statement; its error as the dialect classifies it.
    fn execute(&mut self, statement: &BoundStatement<'_>) -> impl Future<Output = StoreResult<u64>> + Send;

    /// The row's fenced mark to PROCESSED: the rows it changed (none: the fence refused).
    fn mark_processed(&mut self, owner: &str, row: &InboxRow) -> impl Future<Output = StoreResult<u64>> + Send;

    fn commit(self) -> impl Future<Output = StoreResult<()>> + Send;

    /// What the worker's handler errors mean (`[worker.handler_errors]`).
    fn handler_errors(&self) -> &HandlerErrors;

    /// Where the tests park a worker mid-batch.
    fn faults(&self) -> &Faults;
}

/// A row's statements, then its fenced mark to PROCESSED.
async fn apply_row<T: RowTransaction>(
    tx: &mut T,
    owner: &str,
    row: &InboxRow,
    statements: &[BoundStatement<'_>],
) -> Result<Applied, ApplyError> {
    for statement in statements {
        let executed = tx.execute(statement).await;
        executed.map_err(|e| ApplyError::from_handler(statement.index, e, tx.handler_errors()))?;
    }
    tx.faults().reach(Point::WorkerInHandler).await;
    let marked = tx.mark_processed(owner, row).await.map_err(ApplyError::Store)?;
    Ok(if marked == 0 { Applied::Fenced } else { Applied::Processed })
}

/// Applies `items` in `tx`, each row in its own savepoint, for every dialect: a row whose data
/// is refused or whose fence refuses is rolled back alone, the others commit together; an
/// outage fails the whole batch (nothing committed).
pub(crate) async fn apply_row_by_row<T: RowTransaction>(
    mut tx: T,
    owner: &str,
    items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
) -> StoreResult<Vec<Result<Applied, ApplyError>>> {
    let mut results = Vec::with_capacity(items.len());
    for (row, statements) in items {
        tx.savepoint("SAVEPOINT handoff_row").await?;
        let outcome = match apply_row(&mut tx, owner, row, statements).await {
            Err(ApplyError::Store(e)) => return Err(e),
            other => other,
        };
        let end =
            if keep_row(&outcome) { "RELEASE SAVEPOINT handoff_row" } else { "ROLLBACK TO SAVEPOINT handoff_row" };
        tx.savepoint(end).await?;
        results.push(outcome);
    }
    let errors = tx.handler_errors().clone();
    match tx.commit().await {
        Ok(()) => Ok(results),
        Err(e) => commit_failed(items.len(), e, &errors),
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
pub(crate) fn commit_failed(
    rows: usize,
    error: StoreError,
    errors: &HandlerErrors,
) -> StoreResult<Vec<Result<Applied, ApplyError>>> {
    match ApplyError::from_handler(usize::MAX, error, errors) {
        handler @ ApplyError::Handler { .. } if rows == 1 => Ok(vec![Err(handler)]),
        ApplyError::Handler { message, .. } => {
            Err(StoreError::Rejected { statement: "commit", source: message.into() })
        }
        ApplyError::Store(e) => Err(e),
    }
}
