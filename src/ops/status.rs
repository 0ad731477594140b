//! `handoff status`: per relay, worker and bridge stream, what is waiting, in flight and DEAD.

use serde::Serialize;

use crate::broker::Broker;
use crate::broker::nats::NatsStream;
use crate::broker::redis::RedisStream;
use crate::broker::redis::group::Group;
use crate::config::Config;
use crate::pause::Pause;
use crate::relay::outbox::{Outbox, OutboxStats, OutboxStore};
use crate::store::{Database, PrepareError, StoreResult};
use crate::worker::inbox;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Line {
    pub component: String,
    /// `running`, `paused`, or `unknown` (the pauses could not be read).
    pub state: &'static str,
    /// The pause in force, if paused.
    pub paused: Option<Pause>,
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
            state: "running",
            paused: None,
            pending: None,
            in_flight: None,
            dead: None,
            oldest_pending_age_seconds: None,
            lag: None,
            error: None,
        }
    }
}

/// The brokers status reads group figures from, each if configured and reachable.
#[derive(Clone, Copy, Default)]
pub(crate) struct Brokers<'a> {
    pub redis: Option<&'a RedisStream>,
    pub nats: Option<&'a NatsStream>,
}

pub(crate) async fn collect(config: &Config, db: &Database, brokers: Brokers<'_>) -> Vec<Line> {
    let mut lines = collect_counts(config, db, brokers).await;
    let pauses = crate::pause::active(db).await;
    let targets = config.pause_targets();
    for line in &mut lines {
        // A bridge's lines are one per stream: `bridge <name> <stream>`.
        let target = targets.iter().find(|t| {
            let prefix = t.to_string();
            line.component == prefix || line.component.starts_with(&format!("{prefix} "))
        });
        match (&pauses, target) {
            (Err(_), _) => line.state = "unknown",
            (Ok(pauses), Some(target)) => {
                line.paused = pauses.iter().find(|p| &p.target == target).cloned();
                if line.paused.is_some() {
                    line.state = "paused";
                }
            }
            (Ok(_), None) => {}
        }
    }
    lines
}

async fn collect_counts(config: &Config, db: &Database, brokers: Brokers<'_>) -> Vec<Line> {
    let mut lines = Vec::new();
    for relay in &config.relays {
        let mut line = Line::new(format!("relay {}", relay.name));
        let stats: Result<StoreResult<Option<OutboxStats>>, PrepareError> = match Outbox::prepare(db, relay).await {
            Ok(store) => Ok(store.stats().await),
            Err(e) => Err(e),
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
        match inbox::counts(db, &worker.table, &worker.consumer).await {
            Ok(counts) => {
                line.pending = Some(counts.pending);
                line.in_flight = Some(counts.processing);
                line.dead = Some(counts.dead);
                line.oldest_pending_age_seconds = Some(counts.oldest_age_seconds);
            }
            Err(e) => line.error = Some(crate::error::error_chain(&e)),
        }
        lines.push(line);
    }
    for bridge in &config.bridges {
        for source in &bridge.streams {
            let mut line = Line::new(format!("bridge {} {}", bridge.name, source.key));
            match (bridge.broker, brokers.redis, brokers.nats) {
                (Broker::Nats, _, None) => line.error = Some("nats unreachable".into()),
                (Broker::Kafka, _, _) => match &config.kafka {
                    None => line.error = Some("no [kafka] section".into()),
                    Some(kafka) => {
                        match crate::broker::kafka::offsets::committed_lag(kafka, bridge.group(), &source.key).await {
                            Ok(lag) => line.lag = Some(lag as i64),
                            Err(e) => line.error = Some(format!("kafka: {e}")),
                        }
                    }
                },
                (Broker::Nats, _, Some(nats)) => match nats.consumer_info(bridge.group(), &source.key).await {
                    Ok(Some(info)) => {
                        line.in_flight = Some(info.pending as i64);
                        line.lag = info.lag.map(|l| l as i64);
                    }
                    Ok(None) => {
                        line.error = Some(format!(
                            "JetStream consumer {} does not exist yet (the bridge creates it when it starts)",
                            crate::broker::nats::group::durable_name(bridge.group(), &source.key)
                        ))
                    }
                    Err(e) => line.error = Some(e.0),
                },
                (Broker::Redis, None, _) => line.error = Some("redis unreachable".into()),
                (Broker::Redis, Some(stream), _) => {
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
pub(crate) fn render(lines: &[Line]) -> String {
    let cell = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
    let mut out = format!(
        "{:<40} {:<8} {:>10} {:>10} {:>8} {:>10} {:>14}\n",
        "COMPONENT", "STATE", "PENDING", "IN FLIGHT", "DEAD", "LAG", "OLDEST (s)"
    );
    for l in lines {
        out.push_str(&format!(
            "{:<40} {:<8} {:>10} {:>10} {:>8} {:>10} {:>14}",
            l.component,
            l.state,
            cell(l.pending),
            cell(l.in_flight),
            cell(l.dead),
            cell(l.lag),
            l.oldest_pending_age_seconds.map_or("-".to_owned(), |a| format!("{a:.1}")),
        ));
        if let Some(pause) = &l.paused {
            out.push_str(&format!(
                "  paused {:.0}s ago by {}{}",
                pause.paused_for_seconds,
                pause.paused_by,
                pause.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
            ));
        }
        if let Some(error) = &l.error {
            out.push_str(&format!("  error: {error}"));
        }
        out.push('\n');
    }
    out
}
