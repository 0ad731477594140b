//! `handoff status`: per relay, worker and bridge stream, what is waiting, in flight and DEAD.

use mysql_async::prelude::Queryable;
use serde::Serialize;

use crate::config::{Config, WorkerConfig};
use crate::store::Database;
use crate::store::outbox::MyOutbox;
use crate::store::outbox::PgOutbox;
use crate::store::outbox::{OutboxStats, OutboxStore};
use crate::store::{PrepareError, StoreResult};
use crate::stream::redis::RedisStream;
use crate::stream::redis::group::Group;

#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub component: String,
    /// Rows (or entries) waiting.
    pub pending: Option<i64>,
    /// Rows under a lease (or entries delivered and not acknowledged).
    pub in_flight: Option<i64>,
    pub dead: Option<i64>,
    pub oldest_pending_age_seconds: Option<f64>,
    /// Bridges: entries not yet delivered to the group.
    pub lag: Option<i64>,
    pub error: Option<String>,
}

impl Line {
    fn new(component: String) -> Self {
        Self {
            component,
            pending: None,
            in_flight: None,
            dead: None,
            oldest_pending_age_seconds: None,
            lag: None,
            error: None,
        }
    }
}

pub async fn collect(config: &Config, db: &Database, stream: Option<&RedisStream>) -> Vec<Line> {
    let mut lines = Vec::new();
    for relay in &config.relays {
        let mut line = Line::new(format!("relay {}", relay.name));
        let stats: Result<StoreResult<Option<OutboxStats>>, PrepareError> = match db {
            Database::Postgres(pool) => match PgOutbox::prepare(pool.clone(), relay).await {
                Ok(store) => Ok(store.stats().await),
                Err(e) => Err(e),
            },
            Database::Mysql(pool) => match MyOutbox::prepare(pool.clone(), relay).await {
                Ok(store) => Ok(store.stats().await),
                Err(e) => Err(e),
            },
        };
        match stats {
            Err(PrepareError::Invalid(e)) => line.error = Some(e.join("; ")),
            Err(e) => line.error = Some(e.to_string()),
            Ok(Ok(Some(s))) => {
                line.pending = Some(s.pending);
                line.in_flight = Some(s.in_flight);
                line.dead = Some(s.dead);
                line.oldest_pending_age_seconds = Some(s.oldest_pending_age);
            }
            Ok(Ok(None)) => line.error = Some("no stats statement for this table".into()),
            Ok(Err(e)) => line.error = Some(crate::error::error_chain(&e)),
        }
        lines.push(line);
    }
    for worker in &config.workers {
        let mut line = Line::new(format!("worker {}", worker.name));
        match inbox_counts(db, worker).await {
            Ok((pending, in_flight, dead, oldest)) => {
                line.pending = Some(pending);
                line.in_flight = Some(in_flight);
                line.dead = Some(dead);
                line.oldest_pending_age_seconds = Some(oldest);
            }
            Err(e) => line.error = Some(e),
        }
        lines.push(line);
    }
    for bridge in &config.bridges {
        for source in &bridge.streams {
            let mut line = Line::new(format!("bridge {} {}", bridge.name, source.key));
            match stream {
                None => line.error = Some("redis unreachable".into()),
                Some(stream) => {
                    let group = Group::new(
                        stream.client().clone(),
                        &source.key,
                        bridge.group(),
                        "status",
                        config.redis.command_timeout,
                    );
                    match group.info().await {
                        Ok(info) => {
                            line.in_flight = Some(info.pending as i64);
                            line.lag = info.lag.map(|l| l as i64);
                        }
                        Err(e) => line.error = Some(e.to_string()),
                    }
                    if let Ok(Some(idle)) = group.oldest_pending_idle().await {
                        line.oldest_pending_age_seconds = Some(idle.as_secs_f64());
                    }
                }
            }
            lines.push(line);
        }
    }
    lines
}

/// A worker's inbox: pending, processing, DEAD, and the age of the oldest row not yet done.
async fn inbox_counts(db: &Database, worker: &WorkerConfig) -> Result<(i64, i64, i64, f64), String> {
    let t = &worker.table;
    match db {
        Database::Postgres(pool) => {
            let sql = format!(
                "SELECT count(*) FILTER (WHERE status = 'PENDING'), count(*) FILTER (WHERE status = 'PROCESSING'),
                        count(*) FILTER (WHERE status = 'DEAD'),
                        coalesce(extract(epoch FROM now() - min(received_at) FILTER (WHERE status IN ('PENDING', 'PROCESSING'))), 0)::float8
                 FROM {t} WHERE consumer = $1 AND status IN ('PENDING', 'PROCESSING', 'DEAD')"
            );
            let client = pool.get().await.map_err(|e| e.to_string())?;
            let r =
                client.query_one(&sql, &[&worker.consumer]).await.map_err(|e| crate::store::postgres::describe(&e))?;
            Ok((r.get(0), r.get(1), r.get(2), r.get(3)))
        }
        Database::Mysql(pool) => {
            let sql = format!(
                "SELECT CAST(COALESCE(SUM(status = 'PENDING'), 0) AS SIGNED),
                        CAST(COALESCE(SUM(status = 'PROCESSING'), 0) AS SIGNED),
                        CAST(COALESCE(SUM(status = 'DEAD'), 0) AS SIGNED),
                        CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND,
                            MIN(CASE WHEN status IN ('PENDING', 'PROCESSING') THEN received_at END), NOW(3)) / 1e6, 0) AS DOUBLE)
                 FROM {t} WHERE consumer = ? AND status IN ('PENDING', 'PROCESSING', 'DEAD')"
            );
            let describe = |e: mysql_async::Error| crate::store::mysql::describe(&e);
            let mut conn = pool.get_conn().await.map_err(describe)?;
            let row: Option<(i64, i64, i64, f64)> =
                conn.exec_first(sql, (worker.consumer.as_str(),)).await.map_err(describe)?;
            Ok(row.unwrap_or((0, 0, 0, 0.0)))
        }
    }
}

/// A fixed-width table for humans.
pub fn render(lines: &[Line]) -> String {
    let cell = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
    let mut out = format!(
        "{:<40} {:>10} {:>10} {:>8} {:>10} {:>14}\n",
        "COMPONENT", "PENDING", "IN FLIGHT", "DEAD", "LAG", "OLDEST (s)"
    );
    for l in lines {
        out.push_str(&format!(
            "{:<40} {:>10} {:>10} {:>8} {:>10} {:>14}",
            l.component,
            cell(l.pending),
            cell(l.in_flight),
            cell(l.dead),
            cell(l.lag),
            l.oldest_pending_age_seconds.map_or("-".to_owned(), |a| format!("{a:.1}")),
        ));
        if let Some(error) = &l.error {
            out.push_str(&format!("  error: {error}"));
        }
        out.push('\n');
    }
    out
}
