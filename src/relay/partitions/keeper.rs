//! Housekeeping of a time-partitioned outbox (`[relay.partitions]`): every `interval`, the
//! partitions for the current span and `ahead` more exist, and those whose span ended more than
//! `drop_after` ago are dropped once every row in them is delivered. A partition holding a
//! PENDING, IN_FLIGHT or DEAD row waits (counted in `handoff_relay_partitions_held`): rows are
//! never moved out of it or lost with it. Rows of the default partition (those no partition
//! covered when they were inserted) are deleted row by row once delivered that long ago.

use std::time::SystemTime;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::config::PartitionsConfig;
use super::plan;
use super::postgres::{Outcome, PartitionedOutbox};
use crate::error::error_chain;
use crate::store::StoreError;
use crate::telemetry::metrics::RelayHandles;

/// Rows of the default partition deleted per statement.
const PURGE_BATCH: u32 = 1000;

pub(crate) struct PartitionKeeper {
    pub relay: String,
    pub config: PartitionsConfig,
    pub outbox: PartitionedOutbox,
    pub metrics: RelayHandles,
}

impl PartitionKeeper {
    /// A pass at once (so partitions exist before the first busy minute), then every `interval`.
    pub(crate) async fn run(self, shutdown: CancellationToken) {
        loop {
            if let Err(e) = self.pass(SystemTime::now(), &shutdown).await {
                warn!(relay = %self.relay, error = %error_chain(&e), "partition housekeeping failed; next pass in relay.partitions.interval");
            }
            tokio::select! {
                _ = tokio::time::sleep(self.config.interval) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// One pass as of `now`: create what is missing, drop what is old and settled.
    pub(crate) async fn pass(&self, now: SystemTime, shutdown: &CancellationToken) -> Result<(), StoreError> {
        for span in plan::wanted(now, self.config.every, self.config.ahead) {
            if let Some(moved) = self.outbox.create(span).await? {
                self.metrics.partitions_created.inc();
                info!(relay = %self.relay, partition = %span.name(self.outbox.table()), moved_from_default = moved, "partition created");
            }
        }
        let mut held = 0;
        for partition in self.outbox.existing().await? {
            if shutdown.is_cancelled() {
                break;
            }
            if partition.default {
                self.purge_default(&partition.name, shutdown).await?;
                continue;
            }
            if !partition.to.is_some_and(|to| plan::past(to, now, self.config.drop_after)) {
                continue;
            }
            match self.outbox.drop_if_settled(&partition.name, self.config.drop_after).await? {
                Outcome::Dropped => {
                    self.metrics.partitions_dropped.inc();
                    info!(relay = %self.relay, partition = %partition.name, "partition dropped: every row in it was delivered");
                }
                Outcome::Held(why) => {
                    held += 1;
                    warn!(relay = %self.relay, partition = %partition.name, rows = %why, "partition past drop_after kept: rows in it are not delivered yet");
                }
            }
        }
        self.metrics.partitions_held.set(held);
        Ok(())
    }

    async fn purge_default(&self, default: &str, shutdown: &CancellationToken) -> Result<(), StoreError> {
        loop {
            let n = self.outbox.purge_default(default, self.config.drop_after, PURGE_BATCH).await?;
            self.metrics.purged.inc_by(n);
            if n < u64::from(PURGE_BATCH) || shutdown.is_cancelled() {
                return Ok(());
            }
        }
    }
}
