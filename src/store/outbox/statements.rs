//! The relay's outbox, written once for every dialect: which statement settles what, what an
//! empty batch does, what a result row means. A dialect ([`OutboxSql`]) only runs a named
//! statement with its bindings — that is all that truly differs between Postgres and MySQL.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::bindings::{self, Param};
use super::contract::StatementKind;
use super::seam::{Delivered, DeliveredPages, DeliveredRow, Failure, OutboxClaims, OutboxStats, OutboxStore, RowRef};
use super::shape::ClaimShape;
use crate::config::{RelayConfig, SettleMode};
use crate::store::error::{StoreError, StoreResult};
use crate::store::rows::{TextPages, TextRow, column};

/// What every dialect's outbox knows once its statements are prepared.
pub struct Prepared {
    /// The claim's result columns and how to read them.
    pub shape: ClaimShape,
    pub settle: SettleMode,
    /// The statements the relay has (optional ones may be absent).
    pub present: HashSet<StatementKind>,
}

/// What a dialect provides: its prepared statements, run with bindings.
pub trait OutboxSql: OutboxClaims {
    fn prepared(&self) -> &Prepared;

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
    /// task that holds the connection until the last page is taken (see [`read_pages`](crate::store::rows::read_pages)).
    fn query_pages(
        &self,
        kind: StatementKind,
        bind: impl Fn(&str) -> Param + Send + Sync,
        page: usize,
    ) -> impl Future<Output = StoreResult<TextPages>> + Send;
}

impl<S: OutboxSql> OutboxStore for S {
    fn columns(&self) -> Arc<[String]> {
        self.prepared().shape.columns.clone()
    }

    async fn settle_delivered(&self, claimant: &str, rows: &[Delivered]) -> StoreResult<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        self.execute(settle_statement(self.prepared().settle), bindings::delivered(claimant, rows)).await
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
        Ok(Some(DeliveredPages::from(pages)))
    }

    async fn redrive(&self, rows: &[DeliveredRow]) -> StoreResult<u64> {
        if !self.prepared().present.contains(&StatementKind::Redrive) || rows.is_empty() {
            return Ok(0);
        }
        self.execute_all("redrive", true, vec![(StatementKind::Redrive, bindings::redrive(rows))]).await
    }
}

/// The statement that settles a delivered row in `mode`.
pub fn settle_statement(mode: SettleMode) -> StatementKind {
    match mode {
        SettleMode::MarkDelivered => StatementKind::MarkDelivered,
        SettleMode::Delete => StatementKind::Delete,
    }
}

/// Whether a relay with this config runs `kind` at all (so whether it is prepared and checked).
pub fn needed(kind: StatementKind, relay: &RelayConfig) -> bool {
    // The reference schema's statements fit only the reference table: a replaced claim means
    // another table, whose optional statements must be given to be used.
    let reference_or_given = relay.sql.get(kind).is_some() || relay.sql.claim.is_none();
    match kind {
        StatementKind::MarkDelivered => relay.settle == SettleMode::MarkDelivered,
        StatementKind::Delete => relay.settle == SettleMode::Delete,
        StatementKind::Stats => reference_or_given,
        StatementKind::Purge => relay.retention.is_some(),
        // Also when the relay does not watch by itself: `handoff verify` uses them.
        StatementKind::DeliveredSince | StatementKind::Redrive => {
            relay.settle == SettleMode::MarkDelivered && reference_or_given
        }
        _ => true,
    }
}
