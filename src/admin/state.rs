//! What the admin handlers work with: the config, the database and brokers `run` connected to,
//! the replays started here, and the answers kept for retried idempotency keys.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::broker::nats::NatsStream;
use crate::broker::redis::RedisStream;
use crate::config::Config;
use crate::store::Database;

/// What the handlers work with: the config, the database and brokers `run` connected to.
pub(crate) struct AdminState {
    pub config: Arc<Config>,
    pub db: Database,
    pub redis: Option<RedisStream>,
    pub nats: Option<NatsStream>,
    /// This process's metrics: the status page reads the broker-loss counters from them.
    pub registry: prometheus::Registry,
    /// Replays started here: their latest progress (or error), by job.
    pub(super) replays: Mutex<HashMap<String, Value>>,
    /// Mutations by (caller, `Idempotency-Key`): running, or answered.
    pub(super) idempotency: super::idempotency::Idempotency,
    /// Stops replays started here when the process drains.
    shutdown: CancellationToken,
}

impl AdminState {
    pub(crate) fn new(
        config: Arc<Config>,
        db: Database,
        (redis, nats): (Option<RedisStream>, Option<NatsStream>),
        registry: prometheus::Registry,
        shutdown: CancellationToken,
    ) -> Self {
        let (replays, idempotency) = (Mutex::default(), Default::default());
        Self { config, db, redis, nats, registry, replays, idempotency, shutdown }
    }

    /// The brokers status reads from.
    pub(super) fn brokers(&self) -> crate::ops::status::Brokers<'_> {
        crate::ops::status::Brokers { redis: self.redis.as_ref(), nats: self.nats.as_ref() }
    }

    /// Records a replay's latest progress (or its end) for `GET /api/replay/<job>`.
    pub(super) fn replay_progress(&self, job: &str, value: Value) {
        self.replays.lock().unwrap_or_else(|e| e.into_inner()).insert(job.to_owned(), value);
    }

    /// Whether a replay of `job` runs in this process now.
    pub(super) fn replay_running(&self, job: &str) -> Option<Value> {
        let replays = self.replays.lock().unwrap_or_else(|e| e.into_inner());
        replays.get(job).filter(|v| v["running"] == true).cloned()
    }

    pub(super) fn shutdown(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}
