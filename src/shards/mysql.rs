//! `handoff_stream_shards` on MySQL / MariaDB: a family's count and who recorded it.

use mysql_async::prelude::Queryable;

use crate::store::error::{StoreError, StoreResult};
use crate::store::mysql::errors::error;
use crate::store::mysql::pool::Pool;

const LABEL: &str = "stream shards";
const SELECT: &str = "SELECT shard_count, recorded_by FROM handoff_stream_shards WHERE family = ?";

fn failed(e: mysql_async::Error) -> StoreError {
    error(LABEL, e)
}

pub(super) async fn record(pool: &Pool, family: &str, count: u32, by: &str) -> StoreResult<(u32, String)> {
    let mut conn = pool.get_conn().await.map_err(failed)?;
    conn.exec_drop(
        "INSERT IGNORE INTO handoff_stream_shards (family, shard_count, recorded_by) VALUES (?, ?, ?)",
        (family, count, by),
    )
    .await
    .map_err(failed)?;
    let row: Option<(u32, String)> = conn.exec_first(SELECT, (family,)).await.map_err(failed)?;
    row.ok_or_else(|| StoreError::Contract("stream shards: the insert left no row".into()))
}

pub(super) async fn recorded(pool: &Pool, family: &str) -> StoreResult<Option<(u32, String)>> {
    let mut conn = pool.get_conn().await.map_err(failed)?;
    let row: Option<(u32, String)> = conn.exec_first(SELECT, (family,)).await.map_err(failed)?;
    Ok(row)
}

pub(super) async fn replace(pool: &Pool, family: &str, count: u32, by: &str) -> StoreResult<()> {
    let mut conn = pool.get_conn().await.map_err(failed)?;
    conn.exec_drop(
        "INSERT INTO handoff_stream_shards (family, shard_count, recorded_by) VALUES (?, ?, ?)
         ON DUPLICATE KEY UPDATE shard_count = VALUES(shard_count), recorded_by = VALUES(recorded_by),
             recorded_at = CURRENT_TIMESTAMP(3)",
        (family, count, by),
    )
    .await
    .map_err(failed)?;
    Ok(())
}
