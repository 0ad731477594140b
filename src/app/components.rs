//! Builds each configured component with its dependencies and spawns it (and its sampler).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use anyhow::anyhow;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::shared::{Shared, host_name};
use crate::bridge::config::{BridgeConfig, StreamSource};
use crate::bridge::takeover::Takeover;
use crate::bridge::validate::Validator;
use crate::bridge::{Apply, BridgeDeps, StreamBridge};
use crate::broker::Broker;
use crate::broker::EventStream;
use crate::broker::group::ConsumerGroup;
use crate::broker::kafka::KafkaStream;
use crate::broker::kafka::group::KafkaGroup;
use crate::broker::nats::NatsStream;
use crate::broker::redis::{RedisGroup, RedisStream};
use crate::config::Config;
use crate::pause::{ComponentKind, PauseMetrics, Target};
use crate::relay::config::RelayConfig;
use crate::relay::outbox::Outbox;
use crate::relay::partitions::PartitionKeeper;
use crate::relay::wake::{self, Wake};
use crate::relay::{Relay, RelayDeps};
use crate::runtime::backoff::BackoffConfig;
use crate::runtime::backoff::Retrier;
use crate::shards::Agreement;
use crate::sql::params::Placeholder;
use crate::store::{Database, PrepareError, StatementError};
use crate::telemetry::metrics::{BridgeMetrics, RelayMetrics, WorkerMetrics};
use crate::worker::config::WorkerConfig;
use crate::worker::inbox::Inbox;
use crate::worker::{Worker, WorkerDeps};

