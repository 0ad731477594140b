//! `handoff_pauses` on MySQL / MariaDB (no `RETURNING` on MySQL: each change reads its row back
//! in the same transaction).

use mysql_async::prelude::Queryable;

use super::target::{Pause, PauseRequest, Target, from_columns};
use crate::store::error::{StoreError, StoreResult};
use crate::store::mysql::errors::error;
use crate::store::mysql::pool::Pool;

const LABEL: &str = "pauses";
const COLUMNS: &str = "component, name, reason, paused_by,
     TIMESTAMPDIFF(MICROSECOND, paused_at, NOW(3)) / 1e6,
     TIMESTAMPDIFF(MICROSECOND, NOW(3), expires_at) / 1e6";
const IN_FORCE: &str = "(expires_at IS NULL OR expires_at > NOW(3))";

fn pauses(rows: Vec<mysql_async::Row>) -> Vec<Pause> {
    rows.into_iter()
        .filter_map(|mut r| {
            let component: String = r.take(0)?;
            let (name, reason, by) = (r.take(1)?, r.take::<Option<String>, _>(2)?, r.take(3)?);
            let age = r.take::<Option<f64>, _>(4).flatten();
            let expires_in = r.take::<Option<f64>, _>(5).flatten();
            from_columns(&component, name, reason, by, (age, expires_in))
        })
        .collect()
}

fn failed(e: mysql_async::Error) -> StoreError {
    error(LABEL, e)
}

pub(super) async fn active(pool: &Pool) -> StoreResult<Vec<Pause>> {
    let mut conn = pool.get_conn().await.map_err(failed)?;
    let sql = format!("SELECT {COLUMNS} FROM handoff_pauses WHERE {IN_FORCE} ORDER BY component, name");
    Ok(pauses(conn.query(sql).await.map_err(failed)?))
}

pub(super) async fn pause(pool: &Pool, request: &PauseRequest) -> StoreResult<Pause> {
    let expires_ms = request.expires_after.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let target = &request.target;
    let key = (target.component.label(), target.name.as_str());
    let mut tx = pool.start_transaction(mysql_async::TxOpts::default()).await.map_err(failed)?;
    // A pause in force keeps its start; an expired one is a new pause.
    tx.exec_drop(
        "INSERT INTO handoff_pauses (component, name, reason, paused_by, expires_at)
         VALUES (?, ?, ?, ?, NOW(3) + INTERVAL ? * 1000 MICROSECOND)
         ON DUPLICATE KEY UPDATE
             paused_at = IF(expires_at IS NULL OR expires_at > NOW(3), paused_at, NOW(3)),
             reason = VALUES(reason), paused_by = VALUES(paused_by), expires_at = VALUES(expires_at)",
        (key.0, key.1, &request.reason, &request.paused_by, expires_ms),
    )
    .await
    .map_err(failed)?;
    let sql = format!("SELECT {COLUMNS} FROM handoff_pauses WHERE component = ? AND name = ?");
    let rows = tx.exec(sql, key).await.map_err(failed)?;
    tx.commit().await.map_err(failed)?;
    pauses(rows).pop().ok_or_else(|| StoreError::Contract("pauses: the upsert left no row".into()))
}

pub(super) async fn resume(pool: &Pool, target: &Target) -> StoreResult<Option<Pause>> {
    let key = (target.component.label(), target.name.as_str());
    let mut tx = pool.start_transaction(mysql_async::TxOpts::default()).await.map_err(failed)?;
    let sql =
        format!("SELECT {COLUMNS} FROM handoff_pauses WHERE component = ? AND name = ? AND {IN_FORCE} FOR UPDATE");
    let rows = tx.exec(sql, key).await.map_err(failed)?;
    tx.exec_drop("DELETE FROM handoff_pauses WHERE component = ? AND name = ?", key).await.map_err(failed)?;
    tx.commit().await.map_err(failed)?;
    Ok(pauses(rows).pop())
}
