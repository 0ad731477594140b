//! The outbox relay: claim a batch under a lease → append to the stream → settle each row.
//!
//! `run` drives `concurrency` claim loops. One turn of a loop is in `batch`; what happens around
//! it (polling, outage backoff, shutdown) is here.

mod batch;
pub mod entries;
mod housekeeping;
mod locked;
pub mod loss;
mod sampler;
#[cfg(test)]
mod tests;
pub mod wake;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use entries::EntryBuilder;
use wake::Wake;

use crate::config::{ClaimMode, RelayConfig};
use crate::error::error_chain;
use crate::fault::Faults;
use crate::retry::Retrier;
use crate::store::outbox::OutboxStore;
use crate::store::outbox::contract::ORDER_KEY_COLUMN;
use crate::stream::{AppendOptions, Dedupe, Durability, EventStream, Trim};
use crate::telemetry::health::Component;
use crate::telemetry::metrics::RelayHandles;
use crate::telemetry::throttle::Throttle;
use crate::turns::LockedTurns;

/// What a relay needs besides its config; built by the app, shared by its loops.
pub struct RelayDeps<S, P> {
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

pub struct Relay<S, P> {
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
    pub fn new(config: RelayConfig, deps: RelayDeps<S, P>) -> Result<Self, String> {
        let columns = deps.store.columns();
        let entries = EntryBuilder::new(&config, &columns)?;
        if config.ordering.is_some() && !columns.iter().any(|c| c == ORDER_KEY_COLUMN) {
            return Err(format!("relay `{}` ordering: the claim statement must return `order_key`", config.name));
        }
        let trim = config.trim.as_ref().and_then(|t| match (t.maxlen, t.min_age) {
            (Some(n), _) => Some(Trim::MaxLen(n)),
            (None, Some(age)) => Some(Trim::MinAge(age)),
            (None, None) => None,
        });
        let dedupe = config.dedupe.as_ref().map(|d| Dedupe { window: d.window, key_prefix: d.key_prefix.clone() });
        let durability =
            config.durability.as_ref().map(|d| Durability { replicas: d.replicas, aof: d.aof, timeout: d.timeout });
        let options = AppendOptions { trim, dedupe, durability };
        let unavailable_log = std::sync::Mutex::new(Throttle::new(Duration::from_secs(10)));
        let partial_since = Default::default();
        Ok(Self { config, entries, options, deps, loss: Default::default(), unavailable_log, partial_since })
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Runs the claim loops until `shutdown`; returns once every in-flight batch has been settled
    /// or released.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut loops = tokio::task::JoinSet::new();
        for n in 0..self.config.concurrency {
            let relay = self.clone();
            let shutdown = shutdown.clone();
            let span = info_span!("relay", relay = %self.config.name, loop_index = n);
            loops.spawn(async move { relay.claim_loop(n, shutdown).await }.instrument(span));
        }
        crate::tasks::join_loops(&mut loops).await;
        self.deps.health.stopped();
        info!(relay = %self.config.name, "relay stopped");
    }

    async fn claim_loop(&self, n: u32, shutdown: CancellationToken) {
        let claimant = format!("{}#{n}", self.deps.claimant);
        let mut outage = Retrier::new(self.config.outage_backoff.clone());
        let mut errors = Throttle::new(Duration::from_secs(30));
        let mut turns = LockedTurns::default();
        while !shutdown.is_cancelled() {
            self.deps.health.beat();
            let locked = self.locked_turn(&mut turns);
            let claimed = if locked {
                self.deps.store.lock(self.config.batch_size, self.config.lease).await.map(Claimed::Locked)
            } else {
                self.deps.store.claim(&claimant, self.config.batch_size, self.config.lease).await.map(Claimed::Leased)
            };
            let claimed = match claimed {
                Ok(claimed) => claimed,
                Err(error) => {
                    self.source_down(&mut errors, &error);
                    sleep_or_shutdown(outage.failed(), &shutdown).await;
                    continue;
                }
            };
            self.source_up(&mut errors);
            if !locked {
                turns.reclaimed(claimed.rows().iter().any(|r| r.reclaimed));
            }
            let rows = claimed.rows();
            debug!(rows = rows.len(), locked, "claimed");
            if rows.is_empty() {
                self.idle(&shutdown).await;
                continue;
            }
            // A full batch means more is waiting; a reclaimed row is claimed alone, so its
            // neighbours from the dead claimant's batch are waiting too.
            let again_now = rows.len() as u32 >= self.config.batch_size || rows.iter().any(|r| r.reclaimed);
            let turn = match claimed {
                Claimed::Leased(rows) => self.process(&claimant, rows).await,
                Claimed::Locked((rows, Some(batch))) => self.process_locked(&claimant, rows, batch).await,
                Claimed::Locked((_, None)) => continue,
            };
            if turn.stream_outage {
                self.wait_for_stream(&mut outage, &shutdown).await;
            } else if turn.gate_missed {
                // Replicas or the AOF are behind: appending again at once would only pile up
                // duplicates; back off as for an outage.
                sleep_or_shutdown(outage.failed(), &shutdown).await;
            } else {
                outage.succeeded();
                // After a partial outage the released rows are due again at once: a poll
                // interval between tries keeps a failing shard from spinning the loop.
                if !again_now || turn.partial_outage {
                    self.idle(&shutdown).await;
                }
            }
        }
    }

