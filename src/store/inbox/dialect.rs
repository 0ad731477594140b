//! The inbox on the configured database: one type for the worker and `check`, whichever dialect
//! the URL names.

use std::time::Duration;

use super::mysql::{self, MyInbox};
use super::postgres::{self, PgInbox};
use super::seam::{Applied, ApplyError, BoundStatement, InboxCounts, InboxRow, InboxStats, InboxStore, LockedRows};
use crate::config::WorkerConfig;
use crate::fault::Faults;
use crate::sql::params::Placeholder;
use crate::store::database::Database;
use crate::store::error::{PrepareError, StatementError, StoreResult};

pub enum Inbox {
    Postgres(PgInbox),
    Mysql(MyInbox),
}

impl Inbox {
    /// The worker's statements: its `[worker.sql]` overrides, the reference schema's otherwise.
    pub fn new(db: &Database, worker: &WorkerConfig, faults: Faults) -> Result<Self, StatementError> {
        Ok(match db {
            Database::Postgres(pool) => Inbox::Postgres(PgInbox::new(pool.clone(), worker, faults)?),
            Database::Mysql(pool) => Inbox::Mysql(MyInbox::new(pool.clone(), worker, faults)?),
        })
    }

    /// How the dialect's placeholders look (the handlers' statements are rewritten to them).
    pub fn placeholder(&self) -> Placeholder {
        match self {
            Inbox::Postgres(_) => Placeholder::Numbered,
            Inbox::Mysql(_) => Placeholder::Positional,
        }
    }
}

/// `$body` with `$store` bound to the dialect's inbox.
macro_rules! each {
    ($self:expr, $store:ident => $body:expr) => {
        match $self {
            Inbox::Postgres($store) => $body,
            Inbox::Mysql($store) => $body,
        }
    };
}

impl InboxStore for Inbox {
    async fn check(&self, handler_sql: &[(String, String)]) -> Result<(), PrepareError> {
        each!(self, s => s.check(handler_sql).await)
    }

    async fn claim(&self, owner: &str, batch_size: u32, lease: Duration) -> StoreResult<Vec<InboxRow>> {
        each!(self, s => s.claim(owner, batch_size, lease).await)
    }

    async fn apply_batch(
        &self,
        owner: &str,
        items: &[(&InboxRow, Vec<BoundStatement<'_>>)],
    ) -> StoreResult<Vec<Result<Applied, ApplyError>>> {
        each!(self, s => s.apply_batch(owner, items).await)
    }

    async fn fail(&self, owner: &str, row: &InboxRow, error: &str, retry_in: Option<Duration>) -> StoreResult<bool> {
        each!(self, s => s.fail(owner, row, error, retry_in).await)
    }

    async fn renew(&self, owner: &str, rows: &[(String, i64)], lease: Duration) -> StoreResult<u64> {
        each!(self, s => s.renew(owner, rows, lease).await)
    }

    async fn release(&self, owner: &str, rows: &[(String, i64)]) -> StoreResult<u64> {
        each!(self, s => s.release(owner, rows).await)
    }

    async fn lock(&self, batch_size: u32, lease: Duration) -> StoreResult<LockedRows> {
        each!(self, s => s.lock(batch_size, lease).await)
    }

    async fn stats(&self) -> StoreResult<InboxStats> {
        each!(self, s => s.stats().await)
    }

    async fn purge(&self, age: Duration, batch: u32) -> StoreResult<u64> {
        each!(self, s => s.purge(age, batch).await)
    }
}

/// `consumer`'s rows of the inbox `table`, as `handoff status` shows them.
pub async fn counts(db: &Database, table: &str, consumer: &str) -> StoreResult<InboxCounts> {
    match db {
        Database::Postgres(pool) => postgres::counts(pool, table, consumer).await,
        Database::Mysql(pool) => mysql::counts(pool, table, consumer).await,
    }
}
