//! `handoff_stream_shards` on Postgres: a family's count and who recorded it.

use deadpool_postgres::Pool;

use crate::store::error::StoreResult;
use crate::store::postgres::errors::{pool_error, query_error};

const LABEL: &str = "stream shards";

pub(super) async fn record(pool: &Pool, family: &str, count: u32, by: &str) -> StoreResult<(u32, String)> {
    let client = pool.get().await.map_err(|e| pool_error(LABEL, e))?;
    // One statement: the new row, or (on conflict) the one already there.
    let sql = "WITH added AS (
                   INSERT INTO handoff_stream_shards (family, shard_count, recorded_by) VALUES ($1, $2, $3)
                   ON CONFLICT (family) DO NOTHING RETURNING shard_count, recorded_by)
               SELECT shard_count, recorded_by FROM added
               UNION ALL SELECT shard_count, recorded_by FROM handoff_stream_shards WHERE family = $1
               LIMIT 1";
    let row = client.query_one(sql, &[&family, &(count as i32), &by]).await.map_err(|e| query_error(LABEL, e))?;
    Ok((row.get::<_, i32>(0) as u32, row.get(1)))
}

pub(super) async fn recorded(pool: &Pool, family: &str) -> StoreResult<Option<(u32, String)>> {
    let client = pool.get().await.map_err(|e| pool_error(LABEL, e))?;
    let sql = "SELECT shard_count, recorded_by FROM handoff_stream_shards WHERE family = $1";
    let row = client.query_opt(sql, &[&family]).await.map_err(|e| query_error(LABEL, e))?;
    Ok(row.map(|r| (r.get::<_, i32>(0) as u32, r.get(1))))
}

pub(super) async fn replace(pool: &Pool, family: &str, count: u32, by: &str) -> StoreResult<()> {
    let client = pool.get().await.map_err(|e| pool_error(LABEL, e))?;
    let sql = "INSERT INTO handoff_stream_shards (family, shard_count, recorded_by) VALUES ($1, $2, $3)
               ON CONFLICT (family) DO UPDATE SET shard_count = excluded.shard_count,
                   recorded_by = excluded.recorded_by, recorded_at = now()";
    client.execute(sql, &[&family, &(count as i32), &by]).await.map_err(|e| query_error(LABEL, e))?;
    Ok(())
}
