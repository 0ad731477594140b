//! The relay's outbox, written once for every dialect: which statement settles what, what an
//! empty batch does, what a result row means. A dialect ([`Statements`]) only runs a named
//! statement with its bindings — that is all that truly differs between Postgres and MySQL.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use std::collections::HashSet;

use super::bindings::{self, Param};
use super::claim::ClaimShape;
use super::{ClaimedRow, Delivered, DeliveredRow, Failure, OutboxStats, OutboxStore, RowRef, StoreError, StoreResult};
use crate::config::SettleMode;
use crate::config::statements::StatementKind;

/// A result row: each column's name and its value as text.
pub type TextRow = Vec<(String, Option<String>)>;

/// What every dialect's outbox knows once its statements are prepared.
pub struct Prepared {
    /// The claim's result columns and how to read them.
    pub shape: ClaimShape,
    pub settle: SettleMode,
    /// The statements the relay has (optional ones may be absent).
    pub present: HashSet<StatementKind>,
}

/// What a dialect provides: its prepared statements, run with bindings.
pub trait Statements: Send + Sync + 'static {
    fn prepared(&self) -> &Prepared;

    /// The claim (a single statement on Postgres, a script on MySQL).
    fn claim(
        &self,
        claimant: &str,
        batch_size: u32,
        lease: Duration,
    ) -> impl Future<Output = StoreResult<Vec<ClaimedRow>>> + Send;

    /// The locked claim, where the dialect has one.
    fn lock(&self, batch_size: u32, idle_timeout: Duration) -> impl Future<Output = StoreResult<super::Locked>> + Send {
        let _ = (batch_size, idle_timeout);
        async { Err(StoreError::no_locked_claim()) }
    }

    /// Runs one statement; returns the rows it changed.
    fn execute(
        &self,
        kind: StatementKind,
        bind: impl Fn(&str) -> Param + Send + Sync,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Runs the statements in one transaction: if it fails part-way nothing is recorded, and a
    /// retry does not find half of the rows settled and count them as fenced. A re-drive
    /// (`redrive`) tells the database so (the reference schema's settled-row guard lets only
    /// those through).
    fn execute_all<F: Fn(&str) -> Param + Send + Sync>(
        &self,
        label: &'static str,
        redrive: bool,
        steps: Vec<(StatementKind, F)>,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Runs one statement and returns its rows as text.
    fn query(
        &self,
        kind: StatementKind,
        bind: impl Fn(&str) -> Param + Send + Sync,
    ) -> impl Future<Output = StoreResult<Vec<TextRow>>> + Send;

    /// Runs one statement and hands its rows over in pages of `page` as they are read, from a
    /// task that holds the connection until the last page is taken (see [`read_pages`]).
    fn query_pages(
        &self,
        kind: StatementKind,
        bind: impl Fn(&str) -> Param + Send + Sync,
        page: usize,
    ) -> impl Future<Output = StoreResult<TextPages>> + Send;
}

/// Pages of result rows as they are read; a failed read ends them with its error.
pub type TextPages = tokio::sync::mpsc::Receiver<StoreResult<Vec<TextRow>>>;

/// Runs `read` in a task of its own, which sends pages on the sender it is given (a send fails
/// once the reader dropped the pages: `read` should then stop); a failed read ends the pages
/// with its error. At most one page waits to be taken.
pub fn read_pages<F, Fut>(read: F) -> TextPages
where
    F: FnOnce(tokio::sync::mpsc::Sender<StoreResult<Vec<TextRow>>>) -> Fut,
    Fut: Future<Output = StoreResult<()>> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let failed = tx.clone();
    let read = read(tx);
    tokio::spawn(async move {
        if let Err(error) = read.await {
            let _ = failed.send(Err(error)).await;
        }
    });
    rx
}

/// `delivered_since`'s rows, page by page as the store reads them.
pub struct DeliveredPages(TextPages);

