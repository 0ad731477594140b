//! The poison path's vocabulary: why an entry was refused, as a metric label and a column.

/// Reasons an entry goes to the poison path (the `reason` label and column).
pub mod reason {
    pub const DELETED: &str = "entry_deleted";
    pub const MISSING_FIELD: &str = "missing_field";
    pub const NOT_UTF8: &str = "not_utf8";
    pub const NUL_BYTE: &str = "nul_byte";
    pub const INVALID_EVENT_ID: &str = "invalid_event_id";
    pub const UNKNOWN_EVENT_TYPE: &str = "unknown_event_type";
    pub const OWNER_MISMATCH: &str = "owner_mismatch";
    pub const PAYLOAD_TOO_LARGE: &str = "payload_too_large";
    pub const INVALID_PAYLOAD: &str = "invalid_payload";
    pub const ID_MISMATCH: &str = "id_mismatch";
    pub const SCHEMA_VIOLATION: &str = "schema_violation";
    pub const INVALID_HEADERS: &str = "invalid_headers";
    pub const DELIVERY_LIMIT: &str = "delivery_limit";
    pub const PAYLOAD_CONFLICT: &str = "payload_conflict";
    pub const REJECTED_BY_DATABASE: &str = "rejected_by_database";

    pub const ALL: &[&str] = &[
        DELETED,
        MISSING_FIELD,
        NOT_UTF8,
        NUL_BYTE,
        INVALID_EVENT_ID,
        UNKNOWN_EVENT_TYPE,
        OWNER_MISMATCH,
        PAYLOAD_TOO_LARGE,
        INVALID_PAYLOAD,
        ID_MISMATCH,
        SCHEMA_VIOLATION,
        INVALID_HEADERS,
        DELIVERY_LIMIT,
        PAYLOAD_CONFLICT,
        REJECTED_BY_DATABASE,
    ];
}
