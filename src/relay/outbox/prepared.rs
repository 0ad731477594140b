//! What an outbox knows once its statements are prepared, and which statements a relay runs.

use std::collections::HashSet;

use super::contract::StatementKind;
use super::shape::ClaimShape;
use crate::relay::config::{RelayConfig, SettleMode};

/// What every dialect's outbox knows once its statements are prepared.
pub(crate) struct Prepared {
    /// The claim's result columns and how to read them.
    pub shape: ClaimShape,
    pub settle: SettleMode,
    /// The statements the relay has (optional ones may be absent).
    pub present: HashSet<StatementKind>,
}

/// The statement that settles a delivered row in `mode`.
pub(crate) fn settle_statement(mode: SettleMode) -> StatementKind {
    match mode {
        SettleMode::MarkDelivered => StatementKind::MarkDelivered,
        SettleMode::Delete => StatementKind::Delete,
    }
}

/// Whether a relay with this config runs `kind` at all (so whether it is prepared and checked).
pub(crate) fn needed(kind: StatementKind, relay: &RelayConfig) -> bool {
    // The reference schema's statements fit only the reference table: a replaced claim means
    // another table, whose optional statements must be given to be used.
    let reference_or_given = relay.sql.get(kind).is_some() || relay.sql.claim.is_none();
    match kind {
        StatementKind::MarkDelivered => relay.settle == SettleMode::MarkDelivered,
        StatementKind::Delete => relay.settle == SettleMode::Delete,
        StatementKind::Stats => reference_or_given,
        StatementKind::Purge => relay.retention.is_some(),
        // Also when the relay does not watch by itself: `handoff verify` uses them.
        StatementKind::DeliveredSince | StatementKind::Redrive => {
            relay.settle == SettleMode::MarkDelivered && reference_or_given
        }
        _ => true,
    }
}
