//! `handoff dead list | retry | purge`: the DEAD rows of relays' outboxes and workers' inboxes,
//! filtered by event id, age and error text. `retry` re-drives rows to PENDING with attempts
//! reset; their last error stays and `redrives` counts the re-drive.

use std::time::Duration;

use deadpool_postgres::Pool;
use serde::Serialize;

use crate::config::Config;

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
    pool: &Pool,
    filter: &Filter,
    action: Action,
    dry_run: bool,
) -> Result<Vec<DeadRow>, String> {
    let mut rows = Vec::new();
    for target in targets(config, filter)? {
        rows.extend(one(pool, &target, filter, if dry_run { Action::List } else { action }).await?);
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
