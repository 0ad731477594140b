//! The inbox bridge: stream → validate → insert-if-absent into `consumer_inbox` → only then
//! XACK. Invalid entries take the poison path (recorded with their reason, then acknowledged).
//!
//! One [`StreamBridge`] runs per configured stream, each on its own Redis connection because
//! its reads block. The batch handling (the ordering the invariants rest on) is in `batch`;
//! recovery of entries left pending by dead consumers, cleanup and gauges are in `recover`.

mod apply;
mod batch;
pub(crate) mod config;
mod recover;
pub(crate) mod takeover;
pub(crate) mod validate;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, trace, warn};

use crate::bridge::config::{BridgeConfig, StreamSource};
use crate::bridge::takeover::{InboxEvent, PoisonRecord, Takeover};
use crate::broker::group::{ConsumerGroup, GroupError, GroupResult, Read};
use crate::broker::read::RawEntry;
use crate::fault::Faults;
use crate::pause::PauseSwitch;
use crate::runtime::backoff::Retrier;
use crate::telemetry::health::Component;
use crate::telemetry::metrics::BridgeHandles;
use crate::telemetry::throttle::Throttle;
use crate::telemetry::traces::EventSpan;
use validate::Validator;

pub(crate) use apply::Apply;

/// A read bringing more than this is large: its reply's buffer is worth giving back, once the
/// stream has been quiet for [`QUIET`].
const LARGE_READ_BYTES: usize = 1 << 20;
const QUIET: Duration = Duration::from_secs(5);

pub(crate) struct BridgeDeps {
    pub store: Takeover,
    pub metrics: BridgeHandles,
    pub health: Arc<Component>,
    pub faults: Faults,
    /// Fires when in-flight work must stop (shutdown drain time over).
    pub abandon: CancellationToken,
    /// Apply at take-over: the handlers run in the takeover's transaction, if configured.
    pub apply: Option<Arc<Apply>>,
}

/// One stream of one bridge.
pub(crate) struct StreamBridge<G> {
    config: BridgeConfig,
    source: StreamSource,
    validator: Arc<Validator>,
    /// The stream's consumer group, on whichever broker.
    group: G,
    deps: BridgeDeps,
    /// When old delivery counts were last forgotten (see `recover`).
    counts_forgotten_at: std::sync::Mutex<Option<Instant>>,
    /// How often a failed apply at take-over is logged.
    apply_errors: std::sync::Mutex<Throttle>,
}

impl<G: ConsumerGroup> StreamBridge<G> {
    pub(crate) fn new(
        config: BridgeConfig,
        source: StreamSource,
        validator: Arc<Validator>,
        group: G,
        deps: BridgeDeps,
    ) -> Self {
        let apply_errors = std::sync::Mutex::new(Throttle::new(Duration::from_secs(30)));
        Self { config, source, validator, group, deps, counts_forgotten_at: Default::default(), apply_errors }
    }

