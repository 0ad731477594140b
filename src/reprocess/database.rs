//! `handoff inbox reprocess`: PROCESSED (or DEAD) inbox rows chosen by a [`Selection`] back to
//! PENDING, counters reset, so the worker runs its (fixed) handlers on them again. Chunks of
//! [`CHUNK`] rows, each in a transaction of its own that locks what it moves (`FOR UPDATE`, not
//! `SKIP LOCKED`: the worker holds only PENDING and PROCESSING rows, but InnoDB's locking reads
//! lock settled rows they merely scan, and skipping those would leave rows out); a chunk that
//! meets a deadlock or a lock timeout is tried again.

use mysql_async::prelude::Queryable;
use serde::Serialize;

use crate::store::database::{Database, Dialect};
use crate::store::error::StoreResult;
use crate::store::mysql::errors::error;
use crate::store::postgres::errors::{pool_error, query_error};
use crate::store::selection::{Bound, Selection, mysql_params, postgres_params};

const CHUNK: u32 = 1000;
const LABEL: &str = "reprocess inbox rows";

/// The settled states a reprocess takes rows from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Settled {
    Processed,
    Dead,
}

impl Settled {
    fn status(self) -> &'static str {
        match self {
            Settled::Processed => "'PROCESSED'",
            Settled::Dead => "'DEAD'",
        }
    }
}

/// What to reprocess, in which inbox.
#[derive(Debug, Clone)]
pub(super) struct Reprocess<'a> {
    pub table: &'a str,
    pub consumer: &'a str,
    pub from: &'a [Settled],
    /// The column `selection`'s time range applies to (`received_at`, `processed_at`).
    pub time_column: &'static str,
    pub selection: &'a Selection,
    /// At most this many rows.
    pub limit: u32,
}

/// How many rows match, and how many were moved back to PENDING.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(super) struct Reprocessed {
    pub matching: i64,
    pub reprocessed: i64,
}

impl Reprocess<'_> {
    fn conditions(&self, dialect: Dialect, values: &mut Vec<Bound>) -> String {
        let statuses: Vec<&str> = self.from.iter().map(|s| s.status()).collect();
        let consumer = match dialect {
            Dialect::Postgres => "$1::text",
            Dialect::Mysql => "?",
        };
        values.push(Bound::Text(self.consumer.to_owned()));
        let rest = self.selection.render(dialect, self.time_column, values);
        format!("consumer = {consumer} AND status IN ({}){rest}", statuses.join(", "))
    }
}

/// Counts the matching rows; unless `dry_run`, moves up to `limit` of them (oldest id first).
pub(super) async fn reprocess(db: &Database, request: &Reprocess<'_>, dry_run: bool) -> StoreResult<Reprocessed> {
    match db {
        Database::Postgres(pool) => postgres(pool, request, dry_run).await,
        Database::Mysql(pool) => mysql(pool, request, dry_run).await,
    }
}

/// What a reprocess resets: the row is as if just taken over, its last error and count of
/// re-drives kept.
const RESET: &str = "status = 'PENDING', attempts = 0, expired_leases = 0, processed_at = NULL, dead_at = NULL, \
                     lease_owner = NULL, lease_expires_at = NULL, redrives = redrives + 1";

