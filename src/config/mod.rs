//! The one TOML file that configures handoff, as typed structs.
//!
//! Every struct rejects unknown keys, every duration carries its unit (`"250ms"`, `"30s"`), and
//! every field documents its default. Loading (file + environment + `*_file` secrets) lives in
//! `load`, cross-field checks in `validate`.

mod bridge;
mod claim;
pub mod consumer_sql;
mod load;
pub mod ordered;
mod relay;
pub mod secret;
pub mod template;
pub mod tls;
mod validate;
mod worker;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

pub use bridge::{BridgeConfig, EnvelopeNames, EventIdFormat, StreamSource, UnknownTypes, ValidateConfig};
pub use consumer_sql::{TakeoverOverrides, WorkerOverrides};
pub use load::{ConfigError, load, load_str};
pub use relay::{
    BrokerLossConfig, ClaimMode, DedupeConfig, DurabilityConfig, NotifyConfig, OnFailure, OrderingConfig, RelayConfig,
    RetentionConfig, SettleMode, SqlOverrides, TrimConfig,
};
pub use secret::Secret;
pub use tls::{TlsConfig, TlsMode};
pub use worker::{
    HandlerConfig, HandlerErrors, HandlerVerdict, HttpHandlerConfig, InboxRetention, NEVER_FORWARDED,
    RESERVED_REQUEST_HEADERS, Unhandled, WorkerConfig,
};

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The SQL database handoff reads and settles rows in (the owner's, for a relay).
    pub database: DatabaseConfig,
    /// The Redis deployment that carries the streams.
    #[serde(default)]
    pub redis: RedisConfig,
    /// Metrics, health endpoints and logs.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// How SIGTERM / SIGINT drain the process.
    #[serde(default)]
    pub shutdown: ShutdownConfig,
    /// Outbox relays: each moves one table's rows to Redis Streams.
    #[serde(default, rename = "relay")]
    pub relays: Vec<RelayConfig>,
    /// Inbox bridges: each reads streams into a consumer's inbox table.
    #[serde(default, rename = "bridge")]
    pub bridges: Vec<BridgeConfig>,
    /// Inbox workers: each applies handlers to a consumer's inbox rows.
    #[serde(default, rename = "worker")]
    pub workers: Vec<WorkerConfig>,
}

/// `[database]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// Connection URL, e.g. `postgres://user:pass@host:5432/db`. Secret: prefer the environment
    /// (`HANDOFF_DATABASE__URL`) or `url_file`. Exactly one of `url` / `url_file` is required.
    pub url: Option<Secret>,
    /// File holding the URL (a mounted Kubernetes secret); surrounding whitespace is ignored.
    pub url_file: Option<PathBuf>,
    /// Connections in the pool. Default: 8.
    #[serde(default = "defaults::pool_size")]
    pub pool_size: usize,
    /// Timeout for opening a connection and for waiting on the pool. Default: "5s".
    #[serde(default = "defaults::five_seconds", with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// TLS. The URL's own words (`sslmode`, `sslrootcert`, `sslcert`, `sslkey` for Postgres;
    /// `ssl-mode`, `ssl-ca`, `ssl-cert`, `ssl-key` for MySQL) are read into this table; where both
    /// say something they must agree. Default mode: `verify-full` when a CA is given, else
    /// `prefer` on Postgres (libpq's default) and `disable` on MySQL.
    #[serde(default)]
    pub tls: TlsConfig,
}

impl DatabaseConfig {
    /// The TLS mode in force (after the URL's words were merged in at load).
    pub fn tls_mode(&self) -> TlsMode {
        let mysql = self
            .url
            .as_ref()
            .and_then(|u| crate::config::Dialect::of(u.expose()))
            .is_some_and(|d| d == crate::config::Dialect::Mysql);
        self.tls.mode_or(if mysql { TlsMode::Disable } else { TlsMode::Prefer })
    }
}

