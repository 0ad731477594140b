//! The poison table on MySQL / MariaDB for the operator commands (`handoff poison list |
//! retry`): records read by filter, re-drives counted.

use mysql_async::Row;
use mysql_async::prelude::Queryable;

use super::records::{PoisonFilter, StoredPoison};
use crate::store::error::StoreResult;
use crate::store::mysql::errors::error;
use crate::store::mysql::pool::Pool;

/// The records of `consumer` in `table` that `filter` selects, oldest first.
pub(super) async fn poison_records(
    pool: &Pool,
    table: &str,
    consumer: &str,
    filter: &PoisonFilter,
) -> StoreResult<Vec<StoredPoison>> {
    let sql = format!(
        "SELECT id, stream, stream_entry_id, event_id, reason, detail,
                CAST(TIMESTAMPDIFF(MICROSECOND, received_at, NOW(3)) / 1e6 AS DOUBLE), redrives,
                CAST(fields AS CHAR)
         FROM {table} WHERE consumer = ?
           AND (? IS NULL OR reason = ?) AND (? IS NULL OR event_id = ?)
         ORDER BY id LIMIT ? OFFSET ?"
    );
    let label = "read poison records";
    let mut conn = pool.get_conn().await.map_err(|e| error(label, e))?;
    let (limit, offset) = (i64::from(filter.limit), i64::from(filter.offset));
    let params = (consumer, &filter.reason, &filter.reason, &filter.event_id, &filter.event_id, limit, offset);
    let rows: Vec<Row> = conn.exec(sql, params).await.map_err(|e| error(label, e))?;
    Ok(rows
        .into_iter()
        .map(|mut r| StoredPoison {
            id: r.take::<i64, _>(0).unwrap_or_default(),
            stream: r.take::<String, _>(1).unwrap_or_default(),
            entry_id: r.take::<String, _>(2).unwrap_or_default(),
            event_id: r.take::<Option<String>, _>(3).flatten(),
            reason: r.take::<String, _>(4).unwrap_or_default(),
            detail: r.take::<String, _>(5).unwrap_or_default(),
            age_seconds: r.take::<Option<f64>, _>(6).flatten().unwrap_or(0.0),
            redrives: r.take::<i32, _>(7).unwrap_or_default(),
            fields: r
                .take::<Option<String>, _>(8)
                .flatten()
                .and_then(|text| serde_json::from_str(&text).ok())
                .unwrap_or_default(),
        })
        .collect())
}

/// Counts a re-drive of record `id`.
pub(super) async fn mark_redriven(pool: &Pool, table: &str, id: i64, expected: Option<i32>) -> StoreResult<bool> {
    let label = "count a poison re-drive";
    let sql = format!(
        "UPDATE {table} SET redrives = redrives + 1, redriven_at = NOW(3) WHERE id = ? AND (? IS NULL OR redrives = ?)"
    );
    let mut conn = pool.get_conn().await.map_err(|e| error(label, e))?;
    conn.exec_drop(sql, (id, expected, expected)).await.map_err(|e| error(label, e))?;
    Ok(conn.affected_rows() == 1)
}