    /// Reads until `shutdown`: first this consumer's own pending entries (left by a previous
    /// run under the same name), then new ones; every so often, entries idle on other consumers.
    pub(crate) async fn run(self: Arc<Self>, mut pause: PauseSwitch, shutdown: CancellationToken) {
        info!(bridge = %self.config.name, stream = %self.source.key, consumer = %self.group.consumer(), "bridge started");
        let mut budget = ReadBudget::new(&self.config);
        let mut own_backlog = true;
        let mut last_recovery: Option<Instant> = None;
        let mut outage = Retrier::new(crate::runtime::backoff::BackoffConfig::outage_default());
        let mut errors = Throttle::new(Duration::from_secs(30));
        // New entries read, and validated, while the previous batch was being taken over.
        let mut ahead: Option<GroupResult<(Read, Sorted)>> = None;
        // The last batch committed and not yet acknowledged: its XACK goes out while the next
        // batch commits, so the database never waits for Redis in between.
        let mut unacked = Committed::default();
        // A read of large entries since the stream was last quiet, and since when it has been
        // (see `fresh_connection`).
        let mut carried_large = false;
        let mut quiet_since: Option<Instant> = None;
        while !shutdown.is_cancelled() {
            self.deps.health.beat();
            // Only a pause known to be in force: before the pauses are first read (a start
            // while the database is down) the bridge reads, as it can take nothing over until
            // the database answers. Effects wait for the read (`Apply::worker_paused`).
            if pause.paused() {
                // Paused: what committed is acknowledged and what was read ahead is taken over
                // first, so nothing waits out the pause in this consumer's pending list.
                self.ack(std::mem::take(&mut unacked)).await;
                self.finish_read_ahead(ahead.take()).await;
                pause.wait_while_paused(&self.deps.health, &shutdown).await;
                continue;
            }
            let recovery_due = last_recovery.is_none_or(|at| at.elapsed() >= self.config.claim_idle / 2);
            if recovery_due || !matches!(ahead, Some(Ok(_))) {
                // Recovery, a read that may wait for new entries (or return this consumer's own
                // pending ones), an outage's backoff: acknowledge what committed first.
                self.ack(std::mem::take(&mut unacked)).await;
            }
            if recovery_due {
                last_recovery = Some(Instant::now());
                self.recover(&shutdown, budget.count()).await;
            }
            let reading = Instant::now();
            let (read, sorted) = match ahead.take() {
                Some(Ok((read, sorted))) => (Ok(read), Some(sorted)),
                Some(Err(e)) => (Err(e), None),
                None if own_backlog => {
                    let own = self.group.own_pending(budget.count()).await;
                    (own.map(|redelivered| Read { entries: Vec::new(), redelivered }), None)
                }
                None => tokio::select! {
                    read = self.group.read(budget.count(), Some(self.config.block)) => (read, None),
                    _ = shutdown.cancelled() => break,
                },
            };
            match read {
                Ok(Read { entries, redelivered }) => {
                    // One read, one observation (twice would halve the estimate twice).
                    budget.observe(entries.iter().chain(&redelivered));
                    outage.succeeded();
                    errors.reset();
                    self.deps.health.set_stream_ok(true);
                    if !redelivered.is_empty() {
                        // Delivered before: counted, suspects alone (see `redelivered`), after
                        // what committed is acknowledged. No read-ahead: reading this consumer's
                        // own pending entries again would return them too.
                        quiet_since = None;
                        self.ack(std::mem::take(&mut unacked)).await;
                        self.redelivered(redelivered).await;
                        if entries.is_empty() {
                            continue;
                        }
                    } else if entries.is_empty() {
                        own_backlog = false;
                        // Quiet for a while after large entries: give their read buffer back.
                        match quiet_since {
                            _ if !carried_large => {}
                            None => quiet_since = Some(Instant::now()),
                            Some(at) if at.elapsed() >= QUIET => {
                                (carried_large, quiet_since) = (false, None);
                                self.fresh_connection();
                            }
                            Some(_) => {}
                        }
                        continue;
                    }
                    quiet_since = None;
                    trace!(entries = entries.len(), read_ms = reading.elapsed().as_secs_f64() * 1e3, "batch read");
                    let bytes = entries.iter().map(RawEntry::size).sum::<usize>();
                    carried_large |= bytes > LARGE_READ_BYTES;
                    let large = bytes > self.config.batch_bytes / 2;
                    let none = HashMap::new();
                    let previous = std::mem::take(&mut unacked);
                    if large {
                        // Nor for a batch of large entries (two of them at once would double the
                        // memory the read budget allows).
                        let sorted = sorted.unwrap_or_else(|| self.sort(&entries, &none));
                        let ((), committed) = tokio::join!(self.ack(previous), self.commit(entries, sorted));
                        unacked = committed;
                    } else {
                        // The next batch is read and validated while this one commits (the read
                        // waits on Redis, the commit on the database, validation on neither).
                        // Without BLOCK, so the acknowledgement that ends this batch never queues
                        // behind a read waiting for new entries.
                        let sorted = sorted.unwrap_or_else(|| self.sort(&entries, &none));
                        let next = async {
                            let read = self.group.read(budget.count(), None).await;
                            read.map(|next| {
                                let sorted = self.sort(&next.entries, &none);
                                (next, sorted)
                            })
                        };
                        let ((), committed, next) =
                            tokio::join!(self.ack(previous), self.commit(entries, sorted), next);
                        unacked = committed;
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
        self.ack(unacked).await;
        self.finish_read_ahead(ahead).await;
        self.deps.health.stopped();
        info!(bridge = %self.config.name, stream = %self.source.key, "bridge stopped");
    }

    /// Entries already read ahead belong to this consumer now: taken over (and acknowledged)
    /// before it stops or pauses, rather than left for recovery.
    async fn finish_read_ahead(&self, ahead: Option<GroupResult<(Read, Sorted)>>) {
        if let Some(Ok((read, sorted))) = ahead {
            if !read.entries.is_empty() {
                self.take_over_and_ack(read.entries, sorted).await;
            }
            if !read.redelivered.is_empty() {
                self.redelivered(read.redelivered).await;
            }
        }
    }

    /// Replaces this stream's connection once the stream is quiet ([`QUIET`]) after large entries: the
    /// client's read buffer keeps the allocation of the largest reply it decoded for as long as
    /// the connection lives (the entries' bytes were cut from it), so without this the memory
    /// of one large read stayed with an idle bridge.
    fn fresh_connection(&self) {
        debug!(bridge = %self.config.name, stream = %self.source.key, "quiet after large entries; reconnecting to free the read buffer");
        self.group.release_buffers();
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
        // A cluster failover moves the stream to the promoted replica: follow it.
        self.group.after_outage().await;
        tokio::select! {
            _ = self.deps.health.sleep(outage.failed()) => {}
            _ = shutdown.cancelled() => {}
        }
    }
}

/// Entries whose takeover committed, waiting for their XACK (the bridge sends it while the next
/// batch commits), with the spans that end once they are acknowledged.
#[derive(Default)]
pub(super) struct Committed {
    pub(super) entry_ids: Vec<String>,
    pub(super) spans: Vec<EventSpan>,
}

/// A batch sorted by validation: the events to take over, the poison records, and the entries
/// that repeat an event earlier in the same batch (acknowledged with it).
pub(super) struct Sorted {
    pub(super) events: Vec<InboxEvent>,
    pub(super) poison: Vec<PoisonRecord>,
    pub(super) repeats: Vec<String>,
    /// The entries are redeliveries whose deliveries were counted: the takeover forgets them.
    pub(super) counted: bool,
}

/// How many entries one read may ask for: `batch_size`, fewer when entries are large, so that a
/// read brings in about `batch_bytes` at most. The estimate is the largest entry of the last
/// read, or half the previous estimate when entries got smaller. It starts at `batch_bytes`
/// (one entry), so the reads after a start grow 1, 2, 4, … while entries are small: a bridge
/// killed by what it read (a burst of huge entries, out of memory) reads them again one or two
/// at a time and refuses them, instead of dying on them again for ever — those reads come
/// before anything could count the deliveries. Redis cannot bound a read by bytes, so a read
/// after small entries can still bring `batch_size` entries of whatever size a producer wrote;
/// the next reads adapt (docs/explanation/consumer.md, memory).
#[derive(Debug, Clone)]
struct ReadBudget {
    batch_size: u32,
    batch_bytes: usize,
    largest: usize,
}

impl ReadBudget {
    fn new(config: &BridgeConfig) -> Self {
        Self { batch_size: config.batch_size, batch_bytes: config.batch_bytes, largest: config.batch_bytes.max(1) }
    }

    fn count(&self) -> u32 {
        u32::try_from(self.batch_bytes / self.largest.max(1)).unwrap_or(u32::MAX).clamp(1, self.batch_size)
    }

    fn observe<'a>(&mut self, entries: impl IntoIterator<Item = &'a RawEntry>) {
        if let Some(largest) = entries.into_iter().map(RawEntry::size).max() {
            self.largest = largest.max(self.largest / 2).max(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(size: usize) -> RawEntry {
        RawEntry::new("1-0".into(), Some(vec![(bytes::Bytes::from_static(b"p"), vec![b'x'; size - 1].into())]))
    }

    #[test]
    fn large_entries_are_read_a_few_at_a_time_and_small_ones_a_whole_batch() {
        let mut budget = ReadBudget { batch_size: 100, batch_bytes: 8 << 20, largest: 8 << 20 };
        assert_eq!(budget.count(), 1, "one entry before anything was seen");
        let mut reads = Vec::new();
        for _ in 0..8 {
            budget.observe(&[entry(300)]);
            reads.push(budget.count());
        }
        assert_eq!(reads, [2, 4, 8, 16, 32, 64, 100, 100], "growing while entries are small");
        budget.observe(&[entry(4 << 20)]);
        assert_eq!(budget.count(), 2);
        budget.observe(&[entry(16 << 20)]);
        assert_eq!(budget.count(), 1, "never below one");
        for _ in 0..30 {
            budget.observe(&[entry(300)]);
        }
        assert_eq!(budget.count(), 100, "back to batch_size once entries are small");
    }
}