impl DeliveredPages {
    /// The next page; `None` after the last. A failed read, or a row without the contract's
    /// columns, is an error.
    pub async fn next(&mut self) -> Option<StoreResult<Vec<DeliveredRow>>> {
        let page = self.0.recv().await?;
        Some(page.and_then(|rows| rows.iter().map(delivered_row).collect()))
    }
}

/// One row of `delivered_since`.
fn delivered_row(row: &TextRow) -> StoreResult<DeliveredRow> {
    let text = |name: &str| -> StoreResult<String> {
        column(row, name)
            .map(str::to_owned)
            .ok_or_else(|| StoreError::Contract(format!("delivered_since: column `{name}` is missing or NULL")))
    };
    Ok(DeliveredRow { id: text("id")?, stream: text("stream")?, entry_id: text("entry_id")? })
}

/// A named column of a result row, as text.
fn column<'a>(row: &'a TextRow, name: &str) -> Option<&'a str> {
    row.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.as_deref())
}

impl<S: Statements> OutboxStore for S {
    fn columns(&self) -> Arc<[String]> {
        self.prepared().shape.columns.clone()
    }

    async fn claim(&self, claimant: &str, batch_size: u32, lease: Duration) -> StoreResult<Vec<ClaimedRow>> {
        Statements::claim(self, claimant, batch_size, lease).await
    }

    async fn lock(&self, batch_size: u32, idle_timeout: Duration) -> StoreResult<super::Locked> {
        Statements::lock(self, batch_size, idle_timeout).await
    }

    async fn settle_delivered(&self, claimant: &str, rows: &[Delivered]) -> StoreResult<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        self.execute(StatementKind::settle(self.prepared().settle), bindings::delivered(claimant, rows)).await
    }

    async fn settle_failed(&self, claimant: &str, failures: &[Failure]) -> StoreResult<u64> {
        if failures.is_empty() {
            return Ok(0);
        }
        let steps = failures.iter().map(|failure| bindings::failure(claimant, failure)).collect();
        self.execute_all("record failure", false, steps).await
    }

    async fn release(&self, claimant: &str, rows: &[RowRef], delay: Duration) -> StoreResult<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        self.execute(StatementKind::Release, bindings::held(claimant, rows, delay)).await
    }

    async fn renew(&self, claimant: &str, rows: &[RowRef], lease: Duration) -> StoreResult<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        self.execute(StatementKind::Renew, bindings::held(claimant, rows, lease)).await
    }

    async fn stats(&self) -> StoreResult<Option<OutboxStats>> {
        if !self.prepared().present.contains(&StatementKind::Stats) {
            return Ok(None);
        }
        let rows = self.query(StatementKind::Stats, |_| Param::Null).await?;
        let row = rows.first().ok_or_else(|| StoreError::Contract("stats returned no row".into()))?;
        let number = |name: &str| column(row, name).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        Ok(Some(OutboxStats {
            pending: number("pending") as i64,
            in_flight: number("in_flight") as i64,
            dead: number("dead") as i64,
            oldest_pending_age: number("oldest_pending_age_seconds"),
        }))
    }

    async fn purge(&self, age: Duration, batch: u32) -> StoreResult<u64> {
        self.execute(StatementKind::Purge, bindings::purge(age, batch)).await
    }

    async fn delivered_since(&self, age: Duration, page: usize) -> StoreResult<Option<DeliveredPages>> {
        if !self.prepared().present.contains(&StatementKind::DeliveredSince) {
            return Ok(None);
        }
        let pages = self.query_pages(StatementKind::DeliveredSince, bindings::delivered_since(age), page).await?;
        Ok(Some(DeliveredPages(pages)))
    }

    async fn redrive(&self, rows: &[DeliveredRow]) -> StoreResult<u64> {
        if !self.prepared().present.contains(&StatementKind::Redrive) || rows.is_empty() {
            return Ok(0);
        }
        self.execute_all("redrive", true, vec![(StatementKind::Redrive, bindings::redrive(rows))]).await
    }
}
