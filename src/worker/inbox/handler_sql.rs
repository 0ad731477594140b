//! A handler statement as configured and the values it is bound with: per row (`:event_id`,
//! `:payload.actor`, …) or for a whole batch (`:event_ids`, `:payloads`, … as arrays, one
//! element per event, for `unnest(...)`). The worker binds claimed rows; the bridge, applying at
//! take-over, binds the events it is inserting. Values are always bound, never interpolated.

use std::borrow::Cow;
use std::cell::OnceCell;

use super::rows::{BindValue, BoundStatement, InboxRow};
use crate::event::InboxEvent;
use crate::sql::params::{self, Placeholder};

/// Event fields a per-row statement may name besides `payload.<path>`, `headers.<path>` and
/// `fields.<name>`.
pub(crate) const ROW_PARAMS: &[&str] =
    &["event_id", "event_type", "owner", "aggregate_type", "aggregate_id", "payload", "headers"];

/// What a batch statement may name: each an array with one element per event of the batch, in
/// the same order (payloads, headers and fields as JSON objects).
pub(crate) const BATCH_PARAMS: &[&str] = &[
    "event_ids",
    "event_types",
    "owners",
    "aggregate_types",
    "aggregate_ids",
    "payloads",
    "headers_list",
    "fields_list",
];

/// Whether a statement runs once per event or once per batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Row,
    Batch,
}

/// One handler statement in the dialect's placeholders, with the names it binds.
#[derive(Debug, Clone)]
pub struct HandlerSql {
    pub sql: String,
    names: Vec<String>,
    pub form: Form,
}

/// A statement that cannot be a handler's; `Display` says why.
#[derive(Debug, thiserror::Error)]
pub enum HandlerSqlError {
    #[error(transparent)]
    Parse(#[from] params::ParseError),
    #[error(
        "unknown parameter :{0} (per event: {row}, or payload.<field> / headers.<field> / fields.<name>; per batch: {batch})",
        row = list(ROW_PARAMS), batch = list(BATCH_PARAMS)
    )]
    UnknownParameter(String),
    #[error("mixes per-event parameters (:{row}) with per-batch arrays (:{batch}); write it in one form")]
    Mixed { row: String, batch: String },
    #[error("per-batch arrays (:{0}) need a database with array parameters (Postgres); write it per event")]
    NoArrays(String),
}

fn list(names: &[&str]) -> String {
    names.iter().map(|p| format!(":{p}")).collect::<Vec<_>>().join(", ")
}

/// A row whose statements cannot be bound: a payload field is missing. Deterministic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingField(pub String);

impl HandlerSql {
    /// Rewrites `text` for the dialect and checks every parameter name and the statement's form.
    pub fn parse(text: &str, style: Placeholder) -> Result<Self, HandlerSqlError> {
        let named = params::rewrite(text, style)?;
        if let Some(bad) = named.names.iter().find(|n| !row_param(n) && !BATCH_PARAMS.contains(&n.as_str())) {
            return Err(HandlerSqlError::UnknownParameter(bad.clone()));
        }
        let row = named.names.iter().find(|n| row_param(n));
        let batch = named.names.iter().find(|n| BATCH_PARAMS.contains(&n.as_str()));
        let form = match (row, batch) {
            (Some(row), Some(batch)) => return Err(HandlerSqlError::Mixed { row: row.clone(), batch: batch.clone() }),
            (_, Some(batch)) if style != Placeholder::Numbered => return Err(HandlerSqlError::NoArrays(batch.clone())),
            (_, Some(_)) => Form::Batch,
            _ => Form::Row,
        };
        Ok(Self { sql: named.sql, names: named.names, form })
    }

    /// The statement bound for one event (a batch statement: arrays of one element, merged
    /// with its neighbours' by `BoundStatement::merge` where the batch runs it once).
    pub fn bind<'a>(&'a self, index: usize, input: &impl HandlerInput) -> Result<BoundStatement<'a>, MissingField> {
        let values = self.names.iter().map(|name| value(name, input)).collect::<Result<_, _>>()?;
        Ok(BoundStatement { index, sql: &self.sql, values, batch: self.form == Form::Batch })
    }
}

fn row_param(name: &str) -> bool {
    ROW_PARAMS.contains(&name) || ["payload.", "headers.", "fields."].iter().any(|root| name.starts_with(root))
}

/// What a handler statement's values come from: a claimed inbox row or an event being taken over.
pub trait HandlerInput {
    fn event_id(&self) -> &str;
    fn event_type(&self) -> &str;
    fn owner(&self) -> Option<&str>;
    fn aggregate_type(&self) -> Option<&str>;
    fn aggregate_id(&self) -> Option<&str>;
    /// JSON text of the payload, the headers object and the extra fields object.
    fn payload_json(&self) -> Cow<'_, str>;
    fn headers_json(&self) -> Cow<'_, str>;
    fn fields_json(&self) -> Cow<'_, str>;
    /// `payload.<path>` / `headers.<path>` (dots separate keys) or `fields.<name>` (taken whole).
    fn lookup(&self, root: &str, path: &str) -> Option<serde_json::Value>;
}

