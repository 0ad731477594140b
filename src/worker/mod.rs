//! The inbox worker: claim PENDING (and lease-expired PROCESSING) rows under a lease, apply the
//! handler's effect and mark PROCESSED in one transaction, or record the failure: retry with
//! backoff, or DEAD at once when retrying cannot help. With `claim = "locked"` a batch is
//! locked, applied and marked in one transaction instead (see `locked`).

mod batch;
pub(crate) mod config;
mod handler;
mod http;
pub(crate) mod inbox;
mod locked;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, info_span, warn};

use crate::error::error_chain;
use crate::pause::PauseSwitch;
use crate::runtime::claim_loop::{self, Batch, ClaimLoop, ClaimLoops, ClaimTurns, LoopId, Next};
use crate::runtime::outage::{Failed, retry_through};
use crate::sql::params::Placeholder;
use crate::store::StoreError;
use crate::telemetry::health::Component;
use crate::telemetry::metrics::WorkerHandles;
use crate::worker::config::WorkerConfig;
use crate::worker::inbox::{Inbox, InboxRow, LockedInbox};
pub(crate) use handler::{Handler, HandlerError};

/// Times a settle the database refuses for its data is tried again before it is reported.
const SETTLE_REFUSALS: u32 = 3;

pub(crate) struct WorkerDeps {
    pub store: Inbox,
    pub metrics: WorkerHandles,
    pub health: Arc<Component>,
    /// Identifies this process in `lease_owner`; each loop appends `#<n>`.
    pub owner: String,
    pub abandon: CancellationToken,
}

pub(crate) struct Worker {
    config: WorkerConfig,
    handlers: Vec<Handler>,
    deps: WorkerDeps,
    /// Per loop, since when its locked batch has been open: such rows hold no lease the `stats`
    /// statement could see, so the oldest-lease gauge takes their age from here.
    locked_since: std::sync::Mutex<Vec<Option<std::time::Instant>>>,
}

impl Worker {
    pub(crate) fn new(config: WorkerConfig, style: Placeholder, deps: WorkerDeps) -> Result<Self, HandlerError> {
        let handlers = config
            .handlers
            .iter()
            .enumerate()
            .map(|(i, h)| Handler::build(&config, i, h, style))
            .collect::<Result<_, _>>()?;
        let locked_since = std::sync::Mutex::new(vec![None; config.claim_loop.concurrency as usize]);
        Ok(Self { config, handlers, deps, locked_since })
    }

