//! The poison table on Postgres for the operator commands (`handoff poison list | retry`):
//! records read by filter, re-drives counted.

use deadpool_postgres::Pool;

use super::records::{PoisonFilter, StoredPoison};
use crate::store::error::StoreResult;
use crate::store::postgres::errors::{pool_error, query_error};

/// The records of `consumer` in `table` that `filter` selects, oldest first.
pub(super) async fn poison_records(
    pool: &Pool,
    table: &str,
    consumer: &str,
    filter: &PoisonFilter,
) -> StoreResult<Vec<StoredPoison>> {
    let sql = format!(
        "SELECT id, stream, stream_entry_id, event_id, reason, detail,
                extract(epoch FROM now() - received_at)::float8, redrives, fields
         FROM {table} WHERE consumer = $1
           AND ($2::text IS NULL OR reason = $2) AND ($3::text IS NULL OR event_id = $3)
         ORDER BY id LIMIT $4 OFFSET $5"
    );
    let label = "read poison records";
    let client = pool.get().await.map_err(|e| pool_error(label, e))?;
    let (limit, offset) = (i64::from(filter.limit), i64::from(filter.offset));
    let rows = client
        .query(&sql, &[&consumer, &filter.reason, &filter.event_id, &limit, &offset])
        .await
        .map_err(|e| query_error(label, e))?;
    Ok(rows
        .iter()
        .map(|r| StoredPoison {
            id: r.get(0),
            stream: r.get(1),
            entry_id: r.get(2),
            event_id: r.get(3),
            reason: r.get(4),
            detail: r.get(5),
            age_seconds: r.get::<_, Option<f64>>(6).unwrap_or(0.0),
            redrives: r.get(7),
            fields: r.get(8),
        })
        .collect())
}

/// Counts a re-drive of record `id`.
pub(super) async fn mark_redriven(pool: &Pool, table: &str, id: i64, expected: Option<i32>) -> StoreResult<bool> {
    let label = "count a poison re-drive";
    let sql = format!(
        "UPDATE {table} SET redrives = redrives + 1, redriven_at = now() WHERE id = $1 AND ($2::int IS NULL OR redrives = $2)"
    );
    let client = pool.get().await.map_err(|e| pool_error(label, e))?;
    Ok(client.execute(&sql, &[&id, &expected]).await.map_err(|e| query_error(label, e))? == 1)
}
