//! The outbox on the configured database, one type for the relay, `check` and the operator
//! commands: which statement settles what, what an empty batch does, what a result row means,
//! written once here; Postgres and MySQL (`postgres.rs`, `mysql.rs`) only run a named statement
//! with its bindings — all that truly differs between them — reached by one `match` each.

use std::sync::Arc;
use std::time::Duration;

use super::bindings::{self, Param};
use super::contract::StatementKind;
use super::mysql::MyOutbox;
use super::postgres::PgOutbox;
use super::postgres_locked::Locked;
use super::prepared::{Prepared, settle_statement};
use super::rows::{ClaimedRow, Delivered, DeliveredPages, DeliveredRow, Failure, OutboxStats, RowRef};
use super::seam::OutboxStore;
use crate::relay::config::RelayConfig;
use crate::store::database::Database;
use crate::store::error::{PrepareError, StoreError, StoreResult};
use crate::store::rows::{TextPages, TextRow, column};

pub enum Outbox {
    Postgres(PgOutbox),
    Mysql(MyOutbox),
}

impl Outbox {
    /// Prepares and checks every statement `relay` runs (see `PgOutbox::prepare`).
    pub async fn prepare(db: &Database, relay: &RelayConfig) -> Result<Self, PrepareError> {
        Ok(match db {
            Database::Postgres(pool) => Outbox::Postgres(PgOutbox::prepare(pool.clone(), relay).await?),
            Database::Mysql(pool) => Outbox::Mysql(MyOutbox::prepare(pool.clone(), relay).await?),
        })
    }

    fn prepared(&self) -> &Prepared {
        match self {
            Outbox::Postgres(s) => &s.prepared,
            Outbox::Mysql(s) => &s.prepared,
        }
    }

    /// Runs one statement; returns the rows it changed.
    async fn execute(&self, kind: StatementKind, bind: impl Fn(&str) -> Param + Send + Sync) -> StoreResult<u64> {
        match self {
            Outbox::Postgres(s) => s.execute(kind, bind).await,
            Outbox::Mysql(s) => s.execute(kind, bind).await,
        }
    }

    /// Runs the statements in one transaction: if it fails part-way nothing is recorded, and a
    /// retry does not find half of the rows settled and count them as fenced. A re-drive
    /// (`redrive`) tells the database so (the reference schema's settled-row guard lets only
    /// those through).
    async fn execute_all<F: Fn(&str) -> Param + Send + Sync>(
        &self,
        label: &'static str,
        redrive: bool,
        steps: Vec<(StatementKind, F)>,
    ) -> StoreResult<u64> {
        match self {
            Outbox::Postgres(s) => s.execute_all(label, redrive, steps).await,
            Outbox::Mysql(s) => s.execute_all(label, steps).await,
        }
    }

    /// Runs one statement and returns its rows as text.
    async fn query(
        &self,
        kind: StatementKind,
        bind: impl Fn(&str) -> Param + Send + Sync,
    ) -> StoreResult<Vec<TextRow>> {
        match self {
            Outbox::Postgres(s) => s.query(kind, bind).await,
            Outbox::Mysql(s) => s.query(kind, bind).await,
        }
    }

    /// Runs one statement and hands its rows over in pages of `page` as they are read, from a
    /// task that holds the connection until the last page is taken (see
    /// [`read_pages`](crate::store::rows::read_pages)).
    async fn query_pages(
        &self,
        kind: StatementKind,
        bind: impl Fn(&str) -> Param + Send + Sync,
        page: usize,
    ) -> StoreResult<TextPages> {
        match self {
            Outbox::Postgres(s) => s.query_pages(kind, bind, page).await,
            Outbox::Mysql(s) => s.query_pages(kind, bind, page).await,
        }
    }
}

impl OutboxStore for Outbox {
    async fn claim(&self, claimant: &str, batch_size: u32, lease: Duration) -> StoreResult<Vec<ClaimedRow>> {
        match self {
            Outbox::Postgres(s) => s.claim(claimant, batch_size, lease).await,
            Outbox::Mysql(s) => s.claim(claimant, batch_size, lease).await,
        }
    }

    /// Postgres only (configuration refuses `claim = "locked"` on MySQL).
    async fn lock(&self, batch_size: u32, idle_timeout: Duration) -> StoreResult<Locked> {
        match self {
            Outbox::Postgres(s) => s.lock(batch_size, idle_timeout).await,
            Outbox::Mysql(_) => Err(StoreError::no_locked_claim()),
        }
    }

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
