//! Replay on MySQL / MariaDB.

use mysql_async::prelude::Queryable;

use super::rows::{Checkpoint, Extent, Oldest, ReplayRow, Source};
use crate::store::database::Dialect;
use crate::store::error::StoreResult;
use crate::store::mysql::errors::error;
use crate::store::mysql::pool::Pool;
use crate::store::selection::{Bound, mysql_params};

const LABEL: &str = "replay";

async fn rows(pool: &Pool, sql: String, values: &[Bound]) -> StoreResult<Vec<mysql_async::Row>> {
    let mut conn = pool.get_conn().await.map_err(|e| error(LABEL, e))?;
    conn.exec(sql, mysql_params(values)).await.map_err(|e| error(LABEL, e))
}

pub(super) async fn extent(pool: &Pool, source: Source<'_>, after: i64) -> StoreResult<Extent> {
    let mut values = Vec::new();
    let condition = source.matching(Dialect::Mysql, (after, None), &mut values);
    let sql = format!("SELECT COUNT(*), CAST(COALESCE(MAX(id), 0) AS SIGNED) FROM {} WHERE {condition}", source.table);
    let mut found = rows(pool, sql, &values).await?;
    Ok(found
        .pop()
        .map(|mut r| Extent {
            matching: r.take::<i64, _>(0).unwrap_or(0),
            through_id: r.take::<i64, _>(1).unwrap_or(0),
        })
        .unwrap_or_default())
}

pub(super) async fn page(
    pool: &Pool,
    source: Source<'_>,
    (after, through): (i64, i64),
    limit: u32,
) -> StoreResult<Vec<ReplayRow>> {
    let mut values = Vec::new();
    let condition = source.matching(Dialect::Mysql, (after, Some(through)), &mut values);
    values.push(Bound::Int(i64::from(limit)));
    let sql = format!(
        "SELECT id, CAST(id AS CHAR), event_id, event_type, aggregate_type, aggregate_id, CAST(payload AS CHAR),
                CAST(headers AS CHAR), DATE_FORMAT(created_at, '%Y-%m-%dT%H:%i:%s.%fZ')
         FROM {} WHERE {condition} ORDER BY id LIMIT ?",
        source.table
    );
    Ok(rows(pool, sql, &values)
        .await?
        .into_iter()
        .map(|mut r| {
            let values: Vec<Option<String>> = (1..9).map(|i| r.take::<Option<String>, _>(i).flatten()).collect();
            ReplayRow {
                id: r.take::<i64, _>(0).unwrap_or(0),
                event_id: values.get(1).cloned().flatten().unwrap_or_default(),
                values,
            }
        })
        .collect())
}

pub(super) async fn oldest(pool: &Pool, table: &str, time_column: &str) -> StoreResult<Oldest> {
    let sql = format!("SELECT MIN(id), TIMESTAMPDIFF(MICROSECOND, MIN({time_column}), NOW(3)) / 1e6 FROM {table}");
    let mut found = rows(pool, sql, &[]).await?;
    Ok(found
        .pop()
        .map(|mut r| Oldest {
            lowest_id: r.take::<Option<i64>, _>(0).flatten(),
            age_seconds: r.take::<Option<f64>, _>(1).flatten(),
        })
        .unwrap_or_default())
}

pub(super) async fn load(pool: &Pool, job: &str) -> StoreResult<Option<Checkpoint>> {
    let sql = "SELECT job, relay, target, selection, through_id, after_id, appended, total, finished_at IS NOT NULL
               FROM handoff_replays WHERE job = ?"
        .to_owned();
    let mut found = rows(pool, sql, &[Bound::Text(job.to_owned())]).await?;
    Ok(found.pop().map(|mut r| Checkpoint {
        job: r.take(0).unwrap_or_default(),
        relay: r.take(1).unwrap_or_default(),
        target: r.take(2).unwrap_or_default(),
        selection: r.take(3).unwrap_or_default(),
        through_id: r.take(4).unwrap_or_default(),
        after_id: r.take(5).unwrap_or_default(),
        appended: r.take(6).unwrap_or_default(),
        total: r.take(7).unwrap_or_default(),
        finished: r.take::<i64, _>(8).unwrap_or_default() == 1,
    }))
}

pub(super) async fn restart(pool: &Pool, c: &Checkpoint) -> StoreResult<()> {
    let sql = "INSERT INTO handoff_replays (job, relay, target, selection, through_id, after_id, appended, total)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?)
               ON DUPLICATE KEY UPDATE relay = VALUES(relay), target = VALUES(target), selection = VALUES(selection),
                   through_id = VALUES(through_id), after_id = VALUES(after_id), appended = VALUES(appended),
                   total = VALUES(total), started_at = NOW(3), updated_at = NOW(3), finished_at = NULL"
        .to_owned();
    let values = c.values();
    rows(pool, sql, &values).await.map(drop)
}

pub(super) async fn save(pool: &Pool, job: &str, after_id: i64, appended: i64) -> StoreResult<()> {
    let sql = "UPDATE handoff_replays SET after_id = ?, appended = ?, updated_at = NOW(3) WHERE job = ?".to_owned();
    rows(pool, sql, &[Bound::Int(after_id), Bound::Int(appended), Bound::Text(job.to_owned())]).await.map(drop)
}

pub(super) async fn finish(pool: &Pool, job: &str) -> StoreResult<()> {
    let sql = "UPDATE handoff_replays SET finished_at = NOW(3), updated_at = NOW(3) WHERE job = ?".to_owned();
    rows(pool, sql, &[Bound::Text(job.to_owned())]).await.map(drop)
}
