//! The claim loop the relay and the worker share: `concurrency` loops, each claiming a batch
//! (locked or under a lease), working it through to its settle, and deciding what comes next —
//! claim again at once, wait for more work, back off from an outage — until shutdown, beating
//! on every turn. A component says what a claim, a turn and a wait are ([`ClaimTurns`]); the
//! loop around them is written once, here.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::backoff::Retrier;
use super::supervisor::join_loops;
use super::turns::LockedTurns;
use super::wait::sleep_or;
use crate::pause::PauseSwitch;
use crate::runtime::backoff::BackoffConfig;
use crate::runtime::loop_config::{ClaimLoopConfig, ClaimMode, LoopDefaults};
use crate::store::StoreError;
use crate::telemetry::health::Component;
use crate::telemetry::throttle::Throttle;

/// A claim loop's settings, the same for a relay and a worker.
#[derive(Debug, Clone)]
pub(crate) struct ClaimLoop {
    /// Rows per claim; a claim that comes back full is followed by another at once.
    pub batch_size: u32,
    /// Loops claiming at once.
    pub concurrency: u32,
    /// The wait after a claim that was not full.
    pub poll_interval: Duration,
    /// A claimed batch's lease (for a locked claim: its idle-in-transaction timeout), and how
    /// often a locked loop takes a leased turn.
    pub lease: Duration,
    /// `Locked`: claims lock a batch in a transaction, with a leased turn now and then.
    pub claim: ClaimMode,
    /// The wait after a claim or a turn that met an outage.
    pub outage_backoff: BackoffConfig,
}

impl<D: LoopDefaults> From<&ClaimLoopConfig<D>> for ClaimLoop {
    fn from(config: &ClaimLoopConfig<D>) -> Self {
        Self {
            batch_size: config.batch_size,
            concurrency: config.concurrency,
            poll_interval: config.poll_interval,
            lease: config.lease,
            claim: config.claim,
            outage_backoff: config.outage_backoff.clone(),
        }
    }
}

/// What a claim took: rows under a lease, or rows an open transaction holds (`held`).
pub(crate) enum Batch<R, H> {
    Leased(Vec<R>),
    Locked(Vec<R>, H),
}

impl<R, H> Batch<R, H> {
    /// A locked claim's result: the rows and the transaction holding them, none when nothing
    /// was due (the transaction is over already).
    pub(crate) fn locked((rows, held): (Vec<R>, Option<H>)) -> Self {
        match held {
            Some(held) => Batch::Locked(rows, held),
            None => Batch::Leased(Vec::new()),
        }
    }

    pub(crate) fn rows(&self) -> &[R] {
        match self {
            Batch::Leased(rows) | Batch::Locked(rows, _) => rows,
        }
    }
}

/// What the loop does after a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Claim again at once if the batch was full or reclaimed a row (more is waiting), else
    /// wait for the poll interval.
    Continue,
    /// Wait for the poll interval whatever the batch was.
    Wait,
    /// An outage: wait out the outage backoff.
    Backoff,
    /// The broker is down: wait, probing it, until it answers.
    AwaitBroker,
    /// Claim again at once, under a lease (a locked batch whose rows need the leased claim).
    Leased,
}

/// A loop's identity: its index among the component's loops, and the claimant id it claims as.
pub(crate) struct LoopId {
    pub index: u32,
    pub claimant: String,
}

/// What a component does in its claim loop.
pub(crate) trait ClaimTurns: Send + Sync + 'static {
    /// A claimed row.
    type Row: Send;
    /// The open transaction of a locked batch.
    type Held: Send;

    /// Whether a claim took `row` over from a claimant whose lease expired.
    fn reclaimed(row: &Self::Row) -> bool;

    /// The span a loop runs in.
    fn span(&self, index: u32) -> tracing::Span;

    /// Claims up to a batch: locked in a transaction, or under a lease as `claimant`.
    fn claim(
        &self,
        claimant: &str,
        locked: bool,
    ) -> impl Future<Output = Result<Batch<Self::Row, Self::Held>, StoreError>> + Send;

    /// A claim failed: count and report it; `log`: the errors suppressed since the last one
    /// logged, when this one is to be logged.
    fn claim_failed(&self, error: &StoreError, log: Option<u64>);

    /// A claim went through (after failures, the database is back).
    fn claim_succeeded(&self);

    /// Works a claimed batch through to its settle (or hands it back).
    fn work(
        &self,
        id: &LoopId,
        batch: Batch<Self::Row, Self::Held>,
        shutdown: &CancellationToken,
    ) -> impl Future<Output = Next> + Send;

    /// Waits for more work: `poll_interval` (or less, when something rings).
    fn idle(&self, poll_interval: Duration, shutdown: &CancellationToken) -> impl Future<Output = ()> + Send {
        sleep_or(poll_interval, shutdown)
    }

    /// After [`Next::AwaitBroker`]: whether the broker answers now (`failures`: probes so far).
    fn broker_answers(&self, failures: u32) -> impl Future<Output = bool> + Send {
        let _ = failures;
        async { true }
    }

    /// The first locked turn of a loop (to say that it switched from the leased first turn).
    fn switched_to_locked(&self);

    /// Every loop has stopped.
    fn stopped(&self);
}

