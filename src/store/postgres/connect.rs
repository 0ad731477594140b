//! Connections to Postgres: the pool, TLS, the probe.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::errors::{pool_error, query_error};
use super::watched::WatchedConnect;
use crate::store::config::DatabaseConfig;
pub(crate) use crate::store::error::ConnectError;
use crate::store::error::StoreError;
use crate::tls::TlsMode;

/// Builds the pool. Connections open lazily; `probe` tells whether the database answers.
pub fn pool(config: &DatabaseConfig, application_name: &str) -> Result<Pool, ConnectError> {
    let (pg, tls) = connect_config(config, application_name)?;
    let connect = WatchedConnect {
        tls,
        reply_timeout: config.reply_deadline(),
        statement_timeout: config.reply_timeout,
        idle_in_transaction: config.idle_in_transaction(),
    };
    let manager = Manager::from_connect(pg, connect, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager)
        .max_size(config.pool_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(config.connect_timeout))
        .create_timeout(Some(config.connect_timeout))
        .recycle_timeout(Some(config.connect_timeout))
        .build()
        .map_err(|e| ConnectError::Pool(Box::new(e)))
}

/// The connection settings and TLS connector every Postgres connection uses (the pool's and the
/// LISTEN connection). `database.url` no longer holds TLS words here: load moved them into
/// `database.tls`. tokio-postgres knows `disable`, `prefer` and `require`; the verify modes are
/// `require` on the wire with a verifying rustls configuration.
pub(crate) fn connect_config(
    config: &DatabaseConfig,
    application_name: &str,
) -> Result<(tokio_postgres::Config, MakeRustlsConnect), ConnectError> {
    let url = config.url.as_ref().map(|u| u.expose()).unwrap_or_default();
    let mut pg: tokio_postgres::Config =
        url.parse().map_err(|e| ConnectError::Url { dialect: "Postgres", detail: format!("{e}") })?;
    // An application_name in the URL wins: it tells an operator's pg_stat_activity which sidecar is which.
    if pg.get_application_name().is_none() {
        pg.application_name(application_name);
    }
    pg.connect_timeout(config.connect_timeout);
    // Keepalives and a user timeout notice a silently dropped connection instead of waiting on
    // it for ever (the pool's own connections are watched more closely: `watched`).
    let probe = (config.reply_deadline() / 4).max(Duration::from_secs(1));
    pg.keepalives(true).keepalives_idle(probe).keepalives_interval(probe).keepalives_retries(3);
    pg.tcp_user_timeout(config.reply_deadline());
    let mode = config.tls_mode();
    pg.ssl_mode(match mode {
        TlsMode::Disable => SslMode::Disable,
        TlsMode::Prefer => SslMode::Prefer,
        TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull => SslMode::Require,
    });
    // With `disable` the connector is never used; it still needs a configuration.
    let tls_mode = if mode == TlsMode::Disable { TlsMode::Require } else { mode };
    let client = crate::tls::client_config("database.tls", tls_mode, &config.tls).map_err(ConnectError::Tls)?;
    Ok((pg, MakeRustlsConnect::new(client)))
}

/// Runs `SELECT 1` on a pooled connection.
pub(crate) async fn probe(pool: &Pool) -> Result<(), StoreError> {
    let client = pool.get().await.map_err(|e| pool_error("probe", e))?;
    client.simple_query("SELECT 1").await.map_err(|e| query_error("probe", e))?;
    Ok(())
}

/// Whether a trigger on `table` calls `handoff_notify('<channel>')` (what the reference schema
/// makes for `[relay.notify]`), or `handoff_notify` on any channel when `channel` is `None`;
/// `false` also when the table does not exist.
pub(crate) async fn has_notify_trigger(pool: &Pool, table: &str, channel: Option<&str>) -> Result<bool, StoreError> {
    let client = pool.get().await.map_err(|e| pool_error("notify trigger", e))?;
    let call = match channel {
        Some(channel) => format!("%handoff_notify('{}')%", channel.replace('\'', "''")),
        None => "%handoff_notify(%".to_owned(),
    };
    let row = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = to_regclass($1) AND NOT t.tgisinternal
                              AND t.tgenabled <> 'D' AND pg_get_triggerdef(t.oid) LIKE $2)",
            &[&table, &call],
        )
        .await
        .map_err(|e| query_error("notify trigger", e))?;
    Ok(row.get(0))
}

/// TLS version and cipher of a pooled connection, from the server's own view (`pg_stat_ssl`).
pub(crate) async fn tls_session(pool: &Pool) -> Result<Option<(String, String)>, StoreError> {
    let client = pool.get().await.map_err(|e| pool_error("tls state", e))?;
    let row = client
        .query_opt("SELECT version, cipher FROM pg_stat_ssl WHERE pid = pg_backend_pid() AND ssl", &[])
        .await
        .map_err(|e| query_error("tls state", e))?;
    Ok(row.map(|r| {
        (r.get::<_, Option<String>>(0).unwrap_or_default(), r.get::<_, Option<String>>(1).unwrap_or_default())
    }))
}
