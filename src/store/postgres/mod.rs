//! Postgres dialect: connection pool, error classification, the outbox statements.

pub mod defaults;
mod inbox;
mod locked;
mod locked_inbox;
mod outbox;
mod scan_start;
pub mod values;
mod worker;

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::SslMode;
use tokio_postgres::error::SqlState;
use tokio_postgres_rustls::MakeRustlsConnect;

pub use crate::store::PrepareError;
pub use inbox::PgInbox;
pub use locked::LockedSql;
pub use outbox::PgOutbox;
pub use worker::PgWorker;

use super::{OutageKind, StoreError};
use crate::config::{DatabaseConfig, TlsMode};

/// Builds the pool. Connections open lazily; `probe` tells whether the database answers.
pub fn pool(config: &DatabaseConfig, application_name: &str) -> anyhow::Result<Pool> {
    let (pg, tls) = connect_config(config, application_name)?;
    let manager = Manager::from_config(pg, tls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Ok(Pool::builder(manager)
        .max_size(config.pool_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(config.connect_timeout))
        .create_timeout(Some(config.connect_timeout))
        .recycle_timeout(Some(config.connect_timeout))
        .build()?)
}

/// The connection settings and TLS connector every Postgres connection uses (the pool's and the
/// LISTEN connection). `database.url` no longer holds TLS words here: load moved them into
/// `database.tls`. tokio-postgres knows `disable`, `prefer` and `require`; the verify modes are
/// `require` on the wire with a verifying rustls configuration.
pub fn connect_config(
    config: &DatabaseConfig,
    application_name: &str,
) -> anyhow::Result<(tokio_postgres::Config, MakeRustlsConnect)> {
    let url = config.url.as_ref().map(|u| u.expose()).unwrap_or_default();
    let mut pg: tokio_postgres::Config =
        url.parse().map_err(|e| anyhow::anyhow!("database.url is not a valid Postgres URL: {e}"))?;
    // An application_name in the URL wins: it tells an operator's pg_stat_activity which sidecar is which.
    if pg.get_application_name().is_none() {
        pg.application_name(application_name);
    }
    pg.connect_timeout(config.connect_timeout);
    // Keepalives notice a silently dropped connection instead of waiting on it forever.
    pg.keepalives(true).keepalives_idle(Duration::from_secs(30));
    let mode = config.tls_mode();
    pg.ssl_mode(match mode {
        TlsMode::Disable => SslMode::Disable,
        TlsMode::Prefer => SslMode::Prefer,
        TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull => SslMode::Require,
    });
    // With `disable` the connector is never used; it still needs a configuration.
    let tls_mode = if mode == TlsMode::Disable { TlsMode::Require } else { mode };
    let client = crate::tls::client_config("database.tls", tls_mode, &config.tls).map_err(|e| anyhow::anyhow!(e))?;
    Ok((pg, MakeRustlsConnect::new(client)))
}

/// Runs `SELECT 1` on a pooled connection.
pub async fn probe(pool: &Pool) -> Result<(), StoreError> {
    let client = pool.get().await.map_err(|e| pool_error("probe", e))?;
    client.simple_query("SELECT 1").await.map_err(|e| query_error("probe", e))?;
    Ok(())
}

/// TLS version and cipher of a pooled connection, from the server's own view (`pg_stat_ssl`).
pub async fn tls_session(pool: &Pool) -> Result<Option<(String, String)>, StoreError> {
    let client = pool.get().await.map_err(|e| pool_error("tls state", e))?;
    let row = client
        .query_opt("SELECT version, cipher FROM pg_stat_ssl WHERE pid = pg_backend_pid() AND ssl", &[])
        .await
        .map_err(|e| query_error("tls state", e))?;
    Ok(row.map(|r| {
        (r.get::<_, Option<String>>(0).unwrap_or_default(), r.get::<_, Option<String>>(1).unwrap_or_default())
    }))
}

pub(crate) fn pool_error(statement: &'static str, error: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Unavailable { statement, kind: OutageKind::Connection, source: Box::new(error) }
}

/// The one place that decides, for Postgres, whether an error is an outage of the store (and
/// which kind) or a refusal of the data: from the SQLSTATE.
pub(crate) fn query_error(statement: &'static str, error: tokio_postgres::Error) -> StoreError {
    let kind = match error.code() {
        // No SQLSTATE: a client-side failure. A value that cannot be sent as the parameter's
        // type is the data's problem; reading results wrong is the contract's; the rest
        // (closed, I/O, timeouts, TLS, connect) means the database went away.
        None => {
            let text = error.to_string();
            if text.starts_with("error serializing") {
                return StoreError::Rejected { statement, source: Box::new(error) };
            }
            if ["error deserializing", "invalid column", "expected "].iter().any(|p| text.starts_with(p)) {
                OutageKind::Other
            } else {
                OutageKind::Connection
            }
        }
        Some(code) => match (&code.code()[..2], code) {
            // Data exceptions, integrity constraints, WITH CHECK OPTION, and what a trigger or
            // function raised about the row (business rules): the data's fault.
            ("22" | "23" | "44" | "P0", _) => return StoreError::Rejected { statement, source: Box::new(error) },
            ("08" | "53" | "57" | "58", _) => OutageKind::Connection,
            ("40", _) => OutageKind::Conflict,
            (_, c) if *c == SqlState::LOCK_NOT_AVAILABLE => OutageKind::Conflict,
            (_, c) if *c == SqlState::READ_ONLY_SQL_TRANSACTION => OutageKind::ReadOnly,
            (_, c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => OutageKind::Permission,
            ("28", _) => OutageKind::Permission,
            ("42" | "3D" | "3F", _) => OutageKind::Schema,
            _ => OutageKind::Other,
        },
    };
    StoreError::Unavailable { statement, kind, source: Box::new(error) }
}

/// The server's message for a rejected statement (with SQLSTATE); the plain text otherwise.
pub(crate) fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => error.to_string(),
    }
}

/// A statement the database refused to prepare, as a message naming `context`; `Unreachable`
/// when the connection went away meanwhile (then startup waits and tries again).
pub(crate) fn prepare_refusal(context: &str, e: tokio_postgres::Error) -> Result<String, crate::store::PrepareError> {
    let text = format!("{context}: {}", describe(&e));
    if query_error("prepare", e).is_connection() {
        Err(crate::store::PrepareError::Unreachable(text))
    } else {
        Ok(text)
    }
}
