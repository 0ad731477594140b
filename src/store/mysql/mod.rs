//! MySQL 8 / MariaDB 10.6+ dialect (mysql_async): pool, values, error classification, and the
//! outbox, inbox and worker statements. No `UPDATE … RETURNING` here: claims are a short script
//! in one transaction (lock with `FOR UPDATE SKIP LOCKED`, update, read back). Arrays travel as
//! JSON arrays and are unpacked with `JSON_TABLE`. Every time comparison uses `NOW(3)`.

pub mod defaults;
mod inbox;
mod outbox;
mod values;
mod worker;

use mysql_async::prelude::Queryable;
use mysql_async::{Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts};

pub use inbox::MyInbox;
pub use outbox::MyOutbox;
pub use worker::MyWorker;

use super::StoreError;
use crate::config::DatabaseConfig;

/// Builds the pool; connections open lazily.
pub fn pool(config: &DatabaseConfig) -> anyhow::Result<Pool> {
    let url = config.url.as_ref().map(|u| u.expose()).unwrap_or_default();
    let opts = Opts::from_url(url).map_err(|e| anyhow::anyhow!("database.url is not a valid MySQL URL: {e}"))?;
    let constraints = PoolConstraints::new(0, config.pool_size.max(1)).unwrap_or_default();
    let builder = OptsBuilder::from_opts(opts)
        .pool_opts(PoolOpts::default().with_constraints(constraints))
        // Leases and retry times compare DATETIME(3) columns with NOW(3): keep the session in UTC
        // so every instance reads the same clock the same way.
        .init(vec!["SET time_zone = '+00:00'"]);
    Ok(Pool::new(builder))
}

/// Options for a claim's transaction. READ COMMITTED, because under InnoDB's default REPEATABLE
/// READ a locking read takes next-key (gap) locks over the index range it scans, and an owner's
/// INSERT into that range then deadlocks with the claim (seen in the MariaDB chain test: the
/// owner's transaction failed with 1213). SKIP LOCKED claims need only the locks of the rows they
/// take, which READ COMMITTED still holds to commit.
pub(crate) fn claim_tx() -> mysql_async::TxOpts {
    let mut opts = mysql_async::TxOpts::default();
    opts.with_isolation_level(mysql_async::IsolationLevel::ReadCommitted);
    opts
}

pub async fn probe(pool: &Pool) -> Result<(), StoreError> {
    let mut conn = pool.get_conn().await.map_err(|e| error("probe", e))?;
    conn.query_drop("SELECT 1").await.map_err(|e| error("probe", e))
}

/// Server error codes that pass by themselves (lock waits, deadlocks, read-only failovers).
const TRANSIENT: &[u16] = &[1205, 1213, 1290, 1792, 1040, 1053, 1152, 1158, 1159, 1160, 1161];

/// Server error codes of data the statement cannot store: retrying cannot help.
pub(crate) const DATA_ERRORS: &[u16] = &[1048, 1062, 1136, 1264, 1265, 1292, 1366, 1406, 1451, 1452, 3140, 4025];

pub(crate) fn error(statement: &'static str, e: mysql_async::Error) -> StoreError {
    let transient = match &e {
        mysql_async::Error::Server(server) => TRANSIENT.contains(&server.code),
        mysql_async::Error::Url(_) => false,
        _ => true,
    };
    let source = Box::new(e);
    if transient { StoreError::Unavailable { statement, source } } else { StoreError::Statement { statement, source } }
}

/// The server's message and code for a rejected statement; the plain text otherwise.
pub(crate) fn describe(e: &mysql_async::Error) -> String {
    match e {
        mysql_async::Error::Server(s) => format!("{} (error {})", s.message, s.code),
        other => other.to_string(),
    }
}

/// A statement the database refused to prepare, as a message naming `context`; `Unreachable`
/// when the connection went away meanwhile (then startup waits and tries again).
pub(crate) fn prepare_refusal(context: &str, e: mysql_async::Error) -> Result<String, crate::store::PrepareError> {
    let text = format!("{context}: {}", describe(&e));
    if error("prepare", e).is_unavailable() { Err(crate::store::PrepareError::Unreachable(text)) } else { Ok(text) }
}
