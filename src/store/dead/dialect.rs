//! DEAD rows on the configured database, whichever dialect the URL names.

use super::seam::{DeadAction, DeadFilter, DeadRow, DeadTable};
use super::{mysql, postgres};
use crate::store::database::Database;
use crate::store::error::StoreResult;

/// Runs `action` on the DEAD rows of `table` that `filter` selects; returns them (as they are
/// after the action).
pub async fn run(
    db: &Database,
    table: &DeadTable,
    filter: &DeadFilter,
    action: DeadAction,
) -> StoreResult<Vec<DeadRow>> {
    match db {
        Database::Postgres(pool) => postgres::run(pool, table, filter, action).await,
        Database::Mysql(pool) => mysql::run(pool, table, filter, action).await,
    }
}
