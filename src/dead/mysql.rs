//! DEAD rows on MySQL / MariaDB, which have no `UPDATE … RETURNING`: the matching rows are
//! locked (`FOR UPDATE SKIP LOCKED`), shown, then changed, in one transaction.

use mysql_async::prelude::Queryable;

use super::rows::{DeadAction, DeadFilter, DeadRow, DeadTable};
use crate::store::error::StoreResult;
use crate::store::mysql::errors::error;
use crate::store::mysql::pool::Pool;

pub(super) async fn run(
    pool: &Pool,
    target: &DeadTable,
    filter: &DeadFilter,
    action: DeadAction,
) -> StoreResult<Vec<DeadRow>> {
    use mysql_async::Value;
    let t = &target.table;
    let failed = |e: mysql_async::Error| error("dead rows", e);
    let scope = if target.consumer.is_some() { "AND consumer = ?" } else { "" };
    let lock = if action == DeadAction::List { "" } else { "FOR UPDATE SKIP LOCKED" };
    let matching = format!(
        "SELECT id FROM {t} WHERE status = 'DEAD' {scope}
           AND (? IS NULL OR event_id = ?)
           AND (? IS NULL OR dead_at < NOW(3) - INTERVAL ? * 1000 MICROSECOND)
           AND (? IS NULL OR LOCATE(?, last_error) > 0)
         ORDER BY dead_at, id LIMIT ? OFFSET ? {lock}"
    );
    let older_ms = filter.older_than_ms();
    let mut params: Vec<Value> = target.consumer.iter().map(|c| c.as_str().into()).collect();
    params.extend([filter.event_id.clone().into(), filter.event_id.clone().into()]);
    params.extend([older_ms.into(), older_ms.into()]);
    params.extend([filter.error_contains.clone().into(), filter.error_contains.clone().into()]);
    params.push(i64::from(filter.limit).into());
    params.push(i64::from(filter.offset).into());
    let mut tx = pool.start_transaction(mysql_async::TxOpts::default()).await.map_err(failed)?;
    let ids: Vec<i64> = tx.exec(matching, params).await.map_err(failed)?;
    if ids.is_empty() {
        tx.commit().await.map_err(failed)?;
        return Ok(Vec::new());
    }
    let list = vec!["?"; ids.len()].join(", ");
    let show = format!(
        "SELECT CAST(id AS CHAR), event_id, event_type, attempts,
                TIMESTAMPDIFF(MICROSECOND, dead_at, NOW(3)) / 1e6, redrives, last_error
         FROM {t} WHERE id IN ({list}) ORDER BY dead_at, id"
    );
    let shown: Vec<mysql_async::Row> = tx.exec(show, ids.clone()).await.map_err(failed)?;
    let change = match action {
        DeadAction::List => None,
        DeadAction::Retry => Some(format!(
            "UPDATE {t} SET status = 'PENDING', {}, redrives = redrives + 1, redriven_at = NOW(3),
                 lease_expires_at = NULL WHERE id IN ({list})",
            target.reset("NOW(3)")
        )),
        DeadAction::Purge => Some(format!("DELETE FROM {t} WHERE id IN ({list})")),
    };
    if let Some(change) = change {
        tx.exec_drop(change, ids).await.map_err(failed)?;
    }
    tx.commit().await.map_err(failed)?;
    Ok(shown
        .into_iter()
        .map(|mut r| {
            let redriven = i32::from(action == DeadAction::Retry);
            DeadRow {
                source: target.source.clone(),
                id: r.take::<String, _>(0).unwrap_or_default(),
                event_id: r.take::<String, _>(1).unwrap_or_default(),
                event_type: r.take::<String, _>(2).unwrap_or_default(),
                attempts: r.take::<i32, _>(3).unwrap_or_default(),
                dead_for_seconds: r.take::<Option<f64>, _>(4).flatten().unwrap_or(0.0),
                // As Postgres's RETURNING shows it: the count after this re-drive.
                redrives: r.take::<i32, _>(5).unwrap_or_default() + redriven,
                last_error: r.take::<Option<String>, _>(6).flatten(),
            }
        })
        .collect())
}