/// `[redis]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://`, `redis-cluster://host:port?node=…` or
    /// `redis-sentinel://host:port/db?sentinelServiceName=…`. Secret like the database URL
    /// (`HANDOFF_REDIS__URL`, `url_file`). Default: `redis://127.0.0.1:6379`.
    pub url: Option<Secret>,
    /// File holding the URL.
    pub url_file: Option<PathBuf>,
    /// A command that gets no reply within this time fails and is treated as an outage. Default: "5s".
    #[serde(default = "defaults::five_seconds", with = "humantime_serde")]
    pub command_timeout: Duration,
    /// TLS for `rediss://`, `rediss-cluster://`, `rediss-sentinel://` URLs. Default mode:
    /// `verify-full` against the system roots (or `ca_file`); cluster nodes and a sentinel's
    /// primary, found by IP address, are verified against the host name of the URL.
    #[serde(default)]
    pub tls: TlsConfig,
}

impl RedisConfig {
    /// The TLS mode in force: the scheme decides whether TLS is on.
    pub fn tls_mode(&self) -> TlsMode {
        if self.url.as_ref().is_some_and(|u| redis_scheme_is_tls(u.expose())) {
            self.tls.mode_or(TlsMode::VerifyFull)
        } else {
            TlsMode::Disable
        }
    }
}

/// `rediss://`, `rediss-cluster://`, `rediss-sentinel://` (and fred's `valkeys` spellings).
pub fn redis_scheme_is_tls(url: &str) -> bool {
    let scheme = url.trim_start().split("://").next().unwrap_or_default().to_ascii_lowercase();
    scheme.starts_with("rediss") || scheme.starts_with("valkeys")
}

/// `[telemetry]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Address of the HTTP listener for `/metrics`, `/healthz`, `/readyz`. Default: "127.0.0.1:9464".
    #[serde(default = "defaults::listen")]
    pub listen: SocketAddr,
    /// `text` (human-readable) or `json` (one object per line, for containers). Default: "text".
    #[serde(default)]
    pub log_format: LogFormat,
    /// Log filter in `RUST_LOG` syntax. Default: "info".
    #[serde(default = "defaults::log_level")]
    pub log_level: String,
    /// How often gauges that need a query (pending rows, oldest age, dead rows) are sampled. Default: "15s".
    #[serde(default = "defaults::sample_interval", with = "humantime_serde")]
    pub sample_interval: Duration,
    /// A client must send a request's headers within this time, or the listener closes its
    /// connection (a slow client cannot hold it). Default: "5s".
    #[serde(default = "defaults::five_seconds", with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// Connections open at once. A new one beyond it closes the connection that has been
    /// open longest without a request in progress (an idle scraper, a client still sending
    /// its headers), so the kubelet's probes are answered whatever else is connected.
    /// Default: 32.
    #[serde(default = "defaults::max_connections")]
    pub max_connections: usize,
    /// Serve the listener over TLS (`[telemetry.tls]`: `cert_file`, `key_file`, optionally
    /// `client_ca_file` to require client certificates). Default: plain HTTP.
    pub tls: Option<ListenerTls>,
    /// Credentials `/metrics` asks for (`[telemetry.auth]`); the probes never do (the kubelet
    /// would need them). Default: none.
    pub auth: Option<MetricsAuth>,
    /// OpenTelemetry traces over OTLP/HTTP (`[telemetry.tracing]`). Default: off.
    pub tracing: Option<TracingConfig>,
}

/// `[telemetry.tls]`: the listener's own certificate, as Prometheus exporters take it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ListenerTls {
    /// PEM certificate (chain) the listener presents. Required.
    pub cert_file: std::path::PathBuf,
    /// PEM private key of `cert_file`. Required.
    pub key_file: std::path::PathBuf,
    /// PEM CA certificate(s): when set, clients must present a certificate it signed.
    pub client_ca_file: Option<std::path::PathBuf>,
}

/// `[telemetry.auth]`: what a scrape of `/metrics` must carry, from mounted secret files.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MetricsAuth {
    /// A file holding the bearer token (`Authorization: Bearer <token>`).
    pub bearer_token_file: Option<std::path::PathBuf>,
    /// Basic authentication: the user name, with `basic_password_file`.
    pub basic_user: Option<String>,
    /// A file holding the basic-authentication password.
    pub basic_password_file: Option<std::path::PathBuf>,
    /// Read from the files when the configuration loads.
    #[serde(skip)]
    pub bearer_token: Option<Secret>,
    #[serde(skip)]
    pub basic_password: Option<Secret>,
}

