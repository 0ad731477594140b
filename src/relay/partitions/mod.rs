//! A time-partitioned outbox (`handoff migrate --partitioned`, `[relay.partitions]`), the whole
//! feature: its section (`config.rs`), whether a relay's table can be one (`unfit`, here), which
//! partitions should exist (`plan.rs`), creating, dropping and inspecting them on Postgres
//! (`postgres.rs`), and the relay's housekeeping pass (`keeper.rs`).

pub(crate) mod config;
mod keeper;
pub(crate) mod plan;
mod postgres;

pub(crate) use keeper::PartitionKeeper;
pub use postgres::PartitionedOutbox;

use crate::relay::config::RelayConfig;
use crate::store::database::Database;
use crate::store::error::StoreResult;

/// Why the relay's table cannot be kept as a partitioned outbox, if it cannot; `None` too for
/// a relay without `[relay.partitions]`. Declarative partitioning is Postgres's; MariaDB
/// outboxes keep row retention.
pub(crate) async fn unfit(db: &Database, relay: &RelayConfig) -> StoreResult<Option<String>> {
    if relay.partitions.is_none() {
        return Ok(None);
    }
    let reason = match db {
        Database::Postgres(pool) => postgres::unfit(pool, &relay.table).await?,
        Database::Mysql(_) => Some("a partitioned outbox needs Postgres".to_owned()),
    };
    Ok(reason.map(|r| format!("relay `{}`: {r}", relay.name)))
}
