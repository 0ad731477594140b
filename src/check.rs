//! `handoff check`: everything `run` would verify at startup, against the live database and
//! broker, reported all at once and without starting any work.

use crate::config::Config;
use crate::relay::entries::EntryBuilder;
use crate::store::postgres::{self, PgOutbox, PrepareError};
use crate::stream::EventStream;
use crate::stream::redis::RedisStream;

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
    if problems.is_empty() { Ok(ok) } else { Err(problems) }
}
