//! Connections to MySQL 8 / MariaDB 10.6+ (mysql_async): the pool, TLS, the probe.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{ClientIdentity, Conn, Opts, OptsBuilder, PoolConstraints, PoolOpts, SslOpts, TxOpts};

use super::errors::error;
use crate::store::config::DatabaseConfig;
use crate::store::error::{ConnectError, StoreError};
use crate::tls::TlsMode;

/// A mysql_async pool whose connections honour `database.connect_timeout` (the driver has no
/// such setting: a server that never answers would hold a claim loop forever).
#[derive(Clone)]
pub struct Pool {
    inner: mysql_async::Pool,
    connect_timeout: Duration,
    /// The watched path the pool connects through (see `tunnel`), kept open while it lives.
    _tunnel: Option<std::sync::Arc<super::tunnel::Tunnel>>,
}

impl Pool {
    pub async fn get_conn(&self) -> Result<Conn, mysql_async::Error> {
        self.within(self.inner.get_conn()).await
    }

    pub(crate) async fn start_transaction(
        &self,
        options: TxOpts,
    ) -> Result<mysql_async::Transaction<'static>, mysql_async::Error> {
        self.within(self.inner.start_transaction(options)).await
    }

    async fn within<T>(
        &self,
        work: impl Future<Output = Result<T, mysql_async::Error>>,
    ) -> Result<T, mysql_async::Error> {
        match tokio::time::timeout(self.connect_timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within database.connect_timeout ({:?})", self.connect_timeout),
            )
            .into()),
        }
    }
}

/// Builds the pool; connections open lazily.
pub(crate) fn pool(config: &DatabaseConfig) -> Result<Pool, ConnectError> {
    let url = config.url.as_ref().map(|u| u.expose()).unwrap_or_default();
    let opts = Opts::from_url(url).map_err(|e| ConnectError::Url { dialect: "MySQL", detail: format!("{e}") })?;
    let constraints = PoolConstraints::new(0, config.pool_size.max(1)).unwrap_or_default();
    let mut builder = OptsBuilder::from_opts(opts)
        .pool_opts(PoolOpts::default().with_constraints(constraints))
        // Leases and retry times compare DATETIME(3) columns with NOW(3): keep the session in UTC
        // so every instance reads the same clock the same way. On MariaDB (the `/*M!` comment
        // is MariaDB's; MySQL skips it) the server also ends a session left idle inside a
        // transaction (see `idle_in_transaction`).
        .init(vec![format!(
            "SET time_zone = '+00:00' /*M!, idle_transaction_timeout = {}, max_statement_time = {} */",
            config.idle_in_transaction().as_secs().max(1),
            config.reply_timeout.as_secs_f64().max(0.001)
        )]);
    let mode = config.tls_mode();
    let (host, port) = (opts_host(&builder), opts_port(&builder));
    let tunnel = super::tunnel::open(&host, port, config.connect_timeout, config.reply_deadline()).map_err(|e| {
        ConnectError::Url { dialect: "MySQL", detail: format!("opening the watched path to {host}:{port}: {e}") }
    })?;
    if let Some(tunnel) = &tunnel {
        // Through the tunnel (TLS still runs end to end and verifies the server's own name);
        // never switch to the server's Unix socket behind its back.
        builder =
            builder.ip_or_hostname(tunnel.local.ip().to_string()).tcp_port(tunnel.local.port()).prefer_socket(false);
    }
    if mode != TlsMode::Disable {
        // Over a local socket the driver would skip TLS without a word: keep to TCP.
        let ssl = ssl_opts(config, mode)?;
        let name = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        let ssl = if tunnel.is_some() { ssl.with_danger_tls_hostname_override(Some(name)) } else { ssl };
        builder = builder.ssl_opts(ssl).prefer_socket(false);
    }
    Ok(Pool {
        inner: mysql_async::Pool::new(builder),
        connect_timeout: config.connect_timeout,
        _tunnel: tunnel.map(std::sync::Arc::new),
    })
}

fn opts_host(builder: &OptsBuilder) -> String {
    Opts::from(builder.clone()).ip_or_hostname().to_owned()
}

fn opts_port(builder: &OptsBuilder) -> u16 {
    Opts::from(builder.clone()).tcp_port()
}

/// `require` accepts any certificate; `verify-full` checks chain and host name against
/// `tls.ca_file` or the system roots (validation refused `prefer` and `verify-ca`).
fn ssl_opts(config: &DatabaseConfig, mode: TlsMode) -> Result<SslOpts, ConnectError> {
    let tls = &config.tls;
    let identity = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => Some(ClientIdentity::new(cert.clone().into(), key.clone().into())),
        _ => None,
    };
    let ssl = match &tls.ca_file {
        Some(file) => SslOpts::default().with_root_certs(vec![file.clone().into()]),
        None => SslOpts::default().with_root_certs(
            rustls_native_certs::load_native_certs().certs.into_iter().map(|c| c.to_vec().into()).collect(),
        ),
    };
    Ok(ssl
        .with_disable_built_in_roots(true)
        .with_client_identity(identity)
        .with_danger_accept_invalid_certs(mode == TlsMode::Require))
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

/// TLS version and cipher of a pooled connection, from the server's own view.
pub(crate) async fn tls_session(pool: &Pool) -> Result<Option<(String, String)>, StoreError> {
    let mut conn = pool.get_conn().await.map_err(|e| error("tls state", e))?;
    let rows: Vec<(String, String)> = conn
        .query("SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')")
        .await
        .map_err(|e| error("tls state", e))?;
    let value = |name: &str| rows.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()).unwrap_or_default();
    let version = value("Ssl_version");
    Ok((!version.is_empty()).then(|| (version, value("Ssl_cipher"))))
}

pub(crate) async fn probe(pool: &Pool) -> Result<(), StoreError> {
    let mut conn = pool.get_conn().await.map_err(|e| error("probe", e))?;
    conn.query_drop("SELECT 1").await.map_err(|e| error("probe", e))
}
