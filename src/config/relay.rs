//! `[[relay]]`: one outbox table relayed to Redis Streams.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::BackoffConfig;

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

mod defaults {
    use std::time::Duration;

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