async fn postgres(pool: &deadpool_postgres::Pool, request: &Reprocess<'_>, dry_run: bool) -> StoreResult<Reprocessed> {
    let t = request.table;
    let mut values = Vec::new();
    let conditions = request.conditions(Dialect::Postgres, &mut values);
    let client = pool.get().await.map_err(|e| pool_error(LABEL, e))?;
    let failed = |e| query_error(LABEL, e);
    let bound = postgres_params(&values);
    let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = bound.iter().map(|b| &**b as _).collect();
    let count = format!("SELECT count(*) FROM {t} WHERE {conditions}");
    let matching: i64 = client.query_one(&count, &refs).await.map_err(failed)?.get(0);
    let mut done = Reprocessed { matching, reprocessed: 0 };
    if dry_run {
        done.reprocessed = matching.min(i64::from(request.limit));
        return Ok(done);
    }
    // Chunks walk up the ids: a row the worker has applied again meanwhile (PROCESSED once
    // more) is behind the walk and is not taken twice.
    let (after_at, limit_at) = (values.len() + 1, values.len() + 2);
    let sql = format!(
        "WITH chosen AS (SELECT id FROM {t} WHERE {conditions} AND id > ${after_at}::bigint
                         ORDER BY id LIMIT ${limit_at}::bigint FOR UPDATE)
         UPDATE {t} i SET {RESET}, next_retry_at = now(), redriven_at = now() FROM chosen WHERE i.id = chosen.id
         RETURNING i.id"
    );
    let mut after = i64::MIN;
    while done.reprocessed < i64::from(request.limit) {
        let chunk = (i64::from(request.limit) - done.reprocessed).min(i64::from(CHUNK));
        let mut refs = refs.clone();
        refs.push(&after);
        refs.push(&chunk);
        let moved = retrying(|| async { client.query(&sql, &refs).await.map_err(failed) }).await?;
        done.reprocessed += moved.len() as i64;
        match moved.iter().map(|r| r.get::<_, i64>(0)).max() {
            Some(last) if (moved.len() as i64) == chunk => after = last,
            _ => break,
        }
    }
    Ok(done)
}

async fn mysql(
    pool: &crate::store::mysql::pool::Pool,
    request: &Reprocess<'_>,
    dry_run: bool,
) -> StoreResult<Reprocessed> {
    let t = request.table;
    let failed = |e| error(LABEL, e);
    let mut values = Vec::new();
    let conditions = request.conditions(Dialect::Mysql, &mut values);
    let params = mysql_params(&values);
    let mut conn = pool.get_conn().await.map_err(failed)?;
    let count = format!("SELECT COUNT(*) FROM {t} WHERE {conditions}");
    let matching: i64 = conn.exec_first(count, params.clone()).await.map_err(failed)?.unwrap_or(0);
    let mut done = Reprocessed { matching, reprocessed: 0 };
    if dry_run {
        done.reprocessed = matching.min(i64::from(request.limit));
        return Ok(done);
    }
    drop(conn);
    // Chunks walk up the ids (see the Postgres side).
    let mut after = i64::MIN;
    while done.reprocessed < i64::from(request.limit) {
        let chunk = (i64::from(request.limit) - done.reprocessed).min(i64::from(CHUNK));
        let mut chosen_params = params.clone();
        chosen_params.push(after.into());
        chosen_params.push(chunk.into());
        let ids = retrying(|| mysql_chunk(pool, (t, &conditions), chosen_params.clone())).await?;
        done.reprocessed += ids.len() as i64;
        match ids.iter().max() {
            Some(last) if (ids.len() as i64) == chunk => after = *last,
            _ => break,
        }
    }
    Ok(done)
}

/// One chunk on MySQL: the chosen rows locked, then moved, in one transaction; their ids.
async fn mysql_chunk(
    pool: &crate::store::mysql::pool::Pool,
    (t, conditions): (&str, &str),
    params: Vec<mysql_async::Value>,
) -> StoreResult<Vec<i64>> {
    let failed = |e| error(LABEL, e);
    let mut tx = pool.start_transaction(mysql_async::TxOpts::default()).await.map_err(failed)?;
    let select = format!("SELECT id FROM {t} WHERE {conditions} AND id > ? ORDER BY id LIMIT ? FOR UPDATE");
    let ids: Vec<i64> = tx.exec(select, params).await.map_err(failed)?;
    if !ids.is_empty() {
        let list = vec!["?"; ids.len()].join(", ");
        let update =
            format!("UPDATE {t} SET {RESET}, next_retry_at = NOW(3), redriven_at = NOW(3) WHERE id IN ({list})");
        tx.exec_drop(update, ids.clone()).await.map_err(failed)?;
    }
    tx.commit().await.map_err(failed)?;
    Ok(ids)
}

/// Runs `attempt` again (up to five times, backing off) while it meets a deadlock or a lock
/// timeout: the worker's claims lock rows for a moment, and that passes.
async fn retrying<T, F, Fut>(mut attempt: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StoreResult<T>>,
{
    let mut tries = 0u32;
    loop {
        match attempt().await {
            Err(e) if e.outage_kind() == Some(crate::store::OutageKind::Conflict) && tries < 5 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(20 << tries)).await;
            }
            other => return other,
        }
    }
}
