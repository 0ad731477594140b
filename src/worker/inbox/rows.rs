//! The rows and outcomes the worker and its inbox speak in: a claimed row, a handler's bound
//! statements, what applying them came to, the inbox's gauges and counts.

use super::contract::{CLAIM_COLUMNS, OPTIONAL_CLAIM_COLUMNS};
use crate::store::error::{StoreError, StoreResult};
use crate::store::rows::TextRow;
use crate::worker::config::{HandlerErrors, HandlerVerdict};

/// A claimed inbox row for the worker.
#[derive(Debug, Clone)]
pub struct InboxRow {
    /// The row's id as text, whatever its type (passed back as `:id` / `:ids`).
    pub id: String,
    pub token: i64,
    pub event_id: String,
    pub event_type: String,
    pub owner: Option<String>,
    pub aggregate_type: Option<String>,
    pub aggregate_id: Option<String>,
    pub payload: serde_json::Value,
    pub headers: serde_json::Value,
    /// The entry's fields beyond the mapped ones (`:fields.<name>`): the `fields` column's keys
    /// and every claim column outside the contract.
    pub fields: serde_json::Map<String, serde_json::Value>,
    pub attempts: u32,
    pub expired_leases: u32,
    pub reclaimed: bool,
}

impl InboxRow {
    /// A claim result row, read by column name (the claim's result contract).
    pub(crate) fn from_text(row: &TextRow) -> StoreResult<Self> {
        let get = |name: &str| row.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.clone());
        let required = |name: &str| {
            get(name).ok_or_else(|| StoreError::Contract(format!("worker sql.claim returned NULL or no {name}")))
        };
        let int = |name: &str| -> StoreResult<i64> {
            let text = required(name)?;
            text.trim().parse::<i64>().map_err(|_| {
                StoreError::Contract(format!("worker sql.claim: column {name} is `{text}`, not an integer"))
            })
        };
        let count = |name: &str| int(name).map(|n| n.clamp(0, i64::from(u32::MAX)) as u32);
        // A payload that is not JSON is kept as a string: a handler that reads a field of it
        // finds none, and the row goes DEAD by itself instead of stopping the claim.
        let json =
            |text: Option<String>| text.map(|t| serde_json::from_str(&t).unwrap_or(serde_json::Value::String(t)));
        let mut fields = match json(get("fields")) {
            Some(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        for (name, value) in row {
            if !CLAIM_COLUMNS.contains(&name.as_str()) && !OPTIONAL_CLAIM_COLUMNS.contains(&name.as_str()) {
                fields.insert(name.clone(), value.clone().map_or(serde_json::Value::Null, serde_json::Value::String));
            }
        }
        Ok(Self {
            id: required("id")?,
            token: int("token")?,
            event_id: required("event_id")?,
            event_type: required("event_type")?,
            owner: get("owner"),
            aggregate_type: get("aggregate_type"),
            aggregate_id: get("aggregate_id"),
            payload: json(get("payload")).unwrap_or(serde_json::Value::Null),
            headers: json(get("headers")).filter(serde_json::Value::is_object).unwrap_or_else(|| serde_json::json!({})),
            fields,
            attempts: count("attempts")?,
            expired_leases: count("expired_leases")?,
            reclaimed: get("reclaimed").is_some_and(|v| matches!(v.as_str(), "true" | "t" | "1")),
        })
    }

    /// The row as (id, token), the way renew and release take it.
    pub(crate) fn held(&self) -> (String, i64) {
        (self.id.clone(), self.token)
    }
}

/// Sampled worker gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct InboxStats {
    pub dead: i64,
    pub pending: i64,
    /// Seconds the oldest PROCESSING lease has been held; 0 if none.
    pub oldest_lease_age: f64,
    /// Seconds the oldest row waiting after a failure has waited since it failed; 0 if none.
    pub oldest_retry_age: f64,
}

/// A consumer's inbox as `handoff status` shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct InboxCounts {
    pub pending: i64,
    pub processing: i64,
    pub dead: i64,
    /// Seconds since the oldest row not yet done (pending or processing) was received; 0 if none.
    pub oldest_age_seconds: f64,
}

