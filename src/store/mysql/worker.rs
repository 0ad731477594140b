//! The worker's state machine on a MySQL / MariaDB inbox: the claim locks, updates and reads
//! back in one transaction; a batch's effects commit together, a savepoint per row.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Row, TxOpts, Value};

use super::Pool;

use super::error;
use crate::fault::{Faults, Point};
use crate::store::worker::{
    Applied, ApplyError, BindValue, BoundStatement, InboxRow, InboxStats, RowTransaction, WorkerStore, apply_row_by_row,
};
use crate::store::{PrepareError, StoreResult};

pub struct MyWorker {
    pool: Pool,
    consumer: String,
    faults: Faults,
    sql: WorkerSql,
}

struct WorkerSql {
    lock_expired: String,
    lock_due: String,
    claim: String,
    fetch: String,
    processed: String,
    retry: String,
    dead: String,
    lock_held: String,
    renew: String,
    release: String,
    stats: String,
    purge: String,
}

const IDS: &str = "SELECT j.id FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j";
const JOIN_IDS: &str = "JOIN JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j ON w.id = j.id";
const ROWS: &str = "JOIN JSON_TABLE(?, '$[*]' COLUMNS (n FOR ORDINALITY, id BIGINT PATH '$')) AS i ON w.id = i.id
     JOIN JSON_TABLE(?, '$[*]' COLUMNS (n FOR ORDINALITY, token BIGINT PATH '$')) AS t ON t.n = i.n";

impl WorkerSql {
    fn new(t: &str) -> Self {
        let fence = "id = ? AND lease_owner = ? AND lease_token = ? AND status = 'PROCESSING'";
        Self {
            lock_expired: format!(
                "SELECT id FROM {t} WHERE consumer = ? AND status = 'PROCESSING' AND lease_expires_at <= NOW(3)
                 ORDER BY lease_expires_at LIMIT 1 FOR UPDATE SKIP LOCKED"
            ),
            lock_due: format!(
                "SELECT id FROM {t} WHERE consumer = ? AND status = 'PENDING' AND next_retry_at <= NOW(3)
                 ORDER BY next_retry_at, id LIMIT ? FOR UPDATE SKIP LOCKED"
            ),
            // Joined by primary key: `WHERE id IN (SELECT … JSON_TABLE …)` makes MariaDB scan
            // (and lock its way through) the whole table. `expired_leases` is assigned first so it
            // reads the old status.
            claim: format!(
                "UPDATE {t} w {JOIN_IDS}
                 SET w.expired_leases = w.expired_leases + IF(w.status = 'PROCESSING', 1, 0),
                     w.status = 'PROCESSING', w.lease_owner = ?, w.lease_token = w.lease_token + 1,
                     w.lease_expires_at = NOW(3) + INTERVAL ? * 1000 MICROSECOND, w.claimed_at = NOW(3)"
            ),
            fetch: format!(
                "SELECT id, lease_token, event_id, event_type, owner, aggregate_type, aggregate_id,
                        CAST(payload AS CHAR), CAST(COALESCE(headers, '{{}}') AS CHAR), attempts, expired_leases
                 FROM {t} WHERE id IN ({IDS})"
            ),
            processed: format!(
                "UPDATE {t} SET status = 'PROCESSED', processed_at = NOW(3), lease_expires_at = NULL, last_error = NULL
                 WHERE {fence}"
            ),
            retry: format!(
                "UPDATE {t} SET status = 'PENDING', attempts = attempts + 1, last_error = ?, failed_at = NOW(3),
                     next_retry_at = NOW(3) + INTERVAL ? * 1000 MICROSECOND, lease_expires_at = NULL
                 WHERE {fence}"
            ),
            dead: format!(
                "UPDATE {t} SET status = 'DEAD', attempts = attempts + 1, last_error = ?, failed_at = NOW(3),
                     dead_at = NOW(3), lease_expires_at = NULL
                 WHERE {fence}"
            ),
            // Renewal locks what it can without waiting (the batch transaction holds the rest and
            // is about to settle them; waiting on it would deadlock with it), then extends those.
            lock_held: format!(
                "SELECT w.id FROM {t} w {ROWS}
                 WHERE w.lease_token = t.token AND w.lease_owner = ? AND w.status = 'PROCESSING'
                 FOR UPDATE SKIP LOCKED"
            ),
            renew: format!(
                "UPDATE {t} w {JOIN_IDS}
                 SET w.lease_expires_at = NOW(3) + INTERVAL ? * 1000 MICROSECOND"
            ),
            release: format!(
                "UPDATE {t} w {ROWS} SET w.status = 'PENDING', w.lease_expires_at = NULL
                 WHERE w.lease_token = t.token AND w.lease_owner = ? AND w.status = 'PROCESSING'"
            ),
            purge: format!(
                "DELETE FROM {t} WHERE consumer = ? AND status IN ('PROCESSED', 'IGNORED')
                   AND COALESCE(processed_at, received_at) < NOW(3) - INTERVAL ? * 1000 MICROSECOND
                 ORDER BY id LIMIT ?"
            ),
            stats: format!(
                "SELECT (SELECT COUNT(*) FROM {t} WHERE consumer = ? AND status = 'DEAD'),
                        (SELECT COUNT(*) FROM {t} WHERE consumer = ? AND status = 'PENDING'),
                        COALESCE(TIMESTAMPDIFF(MICROSECOND, (SELECT MIN(claimed_at) FROM {t}
                                 WHERE consumer = ? AND status = 'PROCESSING'), NOW(3)) / 1000000, 0),
                        COALESCE(TIMESTAMPDIFF(MICROSECOND, (SELECT MIN(failed_at) FROM {t}
                                 WHERE consumer = ? AND status = 'PENDING' AND attempts > 0), NOW(3)) / 1000000, 0)"
            ),
        }
    }
}

