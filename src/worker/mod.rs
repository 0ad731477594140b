//! The inbox worker: claim PENDING (and lease-expired PROCESSING) rows under a lease, apply the
//! handler's effect and mark PROCESSED in one transaction, or record the failure: retry with
//! backoff, or DEAD at once when retrying cannot help. With `claim = "locked"` a batch is
//! locked, applied and marked in one transaction instead (see `locked`).

mod batch;
mod handler;
mod http;
mod locked;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::config::{ClaimMode, WorkerConfig};
use crate::error::error_chain;
use crate::retry::Retrier;
use crate::sql::params::Placeholder;
use crate::store::inbox::{InboxRow, InboxStore};
use crate::telemetry::health::Component;
use crate::telemetry::metrics::WorkerHandles;
use crate::telemetry::throttle::Throttle;
use crate::turns::LockedTurns;
pub use handler::Handler;

/// Times a settle the database refuses for its data is tried again before it is reported.
const SETTLE_REFUSALS: u32 = 3;

pub struct WorkerDeps<S> {
    pub store: S,
    pub metrics: WorkerHandles,
    pub health: Arc<Component>,
    /// Identifies this process in `lease_owner`; each loop appends `#<n>`.
    pub owner: String,
    pub abandon: CancellationToken,
}

pub struct Worker<S> {
    config: WorkerConfig,
    handlers: Vec<Handler>,
    deps: WorkerDeps<S>,
    /// Per loop, since when its locked batch has been open: such rows hold no lease the `stats`
    /// statement could see, so the oldest-lease gauge takes their age from here.
    locked_since: std::sync::Mutex<Vec<Option<std::time::Instant>>>,
}

impl<S: InboxStore> Worker<S> {
    pub fn new(config: WorkerConfig, style: Placeholder, deps: WorkerDeps<S>) -> Result<Self, String> {
        let handlers = config
            .handlers
            .iter()
            .enumerate()
            .map(|(i, h)| Handler::build(&config, i, h, style))
            .collect::<Result<_, _>>()?;
        let locked_since = std::sync::Mutex::new(vec![None; config.concurrency as usize]);
        Ok(Self { config, handlers, deps, locked_since })
    }

    /// Every handler statement with a label, for preparing at startup / in `check`.
    pub fn handler_sql(&self) -> Vec<(String, String)> {
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

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The metrics label of the handler that serves `event_type` (`none` if none does).
    fn handler_label(&self, event_type: &str) -> &str {
        self.handlers.iter().find(|h| h.serves(event_type)).map_or("none", |h| h.label.as_str())
    }

    /// Prepares the inbox statements and every handler statement against the database.
    pub async fn check_statements(&self, handler_sql: &[(String, String)]) -> Result<(), crate::store::PrepareError> {
        self.deps.store.check(handler_sql).await
    }

    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut loops = tokio::task::JoinSet::new();
        for n in 0..self.config.concurrency {
            let worker = self.clone();
            let shutdown = shutdown.clone();
            let span = info_span!("worker", worker = %self.config.name, loop_index = n);
            loops.spawn(async move { worker.claim_loop(n, shutdown).await }.instrument(span));
        }
        crate::tasks::join_loops(&mut loops).await;
        self.deps.health.stopped();
        info!(worker = %self.config.name, "worker stopped");
    }

    async fn claim_loop(&self, n: u32, shutdown: CancellationToken) {
        let owner = format!("{}#{n}", self.deps.owner);
        let mut outage = Retrier::new(self.config.outage_backoff.clone());
        let mut errors = Throttle::new(Duration::from_secs(30));
        let mut turns = LockedTurns::default();
        while !shutdown.is_cancelled() {
            self.deps.health.beat();
            if self.locked_turn(&mut turns) {
                let (rows, batch) = match self.deps.store.lock(self.config.batch_size, self.config.lease).await {
                    Ok(locked) => locked,
                    Err(e) => {
                        self.claim_failed(&e, &mut errors, &mut outage, &shutdown).await;
                        continue;
                    }
                };
                self.claim_succeeded(&mut errors, &mut outage);
                let full = rows.len() as u32 >= self.config.batch_size;
                let Some(batch) = batch else {
                    sleep_or(self.config.poll_interval, &shutdown).await;
                    continue;
                };
                self.mark_locked(n, Some(std::time::Instant::now()));
                let outcome = self.process_locked(&owner, rows, batch, &shutdown).await;
                self.mark_locked(n, None);
                match outcome {
                    locked::Outcome::Committed if full => {}
                    locked::Outcome::Committed | locked::Outcome::Abandoned => {
                        sleep_or(self.config.poll_interval, &shutdown).await
                    }
                    // A row needs the leased claim's savepoints (or its failure recorded): at once.
                    locked::Outcome::Refused => turns.lease_next(),
                    locked::Outcome::Outage => sleep_or(outage.failed(), &shutdown).await,
                }
                continue;
            }
            let rows = match self.deps.store.claim(&owner, self.config.batch_size, self.config.lease).await {
                Ok(rows) => rows,
                Err(e) => {
                    self.claim_failed(&e, &mut errors, &mut outage, &shutdown).await;
                    continue;
                }
            };
            self.claim_succeeded(&mut errors, &mut outage);
            turns.reclaimed(rows.iter().any(|r| r.reclaimed));
            let again_now = rows.len() as u32 >= self.config.batch_size || rows.iter().any(|r| r.reclaimed);
            if rows.is_empty() {
                sleep_or(self.config.poll_interval, &shutdown).await;
                continue;
            }
            self.process_batch(&owner, rows, &shutdown).await;
            if !again_now {
                sleep_or(self.config.poll_interval, &shutdown).await;
            }
        }
    }

