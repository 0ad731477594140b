//! Which database the config names, and its pool: the one place that picks the dialect.

use super::error::ConnectError;
use crate::store::config::DatabaseConfig;

/// A connection pool of one dialect.
#[derive(Clone)]
pub enum Database {
    Postgres(deadpool_postgres::Pool),
    Mysql(super::mysql::pool::Pool),
}

pub(crate) use crate::store::config::Dialect;

impl Database {
    /// How the dialect's placeholders look (configured statements are rewritten to them).
    pub(crate) fn placeholder(&self) -> crate::sql::params::Placeholder {
        match self {
            Database::Postgres(_) => crate::sql::params::Placeholder::Numbered,
            Database::Mysql(_) => crate::sql::params::Placeholder::Positional,
        }
    }

    /// Builds the pool for the dialect of `config.url` (validated before: the scheme is known).
    pub fn connect(config: &DatabaseConfig, application_name: &str) -> Result<Self, ConnectError> {
        let url = config.url.as_ref().map(|u| u.expose()).unwrap_or_default();
        match Dialect::of(url) {
            Some(Dialect::Postgres) => {
                Ok(Database::Postgres(super::postgres::connect::pool(config, application_name)?))
            }
            Some(Dialect::Mysql) => Ok(Database::Mysql(super::mysql::pool::pool(&mysql_url(config))?)),
            None => Err(ConnectError::Scheme),
        }
    }

    /// The TLS state of a connection as the server sees it: `Some((version, cipher))`, or
    /// `None` for a plain connection.
    pub(crate) async fn tls_session(&self) -> Result<Option<(String, String)>, super::error::StoreError> {
        match self {
            Database::Postgres(pool) => super::postgres::connect::tls_session(pool).await,
            Database::Mysql(pool) => super::mysql::pool::tls_session(pool).await,
        }
    }

    /// Whether a trigger on `table` notifies `channel` (any channel: `None`) for
    /// `[relay.notify]`; `None` on MySQL, which has no LISTEN/NOTIFY.
    pub(crate) async fn has_notify_trigger(
        &self,
        table: &str,
        channel: Option<&str>,
    ) -> Result<Option<bool>, super::error::StoreError> {
        match self {
            Database::Postgres(pool) => {
                super::postgres::connect::has_notify_trigger(pool, table, channel).await.map(Some)
            }
            Database::Mysql(_) => Ok(None),
        }
    }

    pub(crate) async fn probe(&self) -> Result<(), super::error::StoreError> {
        match self {
            Database::Postgres(pool) => super::postgres::connect::probe(pool).await,
            Database::Mysql(pool) => super::mysql::pool::probe(pool).await,
        }
    }
}

/// mysql_async reads `mysql://`; `mariadb://` is accepted as a synonym.
fn mysql_url(config: &DatabaseConfig) -> DatabaseConfig {
    let mut config = config.clone();
    if let Some(url) = &config.url
        && let Some(rest) = url.expose().strip_prefix("mariadb://")
    {
        config.url = Some(crate::secret::Secret::new(format!("mysql://{rest}")));
    }
    config
}