/// Spawns every relay, bridge and worker on `shared.tasks`. `Ok(false)` if shutdown came
/// while waiting for the database.
pub(super) async fn spawn_all(
    config: &Config,
    shared: &Shared,
    db: &Database,
    (stream, nats, kafka): (Option<&RedisStream>, Option<&NatsStream>, Option<&KafkaStream>),
) -> anyhow::Result<bool> {
    crate::telemetry::metrics::process::register(&shared.registry)?;
    let relay_metrics = RelayMetrics::register(&shared.registry)?;
    let bridge_metrics = BridgeMetrics::register(&shared.registry)?;
    let worker_metrics = WorkerMetrics::register(&shared.registry)?;
    watch_pauses(config, shared, db)?;
    for relay in &config.relays {
        if !spawn_relay(config, relay, shared, db, (stream, nats, kafka), &relay_metrics).await? {
            return Ok(false);
        }
    }
    for bridge in &config.bridges {
        let style = db.placeholder();
        let store = || Takeover::new(db, bridge);
        let instance = bridge.instance.clone().unwrap_or_else(host_name);
        match (bridge.broker, stream, nats) {
            (Broker::Redis, Some(stream), _) => {
                let timeout = config.redis.command_timeout;
                let group = |source: &StreamSource, consumer: &str| {
                    RedisGroup::new(stream, &source.key, bridge.group(), consumer, timeout)
                };
                spawn_bridge(config, (bridge, &instance), shared, store, (group, style), &bridge_metrics)?
            }
            (Broker::Nats, _, Some(nats)) => {
                let group =
                    |source: &StreamSource, consumer: &str| nats.group(bridge.nats_group(&source.key, consumer));
                spawn_bridge(config, (bridge, &instance), shared, store, (group, style), &bridge_metrics)?
            }
            (Broker::Nats, _, None) => {
                return Err(anyhow!("bridge `{}`: broker = \"nats\" without [nats]", bridge.name));
            }
            (Broker::Redis, None, _) => return Err(anyhow!("bridge `{}`: no Redis client", bridge.name)),
            (Broker::Kafka, _, _) => {
                let kafka = config
                    .kafka
                    .as_ref()
                    .ok_or_else(|| anyhow!("bridge `{}`: broker = \"kafka\" without [kafka]", bridge.name))?;
                // Each member is made here, where a client librdkafka refuses is an error at
                // start, not a panic in a loop.
                let mut members = HashMap::new();
                for source in &bridge.streams {
                    for consumer in bridge.consumer_names(&instance) {
                        let settings = bridge.kafka_group(&source.key, &consumer);
                        let member = KafkaGroup::new(kafka, settings)
                            .map_err(|e| anyhow!("bridge `{}` {}: {e}", bridge.name, source.key))?;
                        members.insert((source.key.clone(), consumer), member);
                    }
                }
                let members = std::sync::Mutex::new(members);
                let group = |source: &StreamSource, consumer: &str| {
                    let mut members = members.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    members
                        .remove(&(source.key.clone(), consumer.to_owned()))
                        .expect("a member per stream and consumer")
                };
                spawn_bridge(config, (bridge, &instance), shared, store, (group, style), &bridge_metrics)?
            }
        }
    }
    for worker in &config.workers {
        let store = Inbox::new(db, worker, shared.faults.clone()).map_err(|e| anyhow!(e))?;
        if !spawn_worker(config, worker, shared, store, &worker_metrics).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The task that reads the pauses in force for every component of this process.
fn watch_pauses(config: &Config, shared: &Shared, db: &Database) -> anyhow::Result<()> {
    let metrics = PauseMetrics::register(&shared.registry)?;
    metrics.set_alert_after(config.pause.alert_after.as_secs_f64());
    let targets = config.pause_targets();
    let (db, pauses, poll, stop) =
        (db.clone(), shared.pauses.clone(), config.pause.poll_interval, shared.shutdown.clone());
    shared.tasks.spawn("pause watch", crate::pause::watch(db, pauses, targets, poll, metrics, stop));
    Ok(())
}

async fn spawn_relay(
    config: &Config,
    relay: &RelayConfig,
    shared: &Shared,
    db: &Database,
    (stream, nats, kafka): (Option<&RedisStream>, Option<&NatsStream>, Option<&KafkaStream>),
    metrics: &RelayMetrics,
) -> anyhow::Result<bool> {
    let context = format!("relay `{}`", relay.name);
    let (backoff, shutdown) = (&relay.claim_loop.outage_backoff, &shared.shutdown);
    // A gate the server cannot honour is a configuration error (an unreachable server is not).
    if let (Broker::Redis, Some(stream)) = (relay.broker, stream)
        && let Ok(Err(e)) = stream.check_gate(&relay.name, relay.durability.as_ref().is_some_and(|d| d.aof)).await
    {
        return Err(anyhow!(e));
    }
    let prepared = with_retry(&context, backoff, shutdown, || Outbox::prepare(db, relay)).await?;
    let Some(store) = prepared else { return Ok(false) };
    if !shards_agree(relay, db, shared).await? || !keep_partitions(relay, db, shared, metrics).await? {
        return Ok(false);
    }
    match (relay.broker, stream, nats) {
        (Broker::Redis, Some(stream), _) => start_relay(config, relay, shared, store, stream, metrics)?,
        (Broker::Redis, None, _) => return Err(anyhow!("relay `{}`: no Redis client", relay.name)),
        (Broker::Nats, _, Some(nats)) => {
            let nats = nats.with_body_field(relay.payload_field());
            start_relay(config, relay, shared, store, &nats, metrics)?
        }
        (Broker::Nats, _, None) => return Err(anyhow!("relay `{}`: broker = \"nats\" without [nats]", relay.name)),
        (Broker::Kafka, _, _) => match kafka {
            Some(kafka) => start_relay(
                config,
                relay,
                shared,
                store,
                &kafka.laying_out(relay.payload_field(), relay.kafka_key()),
                metrics,
            )?,
            None => return Err(anyhow!("relay `{}`: broker = \"kafka\" without [kafka]", relay.name)),
        },
    }
    Ok(true)
}

fn start_relay<P: EventStream + Clone>(
    config: &Config,
    relay: &RelayConfig,
    shared: &Shared,
    store: Outbox,
    stream: &P,
    metrics: &RelayMetrics,
) -> anyhow::Result<()> {
    let stall_after =
        2 * (relay.claim_loop.lease + relay.claim_loop.outage_backoff.max + relay.claim_loop.poll_interval);
    let deps = RelayDeps {
        store,
        stream: stream.clone(),
        metrics: metrics.for_relay(&relay.name, relay.broker.label()),
        health: shared.health.register(format!("relay {}", relay.name), stall_after, Some(relay.broker.label())),
        faults: shared.faults.clone(),
        claimant: format!("{}/{}", shared.claimant, relay.name),
        abandon: shared.abandon.clone(),
        release_timeout: config.shutdown.grace_period.mul_f64(0.2),
        wake: relay.notify.as_ref().map(|_| Arc::new(Wake::default())),
    };
    if let (Some(notify), Some(wake)) = (&relay.notify, &deps.wake) {
        let listener =
            wake::listen(config.database.clone(), notify.channel.clone(), wake.clone(), shared.shutdown.clone());
        shared.tasks.spawn(format!("relay {} listener", relay.name), listener);
    }
    let (claim, chosen) = relay.claim_loop.claim_choice();
    let relay = Arc::new(Relay::new(relay.clone(), deps).map_err(|e| anyhow!(e))?);
    info!(relay = relay.name(), claimant = %shared.claimant, claim, chosen, "relay started");
    let name = format!("relay {}", relay.name());
    let sampler = relay.clone();
    let (interval, stop) = (config.telemetry.sample_interval, shared.shutdown.clone());
    shared.tasks.spawn(format!("{name} sampler"), async move { sampler.sample(interval, stop).await });
    let (purger, stop) = (relay.clone(), shared.shutdown.clone());
    shared.tasks.spawn(format!("{name} retention"), async move { purger.purge(stop).await });
    let (trimmer, stop) = (relay.clone(), shared.shutdown.clone());
    shared.tasks.spawn(format!("{name} trimming"), async move { trimmer.trim_acknowledged(stop).await });
    let (watcher, stop) = (relay.clone(), shared.shutdown.clone());
    shared.tasks.spawn(format!("{name} broker-loss watch"), async move { watcher.watch_broker(stop).await });
    let pause = shared.pauses.switch(Target { component: ComponentKind::Relay, name: relay.name().to_owned() });
    shared.tasks.spawn(name, relay.run(pause, shared.shutdown.clone()));
    Ok(())
}

fn spawn_bridge<G: ConsumerGroup>(
    config: &Config,
    (bridge, instance): (&BridgeConfig, &str),
    shared: &Shared,
    store: impl Fn() -> Result<Takeover, StatementError>,
    (group, style): (impl Fn(&StreamSource, &str) -> G, Placeholder),
    metrics: &BridgeMetrics,
) -> anyhow::Result<()> {
    let validator =
        Validator::new(&bridge.validate, &bridge.envelope).map_err(|e| anyhow!("bridge `{}` {e}", bridge.name))?;
    let validator = Arc::new(validator);
    let apply = match &bridge.apply {
        None => None,
        Some(name) => {
            let worker = config
                .workers
                .iter()
                .find(|w| &w.name == name)
                .ok_or_else(|| anyhow!("bridge `{}` apply: no worker named `{name}`", bridge.name))?;
            let apply = Apply::new(worker, style).map_err(|e| anyhow!("bridge `{}` apply: {e}", bridge.name))?;
            let pause = shared.pauses.switch(Target { component: ComponentKind::Worker, name: name.clone() });
            Some(Arc::new(apply.paused_with(pause)))
        }
    };
    let chosen = bridge.apply_chosen.as_deref().unwrap_or("configured");
    info!(bridge = %bridge.name, apply = bridge.apply.as_deref().unwrap_or("off"), chosen, "apply at take-over");
    let stall_after = 2 * (bridge.block + bridge.claim_idle) + config.redis.command_timeout * 2;
    // One takeover loop per consumer name (`concurrency`), each a consumer of the group.
    let consumers = bridge.consumer_names(instance);
    for source in &bridge.streams {
        // One health component per stream, shared by its loops (as a relay's loops share one):
        // the database and broker answer for all of them, and the sampler that probes them
        // runs once.
        let stream_name = format!("bridge {} {}", bridge.name, source.key);
        let health = shared.health.register(stream_name.clone(), stall_after, Some(bridge.broker.label()));
        for (k, consumer) in consumers.iter().enumerate() {
            let name = match k {
                0 => stream_name.clone(),
                _ => format!("{stream_name} #{}", k + 1),
            };
            let deps = BridgeDeps {
                store: store().map_err(|e| anyhow!("bridge `{}` {e}", bridge.name))?,
                metrics: metrics.for_stream(&bridge.name, &source.key, bridge.broker.label()),
                health: health.clone(),
                faults: shared.faults.clone(),
                abandon: shared.abandon.clone(),
                apply: apply.clone(),
            };
            let group = group(source, consumer);
            let stream_bridge =
                Arc::new(StreamBridge::new(bridge.clone(), source.clone(), validator.clone(), group, deps));
            if k == 0 {
                // The gauges are the group's (lag, pending), not a loop's: one sampler.
                let sampler = stream_bridge.clone();
                let (interval, stop) = (config.telemetry.sample_interval, shared.shutdown.clone());
                shared.tasks.spawn(format!("{name} sampler"), async move { sampler.sample(interval, stop).await });
            }
            let pause = shared.pauses.switch(Target { component: ComponentKind::Bridge, name: bridge.name.clone() });
            shared.tasks.spawn(name, stream_bridge.run(pause, shared.shutdown.clone()));
        }
    }
    Ok(())
}

async fn spawn_worker(
    config: &Config,
    worker: &WorkerConfig,
    shared: &Shared,
    store: Inbox,
    metrics: &WorkerMetrics,
) -> anyhow::Result<bool> {
    let style = store.placeholder();
    let stall_after =
        2 * (worker.claim_loop.lease + worker.claim_loop.outage_backoff.max + worker.claim_loop.poll_interval);
    let deps = WorkerDeps {
        store,
        metrics: metrics.for_worker(&worker.name),
        health: shared.health.register(format!("worker {}", worker.name), stall_after, None),
        owner: format!("{}/{}", shared.claimant, worker.name),
        abandon: shared.abandon.clone(),
    };
    let config_claim = worker.claim_loop.claim_choice();
    let built = Worker::new(worker.clone(), style, deps).map_err(|e| anyhow!(e))?;
    let sql = built.handler_sql();
    let check = || built.check_statements(&sql);
    let context = format!("worker `{}`", worker.name);
    if with_retry(&context, &worker.claim_loop.outage_backoff, &shared.shutdown, check).await?.is_none() {
        return Ok(false);
    }
    let worker = Arc::new(built);
    let (claim, chosen) = config_claim;
    info!(worker = %worker.name(), claim, chosen, "worker started");
    let name = format!("worker {}", worker.name());
    let sampler = worker.clone();
    let (interval, stop) = (config.telemetry.sample_interval, shared.shutdown.clone());
    shared.tasks.spawn(format!("{name} sampler"), async move { sampler.sample(interval, stop).await });
    let (purger, stop) = (worker.clone(), shared.shutdown.clone());
    shared.tasks.spawn(format!("{name} retention"), async move { purger.purge(stop).await });
    let pause = shared.pauses.switch(Target { component: ComponentKind::Worker, name: worker.name().to_owned() });
    shared.tasks.spawn(name, worker.run(pause, shared.shutdown.clone()));
    Ok(true)
}

/// A sharded relay records its shard count, or refuses to start when its stream family was
/// written with another one (per-key order). `Ok(false)` if shutdown came first.
async fn shards_agree(relay: &RelayConfig, db: &Database, shared: &Shared) -> anyhow::Result<bool> {
    let mut retrier = Retrier::new(relay.claim_loop.outage_backoff.clone());
    loop {
        match crate::shards::agree(db, relay, true).await {
            Ok(Agreement::NotSharded) => return Ok(true),
            Ok(Agreement::Agrees { family, count }) => {
                info!(relay = %relay.name, %family, shards = count, "shard count agrees with the recorded one");
                return Ok(true);
            }
            Ok(Agreement::Unguarded(why)) => {
                warn!("{why}");
                return Ok(true);
            }
            Ok(Agreement::Differs(why)) => return Err(anyhow!(why)),
            Err(e) => {
                let wait = retrier.failed();
                let error = crate::error::error_chain(&e);
                warn!(relay = %relay.name, %error, retry_in_ms = wait.as_millis() as u64, "shard count not read yet");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shared.shutdown.cancelled() => return Ok(false),
                }
            }
        }
    }
}

/// With `[relay.partitions]`: checks the table is partitioned by `created_at` (waiting for the
/// database while it is unreachable) and starts its housekeeping. `false` if shutdown came first.
async fn keep_partitions(
    relay: &RelayConfig,
    db: &Database,
    shared: &Shared,
    metrics: &RelayMetrics,
) -> anyhow::Result<bool> {
    let Some(config) = relay.partitions.clone() else { return Ok(true) };
    let mut retrier = Retrier::new(relay.claim_loop.outage_backoff.clone());
    loop {
        match crate::relay::partitions::unfit(db, relay).await {
            Ok(Some(why)) => return Err(anyhow!(why)),
            Ok(None) => break,
            Err(e) => {
                let wait = retrier.failed();
                warn!(relay = %relay.name, error = %crate::error::error_chain(&e), retry_in_ms = wait.as_millis() as u64, "partitioning not checked yet");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shared.shutdown.cancelled() => return Ok(false),
                }
            }
        }
    }
    let outbox = crate::relay::partitions::PartitionedOutbox::new(db, &relay.table)
        .ok_or_else(|| anyhow!("relay `{}`: a partitioned outbox needs Postgres", relay.name))?;
    let keeper = PartitionKeeper {
        relay: relay.name.clone(),
        config,
        outbox,
        metrics: metrics.for_relay(&relay.name, relay.broker.label()),
    };
    let stop = shared.shutdown.clone();
    shared.tasks.spawn(format!("relay {} partitions", relay.name), async move { keeper.run(stop).await });
    Ok(true)
}

/// Runs a startup check, waiting for the database while it is unreachable. Invalid statements
/// fail startup at once. `None` if shutdown came first.
async fn with_retry<T, F, Fut>(
    context: &str,
    backoff: &BackoffConfig,
    shutdown: &CancellationToken,
    check: F,
) -> anyhow::Result<Option<T>>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, PrepareError>>,
{
    let mut retrier = Retrier::new(backoff.clone());
    loop {
        match check().await {
            Ok(value) => return Ok(Some(value)),
            Err(PrepareError::Invalid(errors)) => {
                return Err(anyhow!("{context} statements are invalid:\n  - {}", errors.join("\n  - ")));
            }
            Err(PrepareError::Unreachable(message)) => {
                let wait = retrier.failed();
                let error = crate::tls::explain("database.tls", &message);
                warn!(%context, %error, retry_in_ms = wait.as_millis() as u64, "database not reachable yet");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.cancelled() => return Ok(None),
                }
            }
        }
    }
}