impl MyWorker {
    pub fn new(pool: Pool, table: &str, consumer: &str, faults: Faults) -> Self {
        Self { pool, consumer: consumer.to_owned(), faults, sql: WorkerSql::new(table) }
    }
}

fn to_value(v: &BindValue) -> Value {
    match v {
        BindValue::Null => Value::NULL,
        BindValue::Text(s) | BindValue::Json(s) => Value::Bytes(s.clone().into_bytes()),
    }
}

/// A handler statement's error: the row's data at fault (DEAD), or an outage of the store.
fn handler_error(index: usize, e: mysql_async::Error) -> ApplyError {
    ApplyError::from_handler(index, error("handler", e))
}

fn json_ids(ids: &[i64]) -> Value {
    Value::Bytes(serde_json::to_vec(ids).unwrap_or_default())
}

/// A batch's transaction on MySQL / MariaDB.
struct MyRows<'a> {
    tx: mysql_async::Transaction<'a>,
    worker: &'a MyWorker,
}

impl RowTransaction for MyRows<'_> {
    async fn savepoint(&mut self, sql: &'static str) -> StoreResult<()> {
        self.tx.query_drop(sql).await.map_err(|e| error("apply", e))
    }

    async fn apply(
        &mut self,
        owner: &str,
        row: &InboxRow,
        statements: &[BoundStatement<'_>],
    ) -> Result<Applied, ApplyError> {
        let tx = &mut self.tx;
        for statement in statements {
            let values: Vec<Value> = statement.values.iter().map(to_value).collect();
            tx.exec_drop(statement.sql, values).await.map_err(|e| handler_error(statement.index, e))?;
        }
        self.worker.faults.reach(Point::WorkerInHandler).await;
        tx.exec_drop(self.worker.sql.processed.as_str(), (row.id, owner, row.token))
            .await
            .map_err(|e| ApplyError::Store(error("mark processed", e)))?;
        Ok(if tx.affected_rows() == 0 { Applied::Fenced } else { Applied::Processed })
    }

    async fn commit(self) -> StoreResult<()> {
        self.tx.commit().await.map_err(|e| error("handler", e))
    }
}

impl WorkerStore for MyWorker {
    async fn check(&self, handler_sql: &[(String, String)]) -> Result<(), PrepareError> {
        let mut conn = self
            .pool
            .get_conn()
            .await
            .map_err(|e| PrepareError::Unreachable(format!("cannot connect to the database: {e}")))?;
        let s = &self.sql;
        let own = [
            ("lock", &s.lock_due),
            ("claim", &s.claim),
            ("fetch", &s.fetch),
            ("processed", &s.processed),
            ("retry", &s.retry),
            ("dead", &s.dead),
            ("renew", &s.renew),
            ("release", &s.release),
            ("stats", &s.stats),
        ];
        let mut errors = Vec::new();
        for (name, sql) in own {
            if let Err(e) = conn.prep(sql.as_str()).await {
                errors.push(super::prepare_refusal(&format!("inbox statement {name}"), e)?);
            }
        }
        for (context, sql) in handler_sql {
            if let Err(e) = conn.prep(sql.as_str()).await {
                errors.push(super::prepare_refusal(context, e)?);
            }
        }
        if errors.is_empty() { Ok(()) } else { Err(PrepareError::Invalid(errors)) }
    }

