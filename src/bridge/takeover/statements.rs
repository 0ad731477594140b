//! The takeover's statements in a dialect's SQL: the reference schema's, or `[bridge.sql]`'s,
//! checked against the catalog, and the parameters each is bound with.

use mysql_async::prelude::Queryable;

use super::contract::{DELIVERIES_COLUMNS, EXISTING_COLUMNS, TakeoverStatement, inbox_columns, poison_columns};
use super::outcome::{InboxEvent, PoisonRecord};
use crate::bridge::config::BridgeConfig;
use crate::sql::params::{self, NamedSql, ParseError, Placeholder};
use crate::store::error::{PrepareError, StatementError};
use crate::store::mysql::errors as my;
use crate::store::param::Param;
use crate::store::postgres::errors as pg;

/// A batch cut into runs of consecutive events whose payloads add up to at most `max_bytes`
/// (an event larger than that is a run of its own). A statement carrying a run is then never
/// much larger than `max_bytes`, however large the batch: the client library copies a
/// statement's parameters into its send buffer, so one statement for a batch of large
/// payloads would cost the batch's size twice more in memory.
pub(crate) fn runs_by_payload(events: &[InboxEvent], max_bytes: usize) -> Vec<&[InboxEvent]> {
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
pub(crate) enum Sql {
    /// The dialect's own statement for the reference schema, bound positionally by the dialect
    /// (on Postgres: a whole batch in one statement).
    Reference(String),
    /// Named parameters ([`event_param`], [`poison_param`]), run once per event or record: an
    /// override from `[bridge.sql]`, or a dialect's default written that way.
    Named(NamedSql),
}

impl Sql {
    /// `text` with named parameters, rewritten to the dialect's placeholders.
    pub(crate) fn named(text: &str, style: Placeholder) -> Result<Self, ParseError> {
        params::rewrite(text, style).map(Sql::Named)
    }

    pub(crate) fn text(&self) -> &str {
        match self {
            Sql::Reference(text) => text,
            Sql::Named(named) => &named.sql,
        }
    }
}

/// A takeover's tables and statements, in a dialect's SQL.
pub(crate) struct TakeoverStatements {
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

/// A connection checking a takeover's tables and statements, in its dialect (the SQL is here).
pub(crate) enum Catalog<'a> {
    Postgres(&'a deadpool_postgres::Client),
    Mysql(&'a mut mysql_async::Conn),
}

impl Catalog<'_> {
    /// The columns of `table` (none if it does not exist), or the driver's message.
    async fn columns(&mut self, table: &str) -> Result<Vec<String>, String> {
        match self {
            Catalog::Postgres(client) => {
                let sql = "SELECT attname::text FROM pg_attribute
                           WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped";
                let rows = client.query(sql, &[&table]).await.map_err(|e| pg::describe(&e))?;
                Ok(rows.iter().map(|r| r.get(0)).collect())
            }
            Catalog::Mysql(conn) => {
                let (schema, name) = table.split_once('.').map_or((None, table), |(s, n)| (Some(s), n));
                let sql = "SELECT COLUMN_NAME FROM information_schema.COLUMNS
                           WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?";
                conn.exec(sql, (schema, name)).await.map_err(|e| my::describe(&e))
            }
        }
    }

    /// Prepares `sql`: its result columns, or the database's refusal as a problem naming
    /// `context`; `Err` when the connection went away meanwhile.
    async fn prepare(&mut self, sql: &str, context: &str) -> Result<Result<Vec<String>, String>, PrepareError> {
        match self {
            Catalog::Postgres(client) => match client.prepare(sql).await {
                Ok(prepared) => Ok(Ok(prepared.columns().iter().map(|c| c.name().to_owned()).collect())),
                Err(e) => pg::prepare_refusal(context, e).map(Err),
            },
            Catalog::Mysql(conn) => match conn.prep(sql).await {
                Ok(prepared) => Ok(Ok(prepared.columns().iter().map(|c| c.name_str().into_owned()).collect())),
                Err(e) => my::prepare_refusal(context, e).map(Err),
            },
        }
    }
}

/// The three statements a dialect writes for the reference schema, given each table with the
/// column list of the insert into it (in [`inbox_columns`] / [`poison_columns`] order).
pub(crate) type Reference = fn(Columns<'_>, Columns<'_>) -> [Sql; 3];

impl TakeoverStatements {
    /// The bridge's statements: each override from `[bridge.sql]` (named parameters), the
    /// dialect's reference statements for the rest. A custom insert means a table of another
    /// layout, so the reference `existing` is not used with it.
    pub(crate) fn new(bridge: &BridgeConfig, style: Placeholder, reference: Reference) -> Result<Self, StatementError> {
        let (table, poison_table) = (bridge.table.as_str(), bridge.poison_table.as_str());
        let (columns, poison_columns) = (inbox_columns().join(", "), poison_columns().join(", "));
        let [insert, existing, poison] =
            reference(Columns { table, list: &columns }, Columns { table: poison_table, list: &poison_columns });
        let given = |statement: TakeoverStatement| -> Result<Option<Sql>, StatementError> {
            let context = || format!("sql.{}", statement.name());
            let named = |text| Sql::named(text, style).map_err(|e| StatementError::new(context(), e));
            bridge.sql.get(statement).map(named).transpose()
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
    pub(crate) async fn check(&self, catalog: &mut Catalog<'_>) -> Result<(), PrepareError> {
        let mut problems = Vec::new();
        let tables = [
            (&self.table, inbox_columns(), self.reference_insert),
            (&self.poison_table, poison_columns(), self.reference_poison),
            (&self.deliveries_table, DELIVERIES_COLUMNS.to_vec(), true),
        ];
        for (table, required, check) in tables {
            if check {
                let present = catalog
                    .columns(table)
                    .await
                    .map_err(|e| PrepareError::Unreachable(format!("reading the catalog: {e}")))?;
                let present = (!present.is_empty()).then_some(present.as_slice());
                problems.extend(missing_columns(table, &required, present));
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
            match catalog.prepare(sql.text(), &context).await? {
                Err(problem) => problems.push(problem),
                Ok(columns) if statement == TakeoverStatement::Existing => {
                    let found = |c: &&str| columns.iter().any(|p| p.eq_ignore_ascii_case(c));
                    if let Some(missing) = EXISTING_COLUMNS.iter().find(|c| !found(c)) {
                        problems.push(format!("{context}: result lacks required column {missing}"));
                    }
                }
                Ok(_) => {}
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(PrepareError::Invalid(problems)) }
    }
}

/// A named takeover statement's parameters for one event (`:fields.<name>`: an extra field).
pub(crate) fn event_param<'a>(consumer: &'a str, event: &'a InboxEvent) -> impl Fn(&str) -> Param + 'a {
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
pub(crate) fn poison_param<'a>(consumer: &'a str, record: &'a PoisonRecord) -> impl Fn(&str) -> Param + 'a {
    move |name| match name {
        "consumer" => Param::Text(consumer.to_owned()),
        "stream" => Param::Text(record.stream.clone()),
        "entry_id" => Param::Text(record.entry_id.clone()),
        "event_id" => record.event_id.clone().map_or(Param::Null, Param::Text),
        "reason" => Param::Text(record.reason.as_str().to_owned()),
        "detail" => Param::Text(crate::error::storable(&record.detail, super::contract::DETAIL_MAX_CHARS)),
        _ => Param::Json(record.fields.to_string()),
    }
}

/// A table and the column list of an insert into it (`a, b, c`).
#[derive(Clone, Copy)]
pub(crate) struct Columns<'a> {
    pub table: &'a str,
    pub list: &'a str,
}

/// What a table lacks of `required`, as a message naming the table and the columns; `None`
/// when nothing is missing. `present` is `None` when the table does not exist.
pub(crate) fn missing_columns(table: &str, required: &[&str], present: Option<&[String]>) -> Option<String> {
    let Some(present) = present else { return Some(format!("table {table} does not exist")) };
    let missing: Vec<&str> =
        required.iter().copied().filter(|c| !present.iter().any(|p| p.eq_ignore_ascii_case(c))).collect();
    (!missing.is_empty()).then(|| format!("table {table} lacks column(s) {}", missing.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Text;

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
