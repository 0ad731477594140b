//! `handoff status`: per relay, worker and bridge stream, what is waiting, in flight and DEAD.

use deadpool_postgres::Pool;
use serde::Serialize;

use crate::config::Config;
use crate::store::postgres::PgOutbox;
use crate::store::{OutboxStore, PrepareError};
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

pub async fn collect(config: &Config, pool: &Pool, stream: Option<&RedisStream>) -> Vec<Line> {
    let mut lines = Vec::new();
    for relay in &config.relays {
        let mut line = Line::new(format!("relay {}", relay.name));
        match PgOutbox::prepare(pool.clone(), relay).await {
            Err(PrepareError::Invalid(e)) => line.error = Some(e.join("; ")),
            Err(e) => line.error = Some(e.to_string()),
            Ok(store) => match store.stats().await {
                Ok(Some(s)) => {
                    line.pending = Some(s.pending);
                    line.in_flight = Some(s.in_flight);
                    line.dead = Some(s.dead);
                    line.oldest_pending_age_seconds = Some(s.oldest_pending_age);
                }
                Ok(None) => line.error = Some("no stats statement for this table".into()),
                Err(e) => line.error = Some(crate::error::error_chain(&e)),
            },
        }
        lines.push(line);
    }
    for worker in &config.workers {
        let mut line = Line::new(format!("worker {}", worker.name));
        let sql = format!(
            "SELECT count(*) FILTER (WHERE status = 'PENDING'), count(*) FILTER (WHERE status = 'PROCESSING'),
                    count(*) FILTER (WHERE status = 'DEAD'),
                    coalesce(extract(epoch FROM now() - min(received_at) FILTER (WHERE status IN ('PENDING', 'PROCESSING'))), 0)::float8
             FROM {} WHERE consumer = $1 AND status IN ('PENDING', 'PROCESSING', 'DEAD')",
            worker.table
        );
        match pool.get().await {
            Err(e) => line.error = Some(e.to_string()),
            Ok(client) => match client.query_one(&sql, &[&worker.consumer]).await {
                Ok(r) => {
                    line.pending = Some(r.get(0));
                    line.in_flight = Some(r.get(1));
                    line.dead = Some(r.get(2));
                    line.oldest_pending_age_seconds = Some(r.get(3));
                }
                Err(e) => line.error = Some(crate::store::postgres::describe(&e)),
            },
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
