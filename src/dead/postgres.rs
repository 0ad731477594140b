//! DEAD rows on Postgres: one statement per action (`UPDATE … RETURNING`, `DELETE … RETURNING`).

use deadpool_postgres::Pool;

use super::rows::{DeadAction, DeadFilter, DeadRow, DeadTable};
use crate::store::error::StoreResult;
use crate::store::postgres::errors::{pool_error, query_error};

pub(super) async fn run(
    pool: &Pool,
    target: &DeadTable,
    filter: &DeadFilter,
    action: DeadAction,
) -> StoreResult<Vec<DeadRow>> {
    let t = &target.table;
    let scope = if target.consumer.is_some() { "AND consumer = $5" } else { "AND $5::text IS NULL" };
    let matching = format!(
        "SELECT id FROM {t} WHERE status = 'DEAD' {scope}
           AND ($1::text IS NULL OR event_id = $1)
           AND ($2::bigint IS NULL OR dead_at < now() - $2 * interval '1 millisecond')
           AND ($3::text IS NULL OR strpos(last_error, $3) > 0)
         ORDER BY dead_at, id LIMIT $4 OFFSET $6"
    );
    let columns =
        "id::text, event_id, event_type, attempts, extract(epoch FROM now() - dead_at)::float8, redrives, last_error";
    let sql = match action {
        DeadAction::List => format!("SELECT {columns} FROM {t} WHERE id IN ({matching}) ORDER BY dead_at, id"),
        DeadAction::Retry => format!(
            "UPDATE {t} SET status = 'PENDING', {}, redrives = redrives + 1, redriven_at = now(), lease_expires_at = NULL
             WHERE id IN ({matching} FOR UPDATE SKIP LOCKED) RETURNING {columns}",
            target.reset("now()")
        ),
        DeadAction::Purge => format!("DELETE FROM {t} WHERE id IN ({matching} FOR UPDATE SKIP LOCKED) RETURNING {columns}"),
    };
    let label = "dead rows";
    let mut client = pool.get().await.map_err(|e| pool_error(label, e))?;
    let older_ms = filter.older_than_ms();
    let (limit, offset) = (i64::from(filter.limit), i64::from(filter.offset));
    let failed = |e: tokio_postgres::Error| query_error(label, e);
    let tx = client.transaction().await.map_err(failed)?;
    // The reference schema refuses to move a DEAD row back unless the transaction says it is a
    // re-drive (migrations/postgres/0006).
    tx.batch_execute("SET LOCAL handoff.redrive = 'on'").await.map_err(failed)?;
    let rows = tx
        .query(&sql, &[&filter.event_id, &older_ms, &filter.error_contains, &limit, &target.consumer, &offset])
        .await
        .map_err(failed)?;
    tx.commit().await.map_err(failed)?;
    Ok(rows
        .iter()
        .map(|r| DeadRow {
            source: target.source.clone(),
            id: r.get(0),
            event_id: r.get(1),
            event_type: r.get(2),
            attempts: r.get(3),
            dead_for_seconds: r.get::<_, Option<f64>>(4).unwrap_or(0.0),
            redrives: r.get(5),
            last_error: r.get(6),
        })
        .collect())
}
