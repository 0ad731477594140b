//! The outbox relay: claim a batch under a lease → append to the stream → settle each row.
//!
//! `run` drives `concurrency` claim loops. One turn of a loop is in `batch`; what happens around
//! it (polling, outage backoff, shutdown) is here.

mod batch;
pub(crate) mod cloudevents;
pub(crate) mod config;
pub(crate) mod entries;
mod housekeeping;
mod locked;
pub(crate) mod loss;
pub(crate) mod ordered;
pub(crate) mod outbox;
pub(crate) mod partitions;
mod sampler;
mod settle;
#[cfg(test)]
mod tests;
pub(crate) mod wake;
mod watch;

pub(crate) use outbox::{ClaimedRow, OutboxStore};

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, info_span, warn};

use entries::EntryBuilder;
use wake::Wake;

use crate::broker::{AppendOptions, Dedupe, Durability, EventStream, Trim};
use crate::error::error_chain;
use crate::fault::Faults;
use crate::pause::PauseSwitch;
use crate::relay::config::RelayConfig;
use crate::relay::outbox::LockedBatch;
use crate::relay::outbox::contract::ORDER_KEY_COLUMN;
use crate::runtime::claim_loop::{self, Batch, ClaimLoop, ClaimLoops, ClaimTurns, LoopId, Next};
use crate::store::StoreError;
use crate::telemetry::health::Component;
use crate::telemetry::metrics::RelayHandles;
use crate::telemetry::throttle::Throttle;

/// Why a relay cannot be built from its configuration and its claim statement.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RelayError {
    #[error(transparent)]
    Template(#[from] entries::TemplateKeyError),
    #[error("relay `{0}` ordering: the claim statement must return `order_key`")]
    NoOrderKey(String),
}

/// What a relay needs besides its config; built by the app, shared by its loops.
pub(crate) struct RelayDeps<S, P> {
    pub store: S,
    pub stream: P,
    pub metrics: RelayHandles,
    pub health: Arc<Component>,
    pub faults: Faults,
    /// Identifies this process in `claimed_by`; each loop appends `#<n>`.
    pub claimant: String,
    /// Fires when in-flight work must stop (some time after shutdown was requested): appends and
    /// settles still running are abandoned and their rows released if the database allows.
    pub abandon: CancellationToken,
    /// Bound on the one release attempt made for rows whose work was abandoned.
    pub release_timeout: Duration,
    /// Rung by the LISTEN connection when rows are inserted (`relay.notify`).
    pub wake: Option<Arc<Wake>>,
}

pub(crate) struct Relay<S, P> {
    config: RelayConfig,
    entries: EntryBuilder,
    options: AppendOptions,
    deps: RelayDeps<S, P>,
    /// Streams this relay appended to (for broker-loss checks and acknowledged trimming).
    loss: loss::LossWatch,
    /// "Stream unavailable" warnings: a shard failing over fails part of every batch for
    /// seconds while the loop goes on, so they are throttled across batches.
    unavailable_log: std::sync::Mutex<Throttle>,
    /// Since when part of the broker has been down while the rest answers (see
    /// `batch::partial_outage`).
    partial_since: std::sync::Mutex<Option<std::time::Instant>>,
}

impl<S: OutboxStore, P: EventStream> Relay<S, P> {
    /// Binds the relay's templates to the store's claim columns.
    pub(crate) fn new(config: RelayConfig, deps: RelayDeps<S, P>) -> Result<Self, RelayError> {
        let columns = deps.store.columns();
        let entries = EntryBuilder::new(&config, &columns)?;
        if config.ordering.is_some() && !columns.iter().any(|c| c == ORDER_KEY_COLUMN) {
            return Err(RelayError::NoOrderKey(config.name.clone()));
        }
        let options = append_options(&config);
        let unavailable_log = std::sync::Mutex::new(Throttle::new(Duration::from_secs(10)));
        let partial_since = Default::default();
        Ok(Self { config, entries, options, deps, loss: Default::default(), unavailable_log, partial_since })
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// Runs the claim loops until `shutdown`; returns once every in-flight batch has been settled
    /// or released.
    pub(crate) async fn run(self: Arc<Self>, pause: PauseSwitch, shutdown: CancellationToken) {
        let (claimant, health) = (self.deps.claimant.clone(), self.deps.health.clone());
        let settings = ClaimLoop::from(&self.config.claim_loop);
        claim_loop::run(ClaimLoops { turns: self, settings, health, pause }, &claimant, shutdown).await
    }

    /// A statement failed: readiness and `source_up` say so, and the failure is counted by
    /// statement and kind. One the database will go on refusing (a statement that does not fit
    /// the schema, a privilege, a value of some row the statement itself cannot handle) is
    /// logged as an error and fails readiness as refused work, not as an unreachable database:
    /// backing off will not end it, someone must (the HandoffRelayStatementRefused alert).
    fn source_down(&self, error: &StoreError, log: Option<u64>) {
        self.deps.metrics.source_up.set(0);
        self.deps.metrics.statement_failed(error);
        let refused = !error.passes_by_itself();
        if refused {
            self.deps.health.set_source_ok(true);
            self.deps.health.set_work_ok(false);
        } else {
            self.deps.health.set_source_ok(false);
        }
        if let Some(suppressed) = log {
            let error = error_chain(error);
            if refused {
                tracing::error!(relay = %self.config.name, %error, suppressed, "the database refuses a relay statement; it will fail until the statement or the data is fixed");
            } else {
                warn!(relay = %self.config.name, %error, suppressed, "database statement failed; backing off");
            }
        }
    }

    fn source_up(&self) {
        self.deps.metrics.source_up.set(1);
        self.deps.health.set_source_ok(true);
        self.deps.health.set_work_ok(true);
    }

    fn stream_health(&self, ok: bool) {
        self.deps.metrics.stream_up.set(ok.into());
        self.deps.health.set_stream_ok(ok);
    }
}

impl<S: OutboxStore, P: EventStream> ClaimTurns for Relay<S, P> {
    type Row = ClaimedRow;
    type Held = LockedBatch;

