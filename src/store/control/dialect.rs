//! Pauses on the configured database, whichever dialect the URL names.

use super::seam::{Pause, PauseRequest, Target};
use super::{mysql, postgres};
use crate::store::database::Database;
use crate::store::error::StoreResult;

/// The pauses in force (expired rows are not).
pub async fn active(db: &Database) -> StoreResult<Vec<Pause>> {
    match db {
        Database::Postgres(pool) => postgres::active(pool).await,
        Database::Mysql(pool) => mysql::active(pool).await,
    }
}

/// Pauses `request.target`, or updates the reason and expiry of a pause already in force (which
/// keeps its start): a retried call changes nothing more.
pub async fn pause(db: &Database, request: &PauseRequest) -> StoreResult<Pause> {
    match db {
        Database::Postgres(pool) => postgres::pause(pool, request).await,
        Database::Mysql(pool) => mysql::pause(pool, request).await,
    }
}

/// Ends the pause of `target`; returns the pause that was in force, if one was.
pub async fn resume(db: &Database, target: &Target) -> StoreResult<Option<Pause>> {
    match db {
        Database::Postgres(pool) => postgres::resume(pool, target).await,
        Database::Mysql(pool) => mysql::resume(pool, target).await,
    }
}
