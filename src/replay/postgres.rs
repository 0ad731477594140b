//! Replay on Postgres.

use deadpool_postgres::Pool;
use tokio_postgres::types::ToSql;

use super::rows::{Checkpoint, Extent, Oldest, ReplayRow, Source};
use crate::store::database::Dialect;
use crate::store::error::StoreResult;
use crate::store::postgres::errors::{pool_error, query_error};
use crate::store::selection::{Bound, bind, postgres_params};

const LABEL: &str = "replay";

async fn query(pool: &Pool, sql: &str, values: &[Bound]) -> StoreResult<Vec<tokio_postgres::Row>> {
    let client = pool.get().await.map_err(|e| pool_error(LABEL, e))?;
    let params = postgres_params(values);
    let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| &**p as _).collect();
    client.query(sql, &refs).await.map_err(|e| query_error(LABEL, e))
}

pub(super) async fn extent(pool: &Pool, source: Source<'_>, after: i64) -> StoreResult<Extent> {
    let mut values = Vec::new();
    let condition = source.matching(Dialect::Postgres, (after, None), &mut values);
    let sql = format!("SELECT count(*), coalesce(max(id), 0)::bigint FROM {} WHERE {condition}", source.table);
    let rows = query(pool, &sql, &values).await?;
    Ok(rows.first().map(|r| Extent { matching: r.get(0), through_id: r.get(1) }).unwrap_or_default())
}

pub(super) async fn page(
    pool: &Pool,
    source: Source<'_>,
    (after, through): (i64, i64),
    limit: u32,
) -> StoreResult<Vec<ReplayRow>> {
    let mut values = Vec::new();
    let condition = source.matching(Dialect::Postgres, (after, Some(through)), &mut values);
    let limit = bind(Dialect::Postgres, &mut values, Bound::Int(i64::from(limit)));
    let sql = format!(
        "SELECT id, id::text AS id_text, event_id, event_type, aggregate_type, aggregate_id, payload::text, headers::text,
                to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
         FROM {} WHERE {condition} ORDER BY id LIMIT {limit}",
        source.table
    );
    let rows = query(pool, &sql, &values).await?;
    Ok(rows
        .iter()
        .map(|r| ReplayRow {
            id: r.get(0),
            event_id: r.get(2),
            values: (1..9).map(|i| r.get::<_, Option<String>>(i)).collect(),
        })
        .collect())
}

pub(super) async fn oldest(pool: &Pool, table: &str, time_column: &str) -> StoreResult<Oldest> {
    let sql = format!("SELECT min(id), extract(epoch FROM now() - min({time_column}))::float8 FROM {table}");
    let rows = query(pool, &sql, &[]).await?;
    Ok(rows.first().map(|r| Oldest { lowest_id: r.get(0), age_seconds: r.get(1) }).unwrap_or_default())
}

pub(super) async fn load(pool: &Pool, job: &str) -> StoreResult<Option<Checkpoint>> {
    let sql = "SELECT job, relay, target, selection, through_id, after_id, appended, total, finished_at IS NOT NULL
               FROM handoff_replays WHERE job = $1::text";
    let rows = query(pool, sql, &[Bound::Text(job.to_owned())]).await?;
    Ok(rows.first().map(|r| Checkpoint {
        job: r.get(0),
        relay: r.get(1),
        target: r.get(2),
        selection: r.get(3),
        through_id: r.get(4),
        after_id: r.get(5),
        appended: r.get(6),
        total: r.get(7),
        finished: r.get(8),
    }))
}

pub(super) async fn restart(pool: &Pool, c: &Checkpoint) -> StoreResult<()> {
    let sql = "INSERT INTO handoff_replays (job, relay, target, selection, through_id, after_id, appended, total)
               VALUES ($1::text, $2::text, $3::text, $4::text, $5::bigint, $6::bigint, $7::bigint, $8::bigint)
               ON CONFLICT (job) DO UPDATE SET relay = excluded.relay, target = excluded.target,
                   selection = excluded.selection, through_id = excluded.through_id, after_id = excluded.after_id,
                   appended = excluded.appended, total = excluded.total, started_at = now(), updated_at = now(),
                   finished_at = NULL";
    let values = c.values();
    query(pool, sql, &values).await.map(drop)
}

pub(super) async fn save(pool: &Pool, job: &str, after_id: i64, appended: i64) -> StoreResult<()> {
    let sql = "UPDATE handoff_replays SET after_id = $2::bigint, appended = $3::bigint, updated_at = now() WHERE job = $1::text";
    query(pool, sql, &[Bound::Text(job.to_owned()), Bound::Int(after_id), Bound::Int(appended)]).await.map(drop)
}

pub(super) async fn finish(pool: &Pool, job: &str) -> StoreResult<()> {
    let sql = "UPDATE handoff_replays SET finished_at = now(), updated_at = now() WHERE job = $1::text";
    query(pool, sql, &[Bound::Text(job.to_owned())]).await.map(drop)
}
