//! The checks that read more than one section: every connection's TLS, what the database allows
//! (the statements' placeholders, the locked claim, ordering), names used twice, apply, what a
//! relay or bridge asks of its broker; and the few of `[database]` and `[shutdown]`. Every other
//! section checks itself (`RelayConfig::problems`, `BridgeConfig::problems`, …). This calls them
//! all in one fixed order and returns every problem, each with its key path.

use std::collections::HashSet;

use crate::bridge::takeover::contract::{self as takeover_contract, TakeoverStatement};
use crate::config::file::Config;
use crate::relay::outbox::contract::{self as outbox_contract, StatementKind};
use crate::sql::params::{ParamError, Placeholder};
use crate::store::config::Dialect;
use crate::tls::config as tls;
use crate::tls::config::TlsMode;
use crate::worker::inbox::contract::WorkerStatement;

/// Every connection's TLS settings: modes the driver can honour, scheme and mode agreeing (the
/// certificate files are read when connecting; those errors name their key too). An HTTP
/// handler's other settings are checked here with its TLS.
fn validate_tls(config: &Config, dialect: Option<Dialect>) -> Vec<String> {
    let mut errors = Vec::new();
    let database = &config.database;
    let mode = database.tls_mode();
    errors.extend(tls::check_shape("database.tls", &database.tls, mode));
    if dialect == Some(Dialect::Mysql) && matches!(mode, TlsMode::Prefer | TlsMode::VerifyCa) {
        errors.push(format!(
            "database.tls.mode: {} cannot be honoured on MySQL / MariaDB (its driver cannot {}); use disable, require or verify-full",
            mode.name(),
            if mode == TlsMode::Prefer { "fall back to plain TCP" } else { "verify the chain without the host name" }
        ));
    }
    if dialect == Some(Dialect::Mysql) && database.tls.server_name.is_some() {
        errors.push(
            "database.tls.server_name cannot be honoured on MySQL / MariaDB (its driver checks the host it connects to)"
                .into(),
        );
    }
    let redis = &config.redis;
    let tls_scheme = redis.url.as_ref().is_some_and(|u| crate::broker::redis::config::redis_scheme_is_tls(u.expose()));
    if !tls_scheme && redis.tls.is_set() {
        errors.push(
            "redis.tls is set but redis.url is not a TLS URL; use rediss:// (or rediss-cluster://, rediss-sentinel://)"
                .into(),
        );
    }
    if tls_scheme {
        let mode = redis.tls_mode();
        errors.extend(tls::check_shape("redis.tls", &redis.tls, mode));
        if matches!(mode, TlsMode::Disable | TlsMode::Prefer) {
            errors.push(format!(
                "redis.tls.mode: {} makes no sense with rediss:// (always TLS); use redis:// for plain TCP",
                mode.name()
            ));
        }
    }
    for (i, worker) in config.workers.iter().enumerate() {
        for (h, handler) in worker.handlers.iter().enumerate() {
            if let Some(http) = &handler.http {
                errors.extend(http.problems(&format!("worker[{i}].handler[{h}].http")));
            }
        }
    }
    errors
}

pub(super) fn validate(config: &Config) -> Vec<String> {
    let mut errors = Vec::new();
    let dialect = config.database.url.as_ref().and_then(|url| Dialect::of(url.expose()));
    if config.database.url.is_some() && dialect.is_none() {
        errors.push("database.url: scheme must be postgres://, postgresql://, mysql:// or mariadb://".into());
    }
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
    errors.extend(validate_tls(config, dialect));
    if config.database.pool_size == 0 {
        errors.push("database.pool_size must be > 0".into());
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
