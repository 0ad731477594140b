//! Cross-field checks that serde cannot express. Returns every problem, each with its key path.

use std::collections::HashSet;
use std::time::Duration;

use crate::bridge::takeover::contract::{self as takeover_contract, TakeoverStatement};
use crate::config::file::Config;
use crate::relay::config::RelayConfig;
use crate::relay::outbox::contract::{self as outbox_contract, StatementKind};
use crate::runtime::backoff::BackoffConfig;
use crate::sql::params::{ParamError, Placeholder};
use crate::store::config::Dialect;
use crate::template::Template;
use crate::tls::config as tls;
use crate::tls::config::TlsMode;
use crate::worker::inbox::contract::WorkerStatement;

/// Entry fields handoff writes itself; `fields` may not redefine them.
const RESERVED_FIELDS: &[&str] =
    &["event_id", "event_type", "aggregate_type", "aggregate_id", "payload", "headers", "owner"];

/// Every connection's TLS settings: modes the driver can honour, scheme and mode agreeing. (The
/// certificate files are read when connecting; those errors name their key too.)
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
                let path = format!("worker[{i}].handler[{h}].http");
                errors.extend(validate_http_tls(&path, http));
                errors.extend(validate_http_headers(&path, http));
                if !(1..=256).contains(&http.concurrency) {
                    errors.push(format!("{path}.concurrency must be between 1 and 256"));
                }
            }
        }
    }
    errors
}

/// Header rules of an HTTP handler: no event header that would steer the call, no constant
/// that would frame it.
fn validate_http_headers(path: &str, http: &crate::worker::config::HttpHandlerConfig) -> Vec<String> {
    let mut errors = Vec::new();
    for name in &http.forward_headers {
        if crate::worker::config::never_forwarded(&name.to_ascii_lowercase()) {
            errors.push(format!("{path}.forward_headers: `{name}` is never taken from an event (it frames, routes or authenticates the call)"));
        }
    }
    for name in http.headers.keys() {
        if crate::worker::config::reserved_request_header(&name.to_ascii_lowercase()) {
            errors.push(format!("{path}.headers.{name}: handoff sets this header itself"));
        }
    }
    errors
}