    /// Whether this turn is a locked one (see [`crate::turns`]: a leased turn first, once per
    /// lease, and after one that reclaimed a row, keep crash-loop detection as it is).
    fn locked_turn(&self, turns: &mut LockedTurns) -> bool {
        self.config.claim == ClaimMode::Locked
            && turns.locked(self.config.lease, || {
                info!(relay = %self.config.name, "claim = locked: leased turn done, claiming in locked transactions")
            })
    }

    /// Waits for the poll interval, or less when a wake-up rings.
    async fn idle(&self, shutdown: &CancellationToken) {
        let woken = async {
            match &self.deps.wake {
                Some(wake) => wake.wait().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(self.config.poll_interval) => {}
            _ = woken => {}
            _ = shutdown.cancelled() => {}
        }
    }

    /// After an outage, pings until the broker answers instead of claiming rows only to release them.
    async fn wait_for_stream(&self, outage: &mut Retrier, shutdown: &CancellationToken) {
        self.stream_health(false);
        loop {
            sleep_or_shutdown(outage.failed(), shutdown).await;
            self.deps.health.beat();
            if shutdown.is_cancelled() {
                return;
            }
            if self.deps.stream.ping().await.is_ok() {
                info!(relay = %self.config.name, after_failures = outage.failures(), "stream reachable again");
                self.stream_health(true);
                outage.succeeded();
                return;
            }
        }
    }

    /// A statement failed: readiness and `source_up` say so, and the failure is counted by
    /// statement and kind. One the database will go on refusing (a statement that does not fit
    /// the schema, a privilege, a value of some row the statement itself cannot handle) is
    /// logged as an error and fails readiness as refused work, not as an unreachable database:
    /// backing off will not end it, someone must (the HandoffRelayStatementRefused alert).
    fn source_down(&self, errors: &mut Throttle, error: &crate::store::StoreError) {
        self.deps.metrics.source_up.set(0);
        self.deps.metrics.statement_failed(error);
        let refused = !error.passes_by_itself();
        if refused {
            self.deps.health.set_source_ok(true);
            self.deps.health.set_work_ok(false);
        } else {
            self.deps.health.set_source_ok(false);
        }
        if let Some(suppressed) = errors.allow() {
            let error = error_chain(error);
            if refused {
                tracing::error!(relay = %self.config.name, %error, suppressed, "the database refuses a relay statement; it will fail until the statement or the data is fixed");
            } else {
                warn!(relay = %self.config.name, %error, suppressed, "database statement failed; backing off");
            }
        }
    }

    fn source_up(&self, errors: &mut Throttle) {
        self.deps.metrics.source_up.set(1);
        self.deps.health.set_source_ok(true);
        self.deps.health.set_work_ok(true);
        errors.reset();
    }

    fn stream_health(&self, ok: bool) {
        self.deps.metrics.stream_up.set(ok.into());
        self.deps.health.set_stream_ok(ok);
    }
}

/// What a turn claimed: leased rows, or rows locked by an open transaction.
enum Claimed {
    Leased(Vec<crate::store::outbox::ClaimedRow>),
    Locked(crate::store::outbox::Locked),
}

impl Claimed {
    fn rows(&self) -> &[crate::store::outbox::ClaimedRow] {
        match self {
            Claimed::Leased(rows) | Claimed::Locked((rows, _)) => rows,
        }
    }
}

async fn sleep_or_shutdown(duration: Duration, shutdown: &CancellationToken) {
    tokio::select! {
        _ = tokio::time::sleep(duration) => {}
        _ = shutdown.cancelled() => {}
    }
}
