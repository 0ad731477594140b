//! Why an entry went to the poison path, and why an outbox row turned DEAD. Their names are
//! written to the poison table's `reason` column and are metric labels: dashboards, alerts and
//! operators' queries use them, so they never change.

use std::fmt;

/// Why the bridge refused an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoisonReason {
    /// The entry was deleted from the stream while it was pending (XCLAIM returned no fields).
    Deleted,
    MissingField,
    NotUtf8,
    NulByte,
    InvalidEventId,
    UnknownEventType,
    OwnerMismatch,
    PayloadTooLarge,
    InvalidPayload,
    /// The payload's id field does not equal the event id.
    IdMismatch,
    SchemaViolation,
    InvalidHeaders,
    /// Redelivered `max_deliveries` times without a verdict.
    DeliveryLimit,
    /// The event id was taken over before with other content.
    PayloadConflict,
    /// The inbox refused the entry's data.
    RejectedByDatabase,
    /// The broker's client cannot read the message (a NATS header it refuses).
    UnreadableMessage,
}

impl PoisonReason {
    pub(crate) const ALL: [PoisonReason; 16] = [
        PoisonReason::Deleted,
        PoisonReason::MissingField,
        PoisonReason::NotUtf8,
        PoisonReason::NulByte,
        PoisonReason::InvalidEventId,
        PoisonReason::UnknownEventType,
        PoisonReason::OwnerMismatch,
        PoisonReason::PayloadTooLarge,
        PoisonReason::InvalidPayload,
        PoisonReason::IdMismatch,
        PoisonReason::SchemaViolation,
        PoisonReason::InvalidHeaders,
        PoisonReason::DeliveryLimit,
        PoisonReason::PayloadConflict,
        PoisonReason::RejectedByDatabase,
        PoisonReason::UnreadableMessage,
    ];

    /// The stable name: the `reason` column and label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PoisonReason::Deleted => "entry_deleted",
            PoisonReason::MissingField => "missing_field",
            PoisonReason::NotUtf8 => "not_utf8",
            PoisonReason::NulByte => "nul_byte",
            PoisonReason::InvalidEventId => "invalid_event_id",
            PoisonReason::UnknownEventType => "unknown_event_type",
            PoisonReason::OwnerMismatch => "owner_mismatch",
            PoisonReason::PayloadTooLarge => "payload_too_large",
            PoisonReason::InvalidPayload => "invalid_payload",
            PoisonReason::IdMismatch => "id_mismatch",
            PoisonReason::SchemaViolation => "schema_violation",
            PoisonReason::InvalidHeaders => "invalid_headers",
            PoisonReason::DeliveryLimit => "delivery_limit",
            PoisonReason::PayloadConflict => "payload_conflict",
            PoisonReason::RejectedByDatabase => "rejected_by_database",
            PoisonReason::UnreadableMessage => "unreadable_message",
        }
    }
}

impl fmt::Display for PoisonReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an outbox row turned DEAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum DeadReason {
    /// `max_attempts` appends failed for reasons of the row's own.
    AttemptsExhausted,
    /// The row cannot become an entry (a template column is NULL, …); retrying cannot help.
    InvalidRow,
    /// Its lease expired `max_expired_claims` times: it keeps killing its claimant.
    CrashLoop,
    /// Over `payload_max_bytes` or `entry_max_bytes`: never appended.
    TooLarge,
}

impl DeadReason {
    pub(crate) const ALL: [DeadReason; 4] =
        [DeadReason::AttemptsExhausted, DeadReason::InvalidRow, DeadReason::CrashLoop, DeadReason::TooLarge];

    /// The stable name: the `reason` label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DeadReason::AttemptsExhausted => "attempts_exhausted",
            DeadReason::InvalidRow => "invalid_row",
            DeadReason::CrashLoop => "crash_loop",
            DeadReason::TooLarge => "too_large",
        }
    }
}

impl fmt::Display for DeadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_distinct_and_snake_case() {
        let names: Vec<&str> =
            PoisonReason::ALL.iter().map(|r| r.as_str()).chain(DeadReason::ALL.iter().map(|r| r.as_str())).collect();
        let mut distinct = names.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), names.len());
        assert!(
            names.iter().all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')),
            "{names:?}"
        );
    }
}