/// A component's claim loops: what they do, their settings, the health they beat.
pub(crate) struct ClaimLoops<T> {
    pub turns: Arc<T>,
    pub settings: ClaimLoop,
    pub health: Arc<Component>,
    /// Whether the component is paused: checked between two turns.
    pub pause: PauseSwitch,
}

/// Runs the component's claim loops until `shutdown`; returns once every loop has settled or
/// handed back what it held. `claimant`: this process's id for the component (each loop
/// appends `#<n>`). A loop that panics panics this task, so the supervisor sees it.
pub(crate) async fn run<T: ClaimTurns>(loops: ClaimLoops<T>, claimant: &str, shutdown: CancellationToken) {
    let ClaimLoops { turns, settings, health, pause } = loops;
    let settings = Arc::new(settings);
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..settings.concurrency {
        let id = LoopId { index, claimant: format!("{claimant}#{index}") };
        let (turns, settings, health, shutdown) = (turns.clone(), settings.clone(), health.clone(), shutdown.clone());
        let span = turns.span(index);
        let pause = pause.clone();
        tasks.spawn(
            async move { claim_loop(&*turns, &settings, (&health, pause), id, shutdown).await }.instrument(span),
        );
    }
    join_loops(&mut tasks).await;
    health.stopped();
    turns.stopped();
}

async fn claim_loop<T: ClaimTurns>(
    turns: &T,
    settings: &ClaimLoop,
    (health, mut pause): (&Component, PauseSwitch),
    id: LoopId,
    shutdown: CancellationToken,
) {
    let mut outage = Retrier::new(settings.outage_backoff.clone());
    let mut errors = Throttle::new(Duration::from_secs(30));
    let mut locked_turns = LockedTurns::default();
    while !shutdown.is_cancelled() {
        health.beat();
        // Paused: nothing is held between two turns, so there is nothing to release first.
        if pause.holds() {
            pause.wait_while_paused(health, &shutdown).await;
            continue;
        }
        // See `turns`: a leased turn first, once per lease, and after one that reclaimed a row.
        let locked =
            settings.claim == ClaimMode::Locked && locked_turns.locked(settings.lease, || turns.switched_to_locked());
        let batch = match turns.claim(&id.claimant, locked).await {
            Ok(batch) => batch,
            Err(error) => {
                turns.claim_failed(&error, errors.allow());
                sleep_or(outage.failed(), &shutdown).await;
                continue;
            }
        };
        errors.reset();
        turns.claim_succeeded();
        let (rows, reclaimed) = (batch.rows().len(), batch.rows().iter().any(T::reclaimed));
        if !locked {
            locked_turns.reclaimed(reclaimed);
        }
        if rows == 0 {
            turns.idle(settings.poll_interval, &shutdown).await;
            continue;
        }
        // A full batch means more is waiting; a reclaimed row is claimed alone, so its
        // neighbours from the dead claimant's batch are waiting too.
        let more = rows as u32 >= settings.batch_size || reclaimed;
        match turns.work(&id, batch, &shutdown).await {
            Next::Continue => {
                outage.succeeded();
                if !more {
                    turns.idle(settings.poll_interval, &shutdown).await;
                }
            }
            Next::Wait => {
                outage.succeeded();
                turns.idle(settings.poll_interval, &shutdown).await;
            }
            Next::Leased => {
                outage.succeeded();
                locked_turns.lease_next();
            }
            Next::Backoff => sleep_or(outage.failed(), &shutdown).await,
            Next::AwaitBroker => await_broker(turns, health, &mut outage, &shutdown).await,
        }
    }
}

/// Probes the broker until it answers instead of claiming rows only to release them.
async fn await_broker<T: ClaimTurns>(
    turns: &T,
    health: &Component,
    outage: &mut Retrier,
    shutdown: &CancellationToken,
) {
    loop {
        sleep_or(outage.failed(), shutdown).await;
        health.beat();
        if shutdown.is_cancelled() {
            return;
        }
        if turns.broker_answers(outage.failures()).await {
            outage.succeeded();
            return;
        }
    }
}
