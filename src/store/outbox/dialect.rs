//! The outbox on the configured database: one type for the relay, `check` and the operator
//! commands, whichever dialect the URL names.

use std::sync::Arc;
use std::time::Duration;

use super::mysql::MyOutbox;
use super::postgres::PgOutbox;
use super::seam::{
    ClaimedRow, Delivered, DeliveredPages, DeliveredRow, Failure, Locked, OutboxClaims, OutboxStats, OutboxStore,
    RowRef,
};
use crate::config::RelayConfig;
use crate::store::database::Database;
use crate::store::error::{PrepareError, StoreResult};

pub enum Outbox {
    Postgres(PgOutbox),
    Mysql(MyOutbox),
}

impl Outbox {
    /// Prepares and checks every statement `relay` runs (see [`PgOutbox::prepare`]).
    pub async fn prepare(db: &Database, relay: &RelayConfig) -> Result<Self, PrepareError> {
        Ok(match db {
            Database::Postgres(pool) => Outbox::Postgres(PgOutbox::prepare(pool.clone(), relay).await?),
            Database::Mysql(pool) => Outbox::Mysql(MyOutbox::prepare(pool.clone(), relay).await?),
        })
    }
}

/// `$body` with `$store` bound to the dialect's outbox.
macro_rules! each {
    ($self:expr, $store:ident => $body:expr) => {
        match $self {
            Outbox::Postgres($store) => $body,
            Outbox::Mysql($store) => $body,
        }
    };
}

impl OutboxClaims for Outbox {
    async fn lock(&self, batch_size: u32, idle_timeout: Duration) -> StoreResult<Locked> {
        each!(self, s => s.lock(batch_size, idle_timeout).await)
    }

    async fn claim(&self, claimant: &str, batch_size: u32, lease: Duration) -> StoreResult<Vec<ClaimedRow>> {
        each!(self, s => s.claim(claimant, batch_size, lease).await)
    }
}

impl OutboxStore for Outbox {
    fn columns(&self) -> Arc<[String]> {
        each!(self, s => s.columns())
    }

    async fn settle_delivered(&self, claimant: &str, rows: &[Delivered]) -> StoreResult<u64> {
        each!(self, s => s.settle_delivered(claimant, rows).await)
    }

    async fn settle_failed(&self, claimant: &str, failures: &[Failure]) -> StoreResult<u64> {
        each!(self, s => s.settle_failed(claimant, failures).await)
    }

    async fn release(&self, claimant: &str, rows: &[RowRef], delay: Duration) -> StoreResult<u64> {
        each!(self, s => s.release(claimant, rows, delay).await)
    }

    async fn renew(&self, claimant: &str, rows: &[RowRef], lease: Duration) -> StoreResult<u64> {
        each!(self, s => s.renew(claimant, rows, lease).await)
    }

    async fn stats(&self) -> StoreResult<Option<OutboxStats>> {
        each!(self, s => s.stats().await)
    }

    async fn purge(&self, age: Duration, batch: u32) -> StoreResult<u64> {
        each!(self, s => s.purge(age, batch).await)
    }

    async fn delivered_since(&self, age: Duration, page: usize) -> StoreResult<Option<DeliveredPages>> {
        each!(self, s => s.delivered_since(age, page).await)
    }

    async fn redrive(&self, rows: &[DeliveredRow]) -> StoreResult<u64> {
        each!(self, s => s.redrive(rows).await)
    }
}
