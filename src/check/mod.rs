//! `handoff check`: everything `run` would verify at startup, against the live database and
//! broker, reported all at once and without starting any work.

mod kafka;
pub(crate) mod nats;
mod servers;

use prometheus::Registry;
use tokio_util::sync::CancellationToken;

use std::sync::Arc;

use crate::bridge::takeover::Takeover;
use crate::bridge::validate::Validator;
use crate::broker::EventStream;
use crate::broker::nats::NatsStream;
use crate::broker::redis::RedisStream;
use crate::config::Config;
use crate::fault::Faults;
use crate::relay::entries::EntryBuilder;
use crate::relay::outbox::{Outbox, OutboxStore};
use crate::shards::Agreement;
use crate::store::{Database, PrepareError};
use crate::telemetry::health::Health;
use crate::telemetry::metrics::WorkerMetrics;
use crate::tls;
use crate::tls::TlsMode;
use crate::worker::config::WorkerConfig;
use crate::worker::inbox::Inbox;
use crate::worker::{Worker, WorkerDeps};

/// Returns the lines to print: `Ok` when everything checked out, `Err` with every problem.
pub(crate) async fn check(config: &Config) -> Result<Vec<String>, Vec<String>> {
    let mut ok = Vec::new();
    let mut problems = Vec::new();
    match crate::telemetry::http::Limits::from_config(&config.telemetry) {
        Ok(limits) => ok.push(format!(
            "telemetry: {} on {}, /metrics {}",
            if limits.tls.is_some() { "https" } else { "http" },
            config.telemetry.listen,
            if limits.auth.is_some() { "asks for credentials" } else { "open" }
        )),
        Err(e) => problems.push(e.to_string()),
    }
    // Redis where a relay or a bridge uses it, or where `[redis] url` names one (workers alone,
    // or NATS alone, need none).
    if config.uses(crate::broker::Broker::Redis) || config.redis.named {
        check_redis(config, &mut ok, &mut problems).await;
    }
    check_nats(config, &mut ok, &mut problems).await;
    check_kafka(config, &mut ok, &mut problems).await;
    ok.extend(crate::check::servers::database(config));
    let db = match Database::connect(&config.database, "handoff-check") {
        Ok(db) => db,
        Err(e) => {
            problems.push(format!("{e:#}"));
            return Err(problems);
        }
    };
    match db.probe().await {
        Ok(()) => match database_tls(config, &db).await {
            Ok(line) => ok.push(format!("database: reachable, {line}")),
            Err(e) => problems.push(format!("database: {e:#}")),
        },
        Err(e) => {
            problems.push(format!("database: {}", tls::explain("database.tls", &crate::error::error_chain(&e))));
            return Err(problems);
        }
    }
    ok.extend(crate::check::servers::notify_triggers(config, &db).await);
    for (path, url, tls) in https_handlers(config) {
        match https_tls(&path, &url, &tls).await {
            Ok(line) => ok.push(format!("{path}: {line}")),
            Err(e) => {
                let shown = crate::secret::redacted_url(&url);
                problems.push(format!("{path}: {shown}: {}", tls::explain(&format!("{path}.tls"), &format!("{e:#}"))))
            }
        }
    }
    for relay in &config.relays {
        match Outbox::prepare(&db, relay).await.map(|outbox| outbox.columns()) {
            Err(PrepareError::Invalid(errors)) => problems.extend(errors),
            Err(e) => problems.push(e.to_string()),
            Ok(columns) => match EntryBuilder::new(relay, &columns) {
                Ok(_) => {
                    ok.push(format!("relay `{}`: statements prepared, claim columns match", relay.name));
                    let (claim, chosen) = relay.claim_loop.claim_choice();
                    ok.push(format!("relay `{}`: claim = \"{claim}\" ({chosen})", relay.name));
                    ok.push(crate::relay::config::keep::described(relay));
                    match crate::shards::agree(&db, relay, false).await {
                        Ok(Agreement::NotSharded) => {}
                        Ok(Agreement::Agrees { family, count }) => {
                            ok.push(format!("relay `{}`: {count} shards of `{family}`", relay.name))
                        }
                        Ok(Agreement::Unguarded(why) | Agreement::Differs(why)) => problems.push(why),
                        Err(e) => problems.push(format!("relay `{}`: {}", relay.name, crate::error::error_chain(&e))),
                    }
                    match crate::relay::partitions::unfit(&db, relay).await {
                        Ok(None) if relay.partitions.is_some() => {
                            ok.push(format!("relay `{}`: `{}` is partitioned by created_at", relay.name, relay.table))
                        }
                        Ok(None) => {}
                        Ok(Some(why)) => problems.push(why),
                        Err(e) => problems.push(format!("relay `{}`: {}", relay.name, crate::error::error_chain(&e))),
                    }
                }
                Err(e) => problems.push(e.to_string()),
            },
        }
    }
    for bridge in &config.bridges {
        match Validator::new(&bridge.validate, &bridge.envelope) {
            Ok(_) => ok.push(format!("bridge `{}`: validation rules loaded", bridge.name)),
            Err(e) => problems.push(format!("bridge `{}` {e}", bridge.name)),
        }
        let checked = match Takeover::new(&db, bridge) {
            Ok(store) => store.check().await,
            Err(e) => Err(PrepareError::Invalid(vec![e.to_string()])),
        };
        match checked {
            Ok(()) => {
                ok.push(format!("bridge `{}`: inbox and poison tables accept the takeover", bridge.name));
                let applied = bridge.apply.as_deref().map_or("off".to_owned(), |w| format!("\"{w}\""));
                let chosen = bridge.apply_chosen.as_deref().unwrap_or("configured");
                ok.push(format!("bridge `{}`: apply = {applied} ({chosen})", bridge.name));
            }
            Err(PrepareError::Invalid(found)) => {
                problems.extend(found.iter().map(|e| format!("bridge `{}`: {e}", bridge.name)));
            }
            Err(e @ PrepareError::Unreachable(_)) => problems.push(format!("bridge `{}`: {e}", bridge.name)),
        }
    }
    for worker in &config.workers {
        let checked = match Inbox::new(&db, worker, Faults::default()) {
            Ok(store) => check_worker(worker, store).await,
            Err(e) => Err(e.into()),
        };
        match checked {
            Ok(()) => {
                ok.push(format!("worker `{}`: inbox and handler statements prepared", worker.name));
                let (claim, chosen) = worker.claim_loop.claim_choice();
                ok.push(format!("worker `{}`: claim = \"{claim}\" ({chosen})", worker.name));
            }
            Err(e) => problems.push(format!("{e:#}")),
        }
    }
    if problems.is_empty() { Ok(ok) } else { Err(problems) }
}

