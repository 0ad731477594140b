//! Shard counts on the configured database, whichever dialect the URL names.

use super::seam::Recorded;
use super::{mysql, postgres};
use crate::store::database::Database;
use crate::store::error::StoreResult;

/// Records `count` for `family` unless one is recorded already; returns what is recorded now.
pub async fn record(db: &Database, family: &str, count: u32, by: &str) -> StoreResult<Recorded> {
    match db {
        Database::Postgres(pool) => postgres::record(pool, family, count, by).await,
        Database::Mysql(pool) => mysql::record(pool, family, count, by).await,
    }
}

/// What is recorded for `family`, if anything (nothing is written).
pub async fn recorded(db: &Database, family: &str) -> StoreResult<Option<Recorded>> {
    match db {
        Database::Postgres(pool) => postgres::recorded(pool, family).await,
        Database::Mysql(pool) => mysql::recorded(pool, family).await,
    }
}

/// Replaces the recorded count of `family` (after its old shards were drained).
pub async fn replace(db: &Database, family: &str, count: u32, by: &str) -> StoreResult<()> {
    match db {
        Database::Postgres(pool) => postgres::replace(pool, family, count, by).await,
        Database::Mysql(pool) => mysql::replace(pool, family, count, by).await,
    }
}
