//! Handlers as configured: which one serves an event type, and the values its statements are
//! bound with for a row. Values are always bound, never interpolated into SQL text.

use crate::config::type_matches;
use crate::config::{HandlerConfig, WorkerConfig};
use crate::sql::params::{self, Placeholder};
use crate::store::inbox::{BindValue, BoundStatement, InboxRow};

use super::http::HttpHandler;

/// Event fields a statement may name besides `payload.<path>`, `headers.<path>` and `fields.<name>`.
const EVENT_PARAMS: &[&str] =
    &["event_id", "event_type", "owner", "aggregate_type", "aggregate_id", "payload", "headers"];

pub enum Effect {
    Sql(Vec<Statement>),
    Http(Box<HttpHandler>),
}

pub struct Statement {
    pub sql: String,
    names: Vec<String>,
}

pub struct Handler {
    event_types: Vec<String>,
    /// The `handler` label of its metrics: configured, or its event type patterns. Bounded by
    /// the configuration, whatever types the producers write.
    pub label: String,
    pub effect: Effect,
}

/// A handler the configuration describes but handoff cannot build; each names its key.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error("{key}: {error}")]
    Sql { key: String, error: crate::sql::params::ParseError },
    #[error(
        "{key}: unknown parameter :{name} (use {}, or payload.<field> / headers.<field> / fields.<name>)",
        EVENT_PARAMS.iter().map(|p| format!(":{p}")).collect::<Vec<_>>().join(", ")
    )]
    UnknownParameter { key: String, name: String },
    #[error(transparent)]
    Http(#[from] crate::tls::https::EndpointError),
    #[error("{path}: set exactly one of sql, http")]
    NotOne { path: String },
}

/// A row whose statements cannot be bound: a payload field is missing. Deterministic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingField(pub String);

impl Handler {
    /// Rewrites the statements for the dialect and checks every parameter name.
    pub fn build(
        worker: &WorkerConfig,
        index: usize,
        config: &HandlerConfig,
        style: Placeholder,
    ) -> Result<Self, HandlerError> {
        let path = format!("worker `{}` handler[{index}]", worker.name);
        let effect = match (&config.http, config.sql.is_empty()) {
            (Some(http), true) => Effect::Http(Box::new(HttpHandler::new(http, &format!("{path}.http"))?)),
            (None, false) => {
                let statements = config
                    .sql
                    .iter()
                    .enumerate()
                    .map(|(i, sql)| {
                        let key = || format!("{path}.sql[{i}]");
                        let named =
                            params::rewrite(sql, style).map_err(|e| HandlerError::Sql { key: key(), error: e })?;
                        if let Some(bad) = named.names.iter().find(|n| !param_known(n)) {
                            return Err(HandlerError::UnknownParameter { key: key(), name: bad.clone() });
                        }
                        Ok(Statement { sql: named.sql, names: named.names })
                    })
                    .collect::<Result<_, HandlerError>>()?;
                Effect::Sql(statements)
            }
            _ => return Err(HandlerError::NotOne { path }),
        };
        let label = config.name.clone().unwrap_or_else(|| config.event_types.join(","));
        Ok(Self { event_types: config.event_types.clone(), label, effect })
    }

    pub fn serves(&self, event_type: &str) -> bool {
        self.event_types.iter().any(|pattern| type_matches(pattern, event_type))
    }

    /// The handler's SQL texts (for `check`), with a label each.
    pub fn sql_texts(&self) -> Vec<&str> {
        match &self.effect {
            Effect::Sql(statements) => statements.iter().map(|s| s.sql.as_str()).collect(),
            Effect::Http(_) => Vec::new(),
        }
    }
}

impl Statement {
    pub fn bind<'a>(&'a self, index: usize, row: &InboxRow) -> Result<BoundStatement<'a>, MissingField> {
        let values = self.names.iter().map(|name| value(name, row)).collect::<Result<_, _>>()?;
        Ok(BoundStatement { index, sql: &self.sql, values })
    }
}

fn param_known(name: &str) -> bool {
    EVENT_PARAMS.contains(&name) || ["payload.", "headers.", "fields."].iter().any(|root| name.starts_with(root))
}

fn text(value: &Option<String>) -> BindValue {
    value.clone().map_or(BindValue::Null, BindValue::Text)
}

fn value(name: &str, row: &InboxRow) -> Result<BindValue, MissingField> {
    Ok(match name {
        "event_id" => BindValue::Text(row.event_id.clone()),
        "event_type" => BindValue::Text(row.event_type.clone()),
        "owner" => text(&row.owner),
        "aggregate_type" => text(&row.aggregate_type),
        "aggregate_id" => text(&row.aggregate_id),
        "payload" => BindValue::Json(row.payload.to_string()),
        "headers" => BindValue::Json(row.headers.to_string()),
        _ => {
            let (root, path) = name.split_once('.').unwrap_or((name, ""));
            let found = match root {
                // A field's name is taken whole (`fields.a.b` is the field named `a.b`).
                "fields" => row.fields.get(path),
                "payload" => row.payload.pointer(&format!("/{}", path.replace('.', "/"))),
                _ => row.headers.pointer(&format!("/{}", path.replace('.', "/"))),
            };
            match found {
                None => return Err(MissingField(name.to_owned())),
                Some(serde_json::Value::Null) => BindValue::Null,
                Some(serde_json::Value::String(s)) => BindValue::Text(s.clone()),
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

    #[test]
    fn payload_paths_bind_typed_values() {
        let r = row();
        assert_eq!(value("payload.actor.id", &r).unwrap(), BindValue::Text("u-7".into()));
        assert_eq!(value("payload.n", &r).unwrap(), BindValue::Text("3".into()));
        assert_eq!(value("payload.tags", &r).unwrap(), BindValue::Json("[\"a\"]".into()));
        assert_eq!(value("payload.gone", &r).unwrap(), BindValue::Null);
        assert_eq!(value("headers.traceparent", &r).unwrap(), BindValue::Text("00-abc".into()));
        assert_eq!(value("aggregate_id", &r).unwrap(), BindValue::Null);
        assert_eq!(value("fields.aggregateVersion", &r).unwrap(), BindValue::Text("3".into()));
        assert_eq!(value("fields.missing", &r).unwrap_err(), MissingField("fields.missing".into()));
    }

    #[test]
    fn a_missing_payload_field_is_named() {
        assert_eq!(value("payload.actor.name", &row()).unwrap_err(), MissingField("payload.actor.name".into()));
    }
}
