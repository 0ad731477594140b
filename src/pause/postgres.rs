//! `handoff_pauses` on Postgres.

use deadpool_postgres::Pool;

use super::target::{Pause, PauseRequest, Target, from_columns};
use crate::store::error::{StoreError, StoreResult};
use crate::store::postgres::errors::{pool_error, query_error};

const LABEL: &str = "pauses";
const COLUMNS: &str = "component, name, reason, paused_by, extract(epoch FROM now() - paused_at)::float8,
     extract(epoch FROM expires_at - now())::float8";
const IN_FORCE: &str = "(expires_at IS NULL OR expires_at > now())";

fn pauses(rows: &[tokio_postgres::Row]) -> Vec<Pause> {
    rows.iter().filter_map(|r| from_columns(r.get(0), r.get(1), r.get(2), r.get(3), (r.get(4), r.get(5)))).collect()
}

pub(super) async fn active(pool: &Pool) -> StoreResult<Vec<Pause>> {
    let client = pool.get().await.map_err(|e| pool_error(LABEL, e))?;
    let sql = format!("SELECT {COLUMNS} FROM handoff_pauses WHERE {IN_FORCE} ORDER BY component, name");
    let rows = client.query(&sql, &[]).await.map_err(|e| query_error(LABEL, e))?;
    Ok(pauses(&rows))
}

pub(super) async fn pause(pool: &Pool, request: &PauseRequest) -> StoreResult<Pause> {
    let client = pool.get().await.map_err(|e| pool_error(LABEL, e))?;
    let expires_ms = request.expires_after.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    // A pause in force keeps its start; an expired one is a new pause.
    let sql = format!(
        "INSERT INTO handoff_pauses AS p (component, name, reason, paused_by, expires_at)
         VALUES ($1, $2, $3, $4, now() + $5::bigint * interval '1 millisecond')
         ON CONFLICT (component, name) DO UPDATE SET
             reason = excluded.reason, paused_by = excluded.paused_by, expires_at = excluded.expires_at,
             paused_at = CASE WHEN p.expires_at IS NULL OR p.expires_at > now() THEN p.paused_at ELSE now() END
         RETURNING {COLUMNS}"
    );
    let target = &request.target;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
        [&target.component.label(), &target.name, &request.reason, &request.paused_by, &expires_ms];
    let rows = client.query(&sql, &params).await.map_err(|e| query_error(LABEL, e))?;
    pauses(&rows).pop().ok_or_else(|| StoreError::Contract("pauses: the upsert returned no row".into()))
}

pub(super) async fn resume(pool: &Pool, target: &Target) -> StoreResult<Option<Pause>> {
    let client = pool.get().await.map_err(|e| pool_error(LABEL, e))?;
    let sql = format!("DELETE FROM handoff_pauses WHERE component = $1 AND name = $2 RETURNING {COLUMNS}, {IN_FORCE}");
    let rows =
        client.query(&sql, &[&target.component.label(), &target.name]).await.map_err(|e| query_error(LABEL, e))?;
    let in_force: Vec<_> = rows.into_iter().filter(|r| r.get::<_, bool>(6)).collect();
    Ok(pauses(&in_force).pop())
}
