//! The inbox seam: what the worker asks of its inbox table — claim, apply and mark PROCESSED,
//! fail, renew, hand back. [`Inbox`](super::Inbox) implements it on either database; the
//! worker sees only this.

use std::future::Future;
use std::time::Duration;

use super::postgres_locked::LockedRows;
use super::rows::{Applied, ApplyError, BoundStatement, InboxRow, InboxStats};
use crate::store::error::{PrepareError, StoreResult};

/// The worker's statements; every transition is fenced by lease owner + token.
pub trait InboxStore: Send + Sync + 'static {
    /// Prepares the store's statements and the handlers' (`(label, sql)`), naming what fails.
    fn check(&self, handler_sql: &[(String, String)]) -> impl Future<Output = Result<(), PrepareError>> + Send;

    fn claim(
        &self,
        owner: &str,
        batch_size: u32,
        lease: Duration,
    ) -> impl Future<Output = StoreResult<Vec<InboxRow>>> + Send;

    /// In one transaction: each item's statements and its fenced mark to PROCESSED. An item
    /// whose statements refuse its data or whose fence refuses is not applied (rolled back to
    /// its savepoint); the others commit together (one commit for the batch). A dialect may
    /// first try the batch without savepoints and isolate rows only when one fails. `Err` when
    /// the transaction as a whole failed: nothing committed.
    fn apply_batch(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> impl Future<Output = StoreResult<Vec<Result<Applied, ApplyError>>>> + Send;

    /// Records a failure: back to PENDING after `retry_in`, or DEAD when `None`. False if fenced.
    fn fail(
        &self,
        owner: &str,
        row: &InboxRow,
        error: &str,
        retry_in: Option<Duration>,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    fn renew(
        &self,
        owner: &str,
        rows: &[(String, i64)],
        lease: Duration,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Hands rows (id, token) back to PENDING without counting an attempt (shutdown).
    fn release(&self, owner: &str, rows: &[(String, i64)]) -> impl Future<Output = StoreResult<u64>> + Send;

    /// `claim = "locked"`: locks up to `batch_size` PENDING due rows in a transaction the server
    /// ends if it sits idle longer than `lease`, and changes none of them.
    fn lock(&self, batch_size: u32, lease: Duration) -> impl Future<Output = StoreResult<LockedRows>> + Send;

    fn stats(&self) -> impl Future<Output = StoreResult<InboxStats>> + Send;

    /// Retention: deletes up to `batch` PROCESSED / IGNORED rows older than `age`; returns how many.
    fn purge(&self, age: Duration, batch: u32) -> impl Future<Output = StoreResult<u64>> + Send;
}