    async fn claim(&self, owner: &str, batch_size: u32, lease: Duration) -> StoreResult<Vec<InboxRow>> {
        let mut tx = self.pool.start_transaction(super::claim_tx()).await.map_err(|e| error("claim inbox rows", e))?;
        let mut ids: Vec<i64> = tx
            .exec(self.sql.lock_expired.as_str(), (self.consumer.as_str(),))
            .await
            .map_err(|e| error("claim inbox rows", e))?;
        let reclaimed = ids.clone();
        if ids.is_empty() {
            ids = tx
                .exec(self.sql.lock_due.as_str(), (self.consumer.as_str(), batch_size))
                .await
                .map_err(|e| error("claim inbox rows", e))?;
        }
        if ids.is_empty() {
            tx.commit().await.map_err(|e| error("claim inbox rows", e))?;
            return Ok(Vec::new());
        }
        let lease_ms = lease.as_millis() as i64;
        tx.exec_drop(self.sql.claim.as_str(), (json_ids(&ids), owner, lease_ms))
            .await
            .map_err(|e| error("claim inbox rows", e))?;
        let rows: Vec<Row> =
            tx.exec(self.sql.fetch.as_str(), (json_ids(&ids),)).await.map_err(|e| error("claim inbox rows", e))?;
        tx.commit().await.map_err(|e| error("claim inbox rows", e))?;
        Ok(rows
            .into_iter()
            .map(|mut r| {
                let text = |r: &mut Row, i: usize| -> Option<String> { r.take::<Option<String>, _>(i).flatten() };
                let id: i64 = r.take(0).unwrap_or_default();
                InboxRow {
                    id,
                    token: r.take(1).unwrap_or_default(),
                    event_id: text(&mut r, 2).unwrap_or_default(),
                    event_type: text(&mut r, 3).unwrap_or_default(),
                    owner: text(&mut r, 4),
                    aggregate_type: text(&mut r, 5),
                    aggregate_id: text(&mut r, 6),
                    payload: text(&mut r, 7).and_then(|p| serde_json::from_str(&p).ok()).unwrap_or_default(),
                    headers: text(&mut r, 8).and_then(|p| serde_json::from_str(&p).ok()).unwrap_or_default(),
                    attempts: r.take::<i64, _>(9).unwrap_or_default().max(0) as u32,
                    expired_leases: r.take::<i64, _>(10).unwrap_or_default().max(0) as u32,
                    reclaimed: reclaimed.contains(&id),
                }
            })
            .collect())
    }

    async fn apply_batch(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> StoreResult<Vec<Result<Applied, ApplyError>>> {
        let tx = self.pool.start_transaction(TxOpts::default()).await.map_err(|e| error("apply", e))?;
        apply_row_by_row(MyRows { tx, worker: self }, owner, items).await
    }

    async fn fail(
        &self,
        owner: &str,
        row: &InboxRow,
        error_text: &str,
        retry_in: Option<Duration>,
    ) -> StoreResult<bool> {
        let mut conn = self.pool.get_conn().await.map_err(|e| error("record a failure", e))?;
        match retry_in {
            Some(delay) => {
                let ms = delay.as_millis() as i64;
                conn.exec_drop(self.sql.retry.as_str(), (error_text, ms, row.id, owner, row.token)).await
            }
            None => conn.exec_drop(self.sql.dead.as_str(), (error_text, row.id, owner, row.token)).await,
        }
        .map_err(|e| error("record a failure", e))?;
        Ok(conn.affected_rows() == 1)
    }

    async fn renew(&self, owner: &str, rows: &[(i64, i64)], lease: Duration) -> StoreResult<u64> {
        let (ids, tokens): (Vec<i64>, Vec<i64>) = rows.iter().copied().unzip();
        let mut tx = self.pool.start_transaction(TxOpts::default()).await.map_err(|e| error("renew leases", e))?;
        let held: Vec<i64> = tx
            .exec(self.sql.lock_held.as_str(), (json_ids(&ids), json_ids(&tokens), owner))
            .await
            .map_err(|e| error("renew leases", e))?;
        tx.exec_drop(self.sql.renew.as_str(), (json_ids(&held), lease.as_millis() as i64))
            .await
            .map_err(|e| error("renew leases", e))?;
        let renewed = tx.affected_rows();
        tx.commit().await.map_err(|e| error("renew leases", e))?;
        Ok(renewed)
    }

    async fn release(&self, owner: &str, rows: &[(i64, i64)]) -> StoreResult<u64> {
        let (ids, tokens): (Vec<i64>, Vec<i64>) = rows.iter().copied().unzip();
        let mut conn = self.pool.get_conn().await.map_err(|e| error("release rows", e))?;
        conn.exec_drop(self.sql.release.as_str(), (json_ids(&ids), json_ids(&tokens), owner))
            .await
            .map_err(|e| error("release rows", e))?;
        Ok(conn.affected_rows())
    }

    async fn purge(&self, age: Duration, batch: u32) -> StoreResult<u64> {
        let mut conn = self.pool.get_conn().await.map_err(|e| error("purge the inbox", e))?;
        conn.exec_drop(self.sql.purge.as_str(), (self.consumer.as_str(), age.as_millis() as i64, batch))
            .await
            .map_err(|e| error("purge the inbox", e))?;
        Ok(conn.affected_rows())
    }

    async fn stats(&self) -> StoreResult<InboxStats> {
        let mut conn = self.pool.get_conn().await.map_err(|e| error("inbox stats", e))?;
        let c = self.consumer.as_str();
        let row: Option<(i64, i64, Option<f64>, Option<f64>)> =
            conn.exec_first(self.sql.stats.as_str(), (c, c, c, c)).await.map_err(|e| error("inbox stats", e))?;
        let (dead, pending, lease, retry) = row.unwrap_or_default();
        Ok(InboxStats { dead, pending, oldest_lease_age: lease.unwrap_or(0.0), oldest_retry_age: retry.unwrap_or(0.0) })
    }
}