/// `[telemetry.tracing]`: spans for each event's way through handoff, exported over OTLP/HTTP
/// (JSON). Unset keys follow the standard `OTEL_*` variables, then the defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracingConfig {
    /// Where spans go: the collector's OTLP/HTTP traces URL. Default: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
    /// else `OTEL_EXPORTER_OTLP_ENDPOINT` + "/v1/traces", else "http://localhost:4318/v1/traces".
    pub endpoint: Option<String>,
    /// Request headers (e.g. an API key), added to `OTEL_EXPORTER_OTLP_HEADERS`. Default: none.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Fraction of new traces sampled (a producer's sampled flag is followed). Default:
    /// `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`, else every trace.
    pub sample_ratio: Option<f64>,
    /// `service.name` of the spans. Default: `OTEL_SERVICE_NAME`, else "handoff".
    pub service_name: Option<String>,
    /// How long one export may take. Default: "10s".
    #[serde(default = "defaults::ten_seconds", with = "humantime_serde")]
    pub timeout: Duration,
    /// TLS for an `https://` endpoint. Default: verify-full against the system roots.
    #[serde(default)]
    pub tls: TlsConfig,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `[shutdown]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    /// After SIGTERM, in-flight batches get this long to finish or be released before the process
    /// exits. Keep it below the orchestrator's kill timeout. Default: "20s".
    #[serde(default = "defaults::grace_period", with = "humantime_serde")]
    pub grace_period: Duration,
}

/// Exponential backoff: `initial × multiplier^(n-1)`, capped at `max`, ± `jitter` (a fraction).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackoffConfig {
    #[serde(with = "humantime_serde")]
    pub initial: Duration,
    #[serde(with = "humantime_serde")]
    pub max: Duration,
    pub multiplier: f64,
    pub jitter: f64,
}

impl BackoffConfig {
    /// Row failures: 1s, 2s, 4s … capped at 10m, ±20%.
    pub fn row_default() -> Self {
        Self { initial: Duration::from_secs(1), max: Duration::from_secs(600), multiplier: 2.0, jitter: 0.2 }
    }

    /// Outages: 200ms, 400ms … capped at 30s, ±20%.
    pub fn outage_default() -> Self {
        Self { initial: Duration::from_millis(200), max: Duration::from_secs(30), multiplier: 2.0, jitter: 0.2 }
    }
}

mod defaults {
    pub fn ten_seconds() -> std::time::Duration {
        std::time::Duration::from_secs(10)
    }
    use std::net::SocketAddr;
    use std::time::Duration;

    pub fn pool_size() -> usize {
        8
    }
    pub fn five_seconds() -> Duration {
        Duration::from_secs(5)
    }
    pub fn listen() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 9464))
    }
    pub fn log_level() -> String {
        "info".into()
    }
    pub fn max_connections() -> usize {
        32
    }
    pub fn sample_interval() -> Duration {
        Duration::from_secs(15)
    }
    pub fn grace_period() -> Duration {
        Duration::from_secs(20)
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self { url: None, url_file: None, command_timeout: defaults::five_seconds(), tls: TlsConfig::default() }
    }
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            listen: defaults::listen(),
            log_format: LogFormat::default(),
            log_level: defaults::log_level(),
            sample_interval: defaults::sample_interval(),
            header_read_timeout: defaults::five_seconds(),
            max_connections: defaults::max_connections(),
            tls: None,
            auth: None,
            tracing: None,
        }
    }
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self { grace_period: defaults::grace_period() }
    }
}

/// `"*"` matches everything, `"order.*"` a prefix, anything else exactly.
pub fn type_matches(pattern: &str, event_type: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => event_type.starts_with(prefix),
        None => pattern == event_type,
    }
}

/// The dialect a `database.url` names, by its scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Mysql,
}

impl Dialect {
    pub fn of(url: &str) -> Option<Self> {
        match url.split("://").next().unwrap_or_default() {
            "postgres" | "postgresql" => Some(Dialect::Postgres),
            "mysql" | "mariadb" => Some(Dialect::Mysql),
            _ => None,
        }
    }

    pub fn placeholder(self) -> crate::sql::params::Placeholder {
        match self {
            Dialect::Postgres => crate::sql::params::Placeholder::Numbered,
            Dialect::Mysql => crate::sql::params::Placeholder::Positional,
        }
    }
}
