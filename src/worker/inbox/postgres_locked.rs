//! The worker's locked claim on a Postgres inbox (`claim = "locked"`, reference schema): one
//! transaction locks a batch of PENDING rows `FOR UPDATE SKIP LOCKED`, runs every row's handler
//! statements and marks the rows PROCESSED before it commits. A processed row is written once
//! (PENDING → PROCESSED) instead of twice (→ PROCESSING → PROCESSED), and the batch costs one
//! transaction instead of two. The row locks are the lease: other workers skip them while the
//! transaction lives, and when the worker dies, hangs past `idle_in_transaction_session_timeout`
//! or drops the batch, the server rolls back and the rows are as they were. No mark needs a
//! fencing token: the rows are ours until the commit.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;

use super::apply::commit_failed;
use super::postgres_handlers::{run_handlers, text_rows};
use super::rows::{BoundStatement, InboxRow};
use crate::fault::{Faults, Point};
use crate::store::error::{StoreError, StoreResult};
use crate::store::postgres::errors::query_error;
use crate::store::postgres::scan_start::{SCAN_DUE, ScanStart};
use crate::store::postgres::tx::OpenTx;
use crate::worker::config::HandlerErrors;

/// The locked claim's statements for one inbox table, and where its next claim starts reading
/// (shared by the worker's loops).
#[derive(Debug, Clone)]
pub(super) struct LockedInboxSql {
    /// `$1` consumer, `$2` batch size, `$3` the lower bound on `next_retry_at` (see
    /// `scan_start`); the same result columns as the reference claim's, then `scan_due`.
    lock: String,
    scan: Arc<ScanStart>,
    /// `$1` owner, `$2` ids. By id alone, without a status check: the transaction holds the rows.
    processed: String,
    errors: HandlerErrors,
}

impl LockedInboxSql {
    pub(super) fn new(table: &str, errors: HandlerErrors) -> Self {
        Self {
            errors,
            scan: Arc::default(),
            lock: format!(
                "SELECT id, lease_token AS token, event_id, event_type, owner, aggregate_type, aggregate_id,
                        payload, headers, fields, attempts, expired_leases, false AS reclaimed,
                        extract(epoch FROM next_retry_at)::float8 AS {SCAN_DUE}
                 FROM {table}
                 WHERE consumer = $1 AND status = 'PENDING' AND next_retry_at <= now()
                   AND next_retry_at >= to_timestamp($3::float8)
                 ORDER BY next_retry_at, id
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED"
            ),
            processed: format!(
                "UPDATE {table} SET status = 'PROCESSED', processed_at = now(), lease_owner = $1,
                     lease_expires_at = NULL, last_error = NULL
                 WHERE id = ANY($2::bigint[])"
            ),
        }
    }

    /// Each statement with its name (for the startup check).
    pub(super) fn statements(&self) -> [(&'static str, &str); 2] {
        [("lock", &self.lock), ("locked processed", &self.processed)]
    }
}

/// Locks a batch; see [`Inbox::lock`](super::Inbox::lock).
pub(super) async fn lock(
    pool: &Pool,
    sql: &LockedInboxSql,
    consumer: &str,
    batch_size: u32,
    idle_timeout: Duration,
    faults: &Faults,
) -> StoreResult<LockedRows> {
    let (tx, stmt) = OpenTx::for_lock(pool, &sql.lock).await?;
    let from = sql.scan.bound(std::time::Instant::now());
    let rows = tx.begin_and_lock(idle_timeout, &stmt, &[&consumer, &i64::from(batch_size), &from]).await?;
    sql.scan.took_rows(&rows).map_err(|e| query_error("lock", e))?;
    if rows.is_empty() {
        tx.commit("lock", false).await?;
        return Ok((Vec::new(), None));
    }
    let mut rows = text_rows(&stmt, &rows, "lock")?;
    // `scan_due` is the claim's own, not a field of the event for handlers.
    rows.iter_mut().for_each(|row| row.retain(|(name, _)| name != SCAN_DUE));
    let rows = rows.iter().map(InboxRow::from_text).collect::<StoreResult<Vec<_>>>()?;
    let batch =
        LockedInbox { tx, processed: sql.processed.clone(), faults: faults.clone(), errors: sql.errors.clone() };
    Ok((rows, Some(batch)))
}

/// The open transaction of a locked inbox batch.
/// The rows of a locked batch and its open transaction (`None` when no row was due: nothing held).
pub(crate) type LockedRows = (Vec<InboxRow>, Option<LockedInbox>);

/// A batch locked by an open transaction (`claim = "locked"`, Postgres): the row locks are the
/// lease and the connection is the fence. Dropped without [`apply`](LockedInbox::apply), the
/// connection is closed, the server rolls the transaction back, and the rows are as they were.
pub struct LockedInbox {
    tx: OpenTx,
    processed: String,
    faults: Faults,
    errors: HandlerErrors,
}

impl LockedInbox {
    /// Runs every row's statements, marks every row PROCESSED and commits: `Ok(true)`. When a
    /// handler statement (or the commit) refuses a row's data (or a mark misses a row), the
    /// transaction is rolled back and nothing changed: `Ok(false)`, and the worker takes the rows
    /// again under a lease, where a savepoint per row finds the row at fault. `Err`: an outage;
    /// nothing committed.
    pub async fn apply(self, owner: &str, items: &[(&InboxRow, Vec<BoundStatement<'_>>)]) -> StoreResult<bool> {
        // Parked here (tests), the worker holds the open transaction and the rows' locks.
        self.faults.reach(Point::WorkerInHandler).await;
        let client = self.tx.client()?;
        let ids = items
            .iter()
            .map(|(row, _)| {
                row.id.parse::<i64>().map_err(|_| {
                    StoreError::Contract(format!("locked claim: inbox row id `{}` is not a bigint", row.id))
                })
            })
            .collect::<StoreResult<Vec<i64>>>()?;
        let mark = client.prepare_cached(&self.processed).await.map_err(|e| query_error("mark processed", e))?;
        // The mark is sent with the handler statements, in the same round trip.
        let Some(marked) = run_handlers(client, items, client.execute(&mark, &[&owner, &ids]), &self.errors).await?
        else {
            self.tx.roll_back().await;
            return Ok(false);
        };
        let marked = marked.map_err(|e| query_error("mark processed", e))?;
        // The locks keep every row ours, so only a handler statement that changed the inbox row
        // itself could make this differ: leave such a batch to the leased claim's fence.
        if marked != ids.len() as u64 {
            self.tx.roll_back().await;
            return Ok(false);
        }
        match client.batch_execute("COMMIT").await {
            Ok(()) => {
                self.tx.finished();
                Ok(true)
            }
            // A deferred constraint may refuse a row's data at commit; the transaction is over.
            Err(e) => match commit_failed(items.len(), query_error("handler", e), &self.errors) {
                Err(e) if !e.is_about_the_data() => Err(e),
                _ => {
                    self.tx.finished();
                    Ok(false)
                }
            },
        }
    }
}
