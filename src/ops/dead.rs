//! `handoff dead list | retry | purge`: the DEAD rows of relays' outboxes and workers' inboxes,
//! filtered by event id, age and error text. `retry` re-drives rows to PENDING with attempts
//! reset; their last error stays and `redrives` counts the re-drive.

use std::time::Duration;

use deadpool_postgres::Pool;
use mysql_async::prelude::Queryable;
use serde::Serialize;

use crate::config::Config;
use crate::store::Database;

/// Which rows a command touches.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub relay: Option<String>,
    pub worker: Option<String>,
    pub event_id: Option<String>,
    pub older_than: Option<Duration>,
    pub error_contains: Option<String>,
    pub limit: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    List,
    Retry,
    Purge,
}

/// One DEAD row as shown to the operator.
#[derive(Debug, Clone, Serialize)]
pub struct DeadRow {
    /// `relay <name>` or `worker <name>`.
    pub source: String,
    pub id: String,
    pub event_id: String,
    pub event_type: String,
    pub attempts: i32,
    pub dead_for_seconds: f64,
    pub redrives: i32,
    pub last_error: Option<String>,
}

/// A table holding DEAD rows, with what scopes it.
struct Target {
    source: String,
    table: String,
    /// `consumer = '<name>'` for inboxes (bound as $5), none for outboxes.
    consumer: Option<String>,
    reset: &'static str,
}

fn targets(config: &Config, filter: &Filter) -> Result<Vec<Target>, String> {
    let mut targets = Vec::new();
    for relay in &config.relays {
        if filter.worker.is_none() && filter.relay.as_ref().is_none_or(|r| *r == relay.name) {
            if relay.sql.claim.is_some() {
                return Err(format!(
                    "relay `{}` uses its own statements; dead-letter commands serve the reference schema",
                    relay.name
                ));
            }
            let reset = "attempts = 0, expired_claims = 0, next_attempt_at = now()";
            targets.push(Target {
                source: format!("relay {}", relay.name),
                table: relay.table.clone(),
                consumer: None,
                reset,
            });
        }
    }
    for worker in &config.workers {
        if filter.relay.is_none() && filter.worker.as_ref().is_none_or(|w| *w == worker.name) {
            let reset = "attempts = 0, expired_leases = 0, next_retry_at = now()";
            targets.push(Target {
                source: format!("worker {}", worker.name),
                table: worker.table.clone(),
                consumer: Some(worker.consumer.clone()),
                reset,
            });
        }
    }
    if targets.is_empty() {
        return Err("no relay or worker in the config matches the filter".into());
    }
    Ok(targets)
}

/// Runs `action` (or, with `dry_run`, lists what it would touch); returns the rows concerned.
pub async fn run(
    config: &Config,
    db: &Database,
    filter: &Filter,
    action: Action,
    dry_run: bool,
) -> Result<Vec<DeadRow>, String> {
    let mut rows = Vec::new();
    let action = if dry_run { Action::List } else { action };
    for target in targets(config, filter)? {
        rows.extend(match db {
            Database::Postgres(pool) => one(pool, &target, filter, action).await?,
            Database::Mysql(pool) => one_mysql(pool, &target, filter, action).await?,
        });
    }
    Ok(rows)
}

