//! The inbox bridge: stream → validate → insert-if-absent into `consumer_inbox` → only then
//! XACK. Invalid entries take the poison path (recorded with their reason, then acknowledged).
//!
//! One [`StreamBridge`] runs per configured stream, each on its own Redis connection because
//! its reads block. The batch handling (the ordering the invariants rest on) is in `batch`;
//! recovery of entries left pending by dead consumers, cleanup and gauges are in `recover`.

mod batch;
pub mod entry;
pub mod group;
mod recover;
pub mod validate;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::Client;
use tokio_util::sync::CancellationToken;
use tracing::{info, trace, warn};

use crate::config::{BridgeConfig, StreamSource};
use crate::fault::Faults;
use crate::relay::Retrier;
use crate::store::inbox::InboxStore;
use crate::telemetry::health::Component;
use crate::telemetry::metrics::BridgeHandles;
use crate::telemetry::throttle::Throttle;
use entry::RawEntry;
use group::{Group, GroupError, GroupResult};
use validate::Validator;

pub struct BridgeDeps<S> {
    pub store: S,
    /// A dedicated client for this stream (its reads block).
    pub client: Client,
    pub metrics: BridgeHandles,
    pub health: Arc<Component>,
    pub faults: Faults,
    /// Fires when in-flight work must stop (shutdown drain time over).
    pub abandon: CancellationToken,
    pub command_timeout: Duration,
}

/// One stream of one bridge.
pub struct StreamBridge<S> {
    config: BridgeConfig,
    source: StreamSource,
    validator: Arc<Validator>,
    group: Group,
    deps: BridgeDeps<S>,
}

impl<S: InboxStore> StreamBridge<S> {
    pub fn new(
        config: BridgeConfig,
        source: StreamSource,
        validator: Arc<Validator>,
        consumer_name: &str,
        deps: BridgeDeps<S>,
    ) -> Self {
        let group = Group::new(deps.client.clone(), &source.key, config.group(), consumer_name, deps.command_timeout);
        Self { config, source, validator, group, deps }
    }

    /// Reads until `shutdown`: first this consumer's own pending entries (left by a previous
    /// run under the same name), then new ones; every so often, entries idle on other consumers.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        info!(bridge = %self.config.name, stream = %self.source.key, consumer = %self.group.consumer, "bridge started");
        let mut own_backlog = true;
        let mut last_recovery: Option<Instant> = None;
        let mut outage = Retrier::new(crate::config::BackoffConfig::outage_default());
        let mut errors = Throttle::new(Duration::from_secs(30));
        // New entries read while the previous batch was being taken over.
        let mut ahead: Option<GroupResult<Vec<RawEntry>>> = None;
        while !shutdown.is_cancelled() {
            self.deps.health.beat();
            if last_recovery.is_none_or(|at| at.elapsed() >= self.config.claim_idle / 2) {
                last_recovery = Some(Instant::now());
                self.recover(&shutdown).await;
            }
            let reading = Instant::now();
            let read = match ahead.take() {
                Some(read) => read,
                None if own_backlog => self.group.read("0", self.config.batch_size, None).await,
                None => tokio::select! {
                    read = self.group.read(">", self.config.batch_size, Some(self.config.block)) => read,
                    _ = shutdown.cancelled() => break,
                },
            };
            match read {
                Ok(entries) => {
                    outage.succeeded();
                    errors.reset();
                    self.deps.health.set_stream_ok(true);
                    if entries.is_empty() {
                        own_backlog = false;
                        continue;
                    }
                    trace!(entries = entries.len(), read_ms = reading.elapsed().as_secs_f64() * 1e3, "batch read");
                    if own_backlog {
                        // Reading "0" again would return this batch too: no read-ahead here.
                        let limits = self.deliveries(&entries).await;
                        self.handle(entries, &limits).await;
                    } else {
                        // The next batch is read while this one commits (the read waits on Redis,
                        // the commit on the database). Without BLOCK, so the acknowledgement that
                        // ends this batch never queues behind a read waiting for new entries.
                        let none = HashMap::new();
                        let next = self.group.read(">", self.config.batch_size, None);
                        let ((), next) = tokio::join!(self.handle(entries, &none), next);
                        ahead = Some(next);
                    }
                }
                Err(GroupError::NoGroup(detail)) => {
                    warn!(bridge = %self.config.name, stream = %self.source.key, %detail, "consumer group missing; creating it");
                    if let Err(e) = self.group.ensure(&self.config.start).await {
                        self.outage(&mut outage, &mut errors, &e, &shutdown).await;
                    }
                }
                Err(e) => self.outage(&mut outage, &mut errors, &e, &shutdown).await,
            }
        }
        // Entries already read ahead belong to this consumer now: take them over before leaving
        // rather than leave them for recovery.
        if let Some(Ok(entries)) = ahead
            && !entries.is_empty()
        {
            self.handle(entries, &HashMap::new()).await;
        }
        self.deps.health.stopped();
        info!(bridge = %self.config.name, stream = %self.source.key, "bridge stopped");
    }

    async fn outage(
        &self,
        outage: &mut Retrier,
        errors: &mut Throttle,
        error: &GroupError,
        shutdown: &CancellationToken,
    ) {
        self.deps.health.set_stream_ok(false);
        if let Some(suppressed) = errors.allow() {
            warn!(bridge = %self.config.name, stream = %self.source.key, %error, suppressed, "stream read failed; backing off");
        }
        tokio::select! {
            _ = tokio::time::sleep(outage.failed()) => {}
            _ = shutdown.cancelled() => {}
        }
    }
}
