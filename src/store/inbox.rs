//! The bridge's seam: a valid entry, a poison record, the takeover's one decision and the
//! statements a dialect implements for it. (The worker's seam is in `worker`.)

use std::future::Future;

use super::StoreResult;

/// Columns the default takeover writes in the inbox table and in the poison table; `check` looks
/// them up in the catalog (MariaDB's PREPARE does not check an `INSERT … SELECT` column list).
pub const INBOX_COLUMNS: &[&str] = &[
    "consumer",
    "event_id",
    "event_type",
    "owner",
    "aggregate_type",
    "aggregate_id",
    "payload",
    "headers",
    "content_hash",
    "stream",
    "stream_entry_id",
    "status",
];
pub const POISON_COLUMNS: &[&str] =
    &["consumer", "stream", "stream_entry_id", "event_id", "reason", "detail", "fields"];

/// A batch cut into runs of consecutive events whose payloads add up to at most `max_bytes`
/// (an event larger than that is a run of its own). A statement carrying a run is then never
/// much larger than `max_bytes`, however large the batch: the client library copies a
/// statement's parameters into its send buffer, so one statement for a batch of large
/// payloads would cost the batch's size twice more in memory.
pub fn runs_by_payload(events: &[InboxEvent], max_bytes: usize) -> Vec<&[InboxEvent]> {
    let mut runs = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, event) in events.iter().enumerate() {
        let size = event.payload.as_bytes().len();
        if i > start && bytes + size > max_bytes {
            runs.push(&events[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < events.len() {
        runs.push(&events[start..]);
    }
    runs
}

/// A takeover's tables and statements, in a dialect's SQL.
pub struct TakeoverSql {
    pub table: String,
    pub poison_table: String,
    /// Insert-if-absent of a batch (or of one event).
    pub insert: String,
    /// The content hash of events already in the inbox.
    pub existing: String,
    pub poison: String,
}

/// What checking a takeover asks of a dialect's connection.
pub trait Catalog: Send {
    /// The columns of `table` (none if it does not exist).
    fn columns(&mut self, table: &str) -> impl Future<Output = Result<Vec<String>, super::PrepareError>> + Send;

    /// Why the database refuses to prepare `sql` (named `context`), if it does.
    fn refusal(
        &mut self,
        context: &str,
        sql: &str,
    ) -> impl Future<Output = Result<Option<String>, super::PrepareError>> + Send;
}

impl TakeoverSql {
    /// The statements `dialect` writes for these tables; it gets each table with the column list
    /// of the insert into it (in [`INBOX_COLUMNS`] / [`POISON_COLUMNS`] order) and returns the
    /// insert, existing and poison statements.
    pub fn new(table: &str, poison_table: &str, dialect: impl FnOnce(Columns<'_>, Columns<'_>) -> [String; 3]) -> Self {
        let (columns, poison_columns) = (column_list(INBOX_COLUMNS), column_list(POISON_COLUMNS));
        let [insert, existing, poison] =
            dialect(Columns { table, list: &columns }, Columns { table: poison_table, list: &poison_columns });
        Self { table: table.to_owned(), poison_table: poison_table.to_owned(), insert, existing, poison }
    }

    /// Checks the tables' columns in the catalog (MariaDB's PREPARE does not check an
    /// `INSERT … SELECT` column list) and prepares the takeover statements; every problem at once.
    pub async fn check(&self, catalog: &mut impl Catalog) -> Result<(), super::PrepareError> {
        let mut problems = Vec::new();
        for (table, required) in [(&self.table, INBOX_COLUMNS), (&self.poison_table, POISON_COLUMNS)] {
            let present = catalog.columns(table).await?;
            let present = (!present.is_empty()).then_some(present.as_slice());
            problems.extend(missing_columns(table, required, present));
        }
        for (name, sql) in [("insert", &self.insert), ("existing", &self.existing), ("poison", &self.poison)] {
            problems.extend(catalog.refusal(&format!("takeover statement {name}"), sql).await?);
        }
        if problems.is_empty() { Ok(()) } else { Err(super::PrepareError::Invalid(problems)) }
    }
}

/// A table and the column list of an insert into it (`a, b, c`).
#[derive(Clone, Copy)]
pub struct Columns<'a> {
    pub table: &'a str,
    pub list: &'a str,
}

fn column_list(columns: &[&str]) -> String {
    columns.join(", ")
}

/// What a table lacks of `required`, as a message naming the table and the columns; `None`
/// when nothing is missing. `present` is `None` when the table does not exist.
pub fn missing_columns(table: &str, required: &[&str], present: Option<&[String]>) -> Option<String> {
    let Some(present) = present else { return Some(format!("table {table} does not exist")) };
    let missing: Vec<&str> =
        required.iter().copied().filter(|c| !present.iter().any(|p| p.eq_ignore_ascii_case(c))).collect();
    (!missing.is_empty()).then(|| format!("table {table} lacks column(s) {}", missing.join(", ")))
}

/// Text known to be UTF-8, kept as the bytes it was read as (a payload is not copied on its way
/// from the stream reply to the database).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text(bytes::Bytes);

impl Text {
    /// `None` unless `bytes` is UTF-8.
    pub fn new(bytes: bytes::Bytes) -> Option<Self> {
        std::str::from_utf8(&bytes).is_ok().then_some(Self(bytes))
    }

    pub fn from_static(text: &'static str) -> Self {
        Self(bytes::Bytes::from_static(text.as_bytes()))
    }

    pub fn as_str(&self) -> &str {
        // Checked once in `new`; checking again is cheaper than a copy and needs no `unsafe`.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A valid entry, ready to be taken over into the inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxEvent {
    pub event_id: String,
    pub event_type: String,
    pub owner: Option<String>,
    pub aggregate_type: Option<String>,
    pub aggregate_id: Option<String>,
    /// JSON object text.
    pub payload: Text,
    /// JSON object text.
    pub headers: Text,
    pub content_hash: String,
    pub stream: String,
    pub entry_id: String,
    /// Kept as IGNORED: an event type this consumer does not handle, recorded, never processed.
    pub ignored: bool,
}

/// An entry that could not be taken over, recorded with why.
#[derive(Debug, Clone, PartialEq)]
pub struct PoisonRecord {
    pub stream: String,
    pub entry_id: String,
    pub event_id: Option<String>,
    pub reason: &'static str,
    pub detail: String,
    pub fields: serde_json::Value,
}

impl PoisonRecord {
    /// `event`'s id was already taken over with other content (`existing_hash`, if still there).
    pub fn taken_over_with_other_content(event: &InboxEvent, existing_hash: Option<&str>) -> Self {
        let detail = format!(
            "event id already taken over with content hash {}, this entry hashes to {}",
            existing_hash.unwrap_or("(unknown)"),
            event.content_hash
        );
        Self::conflict(event, detail)
    }

    /// `event`'s id appears earlier in the same batch with other content (`first_hash`).
    pub fn earlier_in_batch_with_other_content(event: &InboxEvent, first_hash: &str) -> Self {
        let detail = format!(
            "event id appears earlier in the batch with content hash {first_hash}; this entry hashes to {}",
            event.content_hash
        );
        Self::conflict(event, detail)
    }

    fn conflict(event: &InboxEvent, detail: String) -> Self {
        Self {
            stream: event.stream.clone(),
            entry_id: event.entry_id.clone(),
            event_id: Some(event.event_id.clone()),
            reason: crate::poison::reason::PAYLOAD_CONFLICT,
            detail,
            fields: serde_json::json!({
                "event_type": event.event_type,
                "aggregate_type": event.aggregate_type,
                "aggregate_id": event.aggregate_id,
                "payload": event.payload.as_str(),
                "headers": event.headers.as_str(),
            }),
        }
    }
}

/// What the takeover made of one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Takeover {
    Inserted,
    /// Already in the inbox with the same content (a redelivery or a republish).
    Duplicate,
    /// Already in the inbox with other content; recorded in the poison table as a conflict.
    Conflict,
}

impl Takeover {
    /// The one decision of a takeover, for every dialect: the insert took the event
    /// (`inserted`), or the inbox already holds it with `existing_hash` — the same content (a
    /// redelivery, a republish) or other content, which is recorded in `poison` as a conflict.
    pub fn judge(
        event: &InboxEvent,
        inserted: bool,
        existing_hash: Option<&str>,
        poison: &mut Vec<PoisonRecord>,
    ) -> Self {
        if inserted {
            Takeover::Inserted
        } else if existing_hash == Some(event.content_hash.as_str()) {
            Takeover::Duplicate
        } else {
            poison.push(PoisonRecord::taken_over_with_other_content(event, existing_hash));
            Takeover::Conflict
        }
    }
}

pub trait InboxStore: Send + Sync + 'static {
    /// In one transaction: inserts the events that are new for `consumer`, records `poison` and
    /// any payload conflicts. Returns one outcome per event, in order. Nothing is recorded if it
    /// fails, so the caller must not acknowledge anything then.
    fn take_over(
        &self,
        consumer: &str,
        events: &[InboxEvent],
        poison: &[PoisonRecord],
    ) -> impl Future<Output = StoreResult<Vec<Takeover>>> + Send;

    /// Whether the database answers.
    fn ping(&self) -> impl Future<Output = StoreResult<()>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(size: usize) -> InboxEvent {
        InboxEvent {
            event_id: "e".into(),
            event_type: "t".into(),
            owner: None,
            aggregate_type: None,
            aggregate_id: None,
            payload: Text::new(bytes::Bytes::from("x".repeat(size))).unwrap(),
            headers: Text::from_static("{}"),
            content_hash: String::new(),
            stream: "s".into(),
            entry_id: "0-1".into(),
            ignored: false,
        }
    }

    #[test]
    fn runs_keep_every_event_in_order_and_stay_under_the_limit_unless_one_event_is_larger() {
        let sizes = [10, 20, 30, 100, 5, 5, 200, 1];
        let events: Vec<InboxEvent> = sizes.iter().map(|&s| event(s)).collect();
        let runs = runs_by_payload(&events, 50);
        let lens: Vec<Vec<usize>> =
            runs.iter().map(|r| r.iter().map(|e| e.payload.as_bytes().len()).collect()).collect();
        assert_eq!(lens, [vec![10, 20], vec![30], vec![100], vec![5, 5], vec![200], vec![1]]);
        assert_eq!(runs_by_payload(&events, 1 << 20).len(), 1);
        assert!(runs_by_payload(&[], 50).is_empty());
    }
}