async fn check_worker(worker: &WorkerConfig, store: Inbox) -> anyhow::Result<()> {
    let style = store.placeholder();
    let deps = WorkerDeps {
        store,
        metrics: WorkerMetrics::register(&Registry::new()).expect("fresh registry").for_worker(&worker.name),
        health: Health::default().register("check", std::time::Duration::MAX, None),
        owner: "check".into(),
        abandon: CancellationToken::new(),
    };
    let built = Worker::new(worker.clone(), style, deps)?;
    // Every statement's message names its worker already; an unreachable database does not.
    built.check_statements(&built.handler_sql()).await.map_err(|e| match e {
        PrepareError::Invalid(found) => anyhow::anyhow!(found.join("\n")),
        other => anyhow::anyhow!("worker `{}`: {other}", worker.name),
    })
}

/// What the database connection negotiated, as the server reports it, and what was verified.
async fn database_tls(config: &Config, db: &Database) -> anyhow::Result<String> {
    let mode = config.database.tls_mode();
    let url = config.database.url.as_ref().map(|u| u.expose()).unwrap_or_default();
    let host = tls::host_port(url).map(|(h, _)| h).unwrap_or_default();
    match db.tls_session().await? {
        Some((version, cipher)) => Ok(format!("{version} {cipher}, {}", tls::summary(&host, mode).0)),
        None if mode == TlsMode::Prefer => {
            Ok(format!("NOT encrypted: tls mode prefer and the server `{host}` offers no TLS"))
        }
        None if mode == TlsMode::Disable => Ok(format!("not encrypted (tls mode disable, server `{host}`)")),
        None => anyhow::bail!("tls mode {} asked for TLS but the connection is not encrypted", mode.name()),
    }
}

/// The Redis deployment: reachable (saying how TLS went), and each relay's durability gate.
async fn check_redis(config: &Config, ok: &mut Vec<String>, problems: &mut Vec<String>) {
    match RedisStream::connect(&config.redis).await {
        Err(e) => problems.push(tls::explain("redis.tls", &e.to_string())),
        Ok((stream, _)) => match stream.ping().await {
            Ok(()) => {
                ok.push(format!("redis: reachable, {}", redis_tls(config).await));
                ok.extend(crate::check::servers::redis(&stream, config).await);
                for relay in &config.relays {
                    match stream.check_gate(&relay.name, relay.durability.as_ref().is_some_and(|d| d.aof)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => problems.push(e.to_string()),
                        Err(e) => problems.push(format!("redis: {e}")),
                    }
                }
            }
            // The client reports a failed handshake as a timeout: say what the handshake said.
            Err(e) if config.redis.tls_mode() != TlsMode::Disable => {
                let handshake = redis_tls(config).await;
                problems.push(format!("redis: {e}; {handshake}"))
            }
            Err(e) => problems.push(format!("redis: {e}")),
        },
    }
}