    fn reclaimed(row: &ClaimedRow) -> bool {
        row.reclaimed
    }

    fn span(&self, index: u32) -> tracing::Span {
        info_span!("relay", relay = %self.config.name, loop_index = index)
    }

    async fn claim(&self, claimant: &str, locked: bool) -> Result<Batch<ClaimedRow, Self::Held>, StoreError> {
        let (batch_size, lease) = (self.config.claim_loop.batch_size, self.config.claim_loop.lease);
        let batch = if locked {
            Batch::locked(self.deps.store.lock(batch_size, lease).await?)
        } else {
            Batch::Leased(self.deps.store.claim(claimant, batch_size, lease).await?)
        };
        debug!(rows = batch.rows().len(), locked, "claimed");
        Ok(batch)
    }

    fn claim_failed(&self, error: &StoreError, log: Option<u64>) {
        self.source_down(error, log);
    }

    fn claim_succeeded(&self) {
        self.source_up();
    }

    async fn work(&self, id: &LoopId, batch: Batch<ClaimedRow, Self::Held>, _: &CancellationToken) -> Next {
        let turn = match batch {
            Batch::Leased(rows) => self.process(&id.claimant, rows).await,
            Batch::Locked(rows, held) => self.process_locked(&id.claimant, rows, held).await,
        };
        if turn.stream_outage {
            self.stream_health(false);
            Next::AwaitBroker
        } else if turn.gate_missed {
            // Replicas or the AOF are behind: appending again at once would only pile up
            // duplicates; back off as for an outage.
            Next::Backoff
        } else if turn.partial_outage {
            // After a partial outage the released rows are due again at once: a poll interval
            // between tries keeps a failing shard from spinning the loop.
            Next::Wait
        } else {
            Next::Continue
        }
    }

    /// Waits for the poll interval, or less when a wake-up rings.
    async fn idle(&self, poll_interval: Duration, shutdown: &CancellationToken) {
        let woken = async {
            match &self.deps.wake {
                Some(wake) => wake.wait().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(poll_interval) => {}
            _ = woken => {}
            _ = shutdown.cancelled() => {}
        }
    }

    async fn broker_answers(&self, failures: u32) -> bool {
        let up = self.deps.stream.ping().await.is_ok();
        if up {
            info!(relay = %self.config.name, after_failures = failures, "stream reachable again");
            self.stream_health(true);
        }
        up
    }

    fn switched_to_locked(&self) {
        info!(relay = %self.config.name, "claim = locked: leased turn done, claiming in locked transactions");
    }

    fn stopped(&self) {
        info!(relay = %self.config.name, "relay stopped");
    }
}

/// How the relay appends: trimming, dedupe and the durability gate from its config.
pub(crate) fn append_options(config: &RelayConfig) -> AppendOptions {
    let trim = config.trim.as_ref().and_then(|t| match (t.maxlen, t.min_age) {
        (Some(n), _) => Some(Trim::MaxLen(n)),
        (None, Some(age)) => Some(Trim::MinAge(age)),
        (None, None) => None,
    });
    let dedupe = config.dedupe.as_ref().map(|d| Dedupe { window: d.window, key_prefix: d.key_prefix.clone() });
    let durability =
        config.durability.as_ref().map(|d| Durability { replicas: d.replicas, aof: d.aof, timeout: d.timeout });
    AppendOptions { trim, dedupe, durability }
}