fn validate_http_tls(path: &str, http: &crate::worker::config::HttpHandlerConfig) -> Vec<String> {
    let https = http.url().trim_start().to_ascii_lowercase().starts_with("https://");
    if !https {
        return if http.tls.is_set() {
            vec![format!("{path}.tls is set but {path}.url is not https://")]
        } else {
            vec![]
        };
    }
    let mode = http.tls.mode_or(TlsMode::VerifyFull);
    let mut errors = tls::check_shape(&format!("{path}.tls"), &http.tls, mode);
    if matches!(mode, TlsMode::Disable | TlsMode::Prefer) {
        errors
            .push(format!("{path}.tls.mode: {} makes no sense with https://; use http:// for plain TCP", mode.name()));
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
    if config.telemetry.header_read_timeout.is_zero() {
        errors.push("telemetry.header_read_timeout must be > 0".into());
    }
    if config.telemetry.max_connections == 0 {
        errors.push("telemetry.max_connections must be > 0".into());
    }
    if config.telemetry.sample_interval.is_zero() {
        errors.push("telemetry.sample_interval must be > 0".into());
    }
    if let Some(tracing) = &config.telemetry.tracing {
        if tracing.sample_ratio.is_some_and(|r| !(0.0..=1.0).contains(&r)) {
            errors.push("telemetry.tracing.sample_ratio must be between 0 and 1".into());
        }
        if tracing.timeout.is_zero() {
            errors.push("telemetry.tracing.timeout must be > 0".into());
        }
    }
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
        validate_relay(&path, relay, style, &mut errors);
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

fn validate_relay(path: &str, relay: &RelayConfig, style: Placeholder, errors: &mut Vec<String>) {
    let mut check = |ok: bool, message: &str| {
        if !ok {
            errors.push(format!("{path}.{message}"));
        }
    };
    check(is_label(&relay.name), "name must be 1-64 characters of [A-Za-z0-9_.-]");
    check(is_identifier(&relay.table), "table must be a plain or schema-qualified identifier");
    check((1..=10_000).contains(&relay.claim_loop.batch_size), "batch_size must be between 1 and 10000");
    check((1..=64).contains(&relay.claim_loop.concurrency), "concurrency must be between 1 and 64");
    check(!relay.claim_loop.poll_interval.is_zero(), "poll_interval must be > 0");
    check(relay.claim_loop.lease >= Duration::from_millis(100), "lease must be at least 100ms");
    check(relay.claim_loop.max_attempts >= 1, "max_attempts must be >= 1");
    check(relay.max_expired_claims >= 1, "max_expired_claims must be >= 1");
    check(relay.payload_max_bytes >= 2, "payload_max_bytes must be >= 2");
    // 512 MB is what one Redis bulk string may hold at most (proto-max-bulk-len's default).
    check(
        (relay.payload_max_bytes..=512 << 20).contains(&relay.entry_max_bytes),
        "entry_max_bytes must be at least payload_max_bytes and at most 536870912",
    );
    validate_backoff(&format!("{path}.backoff"), &relay.claim_loop.backoff, errors);
    validate_backoff(&format!("{path}.outage_backoff"), &relay.claim_loop.outage_backoff, errors);
    super::keep::validate(relay, path, errors);
    if let Some(dedupe) = &relay.dedupe {
        if dedupe.window < relay.claim_loop.lease * 2 {
            errors.push(format!(
                "{path}.dedupe.window must be at least twice the lease (a takeover happens after it expires)"
            ));
        }
        if dedupe.key_prefix.is_empty() || dedupe.key_prefix.contains(['{', '}']) {
            errors.push(format!("{path}.dedupe.key_prefix must be non-empty and hold no braces"));
        }
    }
    if relay.notify.as_ref().is_some_and(|n| n.channel.is_empty()) {
        errors.push(format!("{path}.notify.channel must not be empty"));
    }
    if let Some(gate) = &relay.durability {
        if gate.replicas == 0 && !gate.aof {
            errors.push(format!("{path}.durability: set replicas > 0 (WAIT) and/or aof = true (WAITAOF)"));
        }
        if gate.timeout.is_zero() {
            errors.push(format!("{path}.durability.timeout must be > 0"));
        }
    }
    let loss = &relay.broker_loss;
    if loss.enabled && (loss.check_interval.is_zero() || loss.lookback.is_zero() || loss.max_window < loss.lookback) {
        errors.push(format!(
            "{path}.broker_loss: check_interval and lookback must be > 0 and max_window at least lookback"
        ));
    }
    if let Some(partitions) = &relay.partitions {
        errors.extend(partitions.problems(path));
        if relay.retention.as_ref().is_some_and(|r| r.enabled) {
            errors.push(format!(
                "{path}: partitions drops old partitions and retention deletes old rows: choose one (partitions)"
            ));
        }
    }
    if let Err(e) = Template::parse(&relay.stream) {
        errors.push(format!("{path}.stream: {e}"));
    }
    for (field, template) in &relay.fields {
        if RESERVED_FIELDS.contains(&field.as_str()) {
            errors.push(format!("{path}.fields.{field}: `{field}` is written by handoff itself"));
        }
        if let Err(e) = Template::parse(template) {
            errors.push(format!("{path}.fields.{field}: {e}"));
        }
    }
    validate_envelope(path, relay, errors);
    for kind in StatementKind::ALL {
        if let Some(sql) = relay.sql.get(kind)
            && let Err(e) = check_statement(kind, sql, style)
        {
            errors.push(format!("{path}.sql.{}: {e}", kind.name()));
        }
    }
}

/// `[relay.envelope]`: the whole entry, so it must name the event id, and it replaces what the
/// built-in layout adds (`owner`, `fields`).
fn validate_envelope(path: &str, relay: &RelayConfig, errors: &mut Vec<String>) {
    if relay.envelope.is_empty() {
        return;
    }
    if !relay.fields.is_empty() {
        errors.push(format!("{path}.fields: with an envelope, write every field in {path}.envelope (in entry order)"));
    }
    if relay.owner.is_some() {
        errors.push(format!(
            "{path}.owner: with an envelope, write the owner as a field of {path}.envelope (a constant)"
        ));
    }
    let mut carries_id = false;
    for (field, template) in &relay.envelope {
        if field.is_empty() {
            errors.push(format!("{path}.envelope: a field name is empty"));
        }
        match Template::parse(template) {
            // Percent-encoded, only in a `ce-` header on NATS, which a bridge decodes.
            Ok(t) => {
                let decoded =
                    relay.broker == crate::broker::Broker::Nats && crate::percent::encoded_header(field.as_bytes());
                carries_id |=
                    t.carried_column().is_some_and(|(column, percent)| column == "event_id" && (!percent || decoded))
            }
            Err(e) => errors.push(format!("{path}.envelope.{field}: {e}")),
        }
    }
    if !carries_id {
        errors.push(format!(
            "{path}.envelope: no field is \"{{event_id}}\"; consumers take events over by their id, so one field must carry it"
        ));
    }
}

fn validate_backoff(path: &str, backoff: &BackoffConfig, errors: &mut Vec<String>) {
    if backoff.initial.is_zero() {
        errors.push(format!("{path}.initial must be > 0"));
    }
    if backoff.max < backoff.initial {
        errors.push(format!("{path}.max must be >= initial"));
    }
    if !(backoff.multiplier >= 1.0 && backoff.multiplier <= 10.0) {
        errors.push(format!("{path}.multiplier must be between 1 and 10"));
    }
    if !(0.0..1.0).contains(&backoff.jitter) {
        errors.push(format!("{path}.jitter must be >= 0 and < 1"));
    }
}

fn is_label(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

fn is_identifier(name: &str) -> bool {
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let parts: Vec<&str> = name.split('.').collect();
    parts.len() <= 2 && parts.iter().all(|p| part_ok(p))
}

fn validate_bridges(config: &Config, style: Placeholder, errors: &mut Vec<String>) {
    let mut names = HashSet::new();
    for (i, bridge) in config.bridges.iter().enumerate() {
        let path = format!("bridge[{i}]");
        let mut check = |ok: bool, message: &str| {
            if !ok {
                errors.push(format!("{path}.{message}"));
            }
        };
        check(names.insert(bridge.name.as_str()), "name is used by another bridge");
        check(is_label(&bridge.name), "name must be 1-64 characters of [A-Za-z0-9_.-]");
        check(!bridge.consumer.is_empty(), "consumer must not be empty");
        check(!bridge.streams.is_empty(), "streams must name at least one stream");
        check(bridge.streams.iter().all(|s| !s.key.is_empty()), "streams: every key must be non-empty");
        check(bridge.start == "0" || bridge.start == "$", "start must be \"0\" or \"$\"");
        check((1..=10_000).contains(&bridge.batch_size), "batch_size must be between 1 and 10000");
        check((1..=16).contains(&bridge.concurrency), "concurrency must be between 1 and 16");
        check(bridge.batch_bytes >= 1024, "batch_bytes must be at least 1024");
        check(!bridge.block.is_zero(), "block must be > 0");
        check(bridge.claim_idle >= Duration::from_millis(100), "claim_idle must be at least 100ms");
        check(bridge.max_deliveries >= 1, "max_deliveries must be >= 1");
        let tables = [&bridge.table, &bridge.poison_table, &bridge.deliveries_table];
        for (key, table) in ["table", "poison_table", "deliveries_table"].into_iter().zip(tables) {
            check(is_identifier(table), &format!("{key} must be a plain or schema-qualified identifier"));
        }
        check(bridge.validate.event_id_max_len >= 1, "validate.event_id_max_len must be >= 1");
        check(bridge.validate.payload_max_bytes >= 2, "validate.payload_max_bytes must be >= 2");
        let envelope = &bridge.envelope;
        let mut fields = HashSet::new();
        for (i, (key, field)) in envelope.all().into_iter().enumerate() {
            if field.is_empty() {
                check(i >= 3, &format!("envelope.{key} must name an entry field"));
            } else {
                check(fields.insert(field), &format!("envelope.{key}: field `{field}` is mapped twice"));
            }
        }
        if envelope.owner.is_empty() {
            check(
                bridge.streams.iter().all(|s| s.owner.is_none()),
                "streams: an owner to check is set, but envelope.owner says entries carry none",
            );
        }
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
        let mut check = |ok: bool, message: &str| {
            if !ok {
                errors.push(format!("{path}.{message}"));
            }
        };
        check(names.insert(worker.name.as_str()), "name is used by another worker");
        check(is_label(&worker.name), "name must be 1-64 characters of [A-Za-z0-9_.-]");
        check(!worker.consumer.is_empty(), "consumer must not be empty");
        check(is_identifier(&worker.table), "table must be a plain or schema-qualified identifier");
        check((1..=10_000).contains(&worker.claim_loop.batch_size), "batch_size must be between 1 and 10000");
        check((1..=64).contains(&worker.claim_loop.concurrency), "concurrency must be between 1 and 64");
        check(!worker.claim_loop.poll_interval.is_zero(), "poll_interval must be > 0");
        check(worker.claim_loop.lease >= Duration::from_millis(100), "lease must be at least 100ms");
        check(worker.claim_loop.max_attempts >= 1, "max_attempts must be >= 1");
        check(worker.max_expired_leases >= 1, "max_expired_leases must be >= 1");
        for (h, handler) in worker.handlers.iter().enumerate() {
            let ok = handler.event_types.iter().all(|t| !t.is_empty()) && !handler.event_types.is_empty();
            check(ok, &format!("handler[{h}].event_types must list at least one non-empty type"));
            let one = handler.sql.is_empty() != handler.http.is_none();
            check(one, &format!("handler[{h}]: set exactly one of sql, http"));
        }
        validate_backoff(&format!("{path}.backoff"), &worker.claim_loop.backoff, errors);
        validate_backoff(&format!("{path}.outage_backoff"), &worker.claim_loop.outage_backoff, errors);
        for statement in WorkerStatement::ALL {
            if let Some(sql) = worker.sql.get(statement)
                && let Err(e) = crate::sql::params::check_offered(sql, style, statement.params(), &[])
            {
                errors.push(format!("{path}.sql.{}: {e}", statement.name()));
            }
        }
    }
}
