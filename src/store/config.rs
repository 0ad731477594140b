//! `[database]`: where handoff connects, and how securely.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::secret::Secret;
use crate::tls::{TlsConfig, TlsMode};

/// `[database]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// Connection URL, e.g. `postgres://user:pass@host:5432/db`; this or `url_file` is required.
    ///
    /// A secret: prefer the environment (`HANDOFF_DATABASE__URL`) or `url_file`.
    pub url: Option<Secret>,
    /// File holding the URL (a mounted Kubernetes secret); surrounding whitespace is ignored.
    pub url_file: Option<PathBuf>,
    /// Connections in the pool. Default: 8.
    #[serde(default = "defaults::pool_size")]
    pub pool_size: usize,
    /// Timeout for opening a connection and for waiting on the pool. Default: "5s".
    #[serde(default = "defaults::five_seconds", with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// The longest a statement may run; a connection silent longer is closed (an outage). Keep it
    /// above your slowest handler statement. Default: "30s".
    ///
    /// The server ends the statement there (`statement_timeout`, MariaDB's `max_statement_time`),
    /// and a connection that leaves a request unanswered a little longer counts as dead: a silent
    /// network failure (a partition, a lost NAT entry, a proxy that lost its upstream) sends no
    /// error, and without this a statement would wait on it for ever. The next statement opens a
    /// new connection. Operator commands (`migrate`, `dead`, `replay`, …) allow an hour at least.
    #[serde(default = "defaults::thirty_seconds", with = "humantime_serde")]
    pub reply_timeout: Duration,
    /// TLS; the URL's own TLS words (`sslmode`, `ssl-mode`, …) are read into it and must agree with
    /// it. Default mode: `verify-full` with a CA, else `prefer` (Postgres) or `disable` (MySQL).
    ///
    /// Postgres's words are `sslmode`, `sslrootcert`, `sslcert`, `sslkey`; MySQL's `ssl-mode`,
    /// `ssl-ca`, `ssl-cert`, `ssl-key`. `prefer` is libpq's default.
    #[serde(default)]
    pub tls: TlsConfig,
}

impl DatabaseConfig {
    /// How long the server lets a handoff session sit idle inside a transaction before ending
    /// it (its locks with it): twice `reply_timeout`. A process cut off by a silent network
    /// failure mid-transaction gives its connection up after `reply_timeout`, but the server
    /// sees nothing and would keep the session and its row locks for hours, the rows' next
    /// claimant waiting on them. A transaction idle on purpose (a locked batch held while its
    /// rows are appended) sets its own, longer, limit.
    pub(crate) fn idle_in_transaction(&self) -> Duration {
        self.reply_timeout * 2
    }

    /// How long a connection may leave a request unanswered before handoff gives it up: a
    /// little longer than `reply_timeout`, which the server is asked to hold every statement
    /// to (`statement_timeout`; MariaDB's `max_statement_time`), so that a slow statement ends
    /// on the server with its own error, first, instead of running on after its client left.
    pub(crate) fn reply_deadline(&self) -> Duration {
        self.reply_timeout + (self.reply_timeout / 4).max(Duration::from_secs(1))
    }

    /// The TLS mode in force (after the URL's words were merged in at load).
    pub(crate) fn tls_mode(&self) -> TlsMode {
        let mysql = self.dialect() == Some(Dialect::Mysql);
        self.tls.mode_or(if mysql { TlsMode::Disable } else { TlsMode::Prefer })
    }

    /// The database's dialect, if the URL names one.
    pub(crate) fn dialect(&self) -> Option<Dialect> {
        self.url.as_ref().and_then(|url| Dialect::of(url.expose()))
    }

    /// Every problem of `[database]`: a scheme handoff speaks, TLS the driver can honour (the
    /// certificate files are read when connecting; those errors name their key too), a pool.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut errors = Vec::new();
        let dialect = self.dialect();
        if self.url.is_some() && dialect.is_none() {
            errors.push("database.url: scheme must be postgres://, postgresql://, mysql:// or mariadb://".into());
        }
        let mode = self.tls_mode();
        errors.extend(crate::tls::config::check_shape("database.tls", &self.tls, mode));
        if dialect == Some(Dialect::Mysql) && matches!(mode, TlsMode::Prefer | TlsMode::VerifyCa) {
            errors.push(format!(
                "database.tls.mode: {} cannot be honoured on MySQL / MariaDB (its driver cannot {}); use disable, require or verify-full",
                mode.name(),
                if mode == TlsMode::Prefer { "fall back to plain TCP" } else { "verify the chain without the host name" }
            ));
        }
        if dialect == Some(Dialect::Mysql) && self.tls.server_name.is_some() {
            errors.push(
                "database.tls.server_name cannot be honoured on MySQL / MariaDB (its driver checks the host it connects to)"
                    .into(),
            );
        }
        if self.pool_size == 0 {
            errors.push("database.pool_size must be > 0".into());
        }
        errors
    }
}

/// The dialect a `database.url` names, by its scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Postgres,
    Mysql,
}

impl Dialect {
    pub(crate) fn of(url: &str) -> Option<Self> {
        match url.split("://").next().unwrap_or_default() {
            "postgres" | "postgresql" => Some(Dialect::Postgres),
            "mysql" | "mariadb" => Some(Dialect::Mysql),
            _ => None,
        }
    }

    pub(crate) fn placeholder(self) -> crate::sql::params::Placeholder {
        match self {
            Dialect::Postgres => crate::sql::params::Placeholder::Numbered,
            Dialect::Mysql => crate::sql::params::Placeholder::Positional,
        }
    }
}

mod defaults {
    use std::time::Duration;

    pub(super) fn pool_size() -> usize {
        8
    }
    pub(super) fn five_seconds() -> Duration {
        Duration::from_secs(5)
    }
    pub(super) fn thirty_seconds() -> Duration {
        Duration::from_secs(30)
    }
}
