//! The outbox's SQL contract: the statements `[relay.sql]` may replace, the named parameters
//! each is offered and the result columns each must return.
//!
//! A configured statement may use any subset of its step's parameters; a name outside the set is
//! a configuration error. The result-column contract of `claim` is in [`CLAIM_COLUMNS`].

use crate::sql::params::{self, Placeholder};
use crate::store::columns::MissingColumns;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatementKind {
    Claim,
    MarkDelivered,
    Delete,
    Retry,
    Dead,
    Release,
    Renew,
    Stats,
    Purge,
    DeliveredSince,
    Redrive,
}

impl StatementKind {
    pub const ALL: [StatementKind; 11] = [
        Self::Claim,
        Self::MarkDelivered,
        Self::Delete,
        Self::Retry,
        Self::Dead,
        Self::Release,
        Self::Renew,
        Self::Stats,
        Self::Purge,
        Self::DeliveredSince,
        Self::Redrive,
    ];

    /// The claim and the statements that settle what it claimed: what a locked claim replaces
    /// with its own.
    pub(crate) fn settles_a_claim(self) -> bool {
        matches!(self, Self::Claim | Self::MarkDelivered | Self::Delete | Self::Retry | Self::Dead)
    }

    /// The key under `[relay.sql]`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Claim => "claim",
            Self::MarkDelivered => "mark_delivered",
            Self::Delete => "delete",
            Self::Retry => "retry",
            Self::Dead => "dead",
            Self::Release => "release",
            Self::Renew => "renew",
            Self::Stats => "stats",
            Self::Purge => "purge",
            Self::DeliveredSince => "delivered_since",
            Self::Redrive => "redrive",
        }
    }

    /// Parameters offered to the statement. Batch steps get arrays (`ids`, `tokens`, `entry_ids`,
    /// one element per row, in the same order); per-row steps get scalars.
    pub(crate) fn params(self) -> &'static [&'static str] {
        match self {
            // `ids`: in a MySQL claim script, the ids earlier statements returned (JSON array).
            Self::Claim => &["claimant", "batch_size", "lease_ms", "ids"],
            // `streams`: the stream each row's entry went to (kept for broker-loss repair).
            Self::MarkDelivered => &["claimant", "ids", "tokens", "entry_ids", "streams"],
            Self::Delete => &["claimant", "ids", "tokens"],
            // `delay_ms`: how long the rows wait before they are due again (0: due at once; more
            // when part of the broker is down, so the rows of its streams do not crowd the
            // claims of the others).
            Self::Release => &["claimant", "ids", "tokens", "delay_ms"],
            Self::Renew => &["claimant", "ids", "tokens", "lease_ms"],
            Self::Stats => &[],
            Self::Purge => &["age_ms", "batch_size"],
            Self::DeliveredSince => &["age_ms"],
            Self::Redrive => &["ids", "entry_ids"],
            Self::Retry => &["claimant", "id", "token", "error", "delay_ms"],
            Self::Dead => &["claimant", "id", "token", "error"],
        }
    }
}

/// Columns the claim statement must return (any extra column can feed templates).
pub(crate) const CLAIM_COLUMNS: &[&str] = &["id", "token", "event_id", "attempts", "expired_claims", "age_ms"];

/// Columns the `delivered_since` statement must return, one row per delivered row (an
/// `event_id` column beside them is used where present: see `DeliveredRow`).
pub(crate) const DELIVERED_COLUMNS: &[&str] = &["id", "stream", "entry_id"];

/// Columns the stats statement must return (one row), sampled into the relay's gauges.
pub(crate) const STATS_COLUMNS: &[&str] = &["pending", "in_flight", "dead", "oldest_pending_age_seconds"];

/// Optional claim column that ordered relaying groups runs by (events of one key).
pub(crate) const ORDER_KEY_COLUMN: &str = "order_key";

/// Optional claim column: true when the claim took the row over from an expired lease (counted
/// in `handoff_relay_lease_reclaims_total`).
pub(crate) const RECLAIMED_COLUMN: &str = "reclaimed";

/// Optional claim columns that, when present and not NULL, become entry fields of the same name.
pub(crate) const ENTRY_COLUMNS: &[&str] = &["event_type", "aggregate_type", "aggregate_id", "payload", "headers"];

/// What a result lacks of the columns `kind` must return (`stats`, `delivered_since`), as the
/// message to report; `None` when nothing is missing or `kind` returns nothing fixed.
pub(crate) fn missing_result_columns(kind: StatementKind, names: &[&str]) -> Option<MissingColumns> {
    let required = match kind {
        StatementKind::Stats => STATS_COLUMNS,
        StatementKind::DeliveredSince => DELIVERED_COLUMNS,
        _ => return None,
    };
    MissingColumns::of(required, names.iter().copied())
}

/// Checks that `sql` scans and only uses parameters offered to `kind`.
pub(crate) fn check_params(kind: StatementKind, sql: &str, style: Placeholder) -> Result<(), params::ParamError> {
    params::check_offered(sql, style, kind.params(), &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_parameter_is_named_with_the_offered_ones() {
        let err =
            check_params(StatementKind::Dead, "update t set x = :oops", Placeholder::Numbered).unwrap_err().to_string();
        assert!(err.contains(":oops") && err.contains(":error"), "{err}");
        assert!(
            check_params(StatementKind::Dead, "update t set e = :error where id = :id", Placeholder::Numbered).is_ok()
        );
    }
}
