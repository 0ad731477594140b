//! The worker's state machine on a Postgres inbox. Every transition is fenced by lease owner +
//! token; the handler's statements and the mark to PROCESSED share one transaction. A batch is
//! first applied pipelined (one set-based mark, every handler statement sent at once); only a
//! batch in which a row's data is refused is applied again with a savepoint per row.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_postgres::types::ToSql;

use super::values::Param;
use super::{pool_error, query_error};
use crate::fault::{Faults, Point};
use crate::store::PrepareError;
use crate::store::StoreResult;
use crate::store::worker::{
    Applied, ApplyError, BindValue, BoundStatement, InboxRow, InboxStats, RowTransaction, WorkerStore,
    apply_row_by_row, commit_failed,
};

pub struct PgWorker {
    pool: Pool,
    consumer: String,
    faults: Faults,
    sql: WorkerSql,
}

struct WorkerSql {
    claim: String,
    processed: String,
    /// The fenced mark of a whole batch; returns the ids it marked (the rows still ours).
    processed_batch: String,
    retry: String,
    dead: String,
    renew: String,
    release: String,
    stats: String,
    purge: String,
}

impl WorkerSql {
    fn new(t: &str) -> Self {
        let fence = "id = $1 AND lease_owner = $2 AND lease_token = $3 AND status = 'PROCESSING'";
        let batch_fence = "FROM unnest($3::bigint[], $4::bigint[]) AS s(id, token)
             WHERE i.id = s.id AND i.lease_token = s.token AND i.lease_owner = $1 AND i.status = 'PROCESSING'";
        Self {
            // At most one lease-expired row, alone, as in the relay's claim: a row that kills
            // its worker reaches DEAD by itself without dragging its batch along.
            claim: format!(
                "WITH expired AS (
                     SELECT id FROM {t} WHERE consumer = $1 AND status = 'PROCESSING' AND lease_expires_at <= now()
                     ORDER BY lease_expires_at LIMIT 1 FOR UPDATE SKIP LOCKED
                 ), due AS (
                     SELECT id FROM {t} WHERE consumer = $1 AND status = 'PENDING' AND next_retry_at <= now()
                       AND NOT EXISTS (SELECT 1 FROM expired)
                     ORDER BY next_retry_at, id LIMIT $3 FOR UPDATE SKIP LOCKED
                 ), picked AS (
                     SELECT id, true AS reclaimed FROM expired UNION ALL SELECT id, false FROM due
                 )
                 UPDATE {t} i SET status = 'PROCESSING', lease_owner = $2, lease_token = i.lease_token + 1,
                     lease_expires_at = now() + $4::bigint * interval '1 millisecond', claimed_at = now(),
                     expired_leases = i.expired_leases + CASE WHEN i.status = 'PROCESSING' THEN 1 ELSE 0 END
                 FROM picked WHERE i.id = picked.id
                 RETURNING i.id, i.lease_token, i.event_id, i.event_type, i.owner, i.aggregate_type,
                           i.aggregate_id, i.payload, i.headers, i.attempts, i.expired_leases, picked.reclaimed"
            ),
            processed: format!(
                "UPDATE {t} SET status = 'PROCESSED', processed_at = now(), lease_expires_at = NULL, last_error = NULL
                 WHERE {fence}"
            ),
            processed_batch: format!(
                "UPDATE {t} i SET status = 'PROCESSED', processed_at = now(), lease_expires_at = NULL, last_error = NULL
                 FROM unnest($2::bigint[], $3::bigint[]) AS s(id, token)
                 WHERE i.id = s.id AND i.lease_token = s.token AND i.lease_owner = $1 AND i.status = 'PROCESSING'
                 RETURNING i.id"
            ),
            retry: format!(
                "UPDATE {t} SET status = 'PENDING', attempts = attempts + 1, last_error = $4, failed_at = now(),
                     next_retry_at = now() + $5::bigint * interval '1 millisecond', lease_expires_at = NULL
                 WHERE {fence}"
            ),
            dead: format!(
                "UPDATE {t} SET status = 'DEAD', attempts = attempts + 1, last_error = $4, failed_at = now(),
                     dead_at = now(), lease_expires_at = NULL
                 WHERE {fence}"
            ),
            // Rows our own batch transaction has locked are skipped, not waited for: that
            // transaction is about to settle them, and waiting on it deadlocks with it.
            renew: format!(
                "UPDATE {t} w SET lease_expires_at = now() + $2::bigint * interval '1 millisecond'
                 FROM (SELECT i.id FROM {t} i JOIN unnest($3::bigint[], $4::bigint[]) AS s(id, token) ON i.id = s.id
                       WHERE i.lease_token = s.token AND i.lease_owner = $1 AND i.status = 'PROCESSING'
                       FOR UPDATE OF i SKIP LOCKED) AS l
                 WHERE w.id = l.id"
            ),
            release: format!("UPDATE {t} i SET status = 'PENDING', lease_expires_at = NULL {}", batch_fence.replace("$3", "$2").replace("$4", "$3")),
            // Oldest first on the processed_at partial index, in bounded batches; IGNORED rows by age of receipt.
            purge: format!(
                "WITH old AS (
                     SELECT id FROM {t} WHERE consumer = $1 AND status = 'PROCESSED'
                       AND processed_at < now() - $2::bigint * interval '1 millisecond'
                     ORDER BY processed_at LIMIT $3 FOR UPDATE SKIP LOCKED
                 ), ignored AS (
                     SELECT id FROM {t} WHERE consumer = $1 AND status = 'IGNORED'
                       AND received_at < now() - $2::bigint * interval '1 millisecond'
                     LIMIT $3 FOR UPDATE SKIP LOCKED
                 )
                 DELETE FROM {t} i USING (SELECT id FROM old UNION ALL SELECT id FROM ignored) d WHERE i.id = d.id"
            ),
            stats: format!(
                "SELECT (SELECT count(*) FROM {t} WHERE consumer = $1 AND status = 'DEAD') AS dead,
                        (SELECT count(*) FROM {t} WHERE consumer = $1 AND status = 'PENDING') AS pending,
                        coalesce((SELECT extract(epoch FROM now() - min(claimed_at)) FROM {t}
                                  WHERE consumer = $1 AND status = 'PROCESSING'), 0)::float8 AS oldest_lease,
                        coalesce((SELECT extract(epoch FROM now() - min(failed_at)) FROM {t}
                                  WHERE consumer = $1 AND status = 'PENDING' AND attempts > 0), 0)::float8 AS oldest_retry"
            ),
        }
    }
}

