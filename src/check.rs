//! `handoff check`: everything `run` would verify at startup, against the live database and
//! broker, reported all at once and without starting any work.

use prometheus::Registry;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, WorkerConfig};
use crate::fault::Faults;
use crate::inbox::validate::Validator;
use crate::relay::entries::EntryBuilder;
use crate::store::database::{Database, Dialect};
use crate::store::inbox::WorkerStore;
use crate::store::mysql::{MyInbox, MyOutbox, MyWorker};
use crate::store::postgres::{PgInbox, PgOutbox, PgWorker};
use crate::store::{OutboxStore, PrepareError};
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
    let db = Database::connect(&config.database, "handoff-check").map_err(|e| vec![e.to_string()])?;
    match db.probe().await {
        Ok(()) => ok.push("database: reachable".to_owned()),
        Err(e) => {
            problems.push(format!("database: {}", crate::relay::error_chain(&e)));
            return Err(problems);
        }
    }
    for relay in &config.relays {
        let prepared = match &db {
            Database::Postgres(pool) => relay_columns(PgOutbox::prepare(pool.clone(), relay).await),
            Database::Mysql(pool) => relay_columns(MyOutbox::prepare(pool.clone(), relay).await),
        };
        match prepared {
            Err(PrepareError::Invalid(errors)) => problems.extend(errors),
            Err(e) => problems.push(e.to_string()),
            Ok(columns) => match EntryBuilder::new(relay, &columns) {
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
        let checked = match &db {
            Database::Postgres(pool) => PgInbox::new(pool.clone(), &bridge.table, &bridge.poison_table).check().await,
            Database::Mysql(pool) => MyInbox::new(pool.clone(), &bridge.table, &bridge.poison_table).check().await,
        };
        match checked {
            Ok(()) => ok.push(format!("bridge `{}`: inbox and poison tables accept the takeover", bridge.name)),
            Err(e) => problems.push(format!("bridge `{}`: {e}", bridge.name)),
        }
    }
    for worker in &config.workers {
        let checked = match &db {
            Database::Postgres(pool) => {
                let store = PgWorker::new(pool.clone(), &worker.table, &worker.consumer, Faults::default());
                check_worker(worker, store, Dialect::Postgres).await
            }
            Database::Mysql(pool) => {
                let store = MyWorker::new(pool.clone(), &worker.table, &worker.consumer, Faults::default());
                check_worker(worker, store, Dialect::Mysql).await
            }
        };
        match checked {
            Ok(()) => ok.push(format!("worker `{}`: inbox and handler statements prepared", worker.name)),
            Err(e) => problems.push(e),
        }
    }
    if problems.is_empty() { Ok(ok) } else { Err(problems) }
}

fn relay_columns<S: OutboxStore>(prepared: Result<S, PrepareError>) -> Result<std::sync::Arc<[String]>, PrepareError> {
    prepared.map(|store| store.columns())
}

async fn check_worker<S: WorkerStore>(worker: &WorkerConfig, store: S, dialect: Dialect) -> Result<(), String> {
    let deps = WorkerDeps {
        store,
        metrics: WorkerMetrics::register(&Registry::new()).expect("fresh registry").for_worker(&worker.name),
        health: Health::default().register("check", std::time::Duration::MAX),
        owner: "check".into(),
        abandon: CancellationToken::new(),
    };
    let built = Worker::new(worker.clone(), dialect.placeholder(), deps)?;
    built.check_statements(&built.handler_sql()).await.map_err(|e| format!("worker `{}`: {e}", worker.name))
}