    /// Every handler statement with a label, for preparing at startup / in `check`.
    pub(crate) fn handler_sql(&self) -> Vec<(String, String)> {
        self.handlers
            .iter()
            .enumerate()
            .flat_map(|(h, handler)| {
                let name = &self.config.name;
                handler
                    .sql_texts()
                    .into_iter()
                    .enumerate()
                    .map(move |(i, sql)| (format!("worker `{name}` handler[{h}].sql[{i}]"), sql.to_owned()))
            })
            .collect()
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// The metrics label of the handler that serves `event_type` (`none` if none does).
    fn handler_label(&self, event_type: &str) -> &str {
        self.handlers.iter().find(|h| h.serves(event_type)).map_or("none", |h| h.label.as_str())
    }

    /// Prepares the inbox statements and every handler statement against the database.
    pub(crate) async fn check_statements(
        &self,
        handler_sql: &[(String, String)],
    ) -> Result<(), crate::store::PrepareError> {
        self.deps.store.check(handler_sql).await
    }

    /// Runs the claim loops until `shutdown`; returns once every batch in hand has been
    /// applied or released.
    pub(crate) async fn run(self: Arc<Self>, pause: PauseSwitch, shutdown: CancellationToken) {
        let (owner, health) = (self.deps.owner.clone(), self.deps.health.clone());
        let settings = ClaimLoop::from(&self.config.claim_loop);
        claim_loop::run(ClaimLoops { turns: self, settings, health, pause }, &owner, shutdown).await
    }

    fn mark_locked(&self, n: u32, since: Option<std::time::Instant>) {
        if let Some(slot) = self.locked_since.lock().unwrap_or_else(|e| e.into_inner()).get_mut(n as usize) {
            *slot = since;
        }
    }

    /// Seconds the oldest locked batch in this process has been open (0 when none).
    fn oldest_locked_batch(&self) -> f64 {
        let slots = self.locked_since.lock().unwrap_or_else(|e| e.into_inner());
        slots.iter().flatten().map(|since| since.elapsed().as_secs_f64()).fold(0.0, f64::max)
    }

    /// Records a row's failure, retrying through a database outage (beating: waiting it out is
    /// not being stuck) until the shutdown drain ends; a row whose failure is never recorded
    /// would have its lease lapse and count an expired lease it did not cause (invariant 12).
    /// The database refusing the record itself (its error text, say) is retried a few times,
    /// the last with a minimal text, then reported and counted, never retried for ever.
    async fn persist_failure(&self, owner: &str, row: &InboxRow, error: &str, retry_in: Option<Duration>) {
        use std::sync::atomic::Ordering::Relaxed;
        let refusals = std::sync::atomic::AtomicU32::new(0);
        let record = || {
            let text = if refusals.load(Relaxed) < SETTLE_REFUSALS {
                error
            } else {
                "handler failed (its error text was refused)"
            };
            self.deps.store.fail(owner, row, text, retry_in)
        };
        let failed = |e: StoreError| {
            if e.is_about_the_data() && refusals.load(Relaxed) >= SETTLE_REFUSALS {
                self.deps.metrics.settle_refused.inc();
                tracing::error!(event_id = %row.event_id, error = %error_chain(&e), "the database refuses to record this row's failure; its lease will lapse");
                return Failed::GiveUp(true);
            }
            refusals.fetch_add(u32::from(e.is_about_the_data()), Relaxed);
            debug!(event_id = %row.event_id, error = %error_chain(&e), "could not record a failure yet");
            Failed::Retry
        };
        let (health, abandon) = (&*self.deps.health, &self.deps.abandon);
        match retry_through(health, abandon, &self.config.claim_loop.outage_backoff, record, failed).await {
            Some(true) => {}
            Some(false) => warn!(event_id = %row.event_id, "failure not recorded: another worker owns the row"),
            None => {
                warn!(event_id = %row.event_id, "could not record a failure before the drain ended; the lease will lapse")
            }
        }
    }

    /// Hands rows back without counting an attempt, retrying through a database outage until
    /// the shutdown drain ends (then their leases lapse). Beats while it waits: a loop waiting
    /// out an outage is alive, and a restart would leave these leases to lapse and count.
    async fn release(&self, owner: &str, rows: &[(String, i64)]) {
        let release = || self.deps.store.release(owner, rows);
        let failed = |e: StoreError| {
            debug!(rows = rows.len(), error = %error_chain(&e), "could not release rows yet");
            Failed::<u64>::Retry
        };
        let (health, abandon) = (&*self.deps.health, &self.deps.abandon);
        if retry_through(health, abandon, &self.config.claim_loop.outage_backoff, release, failed).await.is_none() {
            warn!(rows = rows.len(), "could not release rows; their leases will lapse");
        }
    }

    /// Runs `work` while a heartbeat renews the leases of `rows`; `None` if abandoned at shutdown.
    async fn under_lease<F: Future>(&self, owner: &str, rows: &[(String, i64)], work: F) -> Option<F::Output> {
        let renew = || async move {
            if let Err(e) = self.deps.store.renew(owner, rows, self.config.claim_loop.lease).await {
                debug!(error = %error_chain(&e), "lease renewal failed");
            }
        };
        crate::runtime::lease::under_lease(self.config.claim_loop.lease, &self.deps.abandon, renew, work).await
    }

    /// Deletes PROCESSED rows older than `retention.processed_after` in bounded batches, every
    /// `retention.interval`. DEAD rows wait for `handoff dead retry` / `purge`.
    pub(crate) async fn purge(&self, shutdown: CancellationToken) {
        let Some(retention) = self.config.retention.clone() else { return };
        crate::runtime::periodic::every(retention.interval, &shutdown, || async {
            let mut total = 0;
            loop {
                match self.deps.store.purge(retention.processed_after, retention.batch).await {
                    Ok(n) => {
                        total += n;
                        if n < u64::from(retention.batch) || shutdown.is_cancelled() {
                            break;
                        }
                    }
                    Err(e) => {
                        warn!(worker = %self.config.name, error = %error_chain(&e), "purging processed rows failed");
                        break;
                    }
                }
            }
            if total > 0 {
                info!(worker = %self.config.name, rows = total, "purged processed rows");
            }
        })
        .await
    }

    /// Samples the worker's gauges until `shutdown`.
    pub(crate) async fn sample(&self, interval: Duration, shutdown: CancellationToken) {
        crate::runtime::periodic::every(interval, &shutdown, || async {
            match self.deps.store.stats().await {
                Ok(stats) => {
                    let m = &self.deps.metrics;
                    m.dead_rows.set(stats.dead);
                    m.pending_rows.set(stats.pending);
                    // A locked batch holds no lease: its age comes from this process.
                    m.oldest_lease.set(stats.oldest_lease_age.max(self.oldest_locked_batch()));
                    m.oldest_retry.set(stats.oldest_retry_age);
                    self.deps.health.set_source_ok(true);
                }
                Err(e) => {
                    debug!(error = %error_chain(&e), "sampling the inbox failed");
                    self.deps.health.set_source_ok(false);
                }
            }
        })
        .await
    }
}

/// How a locked turn ended.
pub(super) enum LockedOutcome {
    /// Every row's effect and PROCESSED committed.
    Committed,
    /// A row needs the leased claim: rolled back, nothing changed.
    Refused,
    /// The database failed the batch: rolled back, nothing changed.
    Outage,
    /// Shutdown: rolled back, nothing changed.
    Abandoned,
}

impl ClaimTurns for Worker {
    type Row = InboxRow;
    type Held = LockedInbox;

