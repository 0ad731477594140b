//! Wiring: builds every configured component from the config, runs them until the stop signal,
//! then drains within the grace period.

mod components;
mod shared;

use shared::{Shared, claimant_id};

use std::future::Future;
use std::time::Duration;

use anyhow::{Context, anyhow};
use prometheus::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::broker::nats::NatsStream;
use crate::broker::redis::RedisStream;
use crate::config::Config;
use crate::fault::Faults;
use crate::pause::{PauseMetrics, Pauses};
use crate::runtime::supervisor::Supervisor;
use crate::store::Database;
use crate::telemetry::health::Health;
use crate::telemetry::http::{self, Endpoints};
use crate::telemetry::metrics::{BridgeMetrics, RelayMetrics, WorkerMetrics};

/// Share of the grace period in-flight work gets to finish; the rest is for releasing what is
/// left and closing connections.
const DRAIN_SHARE: f64 = 0.7;

/// Every metric family of every component, registered on `registry` with one series each so
/// that every family encodes (for the metrics reference and its test; a running process
/// registers only what its components use).
pub fn register_metrics(registry: &Registry) -> prometheus::Result<()> {
    crate::telemetry::metrics::process::register(registry)?;
    let (relays, bridges) = (RelayMetrics::register(registry)?, BridgeMetrics::register(registry)?);
    let (workers, pauses) = (WorkerMetrics::register(registry)?, PauseMetrics::register(registry)?);
    pauses.set("relay", "reference", None);
    relays.for_relay("reference", "redis");
    bridges.for_stream("reference", "audit:user", "redis");
    let worker = workers.for_worker("reference");
    worker.processed("auth.*", 0.01);
    worker.failed("auth.*");
    worker.dead("auth.*");
    worker.endpoint_unavailable("auth.*");
    Ok(())
}

