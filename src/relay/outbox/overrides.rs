//! `[relay.sql]`: the outbox statements a relay runs instead of the reference ones, each by the
//! statement it replaces (the contract each must keep: `contract.rs`).

use serde::Deserialize;

use super::contract::StatementKind;

/// `[relay.sql]`: replacement statements with named parameters (see docs/reference/sql-contract.md).
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
    /// Retention: delete delivered rows older than `:age_ms`, at most `:batch_size` (returns the count).
    pub purge: Option<String>,
    /// Gauge sampling (`pending`, `in_flight`, `dead`, `oldest_pending_age_seconds`). When `claim`
    /// is replaced and this is not, the gauges are not sampled.
    pub stats: Option<String>,
    /// Broker-loss repair: delivered rows of the last `:age_ms` as `id`, `stream`, `entry_id`.
    pub delivered_since: Option<String>,
    /// Broker-loss repair: move the delivered rows `:ids` back to PENDING.
    pub redrive: Option<String>,
}

impl SqlOverrides {
    /// No statement replaced: the reference outbox.
    pub(crate) fn is_empty(&self) -> bool {
        StatementKind::ALL.iter().all(|kind| self.get(*kind).is_none())
    }

    /// The configured replacement for `kind`, if any.
    pub(crate) fn get(&self, kind: StatementKind) -> Option<&str> {
        use StatementKind as K;
        let sql = match kind {
            K::Claim => &self.claim,
            K::MarkDelivered => &self.mark_delivered,
            K::Delete => &self.delete,
            K::Retry => &self.retry,
            K::Dead => &self.dead,
            K::Release => &self.release,
            K::Renew => &self.renew,
            K::Purge => &self.purge,
            K::Stats => &self.stats,
            K::DeliveredSince => &self.delivered_since,
            K::Redrive => &self.redrive,
        };
        sql.as_deref()
    }
}