    fn reclaimed(row: &InboxRow) -> bool {
        row.reclaimed
    }

    fn span(&self, index: u32) -> tracing::Span {
        info_span!("worker", worker = %self.config.name, loop_index = index)
    }

    async fn claim(&self, owner: &str, locked: bool) -> Result<Batch<InboxRow, Self::Held>, StoreError> {
        let (batch_size, lease) = (self.config.claim_loop.batch_size, self.config.claim_loop.lease);
        Ok(if locked {
            Batch::locked(self.deps.store.lock(batch_size, lease).await?)
        } else {
            Batch::Leased(self.deps.store.claim(owner, batch_size, lease).await?)
        })
    }

    fn claim_failed(&self, error: &StoreError, log: Option<u64>) {
        self.deps.health.set_source_ok(false);
        if let Some(suppressed) = log {
            warn!(error = %error_chain(error), suppressed, "claiming inbox rows failed; backing off");
        }
    }

    fn claim_succeeded(&self) {
        self.deps.health.set_source_ok(true);
    }

    async fn work(&self, id: &LoopId, batch: Batch<InboxRow, Self::Held>, shutdown: &CancellationToken) -> Next {
        match batch {
            // `Backoff` when an HTTP endpoint gave no verdict: its rows went back untouched.
            Batch::Leased(rows) => self.process_batch(&id.claimant, rows, shutdown).await,
            Batch::Locked(rows, held) => {
                self.mark_locked(id.index, Some(std::time::Instant::now()));
                let outcome = self.process_locked(&id.claimant, rows, held, shutdown).await;
                self.mark_locked(id.index, None);
                match outcome {
                    LockedOutcome::Committed => Next::Continue,
                    LockedOutcome::Abandoned => Next::Wait,
                    // A row needs the leased claim's savepoints (or its failure recorded): at once.
                    LockedOutcome::Refused => Next::Leased,
                    LockedOutcome::Outage => Next::Backoff,
                }
            }
        }
    }

    fn switched_to_locked(&self) {
        info!(worker = %self.config.name, "claim = locked: leased turn done, claiming in locked transactions");
    }

    fn stopped(&self) {
        info!(worker = %self.config.name, "worker stopped");
    }
}
