//! `handoff check`: everything `run` would verify at startup, against the live database and
//! broker, reported all at once and without starting any work.

use prometheus::Registry;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::fault::Faults;
use crate::inbox::validate::Validator;
use crate::relay::entries::EntryBuilder;
use crate::sql::params::Placeholder;
use crate::store::postgres::{self, PgOutbox, PrepareError};
use crate::store::postgres::{PgInbox, PgWorker};
use crate::stream::EventStream;
use crate::stream::redis::RedisStream;
use crate::telemetry::health::Health;
use crate::telemetry::metrics::WorkerMetrics;
use crate::worker::{Worker, WorkerDeps};

/// Returns the lines to print: `Ok` when everything checked out, `Err` with every problem.
pub async fn check(config: &Config) -> Result<Vec<String>, Vec<String>> {
    let mut ok = Vec::new();
    let mut problems = Vec::new();
    match RedisStream::connect(&config.redis).await {
        Err(e) => problems.push(e.to_string()),
        Ok((stream, _)) => match stream.ping().await {
            Ok(()) => ok.push("redis: reachable".to_owned()),
            Err(e) => problems.push(format!("redis: {e}")),
        },
    }
    let pool = match postgres::pool(&config.database, "handoff-check") {
        Ok(pool) => pool,
        Err(e) => return Err(vec![e.to_string()]),
    };
    match postgres::probe(&pool).await {
        Ok(()) => ok.push("database: reachable".to_owned()),
        Err(e) => {
            problems.push(format!("database: {}", crate::relay::error_chain(&e)));
            return Err(problems);
        }
    }
    for relay in &config.relays {
        match PgOutbox::prepare(pool.clone(), relay).await {
            Err(PrepareError::Invalid(errors)) => problems.extend(errors),
            Err(e @ PrepareError::Unreachable(_)) => problems.push(e.to_string()),
            Ok(store) => match EntryBuilder::new(relay, &crate::store::OutboxStore::columns(&store)) {
                Ok(_) => ok.push(format!("relay `{}`: statements prepared, claim columns match", relay.name)),
                Err(e) => problems.push(e),
            },
        }
    }
    for bridge in &config.bridges {
        match Validator::new(&bridge.validate) {
            Ok(_) => ok.push(format!("bridge `{}`: validation rules loaded", bridge.name)),
            Err(e) => problems.push(format!("bridge `{}` {e}", bridge.name)),
        }
        let inbox = PgInbox::new(pool.clone(), &bridge.table, &bridge.poison_table);
        match inbox.check().await {
            Ok(()) => ok.push(format!("bridge `{}`: inbox and poison tables accept the takeover", bridge.name)),
            Err(e) => problems.push(format!("bridge `{}`: {e}", bridge.name)),
        }
    }
    for worker in &config.workers {
        let store = PgWorker::new(pool.clone(), &worker.table, &worker.consumer, Faults::default());
        let deps = WorkerDeps {
            store,
            metrics: WorkerMetrics::register(&Registry::new()).expect("fresh registry").for_worker(&worker.name),
            health: Health::default().register("check", std::time::Duration::MAX),
            owner: "check".into(),
            abandon: CancellationToken::new(),
        };
        match Worker::new(worker.clone(), Placeholder::Numbered, deps) {
            Err(e) => problems.push(e),
            Ok(built) => match built.check_statements(&built.handler_sql()).await {
                Ok(()) => ok.push(format!("worker `{}`: inbox and handler statements prepared", worker.name)),
                Err(e) => problems.push(format!("worker `{}`: {e}", worker.name)),
            },
        }
    }
    if problems.is_empty() { Ok(ok) } else { Err(problems) }
}
