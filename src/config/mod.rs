//! The one TOML file that configures handoff, as typed structs.
//!
//! Every struct rejects unknown keys, every duration carries its unit (`"250ms"`, `"30s"`), and
//! every field documents its default. Loading (file + environment + `*_file` secrets) lives in
//! `load`, cross-field checks in `validate`.

mod load;
mod secret;
mod validate;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

pub use load::{ConfigError, load, load_str};
pub use secret::Secret;

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
}

/// `[redis]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://`, `rediss://`, `redis-cluster://host:port?node=…` or
    /// `redis-sentinel://host:port/db?sentinelServiceName=…`. Secret like the database URL
    /// (`HANDOFF_REDIS__URL`, `url_file`). Default: `redis://127.0.0.1:6379`.
    pub url: Option<Secret>,
    /// File holding the URL.
    pub url_file: Option<PathBuf>,
    /// A command that gets no reply within this time fails and is treated as an outage. Default: "5s".
    #[serde(default = "defaults::five_seconds", with = "humantime_serde")]
    pub command_timeout: Duration,
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

/// `[[relay]]`: one outbox table relayed to Redis Streams.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    /// Name in metrics labels, logs and the claimant id. Required, unique.
    pub name: String,
    /// Table the default statements use. Default: "audit_outbox".
    #[serde(default = "defaults::table")]
    pub table: String,
    /// Written into every entry's `owner` field so consumers can check provenance. Default: the relay name.
    pub owner: Option<String>,
    /// Stream key template over claim columns, e.g. "audit:{aggregate_type}". Default: "audit:{aggregate_type}".
    #[serde(default = "defaults::stream")]
    pub stream: String,
    /// Rows per claim. Default: 500.
    #[serde(default = "defaults::batch_size")]
    pub batch_size: u32,
    /// Batches in flight at once (claim loops). Default: 1.
    #[serde(default = "defaults::one")]
    pub concurrency: u32,
    /// Sleep between claims when the last one came back empty. Default: "250ms".
    #[serde(default = "defaults::poll_interval", with = "humantime_serde")]
    pub poll_interval: Duration,
    /// How long a claim is owned before another relay may take it over; renewed every third of
    /// it while the batch is in flight. Default: "30s".
    #[serde(default = "defaults::lease", with = "humantime_serde")]
    pub lease: Duration,
    /// Failed appends attributable to the row before it turns DEAD. Default: 10.
    #[serde(default = "defaults::max_attempts")]
    pub max_attempts: u32,
    /// Times a row's lease may expire (its claimant died holding it) before it turns DEAD. Default: 3.
    #[serde(default = "defaults::max_expired_claims")]
    pub max_expired_claims: u32,
    /// Delay before retrying a row whose append failed.
    #[serde(default = "BackoffConfig::row_default")]
    pub backoff: BackoffConfig,
    /// Delay before claiming again after Redis or the database was unreachable.
    #[serde(default = "BackoffConfig::outage_default")]
    pub outage_backoff: BackoffConfig,
    /// `mark_delivered` keeps delivered rows (status DELIVERED); `delete` removes them. Default: "mark_delivered".
    #[serde(default)]
    pub settle: SettleMode,
    /// Approximate stream trimming on append. Default: none.
    pub trim: Option<TrimConfig>,
    /// Extra entry fields: name → template over claim columns (or a constant).
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
    /// Statement overrides; absent ones use the defaults for the reference schema.
    #[serde(default)]
    pub sql: SqlOverrides,
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

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SettleMode {
    #[default]
    MarkDelivered,
    Delete,
}

/// `[relay.trim]`: exactly one of `maxlen` / `min_age`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TrimConfig {
    /// `XADD … MAXLEN ~ n`: keep about this many entries.
    pub maxlen: Option<u64>,
    /// `XADD … MINID ~ <now − age>`: drop entries older than this (by the relay's clock).
    #[serde(default, with = "humantime_serde::option")]
    pub min_age: Option<Duration>,
}

/// `[relay.sql]`: replacement statements with named parameters (see the README's SQL contract).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlOverrides {
    pub claim: Option<String>,
    pub mark_delivered: Option<String>,
    pub delete: Option<String>,
    pub retry: Option<String>,
    pub dead: Option<String>,
    pub release: Option<String>,
    pub renew: Option<String>,
    /// Gauge sampling (`pending`, `in_flight`, `dead`, `oldest_pending_age_seconds`). When `claim`
    /// is replaced and this is not, the gauges are not sampled.
    pub stats: Option<String>,
}

mod defaults {
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
    pub fn sample_interval() -> Duration {
        Duration::from_secs(15)
    }
    pub fn grace_period() -> Duration {
        Duration::from_secs(20)
    }
    pub fn table() -> String {
        "audit_outbox".into()
    }
    pub fn stream() -> String {
        "audit:{aggregate_type}".into()
    }
    pub fn batch_size() -> u32 {
        500
    }
    pub fn one() -> u32 {
        1
    }
    pub fn poll_interval() -> Duration {
        Duration::from_millis(250)
    }
    pub fn lease() -> Duration {
        Duration::from_secs(30)
    }
    pub fn max_attempts() -> u32 {
        10
    }
    pub fn max_expired_claims() -> u32 {
        3
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self { url: None, url_file: None, command_timeout: defaults::five_seconds() }
    }
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            listen: defaults::listen(),
            log_format: LogFormat::default(),
            log_level: defaults::log_level(),
            sample_interval: defaults::sample_interval(),
        }
    }
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self { grace_period: defaults::grace_period() }
    }
}

impl RelayConfig {
    /// The `owner` entry field: configured, or the relay name.
    pub fn owner(&self) -> &str {
        self.owner.as_deref().unwrap_or(&self.name)
    }
}

impl SqlOverrides {
    /// The configured replacement for `kind`, if any.
    pub fn get(&self, kind: crate::store::statements::StatementKind) -> Option<&str> {
        use crate::store::statements::StatementKind as K;
        let sql = match kind {
            K::Claim => &self.claim,
            K::MarkDelivered => &self.mark_delivered,
            K::Delete => &self.delete,
            K::Retry => &self.retry,
            K::Dead => &self.dead,
            K::Release => &self.release,
            K::Renew => &self.renew,
            K::Stats => &self.stats,
        };
        sql.as_deref()
    }
}
