//! Wiring: builds every configured component from the config, runs them until the stop signal,
//! then drains within the grace period.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use prometheus::Registry;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::config::{Config, RelayConfig};
use crate::fault::Faults;
use crate::relay::{Relay, RelayDeps, Retrier};
use crate::store::postgres::{self, PgOutbox, PrepareError};
use crate::stream::redis::RedisStream;
use crate::telemetry::health::Health;
use crate::telemetry::http::{self, Endpoints};
use crate::telemetry::metrics::RelayMetrics;

/// Share of the grace period in-flight batches get to finish; the rest is for releasing rows
/// and closing connections.
const DRAIN_SHARE: f64 = 0.7;

/// Shared pieces every component is built from.
struct Shared {
    registry: Registry,
    health: Health,
    shutdown: CancellationToken,
    abandon: CancellationToken,
    faults: Faults,
    claimant: String,
}

/// Runs until `stop` resolves, then drains. Returns an error if startup fails or if something
/// did not stop within `shutdown.grace_period`.
pub async fn run(config: Config, faults: Faults, stop: impl Future<Output = ()>) -> anyhow::Result<()> {
    let shared = Shared {
        registry: Registry::new(),
        health: Health::default(),
        shutdown: CancellationToken::new(),
        abandon: CancellationToken::new(),
        faults,
        claimant: claimant_id(),
    };
    let tracker = TaskTracker::new();
    let pool = postgres::pool(&config.database, "handoff").context("database")?;
    let (stream, warning) = RedisStream::connect(&config.redis).await.context("redis")?;
    if let Some(warning) = warning {
        warn!(error = %warning, "redis not reachable yet; relays wait for it");
    }
    let relay_metrics = RelayMetrics::register(&shared.registry)?;
    for relay_config in &config.relays {
        let sampler_stop = shared.shutdown.clone();
        let Some(store) = prepare_with_retry(pool.clone(), relay_config, &shared.shutdown).await? else {
            return Ok(());
        };
        let relay = build_relay(relay_config, store, stream.clone(), &relay_metrics, &shared, &config)?;
        info!(relay = relay.name(), claimant = %shared.claimant, "relay started");
        let sampler = relay.clone();
        let interval = config.telemetry.sample_interval;
        tracker.spawn(async move { sampler.sample(interval, sampler_stop).await });
        tracker.spawn(relay.run(shared.shutdown.clone()));
    }
    let server_stop = CancellationToken::new();
    let endpoints = Endpoints { registry: shared.registry.clone(), health: shared.health.clone() };
    let (_, server) = http::bind(config.telemetry.listen, endpoints, server_stop.clone())
        .await
        .with_context(|| format!("telemetry.listen {}", config.telemetry.listen))?;
    let server = tokio::spawn(server);
    tracker.close();

    stop.await;
    let result = drain(&shared, &tracker, config.shutdown.grace_period).await;
    server_stop.cancel();
    let _ = server.await;
    result
}

fn build_relay(
    relay_config: &RelayConfig,
    store: PgOutbox,
    stream: RedisStream,
    metrics: &RelayMetrics,
    shared: &Shared,
    config: &Config,
) -> anyhow::Result<Arc<Relay<PgOutbox, RedisStream>>> {
    let stall_after = 2 * (relay_config.lease + relay_config.outage_backoff.max + relay_config.poll_interval);
    let deps = RelayDeps {
        store,
        stream,
        metrics: metrics.for_relay(&relay_config.name),
        health: shared.health.register(format!("relay {}", relay_config.name), stall_after),
        faults: shared.faults.clone(),
        claimant: format!("{}/{}", shared.claimant, relay_config.name),
        abandon: shared.abandon.clone(),
        release_timeout: config.shutdown.grace_period.mul_f64(0.2),
    };
    Ok(Arc::new(Relay::new(relay_config.clone(), deps).map_err(|e| anyhow!(e))?))
}

/// Prepares a relay's statements, waiting for the database if it is not up yet. Statement
/// errors fail startup at once. `None` if shutdown came first.
async fn prepare_with_retry(
    pool: deadpool_postgres::Pool,
    relay: &RelayConfig,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<PgOutbox>> {
    let mut retrier = Retrier::new(relay.outage_backoff.clone());
    loop {
        match PgOutbox::prepare(pool.clone(), relay).await {
            Ok(store) => return Ok(Some(store)),
            Err(PrepareError::Invalid(errors)) => {
                return Err(anyhow!("relay `{}` statements are invalid:\n  - {}", relay.name, errors.join("\n  - ")));
            }
            Err(PrepareError::Unreachable(message)) => {
                let wait = retrier.failed();
                warn!(relay = %relay.name, error = %message, retry_in_ms = wait.as_millis() as u64, "database not reachable yet");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.cancelled() => return Ok(None),
                }
            }
        }
    }
}

/// Stops claiming, gives in-flight work `DRAIN_SHARE` of the grace period, then abandons it
/// (rows are released), and waits for every task up to the full grace period.
async fn drain(shared: &Shared, tracker: &TaskTracker, grace: Duration) -> anyhow::Result<()> {
    shared.shutdown.cancel();
    let abandon = shared.abandon.clone();
    let drain = grace.mul_f64(DRAIN_SHARE);
    tokio::spawn(async move {
        tokio::time::sleep(drain).await;
        abandon.cancel();
    });
    match tokio::time::timeout(grace, tracker.wait()).await {
        Ok(()) => {
            info!("drained; exiting");
            Ok(())
        }
        Err(_) => {
            let stuck = shared.health.stalled();
            error!(tasks = tracker.len(), ?stuck, "tasks did not stop within shutdown.grace_period");
            Err(anyhow!("{} task(s) did not stop within shutdown.grace_period", tracker.len()))
        }
    }
}

/// `host:pid:nonce` – unique per process even when every container is PID 1 on the same host name.
fn claimant_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown-host".into());
    let nonce: u32 = rand::random();
    format!("{host}:{}:{nonce:08x}", std::process::id())
}
