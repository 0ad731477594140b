//! Poison records as an operator sees them (`handoff poison list | retry`): what the poison
//! table holds, selected by reason and event id.

/// Which records an operation reads.
#[derive(Debug, Clone, Default)]
pub(crate) struct PoisonFilter {
    pub reason: Option<String>,
    pub event_id: Option<String>,
    pub limit: u32,
    /// Records skipped first (a listing's later pages).
    pub offset: u32,
}

/// One record of a poison table, with the entry's fields as they were read.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct StoredPoison {
    pub id: i64,
    pub stream: String,
    pub entry_id: String,
    pub event_id: Option<String>,
    pub reason: String,
    pub detail: String,
    pub age_seconds: f64,
    pub redrives: i32,
    /// The entry's fields (what `retry` appends again); not shown.
    #[serde(skip)]
    pub fields: serde_json::Value,
}