    /// Whether this turn is a locked one (see [`crate::turns`]: a leased turn first, once per
    /// lease, after one that reclaimed a row, and after a locked batch a row of which needs the
    /// leased claim's isolation, keep crash-loop detection and per-row failures as they are).
    fn locked_turn(&self, turns: &mut LockedTurns) -> bool {
        self.config.claim == ClaimMode::Locked
            && turns.locked(self.config.lease, || {
                info!(worker = %self.config.name, "claim = locked: leased turn done, claiming in locked transactions")
            })
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

    fn claim_succeeded(&self, errors: &mut Throttle, outage: &mut Retrier) {
        outage.succeeded();
        errors.reset();
        self.deps.health.set_source_ok(true);
    }

    async fn claim_failed(
        &self,
        error: &crate::store::StoreError,
        errors: &mut Throttle,
        outage: &mut Retrier,
        shutdown: &CancellationToken,
    ) {
        self.deps.health.set_source_ok(false);
        if let Some(suppressed) = errors.allow() {
            warn!(error = %error_chain(error), suppressed, "claiming inbox rows failed; backing off");
        }
        sleep_or(outage.failed(), shutdown).await;
    }

    /// Records a row's failure, retrying through a database outage (beating: waiting it out is
    /// not being stuck) until the shutdown drain ends; a row whose failure is never recorded
    /// would have its lease lapse and count an expired lease it did not cause (invariant 12).
    /// The database refusing the record itself (its error text, say) is retried a few times,
    /// the last with a minimal text, then reported and counted, never retried for ever.
    async fn persist_failure(&self, owner: &str, row: &InboxRow, error: &str, retry_in: Option<Duration>) {
        let mut retrier = Retrier::new(self.config.outage_backoff.clone());
        let mut refusals = 0;
        loop {
            let text = if refusals < SETTLE_REFUSALS { error } else { "handler failed (its error text was refused)" };
            match self.deps.store.fail(owner, row, text, retry_in).await {
                Ok(true) => return,
                Ok(false) => {
                    warn!(event_id = %row.event_id, "failure not recorded: another worker owns the row");
                    return;
                }
                Err(e) if e.is_data_fault() && refusals >= SETTLE_REFUSALS => {
                    self.deps.metrics.settle_refused.inc();
                    tracing::error!(event_id = %row.event_id, error = %error_chain(&e), "the database refuses to record this row's failure; its lease will lapse");
                    return;
                }
                Err(e) => {
                    refusals += u32::from(e.is_data_fault());
                    debug!(event_id = %row.event_id, error = %error_chain(&e), "could not record a failure yet");
                    self.deps.health.beat();
                    tokio::select! {
                        _ = self.deps.health.sleep(retrier.failed()) => {}
                        _ = self.deps.abandon.cancelled() => {
                            warn!(event_id = %row.event_id, "could not record a failure before the drain ended; the lease will lapse");
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Hands rows back without counting an attempt, retrying through a database outage until
    /// the shutdown drain ends (then their leases lapse). Beats while it waits: a loop waiting
    /// out an outage is alive, and a restart would leave these leases to lapse and count.
    async fn release(&self, owner: &str, rows: &[(String, i64)]) {
        let mut retrier = Retrier::new(self.config.outage_backoff.clone());
        loop {
            self.deps.health.beat();
            match self.deps.store.release(owner, rows).await {
                Ok(_) => return,
                Err(e) => {
                    debug!(rows = rows.len(), error = %error_chain(&e), "could not release rows yet");
                    tokio::select! {
                        _ = self.deps.health.sleep(retrier.failed()) => {}
                        _ = self.deps.abandon.cancelled() => {
                            warn!(rows = rows.len(), "could not release rows; their leases will lapse");
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Runs `work` while a heartbeat renews the leases of `rows`; `None` if abandoned at shutdown.
    async fn under_lease<F: Future>(&self, owner: &str, rows: &[(String, i64)], work: F) -> Option<F::Output> {
        let renew = || async move {
            if let Err(e) = self.deps.store.renew(owner, rows, self.config.lease).await {
                debug!(error = %error_chain(&e), "lease renewal failed");
            }
        };
        crate::tasks::under_lease(self.config.lease, &self.deps.abandon, renew, work).await
    }

    /// Deletes PROCESSED rows older than `retention.processed_after` in bounded batches, every
    /// `retention.interval`. DEAD rows wait for `handoff dead retry` / `purge`.
    pub async fn purge(&self, shutdown: CancellationToken) {
        let Some(retention) = self.config.retention.clone() else { return };
        crate::tasks::every(retention.interval, &shutdown, || async {
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
    pub async fn sample(&self, interval: Duration, shutdown: CancellationToken) {
        crate::tasks::every(interval, &shutdown, || async {
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

async fn sleep_or(duration: Duration, shutdown: &CancellationToken) {
    tokio::select! {
        _ = tokio::time::sleep(duration) => {}
        _ = shutdown.cancelled() => {}
    }
}
