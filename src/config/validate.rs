//! The checks that read more than one section: what the database allows (the statements'
//! placeholders, the locked claim, ordering), names used twice, apply, what a relay or bridge
//! asks of its broker; and `[shutdown]`, the root's own section. Every other section checks
//! itself (`DatabaseConfig::problems`, `RelayConfig::problems`, …); this calls those too, in one
//! fixed order, and returns every problem, each with its key path.

use std::collections::HashSet;

use crate::bridge::takeover::contract::{self as takeover_contract, TakeoverStatement};
use crate::config::file::Config;
use crate::relay::outbox::contract::{self as outbox_contract, StatementKind};
use crate::sql::params::{ParamError, Placeholder};
use crate::store::config::Dialect;
use crate::worker::inbox::contract::WorkerStatement;

pub(super) fn validate(config: &Config) -> Vec<String> {
    let mut errors = config.database.problems();
    errors.extend(config.redis.problems());
    let dialect = config.database.dialect();
    let style = dialect.unwrap_or(Dialect::Postgres).placeholder();
    if dialect == Some(Dialect::Mysql) {
        for (i, relay) in config.relays.iter().enumerate() {
            if relay.ordering.is_some() || relay.notify.is_some() {
                errors.push(format!("relay[{i}]: ordering and notify need Postgres (commit-order horizon, LISTEN)"));
            }
            if relay.partitions.is_some() {
                errors.push(format!(
                    "relay[{i}].partitions: a partitioned outbox needs Postgres (on MariaDB use relay.retention)"
                ));
            }
        }
    }
    // Where an explicit locked claim cannot keep its promises (the rules `auto` follows too).
    for (i, relay) in config
        .relays
        .iter()
        .enumerate()
        .filter(|(_, r)| r.claim_loop.claim == crate::runtime::loop_config::ClaimMode::Locked)
    {
        errors.extend(
            super::claim::blockers(relay, dialect, &config.redis).iter().map(|b| b.error(&format!("relay[{i}]"))),
        );
    }
    for (i, worker) in config
        .workers
        .iter()
        .enumerate()
        .filter(|(_, w)| w.claim_loop.claim == crate::runtime::loop_config::ClaimMode::Locked)
    {
        errors.extend(super::claim::worker_blockers(worker, dialect).iter().map(|b| b.error(&format!("worker[{i}]"))));
    }
    let locked: u32 = config
        .relays
        .iter()
        .filter(|r| r.claim_loop.claim == crate::runtime::loop_config::ClaimMode::Locked)
        .map(|r| r.claim_loop.concurrency)
        .sum();
    errors.extend(super::claim::pool_blocker(config.database.pool_size, locked).map(|b| b.error("database")));
    errors.extend(config.pause.problems());
    if config.shutdown.grace_period.is_zero() {
        errors.push("shutdown.grace_period must be > 0".into());
    }
    errors.extend(config.telemetry.problems());
    errors.extend(super::nats::problems(config));
    errors.extend(super::kafka::problems(config));
    validate_bridges(config, style, &mut errors);
    validate_workers(config, style, &mut errors);
    let mut names = HashSet::new();
    for (i, relay) in config.relays.iter().enumerate() {
        let path = format!("relay[{i}]");
        if !names.insert(relay.name.as_str()) {
            errors.push(format!("{path}.name: `{}` is used by another relay", relay.name));
        }
        errors.extend(relay.problems(&path));
        for kind in StatementKind::ALL {
            if let Some(sql) = relay.sql.get(kind)
                && let Err(e) = check_statement(kind, sql, style)
            {
                errors.push(format!("{path}.sql.{}: {e}", kind.name()));
            }
        }
    }
    errors
}

/// A configured statement's parameters; on MySQL the claim is a script of statements, which
/// also see `:ids` (the ids the earlier ones returned).
fn check_statement(kind: StatementKind, sql: &str, style: Placeholder) -> Result<(), ParamError> {
    if style == Placeholder::Positional && kind == StatementKind::Claim {
        let parts = crate::sql::params::split_statements(sql, style)?;
        return parts.iter().try_for_each(|part| outbox_contract::check_params(kind, part, style));
    }
    outbox_contract::check_params(kind, sql, style)
}

fn validate_bridges(config: &Config, style: Placeholder, errors: &mut Vec<String>) {
    let mut names = HashSet::new();
    for (i, bridge) in config.bridges.iter().enumerate() {
        let path = format!("bridge[{i}]");
        if !names.insert(bridge.name.as_str()) {
            errors.push(format!("{path}.name is used by another bridge"));
        }
        errors.extend(bridge.problems(&path));
        if let Some(name) = bridge.apply.as_deref().filter(|n| *n != super::apply::OFF) {
            let problems = super::apply::problems(config, bridge, name, style);
            errors.extend(problems.into_iter().map(|p| format!("{path}.apply: {p}")));
        }
        for statement in TakeoverStatement::ALL {
            if let Some(sql) = bridge.sql.get(statement)
                && let Err(e) = takeover_contract::check_takeover(statement, sql, style)
            {
                errors.push(format!("{path}.sql.{}: {e}", statement.name()));
            }
        }
    }
}

fn validate_workers(config: &Config, style: Placeholder, errors: &mut Vec<String>) {
    let mut names = HashSet::new();
    for (i, worker) in config.workers.iter().enumerate() {
        let path = format!("worker[{i}]");
        if !names.insert(worker.name.as_str()) {
            errors.push(format!("{path}.name is used by another worker"));
        }
        errors.extend(worker.problems(&path));
        for statement in WorkerStatement::ALL {
            if let Some(sql) = worker.sql.get(statement)
                && let Err(e) = crate::sql::params::check_offered(sql, style, statement.params(), &[])
            {
                errors.push(format!("{path}.sql.{}: {e}", statement.name()));
            }
        }
    }
}
