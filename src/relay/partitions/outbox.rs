//! A time-partitioned outbox as housekeeping sees it, and whether a relay's table can be one.
//! Declarative partitioning is Postgres's; MariaDB outboxes keep row retention.

use super::plan::Span;
use super::postgres::{self, Existing, Outcome};
use crate::store::database::Database;
use crate::store::error::StoreResult;

/// Why the relay's table cannot be kept as a partitioned outbox, if it cannot; `None` too for
/// a relay without `[relay.partitions]`.
pub(crate) async fn unfit(db: &Database, relay: &crate::relay::config::RelayConfig) -> StoreResult<Option<String>> {
    if relay.partitions.is_none() {
        return Ok(None);
    }
    let reason = match db {
        Database::Postgres(pool) => postgres::unfit(pool, &relay.table).await?,
        Database::Mysql(_) => Some("a partitioned outbox needs Postgres".to_owned()),
    };
    Ok(reason.map(|r| format!("relay `{}`: {r}", relay.name)))
}

/// A partitioned outbox on Postgres, as housekeeping sees it.
pub struct PartitionedOutbox {
    pool: deadpool_postgres::Pool,
    table: String,
}

impl PartitionedOutbox {
    /// `None` on a database that has no partitioned outboxes (MariaDB).
    pub fn new(db: &Database, table: &str) -> Option<Self> {
        match db {
            Database::Postgres(pool) => Some(Self { pool: pool.clone(), table: table.to_owned() }),
            Database::Mysql(_) => None,
        }
    }

    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// See `postgres::create`.
    pub async fn create(&self, span: Span) -> StoreResult<Option<u64>> {
        postgres::create(&self.pool, &self.table, span).await
    }

    /// See [`postgres::existing`].
    pub(crate) async fn existing(&self) -> StoreResult<Vec<Existing>> {
        postgres::existing(&self.pool, &self.table).await
    }

    /// See [`postgres::drop_if_settled`].
    pub(crate) async fn drop_if_settled(
        &self,
        partition: &str,
        drop_after: std::time::Duration,
    ) -> StoreResult<Outcome> {
        postgres::drop_if_settled(&self.pool, &self.table, partition, drop_after).await
    }

    /// See [`postgres::purge_default`].
    pub(crate) async fn purge_default(
        &self,
        default: &str,
        drop_after: std::time::Duration,
        batch: u32,
    ) -> StoreResult<u64> {
        postgres::purge_default(&self.pool, default, drop_after, batch).await
    }
}
