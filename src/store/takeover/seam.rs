//! The bridge's seam: a valid entry, a poison record, the takeover's one decision and the
//! statements a dialect implements for it. (The worker's seam is in `worker`.)

use std::collections::HashMap;
use std::future::Future;

use super::StoreResult;
use super::bindings::Param;
use crate::config::BridgeConfig;
use crate::config::consumer_sql::{EXISTING_COLUMNS, TakeoverStatement};
use crate::sql::params::{self, NamedSql, Placeholder};

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
    "fields",
    "content_hash",
    "stream",
    "stream_entry_id",
    "status",
];
pub const POISON_COLUMNS: &[&str] =
    &["consumer", "stream", "stream_entry_id", "event_id", "reason", "detail", "fields"];
/// The longest detail a poison record keeps (a database's error, say), in characters.
pub const DETAIL_MAX_CHARS: usize = 2000;

/// Columns of handoff's own table of redeliveries (`bridge.deliveries_table`).
pub const DELIVERIES_COLUMNS: &[&str] = &["consumer", "stream", "stream_entry_id", "deliveries", "last_at"];

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

/// One takeover statement in a dialect's SQL.
#[derive(Debug, Clone)]
pub enum Sql {
    /// The dialect's own statement for the reference schema, bound positionally by the dialect
    /// (on Postgres: a whole batch in one statement).
    Reference(String),
    /// Named parameters ([`event_param`], [`poison_param`]), run once per event or record: an
    /// override from `[bridge.sql]`, or a dialect's default written that way.
    Named(NamedSql),
}

impl Sql {
    /// `text` with named parameters, rewritten to the dialect's placeholders.
    pub fn named(text: &str, style: Placeholder) -> Result<Self, String> {
        params::rewrite(text, style).map(Sql::Named).map_err(|e| e.to_string())
    }

    pub fn text(&self) -> &str {
        match self {
            Sql::Reference(text) => text,
            Sql::Named(named) => &named.sql,
        }
    }
}

/// A takeover's tables and statements, in a dialect's SQL.
pub struct TakeoverSql {
    pub table: String,
    pub poison_table: String,
    /// handoff's own count of redeliveries that reached the database (never overridden: a
    /// table of handoff's, like the schema's migrations create it).
    pub deliveries_table: String,
    /// Insert-if-absent of a batch (reference) or of one event (named).
    pub insert: Sql,
    /// The content hash of events already in the inbox; `None` when a custom insert comes
    /// without one (an event already there is then a duplicate, never a conflict).
    pub existing: Option<Sql>,
    pub poison: Sql,
    /// The inbox insert and the poison insert are the reference schema's (so the tables'
    /// columns can be checked in the catalog).
    reference_insert: bool,
    reference_poison: bool,
}

/// What checking a takeover asks of a dialect's connection.
pub trait Catalog: Send {
    /// The columns of `table` (none if it does not exist).
    fn columns(&mut self, table: &str) -> impl Future<Output = Result<Vec<String>, super::PrepareError>> + Send;

    /// Prepares `sql` (named `context`): its result columns, or why the database refuses it.
    fn prepare(
        &mut self,
        context: &str,
        sql: &str,
    ) -> impl Future<Output = Result<Result<Vec<String>, String>, super::PrepareError>> + Send;
}

/// The three statements a dialect writes for the reference schema, given each table with the
/// column list of the insert into it (in [`INBOX_COLUMNS`] / [`POISON_COLUMNS`] order).
pub type Reference = fn(Columns<'_>, Columns<'_>) -> [Sql; 3];

impl TakeoverSql {
    /// The bridge's statements: each override from `[bridge.sql]` (named parameters), the
    /// dialect's reference statements for the rest. A custom insert means a table of another
    /// layout, so the reference `existing` is not used with it.
    pub fn new(bridge: &BridgeConfig, style: Placeholder, reference: Reference) -> Result<Self, String> {
        let (table, poison_table) = (bridge.table.as_str(), bridge.poison_table.as_str());
        let (columns, poison_columns) = (column_list(INBOX_COLUMNS), column_list(POISON_COLUMNS));
        let [insert, existing, poison] =
            reference(Columns { table, list: &columns }, Columns { table: poison_table, list: &poison_columns });
        let given = |statement: TakeoverStatement| -> Result<Option<Sql>, String> {
            bridge
                .sql
                .get(statement)
                .map(|text| Sql::named(text, style).map_err(|e| format!("sql.{}: {e}", statement.name())))
                .transpose()
        };
        let custom_insert = given(TakeoverStatement::Insert)?;
        let custom_poison = given(TakeoverStatement::Poison)?;
        let existing = match (given(TakeoverStatement::Existing)?, &custom_insert) {
            (Some(sql), _) => Some(sql),
            (None, Some(_)) => None,
            (None, None) => Some(existing),
        };
        Ok(Self {
            table: table.to_owned(),
            poison_table: poison_table.to_owned(),
            deliveries_table: bridge.deliveries_table.clone(),
            existing,
            reference_insert: custom_insert.is_none(),
            reference_poison: custom_poison.is_none(),
            insert: custom_insert.unwrap_or(insert),
            poison: custom_poison.unwrap_or(poison),
        })
    }