/// The Redis connection's TLS, from a handshake with the URL's (first) host.
async fn redis_tls(config: &Config) -> String {
    let mode = config.redis.tls_mode();
    let url = config.redis.url.as_ref().map(|u| u.expose()).unwrap_or_default();
    let (host, port) = tls::host_port(url).unwrap_or_default();
    if mode == TlsMode::Disable {
        return format!("not encrypted (redis://, server `{host}`)");
    }
    let session = async {
        let client = tls::client_config("redis.tls", mode, &config.redis.tls)?;
        let timeout = config.redis.command_timeout;
        anyhow::Ok(tls::probe(&host, port.unwrap_or(6379), Arc::new(client), timeout).await?)
    };
    match session.await {
        Ok(s) => format!("{} {}, {}", s.version, s.cipher, tls::summary(&host, mode).0),
        Err(e) => format!("TLS handshake with `{host}` failed: {}", tls::explain("redis.tls", &format!("{e:#}"))),
    }
}

/// Every HTTP handler with an https URL: (key path, url, tls table).
fn https_handlers(config: &Config) -> Vec<(String, String, crate::tls::TlsConfig)> {
    let mut found = Vec::new();
    for (i, worker) in config.workers.iter().enumerate() {
        for (h, handler) in worker.handlers.iter().enumerate() {
            if let Some(http) = handler.http.as_ref().filter(|http| http.url().starts_with("https://")) {
                found.push((format!("worker[{i}].handler[{h}].http"), http.url().to_owned(), http.tls.clone()));
            }
        }
    }
    found
}

/// A TLS handshake with an HTTPS handler's host, as the handler makes it.
async fn https_tls(path: &str, url: &str, tls_config: &crate::tls::TlsConfig) -> anyhow::Result<String> {
    let mode = tls_config.mode_or(TlsMode::VerifyFull);
    let (host, port) = tls::host_port(url).ok_or_else(|| anyhow::anyhow!("no host in the url"))?;
    let client = tls::client_config(&format!("{path}.tls"), mode, tls_config)?;
    let session = tls::probe(&host, port.unwrap_or(443), Arc::new(client), std::time::Duration::from_secs(5)).await?;
    Ok(format!("{} {}, {}", session.version, session.cipher, tls::summary(&host, mode).0))
}

/// The NATS server and its JetStream stream, for relays and bridges with `broker = "nats"`.
async fn check_nats(config: &Config, ok: &mut Vec<String>, problems: &mut Vec<String>) {
    let relays: Vec<_> = config.relays.iter().filter(|r| r.broker == crate::broker::Broker::Nats).collect();
    let bridges: Vec<_> = config.bridges.iter().filter(|b| b.broker == crate::broker::Broker::Nats).collect();
    let (Some(nats), false) = (&config.nats, relays.is_empty() && bridges.is_empty()) else { return };
    let stream = match NatsStream::connect(nats, "payload").await {
        Ok(stream) => stream,
        Err(e) => return problems.push(e.to_string()),
    };
    if !stream.connected().await {
        return problems.push(format!("nats: {} does not answer within {:?}", nats.url, nats.timeout));
    }
    match stream.settings().await {
        Err(e) => problems.push(format!("nats: {} ({e})", nats.url)),
        Ok(None) => problems.push(format!(
            "nats.stream: JetStream stream {} does not exist on {}; create it with subjects covering the relays' (file storage, a duplicate window above their retry horizon)",
            stream.stream_name(),
            nats.url
        )),
        Ok(Some(settings)) => {
            ok.push(format!("nats: reachable at {} (nats-server {})", nats.url, stream.server_version()));
            problems.extend(stream.version_problem());
            for relay in relays {
                let (fine, wrong) = crate::check::nats::review(stream.stream_name(), &settings, relay);
                ok.extend(fine);
                problems.extend(wrong);
            }
            for bridge in bridges {
                for (i, source) in bridge.streams.iter().enumerate() {
                    let name = stream.stream_name();
                    let subject = (bridge.name.as_str(), i, source.key.as_str());
                    let (fine, wrong) = crate::check::nats::review_bridge(name, &settings, subject);
                    ok.extend(fine);
                    problems.extend(wrong);
                }
            }
        }
    }
}

/// The Kafka cluster and the topics the relays and bridges with `broker = "kafka"` name.
async fn check_kafka(config: &Config, ok: &mut Vec<String>, problems: &mut Vec<String>) {
    let relays: Vec<_> = config.relays.iter().filter(|r| r.broker == crate::broker::Broker::Kafka).collect();
    let bridges: Vec<_> = config.bridges.iter().filter(|b| b.broker == crate::broker::Broker::Kafka).collect();
    let (Some(kafka), false) = (&config.kafka, relays.is_empty() && bridges.is_empty()) else { return };
    let (fine, wrong) = crate::check::kafka::check(kafka, &relays, &bridges).await;
    ok.extend(fine);
    problems.extend(wrong);
}
