//! A replay's reads and checkpoints on the configured database, whichever dialect the URL names.

use super::rows::{Checkpoint, Extent, Oldest, ReplayRow, Source};
use super::{mysql, postgres};
use crate::store::database::Database;
use crate::store::error::StoreResult;

/// Matching DELIVERED rows after `after_id`: how many, and the highest id.
pub(super) async fn extent(db: &Database, source: Source<'_>, after_id: i64) -> StoreResult<Extent> {
    match db {
        Database::Postgres(pool) => postgres::extent(pool, source, after_id).await,
        Database::Mysql(pool) => mysql::extent(pool, source, after_id).await,
    }
}

/// Up to `limit` matching DELIVERED rows with `after_id < id <= through_id`, in id order.
pub(super) async fn page(
    db: &Database,
    source: Source<'_>,
    ids: (i64, i64),
    limit: u32,
) -> StoreResult<Vec<ReplayRow>> {
    match db {
        Database::Postgres(pool) => postgres::page(pool, source, ids, limit).await,
        Database::Mysql(pool) => mysql::page(pool, source, ids, limit).await,
    }
}

/// The lowest id and the oldest value of `time_column` left in `table`.
pub(super) async fn oldest(db: &Database, table: &str, time_column: &str) -> StoreResult<Oldest> {
    match db {
        Database::Postgres(pool) => postgres::oldest(pool, table, time_column).await,
        Database::Mysql(pool) => mysql::oldest(pool, table, time_column).await,
    }
}

pub(crate) async fn load(db: &Database, job: &str) -> StoreResult<Option<Checkpoint>> {
    match db {
        Database::Postgres(pool) => postgres::load(pool, job).await,
        Database::Mysql(pool) => mysql::load(pool, job).await,
    }
}

/// Starts `checkpoint`'s job afresh (a finished or abandoned one of the same name is replaced).
pub(super) async fn restart(db: &Database, checkpoint: &Checkpoint) -> StoreResult<()> {
    match db {
        Database::Postgres(pool) => postgres::restart(pool, checkpoint).await,
        Database::Mysql(pool) => mysql::restart(pool, checkpoint).await,
    }
}

/// Records that every matching row up to `after_id` has been appended.
pub(super) async fn save(db: &Database, job: &str, after_id: i64, appended: i64) -> StoreResult<()> {
    match db {
        Database::Postgres(pool) => postgres::save(pool, job, after_id, appended).await,
        Database::Mysql(pool) => mysql::save(pool, job, after_id, appended).await,
    }
}

pub(super) async fn finish(db: &Database, job: &str) -> StoreResult<()> {
    match db {
        Database::Postgres(pool) => postgres::finish(pool, job).await,
        Database::Mysql(pool) => mysql::finish(pool, job).await,
    }
}