    /// Checks the reference tables' columns in the catalog (MariaDB's PREPARE does not check an
    /// `INSERT … SELECT` column list) and prepares every statement, checking what `existing`
    /// returns; every problem at once, each naming its statement.
    pub async fn check(&self, catalog: &mut impl Catalog) -> Result<(), super::PrepareError> {
        let mut problems = Vec::new();
        let tables = [
            (&self.table, INBOX_COLUMNS, self.reference_insert),
            (&self.poison_table, POISON_COLUMNS, self.reference_poison),
            (&self.deliveries_table, DELIVERIES_COLUMNS, true),
        ];
        for (table, required, check) in tables {
            if check {
                let present = catalog.columns(table).await?;
                let present = (!present.is_empty()).then_some(present.as_slice());
                problems.extend(missing_columns(table, required, present));
            }
        }
        let statements = [
            (TakeoverStatement::Insert, Some(&self.insert)),
            (TakeoverStatement::Existing, self.existing.as_ref()),
            (TakeoverStatement::Poison, Some(&self.poison)),
        ];
        for (statement, sql) in statements {
            let Some(sql) = sql else { continue };
            let context = format!("sql.{}", statement.name());
            match catalog.prepare(&context, sql.text()).await? {
                Err(refusal) => problems.push(refusal),
                Ok(columns) if statement == TakeoverStatement::Existing => {
                    let found = |c: &&str| columns.iter().any(|p| p.eq_ignore_ascii_case(c));
                    if let Some(missing) = EXISTING_COLUMNS.iter().find(|c| !found(c)) {
                        problems.push(format!("{context}: result lacks required column {missing}"));
                    }
                }
                Ok(_) => {}
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(super::PrepareError::Invalid(problems)) }
    }
}

/// A named takeover statement's parameters for one event (`:fields.<name>`: an extra field).
pub fn event_param<'a>(consumer: &'a str, event: &'a InboxEvent) -> impl Fn(&str) -> Param + 'a {
    let extras: serde_json::Map<String, serde_json::Value> = match event.fields.as_str() {
        "{}" => serde_json::Map::new(),
        text => serde_json::from_str(text).unwrap_or_default(),
    };
    let maybe = |v: &Option<String>| v.clone().map_or(Param::Null, Param::Text);
    move |name| match name {
        "consumer" => Param::Text(consumer.to_owned()),
        "event_id" => Param::Text(event.event_id.clone()),
        "event_type" => Param::Text(event.event_type.clone()),
        "owner" => maybe(&event.owner),
        "aggregate_type" => maybe(&event.aggregate_type),
        "aggregate_id" => maybe(&event.aggregate_id),
        "payload" => Param::Json(event.payload.as_str().to_owned()),
        "headers" => Param::Json(event.headers.as_str().to_owned()),
        "fields" => Param::Json(event.fields.as_str().to_owned()),
        "content_hash" => Param::Text(event.content_hash.clone()),
        "stream" => Param::Text(event.stream.clone()),
        "entry_id" => Param::Text(event.entry_id.clone()),
        "status" => Param::Text(event.status().to_owned()),
        other => match other.strip_prefix("fields.").and_then(|f| extras.get(f)) {
            Some(serde_json::Value::String(text)) => Param::Text(text.clone()),
            _ => Param::Null,
        },
    }
}

/// A named poison statement's parameters for one record.
pub fn poison_param<'a>(consumer: &'a str, record: &'a PoisonRecord) -> impl Fn(&str) -> Param + 'a {
    move |name| match name {
        "consumer" => Param::Text(consumer.to_owned()),
        "stream" => Param::Text(record.stream.clone()),
        "entry_id" => Param::Text(record.entry_id.clone()),
        "event_id" => record.event_id.clone().map_or(Param::Null, Param::Text),
        "reason" => Param::Text(record.reason.to_owned()),
        "detail" => Param::Text(crate::error::storable(&record.detail, DETAIL_MAX_CHARS)),
        _ => Param::Json(record.fields.to_string()),
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
    /// The entry's fields beyond the mapped ones: a JSON object of strings (`{}` when none).
    pub fields: Text,
    pub content_hash: String,
    pub stream: String,
    pub entry_id: String,
    /// Kept as IGNORED: an event type this consumer does not handle, recorded, never processed.
    pub ignored: bool,
}

impl InboxEvent {
    /// The inbox status the event starts in (`:status`).
    pub fn status(&self) -> &'static str {
        if self.ignored { "IGNORED" } else { "PENDING" }
    }
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
                "fields": event.fields.as_str(),
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
    /// any payload conflicts, and — when the entries' deliveries were `counted` — forgets their
    /// counts (they have a verdict now). Returns one outcome per event, in order. Nothing is
    /// recorded if it fails, so the caller must not acknowledge anything then.
    fn take_over(
        &self,
        consumer: &str,
        events: &[InboxEvent],
        poison: &[PoisonRecord],
        counted: bool,
    ) -> impl Future<Output = StoreResult<Vec<Takeover>>> + Send;

    /// Counts one more delivery that reached the database for each of `entry_ids` of `stream`,
    /// in a transaction of its own that commits before the entries are handled (so a bridge
    /// that dies handling them has still counted it): each entry's count so far.
    fn count_deliveries(
        &self,
        consumer: &str,
        stream: &str,
        entry_ids: &[String],
    ) -> impl Future<Output = StoreResult<HashMap<String, u32>>> + Send;

    /// The delivery counts of those of `entry_ids` counted before (the others are absent).
    fn deliveries(
        &self,
        consumer: &str,
        stream: &str,
        entry_ids: &[String],
    ) -> impl Future<Output = StoreResult<HashMap<String, u32>>> + Send;

    /// Forgets counts not raised for `age` (their entries were acknowledged some other way).
    fn forget_deliveries(
        &self,
        consumer: &str,
        age: std::time::Duration,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

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
            fields: Text::from_static("{}"),
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