/// A value bound to a handler statement's parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum BindValue {
    Null,
    Text(String),
    /// JSON text, for json / jsonb parameters (and as text elsewhere).
    Json(String),
    /// A batch statement's array of texts, one element per event (NULL where the event has none).
    Texts(Vec<Option<String>>),
    /// A batch statement's array of JSON texts, one element per event.
    Jsons(Vec<String>),
}

/// A handler statement with its values for one row.
#[derive(Debug, Clone)]
pub struct BoundStatement<'a> {
    /// Index of the statement in the handler's list (for error messages).
    pub index: usize,
    pub sql: &'a str,
    pub values: Vec<BindValue>,
    /// A batch statement: bound here for one event (arrays of one element), run once for the
    /// batch with its neighbours' values merged in (`merge`).
    pub batch: bool,
}

impl BoundStatement<'_> {
    /// Appends `other`'s array elements (the same batch statement bound for the next event).
    pub(crate) fn merge(&mut self, other: BoundStatement<'_>) {
        for (mine, theirs) in self.values.iter_mut().zip(other.values) {
            match (mine, theirs) {
                (BindValue::Texts(a), BindValue::Texts(b)) => a.extend(b),
                (BindValue::Jsons(a), BindValue::Jsons(b)) => a.extend(b),
                _ => {}
            }
        }
    }
}

/// Statements as a batch runs them: borrowed as bound, or a batch statement with its
/// neighbours' values merged in.
pub(crate) type Merged<'a> = Vec<std::borrow::Cow<'a, BoundStatement<'a>>>;

/// The statements of `items` as the batch runs them: per-event statements one by one, in order
/// (borrowed: a batch of them copies no value); each batch statement once, where its first event
/// is, with every event's values merged.
pub(crate) fn merged<'a>(statements: impl IntoIterator<Item = &'a BoundStatement<'a>>) -> Merged<'a> {
    use std::borrow::Cow;
    let mut out: Merged<'a> = Vec::new();
    let mut first: std::collections::HashMap<(&str, usize), usize> = std::collections::HashMap::new();
    for statement in statements {
        if !statement.batch {
            out.push(Cow::Borrowed(statement));
            continue;
        }
        match first.get(&(statement.sql, statement.index)) {
            Some(&at) => out[at].to_mut().merge(statement.clone()),
            None => {
                first.insert((statement.sql, statement.index), out.len());
                out.push(Cow::Borrowed(statement));
            }
        }
    }
    out
}

/// What became of an attempt to apply a row's effect.
#[derive(Debug)]
pub enum Applied {
    /// Effect and PROCESSED committed together.
    Processed,
    /// Another worker owns the row now: the effect was rolled back.
    Fenced,
}

/// Why applying failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A handler statement failed for this row: `retry` (a foreign key whose parent has not
    /// arrived, a deadlock: an attempt, then again after the backoff) or not (the row's data
    /// can never be applied: DEAD at once), as `[worker.handler_errors]` and the dialect judge.
    /// Any other failure is an outage of the store.
    #[error("handler statement {index} failed for this row: {message}")]
    Handler { index: usize, message: String, retry: bool },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ApplyError {
    /// A handler statement's error: `errors` names codes to retry or to make DEAD; for the
    /// rest, the dialect's judgement (a refusal of the data: DEAD; anything else: an outage).
    pub(crate) fn from_handler(index: usize, error: StoreError, errors: &HandlerErrors) -> Self {
        let verdict = error.code().and_then(|code| errors.verdict(&code));
        let handler =
            |e: &StoreError, retry| ApplyError::Handler { index, message: crate::error::error_chain(e), retry };
        match (verdict, error) {
            (Some(verdict), e) => handler(&e, verdict == HandlerVerdict::Retry),
            (None, e @ StoreError::Rejected { .. }) => handler(&e, false),
            (None, e) => ApplyError::Store(e),
        }
    }
}
