//! MySQL 8 / MariaDB 10.6+ dialect (mysql_async): pool, values, error classification, and the
//! outbox, inbox and worker statements. No `UPDATE … RETURNING` here: claims are a short script
//! in one transaction (lock with `FOR UPDATE SKIP LOCKED`, update, read back). Arrays travel as
//! JSON arrays and are unpacked with `JSON_TABLE`. Every time comparison uses `NOW(3)`.

pub mod defaults;
mod inbox;
mod outbox;
mod values;
mod worker;

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{ClientIdentity, Conn, Opts, OptsBuilder, PoolConstraints, PoolOpts, SslOpts, TxOpts};

pub use inbox::MyInbox;
pub use outbox::MyOutbox;
pub use worker::MyWorker;
pub use worker::reference as worker_default_sql;

use super::{OutageKind, StoreError};
use crate::config::{DatabaseConfig, TlsMode};

/// A mysql_async pool whose connections honour `database.connect_timeout` (the driver has no
/// such setting: a server that never answers would hold a claim loop forever).
#[derive(Clone)]
pub struct Pool {
    inner: mysql_async::Pool,
    connect_timeout: Duration,
}

impl Pool {
    pub async fn get_conn(&self) -> Result<Conn, mysql_async::Error> {
        self.within(self.inner.get_conn()).await
    }

    pub async fn start_transaction(
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
pub fn pool(config: &DatabaseConfig) -> anyhow::Result<Pool> {
    let url = config.url.as_ref().map(|u| u.expose()).unwrap_or_default();
    let opts = Opts::from_url(url).map_err(|e| anyhow::anyhow!("database.url is not a valid MySQL URL: {e}"))?;
    let constraints = PoolConstraints::new(0, config.pool_size.max(1)).unwrap_or_default();
    let mut builder = OptsBuilder::from_opts(opts)
        .pool_opts(PoolOpts::default().with_constraints(constraints))
        // Leases and retry times compare DATETIME(3) columns with NOW(3): keep the session in UTC
        // so every instance reads the same clock the same way.
        .init(vec!["SET time_zone = '+00:00'"]);
    let mode = config.tls_mode();
    if mode != TlsMode::Disable {
        // Over a local socket the driver would skip TLS without a word: keep to TCP.
        builder = builder.ssl_opts(ssl_opts(config, mode)?).prefer_socket(false);
    }
    Ok(Pool { inner: mysql_async::Pool::new(builder), connect_timeout: config.connect_timeout })
}

/// `require` accepts any certificate; `verify-full` checks chain and host name against
/// `tls.ca_file` or the system roots (validation refused `prefer` and `verify-ca`).
fn ssl_opts(config: &DatabaseConfig, mode: TlsMode) -> anyhow::Result<SslOpts> {
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
pub async fn tls_session(pool: &Pool) -> Result<Option<(String, String)>, StoreError> {
    let mut conn = pool.get_conn().await.map_err(|e| error("tls state", e))?;
    let rows: Vec<(String, String)> = conn
        .query("SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')")
        .await
        .map_err(|e| error("tls state", e))?;
    let value = |name: &str| rows.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()).unwrap_or_default();
    let version = value("Ssl_version");
    Ok((!version.is_empty()).then(|| (version, value("Ssl_cipher"))))
}

pub async fn probe(pool: &Pool) -> Result<(), StoreError> {
    let mut conn = pool.get_conn().await.map_err(|e| error("probe", e))?;
    conn.query_drop("SELECT 1").await.map_err(|e| error("probe", e))
}

/// Server error codes of data the statement cannot store: retrying cannot help. 1153: a value
/// larger than the server's `max_allowed_packet` (one entry's payload; the rest of its batch
/// goes in without it).
pub(crate) const DATA_ERRORS: &[u16] = &[1048, 1062, 1153, 1264, 1265, 1292, 1366, 1406, 1451, 1452, 3140, 4025];

/// The one place that decides, for MySQL / MariaDB, whether an error is an outage of the store
/// (and which kind) or a refusal of the data: from the server's error code.
pub(crate) fn error(statement: &'static str, e: mysql_async::Error) -> StoreError {
    let kind = match &e {
        mysql_async::Error::Server(server) => match server.code {
            code if DATA_ERRORS.contains(&code) => return StoreError::Rejected { statement, source: Box::new(e) },
            1205 | 1213 => OutageKind::Conflict,
            1290 | 1792 | 1836 => OutageKind::ReadOnly,
            // Too many connections (server, user, resources), lost or killed connections,
            // interrupted queries, a server shutting down or idle-disconnecting the client.
            1040 | 1053 | 1152 | 1158 | 1159 | 1160 | 1161 | 1203 | 1226 | 1317 | 1927 | 4031 => OutageKind::Connection,
            1044 | 1045 | 1142 | 1143 | 1227 | 1370 => OutageKind::Permission,
            // The statement does not fit the tables: an unknown database, column, table or
            // routine, a syntax error, a column count or a NOT NULL column without a default
            // the statement does not fill (1136, 1364: the statement's shape, not a row's data).
            1046 | 1049 | 1054 | 1064 | 1091 | 1136 | 1146 | 1305 | 1364 => OutageKind::Schema,
            _ => OutageKind::Other,
        },
        mysql_async::Error::Url(_) => OutageKind::Other,
        // The client refuses to send a packet over the server's max_allowed_packet (it learnt
        // the value when it connected): the value is too large, not the server gone.
        mysql_async::Error::Io(mysql_async::IoError::Io(io)) if packet_too_large(io) => {
            return StoreError::Rejected { statement, source: Box::new(e) };
        }
        _ => OutageKind::Connection,
    };
    StoreError::Unavailable { statement, kind, source: Box::new(e) }
}

fn packet_too_large(io: &std::io::Error) -> bool {
    use mysql_common::proto::codec::error::PacketCodecError;
    io.get_ref()
        .and_then(|e| e.downcast_ref::<PacketCodecError>())
        .is_some_and(|e| matches!(e, PacketCodecError::PacketTooLarge))
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
    if error("prepare", e).is_connection() { Err(crate::store::PrepareError::Unreachable(text)) } else { Ok(text) }
}