/// Runs until `stop` resolves, then drains. Returns an error if startup fails or if something
/// did not stop within `shutdown.grace_period`.
pub(crate) async fn run(config: Config, faults: Faults, stop: impl Future<Output = ()>) -> anyhow::Result<()> {
    let shared = Shared {
        registry: Registry::new(),
        health: Health::default(),
        shutdown: CancellationToken::new(),
        abandon: CancellationToken::new(),
        tasks: Supervisor::default(),
        faults,
        claimant: claimant_id(),
        pauses: Pauses::default(),
    };
    if let Some(tracing) = &config.telemetry.tracing {
        crate::telemetry::traces::install(tracing).map_err(|e| anyhow!(e))?;
    }
    let db = Database::connect(&config.database, "handoff").context("database")?;
    log_tls("database", &url_host(config.database.url.as_ref().map(|u| u.expose())), config.database.tls_mode());
    // Redis only where a relay or a bridge uses it: a deployment on NATS alone opens no client
    // to a Redis that is not there.
    let stream = if config.uses(crate::broker::Broker::Redis) {
        log_tls("redis", &url_host(config.redis.url.as_ref().map(|u| u.expose())), config.redis.tls_mode());
        let (stream, warning) = RedisStream::connect(&config.redis).await.context("redis")?;
        if let Some(warning) = warning {
            warn!(error = %warning, "redis not reachable yet; components wait for it");
        }
        Some(stream)
    } else {
        None
    };
    let nats = match &config.nats {
        Some(nats) if config.uses(crate::broker::Broker::Nats) => {
            // Connects in the background (an unreachable server is an outage the relay waits out).
            log_tls(
                "nats",
                &url_host(Some(nats.url.as_str())),
                if nats.tls_required() {
                    nats.tls.mode_or(crate::tls::TlsMode::VerifyFull)
                } else {
                    crate::tls::TlsMode::Disable
                },
            );
            let stream = NatsStream::connect(nats, "payload").await.map_err(|e| anyhow!(e))?;
            // The server's version is known once connected: say it, and warn of one too old.
            let announced = stream.clone();
            tokio::spawn(async move {
                if announced.connected().await {
                    match announced.version_problem() {
                        Some(problem) => warn!(%problem, "nats-server too old"),
                        None => info!(version = %announced.server_version(), "nats-server connected"),
                    }
                }
            });
            Some(stream)
        }
        _ => None,
    };
    // Kafka only where a relay uses it; librdkafka connects in the background.
    let kafka = match &config.kafka {
        Some(kafka) if config.uses(crate::broker::Broker::Kafka) => {
            let mode = if kafka.tls_required() { kafka.tls_mode() } else { crate::tls::TlsMode::Disable };
            // The first bootstrap server (`host:port`, no scheme) stands for the cluster.
            let first = kafka.bootstrap_servers.split(',').next().unwrap_or_default().trim();
            log_tls("kafka", &url_host(Some(format!("kafka://{first}").as_str())), mode);
            Some(crate::broker::kafka::KafkaStream::connect(kafka, "payload").context("kafka")?)
        }
        _ => None,
    };
    let server_stop = CancellationToken::new();
    let endpoints = Endpoints { registry: shared.registry.clone(), health: shared.health.clone() };
    let limits = http::Limits::from_config(&config.telemetry).map_err(|e| anyhow!(e))?;
    let (_, server) = http::bind(config.telemetry.listen, endpoints, limits, server_stop.clone())
        .await
        .with_context(|| format!("telemetry.listen {}", config.telemetry.listen))?;
    let server = tokio::spawn(server);
    let admin = match &config.admin {
        Some(_) => {
            let state = crate::admin::AdminState::new(
                std::sync::Arc::new(config.clone()),
                db.clone(),
                (stream.clone(), nats.clone()),
                shared.registry.clone(),
                shared.shutdown.clone(),
            );
            let (_, admin) =
                crate::admin::bind(std::sync::Arc::new(state), server_stop.clone()).await.with_context(|| {
                    format!("admin.listen {}", config.admin.as_ref().map(|a| a.listen.to_string()).unwrap_or_default())
                })?;
            Some(tokio::spawn(admin))
        }
        None => None,
    };
    tokio::pin!(stop);
    let started = tokio::select! {
        started = components::spawn_all(&config, &shared, &db, (stream.as_ref(), nats.as_ref(), kafka.as_ref())) => started?,
        _ = &mut stop => false,
    };
    shared.tasks.close();
    if started {
        tokio::select! {
            _ = &mut stop => {}
            _ = shared.tasks.failed() => {}
        }
    }
    let drained = drain(&shared, config.shutdown.grace_period).await;
    // A panicked task outranks a clean drain: the process must not look as if it stopped well.
    let result = match shared.tasks.failure() {
        Some(failure) => Err(anyhow!(failure)),
        None => drained,
    };
    server_stop.cancel();
    let _ = server.await;
    if let Some(admin) = admin {
        let _ = admin.await;
    }
    // Blocks until the last spans are exported (on this runtime): off the async threads.
    let _ = tokio::task::spawn_blocking(crate::telemetry::traces::shutdown).await;
    result
}

/// The host a connection URL names (the first of several), for the TLS line.
fn url_host(url: Option<&str>) -> String {
    url.and_then(crate::tls::host_port).map(|(host, _)| host).unwrap_or_default()
}

/// Stops claiming, gives in-flight work `DRAIN_SHARE` of the grace period, then abandons it
/// (what is left is released), and waits for every task up to the full grace period.
async fn drain(shared: &Shared, grace: Duration) -> anyhow::Result<()> {
    shared.shutdown.cancel();
    let abandon = shared.abandon.clone();
    let drain = grace.mul_f64(DRAIN_SHARE);
    tokio::spawn(async move {
        tokio::time::sleep(drain).await;
        abandon.cancel();
    });
    match tokio::time::timeout(grace, shared.tasks.wait()).await {
        Ok(()) => {
            info!("drained; exiting");
            Ok(())
        }
        Err(_) => {
            let stuck = shared.health.stalled();
            error!(tasks = shared.tasks.len(), ?stuck, "tasks did not stop within shutdown.grace_period");
            Err(anyhow!("{} task(s) did not stop within shutdown.grace_period", shared.tasks.len()))
        }
    }
}

/// Says once at startup how a connection to `host` is protected; warns when it leaves the
/// machine unverified.
fn log_tls(connection: &str, host: &str, mode: crate::tls::TlsMode) {
    let (line, unverified) = crate::tls::summary(host, mode);
    if unverified {
        warn!(connection, tls = %line, "connection not verified");
    } else {
        info!(connection, tls = %line, "connection security");
    }
}