async fn one(pool: &Pool, target: &Target, filter: &Filter, action: Action) -> Result<Vec<DeadRow>, String> {
    let t = &target.table;
    let scope = if target.consumer.is_some() { "AND consumer = $5" } else { "AND $5::text IS NULL" };
    let matching = format!(
        "SELECT id FROM {t} WHERE status = 'DEAD' {scope}
           AND ($1::text IS NULL OR event_id = $1)
           AND ($2::bigint IS NULL OR dead_at < now() - $2 * interval '1 millisecond')
           AND ($3::text IS NULL OR strpos(last_error, $3) > 0)
         ORDER BY dead_at, id LIMIT $4"
    );
    let columns =
        "id::text, event_id, event_type, attempts, extract(epoch FROM now() - dead_at)::float8, redrives, last_error";
    let sql = match action {
        Action::List => format!("SELECT {columns} FROM {t} WHERE id IN ({matching}) ORDER BY dead_at, id"),
        Action::Retry => format!(
            "UPDATE {t} SET status = 'PENDING', {}, redrives = redrives + 1, redriven_at = now(), lease_expires_at = NULL
             WHERE id IN ({matching} FOR UPDATE SKIP LOCKED) RETURNING {columns}",
            target.reset
        ),
        Action::Purge => format!("DELETE FROM {t} WHERE id IN ({matching} FOR UPDATE SKIP LOCKED) RETURNING {columns}"),
    };
    let mut client = pool.get().await.map_err(|e| format!("cannot connect to the database: {e}"))?;
    let older_ms = filter.older_than.map(|d| d.as_millis() as i64);
    let limit = i64::from(filter.limit);
    let failed = |e: tokio_postgres::Error| format!("{}: {}", target.source, crate::store::postgres::describe(&e));
    let tx = client.transaction().await.map_err(failed)?;
    // The reference schema refuses to move a DEAD row back unless the transaction says it is a
    // re-drive (migrations/postgres/0006).
    tx.batch_execute("SET LOCAL handoff.redrive = 'on'").await.map_err(failed)?;
    let rows = tx
        .query(&sql, &[&filter.event_id, &older_ms, &filter.error_contains, &limit, &target.consumer])
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

/// The same on MySQL / MariaDB, which have no `UPDATE … RETURNING`: the matching rows are
/// locked (`FOR UPDATE SKIP LOCKED`), shown, then changed, in one transaction.
async fn one_mysql(
    pool: &crate::store::mysql::Pool,
    target: &Target,
    filter: &Filter,
    action: Action,
) -> Result<Vec<DeadRow>, String> {
    use mysql_async::Value;
    let t = &target.table;
    let failed = |e: mysql_async::Error| format!("{}: {}", target.source, crate::store::mysql::describe(&e));
    let scope = if target.consumer.is_some() { "AND consumer = ?" } else { "" };
    let lock = if action == Action::List { "" } else { "FOR UPDATE SKIP LOCKED" };
    let matching = format!(
        "SELECT id FROM {t} WHERE status = 'DEAD' {scope}
           AND (? IS NULL OR event_id = ?)
           AND (? IS NULL OR dead_at < NOW(3) - INTERVAL ? * 1000 MICROSECOND)
           AND (? IS NULL OR LOCATE(?, last_error) > 0)
         ORDER BY dead_at, id LIMIT ? {lock}"
    );
    let older_ms = filter.older_than.map(|d| d.as_millis() as i64);
    let mut params: Vec<Value> = target.consumer.iter().map(|c| c.as_str().into()).collect();
    params.extend([filter.event_id.clone().into(), filter.event_id.clone().into()]);
    params.extend([older_ms.into(), older_ms.into()]);
    params.extend([filter.error_contains.clone().into(), filter.error_contains.clone().into()]);
    params.push(i64::from(filter.limit).into());
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
        Action::List => None,
        Action::Retry => Some(format!(
            "UPDATE {t} SET status = 'PENDING', {}, redrives = redrives + 1, redriven_at = NOW(3),
                 lease_expires_at = NULL WHERE id IN ({list})",
            target.reset.replace("now()", "NOW(3)")
        )),
        Action::Purge => Some(format!("DELETE FROM {t} WHERE id IN ({list})")),
    };
    if let Some(change) = change {
        tx.exec_drop(change, ids).await.map_err(failed)?;
    }
    tx.commit().await.map_err(failed)?;
    Ok(shown
        .into_iter()
        .map(|mut r| {
            let redriven = i32::from(action == Action::Retry);
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