fn pointer(value: &serde_json::Value, path: &str) -> Option<serde_json::Value> {
    value.pointer(&format!("/{}", path.replace('.', "/"))).cloned()
}

impl HandlerInput for InboxRow {
    fn event_id(&self) -> &str {
        &self.event_id
    }
    fn event_type(&self) -> &str {
        &self.event_type
    }
    fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
    fn aggregate_type(&self) -> Option<&str> {
        self.aggregate_type.as_deref()
    }
    fn aggregate_id(&self) -> Option<&str> {
        self.aggregate_id.as_deref()
    }
    fn payload_json(&self) -> Cow<'_, str> {
        Cow::Owned(self.payload.to_string())
    }
    fn headers_json(&self) -> Cow<'_, str> {
        Cow::Owned(self.headers.to_string())
    }
    fn fields_json(&self) -> Cow<'_, str> {
        Cow::Owned(serde_json::Value::Object(self.fields.clone()).to_string())
    }
    fn lookup(&self, root: &str, path: &str) -> Option<serde_json::Value> {
        match root {
            "fields" => self.fields.get(path).cloned(),
            "payload" => pointer(&self.payload, path),
            _ => pointer(&self.headers, path),
        }
    }
}

/// An event the bridge is taking over, its JSON parsed only if a statement looks inside it.
pub struct EventInput<'a> {
    event: &'a InboxEvent,
    payload: OnceCell<serde_json::Value>,
    headers: OnceCell<serde_json::Value>,
    fields: OnceCell<serde_json::Value>,
}

impl<'a> EventInput<'a> {
    pub fn new(event: &'a InboxEvent) -> Self {
        Self { event, payload: OnceCell::new(), headers: OnceCell::new(), fields: OnceCell::new() }
    }
}

fn parsed<'c>(cell: &'c OnceCell<serde_json::Value>, text: &str) -> &'c serde_json::Value {
    cell.get_or_init(|| serde_json::from_str(text).unwrap_or(serde_json::Value::Null))
}

impl HandlerInput for EventInput<'_> {
    fn event_id(&self) -> &str {
        &self.event.event_id
    }
    fn event_type(&self) -> &str {
        &self.event.event_type
    }
    fn owner(&self) -> Option<&str> {
        self.event.owner.as_deref()
    }
    fn aggregate_type(&self) -> Option<&str> {
        self.event.aggregate_type.as_deref()
    }
    fn aggregate_id(&self) -> Option<&str> {
        self.event.aggregate_id.as_deref()
    }
    fn payload_json(&self) -> Cow<'_, str> {
        Cow::Borrowed(self.event.payload.as_str())
    }
    fn headers_json(&self) -> Cow<'_, str> {
        Cow::Borrowed(self.event.headers.as_str())
    }
    fn fields_json(&self) -> Cow<'_, str> {
        Cow::Borrowed(self.event.fields.as_str())
    }
    fn lookup(&self, root: &str, path: &str) -> Option<serde_json::Value> {
        match root {
            "fields" => parsed(&self.fields, self.event.fields.as_str()).get(path).cloned(),
            "payload" => pointer(parsed(&self.payload, self.event.payload.as_str()), path),
            _ => pointer(parsed(&self.headers, self.event.headers.as_str()), path),
        }
    }
}

fn text(value: Option<&str>) -> BindValue {
    value.map_or(BindValue::Null, |v| BindValue::Text(v.to_owned()))
}

fn one(value: Option<&str>) -> BindValue {
    BindValue::Texts(vec![value.map(str::to_owned)])
}

