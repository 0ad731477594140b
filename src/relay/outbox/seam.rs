//! The outbox seam: what the relay asks of the table it relays — claim a batch, settle each row
//! one way, hand rows back. The outbox on either database ([`Outbox`](super::Outbox)) implements
//! it, and so does the relay's tests' fake; the relay sees only this.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::postgres_locked::Locked;
use super::rows::{ClaimedRow, Delivered, DeliveredPages, DeliveredRow, Failure, OutboxStats, RowRef};
use crate::store::error::{StoreError, StoreResult};

pub trait OutboxStore: Send + Sync + 'static {
    /// Locks up to `batch_size` due rows in a transaction that the server ends if it sits idle
    /// longer than `idle_timeout` (a relay hung mid-batch). Only stores that support
    /// `claim = "locked"` implement it; configuration refuses the others.
    fn lock(&self, batch_size: u32, idle_timeout: Duration) -> impl Future<Output = StoreResult<Locked>> + Send {
        let _ = (batch_size, idle_timeout);
        async { Err(StoreError::no_locked_claim()) }
    }

    fn claim(
        &self,
        claimant: &str,
        batch_size: u32,
        lease: Duration,
    ) -> impl Future<Output = StoreResult<Vec<ClaimedRow>>> + Send;

    /// Names of the claim statement's result columns.
    fn columns(&self) -> Arc<[String]>;

    /// Marks delivered (or deletes, per the relay's settle mode).
    fn settle_delivered(&self, claimant: &str, rows: &[Delivered]) -> impl Future<Output = StoreResult<u64>> + Send;

    fn settle_failed(&self, claimant: &str, failures: &[Failure]) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Hands rows back untouched, due again after `delay` (zero: at once).
    fn release(
        &self,
        claimant: &str,
        rows: &[RowRef],
        delay: Duration,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    fn renew(&self, claimant: &str, rows: &[RowRef], lease: Duration) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Samples the gauges; `None` when no stats statement is configured.
    fn stats(&self) -> impl Future<Output = StoreResult<Option<OutboxStats>>> + Send;

    /// Retention: deletes up to `batch` delivered rows older than `age`; returns how many.
    fn purge(&self, age: Duration, batch: u32) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Rows delivered within `age`, with their streams and entry ids, in pages of `page` rows
    /// sent as they are read (the reader holds its connection until the last page, so memory
    /// stays at a few pages whatever the window); `None` when the store has no such statement
    /// (rows deleted on settle, or an adopted table without one).
    fn delivered_since(
        &self,
        age: Duration,
        page: usize,
    ) -> impl Future<Output = StoreResult<Option<DeliveredPages>>> + Send;

    /// Moves delivered rows back to PENDING (their entries were lost by the broker), each only
    /// while it still points at that entry; returns how many moved.
    fn redrive(&self, rows: &[DeliveredRow]) -> impl Future<Output = StoreResult<u64>> + Send;
}