impl PgWorker {
    pub fn new(pool: Pool, table: &str, consumer: &str, faults: Faults) -> Self {
        Self { pool, consumer: consumer.to_owned(), faults, sql: WorkerSql::new(table) }
    }

    /// The fast path: one transaction marks the batch PROCESSED (fenced, set-based) and runs the
    /// handler statements of the rows it marked, all sent at once — tokio-postgres pipelines
    /// queries polled together on one connection — so a batch costs a few round trips instead
    /// of four per row. A row the fence refuses is not applied at all. `None` when a handler
    /// statement refused a row's data: the transaction is rolled back and the caller isolates
    /// the row at fault with a savepoint per row.
    async fn apply_pipelined(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> StoreResult<Option<Vec<Result<Applied, ApplyError>>>> {
        self.faults.reach(Point::WorkerInHandler).await;
        let mut client = self.pool.get().await.map_err(|e| pool_error("apply", e))?;
        let tx = client.transaction().await.map_err(|e| query_error("apply", e))?;
        let (ids, tokens): (Vec<i64>, Vec<i64>) = items.iter().map(|(r, _)| (r.id, r.token)).unzip();
        let mark = tx.prepare_cached(&self.sql.processed_batch).await.map_err(|e| query_error("mark processed", e))?;
        let marked: HashSet<i64> = tx
            .query(&mark, &[&owner, &ids, &tokens])
            .await
            .map_err(|e| query_error("mark processed", e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        // The row locks the mark took keep every marked row ours until the commit.
        let ours = || items.iter().filter(|(row, _)| marked.contains(&row.id));
        let mut prepared = HashMap::new();
        for (_, statements) in ours() {
            for statement in statements {
                if !prepared.contains_key(statement.sql) {
                    let stmt = tx.prepare_cached(statement.sql).await.map_err(|e| handler_error(statement.index, e));
                    match stmt {
                        Ok(stmt) => prepared.insert(statement.sql, stmt),
                        Err(ApplyError::Store(e)) => return Err(e),
                        Err(ApplyError::Handler { .. }) => return Ok(None),
                    };
                }
            }
        }
        let calls: Vec<(&tokio_postgres::Statement, Vec<Param>)> = ours()
            .flat_map(|(_, statements)| statements)
            .map(|s| (&prepared[s.sql], s.values.iter().map(to_param).collect()))
            .collect();
        let sent = calls.iter().map(|(stmt, values)| {
            let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
            let tx = &tx;
            async move { tx.execute(*stmt, &refs).await }
        });
        // Replies come in order; after the first error the server refuses the rest of the
        // transaction, so the first error is the one that matters.
        for outcome in futures_util::future::join_all(sent).await {
            if let Err(e) = outcome {
                return match ApplyError::from_handler(0, query_error("handler", e)) {
                    ApplyError::Handler { .. } => Ok(None),
                    ApplyError::Store(e) => Err(e),
                };
            }
        }
        match tx.commit().await {
            Ok(()) => Ok(Some(
                items
                    .iter()
                    .map(|(row, _)| Ok(if marked.contains(&row.id) { Applied::Processed } else { Applied::Fenced }))
                    .collect(),
            )),
            // A deferred constraint may refuse one row's data at commit: isolate it.
            Err(e) => match commit_failed(items.len(), query_error("handler", e)) {
                Ok(results) => Ok(Some(results)),
                Err(e) if e.is_data_fault() => Ok(None),
                Err(e) => Err(e),
            },
        }
    }
}

fn to_param(value: &BindValue) -> Param {
    match value {
        BindValue::Null => Param::Null,
        BindValue::Text(s) => Param::Text(s.clone()),
        BindValue::Json(s) => Param::Json(s.clone()),
    }
}

/// A handler statement's error: the row's data at fault (DEAD), or an outage of the store.
fn handler_error(index: usize, error: tokio_postgres::Error) -> ApplyError {
    ApplyError::from_handler(index, query_error("handler", error))
}

/// A batch's transaction on Postgres, for applying it row by row.
struct PgRows<'a> {
    tx: deadpool_postgres::Transaction<'a>,
    worker: &'a PgWorker,
}

impl RowTransaction for PgRows<'_> {
    async fn savepoint(&mut self, sql: &'static str) -> StoreResult<()> {
        self.tx.batch_execute(sql).await.map_err(|e| query_error("apply", e))
    }

    async fn apply(
        &mut self,
        owner: &str,
        row: &InboxRow,
        statements: &[BoundStatement<'_>],
    ) -> Result<Applied, ApplyError> {
        let tx = &self.tx;
        for statement in statements {
            let stmt = tx.prepare_cached(statement.sql).await.map_err(|e| handler_error(statement.index, e))?;
            let values: Vec<Param> = statement.values.iter().map(to_param).collect();
            let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
            tx.execute(&stmt, &refs).await.map_err(|e| handler_error(statement.index, e))?;
        }
        self.worker.faults.reach(Point::WorkerInHandler).await;
        // Cached: this runs once per row, and an unprepared statement costs a second round trip.
        let processed = tx
            .prepare_cached(&self.worker.sql.processed)
            .await
            .map_err(|e| ApplyError::Store(query_error("mark processed", e)))?;
        let marked = tx
            .execute(&processed, &[&row.id, &owner, &row.token])
            .await
            .map_err(|e| ApplyError::Store(query_error("mark processed", e)))?;
        Ok(if marked == 0 { Applied::Fenced } else { Applied::Processed })
    }

    async fn commit(self) -> StoreResult<()> {
        self.tx.commit().await.map_err(|e| query_error("handler", e))
    }
}

impl WorkerStore for PgWorker {
    /// Prepares the worker's own statements and each handler statement, naming what fails.
    async fn check(&self, handler_sql: &[(String, String)]) -> Result<(), PrepareError> {
        let client = self
            .pool
            .get()
            .await
            .map_err(|e| PrepareError::Unreachable(format!("cannot connect to the database: {e}")))?;
        let mut errors = Vec::new();
        let own = [
            ("claim", &self.sql.claim),
            ("processed", &self.sql.processed),
            ("processed_batch", &self.sql.processed_batch),
            ("retry", &self.sql.retry),
            ("dead", &self.sql.dead),
            ("renew", &self.sql.renew),
            ("release", &self.sql.release),
            ("stats", &self.sql.stats),
        ];
        for (name, sql) in own {
            if let Err(e) = client.prepare(sql).await {
                errors.push(super::prepare_refusal(&format!("inbox statement {name}"), e)?);
            }
        }
        for (context, sql) in handler_sql {
            match client.prepare(sql).await {
                Err(e) => errors.push(super::prepare_refusal(context, e)?),
                Ok(stmt) => {
                    for ty in stmt.params() {
                        if !super::values::param_type_supported(ty) {
                            errors.push(format!(
                                "{context}: a parameter has type {ty}; cast it via text, e.g. :payload.x::text::{ty}"
                            ));
                        }
                    }
                }
            }
        }
        if errors.is_empty() { Ok(()) } else { Err(PrepareError::Invalid(errors)) }
    }

    async fn claim(&self, owner: &str, batch_size: u32, lease: Duration) -> StoreResult<Vec<InboxRow>> {
        let client = self.pool.get().await.map_err(|e| pool_error("claim inbox rows", e))?;
        let stmt = client.prepare_cached(&self.sql.claim).await.map_err(|e| query_error("claim inbox rows", e))?;
        let rows = client
            .query(&stmt, &[&self.consumer, &owner, &i64::from(batch_size), &(lease.as_millis() as i64)])
            .await
            .map_err(|e| query_error("claim inbox rows", e))?;
        Ok(rows
            .iter()
            .map(|r| InboxRow {
                id: r.get(0),
                token: r.get(1),
                event_id: r.get(2),
                event_type: r.get(3),
                owner: r.get(4),
                aggregate_type: r.get(5),
                aggregate_id: r.get(6),
                payload: r.get(7),
                headers: r.get(8),
                attempts: r.get::<_, i32>(9).max(0) as u32,
                expired_leases: r.get::<_, i32>(10).max(0) as u32,
                reclaimed: r.get(11),
            })
            .collect())
    }

    async fn apply_batch(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> StoreResult<Vec<Result<Applied, ApplyError>>> {
        if let Some(results) = self.apply_pipelined(owner, items).await? {
            return Ok(results);
        }
        let mut client = self.pool.get().await.map_err(|e| pool_error("apply", e))?;
        let tx = client.transaction().await.map_err(|e| query_error("apply", e))?;
        apply_row_by_row(PgRows { tx, worker: self }, owner, items).await
    }

    async fn fail(&self, owner: &str, row: &InboxRow, error: &str, retry_in: Option<Duration>) -> StoreResult<bool> {
        let client = self.pool.get().await.map_err(|e| pool_error("record a failure", e))?;
        let changed = match retry_in {
            Some(delay) => {
                let ms = delay.as_millis() as i64;
                client.execute(&self.sql.retry, &[&row.id, &owner, &row.token, &error, &ms]).await
            }
            None => client.execute(&self.sql.dead, &[&row.id, &owner, &row.token, &error]).await,
        }
        .map_err(|e| query_error("record a failure", e))?;
        Ok(changed == 1)
    }

    async fn renew(&self, owner: &str, rows: &[(i64, i64)], lease: Duration) -> StoreResult<u64> {
        let (ids, tokens): (Vec<i64>, Vec<i64>) = rows.iter().copied().unzip();
        let client = self.pool.get().await.map_err(|e| pool_error("renew leases", e))?;
        client
            .execute(&self.sql.renew, &[&owner, &(lease.as_millis() as i64), &ids, &tokens])
            .await
            .map_err(|e| query_error("renew leases", e))
    }

    async fn release(&self, owner: &str, rows: &[(i64, i64)]) -> StoreResult<u64> {
        let (ids, tokens): (Vec<i64>, Vec<i64>) = rows.iter().copied().unzip();
        let client = self.pool.get().await.map_err(|e| pool_error("release rows", e))?;
        client.execute(&self.sql.release, &[&owner, &ids, &tokens]).await.map_err(|e| query_error("release rows", e))
    }

    async fn purge(&self, age: Duration, batch: u32) -> StoreResult<u64> {
        let client = self.pool.get().await.map_err(|e| pool_error("purge the inbox", e))?;
        let params: [&(dyn ToSql + Sync); 3] = [&self.consumer, &(age.as_millis() as i64), &i64::from(batch)];
        client.execute(&self.sql.purge, &params).await.map_err(|e| query_error("purge the inbox", e))
    }

    async fn stats(&self) -> StoreResult<InboxStats> {
        let client = self.pool.get().await.map_err(|e| pool_error("inbox stats", e))?;
        let row =
            client.query_one(&self.sql.stats, &[&self.consumer]).await.map_err(|e| query_error("inbox stats", e))?;
        Ok(InboxStats {
            dead: row.get(0),
            pending: row.get(1),
            oldest_lease_age: row.get(2),
            oldest_retry_age: row.get(3),
        })
    }
}