fn value(name: &str, input: &impl HandlerInput) -> Result<BindValue, MissingField> {
    Ok(match name {
        "event_id" => text(Some(input.event_id())),
        "event_type" => text(Some(input.event_type())),
        "owner" => text(input.owner()),
        "aggregate_type" => text(input.aggregate_type()),
        "aggregate_id" => text(input.aggregate_id()),
        "payload" => BindValue::Json(input.payload_json().into_owned()),
        "headers" => BindValue::Json(input.headers_json().into_owned()),
        "event_ids" => one(Some(input.event_id())),
        "event_types" => one(Some(input.event_type())),
        "owners" => one(input.owner()),
        "aggregate_types" => one(input.aggregate_type()),
        "aggregate_ids" => one(input.aggregate_id()),
        "payloads" => BindValue::Jsons(vec![input.payload_json().into_owned()]),
        "headers_list" => BindValue::Jsons(vec![input.headers_json().into_owned()]),
        "fields_list" => BindValue::Jsons(vec![input.fields_json().into_owned()]),
        _ => {
            let (root, path) = name.split_once('.').unwrap_or((name, ""));
            match input.lookup(root, path) {
                None => return Err(MissingField(name.to_owned())),
                Some(serde_json::Value::Null) => BindValue::Null,
                Some(serde_json::Value::String(s)) => BindValue::Text(s),
                Some(v @ (serde_json::Value::Object(_) | serde_json::Value::Array(_))) => {
                    BindValue::Json(v.to_string())
                }
                Some(v) => BindValue::Text(v.to_string()),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Text;

    fn row() -> InboxRow {
        InboxRow {
            id: "1".into(),
            token: 1,
            event_id: "e-1".into(),
            event_type: "user.changed".into(),
            owner: Some("auth".into()),
            aggregate_type: None,
            aggregate_id: None,
            payload: serde_json::json!({"actor": {"id": "u-7"}, "n": 3, "tags": ["a"], "gone": null}),
            headers: serde_json::json!({"traceparent": "00-abc"}),
            fields: serde_json::json!({"aggregateVersion": "3"}).as_object().cloned().unwrap_or_default(),
            attempts: 0,
            expired_leases: 0,
            reclaimed: false,
        }
    }

    fn event() -> InboxEvent {
        let text = |s: &str| Text::new(bytes::Bytes::from(s.to_owned())).unwrap();
        InboxEvent {
            event_id: "e-1".into(),
            event_type: "user.changed".into(),
            owner: Some("auth".into()),
            aggregate_type: None,
            aggregate_id: None,
            payload: text(r#"{"actor":{"id":"u-7"},"n":3,"tags":["a"],"gone":null}"#),
            headers: text(r#"{"traceparent":"00-abc"}"#),
            fields: text(r#"{"aggregateVersion":"3"}"#),
            content_hash: String::new(),
            stream: "s".into(),
            entry_id: "0-1".into(),
            ignored: false,
        }
    }

    #[test]
    fn payload_paths_bind_typed_values_from_a_row_and_from_an_event_alike() {
        let (r, e) = (row(), event());
        let input = EventInput::new(&e);
        for (name, expected) in [
            ("payload.actor.id", BindValue::Text("u-7".into())),
            ("payload.n", BindValue::Text("3".into())),
            ("payload.tags", BindValue::Json("[\"a\"]".into())),
            ("payload.gone", BindValue::Null),
            ("headers.traceparent", BindValue::Text("00-abc".into())),
            ("aggregate_id", BindValue::Null),
            ("fields.aggregateVersion", BindValue::Text("3".into())),
            ("owners", BindValue::Texts(vec![Some("auth".into())])),
            ("aggregate_ids", BindValue::Texts(vec![None])),
        ] {
            assert_eq!(value(name, &r).unwrap(), expected, "{name} of a row");
            assert_eq!(value(name, &input).unwrap(), expected, "{name} of an event");
        }
        assert_eq!(value("fields.missing", &r).unwrap_err(), MissingField("fields.missing".into()));
        assert_eq!(value("payload.actor.name", &input).unwrap_err(), MissingField("payload.actor.name".into()));
    }

    #[test]
    fn a_statement_is_written_in_one_form_and_batch_arrays_need_postgres() {
        let batch = "INSERT INTO t SELECT * FROM unnest(:event_ids::text[], :payloads::jsonb[])";
        assert_eq!(HandlerSql::parse(batch, Placeholder::Numbered).unwrap().form, Form::Batch);
        assert_eq!(
            HandlerSql::parse("INSERT INTO t VALUES (:event_id)", Placeholder::Numbered).unwrap().form,
            Form::Row
        );
        let mixed = HandlerSql::parse("INSERT INTO t SELECT :event_id, unnest(:payloads)", Placeholder::Numbered);
        assert!(matches!(mixed, Err(HandlerSqlError::Mixed { .. })), "{mixed:?}");
        let mysql = HandlerSql::parse(batch, Placeholder::Positional).unwrap_err().to_string();
        assert!(mysql.contains(":event_ids") && mysql.contains("Postgres"), "{mysql}");
        let unknown = HandlerSql::parse("SELECT :payload_ids", Placeholder::Numbered).unwrap_err().to_string();
        assert!(unknown.contains(":payload_ids") && unknown.contains(":event_ids"), "{unknown}");
    }

    #[test]
    fn batch_statements_merge_into_one_array_per_parameter_in_event_order() {
        let sql =
            HandlerSql::parse("SELECT unnest(:event_ids::text[], :payloads::jsonb[])", Placeholder::Numbered).unwrap();
        let (a, mut b) = (row(), row());
        b.event_id = "e-2".into();
        let mut merged = sql.bind(0, &a).unwrap();
        merged.merge(sql.bind(0, &b).unwrap());
        assert_eq!(merged.values[0], BindValue::Texts(vec![Some("e-1".into()), Some("e-2".into())]));
        let BindValue::Jsons(payloads) = &merged.values[1] else { panic!("{:?}", merged.values[1]) };
        assert_eq!(payloads.len(), 2);
    }
}
